"""`EnvACETrainer`: role-wise GRPO over the caller and rehearsal rows of EnvACE episodes (official code
Within-yao/EnvACE@173e941; paper https://arxiv.org/abs/2608.06197)."""

import dataclasses
import json
import math
import random
from collections import defaultdict

import torch
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler, add_fused_lm_head

from agentrl_shared.batch import plan_steps, rows_to_batch
from agentrl_shared.generation import HFGenerator, sampling_overrides, trainer_generate_fn
from agentrl_shared.rollout import Row

from .advantages import rolewise_advantages
from .config import EnvACEConfig, EnvConfig
from .rehearsal import ExternalSimulator, RehearsalCollector, Trajectory, trajectory_metrics
from .reward import EndpointJudge, RuleJudge


def checklist_reward(completions, **kwargs) -> list[None]:
    """Placeholder for `GRPOTrainer(reward_funcs=...)`, which requires one: EnvACE's rewards come from the checklist
    judge inside the rollout, so TRL's reward path is never called."""
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


def slim(t: Trajectory) -> Trajectory:
    """What `trajectory_metrics` reads of an episode, without token ids and texts (gathered from every rank)."""
    rows = [dataclasses.replace(r, prompt_ids=[], completion_ids=[], prompt_text="", completion_text="", action="",
                                teacher_prompt_ids=None) for r in t.rows]  # fmt: skip
    return dataclasses.replace(t, task={}, messages=[], caller_ids=[], pending=[], caller_completion=[],
                               caller_text="", rows=rows)  # fmt: skip


def simulator_generate_fn(trainer: "EnvACETrainer"):
    """Generation of the separate rehearsal model (`model_sharing=False`): HF `generate` at the rollout sampling
    settings (a module-level function so that tests can script it, as they script `trainer_generate_fn`)."""
    args = trainer.args
    return HFGenerator(trainer.simulator, trainer.processing_class, args.max_completion_length, args.temperature,
                       args.top_p)  # fmt: skip


