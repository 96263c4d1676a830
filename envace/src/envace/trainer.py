"""`EnvACETrainer`: role-wise GRPO over the caller and rehearsal rows of EnvACE episodes (official code
Within-yao/EnvACE@173e941; paper https://arxiv.org/abs/2608.06197)."""

import json
import random

import torch
from trl import GRPOTrainer

from agentrl_shared.batch import fit_rows_to_batch
from agentrl_shared.generation import HFGenerator, sampling_overrides, trainer_generate_fn

from .advantages import rolewise_advantages
from .config import EnvACEConfig, EnvConfig
from .rehearsal import ExternalSimulator, RehearsalCollector, Trajectory, trajectory_metrics
from .reward import EndpointJudge, RuleJudge


def checklist_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: EnvACE's rewards come from the checklist
    judge inside the rollout (`_generate_and_score_completions`), so TRL's reward path is never called."""
    return [None] * len(completions)


def make_judge(args: EnvACEConfig):
    if args.judge == "rule":
        return RuleJudge()
    return EndpointJudge(args.judge_url, args.judge_model, args.judge_temperature, args.judge_top_p,
                         args.judge_max_tokens, args.judge_retries)  # fmt: skip


def make_collector(args: EnvACEConfig, env: EnvConfig, tokenizer, tool_return_mode: str,
                   judged: bool = True) -> RehearsalCollector:  # fmt: skip
    external = None
    if tool_return_mode == "external":
        external = ExternalSimulator(args.external_simulator_url, args.external_simulator_model,
                                     think=args.simulator_think)  # fmt: skip
    return RehearsalCollector(
        tokenizer, make_judge(args) if judged else None, tool_return_mode, external,
        max_prompt_length=env.max_prompt_length, max_completion_length=args.max_completion_length,
        max_model_len=env.max_model_len, max_steps=env.max_steps, max_assistant_turns=env.max_assistant_turns,
        max_user_turns=env.max_user_turns, max_parallel_calls=env.max_parallel_calls,
        chat_template_kwargs=args.chat_template_kwargs, tools_in_system_prompt=env.tools_in_system_prompt,
        simulator_think=args.simulator_think, terminate_on_judge_failure=args.terminate_on_judge_failure,
    )  # fmt: skip


