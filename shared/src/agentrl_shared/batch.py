"""Collected rows -> TRL's generation->loss dict (trl-notes sections 3 and 16.8).

TRL splits whatever `_generate_and_score_completions` returns into exactly `steps_per_generation` micro-batches, so
the rows of a rollout are fitted to a fixed budget of `steps_per_generation * micro_batch_rows` rows: that bounds
memory per forward/backward and fixes the optimizer updates per rollout at `steps_per_generation /
gradient_accumulation_steps` (the paper's mini-batches; verl-agent `ppo_mini_batch_size`). Short rollouts are padded
with rows that carry zero loss (`row_padding="zero"`) or, as verl-agent's `adjust_batch` does, with duplicates of
random real rows (`"duplicate"`); long ones are subsampled uniformly and the drop is logged.
"""

import random

import torch

from .rollout import Row


PADDING_MODES = ("zero", "duplicate")


def select_rows(num_rows: int, budget: int, padding: str, rng: random.Random) -> tuple[list[int], list[bool]]:
    """Indices of the rows that fill a `budget`-row batch and, per slot, whether it carries loss.

    Over budget: a uniform random subset (kept in rollout order). Under budget: every row, then padding slots that
    repeat random rows; their loss is zeroed for `padding="zero"` and kept for `"duplicate"`.
    """
    if padding not in PADDING_MODES:
        raise ValueError(f"Unknown row padding {padding!r}; valid: {', '.join(PADDING_MODES)}.")
    if num_rows == 0:
        raise ValueError("No rows to train on: every episode failed before its first turn.")
    if num_rows >= budget:
        return sorted(rng.sample(range(num_rows), budget)), [True] * budget
    extra = [rng.randrange(num_rows) for _ in range(budget - num_rows)]
    return list(range(num_rows)) + extra, [True] * num_rows + [padding == "duplicate"] * len(extra)


def rows_to_batch(
    rows: list[Row],
    advantages: torch.Tensor,
    budget: int,
    pad_token_id: int,
    rng: random.Random,
    padding: str = "zero",
    device: torch.device | str = "cpu",
) -> dict:
    """Left-padded prompts, right-padded completions, masks and advantages for `budget` rows.

    Args:
        rows (`list[Row]`): the rollout's rows; rows of failed episodes get a zero completion mask.
        advantages (`torch.Tensor`): (N,) per-row or (N, T_max) per-token advantages, aligned with `rows`.
        budget (`int`): rows in the returned batch (`steps_per_generation * micro_batch_rows`).

    Returns:
        `dict` with `prompt_ids`/`prompt_mask` (B, P), `completion_ids`/`completion_mask` (B, C), `advantages` (B,) or
        (B, C), `row_index` (B,) (index into `rows`, for package-specific per-row tensors), `loss_row` (B,) bool, and
        `rows_dropped` (int).
    """
    index, carries_loss = select_rows(len(rows), budget, padding, rng)
    chosen = [rows[i] for i in index]
    P = max(len(r.prompt_ids) for r in chosen)
    C = max(max(len(r.completion_ids) for r in chosen), 1)
    prompt_ids = torch.full((budget, P), pad_token_id, dtype=torch.long)  # (B, P) left-padded
    prompt_mask = torch.zeros((budget, P), dtype=torch.long)
    completion_ids = torch.full((budget, C), pad_token_id, dtype=torch.long)  # (B, C) right-padded
    completion_mask = torch.zeros((budget, C), dtype=torch.long)
    for b, (row, keep) in enumerate(zip(chosen, carries_loss, strict=True)):
        p, c = len(row.prompt_ids), len(row.completion_ids)
        prompt_ids[b, P - p :] = torch.tensor(row.prompt_ids)
        prompt_mask[b, P - p :] = 1
        if c:
            completion_ids[b, :c] = torch.tensor(row.completion_ids)
            completion_mask[b, :c] = int(keep and not row.failed)
    adv = advantages[torch.tensor(index)]
    if adv.dim() == 2:  # per-token advantages: fit to C columns
        adv = adv[:, :C] if adv.size(1) >= C else torch.nn.functional.pad(adv, (0, C - adv.size(1)))
    loss_row = completion_mask.any(dim=1)
    adv = adv * loss_row.view(-1, *([1] * (adv.dim() - 1)))  # padding and failed rows: advantage 0
    return {
        "prompt_ids": prompt_ids.to(device),
        "prompt_mask": prompt_mask.to(device),
        "completion_ids": completion_ids.to(device),
        "completion_mask": completion_mask.to(device),
        "advantages": adv.float().to(device),
        "row_index": torch.tensor(index, device=device),
        "loss_row": loss_row.to(device),
        "rows_dropped": max(len(rows) - budget, 0),
    }
