"""`SDARTrainer`: GRPO on per-turn agent rows plus SDAR's gated self-distillation term (papers/sdar.md).

The teacher is the same policy with privileged skills prepended to its prompt (sdar.md 2.8); its log-probs of the
sampled tokens are computed once per rollout, before any update (theta_old), and the term
lambda * token-mean(g * (l_T - l_S)), g = sg(sigmoid(beta * (l_T - sg(l_S)))), is added to TRL's clipped-ratio loss.
"""

import json
import random
from functools import partial

import torch
from trl import GRPOTrainer

from agentrl_shared.batch import rows_to_batch
from agentrl_shared.envs import make_env
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.generation import sampling_overrides, trainer_generate_fn
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import Episode, RolloutCollector, episode_metrics
from agentrl_shared.skills import student_prompt, teacher_prompt, teacher_skills

from .config import ENV_TO_PROMPT, EnvConfig, SDARConfig
from .losses import gate_statistics, gated_distillation_loss, grpo_row_advantages, row_rewards


def environment_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: SDAR's rewards come from the environment
    inside `_generate_and_score_completions`, so TRL's reward path is never called."""
    return [None] * len(completions)


class SDARTrainer(GRPOTrainer):
    """SDAR: GRPO with a sigmoid-gated on-policy self-distillation loss from a skill-conditioned self-teacher.
    Paper: https://arxiv.org/abs/2605.15155 (official code ZJU-REAL/SDAR@8b85c23).

    Rows are per turn (verl-agent style, trl-notes 16.1): the shared `RolloutCollector` plays
    `per_device_train_batch_size * steps_per_generation` episodes per rank (tasks repeated G times by TRL's sampler, so
    a group shares its task and seed), one batched generation per turn. The rows are fitted to
    `steps_per_generation * micro_batch_rows` rows (zero-loss padding or uniform subsampling), so each optimizer
    update sees `gradient_accumulation_steps * micro_batch_rows` rows per rank, the paper's mini-batch.

    Overrides of [`~trl.GRPOTrainer`]:
    - `_generate_and_score_completions`: runs the multi-turn rollout instead of TRL's single-turn generation; rewards
      R_row = 10 * won - 0.1 * invalid (sdar.md 2.3); verl-agent GRPO advantages over the rows of each group
      (`losses.grpo_row_advantages`, sdar.md 2.4) scaled by `pg_loss_coef`; old, reference and teacher log-probs
      (teacher = same weights, skills prepended, `skills.privileged_prompt`) in no-grad forwards of `micro_batch_rows`.
    - `_compute_loss`: TRL's loss (clipped ratio with dual clip `delta`, k3 KL, entropy bonus, token-mean `bnpo`) plus
      `sdar_coef * losses.gated_distillation_loss` on the same forward's student log-probs, divided by the
      accumulation steps like the policy term (trl-notes 4.1 trap 1).
    - `_get_per_token_logps_and_entropies`: unchanged, but keeps the student log-probs of the loss forward so the
      SDAR term needs no second forward.
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
        self, model, args: SDARConfig, env_config: EnvConfig, train_dataset, processing_class=None, callbacks=None
    ):
        super().__init__(
            model=model,
            reward_funcs=environment_reward,
            args=args,
            train_dataset=train_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
        )
        if self.use_vllm and self.vllm_importance_sampling_correction:
            raise ValueError(
                "SDARTrainer does not compute TRL's vLLM importance-sampling ratio (the reference loss has none); "
                "set vllm_importance_sampling_correction=False."
            )
        self.env_config = env_config
        self.episodes_per_rank = args.per_device_train_batch_size * args.steps_per_generation
        if self.episodes_per_rank % self.num_generations != 0:
            raise ValueError(
                f"per_device_train_batch_size * steps_per_generation = {self.episodes_per_rank} episodes per rank must "
                f"be a multiple of num_generations = {self.num_generations}, so that each group lives on one rank."
            )
        tok = self.processing_class
        # one pool for rollouts and evaluation passes (a rollout uses its first `episodes_per_rank` slots)
        self.eval_batch_size = env_config.eval_batch_size or self.episodes_per_rank
        self.pool = EnvPool(
            partial(make_env, env_config.name, **env_config.env_kwargs),
            num_slots=max(self.episodes_per_rank, self.eval_batch_size),
            timeout=env_config.step_timeout,
            num_workers=env_config.num_workers,
        )
        prompt = make_prompt(ENV_TO_PROMPT[env_config.name], env_config.history_length)
        student_transform = self._student_skill_transform if args.skills_in_student_prompt else None
        collector_kwargs = {
            "pool": self.pool,
            "prompt": prompt,
            "tokenizer": tok,
            "max_turns": env_config.max_turns,
            "max_prompt_length": env_config.max_prompt_length,
            "chat_template_kwargs": args.chat_template_kwargs,
        }
        self.collector = RolloutCollector(prompt_transform=student_transform, **collector_kwargs)
        # evaluation prompts carry skills only for the `*` rows of Table 1 (Skill-Prompt*, Skill-GRPO*)
        eval_transform = self._student_skill_transform if args.eval_with_skills else None
        self.eval_collector = RolloutCollector(prompt_transform=eval_transform, **collector_kwargs)
        self._rng = random.Random(args.seed + self.accelerator.process_index)
        self.rollouts_done = 0
        self._capture_logps = False
        self._captured_logps = None

    # --- helpers ---
    def _skill_transform(self, text: str, task: dict) -> str:
        """The teacher prompt of a row (agentrl_shared.skills: official selection and block position)."""
        return teacher_prompt(text, teacher_skills(self.env_config.name, task, text), self.args.skill_position)

    def _student_skill_transform(self, text: str, task: dict) -> str:
        """Skill-GRPO / Skill-Prompt*: skills at the start of the student's user message (main_skill_grpo)."""
        return student_prompt(self.env_config.name, text, task)

    def _sync_active(self, n: int) -> int:
        """Active episodes over all ranks: every rank keeps generating while any rank has an active episode."""
        if self.accelerator.num_processes == 1:
            return n
        return int(self.accelerator.reduce(torch.tensor(n, device=self.accelerator.device), reduction="sum").item())

    def _logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask.clamp(max=1)], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), batch_size=self.args.micro_batch_rows
        )
        return logps  # (B, C)

    def _teacher_prompts(self, rows, tasks) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Skill block + the student's templated prompt, re-tokenised and left-truncated (sdar.md 2.8)."""
        tok, limit = self.processing_class, self.env_config.max_prompt_length
        ids, truncated = [], 0
        for row, task in zip(rows, tasks, strict=True):
            text = self._skill_transform(row.prompt_text, task)
            t = tok(text, add_special_tokens=False).input_ids
            truncated += len(t) > limit
            ids.append(t[-limit:])
        P = max(len(t) for t in ids)
        prompt_ids = torch.full((len(ids), P), tok.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((len(ids), P), dtype=torch.long)
        for b, t in enumerate(ids):
            prompt_ids[b, P - len(t) :] = torch.tensor(t)
            prompt_mask[b, P - len(t) :] = 1
        device = self.accelerator.device
        return prompt_ids.to(device), prompt_mask.to(device), truncated / max(len(ids), 1)

    # --- overrides ---
    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        mode = "train" if self.model.training else "eval"
        device = self.accelerator.device
        G, rank = self.num_generations, self.accelerator.process_index
        tasks = [json.loads(x["task_json"]) for x in inputs]
        n_groups = len(tasks) // G
        base = (self.rollouts_done * self.accelerator.num_processes + rank) * n_groups
        group_ids = [base + i // G for i in range(len(tasks))]
        # verl-agent seeds env i with seed + i // G: the G members of a group start from the same state
        seeds = [self.args.seed * 1_000_003 + g for g in group_ids]
        with self.accelerator.autocast():  # generation in the training precision (bf16 autocast on CPU and GPU)
            episodes = self.collector.collect(
                tasks, group_ids, seeds, trainer_generate_fn(self), self._sync_active, episode_offset=base * G
            )
        self.rollouts_done += 1
        rows = [r for e in episodes for r in e.rows]
        row_tasks = [e.task for e in episodes for _ in e.rows]
        if not rows:
            raise RuntimeError("Every episode of this rollout failed before its first turn; see env/failed_ratio.")

        # Rewards and advantages (sdar.md 2.3-2.4): R_row = reward_scale * won - coef * invalid; failed episodes are
        # masked: they neither enter the group statistics nor carry loss.
        returns = torch.tensor([self.env_config.reward_scale * e.won for e in episodes for _ in e.rows])
        valid = torch.tensor([r.is_action_valid for r in rows])
        rewards = row_rewards(returns, valid, penalty_coef=self.args.invalid_action_penalty_coef)  # (N,)
        group_ids_N = torch.tensor([r.group_id for r in rows])
        ok = torch.tensor([not r.failed for r in rows])
        advantages = torch.zeros_like(rewards)
        if ok.any():
            advantages[ok] = grpo_row_advantages(rewards[ok], group_ids_N[ok])
        advantages = self.args.pg_loss_coef * advantages  # pg_loss_coef=0: OPSD baseline (no RL term)

        budget = self.args.steps_per_generation * self.args.micro_batch_rows
        batch = rows_to_batch(
            rows, advantages, budget, self.processing_class.pad_token_id, self._rng, self.args.row_padding, device
        )
        index = batch.pop("row_index").tolist()
        loss_row = batch.pop("loss_row")
        rows_dropped = batch.pop("rows_dropped")
        ids = (batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])
        with torch.no_grad(), self.accelerator.autocast():  # same precision as the loss forward
            # several optimizer updates per rollout: the ratio needs theta_old log-probs (verl recomputes them too);
            # with one update per rollout TRL's own rule applies and the loss forward's detached log-probs stand in
            if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations) != 0:
                batch["old_per_token_logps"] = self._logps(self.model, *ids)
            if self.beta != 0.0:
                batch["ref_per_token_logps"] = self._logps(self.ref_model, *ids)
            if self.args.sdar_coef != 0.0:
                t_ids, t_mask, t_trunc = self._teacher_prompts([rows[i] for i in index], [row_tasks[i] for i in index])
                batch["teacher_per_token_logps"] = self._logps(self.model, t_ids, t_mask, *ids[2:])
                self._metrics[mode]["sdar/teacher_prompt_truncated_ratio"].append(t_trunc)
        batch["num_items_in_batch"] = self.accelerator.gather(batch["completion_mask"].sum()).sum()

        metrics = episode_metrics(episodes)
        metrics.update(
            {
                "rollout/rows": float(len(rows)),
                "rollout/rows_dropped": float(rows_dropped),
                "rollout/loss_rows_ratio": loss_row.float().mean().item(),
                "rollout/row_reward_mean": rewards.mean().item(),
                "rollout/generate_s": self.collector.timings.pop("generate_s", 0.0),
                "rollout/env_s": self.collector.timings.pop("env_s", 0.0),
                "completions/mean_length": float(sum(len(r.completion_ids) for r in rows) / len(rows)),
            }
        )
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        return batch

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_logps:  # the first call inside `_compute_loss` is the student forward with grad
            self._captured_logps, self._capture_logps = out[0], False
        return out

    def _compute_loss(self, model, inputs):
        self._capture_logps = self.args.sdar_coef != 0.0
        loss = super()._compute_loss(model, inputs)
        if self.args.sdar_coef == 0.0:
            return loss
        student_logps, self._captured_logps = self._captured_logps, None  # (B, C), with grad
        mask = inputs["completion_mask"]
        teacher_logps = inputs["teacher_per_token_logps"]
        sdar_loss = gated_distillation_loss(student_logps, teacher_logps, mask, gate_beta=self.args.gate_beta)
        mode = "train" if self.model.training else "eval"
        # token-mean per micro-batch like `bnpo`, then scaled for accumulation (TRL's automatic scaling is off)
        normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = loss + self.args.sdar_coef * sdar_loss / normalizer
        stats = gate_statistics(student_logps, teacher_logps, mask, gate_beta=self.args.gate_beta)
        self._metrics[mode]["sdar/loss"].append(sdar_loss.item())
        for key, value in stats.items():
            self._metrics[mode][f"sdar/{key}"].append(value)
        return loss

    # --- evaluation on a fixed panel (sdar.md 6, 8 item 4) ---
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
                    trainer_generate_fn(self),
                    self._sync_active,
                )
        self.model.train(was_training)
        if world > 1:  # every rank gets all episodes (rank-interleaved order)
            from accelerate.utils import gather_object

            episodes = gather_object(episodes)
        return episodes
