"""`AgentOPSDTrainer`: GRPO on per-turn agent rows whose advantage is reweighted by a recursive log-odds belief built
from a skill-conditioned self-teacher (AgentOPSD, arXiv 2608.05987; official code ZethWang/AgentOPSD@0c478b2).

The official trainer `verl/trainer/ppo/opsd_ray_trainer.py` is truncated in the release (it stops mid-token in the
actor update and calls an undefined `_compute_teacher_log_probs`); this trainer follows its visible order of
operations and completes it from SDAR's RLSD trainer, whose code it is a copy of (README "Deviations").
"""

import math

import torch

from agentrl_shared.prompts import make_prompt
from agentrl_shared.trainer import MultiTurnGRPOTrainer

from .config import ENV_TO_PROMPT, AgentOPSDConfig, EnvConfig
from .credit import (
    blamed_turns,
    episode_turn_credit,
    group_mean_v0,
    linear_warmdown,
    rlsd_token_advantages,
    row_token_credit,
)
from .losses import step_loss


class AgentOPSDTrainer(MultiTurnGRPOTrainer):
    """AgentOPSD: GRPO whose advantage is rescaled per turn (or per token) by the marginal revisions of a log-odds
    belief over task success, updated with the teacher-student log-prob gap of a skill-conditioned self-teacher.
    No loss term is added. Paper: https://arxiv.org/abs/2608.05987 (official code ZethWang/AgentOPSD@0c478b2).

    Rows are per turn (verl-agent); collection, GRPO row advantages, planning (every row once, ceil(rows /
    mini-batch) optimizer steps, each step's loss divided by its global real-token count), the rollout-counted
    learning-rate schedule (the lambda schedules count rollouts too) and checkpoints are
    [`~agentrl_shared.trainer.MultiTurnGRPOTrainer`]'s.

    The reweighting needs every turn of every episode before any update, in the official order
    (`opsd_ray_trainer.py`: `old_log_prob`, then the teacher forward, then the "adv" block): the rollout-time student
    log-probs and the teacher log-probs (same weights, skill-prefixed prompts, no grad) are computed once per row, in
    chunks of `log_prob_micro_batch_rows` rows (every rank runs the same number of forwards, ZeRO-3 lock-step; with
    `student_logps="generation"` the student's come from HF generation's own logits instead, no forward); the
    per-row gaps delta = l^T - l^S are all-gathered, and every rank computes the same advantages for all rows:
        turn:  A_hat_k = A_k * ((1 - lam) + lam * m_k)  (`credit.turn_advantages`, per episode),
        token: A_hat_t = A * ((1 - lam) + lam * m_t)    (`credit.token_advantages`, per row).
    `credit="rlsd"` swaps in the RLSD baseline's token weights, `credit="grpo"` keeps A (and skips both forwards).

    Hooks of `MultiTurnGRPOTrainer`:
    - `_extra_forwards`: the teacher forward and the reshaped advantages above (`_credit`: Eqs. of `credit.py`).
    - `_row_meta`: group, episode, turn, row reward and episode return of every row (the belief recursion's input).
    - `_rollout_metrics`: adds `agentopsd/teacher_prompt_truncated_ratio` and the credit accuracy on episodes whose
      environment labels the first wrong step (`_credit_accuracy`).
    Override of [`~trl.GRPOTrainer`]:
    - `_compute_loss`: one student forward, then `losses.step_loss`: dual-clip PPO with the (B,) or (B, T)
      advantages above, k3 KL to the reference, entropy bonus, all over the step's tokens; only the Skill-SD baseline
      (`sdl_coef > 0`) adds a term.
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
        peft_config=None,
    ):
        super().__init__(model, args, env_config, train_tasks, processing_class, callbacks, peft_config)
        # the teacher's prompt of every row: the same turn with the skill block (`build_teacher_batch`), recorded
        # by the collector, tokenised and left-truncated like the student's
        self._build_collectors(
            make_prompt(ENV_TO_PROMPT[env_config.name], env_config.history_length),
            student_skills=args.skills_in_student_prompt,
            teacher=self.uses_teacher,
            eval_skills=args.eval_with_skills,
        )

    # --- hooks of MultiTurnGRPOTrainer ---
    @property
    def uses_teacher(self) -> bool:
        return self.args.credit != "grpo" or self.args.sdl_coef != 0.0

    @property
    def records_generation_logps(self) -> bool:
        return self.args.credit != "grpo" and self.args.student_logps == "generation"

    def _row_meta(self, row) -> dict:
        """What the belief recursion reads of a row after the gather (`credit.episode_turn_credit`)."""
        return {"group_id": row.group_id, "episode_id": row.episode_id, "turn_idx": row.turn_idx,
                "reward": row.reward, "return": row.episode_return}  # fmt: skip

    def _extra_forwards(self, micro_batches, indices, rows, plan, old) -> None:
        """The teacher forward and the advantage reshaping, before any update, in the official order
        (`opsd_ray_trainer.py`: `old_log_prob = actor.compute_log_prob(batch)`, then the teacher forward on
        `build_teacher_batch`, then the "adv" block). Once per row, in chunks of `log_prob_micro_batch_rows` rows
        (verl's `compute_log_prob` batch size), the same number of forwards on every rank (ZeRO-3 lock-step); the
        per-row gaps delta = l^T - l^S are all-gathered and every rank computes the same advantages for all rows
        (`_credit`)."""
        if not self.uses_teacher:
            return
        reweight = self.args.credit != "grpo"
        teacher = self._teacher_row_logps(rows, plan)  # global row index -> (C_i,) l^T
        if self.args.sdl_coef != 0.0:  # Skill-SD baseline: its loss term reads the teacher
            self._to_micro_batches(teacher, micro_batches, indices, "teacher_per_token_logps")
        if not reweight:
            return
        # the rollout-time student log-probs l^S (theta_old): the base's recompute where it ran one (several
        # optimizer steps, or the vLLM gap); else, with `student_logps="generation"`, those HF generation recorded
        # from the logits it sampled with (`records_generation_logps`); else a forward of their own in the same chunks
        if old is not None:
            student = old
        elif self.args.student_logps == "generation":
            student = {i: torch.tensor(rows[i].sampling_logps).to(teacher[i]) for i in teacher}
        else:
            forward = self._logps_of(self.model, shared_prefix=self.args.shared_prefix_policy)
            student = self._row_logps(rows, plan, forward, "old_logps_s")
        gaps = {i: (teacher[i] - student[i]).float().cpu() for i in teacher}  # (C_i,) delta = l^T - l^S

        # --- AgentOPSD change: reshape the advantages of all rows before any update (opsd_ray_trainer.py, "adv") ---
        for part in self._all_ranks(gaps):  # every rank gets every row's gaps and computes the same credit
            gaps.update(part)
        n, C = len(rows), max(max(len(r.completion_ids) for r in rows), 1)
        delta, mask = torch.zeros(n, C), torch.zeros(n, C)
        for i, r in enumerate(rows):
            delta[i, : len(r.completion_ids)] = gaps[i]
            mask[i, : len(r.completion_ids)] = float(r.carries_loss)
        meta = {
            "advantages": torch.tensor([r.advantage for r in rows]),
            "rewards": torch.tensor([r.meta["reward"] for r in rows]).float(),
            "returns": torch.tensor([r.meta["return"] for r in rows]).float(),
            "group_ids": torch.tensor([r.meta["group_id"] for r in rows]),
            "episode_ids": torch.tensor([r.meta["episode_id"] for r in rows]),
            "turn_idx": torch.tensor([r.meta["turn_idx"] for r in rows]),
            "ok": torch.tensor([r.carries_loss for r in rows], dtype=torch.bool),
        }
        credit = self._credit(meta, delta, mask)  # (N,) or (N, C)
        for index, batch in zip(indices, micro_batches, strict=True):
            if not index:  # an empty micro-batch: its one pad row carries no loss
                continue
            adv = credit[index]
            if adv.dim() == 2:
                adv = adv[:, : batch["completion_ids"].size(1)]
            keep = batch["completion_mask"].any(dim=1).float().cpu()
            batch["advantages"] = (
                (adv * keep.view(-1, *([1] * (adv.dim() - 1)))).float().to(batch["advantages"].device)
            )

    def _rollout_metrics(self, episodes, rows) -> dict[str, float]:
        metrics = super()._rollout_metrics(episodes, rows)
        if self.uses_teacher:
            truncated, n_rows = self._sum_ranks(sum(r.teacher_prompt_truncated for r in rows), len(rows))
            metrics["agentopsd/teacher_prompt_truncated_ratio"] = truncated / max(n_rows, 1)
        if self.uses_teacher and self.args.credit == "agentopsd":
            metrics |= self._credit_accuracy(episodes)
        return metrics

    def _credit_accuracy(self, episodes) -> dict[str, float]:
        """How often the belief's most blamed turn (`credit.blamed_turns`) is the first wrong step of a failed episode
        of two or more turns, where the environment labels it (`info["first_wrong_step"]`, TextRooms chains), with
        the run's prior and with a 0.5 prior side by side; `credit_chance`: a uniformly drawn turn's hit rate."""
        labelled = [e for e in episodes if not e.won and not e.failed and len(e.rows) > 1
                    and e.info.get("first_wrong_step") is not None]  # fmt: skip
        hits = [sum(self._blamed[k].get(e.episode_id) == e.info["first_wrong_step"] for e in labelled)
                for k in ("", "_prior_0.5")]  # fmt: skip
        n, official, half, chance = self._sum_ranks(len(labelled), *hits, sum(1 / len(e.rows) for e in labelled))
        if n == 0:
            return {}
        return {"agentopsd/credit_accuracy": official / n, "agentopsd/credit_accuracy_prior_0.5": half / n,
                "agentopsd/credit_chance": chance / n, "agentopsd/credit_episodes": n}  # fmt: skip

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
        rewards, group_ids, episode_ids = meta["rewards"], meta["group_ids"], meta["episode_ids"]
        v0 = self._v0(meta)
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
        evidence = (delta * mask).sum(-1)  # (N,) the turn evidence, at either granularity
        self._blamed = {"": blamed_turns(evidence, v0, episode_ids, meta["turn_idx"]),
                        "_prior_0.5": blamed_turns(evidence, 0.5, episode_ids, meta["turn_idx"])}  # fmt: skip
        return credit

    def _v0(self, meta: dict) -> torch.Tensor:
        """(N,) belief prior V_0 of each row: `compute_group_mean_v0` over the rows that carry a reward (0.5 on the
        others), or the fixed `v0_prior`."""
        a, rewards, ok = self.args, meta["rewards"], meta["ok"]
        if a.v0_prior is not None:
            return torch.full_like(rewards, a.v0_prior)
        v0 = torch.full_like(rewards, 0.5)
        if ok.any():
            v0[ok] = group_mean_v0(rewards[ok], meta["group_ids"][ok], meta["episode_ids"][ok],
                                   reward_scale=a.v0_reward_scale)  # fmt: skip
        return v0

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

    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"]
        # (B, C) each, with grad; `shared_prefix_policy`: the rows' shared prompt prefix runs once
        logps, entropies = self._policy_forward(model, inputs, shared_prefix=self.args.shared_prefix_policy)
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
        # metrics: token means over this micro-batch on all ranks
        rename = {"pg": "policy_loss", "sdl": "skillsd/loss"}
        self._log_token_means({rename.get(k, k): v for k, v in sums.items()}, mask.sum())
        return loss
