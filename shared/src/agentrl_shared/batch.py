"""One rollout's per-turn rows -> optimizer steps: every row used once, ranks in lock-step, global token weights.

verl-agent (langfengQ/verl-agent@796ed31, `verl/trainer/ppo/ray_trainer.py`) trains each rollout's rows as follows:
`_balance_batch` gives every data-parallel rank the same number of rows with similar token counts; each rank's rows
are cut into mini-batches of `ppo_mini_batch_size / world` rows (one optimizer step each, so a rollout makes
ceil(rows / mini-batch) steps, the last one partial) and micro-batches of `ppo_micro_batch_size_per_gpu` rows. Its
`adjust_batch` first duplicates random rows until the row count divides lcm(micro sizes) x world; those duplicates
enter the group statistics and the loss.

`plan_steps` keeps the same step structure without duplicates: rows are balanced across ranks by tokens (counts differ
by at most one) and kept in rollout order within each rank, cut into steps in that order as verl's update does
(`verl/workers/actor/dp_actor.py` `update_policy`: `batch.split(ppo_mini_batch_size)`, `actor.shuffle: False`; an `rng`
shuffles them first), the number of optimizer steps is ceil(max rows on a rank / rows per step), and every rank runs
the same number of micro-batches, a rank with fewer rows getting empty ones (a single row that carries no loss) at the
end. Given the rows' prompts, a step's rows are cut into micro-batches ordered by prompt length (as verl's
`use_dynamic_bsz` regroups a mini-batch's rows by length, `verl/utils/seqlen_balancing.py` `rearrange_micro_batches`):
a micro-batch pads every row to its longest, and a step's gradient is the sum over its micro-batches, so which
micro-batch holds a row changes only the float rounding. Every optimizer step's loss is then divided by the global
number of real loss tokens of that step's rows (`StepPlan.step_tokens`), so every real token of a step weighs the same
whatever rank or micro-batch holds it.
`rows_to_batch` pads one micro-batch to its own longest prompt and completion.
"""

import random
from dataclasses import dataclass

import torch


