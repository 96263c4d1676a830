"""`MultiTurnGRPOTrainer`: the one rollout-counted, multi-turn GRPO trainer the agentic paper packages subclass.

What TRL's `GRPOTrainer` is to TRL's experimental trainers, this is to SDAR, AgentOPSD, SkillRise and EnvACE: the
multi-rank machinery lives here once, and a paper trainer overrides only the hooks that carry its algorithm. It trains
on per-turn rows as verl-agent does (langfengQ/verl-agent@796ed31, `verl/trainer/ppo/ray_trainer.py`,
`gigpo/core_gigpo.py`): one rollout of `per_device_train_batch_size * steps_per_generation` episodes per rank (whole
groups of G), one batched generation per turn with the same number of generation calls on every rank, one row per
generation, GRPO row advantages per group, then every row of every rank trained exactly once in
ceil(rows / mini-batch) optimizer steps (`agentrl_shared.batch.plan_steps`), each step's loss divided by its global
real-token count. Training length, learning-rate schedule and checkpoints count rollouts (`num_rollouts`).
It holds no paper's algorithm.
"""

import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial

import torch
from accelerate.utils import is_peft_model
from datasets import Dataset
from torch import Tensor
from torch.utils.data import Sampler
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOTrainer

from .batch import StepPlan, plan_steps, rows_to_batch
from .cadence import GroupedTaskSampler, RolloutCadence, rollout_lr_factor
from .envs import make_env
from .envs.pool import EnvPool
from .generation import (
    SampledTokenLogps,
    matched_vllm_engine,
    sampling_overrides,
    sync_vllm_weights,
    trainer_generate_fn,
)
from .gigpo import discounted_step_returns, gigpo_advantages, step_group_counts, step_group_metrics, won_step_rewards
from .lora import adapters_disabled
from .prefix import shared_prefix_logps, shared_prefix_logps_and_entropies
from .rollout import (
    Episode,
    RolloutCollector,
    Row,
    collect_with_retries,
    episode_counts,
    equal_prompt_count,
    metrics_from_counts,
)
from .skills import student_prompt, teacher_prompt, teacher_skills


logger = logging.getLogger(__name__)


def environment_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: rewards come from the environment during
    the rollout, so TRL's reward path is never called."""
    return [None] * len(completions)


# --- the verl-agent GRPO baseline (every paper package starts from it) ---
def row_rewards(episode_returns: Tensor, is_action_valid: Tensor, *, penalty_coef: float) -> Tensor:
    """Per-row reward: the episode return on every row, minus `penalty_coef` on rows whose action was invalid
    (verl-agent `apply_invalid_action_penalty`).

    Args:
        episode_returns: (N,) the return of each row's episode (e.g. 10 * won on ALFWorld).
        is_action_valid: (N,) bool.
    """
    return episode_returns - penalty_coef * (~is_action_valid.bool()).to(episode_returns.dtype)  # (N,)


def grpo_row_advantages(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6) -> Tensor:
    """verl-agent GRPO advantage over rows: A = (r - mean_g) / (std_g + eps) within each group id.

    Statistics run over all rows that share a group id (every turn of every episode of a task), with the unbiased
    (Bessel-corrected) std, as verl's `compute_grpo_outcome_advantage` with `compute_mean_std_cross_steps=True`. A
    group with a single row uses mean 0 and std 1 (verl's convention), so its advantage is r / (1 + eps).

    Args:
        rewards: (N,) float per-row rewards.
        group_ids: (N,) int group ids.
    Returns:
        (N,) advantages.
    """
    advantages = torch.empty_like(rewards)
    for g in torch.unique(group_ids):
        idx = group_ids == g
        r = rewards[idx]  # (n_g,)
        if r.numel() == 1:
            mean, std = torch.zeros((), dtype=r.dtype), torch.ones((), dtype=r.dtype)
        else:
            mean, std = r.mean(), r.std(unbiased=True)
        advantages[idx] = (r - mean) / (std + eps)
    return advantages


def logp_gap_sums(trainer_logps: Tensor, sampling_logps: Tensor, mask: Tensor) -> Tensor:
    """The mismatch between the log-probs the generation engine returned for its sampled tokens and the trainer's
    log-probs of the same tokens, as sums over the tokens of `mask` (to be added over micro-batches and ranks).

    With d = log p_trainer - log p_sampler, k3 = exp(d) - d - 1 estimates KL(p_sampler || p_trainer) from the
    sampler's own tokens (Schulman's k3; the "mismatch KL" slime, prime-rl and open-instruct log). No loss reads it.
    TRL asks vLLM for "processed" log-probs (after temperature, top-k and top-p): with top_p < 1 or top_k > 0 they are
    those of the truncated distribution vLLM samples from, and the gap includes that truncation.

    Args:
        trainer_logps: (B, C) the trainer's log-probs of the completion tokens.
        sampling_logps: (B, C) the engine's log-probs of the same tokens (any value where `mask` is False).
        mask: (B, C) bool, the tokens that have both.
    Returns:
        (4,) float64: sum |d|, max |d| (0 without tokens), sum k3, token count.
    """
    d = (trainer_logps.double() - sampling_logps.double())[mask]  # (T,)
    k3 = torch.exp(d) - d - 1  # (T,)
    top = d.abs().max() if d.numel() else torch.zeros((), dtype=torch.float64)
    return torch.stack([d.abs().sum(), top, k3.sum(), torch.tensor(float(d.numel()), dtype=torch.float64)])


