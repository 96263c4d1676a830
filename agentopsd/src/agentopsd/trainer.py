"""`AgentOPSDTrainer`: GRPO on per-turn agent rows whose advantage is reweighted by a recursive log-odds belief built
from a skill-conditioned self-teacher (AgentOPSD, arXiv 2608.05987; official code ZethWang/AgentOPSD@0c478b2).

The official trainer `verl/trainer/ppo/opsd_ray_trainer.py` is truncated in the release (it stops mid-token in the
actor update and calls an undefined `_compute_teacher_log_probs`); this trainer follows its visible order of
operations and completes it from SDAR's RLSD trainer, whose code it is a copy of (README "Deviations").
"""

import json
import random
from functools import partial

import torch
from trl import GRPOTrainer

from agentrl_shared.batch import fit_rows_to_batch
from agentrl_shared.envs import make_env
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.generation import sampling_overrides, trainer_generate_fn
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import Episode, RolloutCollector, episode_metrics
from agentrl_shared.skills import student_prompt, teacher_prompt, teacher_skills

from .config import ENV_TO_PROMPT, AgentOPSDConfig, EnvConfig
from .credit import (
    episode_turn_credit,
    group_mean_v0,
    linear_warmdown,
    rlsd_token_advantages,
    row_token_credit,
)
from .losses import grpo_row_advantages, row_rewards, skill_sd_loss


def environment_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: rewards come from the environment inside
    `_generate_and_score_completions`, so TRL's reward path is never called."""
    return [None] * len(completions)


