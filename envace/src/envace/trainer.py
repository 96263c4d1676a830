"""`EnvACETrainer`: role-wise GRPO over the caller and rehearsal rows of EnvACE episodes (official code
Within-yao/EnvACE@173e941; paper https://arxiv.org/abs/2608.06197), on the shared `MultiTurnGRPOTrainer`."""

import contextlib
import dataclasses
import itertools
import math
import os
import random
from collections import defaultdict

import torch
from torch.utils.data import Sampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.trainer.utils import add_fused_lm_head

from agentrl_shared.batch import plan_steps, rows_to_batch
from agentrl_shared.cadence import GroupedTaskSampler
from agentrl_shared.generation import HFGenerator
from agentrl_shared.rollout import Row
from agentrl_shared.trainer import MultiTurnGRPOTrainer

from .advantages import penalised_row_rewards, rolewise_advantages
from .config import EnvACEConfig, EnvConfig
from .rehearsal import TOOL_API_KEY_ENV, ExternalSimulator, RehearsalCollector, Trajectory, trajectory_metrics
from .reward import RuleJudge, endpoint_judge_from_env


# the no-share rehearsal model's folder inside every checkpoint and inside `<run>/final`
SIMULATOR_DIR = "simulator"
SIMULATOR_OPTIMIZER = "optimizer.pt"


def make_judge(args: EnvACEConfig):
    """The checklist judge: `rule`, or the endpoint with its key from `JUDGE_API_KEY`."""
    if args.judge == "rule":
        return RuleJudge()
    return endpoint_judge_from_env(args.judge_url, args.judge_model, temperature=args.judge_temperature,
                                   top_p=args.judge_top_p, max_tokens=args.judge_max_tokens, retries=args.judge_retries)  # fmt: skip


def make_collector(args: EnvACEConfig, env: EnvConfig, tokenizer, tool_return_mode: str,
                   judged: bool = True) -> RehearsalCollector:  # fmt: skip
    external = None
    if tool_return_mode == "external":
        external = ExternalSimulator(args.external_simulator_url, args.external_simulator_model,
                                     api_key=os.environ.get(TOOL_API_KEY_ENV) or None)  # fmt: skip
    return RehearsalCollector(
        tokenizer, make_judge(args) if judged else None, tool_return_mode, external,
        max_prompt_length=env.max_prompt_length, max_completion_length=args.max_completion_length,
        max_model_len=env.max_model_len, max_steps=env.max_steps, max_assistant_turns=env.max_assistant_turns,
        max_user_turns=env.max_user_turns, max_parallel_calls=env.max_parallel_calls,
        chat_template_kwargs=args.chat_template_kwargs, tools_in_system_prompt=env.tools_in_system_prompt,
        simulator_think=args.simulator_think, terminate_on_judge_failure=args.terminate_on_judge_failure,
    )  # fmt: skip


def max_rows_per_episode(env: EnvConfig) -> int:
    """The most rows (generations) one episode can produce: every caller or rehearsal generation is a micro-step,
    and `env.max_steps` micro-steps end the episode (`rehearsal.RehearsalCollector._check_caps`)."""
    return env.max_steps


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


@contextlib.contextmanager
def top_p_override(trainer, top_p: float):
    """Sample with `top_p` in the trainer's generation path (HF `generation_config` or TRL's vLLM generation) for the
    duration; the shared `sampling_overrides` (temperature) copies the HF config it finds, top-p included."""
    if trainer.use_vllm:
        saved, trainer.vllm_generation.top_p = trainer.vllm_generation.top_p, top_p
    else:
        saved = trainer.generation_config
        trainer.generation_config = saved.__class__(**{**saved.to_dict(), "top_p": top_p})
    try:
        yield
    finally:
        if trainer.use_vllm:
            trainer.vllm_generation.top_p = saved
        else:
            trainer.generation_config = saved


