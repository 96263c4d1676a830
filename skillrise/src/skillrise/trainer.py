"""`SkillRiseTrainer`: one policy solves K related tasks and curates a skill document between them (SkillRise).

Solve turns are credited with their own task's outcome, curate steps with the discounted outcomes of the later tasks
(`credit.trial_returns`); advantages are mean-centred per (group, position, role) over distinct trials
(`credit.mean_centered_advantages`), with no KL term and an invalid-format penalty of 0.5.
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
from agentrl_shared.rollout import episode_metrics

from .config import EnvConfig, SkillRiseConfig, make_base_prompt
from .credit import grpo_row_advantages, mean_centered_advantages, row_rewards, trial_returns
from .trial import Trial, TrialRunner


def environment_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: SkillRise's returns come from the trials
    inside `_generate_and_score_completions`, so TRL's reward path is never called."""
    return [None] * len(completions)


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


class SkillRiseTrainer(GRPOTrainer):
    """SkillRise: agentic RL for cross-task skill evolution (arXiv 2607.26784; official code Within-yao/SkillRise, read
    as imported by lyq1119/SkillRise-reproduction-and-refinement@79bbd91).

    One dataset row is one group of K related tasks; TRL's sampler repeats it `num_generations` (N) times, giving N
    trials of the group on one rank. `trial.TrialRunner` plays all trials of the rank together: per-turn solve rows
    (verl-agent style, one batched generation per turn) and one curate row per task boundary. The rows are fitted to
    `steps_per_generation * micro_batch_rows` rows (zero-loss padding or uniform subsampling, shared `fit_rows_to_batch`).

    Overrides of [`~trl.GRPOTrainer`]:
    - `_generate_and_score_completions`: runs the trials instead of TRL's single-turn generation; row returns from
      `credit.trial_returns` (solve: r_p; curate: sum_{j>p} traj_gamma^(j-p) r_j), minus 0.5 on invalid rows
      (`credit.row_rewards`); advantages by `credit.mean_centered_advantages` over keys (group, position, role)
      de-duplicated by trial (official `compute_skillrise_outcome_advantage`, mode `mean_norm`), curate rows scaled
      by `curate_loss_weight`; `advantage_mode="grpo"` uses verl-agent row GRPO instead (the GRPO baseline).
    Everything else is inherited: TRL's clipped loss with dual clip, `beta=0` (no KL, no reference model), entropy
    bonus, token-mean `bnpo`, generation back ends incl. vLLM, ZeRO-3, logging and checkpoints.
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
        self, model, args: SkillRiseConfig, env_config: EnvConfig, train_dataset, processing_class=None, callbacks=None
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
                "SkillRiseTrainer does not compute TRL's vLLM importance-sampling ratio (the reference loss has "
                "none); set vllm_importance_sampling_correction=False."
            )
        self.env_config = env_config
        self.trials_per_rank = args.per_device_train_batch_size * args.steps_per_generation
        if self.trials_per_rank % self.num_generations != 0:
            raise ValueError(
                f"per_device_train_batch_size * steps_per_generation = {self.trials_per_rank} trials per rank must be "
                f"a multiple of num_generations = {self.num_generations}, so that each group lives on one rank."
            )
        self.pool = EnvPool(
            partial(make_env, env_config.name, **env_config.env_kwargs),
            num_slots=self.trials_per_rank,
            timeout=env_config.step_timeout,
            num_workers=env_config.num_workers,
        )
        self.runner = self.make_runner(args.carry_mode)
        self._rng = random.Random(args.seed + self.accelerator.process_index)
        self.rollouts_done = 0

    def make_runner(self, carry_mode: str) -> TrialRunner:
        env = self.env_config
        return TrialRunner(
            self.pool, make_base_prompt(env), self.processing_class, env.name, env.max_turns, env.max_prompt_length,
            carry_mode, self.args.skill_max_chars, env.curate_history, env.curate_prefix,
            self.args.chat_template_kwargs,
        )  # fmt: skip

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

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        mode = "train" if self.model.training else "eval"
        device = self.accelerator.device
        G, rank, args = self.num_generations, self.accelerator.process_index, self.args
        groups = [json.loads(x["group_json"]) for x in inputs]
        n_groups = len(groups) // G
        base = (self.rollouts_done * self.accelerator.num_processes + rank) * n_groups
        group_ids = [base + i // G for i in range(len(groups))]
        # the N trials of a group start every task from the same state (verl-agent seed + i // group_n)
        seeds = [args.seed * 1_000_003 + g for g in group_ids]
        with self.accelerator.autocast():  # generation in the training precision
            trials = self.runner.run(
                groups, group_ids, seeds, trainer_generate_fn(self), self._sync_active, trial_offset=base * G
            )
        self.rollouts_done += 1
        rows, returns, positions, roles, trial_ids = trial_row_returns(trials, self.env_config.reward_scale,
                                                                       args.traj_gamma)  # fmt: skip
        if not rows:
            raise RuntimeError("Every trial of this rollout failed before its first turn; see env/failed_ratio.")

        # Returns and advantages (official skillrise_credit_assignment + compute_skillrise_outcome_advantage); rows of
        # failed episodes (environment crash or timeout) neither enter the statistics nor carry loss.
        valid = torch.tensor([r.is_action_valid for r in rows])
        rewards = row_rewards(torch.tensor(returns), valid, penalty_coef=args.invalid_action_penalty_coef)  # (N,)
        ok = torch.tensor([not r.failed for r in rows])
        idx = ok.nonzero().flatten().tolist()
        advantages = torch.zeros_like(rewards)
        if idx and args.advantage_mode == "grpo":
            group_ids_N = torch.tensor([rows[i].group_id for i in idx])
            advantages[idx] = grpo_row_advantages(rewards[idx], group_ids_N)
        elif idx:
            keys = [(rows[i].group_id, positions[i], roles[i]) for i in idx]
            advantages[idx] = mean_centered_advantages(
                rewards[idx], keys, [trial_ids[i] for i in idx], mode=args.advantage_mode
            )
        is_carry = torch.tensor([r != "play" for r in roles])
        advantages = torch.where(is_carry, advantages * args.curate_loss_weight, advantages)

        budget = args.steps_per_generation * args.micro_batch_rows
        batch = fit_rows_to_batch(rows, advantages, budget, self.processing_class.pad_token_id, self._rng,
                              args.row_padding, device)  # fmt: skip
        batch.pop("row_index")
        loss_row = batch.pop("loss_row")
        rows_dropped = batch.pop("rows_dropped")
        ids = (batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])
        with torch.no_grad(), self.accelerator.autocast():
            # several optimizer updates per rollout: the ratio needs theta_old log-probs (verl recomputes them too)
            if args.gradient_accumulation_steps % (args.steps_per_generation * self.num_iterations) != 0:
                batch["old_per_token_logps"] = self._logps(self.model, *ids)
            if self.beta != 0.0:
                batch["ref_per_token_logps"] = self._logps(self.ref_model, *ids)
        batch["num_items_in_batch"] = self.accelerator.gather(batch["completion_mask"].sum()).sum()

        for key, value in self.trial_metrics(trials, rows, roles, rewards).items():
            self._metrics[mode][key].append(value)
        self._metrics[mode]["rollout/rows_dropped"].append(float(rows_dropped))
        self._metrics[mode]["rollout/loss_rows_ratio"].append(loss_row.float().mean().item())
        return batch

    def trial_metrics(self, trials: list[Trial], rows, roles, rewards) -> dict[str, float]:
        """Success per position, curate parse rate, document length, generated tokens (README "Logged metrics")."""
        K = trials[0].K
        episodes = [ep for t in trials for ep in t.episodes if ep is not None]
        out = episode_metrics(episodes)
        for p in range(K):
            played = [t for t in trials if t.episodes[p] is not None and not t.episodes[p].failed]
            out[f"skillrise/success_pos{p}"] = sum(t.won(p) for t in played) / max(len(played), 1)
        carry = [r for r, role in zip(rows, roles, strict=True) if role != "play"]
        if carry:
            out["skillrise/curate_parse_ratio"] = sum(r.is_action_valid for r in carry) / len(carry)
            out["skillrise/document_chars"] = sum(len(r.action) for r in carry) / len(carry)
        out["skillrise/generated_tokens"] = float(sum(len(r.completion_ids) for r in rows))
        out["rollout/rows"] = float(len(rows))
        out["rollout/row_reward_mean"] = rewards.mean().item()
        out["rollout/generate_s"] = self.runner.timings.pop("generate_s", 0.0)
        out["rollout/env_s"] = self.runner.timings.pop("env_s", 0.0)
        out["completions/mean_length"] = out["skillrise/generated_tokens"] / len(rows)
        return out

    # --- evaluation protocols (official val_task_mode repeat / cross) ---
    def evaluate_trials(self, groups: list[list[dict]], seeds: list[int], temperature: float, carry_mode: str,
                        skip_won: bool) -> list[Trial]:  # fmt: skip
        """Play one trial per (group, seed); ranks take interleaved slices and the same number of chunks."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        pairs = [(g, s) for s in seeds for g in groups]
        mine = pairs[rank::world]
        slots = self.pool.num_slots
        n_chunks = -(-len(pairs) // (world * slots))
        runner = self.make_runner(carry_mode)
        trials: list[Trial] = []
        was_training = self.model.training
        self.model.eval()
        with sampling_overrides(self, temperature), self.accelerator.autocast():
            for c in range(n_chunks):
                chunk = mine[c * slots : (c + 1) * slots]
                trials += runner.run(
                    [g for g, _ in chunk], list(range(len(chunk))), [s for _, s in chunk], trainer_generate_fn(self),
                    self._sync_active, skip_won=skip_won,
                )  # fmt: skip
        self.model.train(was_training)
        if world > 1:
            from accelerate.utils import gather_object

            trials = gather_object(trials)
        return trials
