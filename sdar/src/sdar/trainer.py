"""`SDARTrainer`: GRPO on per-turn agent rows plus SDAR's gated self-distillation term.

Paper: SDAR, arXiv 2605.15155 (section 3); official code ZJU-REAL/SDAR@8b85c23 (`verl/trainer/ppo/sdar_utils.py`,
`examples/sdar_trainer/run_*.sh`) on verl-agent (langfengQ/verl-agent@796ed31). The teacher is the same policy with
privileged skills prepended to its prompt; its log-probs of the sampled tokens are computed once per rollout, before
any update (theta_old), and lambda * token-mean(g * (l_T - l_S)), g = sg(sigmoid(beta * (l_T - sg(l_S)))), is added
to the PPO actor loss.
"""

import math

import torch

from agentrl_shared.prompts import make_prompt
from agentrl_shared.trainer import MultiTurnGRPOTrainer

from .config import ENV_TO_PROMPT, EnvConfig, SDARConfig
from .losses import gate_statistics, step_loss, update_shares


class SDARTrainer(MultiTurnGRPOTrainer):
    """SDAR: GRPO with a sigmoid-gated on-policy self-distillation loss from a skill-conditioned self-teacher.
    Paper: https://arxiv.org/abs/2605.15155 (official code ZJU-REAL/SDAR@8b85c23).

    Rows are per turn (verl-agent); collection, planning (every row once, ceil(rows / mini-batch) optimizer steps of
    `gradient_accumulation_steps` micro-batches of `micro_batch_rows` rows per rank, each step's loss divided by its
    global real-token count), the rollout-counted schedule and checkpoints are [`~agentrl_shared.trainer.
    MultiTurnGRPOTrainer`]'s, whose GRPO row advantages (R_row = reward_scale * won - penalty * invalid, GRPO per
    group) SDAR keeps.

    Hooks of `MultiTurnGRPOTrainer`:
    - `_score`: the inherited advantages times `pg_loss_coef` (0 = the OPSD baseline, no RL term).
    - `_extra_forwards`: the self-teacher's log-probs of the sampled tokens, l_T, once per rollout at theta_old (the
      same policy on the skill-prefixed prompt), no-grad, in chunks of `log_prob_micro_batch_rows` rows.
    - `_row_meta`: each row's group and whether its episode was won (the all-fail groups of the update shares).
    - `_rollout_metrics`: adds `sdar/teacher_prompt_truncated_ratio`.
    Override of [`~trl.GRPOTrainer`]:
    - `_compute_loss`: one student forward (log-probs and entropies; the shared prompt prefix once per micro-batch
      with `shared_prefix_policy`), then `losses.step_loss`: dual-clip PPO, k3 KL
      to the reference, entropy bonus and `sdar_coef` x the gated distillation term (Eq. 5), over the step's tokens.
    Everything else (generation back ends incl. vLLM, weight sync, ZeRO-3, logging, checkpoints) is inherited.
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
        peft_config=None,
    ):
        super().__init__(model, args, env_config, train_tasks, processing_class, callbacks, peft_config)
        # training rows also record the teacher's prompt: the same turn with the skill block prepended; evaluation
        # prompts carry skills only for the `*` rows of Table 1 (Skill-Prompt*, Skill-GRPO*)
        self._build_collectors(
            make_prompt(ENV_TO_PROMPT[env_config.name], env_config.history_length),
            student_skills=args.skills_in_student_prompt,
            teacher=self.uses_teacher,
            eval_skills=args.eval_with_skills,
        )

    # --- hooks of MultiTurnGRPOTrainer ---
    @property
    def uses_teacher(self) -> bool:
        return self.args.sdar_coef != 0.0

    def _score(self, episodes):
        """verl-agent GRPO row advantages (inherited), times `pg_loss_coef` (0: the OPSD baseline, no RL term)."""
        rows, advantages = super()._score(episodes)
        return rows, self.args.pg_loss_coef * advantages

    def _row_meta(self, row) -> dict:
        return {"group_id": row.group_id, "won": row.episode_return > 0}

    def _extra_forwards(self, micro_batches, indices, rows, plan, old) -> None:
        """The self-teacher's log-probs l_T of the sampled tokens (Eq. 5), once per rollout at theta_old: the same
        policy on the skill-prefixed prompt, no-grad, in chunks of `log_prob_micro_batch_rows` rows (verl's
        `compute_log_prob` batch size), the same forwards on every rank (the skill block run once per chunk with
        `shared_prefix_teacher`). For the logged update shares, each token is also flagged when its group's episodes
        all failed (GRPO's advantage is 0 there: the update on it is SDAR's alone)."""
        if self.uses_teacher:
            teacher = self._teacher_row_logps(rows, plan)
            self._to_micro_batches(teacher, micro_batches, indices, "teacher_per_token_logps")
            won_groups = {r.meta["group_id"] for r in rows if r.carries_loss and r.meta["won"]}
            all_fail = {i: torch.full_like(teacher[i], float(rows[i].meta["group_id"] not in won_groups))
                        for i in teacher}  # fmt: skip
            self._to_micro_batches(all_fail, micro_batches, indices, "all_fail_group")

    def _rollout_metrics(self, episodes, rows) -> dict[str, float]:
        metrics = super()._rollout_metrics(episodes, rows)
        if self.uses_teacher:
            truncated, n_rows = self._sum_ranks(sum(r.teacher_prompt_truncated for r in rows), len(rows))
            metrics["sdar/teacher_prompt_truncated_ratio"] = truncated / max(n_rows, 1)
        return metrics

    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"]
        # (B, C) each, with grad; `shared_prefix_policy`: the rows' shared prompt prefix runs once
        logps, entropies = self._policy_forward(model, inputs, shared_prefix=self.args.shared_prefix_policy)
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
        # metrics: token means over this micro-batch on all ranks
        rename = {"pg": "policy_loss", "sdar": "sdar/loss"}
        logged = {rename.get(k, k): v for k, v in sums.items()}
        if teacher is not None:
            n = mask.sum()
            for key, value in gate_statistics(logps.detach(), teacher, mask, gate_beta=self.args.gate_beta).items():
                logged[f"sdar/{key}"] = value * n  # a token mean back to a token sum
            self._log_mechanism(logps.detach(), teacher, mask, inputs["advantages"], inputs["all_fail_group"])
        self._log_token_means(logged, mask.sum())
        return loss

    def _log_mechanism(self, logps, teacher, mask, advantages, all_fail) -> None:
        """Where SDAR's term acts, over each micro-batch's tokens on all ranks (`update_shares`): the gate's mean on
        tokens the teacher endorses (gap > 0) and rejects (gap < 0), and SDAR's share of the update, overall and on
        the rows of all-fail groups (where GRPO's advantage is 0)."""
        shares = update_shares(logps, teacher, mask, advantages, all_fail, sdar_coef=self.args.sdar_coef,
                               gate_beta=self.args.gate_beta)  # fmt: skip
        self._log_ratios({f"sdar/{name}": ratio for name, ratio in shares.items()})