@dataclass
class StepPlan:
    """Which rows each rank trains on, in which micro-batch and optimizer step; computed identically on every rank.

    Args:
        ranks (`list[list[int]]`): global row indices per rank, in training order.
        micro_rows (`int`): rows per micro-batch (one forward/backward).
        micro_per_step (`int`): micro-batches per optimizer step (gradient accumulation).
        num_steps (`int`): optimizer steps of this rollout, the same on every rank.
        step_tokens (`list[int]`): real loss tokens of each step's rows over all ranks (the loss normaliser).
    """

    ranks: list[list[int]]
    micro_rows: int
    micro_per_step: int
    num_steps: int
    step_tokens: list[int]

    def micro_batches(self, rank: int) -> list[list[int]]:
        """`num_steps * micro_per_step` lists of global row indices for `rank`; trailing ones may be empty."""
        rows = self.ranks[rank]
        total = self.num_steps * self.micro_per_step
        return [rows[k * self.micro_rows : (k + 1) * self.micro_rows] for k in range(total)]

    def step_of_micro_batch(self, k: int) -> int:
        return k // self.micro_per_step

    def chunks(self, rank: int, rows_per_chunk: int, prompts: list[list[int]] | None = None) -> list[list[int]]:
        """`rank`'s rows cut into chunks of `rows_per_chunk` for the no-grad forwards (verl
        `log_prob_micro_batch_size_per_gpu`); every rank gets the same number of chunks (at least one), trailing ones
        may be empty, so that the forwards stay in lock-step under ZeRO-3. In training order, or with `prompts` (the
        prompt ids of every row, by global index) ordered by prompt length, then tokens: a no-grad forward gives
        each row its own log-probs whatever rows share its chunk, and a chunk pads every row to its longest one, so
        rows of one length go together (the first turns of a group, whose prompts are alike, apart from the longer
        later turns)."""
        count = max(1, max(-(-len(r) // rows_per_chunk) for r in self.ranks))
        rows = self.ranks[rank]
        if prompts is not None:
            rows = by_prompt_length(rows, prompts)
        return [rows[k * rows_per_chunk : (k + 1) * rows_per_chunk] for k in range(count)]


def by_prompt_length(rows: list[int], prompts: list[list[int]]) -> list[int]:
    """Row indices ordered by their prompt's length, then its tokens (rows with one prompt become neighbours)."""
    return sorted(rows, key=lambda i: (len(prompts[i]), prompts[i]))


def balance_rows(num_tokens: list[int], world: int) -> list[list[int]]:
    """Split rows over `world` ranks: equal counts (+-1) and balanced token sums (verl `_balance_batch`, which uses
    Karmarkar-Karp with equal sizes; here the longest-first greedy). Deterministic; each rank's rows in rollout order."""
    n = len(num_tokens)
    capacity = [n // world + (r < n % world) for r in range(world)]
    load, out = [0] * world, [[] for _ in range(world)]
    for i in sorted(range(n), key=lambda i: (-num_tokens[i], i)):
        r = min((r for r in range(world) if len(out[r]) < capacity[r]), key=lambda r: (load[r], r))
        out[r].append(i)
        load[r] += num_tokens[i]
    return [sorted(rows) for rows in out]


def plan_steps(
    num_tokens: list[int],
    loss_tokens: list[int],
    world: int,
    micro_rows: int,
    micro_per_step: int,
    rng: random.Random | None = None,
    prompts: list[list[int]] | None = None,
) -> StepPlan:
    """Plan one rollout's optimizer steps from every row's token count (prompt + completion) and loss-token count.

    With `rng` (seeded alike on every rank) each rank's rows are shuffled before they are cut into steps. With
    `prompts` (every row's prompt ids) each step's rows on a rank are ordered by prompt length, then tokens, before
    they are cut into micro-batches (module docstring); the rows of each step stay the same.

    Raises `ValueError` when no rank holds a row (every episode failed before its first turn); the inputs are the
    same on every rank, so every rank raises together.
    """
    if not num_tokens:
        raise ValueError("No rows to train on: every episode on every rank failed before its first turn.")
    ranks = balance_rows(num_tokens, world)
    if rng is not None:
        for rows in ranks:
            rng.shuffle(rows)
    rows_per_step = micro_rows * micro_per_step
    num_steps = -(-max(len(r) for r in ranks) // rows_per_step)
    if prompts is not None:  # each step's rows ordered by prompt length, for its micro-batches
        steps = [slice(j * rows_per_step, (j + 1) * rows_per_step) for j in range(num_steps)]
        ranks = [[i for step in steps for i in by_prompt_length(rows[step], prompts)] for rows in ranks]
    step_tokens = [
        sum(loss_tokens[i] for rows in ranks for i in rows[j * rows_per_step : (j + 1) * rows_per_step])
        for j in range(num_steps)
    ]
    return StepPlan(ranks, micro_rows, micro_per_step, num_steps, step_tokens)


def left_pad(seqs: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) ids and mask, left-padded to the longest sequence."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        if s:
            ids[b, width - len(s) :] = torch.tensor(s)
            mask[b, width - len(s) :] = 1
    return ids, mask


def rows_to_batch(
    prompts: list[list[int]],
    completions: list[list[int]],
    carries_loss: list[bool],
    advantages: list[float],
    pad_token_id: int,
    teacher_prompts: list[list[int]] | None = None,
) -> tuple[dict, dict]:
    """One micro-batch in TRL's loss-dict layout, padded to its own longest prompt and completion.

    An empty micro-batch (a rank with fewer rows than the step structure) becomes one pad-token row with no loss, so
    that every rank still runs the forward and backward (ZeRO-3 gathers parameters collectively).

    Returns:
        `(batch, info)`: `batch` has `prompt_ids`/`prompt_mask` (B, P) left-padded, `completion_ids`/
        `completion_mask` (B, C) right-padded (mask 0 on rows that carry no loss), `advantages` (B,), and
        `teacher_prompt_ids`/`teacher_prompt_mask` when `teacher_prompts` is given; `info` has `rows` (real rows)
        and `loss_tokens`.
    """
    rows = len(prompts)
    if rows == 0:
        prompts, completions, carries_loss, advantages = [[pad_token_id]], [[pad_token_id]], [False], [0.0]
        teacher_prompts = None if teacher_prompts is None else [[pad_token_id]]
    prompt_ids, prompt_mask = left_pad(prompts, pad_token_id)  # (B, P)
    C = max(max(len(c) for c in completions), 1)
    completion_ids = torch.full((len(completions), C), pad_token_id, dtype=torch.long)  # (B, C) right-padded
    completion_mask = torch.zeros((len(completions), C), dtype=torch.long)
    for b, (c, keep) in enumerate(zip(completions, carries_loss, strict=True)):
        if c:
            completion_ids[b, : len(c)] = torch.tensor(c)
            completion_mask[b, : len(c)] = int(keep)
    keep = torch.tensor(carries_loss, dtype=torch.float)
    batch = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(advantages, dtype=torch.float) * keep,  # (B,)
    }
    if teacher_prompts is not None:
        batch["teacher_prompt_ids"], batch["teacher_prompt_mask"] = left_pad(teacher_prompts, pad_token_id)
    return batch, {"rows": rows, "loss_tokens": int(completion_mask.sum())}


__all__ = ["StepPlan", "balance_rows", "left_pad", "plan_steps", "rows_to_batch"]