@dataclass
class TrainRow:
    """One collected row as every rank sees it after the all-gather (token ids, loss flag, advantage, extras).

    `meta` carries what a paper's hooks need of the row after planning (group, episode, turn, role, rewards)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    carries_loss: bool
    advantage: float
    reward: float = 0.0
    teacher_prompt_ids: list[int] | None = None
    meta: dict = field(default_factory=dict)
    sampling_logps: list[float] | None = None  # the generation engine's log-probs of `completion_ids` (vLLM)


class MultiTurnGRPOTrainer(GRPOTrainer):
    """Multi-turn GRPO counted in rollouts, correct on N ranks; subclassed by the agentic paper trainers.

    One dataset item (a task, or a SkillRise group of tasks, or an EnvACE task) is repeated G times by the sampler; a
    rollout plays `episodes_per_rank` items per rank. Hooks a paper trainer overrides (each says which equation):
    - `_collect(items, group_ids, seeds, episode_offset)`: the episode producer (default: `self.collector`, a shared
      `RolloutCollector`; SkillRise plays trials, EnvACE rehearsal episodes).
    - `_score(episodes)`: this rank's rows and their (N,) advantages (default: verl-agent GRPO over each group's rows,
      or GiGPO with `advantage_mode="gigpo"`, R = reward_scale * won minus the invalid-action penalty); rows of failed
      episodes carry no loss.
    - `_row_meta(row)`: what `TrainRow.meta` keeps of a row for the hooks below (default: nothing).
    - `_extra_forwards(micro_batches, indices, rows, plan, old)`: no-grad forwards after theta_old and the reference
      (the self-teacher of SDAR and AgentOPSD; AgentOPSD's advantage reshaping); `old`: theta_old's log-probs where
      the base recomputed them, else None.
    - `records_generation_logps`: whether HF generation records the sampled tokens' log-probs into the rows.
    - `_rollout_metrics(episodes, rows)`: the rank-reduced episode metrics (default: `env/*` from `Episode`s, and
      GiGPO's step-group sizes `gigpo/*`).
    - `_build_collectors(prompt, ...)` builds the pool and collectors of a verl-agent package (SDAR, AgentOPSD), with
      the self-teacher prompt recorded per row; `_policy_forward` and `_log_token_means` serve a `_compute_loss`.
    - `_max_rows_per_item()`: the most rows one item can produce (bounds the HF loop's `max_steps`).
    - `_micro_rows(num_rows)`: rows per micro-batch (default `micro_batch_rows`; EnvACE sizes it per rollout).
    The loss (`_compute_loss`) stays the package's: it reads `token_normalizer` (the step's global real loss tokens /
    world) from every micro-batch, and `old_per_token_logps` / `ref_per_token_logps` where computed.

    What lives here, once: the rollout-counted cadence (`GroupedTaskSampler`, `RolloutCadence`, a schedule over
    rollouts), lock-step generation (`_prompt_count`: the maximum over ranks where TRL's vLLM server or TP > 1 hands
    results back by rank offset, one dummy otherwise), the all-gather of rows and the plan over ranks, no-grad forwards
    in chunks of `log_prob_micro_batch_rows` rows (`_row_logps`; every rank runs the same number, ZeRO-3),
    rank-reduced metrics, checkpoint state (rollouts done) and the chunked panel evaluation on every rank
    (`_evaluate_items`).

    Overrides of [`~trl.GRPOTrainer`]: `_prepare_inputs` (the next planned micro-batch; a rollout when the last one's
    are used up), `_get_train_sampler`, `create_scheduler`, `training_step` (times the forwards and backwards).
    Everything else (generation back ends incl. vLLM, weight sync, ZeRO-3, logging, checkpoints) is inherited.
    """

    def __init__(self, model, args, env_config, train_items: list, processing_class=None, callbacks=None,
                 peft_config=None):  # fmt: skip
        if args.use_vllm and args.vllm_importance_sampling_correction:  # before any model loads
            raise ValueError(
                f"{type(self).__name__} does not compute TRL's vLLM importance-sampling ratio (the reference loss "
                "has none); set vllm_importance_sampling_correction=False."
            )
        self.env_config = env_config
        self.train_items = train_items
        self.episodes_per_rank = args.per_device_train_batch_size * args.steps_per_generation
        # the HF loop counts optimizer steps; bound them by the longest possible rollouts and stop on `num_rollouts`
        max_rows = self.episodes_per_rank * self._max_rows_per_item()
        args.max_steps = args.num_rollouts * -(-max_rows // (args.micro_batch_rows * args.gradient_accumulation_steps))
        dataset = Dataset.from_dict({"prompt": [str(i) for i in range(len(train_items))],
                                     "task_index": list(range(len(train_items)))})  # fmt: skip
        # the colocated vLLM engine in the trainer's dtype (TRL passes none; `generation.vllm_engine_kwargs`)
        colocated = args.use_vllm and args.vllm_mode == "colocate"
        with matched_vllm_engine(self) if colocated else nullcontext():
            super().__init__(
                model=model,
                reward_funcs=environment_reward,
                args=args,
                train_dataset=dataset,
                processing_class=processing_class,
                callbacks=callbacks,
                peft_config=peft_config,  # `model.lora` (`agentrl_shared.lora.peft_config`): TRL wraps the policy
            )
        if self.episodes_per_rank % self.num_generations != 0:
            raise ValueError(
                f"per_device_train_batch_size * steps_per_generation = {self.episodes_per_rank} episodes per rank "
                f"must be a multiple of num_generations = {self.num_generations}, so that each group lives on one "
                "rank."
            )
        # TRL's vLLM server mode and colocate with TP > 1 hand completions back by rank offset: equal prompt lists
        self.equal_prompt_lists = self.use_vllm and (self.vllm_mode == "server" or self.vllm_tensor_parallel_size > 1)
        self.rollouts_done = 0
        self.rollout_finished = False
        self.timings: Counter = Counter()
        self._micro_batches: list[dict] = []
        self._rollout_summary: dict = {}
        self._lr_rollout = 0
        self._rollout_s = self._forward_backward_s = 0.0
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(RolloutCadence(self))

    def _build_collectors(self, prompt, *, student_skills: bool, teacher: bool, eval_skills: bool) -> None:
        """The environment pool and the shared `RolloutCollector`s of a verl-agent style package: `self.collector`
        for rollouts and `self.eval_collector` for the panel, one pool for both (a rollout uses its first
        `episodes_per_rank` slots). With `teacher`, every training row also records its self-teacher prompt (the same
        turn with the skill block, `agentrl_shared.skills`: official selection, `args.skill_position`), tokenised and
        left-truncated like the student's (`args.skills_dir`: the official documents; None: ours);
        `student_skills` / `eval_skills` put the skills in the student's own
        prompt in training / evaluation (the Skill-GRPO and Skill-Prompt* baselines)."""
        env = self.env_config
        self.eval_batch_size = env.eval_batch_size or self.episodes_per_rank
        self.pool = EnvPool(
            partial(make_env, env.name, **env.env_kwargs),
            num_slots=max(self.episodes_per_rank, self.eval_batch_size),
            timeout=env.step_timeout,
            num_workers=env.num_workers,
        )
        common = {
            "pool": self.pool,
            "prompt": prompt,
            "tokenizer": self.processing_class,
            "max_turns": env.max_turns,
            "max_prompt_length": env.max_prompt_length,
            "chat_template_kwargs": self.args.chat_template_kwargs,
        }
        # (text, task) -> skills at the start of the user message; `skills_dir`: the official documents, else ours
        student = partial(student_prompt, env.name, skills_dir=self.args.skills_dir)
        self.collector = RolloutCollector(
            prompt_transform=student if student_skills else None,
            teacher_transform=self._teacher_prompt if teacher else None,
            **common,
        )
        self.eval_collector = RolloutCollector(prompt_transform=student if eval_skills else None, **common)

    def _teacher_prompt(self, text: str, task: dict) -> str:
        """The self-teacher prompt of a row: the student's with the task's skills (`agentrl_shared.skills`)."""
        skills = teacher_skills(self.env_config.name, task, text, self.args.skills_dir)
        return teacher_prompt(text, skills, self.args.skill_position)

    # --- hooks (defaults: the verl-agent GRPO baseline on `Episode`s) ---
    def _max_rows_per_item(self) -> int:
        return self.env_config.max_turns

    def _collect(self, items: list, group_ids: list[int], seeds: list[int], episode_offset: int) -> list:
        """One episode per item; a failed episode is replayed in a fresh environment up to
        `args.retry_failed_episodes` times (`collect_with_retries`; a config using this hook declares that field)."""
        return collect_with_retries(self.collector, items, group_ids, seeds, self._generate, self._prompt_count,
                                    episode_offset, self.args.retry_failed_episodes,
                                    lambda n: int(self._sum_ranks(n)[0]))  # fmt: skip

    def _score(self, episodes: list[Episode]) -> tuple[list[Row], Tensor]:
        """verl-agent `EpisodeRewardManager` + the advantage estimator: every row of an episode gets R = reward_scale *
        won, minus the penalty on invalid rows; then GRPO over the rows of each group (`compute_grpo_outcome_advantage`,
        `advantage_mode="grpo"`) or GiGPO (`core_gigpo.py::compute_gigpo_outcome_advantage`, `advantage_mode="gigpo"`:
        that episode-group advantage without the std division, plus `step_advantage_w` x the advantage of each row's
        discounted step return among the group's rows that acted on the same observation, `agentrl_shared.gigpo`).
        A group's episodes are all on this rank. Rows of failed episodes neither enter the statistics nor carry loss."""
        rows = [r for e in episodes for r in e.rows]
        returns = torch.tensor([self.env_config.reward_scale * e.won for e in episodes for _ in e.rows])
        valid = torch.tensor([r.is_action_valid for r in rows], dtype=torch.bool)
        rewards = row_rewards(returns, valid, penalty_coef=self.args.invalid_action_penalty_coef)  # (N,)
        ok = [i for i, r in enumerate(rows) if not r.failed]
        advantages = torch.zeros_like(rewards)
        if ok and self.args.advantage_mode == "gigpo":
            step_returns = [
                g
                for e in episodes
                for g in discounted_step_returns(
                    won_step_rewards(len(e.rows), e.won, reward_scale=self.env_config.reward_scale),
                    gamma=self.args.step_gamma,
                )
            ]  # (N,), in row order
            advantages[ok] = gigpo_advantages(
                rewards[ok], [step_returns[i] for i in ok], [rows[i].group_id for i in ok],
                [rows[i].anchor for i in ok], step_advantage_w=self.args.step_advantage_w,
            )  # fmt: skip
        elif ok:
            advantages[ok] = grpo_row_advantages(rewards[ok], torch.tensor([rows[i].group_id for i in ok]))
        for r, reward, ret in zip(rows, rewards.tolist(), returns.tolist(), strict=True):
            r.reward, r.episode_return = reward, ret
        return rows, advantages

    def _row_meta(self, row: Row) -> dict:
        return {}

    def _micro_rows(self, num_rows: int) -> int:
        """Rows per micro-batch for a rollout of `num_rows` rows over all ranks (default `micro_batch_rows`, as
        verl-agent's `ppo_micro_batch_size_per_gpu`)."""
        return self.args.micro_batch_rows

    def _extra_forwards(self, micro_batches: list[dict], indices: list[list[int]], rows: list[TrainRow],
                        plan: StepPlan, old: dict[int, Tensor] | None) -> None:  # fmt: skip
        """No extra forward in plain GRPO. `old`: the theta_old (C_i,) log-probs of the rows this rank holds where the
        base recomputed them (several optimizer steps, or the vLLM log-prob gap), else None."""

    def _rollout_metrics(self, episodes: list[Episode], rows: list[Row]) -> dict[str, float]:
        """`env/*` over every rank's episodes, and with `advantage_mode="gigpo"` the step groups' sizes (`gigpo/*`,
        over the rows that enter `_score`'s statistics); one all-gather."""
        own = episode_counts(episodes)
        gigpo = self.args.advantage_mode == "gigpo"
        if gigpo:
            ok = [r for r in rows if not r.failed]
            own |= step_group_counts([r.group_id for r in ok], [r.anchor for r in ok])
        counts = Counter()
        for part in self._all_ranks(own):
            counts.update(part)
        return metrics_from_counts(counts) | (step_group_metrics(counts) if gigpo else {})

    # --- helpers for hooks ---
    @property
    def uses_teacher(self) -> bool:
        """Whether micro-batches carry the rows' teacher prompts (a self-teacher reads them)."""
        return False

    @property
    def records_generation_logps(self) -> bool:
        """Whether HF generation (no vLLM) records each sampled token's log-prob into the rows' `sampling_logps`
        (`generation.SampledTokenLogps`), for a hook that reads the rollout-time log-probs without a forward."""
        return False

    def _all_ranks(self, value) -> list:
        """`[value of rank 0, value of rank 1, ...]` (one all-gather; every rank gets the list)."""
        if self.accelerator.num_processes == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])

    def _sum_ranks(self, *values: float) -> list[float]:
        """Each value summed over ranks (one all-reduce)."""
        if self.accelerator.num_processes == 1:
            return [float(v) for v in values]
        total = torch.tensor(values, dtype=torch.float64, device=self.accelerator.device)
        return self.accelerator.reduce(total, reduction="sum").tolist()

    def _prompt_count(self, n_active: int) -> int:
        """Prompts this rank sends this turn (`rollout.equal_prompt_count`): 0 when no rank has work."""
        return equal_prompt_count(n_active, self._all_ranks(n_active), self.equal_prompt_lists)

    def _generate(self, prompt_ids: list[list[int]]):
        """The trainer's generation (vLLM or HF), with the vLLM weight sync timed on its own: `time/weight_sync_s` and
        `time/generation_s` (generation alone, the sync left out) of a rollout; an evaluation's calls are not counted
        (a package's own `generate_s`, where it keeps one, times its generate calls with the sync inside)."""
        if self.use_vllm and self.state.global_step != self._last_loaded_step:
            t0 = time.perf_counter()
            sync_vllm_weights(self.vllm_generation)
            self._last_loaded_step = self.state.global_step
            self.timings["weight_sync_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.model.training and self.records_generation_logps and not self.use_vllm:
            # HF generate returns no log-probs: take them from the logits it sampled with (the causal LM whose
            # `__call__` generate runs: under PEFT the base model inside the adapter wrappers)
            lm = self.model.get_base_model() if is_peft_model(self.model) else self.model
            with SampledTokenLogps(lm, self.temperature) as record:
                completions, _ = trainer_generate_fn(self)(prompt_ids)
            out = completions, record.rows(completions)
        else:
            out = trainer_generate_fn(self)(prompt_ids)
        if self.model.training:
            self.timings["generation_s"] += time.perf_counter() - t0
        return out

    @staticmethod
    def _sampling_logps(rows: list[TrainRow], shape: torch.Size) -> tuple[Tensor, Tensor]:
        """The engine's log-probs of a micro-batch's rows laid out like its (B, C) right-padded completions, and the
        (B, C) mask of the tokens that have one (none on rows without them, or on an empty micro-batch's pad row)."""
        logps = torch.zeros(shape, dtype=torch.float64)
        mask = torch.zeros(shape, dtype=torch.bool)
        for b, row in enumerate(rows):
            if row.sampling_logps is not None:
                logps[b, : len(row.sampling_logps)] = torch.tensor(row.sampling_logps, dtype=torch.float64)
                mask[b, : len(row.sampling_logps)] = True
        return logps, mask

    @classmethod
    def _logp_gap(cls, trainer_logps: dict[int, Tensor], rows: list[TrainRow]) -> Tensor:
        """`logp_gap_sums` over the rows of `trainer_logps` (row index -> (C_i,) theta_old log-probs): (4,) sums of
        |d| and k3, the token count, and the max |d| over all of them."""
        gap = torch.zeros(4, dtype=torch.float64)
        for i, logps in trainer_logps.items():
            shape = torch.Size((1, logps.numel()))
            g = logp_gap_sums(logps.view(shape).cpu(), *cls._sampling_logps([rows[i]], shape))
            gap = torch.stack([gap[0] + g[0], torch.maximum(gap[1], g[1]), gap[2] + g[2], gap[3] + g[3]])
        return gap

    def _logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, shared_prefix=False) -> Tensor:
        """(B, C) log-probs of the completion under `model`: TRL's plain forward of every whole row, or with
        `shared_prefix` the prompt prefix that rows share once per micro-batch (`agentrl_shared.prefix.
        shared_prefix_logps`: two forwards on every rank, equal to the plain forward to float rounding)."""
        if shared_prefix:
            with self.accelerator.autocast():
                return shared_prefix_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                           self.processing_class.pad_token_id)  # fmt: skip
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask, completion_ids.size(1))
        return logps  # (B, C)

    def _row_logps(self, rows: list[TrainRow], plan: StepPlan, forward: Callable[..., Tensor], timing: str,
                   teacher: bool = False) -> dict[int, Tensor]:  # fmt: skip
        """No-grad (C_i,) log-probs of each row this rank holds, by `forward(prompt_ids, prompt_mask, completion_ids,
        completion_mask) -> (B, C)` over chunks of `log_prob_micro_batch_rows` rows (verl
        `log_prob_micro_batch_size_per_gpu`: a batch size of its own for the old-policy, reference and teacher
        forwards; None: `micro_batch_rows`); with `teacher` the rows' teacher prompts replace their prompts. Every
        rank runs the same number of forwards (`StepPlan.chunks`: an empty chunk is one pad row; rows ordered by prompt
        length, so a chunk pads less); seconds go to `self.timings[timing]`. Larger chunks share more of the rows'
        prompt prefixes under the shared-prefix forwards (a task's skill block, its group's first prompt)."""
        t0, device = time.perf_counter(), self.accelerator.device
        per_chunk = self.args.log_prob_micro_batch_rows or plan.micro_rows
        prompts = [r.teacher_prompt_ids if teacher else r.prompt_ids for r in rows]
        out: dict[int, Tensor] = {}
        for index in plan.chunks(self.accelerator.process_index, per_chunk, prompts):  # rows of one length together
            chosen = [rows[i] for i in index]
            batch, _ = rows_to_batch([prompts[i] for i in index], [r.completion_ids for r in chosen],
                                     [r.carries_loss for r in chosen], [0.0] * len(chosen),
                                     self.processing_class.pad_token_id)  # fmt: skip
            logps = forward(*(batch[k].to(device) for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                                             "completion_mask")))  # fmt: skip
            for b, i in enumerate(index):
                out[i] = logps[b, : len(rows[i].completion_ids)]
        self.timings[timing] += time.perf_counter() - t0
        return out

    def _logps_of(self, model, shared_prefix: bool = False) -> Callable[..., Tensor]:
        """`_logps` of `model` as a `_row_logps` forward."""
        return partial(self._logps, model, shared_prefix=shared_prefix)

    def _teacher_row_logps(self, rows: list[TrainRow], plan: StepPlan) -> dict[int, Tensor]:
        """(C_i,) self-teacher log-probs of each row this rank holds: the policy on the rows' teacher prompts
        (with `args.shared_prefix_teacher`, the prompt prefix that rows share, e.g. the skill block and the chat header,
        runs once per chunk: `agentrl_shared.prefix.shared_prefix_logps`), over `_row_logps` chunks, timed as
        `teacher_logps_s`."""
        forward = self._logps_of(self.model, shared_prefix=self.args.shared_prefix_teacher)
        return self._row_logps(rows, plan, forward, "teacher_logps_s", teacher=True)

    @staticmethod
    def _to_micro_batches(per_row: dict[int, Tensor], micro_batches: list[dict], indices: list[list[int]],
                          key: str) -> None:  # fmt: skip
        """Lay `per_row` (C_i,) values out as each micro-batch's (B, C) `batch[key]`, like its right-padded
        completions (zeros past a row's end, and on an empty micro-batch's pad row)."""
        for batch, index in zip(micro_batches, indices, strict=True):
            like = batch["completion_ids"]
            dtype = next(iter(per_row.values())).dtype if per_row else torch.float32
            out = torch.zeros(like.shape, dtype=dtype, device=like.device)
            for b, i in enumerate(index):
                out[b, : per_row[i].numel()] = per_row[i]
            batch[key] = out

    def _ref_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> Tensor:
        """(B, C) log-probs of the KL reference: TRL's `ref_model`, or with LoRA (TRL builds none) the policy with its
        adapters disabled, i.e. the base model (TRL `_generate_and_score_completions`, `use_adapter(model, None)`)."""
        if self.ref_model is not None:
            return self._logps(self.ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask)
        with adapters_disabled(self.model):
            return self._logps(self.model, prompt_ids, prompt_mask, completion_ids, completion_mask)

    def _policy_forward(self, model, inputs: dict, shared_prefix: bool = False) -> tuple[Tensor, Tensor]:
        """One forward of the policy being trained, with grad: (B, C) log-probs and entropies of the completion.
        With `shared_prefix` the prompt prefix that rows share (the G identical first-turn prompts of a group, the
        chat header) runs once per micro-batch, with grad through its keys/values
        (`agentrl_shared.prefix.shared_prefix_logps_and_entropies`: two forwards on every rank, then one backward;
        equal to the plain forward to float rounding); otherwise TRL's plain forward of every whole row."""
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        if shared_prefix:
            with self.accelerator.autocast():  # as TRL's `_get_per_token_logps_and_entropies` runs the model
                return shared_prefix_logps_and_entropies(model, prompt_ids, inputs["prompt_mask"], completion_ids,
                                                         inputs["completion_mask"], self.processing_class.pad_token_id,
                                                         compute_entropy=True, config=self.model.config)  # fmt: skip
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
        )
        return logps, entropies  # (B, C) each

    def _log_token_means(self, sums: dict[str, Tensor], num_tokens: Tensor) -> None:
        """Log `sums[name] / tokens` over this micro-batch on all ranks (one all-reduce; every rank runs every
        micro-batch, so the collective is in lock-step); `sums` holds per-micro-batch token sums."""
        names = sorted(sums)
        stats = torch.stack([sums[k].float() for k in names] + [num_tokens.float()])
        stats = self.accelerator.reduce(stats, reduction="sum")
        tokens = stats[-1].item()
        if tokens > 0:
            mode = "train" if self.model.training else "eval"
            for i, name in enumerate(names):
                self._metrics[mode][name].append(stats[i].item() / tokens)

    def _log_ratios(self, ratios: dict[str, tuple[Tensor, Tensor]]) -> None:
        """Log each `numerator / denominator` of `ratios` summed over all ranks, for this micro-batch (one all-reduce;
        a ratio whose denominator is 0 on every rank is not logged)."""
        names = sorted(ratios)
        stats = torch.stack([x.float() for name in names for x in ratios[name]])
        stats = self.accelerator.reduce(stats, reduction="sum")
        mode = "train" if self.model.training else "eval"
        for i, name in enumerate(names):
            if stats[2 * i + 1].item() > 0:
                self._metrics[mode][name].append(stats[2 * i].item() / stats[2 * i + 1].item())

    def log_rollout_line(self) -> None:
        """One console line per rollout (the full metrics go to the run's log and `report_to`)."""
        if self.accelerator.is_main_process:
            s = self._rollout_summary
            success = s.get("env/success_rate", float("nan"))
            logger.info(
                f"rollout {self.rollouts_done}/{self.args.num_rollouts}: success {success:.3f}, "
                f"{s['rollout/rows']:.0f} rows in {s['rollout/optimizer_steps']:.0f} optimizer steps, "
                f"{time.perf_counter() - s['start']:.0f}s"
            )

    # --- overrides of GRPOTrainer ---
    def _get_train_sampler(self, dataset=None) -> Sampler:
        per_step = self.episodes_per_rank * self.accelerator.num_processes
        num_samples = self.args.max_steps * self.args.gradient_accumulation_steps * per_step
        return GroupedTaskSampler(len(self.train_items), self.num_generations, self.args.seed, num_samples)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            if self.args.lr_scheduler_type not in ("constant", "constant_with_warmup", "linear", "cosine"):
                raise ValueError(
                    f"lr_scheduler_type={self.args.lr_scheduler_type!r} is not supported by the rollout-counted "
                    "schedule; use constant, constant_with_warmup, linear or cosine."
                )
            n = self.args.num_rollouts
            # verl: int(lr_warmup_steps_ratio * total_steps) (`fsdp_workers.py` `_build_model_optimizer`)
            w = self.args.warmup_steps
            warmup = int(w * n) if 0 < w < 1 else int(w)
            self._lr_factor = partial(rollout_lr_factor, self.args.lr_scheduler_type, num_rollouts=n,
                                      warmup_rollouts=warmup)  # fmt: skip
            self._lr_optimizer = optimizer or self.optimizer
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                self._lr_optimizer, lambda _: self._lr_factor(self._lr_rollout)
            )
        return self.lr_scheduler

    def _set_rollout_lr(self, rollout: int) -> None:
        """Apply the schedule's learning rate for `rollout` now (HF steps the scheduler only after optimizer steps)."""
        self._lr_rollout = rollout
        for group in self._lr_optimizer.param_groups:
            group["lr"] = group["initial_lr"] * self._lr_factor(rollout)  # `initial_lr`: set by LambdaLR

    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's, plus `time/forward_backward_s`: seconds of this optimizer step's forwards and backwards (the rollout
        that `_prepare_inputs` may run is timed on its own)."""
        t0, self._rollout_s = time.perf_counter(), 0.0
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._forward_backward_s += time.perf_counter() - t0 - self._rollout_s
        if self.accelerator.sync_gradients:
            self._metrics["train"]["time/forward_backward_s"].append(self._forward_backward_s)
            self._forward_backward_s = 0.0
        return loss

    def _prepare_inputs(self, generation_batch):
        if not self._micro_batches:
            t0 = time.perf_counter()
            self._micro_batches = self._rollout_micro_batches(generation_batch)
            self._rollout_s = time.perf_counter() - t0
        batch = self._micro_batches.pop(0)
        self.rollout_finished = not self._micro_batches
        return batch

    # --- one rollout ---
    def _rollout_micro_batches(self, inputs: list[dict]) -> list[dict]:
        """Play one rollout, score it, plan its optimizer steps over all ranks; this rank's micro-batches in order."""
        start = time.perf_counter()
        device, world = self.accelerator.device, self.accelerator.num_processes
        G, rank = self.num_generations, self.accelerator.process_index
        self._set_rollout_lr(self.rollouts_done)
        items = [self.train_items[x["task_index"]] for x in inputs]
        n_groups = len(items) // G
        base = (self.rollouts_done * world + rank) * n_groups
        group_ids = [base + i // G for i in range(len(items))]
        # verl-agent seeds env i with seed + i // G: the G members of a group start from the same state
        seeds = [self.args.seed * 1_000_003 + g for g in group_ids]
        with self.accelerator.autocast():  # generation in the training precision (bf16 autocast on CPU and GPU)
            episodes = self._collect(items, group_ids, seeds, base * G)
        self.rollouts_done += 1
        rows, advantages = self._score(episodes)

        # Every rank's rows, then the same plan on every rank (which rank trains which row, in which step)
        local = [
            TrainRow(
                r.prompt_ids,
                r.completion_ids,
                not r.failed,
                a,
                r.reward,
                r.teacher_prompt_ids,
                self._row_meta(r),
                sampling_logps=r.sampling_logps,
            )
            for r, a in zip(rows, advantages.tolist(), strict=True)
        ]
        all_rows = [row for part in self._all_ranks(local) for row in part]
        plan = plan_steps(
            [len(r.prompt_ids) + len(r.completion_ids) for r in all_rows],
            [len(r.completion_ids) if r.carries_loss else 0 for r in all_rows],
            world,
            self._micro_rows(len(all_rows)),
            self.args.gradient_accumulation_steps,
            prompts=[r.prompt_ids for r in all_rows],  # a step's micro-batches: rows of one length together
        )
        pad = self.processing_class.pad_token_id
        indices = plan.micro_batches(rank)
        micro_batches = []
        for k, index in enumerate(indices):
            chosen = [all_rows[i] for i in index]
            batch, _ = rows_to_batch(
                [r.prompt_ids for r in chosen],
                [r.completion_ids for r in chosen],
                [r.carries_loss for r in chosen],
                [r.advantage for r in chosen],
                pad,
            )
            batch = {key: value.to(device) for key, value in batch.items()}
            # the normaliser of this step's loss: real tokens of the step on all ranks / world
            batch["token_normalizer"] = torch.tensor(max(plan.step_tokens[plan.step_of_micro_batch(k)], 1) / world)
            micro_batches.append(batch)

        # No-grad forwards in the training precision, over chunks of `log_prob_micro_batch_rows` rows, the same number
        # on every rank (ZeRO-3 lock-step). The vLLM/trainer log-prob gap is measured wherever rows carry vLLM's
        # log-probs (every rank sees all rows, so every rank decides alike); it needs theta_old, a forward of its own
        # with a single step. HF's recorded log-probs (`records_generation_logps`) come from the trainer's own weights
        # and precision: there is no engine gap to measure
        measure_gap = self.use_vllm and any(r.sampling_logps is not None for r in all_rows)
        old = None
        with torch.no_grad(), self.accelerator.autocast():
            # theta_old: from the second optimizer step on the policy has moved (verl recomputes old log-probs);
            # with a single step the loss forward's detached log-probs are theta_old
            if plan.num_steps > 1 or measure_gap:
                old = self._row_logps(all_rows, plan, self._logps_of(self.model),
                                      "old_logps_s" if plan.num_steps > 1 else "logp_gap_s")  # fmt: skip
                if plan.num_steps > 1:
                    self._to_micro_batches(old, micro_batches, indices, "old_per_token_logps")
                if measure_gap:
                    gap = self._logp_gap(old, all_rows)
            if self.beta != 0.0:
                ref = self._row_logps(all_rows, plan, self._ref_logps, "ref_logps_s")
                self._to_micro_batches(ref, micro_batches, indices, "ref_per_token_logps")
            self._extra_forwards(micro_batches, indices, all_rows, plan, old)

        n_rows = len(all_rows)
        metrics = self._rollout_metrics(episodes, rows)
        if measure_gap:  # over every rank's tokens (two collectives, on every rank)
            abs_sum, k3_sum, tokens = self._sum_ranks(*gap[[0, 2, 3]].tolist())
            metrics["sampling/logp_gap_mean"] = abs_sum / max(tokens, 1.0)
            metrics["sampling/logp_gap_max"] = max(self._all_ranks(gap[1].item()))
            metrics["sampling/mismatch_kl_k3"] = k3_sum / max(tokens, 1.0)
        metrics.update(
            {
                "rollout/rows": float(n_rows),
                "rollout/tokens": float(sum(len(r.prompt_ids) + len(r.completion_ids) for r in all_rows)),
                "rollout/loss_rows_ratio": sum(r.carries_loss for r in all_rows) / max(n_rows, 1),
                "rollout/optimizer_steps": float(plan.num_steps),
                "rollout/row_reward_mean": sum(r.reward for r in all_rows) / max(n_rows, 1),
                "rollout/rows_per_rank_max": float(max(len(r) for r in plan.ranks)),
                "completions/mean_length": sum(len(r.completion_ids) for r in all_rows) / max(n_rows, 1),
            }
        )
        for part in self._all_ranks(dict(self.timings)):  # per-stage seconds of the slowest rank
            for key, seconds in part.items():
                metrics[f"time/{key}"] = max(metrics.get(f"time/{key}", 0.0), seconds)
        self.timings.clear()
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        self._rollout_summary = {**metrics, "start": start}
        return micro_batches

    # --- evaluation on a fixed panel, on every rank ---
    def _evaluate_items(self, items: list, slots: int, temperature: float,
                        play: Callable[[list], list]) -> list:  # fmt: skip
        """Play every item of a panel in chunks of `slots`: ranks take interleaved slices and the same number of
        chunks (one batched generation per turn for a whole chunk), so generation stays in lock-step; a rank whose
        slice is empty still plays empty chunks (it keeps answering the collectives). Every rank must call this and
        gets every result, rank 0's first."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        mine = items[rank::world]
        n_chunks = -(-len(items) // (world * slots))
        out: list = []
        was_training = self.model.training
        self.model.eval()
        with sampling_overrides(self, temperature), self.accelerator.autocast():
            for c in range(n_chunks):
                out += play(mine[c * slots : (c + 1) * slots])
        self.model.train(was_training)
        return [x for part in self._all_ranks(out) for x in part]

    def evaluate_panel(self, tasks: list[dict], seeds: list[int], temperature: float) -> list[Episode]:
        """Play every (task, seed) of the panel with `self.eval_collector`; every rank returns all episodes."""

        def play(chunk):
            return self.eval_collector.collect([t for t, _ in chunk], list(range(len(chunk))), [s for _, s in chunk],
                                               self._generate, self._prompt_count)  # fmt: skip

        return self._evaluate_items([(t, s) for s in seeds for t in tasks], self.eval_batch_size, temperature, play)


__all__ = ["MultiTurnGRPOTrainer", "TrainRow", "environment_reward", "grpo_row_advantages", "row_rewards"]