class EnvACETrainer(GRPOTrainer):
    """EnvACE: one policy plays the tool caller and the rehearsal role (it writes the tool responses the caller then
    conditions on); both roles are trained jointly from the checklist task reward with role-wise GRPO advantages.
    Paper: https://arxiv.org/abs/2608.06197 (official code Within-yao/EnvACE@173e941).

    Rows are per generation (verl-agent style): `rehearsal.RehearsalCollector` plays
    `per_device_train_batch_size * steps_per_generation` episodes per rank (tasks repeated G times by TRL's sampler:
    a group is one uid), batching every caller generation of a phase in one call and every rehearsal generation in
    another. The episode reward R = sum_turns s_turn / (num_checklists * num_turns) (`reward.episode_reward`) goes on
    every row of both roles; A = R - mean over the rows of the same (uid, role), no std
    (`advantages.rolewise_advantages`). Then every row of every rank is trained exactly once, in one optimizer step
    per rollout (`use_adaptive_ppo_mini_batch_size=True`, `ppo_mini_update_num=1`): `agentrl_shared.batch.plan_steps`
    balances the rows across ranks by tokens and cuts each rank's rows into `gradient_accumulation_steps` forwards of
    ceil(rows on the fullest rank / gradient_accumulation_steps) rows (one row per forward while the rollout has at
    most that many rows per rank, the official `ppo_micro_batch_size_per_gpu=1`); the step's loss is divided by the
    global count of real completion tokens (`loss_agg_mode=token-mean`, TRL's `loss_type="dapo"`).

    `model_sharing=False` (official `run_checklist_noshare.sh`): the rehearsal role is a second model with its own
    AdamW optimizer; the caller rows train the policy through the inherited loop, the rehearsal rows train the second
    model, one optimizer step per rollout each, with the same loss and hyperparameters.

    Overrides of [`~trl.GRPOTrainer`]:
    - `_prepare_inputs`: returns the next planned micro-batch, running a rollout (`_rollout_micro_batches`) when the
      previous rollout's are used up (replaces TRL's generation, reward and fixed `steps_per_generation` split).
    - `_get_train_sampler`: TRL's `RepeatSampler`, repeated `gradient_accumulation_steps` times per generation batch
      (one rollout per optimizer step) instead of `steps_per_generation` times.
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
        self.simulator = self.simulator_optimizer = None
        if args.tool_return_mode == "agent" and not args.model_sharing:
            self._init_simulator(args.simulator_model or model)
        self._micro_batches: list[dict] = []
        self.rollouts_done = 0

    def _init_simulator(self, path) -> None:
        """The no-share baseline's rehearsal model: loaded like the policy, trained by its own AdamW (same lr, weight
        decay, betas and clipping as the policy's optimizer: both roles use actor.optim.lr=1e-6 in the official
        script). Gradients are averaged over ranks by hand (it is not wrapped by accelerate)."""
        from transformers import AutoModelForCausalLM

        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            raise ValueError(
                "model_sharing=false trains a second model outside DeepSpeed/FSDP; run it without a DeepSpeed or FSDP "
                "config (DDP or one process), or use model_sharing=true."
            )
        if not isinstance(path, str):
            raise ValueError(
                "model_sharing=false needs the policy as a path (or trainer.simulator_model) to load a copy."
            )
        kwargs = dict(self.args.model_init_kwargs or {})
        if isinstance(kwargs.get("dtype"), str) and kwargs["dtype"] != "auto":
            kwargs["dtype"] = getattr(torch, kwargs["dtype"])
        self.simulator = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(self.accelerator.device)
        self.simulator.train()
        add_fused_lm_head(self.simulator, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32,
                          outputs=("log_probs", "entropy"))  # fmt: skip
        decay = [p for n, p in self.simulator.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.simulator.named_parameters() if p.ndim < 2]
        self.simulator_optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.args.learning_rate, betas=(self.args.adam_beta1, self.args.adam_beta2), eps=self.args.adam_epsilon,
        )  # fmt: skip

    def _sync_active(self, n: int) -> int:
        """Active work summed over ranks: every rank generates while any rank has work."""
        if self.accelerator.num_processes == 1:
            return n
        return int(self.accelerator.reduce(torch.tensor(n, device=self.accelerator.device), reduction="sum").item())

    def _all_ranks(self, value) -> list:
        """`[value of rank 0, value of rank 1, ...]` (one all-gather; every rank gets the list)."""
        if self.accelerator.num_processes == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])

    def _sum_ranks(self, *values: float) -> list[float]:
        """Each value summed over ranks (one all-reduce): rollout metrics are logged over all ranks, not rank 0's."""
        if self.accelerator.num_processes == 1:
            return [float(v) for v in values]
        total = self.accelerator.reduce(torch.tensor(values, dtype=torch.float64, device=self.accelerator.device),
                                        reduction="sum")  # fmt: skip
        return total.tolist()

    # --- overrides ---
    def _get_train_sampler(self, dataset=None):
        # one generation batch (whole groups of G) per rollout, handed to `gradient_accumulation_steps` consecutive
        # training steps: the first one plays the rollout, the others take its planned micro-batches
        return RepeatSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.args.gradient_accumulation_steps,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _prepare_inputs(self, generation_batch):
        if not self._micro_batches:
            self._micro_batches = self._rollout_micro_batches(generation_batch)
        return self._micro_batches.pop(0)

    # --- one rollout ---
    def _plan(self, rows: list[Row], advantages: torch.Tensor, seed: int) -> list[dict]:
        """This rank's `gradient_accumulation_steps` micro-batches of one optimizer step over the rows of all ranks
        (every row once, ranks in lock-step), each carrying the step's loss normaliser."""
        world, rank, ga = (
            self.accelerator.num_processes,
            self.accelerator.process_index,
            self.args.gradient_accumulation_steps,
        )
        local = [
            (r.prompt_ids, r.completion_ids, not r.failed, a) for r, a in zip(rows, advantages.tolist(), strict=True)
        ]
        all_rows = [row for part in self._all_ranks(local) for row in part]
        if not all_rows:
            raise RuntimeError(
                "No rows in this rollout on any rank (every episode ended before its first generation)."
            )
        micro_rows = max(1, math.ceil(math.ceil(len(all_rows) / world) / ga))  # fullest rank / forwards per step
        plan = plan_steps([len(p) + len(c) for p, c, *_ in all_rows], [len(c) if keep else 0 for _, c, keep, _ in all_rows],
                          world, micro_rows, ga, random.Random(seed))  # fmt: skip
        assert plan.num_steps == 1
        # TRL's dapo divides by num_items_in_batch / world * GA / steps_per_generation: this makes it the step's global
        # count of real loss tokens / world, so every real token of the step weighs the same on every rank
        num_items = torch.tensor(max(plan.step_tokens[0], 1) * self.args.steps_per_generation / ga, dtype=torch.float)
        out = []
        for index in plan.micro_batches(rank):
            chosen = [all_rows[i] for i in index]
            batch, _ = rows_to_batch([c[0] for c in chosen], [c[1] for c in chosen], [c[2] for c in chosen],
                                     [c[3] for c in chosen], self.processing_class.pad_token_id)  # fmt: skip
            batch = {k: v.to(self.accelerator.device) for k, v in batch.items()}
            batch["num_items_in_batch"] = num_items.to(self.accelerator.device)
            out.append(batch)
        return out

    def _rollout_micro_batches(self, inputs: list[dict]) -> list[dict]:
        mode = "train" if self.model.training else "eval"
        G, rank = self.num_generations, self.accelerator.process_index
        tasks = [json.loads(x["task_json"]) for x in inputs]
        base = (self.rollouts_done * self.accelerator.num_processes + rank) * (len(tasks) // G)
        group_ids = [base + i // G for i in range(len(tasks))]  # uid: the G rollouts of one prompt
        simulate = None if self.simulator is None else simulator_generate_fn(self)
        with self.accelerator.autocast():
            trajs = self.collector.collect(tasks, group_ids, trainer_generate_fn(self), simulate, self._sync_active,
                                           episode_offset=base * G)  # fmt: skip
        self.rollouts_done += 1
        rows = [r for t in trajs for r in t.rows]
        # the same scalar R on every row of both roles (official reward_manager/checklist.py)
        reward_of = {t.episode_id: t.reward for t in trajs}
        rewards = torch.tensor([reward_of[r.episode_id] for r in rows], dtype=torch.float32)  # (N,)
        advantages = rolewise_advantages(rewards, [r.group_id for r in rows], [r.role for r in rows])  # (N,)
        seed = self.args.seed * 7919 + self.rollouts_done
        metrics = trajectory_metrics([t for part in self._all_ranks([slim(t) for t in trajs]) for t in part])
        (metrics["rollout/generated_tokens"],) = self._sum_ranks(
            sum(len(r.completion_ids) for r in rows)
        )  # both roles
        if self.simulator is not None:  # no-share: each model learns from its own role's rows
            sim = [i for i, r in enumerate(rows) if r.role == "simulator"]
            metrics.update(self._train_simulator([rows[i] for i in sim], advantages[sim], seed + 1))
            keep = [i for i, r in enumerate(rows) if r.role == "caller"]
            rows, advantages = [rows[i] for i in keep], advantages[keep]
        micro_batches = self._plan(rows, advantages, seed)
        if self.beta != 0.0:
            with torch.no_grad(), self.accelerator.autocast():
                for batch in micro_batches:
                    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
                    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
                    batch["ref_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                        self.ref_model, ids, mask, batch["completion_ids"].size(1)
                    )
        timings = [
            self.collector.timings.pop(k, 0.0) for k in ("generate_caller_s", "generate_simulator_s", "judge_s")
        ]
        n_rows, n_tokens, *timings = self._sum_ranks(len(rows), sum(len(r.completion_ids) for r in rows), *timings)
        world = self.accelerator.num_processes
        metrics.update(
            {
                "rollout/rows": n_rows,  # trained by the policy, all ranks
                "rollout/micro_batch_rows": float(max(b["prompt_ids"].size(0) for b in micro_batches)),  # same on all
                "rollout/generate_caller_s": timings[0] / world,  # wall seconds, mean over ranks
                "rollout/generate_simulator_s": timings[1] / world,
                "rollout/judge_s": timings[2] / world,
                "completions/mean_length": n_tokens / max(n_rows, 1),
            }
        )
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        return micro_batches

    def _train_simulator(self, rows: list[Row], advantages: torch.Tensor, seed: int) -> dict[str, float]:
        """One optimizer step of the separate rehearsal model on the rehearsal rows of all ranks (no-share baseline),
        with TRL's loss (`_compute_loss` on the second model); its loss metrics are logged under `simulator/`."""
        micro_batches = self._plan(rows, advantages, seed)
        saved, self._metrics = self._metrics, {"train": defaultdict(list), "eval": defaultdict(list)}
        try:
            self.simulator.train()
            for batch in micro_batches:
                self._compute_loss(self.simulator, batch).backward()
            params = [p for p in self.simulator.parameters() if p.grad is not None]
            if self.accelerator.num_processes > 1:
                for p in params:
                    torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.AVG)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)
            self.simulator_optimizer.step()
            self.simulator_optimizer.zero_grad(set_to_none=True)
            logged = {f"simulator/{k}": sum(v) / len(v) for k, v in self._metrics["train"].items() if v}
        finally:
            self._metrics = saved
        return {**logged, "simulator/grad_norm": float(grad_norm), "simulator/rows": self._sum_ranks(len(rows))[0]}

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
