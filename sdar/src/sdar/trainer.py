"""`SDARTrainer`: GRPO on per-turn agent rows plus SDAR's gated self-distillation term.

Paper: SDAR, arXiv 2605.15155 (section 3); official code ZJU-REAL/SDAR@8b85c23 (`verl/trainer/ppo/sdar_utils.py`,
`examples/sdar_trainer/run_*.sh`) on verl-agent (langfengQ/verl-agent@796ed31). The teacher is the same policy with
privileged skills prepended to its prompt; its log-probs of the sampled tokens are computed once per rollout, before
any update (theta_old), and lambda * token-mean(g * (l_T - l_S)), g = sg(sigmoid(beta * (l_T - sg(l_S)))), is added
to the PPO actor loss.
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

from .config import ENV_TO_PROMPT, EnvConfig, SDARConfig
from .losses import gate_statistics, grpo_row_advantages, row_rewards, step_loss


logger = logging.getLogger(__name__)


def environment_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: SDAR's rewards come from the environment
    during the rollout, so TRL's reward path is never called."""
    return [None] * len(completions)


class SDARTrainer(GRPOTrainer):
    """SDAR: GRPO with a sigmoid-gated on-policy self-distillation loss from a skill-conditioned self-teacher.
    Paper: https://arxiv.org/abs/2605.15155 (official code ZJU-REAL/SDAR@8b85c23).

    A rollout plays `per_device_train_batch_size * steps_per_generation` episodes per rank (whole groups of G: a group
    shares its task and seed and lives on one rank), one batched generation per turn, one row per turn (verl-agent).
    Rewards R_row = reward_scale * won - penalty * invalid and GRPO advantages over each group's rows are computed on
    the collecting rank; then the rows of all ranks are planned as verl-agent trains them
    (`agentrl_shared.batch.plan_steps`): balanced across ranks by tokens, every row once, ceil(rows / mini-batch)
    optimizer steps of `gradient_accumulation_steps` micro-batches of `micro_batch_rows` rows per rank, each step's
    loss divided by its global real-token count. Training length and the learning-rate schedule count rollouts
    (`num_rollouts`).

    Overrides of [`~trl.GRPOTrainer`]:
    - `_prepare_inputs`: returns the next planned micro-batch, running a rollout (`_rollout_micro_batches`) when the
      previous rollout's are used up; replaces TRL's fixed `steps_per_generation` split.
    - `_compute_loss`: one student forward (log-probs and entropies), then `losses.step_loss`: dual-clip PPO, k3 KL
      to the reference, entropy bonus and `sdar_coef` x the gated distillation term, all over the step's tokens.
    - `_get_train_sampler`: `GroupedTaskSampler` (fresh task groups for every rollout).
    - `create_scheduler`: a schedule over rollouts.
    Everything else (generation backends incl. vLLM, weight sync, ZeRO-3, logging, checkpoints) is inherited.
    """

    _tag_names = ["trl", "sdar", "agent-rl"]
    _name = "SDAR"
    _paper = {
        "title": "SDAR: Self-Distilled Agentic Reinforcement Learning",
        "id": "2605.15155",
        "citation": (
            "@article{lu2026sdar,\n  title={SDAR: Self-Distilled Agentic Reinforcement Learning},\n"
            "  author={Lu, Zhengxi and others},\n  journal={arXiv preprint arXiv:2605.15155},\n  year={2026}\n}"
        ),
    }

    def __init__(
        self,
        model,
        args: SDARConfig,
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
                "SDARTrainer does not compute TRL's vLLM importance-sampling ratio (the reference loss has none); "
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
        # training rows also record the teacher's prompt: the same turn with the skill block prepended
        self.collector = RolloutCollector(
            prompt_transform=self._student_skill_transform if args.skills_in_student_prompt else None,
            teacher_transform=self._skill_transform if args.sdar_coef != 0.0 else None,
            **common,
        )
        # evaluation prompts carry skills only for the `*` rows of Table 1 (Skill-Prompt*, Skill-GRPO*)
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
        self._rollout_s = self._forward_backward_s = 0.0
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(RolloutCadence(self))

    # --- helpers ---
    def _skill_transform(self, text: str, task: dict) -> str:
        """The teacher prompt of a row (agentrl_shared.skills: official selection and block position)."""
        return teacher_prompt(text, teacher_skills(self.env_config.name, task, text), self.args.skill_position)

    def _student_skill_transform(self, text: str, task: dict) -> str:
        """Skill-GRPO / Skill-Prompt*: skills at the start of the student's user message (main_skill_grpo)."""
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

    # --- overrides ---
    def _get_train_sampler(self, dataset=None) -> Sampler:
        per_step = self.episodes_per_rank * self.accelerator.num_processes
        num_samples = self.args.max_steps * self.args.gradient_accumulation_steps * per_step
        return GroupedTaskSampler(len(self.train_tasks), self.num_generations, self.args.seed, num_samples)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            if self.args.lr_scheduler_type not in ("constant", "constant_with_warmup", "linear", "cosine"):
                raise ValueError(
                    f"lr_scheduler_type={self.args.lr_scheduler_type!r} is not supported by SDARTrainer's "
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

    def _rollout_micro_batches(self, inputs: list[dict]) -> list[dict]:
        """Play one rollout, score it, plan its optimizer steps over all ranks; this rank's micro-batches in order."""
        start = time.perf_counter()
        device, world = self.accelerator.device, self.accelerator.num_processes
        G, rank = self.num_generations, self.accelerator.process_index
        self._set_rollout_lr(self.rollouts_done)
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
        self.rollouts_done += 1
        self.timings.update(self.collector.timings)
        self.collector.timings.clear()

        # Rewards and advantages (verl-agent `EpisodeRewardManager`, `compute_grpo_outcome_advantage`): every row of an
        # episode gets R = reward_scale * won, minus the penalty on invalid rows; GRPO over the rows of each group.
        # Rows of failed episodes neither enter the group statistics nor carry loss.
        rows = [r for e in episodes for r in e.rows]
        returns = torch.tensor([self.env_config.reward_scale * e.won for e in episodes for _ in e.rows])
        valid = torch.tensor([r.is_action_valid for r in rows], dtype=torch.bool)
        rewards = row_rewards(returns, valid, penalty_coef=self.args.invalid_action_penalty_coef)  # (N,)
        ok = torch.tensor([not r.failed for r in rows], dtype=torch.bool)
        advantages = torch.zeros_like(rewards)
        if ok.any():
            advantages[ok] = grpo_row_advantages(rewards[ok], torch.tensor([r.group_id for r in rows])[ok])
        advantages = self.args.pg_loss_coef * advantages  # pg_loss_coef=0: OPSD baseline (no RL term)

        # Every rank's rows, then the same plan on every rank (which rank trains which row, in which step)
        local = [
            (r.prompt_ids, r.completion_ids, not r.failed, a, r.teacher_prompt_ids)
            for r, a in zip(rows, advantages.tolist(), strict=True)
        ]
        all_rows = [row for part in self._all_ranks(local) for row in part]
        plan = plan_steps(
            [len(p) + len(c) for p, c, *_ in all_rows],
            [len(c) if keep else 0 for _, c, keep, *_ in all_rows],
            world,
            self.args.micro_batch_rows,
            self.args.gradient_accumulation_steps,
            random.Random(self.args.seed * 7919 + self.rollouts_done),
        )
        pad = self.processing_class.pad_token_id
        teacher = self.args.sdar_coef != 0.0
        micro_batches = []
        for k, index in enumerate(plan.micro_batches(rank)):
            chosen = [all_rows[i] for i in index]
            batch, _ = rows_to_batch(
                [p for p, *_ in chosen],
                [c for _, c, *_ in chosen],
                [keep for _, _, keep, *_ in chosen],
                [a for *_, a, _ in chosen],
                pad,
                teacher_prompts=[t for *_, t in chosen] if teacher else None,
            )
            batch = {key: value.to(device) for key, value in batch.items()}
            # the normaliser of this step's loss: real tokens of the step on all ranks / world (see `step_loss`)
            batch["token_normalizer"] = torch.tensor(max(plan.step_tokens[plan.step_of_micro_batch(k)], 1) / world)
            micro_batches.append(batch)

        # No-grad forwards in the training precision, one per micro-batch on every rank (ZeRO-3 lock-step)
        with torch.no_grad(), self.accelerator.autocast():
            for batch in micro_batches:
                ids = (batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])
                # theta_old: from the second optimizer step on the policy has moved (verl recomputes old log-probs);
                # with a single step the loss forward's detached log-probs are theta_old
                if plan.num_steps > 1:
                    t0 = time.perf_counter()
                    batch["old_per_token_logps"] = self._logps(self.model, *ids)
                    self.timings["old_logps_s"] += time.perf_counter() - t0
                if self.beta != 0.0:
                    t0 = time.perf_counter()
                    batch["ref_per_token_logps"] = self._logps(self.ref_model, *ids)
                    self.timings["ref_logps_s"] += time.perf_counter() - t0
                if teacher:
                    t0 = time.perf_counter()
                    t_ids, t_mask = batch["teacher_prompt_ids"], batch["teacher_prompt_mask"]
                    batch["teacher_per_token_logps"] = self._logps(self.model, t_ids, t_mask, *ids[2:])
                    self.timings["teacher_logps_s"] += time.perf_counter() - t0

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
                "rollout/row_reward_mean": rewards.mean().item() if len(rows) else 0.0,
                "rollout/rows_per_rank_max": float(max(len(r) for r in plan.ranks)),
                "completions/mean_length": sum(len(c) for _, c, *_ in all_rows) / max(n_rows, 1),
            }
        )
        if teacher:
            metrics["sdar/teacher_prompt_truncated_ratio"] = sum(
                part for part in self._all_ranks(sum(r.teacher_prompt_truncated for r in rows))
            ) / max(n_rows, 1)
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
        teacher = inputs.get("teacher_per_token_logps")
        loss, sums = step_loss(
            logps,
            entropies,
            mask,
            inputs["advantages"],
            inputs.get("old_per_token_logps", logps.detach()),
            inputs.get("ref_per_token_logps"),
            teacher,
            token_normalizer=inputs["token_normalizer"].item(),
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            clip_c=self.args.delta if self.args.delta is not None else math.inf,
            kl_coef=self.beta,
            entropy_coef=self.args.entropy_coef,
            sdar_coef=self.args.sdar_coef,
            gate_beta=self.args.gate_beta,
        )
        # metrics: token means over this micro-batch on all ranks (one all-reduce; every rank runs every micro-batch)
        names = sorted(sums)
        stats = torch.stack([sums[k] for k in names] + [mask.sum().to(logps.dtype)])
        if teacher is not None:
            g = gate_statistics(logps.detach(), teacher, mask, gate_beta=self.args.gate_beta)
            n = mask.sum().item()
            stats = torch.cat(
                [stats, torch.tensor([g[k] * n for k in sorted(g)], dtype=stats.dtype, device=stats.device)]
            )
        stats = self.accelerator.reduce(stats.float(), reduction="sum")
        tokens = stats[len(names)].item()
        if tokens > 0:
            mode = "train" if self.model.training else "eval"
            for i, key in enumerate(names):
                self._metrics[mode][{"pg": "policy_loss", "sdar": "sdar/loss"}.get(key, key)].append(
                    stats[i].item() / tokens
                )
            if teacher is not None:
                for j, key in enumerate(sorted(g)):
                    self._metrics[mode][f"sdar/{key}"].append(stats[len(names) + 1 + j].item() / tokens)
        return loss

    # --- evaluation on a fixed panel ---
    def evaluate_panel(self, tasks: list[dict], seeds: list[int], temperature: float) -> list[Episode]:
        """Play every (task, seed) of the panel without skills (unless `eval_with_skills`); every rank returns all
        episodes in rank-interleaved panel order. Ranks take interleaved slices and the same number of chunks of
        `env.eval_batch_size` episodes (one batched generation per turn for a whole chunk), so generation stays in
        lock-step; every rank must call this."""
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
