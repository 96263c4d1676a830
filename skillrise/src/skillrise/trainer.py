"""`SkillRiseTrainer`: one policy solves K related tasks and curates a skill document between them (SkillRise).

Solve turns are credited with their own task's outcome, curate steps with the discounted outcomes of the later tasks
(`credit.trial_returns`); advantages are mean-centred per (group, position, role) over distinct trials
(`credit.mean_centered_advantages`), with no KL term and an invalid-format penalty of 0.5.
"""

import math
from collections import Counter

import torch

from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.gigpo import (
    discounted_step_returns,
    gigpo_advantages,
    step_group_counts,
    step_group_metrics,
    won_step_rewards,
)
from agentrl_shared.rollout import Row, episode_counts, metrics_from_counts
from agentrl_shared.trainer import MultiTurnGRPOTrainer, grpo_row_advantages, row_rewards

from .config import EnvConfig, SkillRiseConfig, make_env_factory, make_solve_prompt
from .credit import mean_centered_advantages, trial_returns
from .losses import step_loss
from .trial import Trial, TrialRunner, trial_record


def trial_row_returns(trials: list[Trial], reward_scale: float, gamma: float):
    """Per-row return, position, role and trial id, in `Trial.rows()` order (official `skillrise_credit_assignment`).

    Solve rows of task p get r_p; the carry row after task p gets sum_{j>p} gamma^(j-p) r_j.
    """
    rows, returns, positions, roles, trial_ids = [], [], [], [], []
    for t in trials:
        solve, curate = trial_returns(t.outcomes(reward_scale), gamma=gamma)
        for row, p in t.rows():
            rows.append(row)
            returns.append(solve[p] if row.role == "play" else curate[p])
            positions.append(p)
            roles.append(row.role)
            trial_ids.append(t.trial_id)
    return rows, returns, positions, roles, trial_ids


def gigpo_step_returns(trials: list[Trial], gamma: float, reward_scale: float) -> list[float]:
    """Per-row discounted step return, in `Trial.rows()` order, for the GiGPO baseline (core_gigpo.py
    `compute_step_discounted_returns`); its anchor is `Row.anchor`, the raw observation the row acted on. Carry rows
    have none (GiGPO runs without a carry phase).

    The step reward is `reward_scale * won` on an episode's last step and 0 before it (`won_step_rewards`), on the
    scale of the episode reward (`Trial.outcomes`)."""
    step_returns = []
    for t in trials:
        for ep in t.episodes:
            if ep is not None:
                rewards = won_step_rewards(len(ep.rows), ep.won, reward_scale=reward_scale)
                step_returns += discounted_step_returns(rewards, gamma=gamma)
    return step_returns


