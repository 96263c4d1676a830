"""`AgentOPSDTrainer`: GRPO on per-turn agent rows whose advantage is reweighted by a recursive log-odds belief built
from a skill-conditioned self-teacher (AgentOPSD, arXiv 2608.05987; official code ZethWang/AgentOPSD@0c478b2).

The official trainer `verl/trainer/ppo/opsd_ray_trainer.py` is truncated in the release (it stops mid-token in the
actor update and calls an undefined `_compute_teacher_log_probs`); this trainer follows its visible order of
operations and completes it from SDAR's RLSD trainer, whose code it is a copy of (README "Deviations").
"""

import logging
import math
import random
import time
from collections import Counter
from functools import partial

import torch
from datasets import Dataset
from torch.utils.data import Sampler
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOTrainer

from agentrl_shared.batch import plan_steps, rows_to_batch
from agentrl_shared.cadence import GroupedTaskSampler, RolloutCadence, rollout_lr_factor
from agentrl_shared.envs import make_env
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.generation import sampling_overrides, trainer_generate_fn
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import Episode, RolloutCollector, episode_counts, equal_prompt_count, metrics_from_counts
from agentrl_shared.skills import student_prompt, teacher_prompt, teacher_skills

from .config import ENV_TO_PROMPT, AgentOPSDConfig, EnvConfig
from .credit import (
    episode_turn_credit,
    group_mean_v0,
    linear_warmdown,
    rlsd_token_advantages,
    row_token_credit,
)
from .losses import grpo_row_advantages, row_rewards, step_loss


logger = logging.getLogger(__name__)


def environment_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: rewards come from the environment inside
    the rollout, so TRL's reward path is never called."""
    return [None] * len(completions)