class EnvACETrainer(GRPOTrainer):
    """EnvACE: one policy plays the tool caller and the rehearsal role (it writes the tool responses the caller then
    conditions on); both roles are trained jointly from the checklist task reward with role-wise GRPO advantages.
    Paper: https://arxiv.org/abs/2608.06197 (official code Within-yao/EnvACE@173e941).

    Rows are per generation (verl-agent style): `rehearsal.RehearsalCollector` plays
    `per_device_train_batch_size * steps_per_generation` episodes per rank (tasks repeated G times by TRL's sampler:
    a group is one uid), batching every caller generation of a phase in one call and every rehearsal generation in
    another. The rows are fitted to `steps_per_generation * micro_batch_rows` rows (copies of random rows when short,
    verl-agent `adjust_batch`); `gradient_accumulation_steps = steps_per_generation` makes that one optimizer step
    per rollout (`ppo_mini_update_num=1`), and `loss_type="dapo"` divides by the rollout's global token count
    (`loss_agg_mode=token-mean`).

    Overrides of [`~trl.GRPOTrainer`]:
    - `_generate_and_score_completions`: runs the two-role rollout instead of TRL's single-turn generation; the
      episode reward R = sum_turns s_turn / (num_checklists * num_turns) (`reward.episode_reward`) goes on every row
      of both roles; A = R - mean over the rows of the same (uid, role), no std (`advantages.rolewise_advantages`);
      with `model_sharing=False` the rehearsal rows come from a separate frozen model and carry no loss.
    Everything else (the PPO-clip loss with dual clip `delta`, generation back ends incl. vLLM, weight sync, ZeRO-3,
    logging, checkpoints) is inherited unchanged.
    """

    _tag_names = ["trl", "envace", "agent-rl"]
    _name = "EnvACE"
    _paper = {
        "title": "Internalizing Environment Dynamics via World Rehearsal for Agentic RL",
        "id": "2608.06197",
        "citation": (
            "@article{xu2026envace,\n  title={Internalizing Environment Dynamics via World Rehearsal for Agentic RL},"
            "\n  author={Xu, Zishan and Yao, Zhiyuan and others},\n  journal={arXiv preprint arXiv:2608.06197},"
            "\n  year={2026}\n}"
        ),
    }

    def __init__(self, model, args: EnvACEConfig, env_config: EnvConfig, train_dataset, processing_class=None,
                 callbacks=None):  # fmt: skip
        super().__init__(
            model=model,
            reward_funcs=checklist_reward,
            args=args,
            train_dataset=train_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
        )
        self.env_config = env_config
        episodes = args.per_device_train_batch_size * args.steps_per_generation
        if episodes % self.num_generations != 0:
            raise ValueError(
                f"per_device_train_batch_size * steps_per_generation = {episodes} episodes per rank must be a multiple "
                f"of num_generations = {self.num_generations}, so that each group lives on one rank."
            )
        self.collector = make_collector(args, env_config, self.processing_class, args.tool_return_mode)
        self.simulator_generate = None
        if args.tool_return_mode == "agent" and not args.model_sharing:
            from transformers import AutoModelForCausalLM

            sim = AutoModelForCausalLM.from_pretrained(args.simulator_model or model).to(self.accelerator.device)
            self.simulator_generate = HFGenerator(sim, self.processing_class, args.max_completion_length,
                                                  args.temperature, args.top_p)  # fmt: skip
        self._rng = random.Random(args.seed + self.accelerator.process_index)
        self.rollouts_done = 0

    def _sync_active(self, n: int) -> int:
        """Active work summed over ranks: every rank generates while any rank has work."""
        if self.accelerator.num_processes == 1:
            return n
        return int(self.accelerator.reduce(torch.tensor(n, device=self.accelerator.device), reduction="sum").item())

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        mode = "train" if self.model.training else "eval"
        device = self.accelerator.device
        G, rank = self.num_generations, self.accelerator.process_index
        tasks = [json.loads(x["task_json"]) for x in inputs]
        base = (self.rollouts_done * self.accelerator.num_processes + rank) * (len(tasks) // G)
        group_ids = [base + i // G for i in range(len(tasks))]  # uid: the G rollouts of one prompt
        with self.accelerator.autocast():
            trajs = self.collector.collect(tasks, group_ids, trainer_generate_fn(self), self.simulator_generate,
                                           self._sync_active, episode_offset=base * G)  # fmt: skip
        self.rollouts_done += 1
        trained = ("caller",) if self.simulator_generate is not None else ("caller", "simulator")
        rows = [r for t in trajs for r in t.rows if r.role in trained]
        if not rows:
            raise RuntimeError("No rows in this rollout (every episode ended before its first generation).")
        # the same scalar R on every row of both roles (official reward_manager/checklist.py)
        reward_of = {t.episode_id: t.reward for t in trajs}
        rewards = torch.tensor([reward_of[r.episode_id] for r in rows], dtype=torch.float32)  # (N,)
        advantages = rolewise_advantages(rewards, [r.group_id for r in rows], [r.role for r in rows])  # (N,)

        budget = self.args.steps_per_generation * self.args.micro_batch_rows
        batch = fit_rows_to_batch(
            rows, advantages, budget, self.processing_class.pad_token_id, self._rng, self.args.row_padding, device
        )
        batch.pop("row_index")
        loss_row = batch.pop("loss_row")
        rows_dropped = batch.pop("rows_dropped")
        if self.beta != 0.0:
            with torch.no_grad(), self.accelerator.autocast():
                ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
                mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
                batch["ref_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.ref_model, ids, mask, batch["completion_ids"].size(1), batch_size=self.args.micro_batch_rows
                )
        batch["num_items_in_batch"] = self.accelerator.gather(batch["completion_mask"].sum()).sum()

        metrics = trajectory_metrics(trajs)
        metrics.update(
            {
                "rollout/rows": float(len(rows)),
                "rollout/rows_dropped": float(rows_dropped),
                "rollout/loss_rows_ratio": loss_row.float().mean().item(),
                "rollout/generate_caller_s": self.collector.timings.pop("generate_caller_s", 0.0),
                "rollout/generate_simulator_s": self.collector.timings.pop("generate_simulator_s", 0.0),
                "rollout/judge_s": self.collector.timings.pop("judge_s", 0.0),
                "completions/mean_length": float(sum(len(r.completion_ids) for r in rows) / len(rows)),
            }
        )
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        return batch

    def evaluate_panel(self, tasks: list[dict], seeds: list[int], collector: RehearsalCollector) -> list[Trajectory]:
        """Play every (task, seed) of the panel with `collector` (real tools by default), sampled at the evaluation
        temperature; ranks take interleaved slices in lock-step and every rank gets all trajectories."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        pairs = [(t, s) for s in seeds for t in tasks]
        mine = pairs[rank::world]
        slots = self.args.per_device_train_batch_size * self.args.steps_per_generation
        n_chunks = -(-len(pairs) // (world * slots))
        out: list[Trajectory] = []
        was_training = self.model.training
        self.model.eval()
        with sampling_overrides(self, self.env_config.eval_temperature), self.accelerator.autocast():
            for c in range(n_chunks):
                chunk = mine[c * slots : (c + 1) * slots]
                out += collector.collect([t for t, _ in chunk], list(range(len(chunk))), trainer_generate_fn(self),
                                         None, self._sync_active)  # fmt: skip
        self.model.train(was_training)
        if world > 1:
            from accelerate.utils import gather_object

            out = gather_object(out)
        return out