class SkillRiseTrainer(MultiTurnGRPOTrainer):
    """SkillRise: agentic RL for cross-task skill evolution (arXiv 2607.26784; official code Within-yao/SkillRise, read
    as imported by lyq1119/SkillRise-reproduction-and-refinement@79bbd91).

    One dataset item is one group of K related tasks; the sampler repeats it `num_generations` (N) times, giving N
    trials of the group on one rank. Collection (lock-step generation), planning (every row once, ceil(rows /
    mini-batch) optimizer steps of `gradient_accumulation_steps` micro-batches of `micro_batch_rows` rows per rank),
    the rollout-counted schedule, checkpoints and the panel evaluation on every rank are
    [`~agentrl_shared.trainer.MultiTurnGRPOTrainer`]'s.

    Hooks of `MultiTurnGRPOTrainer`:
    - `_collect`: `trial.TrialRunner` plays the rank's trials (SkillRise 2.2): per-turn solve rows through the shared
      `RolloutCollector` and one curate row per task boundary, every generation call sized by `_prompt_count`.
    - `_score`: row returns from `credit.trial_returns` (solve: r_p; curate: sum_{j>p} traj_gamma^(j-p) r_j,
      official `skillrise_credit_assignment`), minus 0.5 on invalid rows (`row_rewards`); advantages by
      `credit.mean_centered_advantages` over keys (group, position, role) de-duplicated by trial (official
      `compute_skillrise_outcome_advantage`, mode `mean_norm`), curate rows scaled by `curate_loss_weight`;
      `advantage_mode="grpo"` uses verl-agent row GRPO instead (`grpo_row_advantages`, the GRPO baseline),
      `advantage_mode="gigpo"` GiGPO (`agentrl_shared.gigpo.gigpo_advantages`: episode group + w x anchor-state step advantage).
    - `_max_rows_per_item`: K * max_turns solve rows + (K - 1) curate rows per trial.
    - `_rollout_metrics`: `env/*` over every task played, `skillrise/*` per position and for curate rows, summed over
      all ranks.
    Override of [`~trl.GRPOTrainer`]:
    - `_compute_loss`: one forward (log-probs and entropies), then `losses.step_loss`: dual-clip PPO (clip 0.2,
      c = 3) and the entropy bonus (0.001), no KL (`use_kl_loss=False`), token-mean over all of the optimizer step's
      tokens on every rank (verl `loss_agg_mode=token-mean`, through the micro-batches' `token_normalizer`).
    Everything else (generation back ends incl. vLLM, weight sync, ZeRO-3, logging, checkpoints) is inherited.
    """

    _tag_names = ["trl", "skillrise", "agent-rl"]
    _name = "SkillRise"
    _paper = {
        "title": "SkillRise: Agentic RL for Cross-Task Skill Evolution",
        "id": "2607.26784",
        "citation": (
            "@article{yao2026skillrise,\n  title={SkillRise: Agentic RL for Cross-Task Skill Evolution},\n"
            "  author={Yao, Zhiyuan and others},\n  journal={arXiv preprint arXiv:2607.26784},\n  year={2026}\n}"
        ),
    }

    def __init__(
        self,
        model,
        args: SkillRiseConfig,
        env_config: EnvConfig,
        train_groups: list[list[dict]],
        processing_class=None,
        callbacks=None,
        peft_config=None,
    ):
        self.group_size_k = args.group_size_k  # read by `_max_rows_per_item` inside the base constructor
        super().__init__(model, args, env_config, train_groups, processing_class, callbacks, peft_config)
        # one pool for rollouts and evaluation chunks: one slot per trial of the rank (a rollout uses the first
        # `episodes_per_rank`)
        self.eval_batch_size = env_config.eval_batch_size or self.episodes_per_rank
        self.pool = EnvPool(
            make_env_factory(env_config),
            num_slots=max(self.episodes_per_rank, self.eval_batch_size),
            timeout=env_config.step_timeout,
            num_workers=env_config.num_workers,
        )
        self.runner = self.make_runner(args.carry_mode)

    def make_runner(self, carry_mode: str) -> TrialRunner:
        env = self.env_config
        return TrialRunner(
            self.pool, make_solve_prompt(env), self.processing_class, env.name, env.max_turns, env.max_prompt_length,
            carry_mode, self.args.skill_max_chars, env.curate_history, env.curate_prefix,
            self.args.chat_template_kwargs, env.prompt_overflow,
        )  # fmt: skip

    # --- hooks of MultiTurnGRPOTrainer ---
    def _max_rows_per_item(self) -> int:
        K = self.group_size_k
        return K * self.env_config.max_turns + (K - 1)

    def _collect(self, items, group_ids, seeds, episode_offset) -> list[Trial]:
        """The rank's trials (SkillRise 2.2): the N trials of a group start every task from the same state."""
        trials = self.runner.run(items, group_ids, seeds, self._generate, K=self.group_size_k,
                                 prompt_count=self._prompt_count, trial_offset=episode_offset)  # fmt: skip
        self.timings.update(self.runner.timings)  # generate_s, env_s
        self.runner.timings.clear()
        return trials

    def _score(self, trials: list[Trial]) -> tuple[list[Row], torch.Tensor]:
        """Rows in trial order and their (N,) advantages (official `skillrise_credit_assignment` +
        `compute_skillrise_outcome_advantage`). Rows of failed episodes (environment crash or timeout) neither enter
        the statistics nor carry loss."""
        args = self.args
        rows, returns, positions, roles, trial_ids = trial_row_returns(trials, self.env_config.reward_scale,
                                                                       args.traj_gamma)  # fmt: skip
        valid = torch.tensor([r.is_action_valid for r in rows], dtype=torch.bool)
        returns_N = torch.tensor(returns, dtype=torch.float32)  # (N,)
        rewards = row_rewards(returns_N, valid, penalty_coef=args.invalid_action_penalty_coef)  # (N,)
        idx = [i for i, r in enumerate(rows) if not r.failed]
        advantages = torch.zeros_like(rewards)
        if idx and args.advantage_mode == "grpo":
            advantages[idx] = grpo_row_advantages(rewards[idx], torch.tensor([rows[i].group_id for i in idx]))
        elif idx and args.advantage_mode == "gigpo":  # the GiGPO baseline: carry_mode=none, every row a solve row
            step_returns = gigpo_step_returns(trials, args.step_gamma, self.env_config.reward_scale)
            advantages[idx] = gigpo_advantages(
                rewards[idx], [step_returns[i] for i in idx], [(rows[i].group_id, positions[i]) for i in idx],
                [rows[i].anchor for i in idx], step_advantage_w=args.step_advantage_w,
            )  # fmt: skip
        elif idx:
            keys = [(rows[i].group_id, positions[i], roles[i]) for i in idx]
            advantages[idx] = mean_centered_advantages(rewards[idx], keys, [trial_ids[i] for i in idx],
                                                       mode=args.advantage_mode)  # fmt: skip
        is_carry = torch.tensor([role != "play" for role in roles], dtype=torch.bool)
        advantages = torch.where(is_carry, advantages * args.curate_loss_weight, advantages)
        for r, reward, ret in zip(rows, rewards.tolist(), returns, strict=True):
            r.reward, r.episode_return = reward, ret
        return rows, advantages

    def _rollout_metrics(self, trials: list[Trial], rows: list[Row]) -> dict[str, float]:
        """Success per position, curate parse rate, document length, generated tokens (README "Logged metrics"),
        the shared `env/*` over every task played, and the GiGPO baseline's step-group sizes (`gigpo/*`); sums over
        all ranks (one all-gather)."""
        counts = Counter(episode_counts([ep for t in trials for ep in t.episodes if ep is not None]))
        for p in range(self.group_size_k):
            played = [t for t in trials if t.episodes[p] is not None and not t.episodes[p].failed]
            counts[f"pos{p}/played"] += len(played)
            counts[f"pos{p}/won"] += sum(t.won(p) for t in played)
        carry = [r for r in rows if r.role != "play"]
        counts["carry/rows"] += len(carry)
        counts["carry/valid"] += sum(r.is_action_valid for r in carry)
        counts["carry/document_chars"] += sum(len(r.action) for r in carry)
        counts["generated_tokens"] += sum(len(r.completion_ids) for r in rows)
        gigpo = self.args.advantage_mode == "gigpo"
        if gigpo:  # the step groups `_score` forms, ((group, position), anchor), over the rows it scores
            scored = [(r, p) for t in trials for r, p in t.rows() if not r.failed]
            counts.update(step_group_counts([(r.group_id, p) for r, p in scored], [r.anchor for r, _ in scored]))
        total = Counter()
        for part in self._all_ranks(dict(counts)):
            total.update(part)
        out = metrics_from_counts(total)
        for p in range(self.group_size_k):
            out[f"skillrise/success_pos{p}"] = total[f"pos{p}/won"] / max(total[f"pos{p}/played"], 1)
        if total["carry/rows"]:
            out["skillrise/curate_parse_ratio"] = total["carry/valid"] / total["carry/rows"]
            out["skillrise/document_chars"] = total["carry/document_chars"] / total["carry/rows"]
        out["skillrise/generated_tokens"] = float(total["generated_tokens"])
        return out | (step_group_metrics(total) if gigpo else {})

    # --- override of GRPOTrainer ---
    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"]
        logps, entropies = self._policy_forward(model, inputs)  # (B, C) each, with grad
        loss, sums = step_loss(
            logps,
            entropies,
            mask,
            inputs["advantages"],
            # theta_old: the base's no-grad forward when the rollout makes several optimizer steps, else theta
            inputs.get("old_per_token_logps", logps.detach()),
            token_normalizer=inputs["token_normalizer"].item(),
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            clip_c=self.args.delta if self.args.delta is not None else math.inf,
            entropy_coef=self.args.entropy_coef,
        )
        # metrics: token means over this micro-batch on all ranks
        self._log_token_means({"policy_loss": sums["pg"], "entropy": sums["entropy"]}, mask.sum())
        return loss

    # --- evaluation protocols (official val_task_mode repeat / cross) ---
    def evaluate_trials(self, groups: list[list[dict]], seeds: list[int], temperature: float, carry_mode: str,
                        skip_won: bool) -> list[dict]:  # fmt: skip
        """`trial_record` of one trial per (group, seed), every trial on every rank (the shared `_evaluate_items`:
        interleaved slices, the same number of chunks on every rank, an empty chunk still answers every collective).
        Every rank must call this."""
        runner = self.make_runner(carry_mode)
        K = len(groups[0])

        def play(chunk):
            trials = runner.run([g for g, _ in chunk], list(range(len(chunk))), [s for _, s in chunk],
                                self._generate, K=K, prompt_count=self._prompt_count, skip_won=skip_won)  # fmt: skip
            return [trial_record(t) for t in trials]

        return self._evaluate_items([(g, s) for s in seeds for g in groups], self.eval_batch_size, temperature, play)