class RolloutBlockSampler(Sampler):
    """`stream` in blocks of `block` indices (every rank's episodes of one rollout), each repeated `repeat` times.

    The HF loop draws `gradient_accumulation_steps` data batches for EnvACE's one optimizer step per rollout, and the
    rollout plays the first: with each block repeated that often (as TRL's `RepeatSampler` does), the rollouts walk
    through each permutation of the tasks, so 470 rollouts x 16 prompts are one epoch of 7520 tasks (paper)."""

    def __init__(self, stream: Sampler, block: int, repeat: int):
        self.stream, self.block, self.repeat = stream, block, repeat

    def __iter__(self):
        indices = iter(self.stream)
        while block := list(itertools.islice(indices, self.block)):
            for _ in range(self.repeat):
                yield from block

    def __len__(self) -> int:
        return len(self.stream) * self.repeat


class EnvACETrainer(MultiTurnGRPOTrainer):
    """EnvACE: one policy plays the tool caller and the rehearsal role (it writes the tool responses the caller then
    conditions on); both roles are trained jointly from the checklist task reward with role-wise GRPO advantages.
    Paper: https://arxiv.org/abs/2608.06197 (official code Within-yao/EnvACE@173e941).

    Rows are per generation (verl-agent style); collection in lock-step, every row of every rank trained once, the
    step's global token normaliser, the rollout-counted cadence, checkpoints and panel evaluation are
    [`~agentrl_shared.trainer.MultiTurnGRPOTrainer`]'s. The episode reward R = sum_turns s_turn / (num_checklists *
    num_turns) (`reward.episode_reward`) goes on every row of both roles; A = R - mean over the rows of the same
    (uid, role), no std. A rollout is ONE optimizer step (`use_adaptive_ppo_mini_batch_size=True`,
    `ppo_mini_update_num=1`) of `gradient_accumulation_steps` forwards per rank; its loss is TRL's PPO-clip loss
    (dual clip `delta`): each row's token mean, averaged over the step's rows on all ranks (`loss_type=grpo`: verl's
    `loss_agg_mode=token-mean` over one-row micro-batches), or the global token mean (`loss_type=dapo`).
    `model_sharing=False` (official `run_checklist_noshare.sh`): the rehearsal rows train a second model with its own
    AdamW (one step per rollout, same loss and hyperparameters), kept in every checkpoint; the caller rows the policy.

    Hooks of `MultiTurnGRPOTrainer`:
    - `_collect`: the episode producer, the two-role rehearsal rollout (`RehearsalCollector.collect`), lock-step with
      the shared `_prompt_count` in both the caller and the rehearsal phase.
    - `_score`: R on every row of both roles, role-wise advantages (`advantages.rolewise_advantages`); no-share:
      the rehearsal model's step on the rehearsal rows (`_train_simulator`), the caller rows returned.
    - `_micro_rows`: ceil(ceil(rows / world) / gradient_accumulation_steps), so the rollout is one optimizer step.
    - `_max_rows_per_item`: `max_rows_per_episode` (the `EnvConfig` caps), which bounds the HF loop's steps.
    - `_rollout_metrics`: `envace/*` over the trajectories of all ranks, `env/*`, `rollout/generated_tokens`,
      `rollout/micro_batch_rows`, `simulator/*`.
    Overrides of [`~trl.GRPOTrainer`]: `_compute_loss` (TRL's, rescaled to the step's rows or tokens),
    `_rollout_micro_batches` (the shared one's, plus `row_normalizer`),
    `_get_train_sampler` (`RolloutBlockSampler`: one epoch = every task once), `_save_checkpoint` and
    `_load_from_checkpoint` (also the no-share model and its optimizer), `evaluate_panel` (the shared
    `_evaluate_items`). Everything else (vLLM, weight sync, ZeRO-3, logging, checkpoints) is inherited.
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

    def __init__(self, model, args: EnvACEConfig, env_config: EnvConfig, train_tasks: list[dict],
                 processing_class=None, callbacks=None, peft_config=None):  # fmt: skip
        # `micro_batch_rows` only bounds the HF loop's optimizer steps here (`_micro_rows` sizes each rollout): the
        # largest forward a rollout can need, so that the bound is exactly one step per rollout (max_steps =
        # num_rollouts)
        rows_per_rank = args.per_device_train_batch_size * args.steps_per_generation * max_rows_per_episode(env_config)
        args.micro_batch_rows = -(-rows_per_rank // args.gradient_accumulation_steps)
        super().__init__(model, args, env_config, train_tasks, processing_class, callbacks, peft_config)
        self.collector = make_collector(args, env_config, self.processing_class, args.tool_return_mode)
        self.simulator = self.simulator_optimizer = None
        if args.tool_return_mode == "agent" and not args.model_sharing:
            self._init_simulator(args.simulator_model or model)
        self._simulator_metrics: dict[str, float] = {}

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

    # --- hooks of MultiTurnGRPOTrainer ---
    def _max_rows_per_item(self) -> int:
        return max_rows_per_episode(self.env_config)

    def _collect(self, items: list[dict], group_ids: list[int], seeds: list[int],
                 episode_offset: int) -> list[Trajectory]:  # fmt: skip
        """The two-role rehearsal rollout (official `envs.py` state machine): the caller is the policy (the shared
        `_generate`: vLLM or HF), the rehearsal role the policy too or, no-share, the separate model; `seeds` are not
        used (the tasks carry no environment state to seed)."""
        simulate = None if self.simulator is None else simulator_generate_fn(self)
        trajs = self.collector.collect(items, group_ids, self._generate, simulate, self._prompt_count,
                                       episode_offset=episode_offset)  # fmt: skip
        self.timings.update(self.collector.timings)  # generate_caller_s, generate_simulator_s, judge_s
        self.collector.timings.clear()
        return trajs

    def _score(self, trajs: list[Trajectory]) -> tuple[list[Row], torch.Tensor]:
        """The same scalar R on every row of both roles (official `reward_manager/checklist.py`), then role-wise
        GRPO: A = R - mean over the rows of the same (uid, role) (`advantages.rolewise_advantages`). No-share: the
        rehearsal rows train the separate model here (one optimizer step over the rehearsal rows of all ranks) and
        only the caller rows are returned for the policy's step."""
        rows = [r for t in trajs for r in t.rows]
        reward_of = {t.episode_id: t.reward for t in trajs}
        rewards = penalised_row_rewards([reward_of[r.episode_id] for r in rows], [r.completion_text for r in rows],
                                        self.args.empty_output_penalty)  # (N,)  # fmt: skip
        advantages = rolewise_advantages(rewards, [r.group_id for r in rows], [r.role for r in rows])  # (N,)
        for r, reward in zip(rows, rewards.tolist(), strict=True):
            r.reward = r.episode_return = reward
        if self.simulator is not None:  # no-share: each model learns from its own role's rows
            sim = [i for i, r in enumerate(rows) if r.role == "simulator"]
            self._simulator_metrics = self._train_simulator([rows[i] for i in sim], advantages[sim])
            keep = [i for i, r in enumerate(rows) if r.role == "caller"]
            rows, advantages = [rows[i] for i in keep], advantages[keep]
        (self._step_rows,) = self._sum_ranks(len(rows))  # the policy step's rows on all ranks (`row_normalizer`)
        return rows, advantages

    def _micro_rows(self, num_rows: int) -> int:
        """One optimizer step per rollout (`ppo_mini_update_num=1`): the fullest rank's rows, ceil(num_rows / world)
        after `plan_steps` balances them, in `gradient_accumulation_steps` forwards."""
        world, ga = self.accelerator.num_processes, self.args.gradient_accumulation_steps
        return max(1, math.ceil(math.ceil(num_rows / world) / ga))

    def _rollout_metrics(self, trajs: list[Trajectory], rows: list[Row]) -> dict[str, float]:
        """`envace/*` over the trajectories of all ranks (`trajectory_metrics`), the generated tokens of both roles,
        the rows per forward, and the no-share rehearsal model's step (`simulator/*`)."""
        everywhere = [t for part in self._all_ranks([slim(t) for t in trajs]) for t in part]
        metrics = trajectory_metrics(everywhere)
        n_rows, generated = self._sum_ranks(len(rows), sum(len(r.completion_ids) for t in trajs for r in t.rows))
        metrics["env/num_episodes"] = float(len(everywhere))
        metrics["env/success_rate"] = metrics["envace/success_rate"]  # the shared console line reads this name
        metrics["rollout/generated_tokens"] = generated  # both roles, whichever model trains them
        metrics["rollout/micro_batch_rows"] = float(self._micro_rows(int(n_rows)))  # the same on every rank
        return {**metrics, **self._simulator_metrics}

    # --- overrides of GRPOTrainer ---
    def _rollout_micro_batches(self, inputs: list[dict]) -> list[dict]:
        """The shared trainer's micro-batches, each with `row_normalizer` (the step's rows on all ranks / world: a
        rollout is one optimizer step, so all its rows; `_step_rows` is set by `_score`)."""
        batches = super()._rollout_micro_batches(inputs)
        for batch in batches:
            batch["row_normalizer"] = torch.tensor(self._step_rows / self.accelerator.num_processes)
        return batches

    def _compute_loss(self, model, inputs):
        """TRL 1.16's PPO-clip loss of the micro-batch, rescaled so that the data-parallel mean of the gradients over
        all micro-batches of the step is the step's loss.

        `loss_type=grpo` (official): TRL's branch is mean_b(token mean of row b) / current GA over the B rows of the
        micro-batch (padding rows have no tokens: 0); times GA * B / `row_normalizer` (the step's rows / world) it is
        sum_b token_mean_b / (rows / world), so that over all ranks loss = (1 / rows) sum_rows token_mean(row), verl's
        `agg_loss(token-mean)` over one-row micro-batches / the micro-batch count (`dp_actor.py` `update_policy`).

        `loss_type=dapo`: the global token mean. TRL's branch divides by clamp(num_items_in_batch, 1) / world *
        current GA / steps_per_generation in training (HF's own accumulation scaling is off), so num_items_in_batch =
        token_normalizer * world * steps_per_generation / current GA."""
        training = self.model.training  # (in evaluation TRL neither splits nor accumulates)
        if self.loss_type == "grpo":
            ga = self.current_gradient_accumulation_steps if training else 1.0
            loss = super()._compute_loss(model, inputs)
            return loss * ga * inputs["completion_ids"].size(0) / inputs["row_normalizer"]
        scale = self.current_gradient_accumulation_steps / self.args.steps_per_generation if training else 1.0
        num_items = inputs["token_normalizer"] * self.accelerator.num_processes / scale
        loss = super()._compute_loss(model, {**inputs, "num_items_in_batch": num_items})
        if num_items < 1.0:  # TRL's clamp (a step with fewer real tokens than GA / steps_per_generation): undo it
            loss = loss / num_items  # (this also rescales TRL's entropy bonus, off in EnvACE: entropy_coef = 0)
        return loss

    def _set_rollout_lr(self, rollout: int) -> None:
        """The schedule's rate; `caller_mode=frozen`: 0, so that the caller's model takes no update (official
        `frozen_agent_ids`: the frozen worker group skips its actor update; AdamW's decoupled decay is off too)."""
        super()._set_rollout_lr(rollout)
        if self.args.caller_mode == "frozen":
            for group in self._lr_optimizer.param_groups:
                group["lr"] = 0.0

    def _get_train_sampler(self, dataset=None) -> Sampler:
        per_rollout = self.episodes_per_rank * self.accelerator.num_processes  # whole groups of G, all ranks
        stream = GroupedTaskSampler(len(self.train_items), self.num_generations, self.args.seed,
                                    self.args.max_steps * per_rollout)  # fmt: skip
        return RolloutBlockSampler(stream, per_rollout, self.args.gradient_accumulation_steps)

    def _save_checkpoint(self, model, trial):
        """HF's checkpoint; no-share: first the rehearsal model and its AdamW state, into `<checkpoint>/simulator/`."""
        if self.simulator is not None and self.args.should_save:
            checkpoint = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"  # HF's folder name
            folder = os.path.join(self._get_output_dir(trial=trial), checkpoint, SIMULATOR_DIR)
            self.simulator.save_pretrained(folder)
            torch.save(self.simulator_optimizer.state_dict(), os.path.join(folder, SIMULATOR_OPTIMIZER))
        super()._save_checkpoint(model, trial)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        """HF's; no-share: also the rehearsal model and its AdamW state (on resume, without DeepSpeed/FSDP)."""
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        if self.simulator is not None and model is None:
            folder = os.path.join(resume_from_checkpoint, SIMULATOR_DIR)
            super()._load_from_checkpoint(folder, self.simulator)
            state = torch.load(os.path.join(folder, SIMULATOR_OPTIMIZER), map_location=self.accelerator.device,
                               weights_only=True)  # fmt: skip
            self.simulator_optimizer.load_state_dict(state)

    # --- the no-share baseline's second model ---
    def _train_simulator(self, rows: list[Row], advantages: torch.Tensor) -> dict[str, float]:
        """One optimizer step of the separate rehearsal model on the rehearsal rows of all ranks (no-share), planned
        like the policy's (every row once, ranks in lock-step, `_micro_rows` rows per forward), with the same loss;
        its loss metrics go under `simulator/`. No rehearsal row on any rank: no step (on every rank alike)."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        local = [(r.prompt_ids, r.completion_ids, a) for r, a in zip(rows, advantages.tolist(), strict=True)]
        all_rows = [row for part in self._all_ranks(local) for row in part]
        if not all_rows:
            return {"simulator/rows": 0.0}
        rng = random.Random(self.args.seed * 7919 + self.rollouts_done + 1)  # the policy's plan uses the seed + 0
        plan = plan_steps([len(p) + len(c) for p, c, _ in all_rows], [len(c) for _, c, _ in all_rows], world,
                          self._micro_rows(len(all_rows)), self.args.gradient_accumulation_steps, rng,
                          prompts=[p for p, _, _ in all_rows])  # fmt: skip
        normalizer = torch.tensor(max(plan.step_tokens[0], 1) / world)  # the step's real tokens on all ranks / world
        row_normalizer = torch.tensor(len(all_rows) / world)  # the step's rows on all ranks / world
        saved, self._metrics = self._metrics, {"train": defaultdict(list), "eval": defaultdict(list)}
        try:
            self.simulator.train()
            for index in plan.micro_batches(rank):
                chosen = [all_rows[i] for i in index]
                batch, _ = rows_to_batch([c[0] for c in chosen], [c[1] for c in chosen], [True] * len(chosen),
                                         [c[2] for c in chosen], self.processing_class.pad_token_id)  # fmt: skip
                batch = {k: v.to(self.accelerator.device) for k, v in batch.items()}
                inputs = {**batch, "token_normalizer": normalizer, "row_normalizer": row_normalizer}
                self._compute_loss(self.simulator, inputs).backward()
            params = [p for p in self.simulator.parameters() if p.grad is not None]
            if world > 1:  # the data-parallel mean, by hand (gloo has no AVG reduction)
                for p in params:
                    torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
                    p.grad.div_(world)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)
            self.simulator_optimizer.step()
            self.simulator_optimizer.zero_grad(set_to_none=True)
            logged = {f"simulator/{k}": sum(v) / len(v) for k, v in self._metrics["train"].items() if v}
        finally:
            self._metrics = saved
        return {**logged, "simulator/grad_norm": float(grad_norm), "simulator/rows": float(len(all_rows))}

    # --- evaluation on the fixed panel, on every rank ---
    def evaluate_panel(self, tasks: list[dict], seeds: list[int], collector: RehearsalCollector) -> list[Trajectory]:
        """Play every (task, seed) of the panel with `collector` (real tools by default) at the evaluation
        temperature, through the shared `_evaluate_items` (interleaved slices, lock-step chunks of
        `env.eval_batch_size`, default `episodes_per_rank`); every rank must call it and gets all trajectories."""

        def play(chunk):
            return collector.collect([t for t, _ in chunk], list(range(len(chunk))), self._generate, None,
                                     self._prompt_count)  # fmt: skip

        pairs = [(t, s) for s in seeds for t in tasks]
        with top_p_override(self, self.env_config.eval_top_p):  # official val_kwargs.top_p=0.95
            chunk = self.env_config.eval_batch_size or self.episodes_per_rank
            return self._evaluate_items(pairs, chunk, self.env_config.eval_temperature, play)