class AgentOPSDTrainer(GRPOTrainer):
    """AgentOPSD: GRPO whose advantage is rescaled per turn (or per token) by the marginal revisions of a log-odds
    belief over task success, updated with the teacher-student log-prob gap of a skill-conditioned self-teacher.
    No loss term is added. Paper: https://arxiv.org/abs/2608.05987 (official code ZethWang/AgentOPSD@0c478b2).

    Rows are per turn (verl-agent style): the shared `RolloutCollector` plays `per_device_train_batch_size *
    steps_per_generation` episodes per rank (tasks repeated G times by TRL's sampler, so a group shares its task and
    seed), one batched generation per turn. The reweighting needs every turn of every episode, so the rollout-time
    student and teacher log-probs are computed on ALL rows (padded to the largest rank's row count, so ZeRO-3 ranks
    run the same forwards); then the rows are fitted to `steps_per_generation * micro_batch_rows` rows by the shared
    `fit_rows_to_batch` (SDAR now uses every row once: see that function).

    Overrides of [`~trl.GRPOTrainer`]:
    - `_generate_and_score_completions`: the multi-turn rollout; R_row = reward_scale * won - penalty * invalid;
      verl-agent GRPO advantages over the rows of each group (`losses.grpo_row_advantages`); then, in the official
      order, rollout-time student log-probs (`old_log_probs`), teacher log-probs (same weights, skills prepended,
      no grad, once per rollout), V_0 (`credit.group_mean_v0`) and the belief reweighting
          turn:  A_hat_k = A_k * ((1 - lam) + lam * m_k)  (`credit.turn_advantages`, per episode),
          token: A_hat_t = A * ((1 - lam) + lam * m_t)    (`credit.token_advantages`, per row),
      all before TRL's shuffle. `credit="rlsd"` swaps in the RLSD baseline's token weights, `credit="grpo"` keeps A.
    - `_compute_loss`: TRL's loss (clipped ratio with dual clip `delta`, k3 KL, entropy bonus, token-mean `bnpo`) with
      the (B,) or (B, T) advantages above; only the Skill-SD baseline (`sdl_coef > 0`) adds `losses.skill_sd_loss`.
    - `_get_per_token_logps_and_entropies`: unchanged, but keeps the loss forward's student log-probs for Skill-SD.
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
        self, model, args: AgentOPSDConfig, env_config: EnvConfig, train_dataset, processing_class=None, callbacks=None
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
                "AgentOPSDTrainer does not compute TRL's vLLM importance-sampling ratio (the reference loss has none); "
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
        eval_transform = self._student_skill_transform if args.eval_with_skills else None
        self.eval_collector = RolloutCollector(prompt_transform=eval_transform, **collector_kwargs)
        self._rng = random.Random(args.seed + self.accelerator.process_index)
        self.rollouts_done = 0
        self._capture_logps = False
        self._captured_logps = None

    # --- helpers ---
    def _skill_transform(self, text: str, task: dict) -> str:
        """The teacher prompt of a row (`build_teacher_batch`: official selection, `skill_position`)."""
        return teacher_prompt(text, teacher_skills(self.env_config.name, task, text), self.args.skill_position)

    def _student_skill_transform(self, text: str, task: dict) -> str:
        """Skill-GRPO / Skill-Prompt*: skills at the start of the student's user message."""
        return student_prompt(self.env_config.name, text, task)

    def _sync_active(self, n: int) -> int:
        """Active episodes over all ranks: every rank keeps generating while any rank has an active episode."""
        if self.accelerator.num_processes == 1:
            return n
        return int(self.accelerator.reduce(torch.tensor(n, device=self.accelerator.device), reduction="sum").item())

    def _global_max(self, n: int) -> int:
        if self.accelerator.num_processes == 1:
            return n
        return int(self.accelerator.reduce(torch.tensor(n, device=self.accelerator.device), reduction="max").item())

    def _logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask.clamp(max=1)], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), batch_size=self.args.micro_batch_rows
        )
        return logps  # (B, C)

    def _teacher_prompts(self, rows, tasks) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Skill block + the student's templated prompt, re-tokenised and left-truncated (`build_teacher_batch`)."""
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

    def _student_teacher_logps(self, rows, row_tasks, advantages) -> tuple[torch.Tensor, ...]:
        """Rollout-time student and teacher log-probs of EVERY row, (N, C), plus the completion mask (N, C).

        The batch is padded to the largest row count over ranks with zero-mask rows, so every rank runs the same
        number of forward chunks (ZeRO-3 lock-step)."""
        n = len(rows)
        full = fit_rows_to_batch(
            rows, advantages, self._global_max(n), self.processing_class.pad_token_id, self._rng, "zero",
            self.accelerator.device,
        )  # fmt: skip
        index = full["row_index"].tolist()  # the first n entries are rows 0..n-1 in order, then padding
        ids = (full["prompt_ids"], full["prompt_mask"], full["completion_ids"], full["completion_mask"])
        mode = "train" if self.model.training else "eval"
        with torch.no_grad(), self.accelerator.autocast():  # same precision as the loss forward
            # opsd_ray_trainer.py: `old_log_prob = actor.compute_log_prob(batch)`, then the teacher forward
            student = self._logps(self.model, *ids)
            t_ids, t_mask, t_trunc = self._teacher_prompts([rows[i] for i in index], [row_tasks[i] for i in index])
            teacher = self._logps(self.model, t_ids, t_mask, *ids[2:])
        self._metrics[mode]["agentopsd/teacher_prompt_truncated_ratio"].append(t_trunc)
        return student[:n].float(), teacher[:n].float(), full["completion_mask"][:n].float()

    def _credit(self, advantages, rewards, returns, rows, delta, mask) -> torch.Tensor:
        """AgentOPSD (or RLSD) advantages from the GRPO advantages and the gaps delta = l^T - l^S (N, C)."""
        a = self.args
        if a.credit == "rlsd":  # SDAR repo rlsd_ray_trainer.py: lambda decays linearly over `warmdown_steps`
            lam = linear_warmdown(a.rlsd_lambda, self.rollouts_done, a.rlsd_warmdown_steps)
            self._metrics["train"]["rlsd/lambda"].append(lam)
            if a.granularity == "token":
                return rlsd_token_advantages(advantages, delta, mask, lam=lam, clip=a.rlsd_clip)
            # AgentOPSD's `tether_seq` at turn granularity: the mean token gap of the turn in exp(sign(A) * .)
            w = torch.exp(torch.sign(advantages) * (delta * mask).sum(-1) / mask.sum(-1).clamp(min=1.0))
            return advantages * ((1.0 - lam) + lam * w.clamp(1.0 - a.rlsd_clip, 1.0 + a.rlsd_clip))
        group_ids = torch.tensor([r.group_id for r in rows])
        episode_ids = torch.tensor([r.episode_id for r in rows])
        ok = torch.tensor([not r.failed for r in rows])
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
            turn_idx = torch.tensor([r.turn_idx for r in rows])
            evidence = (delta * mask).sum(-1)  # (N,) e_k: SUM over the turn's response tokens
            # the raw telescoping ablation budgets the unpenalised episode return (`episode_rewards`)
            credit = episode_turn_credit(
                advantages, evidence, v0, episode_ids, turn_idx, returns=returns, **raw, **belief
            )
            turns = len(rows) / max(len(set(episode_ids.tolist())), 1)
            self._metrics["train"]["agentopsd/mean_turns_per_episode"].append(turns)
        else:  # the raw ablation budgets each row's own reward (a row's sum of token-level rewards)
            credit = row_token_credit(advantages, delta, mask, v0, returns=rewards, **raw, **belief)
        self._log_credit(advantages, credit, mask, v0, delta, lam)
        return credit

    def _log_credit(self, advantages, credit, mask, v0, delta, lam) -> None:
        """`agentopsd/*` metrics: the multiplier A_hat / A (0.5 + 0.5 m at the defaults), its clipped share, V_0 and
        the teacher-student gap (`opsd/teacher_student_gap_*` of the official trainer)."""
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
        self.rollouts_done += 1  # verl's `global_steps`: 1 at the first update (lambda schedules)
        rows = [r for e in episodes for r in e.rows]
        row_tasks = [e.task for e in episodes for _ in e.rows]
        if not rows:
            raise RuntimeError("Every episode of this rollout failed before its first turn; see env/failed_ratio.")

        # Rewards and GRPO advantages (verl-agent): failed episodes neither enter the group statistics nor carry loss.
        returns = torch.tensor([self.env_config.reward_scale * e.won for e in episodes for _ in e.rows])
        valid = torch.tensor([r.is_action_valid for r in rows])
        rewards = row_rewards(returns, valid, penalty_coef=self.args.invalid_action_penalty_coef)  # (N,)
        group_ids_N = torch.tensor([r.group_id for r in rows])
        ok = torch.tensor([not r.failed for r in rows])
        advantages = torch.zeros_like(rewards)
        if ok.any():
            advantages[ok] = grpo_row_advantages(rewards[ok], group_ids_N[ok])

        # --- AgentOPSD change: reshape the advantage before TRL's shuffle (opsd_ray_trainer.py, "adv" block) ---
        student = teacher = None
        if self.args.credit != "grpo":
            student, teacher, full_mask = self._student_teacher_logps(rows, row_tasks, advantages)
            advantages = self._credit(advantages, rewards, returns, rows, teacher - student, full_mask)

        budget = self.args.steps_per_generation * self.args.micro_batch_rows
        batch = fit_rows_to_batch(
            rows, advantages, budget, self.processing_class.pad_token_id, self._rng, self.args.row_padding, device
        )
        index = batch.pop("row_index")
        loss_row = batch.pop("loss_row")
        rows_dropped = batch.pop("rows_dropped")
        C = batch["completion_ids"].size(1)
        ids = (batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])
        with torch.no_grad(), self.accelerator.autocast():
            # several optimizer updates per rollout: the ratio needs theta_old log-probs (verl recomputes them too);
            # with one update per rollout TRL's own rule applies and the loss forward's detached log-probs stand in
            if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations) != 0:
                batch["old_per_token_logps"] = (
                    student[index, :C] if student is not None else self._logps(self.model, *ids)
                )
            if self.beta != 0.0:
                batch["ref_per_token_logps"] = self._logps(self.ref_model, *ids)
            if self.args.sdl_coef != 0.0:  # Skill-SD baseline: teacher log-probs of the kept rows
                if teacher is None:
                    idx = index.tolist()
                    t_ids, t_mask, _ = self._teacher_prompts([rows[i] for i in idx], [row_tasks[i] for i in idx])
                    teacher_B = self._logps(self.model, t_ids, t_mask, *ids[2:])
                else:
                    teacher_B = teacher[index, :C]
                batch["teacher_per_token_logps"] = teacher_B
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
        self._capture_logps = self.args.sdl_coef != 0.0
        loss = super()._compute_loss(model, inputs)
        if self.args.sdl_coef == 0.0:
            return loss
        # --- Skill-SD baseline: + sdl_coef * token-mean(rho * k3) (SDAR repo skillsd_utils.py) ---
        student_logps, self._captured_logps = self._captured_logps, None  # (B, C), with grad
        old = inputs.get("old_per_token_logps")
        old = student_logps.detach() if old is None else old  # one update per rollout: theta_old = theta
        sdl = skill_sd_loss(student_logps, inputs["teacher_per_token_logps"], old, inputs["completion_mask"])
        mode = "train" if self.model.training else "eval"
        normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        self._metrics[mode]["skillsd/loss"].append(sdl.item())
        return loss + self.args.sdl_coef * sdl / normalizer

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
                    trainer_generate_fn(self),
                    self._sync_active,
                )
        self.model.train(was_training)
        if world > 1:  # every rank gets all episodes (rank-interleaved order)
            from accelerate.utils import gather_object

            episodes = gather_object(episodes)
        return episodes