class AgentOPSDTrainer(GRPOTrainer):
    """AgentOPSD: GRPO whose advantage is rescaled per turn (or per token) by the marginal revisions of a log-odds
    belief over task success, updated with the teacher-student log-prob gap of a skill-conditioned self-teacher.
    No loss term is added. Paper: https://arxiv.org/abs/2608.05987 (official code ZethWang/AgentOPSD@0c478b2).

    A rollout plays `per_device_train_batch_size * steps_per_generation` episodes per rank (whole groups of G: a group
    shares its task and seed and lives on one rank), one batched generation per turn, one row per turn (verl-agent).
    Rewards and GRPO advantages are computed on the collecting rank; then the rows of all ranks are planned as
    verl-agent trains them (`agentrl_shared.batch.plan_steps`, as the sdar package): balanced across ranks by tokens,
    every row once, ceil(rows / mini-batch) optimizer steps of `gradient_accumulation_steps` micro-batches of
    `micro_batch_rows` rows per rank, each step's loss divided by its global real-token count. Training length and
    the learning-rate and lambda schedules count rollouts (`num_rollouts`).

    The reweighting needs every turn of every episode before any update, in the official order
    (`opsd_ray_trainer.py`: `old_log_prob`, then the teacher forward, then the "adv" block): the rollout-time student
    log-probs and the teacher log-probs (same weights, skill-prefixed prompts, no grad) are computed once per row, in
    the planned micro-batches (every rank runs the same number of forwards, ZeRO-3 lock-step); the per-row gaps
    delta = l^T - l^S are all-gathered, and every rank computes the same advantages for all rows:
        turn:  A_hat_k = A_k * ((1 - lam) + lam * m_k)  (`credit.turn_advantages`, per episode),
        token: A_hat_t = A * ((1 - lam) + lam * m_t)    (`credit.token_advantages`, per row).
    `credit="rlsd"` swaps in the RLSD baseline's token weights, `credit="grpo"` keeps A (and skips both forwards).

    Overrides of [`~trl.GRPOTrainer`]:
    - `_prepare_inputs`: returns the next planned micro-batch, running a rollout (`_rollout_micro_batches`) when the
      previous rollout's are used up; replaces TRL's fixed `steps_per_generation` split.
    - `_compute_loss`: one student forward, then `losses.step_loss`: dual-clip PPO with the (B,) or (B, T)
      advantages above, k3 KL to the reference, entropy bonus, all over the step's tokens; only the Skill-SD baseline
      (`sdl_coef > 0`) adds a term.
    - `_get_train_sampler`: `GroupedTaskSampler` (fresh task groups for every rollout).
    - `create_scheduler`: a schedule over rollouts.
    Everything else (generation back ends incl. vLLM, weight sync, ZeRO-3, logging, checkpoints) is inherited.
    """

    _tag_names = ["trl", "agentopsd", "agent-rl"]
    _name = "AgentOPSD"
    _paper = {
        "title": "AgentOPSD: Recursive Self-Distillation for Agentic Reinforcement Learning",
        "id": "2608.05987",
        "citation": (
            "@article{wang2026agentopsd,\n  title={AgentOPSD: Recursive Self-Distillation for Agentic Reinforcement "
            "Learning},\n  author={Wang, Zi-Han and others},\n  journal={arXiv preprint arXiv:2608.05987},\n"
            "  year={2026}\n}"
        ),
    }

    def __init__(
        self,
        model,
        args: AgentOPSDConfig,
        env_config: EnvConfig,
        train_tasks: list[dict],
        processing_class=None,
        callbacks=None,
    ):
        episodes_per_rank = args.per_device_train_batch_size * args.steps_per_generation
        # the HF loop counts optimizer steps; bound them by the longest possible rollouts and stop on `num_rollouts`
        max_rows = episodes_per_rank * env_config.max_turns
        args.max_steps = args.num_rollouts * -(-max_rows // (args.micro_batch_rows * args.gradient_accumulation_steps))
        self.train_tasks = train_tasks
        dataset = Dataset.from_dict(
            {
                "prompt": [t.get("instruction", t["task_id"]) for t in train_tasks],
                "task_index": list(range(len(train_tasks))),
            }
        )
        super().__init__(
            model=model,
            reward_funcs=environment_reward,
            args=args,
            train_dataset=dataset,
            processing_class=processing_class,
            callbacks=callbacks,
        )
        if self.use_vllm and self.vllm_importance_sampling_correction:
            raise ValueError(
                "AgentOPSDTrainer does not compute TRL's vLLM importance-sampling ratio (the reference loss has none); "
                "set vllm_importance_sampling_correction=False."
            )
        self.env_config = env_config
        self.episodes_per_rank = episodes_per_rank
        if episodes_per_rank % self.num_generations != 0:
            raise ValueError(
                f"per_device_train_batch_size * steps_per_generation = {episodes_per_rank} episodes per rank must "
                f"be a multiple of num_generations = {self.num_generations}, so that each group lives on one rank."
            )
        # one pool for rollouts and evaluation passes (a rollout uses its first `episodes_per_rank` slots)
        self.eval_batch_size = env_config.eval_batch_size or self.episodes_per_rank
        self.pool = EnvPool(
            partial(make_env, env_config.name, **env_config.env_kwargs),
            num_slots=max(self.episodes_per_rank, self.eval_batch_size),
            timeout=env_config.step_timeout,
            num_workers=env_config.num_workers,
        )
        common = {
            "pool": self.pool,
            "prompt": make_prompt(ENV_TO_PROMPT[env_config.name], env_config.history_length),
            "tokenizer": self.processing_class,
            "max_turns": env_config.max_turns,
            "max_prompt_length": env_config.max_prompt_length,
            "chat_template_kwargs": args.chat_template_kwargs,
        }
        # the teacher's prompt of every row: the same turn with the skill block (`build_teacher_batch`), recorded
        # by the collector, tokenised and left-truncated like the student's
        self.uses_teacher = args.credit != "grpo" or args.sdl_coef != 0.0
        self.collector = RolloutCollector(
            prompt_transform=self._student_skill_transform if args.skills_in_student_prompt else None,
            teacher_transform=self._skill_transform if self.uses_teacher else None,
            **common,
        )
        eval_transform = self._student_skill_transform if args.eval_with_skills else None
        self.eval_collector = RolloutCollector(prompt_transform=eval_transform, **common)
        # TRL's vLLM server mode and colocate with TP > 1 hand completions back by rank offset: equal prompt lists
        self.equal_prompt_lists = self.use_vllm and (self.vllm_mode == "server" or self.vllm_tensor_parallel_size > 1)
        self.rollouts_done = 0
        self.rollout_finished = False
        self.timings: Counter = Counter()
        self._micro_batches: list[dict] = []
        self._rollout_summary: dict = {}
        self._lr_rollout = 0
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(RolloutCadence(self))

    # --- helpers ---
    def _skill_transform(self, text: str, task: dict) -> str:
        """The teacher prompt of a row (`build_teacher_batch`: official selection, `skill_position`)."""
        return teacher_prompt(text, teacher_skills(self.env_config.name, task, text), self.args.skill_position)

    def _student_skill_transform(self, text: str, task: dict) -> str:
        """Skill-GRPO / Skill-Prompt*: skills at the start of the student's user message."""
        return student_prompt(self.env_config.name, text, task)

    def _all_ranks(self, value):
        """`[value of rank 0, value of rank 1, ...]` (one all-gather; every rank gets the list)."""
        if self.accelerator.num_processes == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])

    def _prompt_count(self, n_active: int) -> int:
        return equal_prompt_count(n_active, self._all_ranks(n_active), self.equal_prompt_lists)

    def _generate(self, prompt_ids: list[list[int]]):
        """The trainer's generation (vLLM or HF), with the vLLM weight sync timed on its own."""
        if self.use_vllm and self.state.global_step != self._last_loaded_step:
            t0 = time.perf_counter()
            self.vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step
            self.timings["weight_sync_s"] += time.perf_counter() - t0
        return trainer_generate_fn(self)(prompt_ids)

    def _logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask, completion_ids.size(1))
        return logps  # (B, C)

    def log_rollout_line(self) -> None:
        """One console line per rollout (the full metrics go to the run's log and `report_to`)."""
        if self.accelerator.is_main_process:
            s = self._rollout_summary
            logger.info(
                f"rollout {self.rollouts_done}/{self.args.num_rollouts}: success {s['env/success_rate']:.3f} over "
                f"{s['env/num_episodes']:.0f} episodes, {s['rollout/rows']:.0f} rows in {s['rollout/optimizer_steps']:.0f}"
                f" optimizer steps, {time.perf_counter() - s['start']:.0f}s"
            )

    def _credit(self, meta: dict, delta: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """AgentOPSD (or RLSD) advantages of all rows of the rollout from their GRPO advantages and the gaps
        delta = l^T - l^S (N, C); (N,) at turn granularity, (N, C) at token granularity."""
        a, advantages = self.args, meta["advantages"]
        if a.credit == "rlsd":  # SDAR repo rlsd_ray_trainer.py: lambda decays linearly over `warmdown_steps`
            lam = linear_warmdown(a.rlsd_lambda, self.rollouts_done, a.rlsd_warmdown_steps)
            self._metrics["train"]["rlsd/lambda"].append(lam)
            if a.granularity == "token":
                return rlsd_token_advantages(advantages, delta, mask, lam=lam, clip=a.rlsd_clip)
            # AgentOPSD's `tether_seq` at turn granularity: the mean token gap of the turn in exp(sign(A) * .)
            w = torch.exp(torch.sign(advantages) * (delta * mask).sum(-1) / mask.sum(-1).clamp(min=1.0))
            return advantages * ((1.0 - lam) + lam * w.clamp(1.0 - a.rlsd_clip, 1.0 + a.rlsd_clip))
        rewards, group_ids, episode_ids, ok = meta["rewards"], meta["group_ids"], meta["episode_ids"], meta["ok"]
        if a.v0_prior is None:  # compute_group_mean_v0 over the rows that carry a reward
            v0 = torch.full_like(rewards, 0.5)
            if ok.any():
                v0[ok] = group_mean_v0(rewards[ok], group_ids[ok], episode_ids[ok], reward_scale=a.v0_reward_scale)
        else:
            v0 = torch.full_like(rewards, a.v0_prior)
        lam = linear_warmdown(a.mult_lambda, self.rollouts_done, a.warmdown_steps)
        belief = {
            "lam": lam, "band": a.mult_band, "gamma": a.belief_decay_gamma, "signed": a.signed,
            "belief_gate": a.belief_gate, "mult_signed": a.mult_signed, "center": a.center_delta,
        }  # fmt: skip
        raw = {"belief_mult": a.belief_mult, "group_ids": group_ids, "anchoring": a.use_anchoring,
               "group_norm": a.use_group_norm}  # fmt: skip
        if a.granularity == "turn":
            evidence = (delta * mask).sum(-1)  # (N,) e_k: SUM over the turn's response tokens
            # the raw telescoping ablation budgets the unpenalised episode return (`episode_rewards`)
            credit = episode_turn_credit(
                advantages, evidence, v0, episode_ids, meta["turn_idx"], returns=meta["returns"], **raw, **belief
            )
            turns = len(episode_ids) / max(len(set(episode_ids.tolist())), 1)
            self._metrics["train"]["agentopsd/mean_turns_per_episode"].append(turns)
        else:  # the raw ablation budgets each row's own reward (a row's sum of token-level rewards)
            credit = row_token_credit(advantages, delta, mask, v0, returns=rewards, **raw, **belief)
        self._log_credit(advantages, credit, mask, v0, delta, lam)
        return credit

    def _log_credit(self, advantages, credit, mask, v0, delta, lam) -> None:
        """`agentopsd/*` metrics: the multiplier A_hat / A (0.5 + 0.5 m at the defaults), its clipped share, V_0 and
        the teacher-student gap (`opsd/teacher_student_gap_*` of the official trainer). Every rank computes them over
        all rows, so they are already global."""
        factor = credit / advantages.unsqueeze(-1) if credit.dim() == 2 else credit / advantages  # (N, C) or (N,)
        live = (advantages != 0).unsqueeze(-1) & mask.bool() if credit.dim() == 2 else advantages != 0
        f = factor[live]
        m = self._metrics["train"]
        m["agentopsd/lambda"].append(lam)
        m["agentopsd/v0_mean"].append(v0.mean().item())
        m["agentopsd/v0_saturated_ratio"].append(((v0 <= 1e-4 + 1e-9) | (v0 >= 1 - 1e-4 - 1e-9)).float().mean().item())
        n = mask.sum().clamp(min=1.0)
        m["agentopsd/teacher_student_gap_mean"].append(((delta * mask).sum() / n).item())
        m["agentopsd/teacher_student_gap_std"].append(((delta**2 * mask).sum() / n).sqrt().item())
        if f.numel():
            edge = lam * self.args.mult_band
            m["agentopsd/multiplier_mean"].append(f.mean().item())
            m["agentopsd/multiplier_min"].append(f.min().item())
            m["agentopsd/multiplier_max"].append(f.max().item())
            m["agentopsd/multiplier_clipped_ratio"].append(((f - 1).abs() >= edge - 1e-6).float().mean().item())

    # --- overrides ---
    def _get_train_sampler(self, dataset=None) -> Sampler:
        per_step = self.episodes_per_rank * self.accelerator.num_processes
        num_samples = self.args.max_steps * self.args.gradient_accumulation_steps * per_step
        return GroupedTaskSampler(len(self.train_tasks), self.num_generations, self.args.seed, num_samples)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            if self.args.lr_scheduler_type not in ("constant", "constant_with_warmup", "linear", "cosine"):
                raise ValueError(
                    f"lr_scheduler_type={self.args.lr_scheduler_type!r} is not supported by AgentOPSDTrainer's "
                    "rollout-counted schedule; use constant, constant_with_warmup, linear or cosine."
                )
            n = self.args.num_rollouts
            warmup = self.args.get_warmup_steps(n)
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

    def _prepare_inputs(self, generation_batch):
        if not self._micro_batches:
            self._micro_batches = self._rollout_micro_batches(generation_batch)
        batch = self._micro_batches.pop(0)
        self.rollout_finished = not self._micro_batches
        return batch

    def _play_rollout(self, inputs: list[dict]) -> tuple[list[Episode], list[tuple]]:
        """Play one rollout on this rank and score it; returns its episodes and the rows of ALL ranks, each
        `(prompt_ids, completion_ids, carries_loss, grpo_advantage, teacher_prompt_ids,
        (group_id, episode_id, turn_idx, row_reward, episode_return))`, in rank order (the same list on every rank)."""
        world, G, rank = self.accelerator.num_processes, self.num_generations, self.accelerator.process_index
        tasks = [self.train_tasks[x["task_index"]] for x in inputs]
        n_groups = len(tasks) // G
        base = (self.rollouts_done * world + rank) * n_groups
        group_ids = [base + i // G for i in range(len(tasks))]
        # verl-agent seeds env i with seed + i // G: the G members of a group start from the same state
        seeds = [self.args.seed * 1_000_003 + g for g in group_ids]
        with self.accelerator.autocast():  # generation in the training precision (bf16 autocast on CPU and GPU)
            episodes = self.collector.collect(
                tasks, group_ids, seeds, self._generate, self._prompt_count, episode_offset=base * G
            )
        self.rollouts_done += 1  # verl's `global_steps`: 1 at the first update (lambda schedules)
        self.timings.update(self.collector.timings)
        self.collector.timings.clear()

        # Rewards and GRPO advantages (verl-agent): every row of an episode gets R = reward_scale * won, minus the
        # penalty on invalid rows; GRPO over the rows of each group (all on this rank). Rows of failed episodes
        # neither enter the group statistics nor carry loss.
        rows = [r for e in episodes for r in e.rows]
        returns = torch.tensor([self.env_config.reward_scale * e.won for e in episodes for _ in e.rows])
        valid = torch.tensor([r.is_action_valid for r in rows], dtype=torch.bool)
        rewards = row_rewards(returns, valid, penalty_coef=self.args.invalid_action_penalty_coef)  # (N,)
        ok = torch.tensor([not r.failed for r in rows], dtype=torch.bool)
        advantages = torch.zeros_like(rewards)
        if ok.any():
            advantages[ok] = grpo_row_advantages(rewards[ok], torch.tensor([r.group_id for r in rows])[ok])

        # Every rank's rows, then the same plan on every rank (which rank trains which row, in which step)
        local = [
            (r.prompt_ids, r.completion_ids, not r.failed, a, r.teacher_prompt_ids,
             (r.group_id, r.episode_id, r.turn_idx, rw, ret))
            for r, a, rw, ret in zip(rows, advantages.tolist(), rewards.tolist(), returns.tolist(), strict=True)
        ]  # fmt: skip
        return episodes, [row for part in self._all_ranks(local) for row in part]

    def _rollout_micro_batches(self, inputs: list[dict]) -> list[dict]:
        """Play one rollout, plan its optimizer steps over all ranks, compute the student and teacher log-probs once
        per row and the reweighted advantages; this rank's micro-batches in order."""
        start = time.perf_counter()
        device, world, rank = self.accelerator.device, self.accelerator.num_processes, self.accelerator.process_index
        self._set_rollout_lr(self.rollouts_done)
        episodes, all_rows = self._play_rollout(inputs)
        plan = plan_steps(
            [len(p) + len(c) for p, c, *_ in all_rows],
            [len(c) if keep else 0 for _, c, keep, *_ in all_rows],
            world,
            self.args.micro_batch_rows,
            self.args.gradient_accumulation_steps,
            random.Random(self.args.seed * 7919 + self.rollouts_done),
        )
        pad = self.processing_class.pad_token_id
        indices = plan.micro_batches(rank)
        micro_batches = []
        for k, index in enumerate(indices):
            chosen = [all_rows[i] for i in index]
            batch, _ = rows_to_batch(
                [p for p, *_ in chosen],
                [c for _, c, *_ in chosen],
                [keep for _, _, keep, *_ in chosen],
                [a for _, _, _, a, *_ in chosen],
                pad,
                teacher_prompts=[t for *_, t, _ in chosen] if self.uses_teacher else None,
            )
            batch = {key: value.to(device) for key, value in batch.items()}
            # the normaliser of this step's loss: real tokens of the step on all ranks / world (see `step_loss`)
            batch["token_normalizer"] = torch.tensor(max(plan.step_tokens[plan.step_of_micro_batch(k)], 1) / world)
            micro_batches.append(batch)

        # No-grad forwards in the training precision, once per row in the planned micro-batches, the same number on
        # every rank (ZeRO-3 lock-step). opsd_ray_trainer.py: `old_log_prob = actor.compute_log_prob(batch)`, then
        # the teacher forward on `build_teacher_batch`, then the reference.
        reweight = self.args.credit != "grpo"
        gaps = {}  # global row index -> (C_row,) delta = l^T - l^S
        with torch.no_grad(), self.accelerator.autocast():
            for index, batch in zip(indices, micro_batches, strict=True):
                ids = (batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])
                # theta_old: from the second optimizer step on the policy has moved (verl recomputes old log-probs);
                # with a single step the loss forward's detached log-probs are theta_old
                student = None
                if reweight or plan.num_steps > 1:
                    t0 = time.perf_counter()
                    student = self._logps(self.model, *ids)
                    self.timings["old_logps_s"] += time.perf_counter() - t0
                    if plan.num_steps > 1:
                        batch["old_per_token_logps"] = student
                if self.uses_teacher:
                    t0 = time.perf_counter()
                    t_ids, t_mask = batch.pop("teacher_prompt_ids"), batch.pop("teacher_prompt_mask")
                    teacher = self._logps(self.model, t_ids, t_mask, *ids[2:])
                    self.timings["teacher_logps_s"] += time.perf_counter() - t0
                    if self.args.sdl_coef != 0.0:  # Skill-SD baseline: its loss term reads the teacher
                        batch["teacher_per_token_logps"] = teacher
                    if reweight:
                        delta = (teacher - student).float().cpu()
                        for b, i in enumerate(index):
                            gaps[i] = delta[b, : len(all_rows[i][1])].clone()  # not a view: gathered
                if self.beta != 0.0:
                    t0 = time.perf_counter()
                    batch["ref_per_token_logps"] = self._logps(self.ref_model, *ids)
                    self.timings["ref_logps_s"] += time.perf_counter() - t0

        # --- AgentOPSD change: reshape the advantages of all rows before any update (opsd_ray_trainer.py, "adv") ---
        if reweight:
            for part in self._all_ranks(gaps):  # every rank gets every row's gaps and computes the same credit
                gaps.update(part)
            n, C = len(all_rows), max(max(len(c) for _, c, *_ in all_rows), 1)
            delta, mask = torch.zeros(n, C), torch.zeros(n, C)
            for i, (_, c, keep, *_) in enumerate(all_rows):
                delta[i, : len(c)] = gaps[i]
                mask[i, : len(c)] = float(keep)
            group_id, episode_id, turn_idx, reward, ret = (torch.tensor(v) for v in zip(*(m for *_, m in all_rows)))
            meta = {
                "advantages": torch.tensor([a for _, _, _, a, *_ in all_rows]), "rewards": reward.float(),
                "returns": ret.float(), "group_ids": group_id, "episode_ids": episode_id, "turn_idx": turn_idx,
                "ok": torch.tensor([keep for _, _, keep, *_ in all_rows], dtype=torch.bool),
            }  # fmt: skip
            credit = self._credit(meta, delta, mask)  # (N,) or (N, C)
            for index, batch in zip(indices, micro_batches, strict=True):
                if not index:  # an empty micro-batch: its one pad row carries no loss
                    continue
                adv = credit[index]
                if adv.dim() == 2:
                    adv = adv[:, : batch["completion_ids"].size(1)]
                keep = batch["completion_mask"].any(dim=1).float().cpu()
                batch["advantages"] = (adv * keep.view(-1, *([1] * (adv.dim() - 1)))).float().to(device)

        counts = Counter()
        for part in self._all_ranks(episode_counts(episodes)):
            counts.update(part)
        n_rows = len(all_rows)
        metrics = metrics_from_counts(counts)
        metrics.update(
            {
                "rollout/rows": float(n_rows),
                "rollout/tokens": float(sum(len(p) + len(c) for p, c, *_ in all_rows)),
                "rollout/loss_rows_ratio": sum(keep for _, _, keep, *_ in all_rows) / max(n_rows, 1),
                "rollout/optimizer_steps": float(plan.num_steps),
                "rollout/row_reward_mean": sum(m[3] for *_, m in all_rows) / max(n_rows, 1),
                "rollout/rows_per_rank_max": float(max(len(r) for r in plan.ranks)),
                "completions/mean_length": sum(len(c) for _, c, *_ in all_rows) / max(n_rows, 1),
            }
        )
        if self.uses_teacher:
            truncated = sum(r.teacher_prompt_truncated for e in episodes for r in e.rows)
            metrics["agentopsd/teacher_prompt_truncated_ratio"] = sum(self._all_ranks(truncated)) / max(n_rows, 1)
        for part in self._all_ranks(dict(self.timings)):  # per-stage seconds of the slowest rank
            for key, seconds in part.items():
                metrics[f"time/{key}"] = max(metrics.get(f"time/{key}", 0.0), seconds)
        self.timings.clear()
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        self._rollout_summary = {**metrics, "start": start}
        return micro_batches

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, mask], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
        )  # (B, C) each, with grad
        loss, sums = step_loss(
            logps,
            entropies,
            mask,
            inputs["advantages"],
            inputs.get("old_per_token_logps", logps.detach()),
            inputs.get("ref_per_token_logps"),
            inputs.get("teacher_per_token_logps"),
            token_normalizer=inputs["token_normalizer"].item(),
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            clip_c=self.args.delta if self.args.delta is not None else math.inf,
            kl_coef=self.beta,
            entropy_coef=self.args.entropy_coef,
            sdl_coef=self.args.sdl_coef,
        )
        # metrics: token means over this micro-batch on all ranks (one all-reduce; every rank runs every micro-batch)
        names = sorted(sums)
        stats = torch.stack([sums[k] for k in names] + [mask.sum().to(logps.dtype)])
        stats = self.accelerator.reduce(stats.float(), reduction="sum")
        tokens = stats[len(names)].item()
        if tokens > 0:
            mode = "train" if self.model.training else "eval"
            for i, key in enumerate(names):
                self._metrics[mode][{"pg": "policy_loss", "sdl": "skillsd/loss"}.get(key, key)].append(
                    stats[i].item() / tokens
                )
        return loss

    # --- evaluation on a fixed panel ---
    def evaluate_panel(self, tasks: list[dict], seeds: list[int], temperature: float) -> list[Episode]:
        """Play every (task, seed) of the panel without skills (unless `eval_with_skills`); episodes in panel order.

        Ranks take interleaved slices and the same number of chunks of `env.eval_batch_size` episodes (one batched
        generation per turn for a whole chunk), so generation stays in lock-step.
        """
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        pairs = [(t, s) for s in seeds for t in tasks]
        mine = pairs[rank::world]
        slots = self.eval_batch_size
        n_chunks = -(-len(pairs) // (world * slots))
        episodes: list[Episode] = []
        was_training = self.model.training
        self.model.eval()
        with sampling_overrides(self, temperature), self.accelerator.autocast():
            for c in range(n_chunks):
                chunk = mine[c * slots : (c + 1) * slots]
                episodes += self.eval_collector.collect(
                    [t for t, _ in chunk],
                    list(range(len(chunk))),
                    [s for _, s in chunk],
                    self._generate,
                    self._prompt_count,
                )
        self.model.train(was_training)
        return [ep for part in self._all_ranks(episodes) for ep in part]
