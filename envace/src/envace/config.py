"""EnvACE's knobs (`EnvACEConfig`, a `GRPOConfig`) and the task/rollout settings (`EnvConfig`).

Defaults are the official launch script `examples/drmas_trainer/run_checklist_share.sh` (Within-yao/EnvACE@f811bc2)
and verl's `verl/trainer/config/ppo_trainer.yaml` it overrides: PPO-clip with dual clip 3.0, every row weighing the
same (`loss_agg_mode=token-mean` inside a micro-batch of one row, `ppo_micro_batch_size_per_gpu=1`), KL off, one optimizer step per rollout batch (`use_adaptive_ppo_mini_batch_size=True`,
`ppo_mini_update_num=1`), AdamW lr 1e-6 constant, weight decay 0.01, grad clip 1.0, G = 4, rollout T = 1.0.
"""

from dataclasses import dataclass, field

from trl import GRPOConfig


TOOL_RETURN_MODES = ("agent", "real", "external")
JUDGES = ("endpoint", "rule")
LOSS_TYPES = ("grpo", "dapo")


@dataclass
class EnvACEConfig(GRPOConfig):
    r"""
    Configuration class for [`EnvACETrainer`]: [`~trl.GRPOConfig`] plus EnvACE's two roles and checklist judge.

    Parameters that EnvACE adds:
        tool_return_mode (`str`, *optional*, defaults to `"agent"`): who writes tool responses during training.
            `agent`: the policy's rehearsal role (EnvACE; official `tool_return_mode="agent"`); `real`: the tasks' real
            back ends (caller-only with environment interaction); `external`: an OpenAI-compatible simulator model
            (caller-only baseline `run_checklist_caller_only.sh`, "httpx" mode, gpt-4.1 there).
        model_sharing (`bool`, *optional*, defaults to `True`): one model plays both roles (`run_checklist_share.sh`).
            `False`: the no-share baseline (`run_checklist_noshare.sh`): the rehearsal role is a separate model
            (`simulator_model`) with its own optimizer; the caller rows train the policy, the rehearsal rows train the
            separate model, both from the same reward with role-wise advantages.
        simulator_model (`str`, *optional*): the separate rehearsal model's initial weights when `model_sharing=False`
            (default: the policy's; the official script starts both roles from Qwen3-8B).
        external_simulator_url / external_simulator_model (`str`, *optional*): endpoint of `tool_return_mode=external`.
        simulator_think (`bool`, *optional*, defaults to `True`): append `/think` to the rehearsal prompt
            (`SIM_APPEND_THINK_SWITCH`, default on).
        judge (`str`, *optional*, defaults to `"endpoint"`): `endpoint` (OpenAI-compatible server, the paper's
            Qwen3-30B-A3B) or `rule` (deterministic, generated tasks only).
        judge_url / judge_model / judge_temperature / judge_top_p / judge_max_tokens / judge_retries: the judge
            endpoint and its sampling (official: T 0.6, top-p 0.8, max_tokens 6000, 5 tries). Its API key comes from
            the environment variable `JUDGE_API_KEY` (the external simulator's from `TOOL_API_KEY`), as in the
            official launch scripts; training and evaluation first check that the judge answers a verdict.
        caller_mode (`str`, *optional*, defaults to `"train"`): `frozen` (official `CALLER_MODE=frozen`, Dr.MAS
            `frozen_agent_ids=["Tool Caller Agent"]`): the caller's model takes no update (its learning rate is 0)
            and only the separate rehearsal model trains; needs `model_sharing=false` (with one shared model the
            official code freezes the shared model, so nothing would train).
        terminate_on_judge_failure (`bool`, *optional*, defaults to `True`): a judge API failure or malformed verdict
            ends the episode (official `interaction.py`); the items count as failed either way.
        tts_budget (`int`, *optional*, defaults to `4`): private rehearsals N before the committed execution at test
            time (`envace eval --tts parallel|sequential`); the paper does not give N, 4 matches `val_n`.

        loss_type (`str`, *optional*, defaults to `"grpo"`): how a step's rows are weighed. `grpo` (official): the
            token mean within each row, then the mean over the step's rows on all ranks, so every row weighs the same
            whatever its length (verl `dp_actor.py` `update_policy`: `agg_loss(loss_agg_mode="token-mean")` over a
            micro-batch of `ppo_micro_batch_size_per_gpu=1` row, divided by the rank's micro-batch count, gradients
            averaged over ranks); `dapo`: the global token mean over the step's tokens (a row weighs by its length).
        empty_output_penalty (`float`, *optional*, defaults to `0.1`): subtracted from the reward of a row whose
            generation is empty before the advantages (official `invalid_action_penalty_coef=0.1`); 0 = off.
        num_rollouts (`int`, *optional*, defaults to `470`): training length in rollouts, one optimizer step each
            (`trainer.total_epochs=1` over the RL set: 470 x 16 prompts = 7520 tasks); the learning-rate schedule and
            checkpoints count rollouts too. `max_steps` is derived from it and must not be set.
        micro_batch_rows (`int`, *optional*): derived, must not be set. EnvACE sizes each rollout's forwards itself
            (`EnvACETrainer._micro_rows`: ceil(ceil(rows / world) / gradient_accumulation_steps) rows per forward,
            so that the rollout is exactly one optimizer step); the trainer sets this field to the largest size a
            rollout can need (episodes per rank x most rows per episode / `gradient_accumulation_steps`, rounded up),
            which is what [`~agentrl_shared.trainer.MultiTurnGRPOTrainer`] bounds the HF loop's `max_steps` with.
        log_prob_micro_batch_rows (`int`, *optional*): rows per no-grad forward (theta_old when a rollout makes several
            optimizer steps, the reference when `beta` > 0), verl `log_prob_micro_batch_size_per_gpu`
            (`run_checklist_share.sh`: 8); None: `micro_batch_rows`. Under the shared-prefix forwards a larger chunk
            runs a shared prompt prefix once for more rows. Every rank runs the same number of these forwards.

    Batching: a rollout plays `per_device_train_batch_size * steps_per_generation` episodes per rank and makes one
    optimizer step over all its rows (`use_adaptive_ppo_mini_batch_size=True`, `ppo_mini_update_num=1`) in
    `gradient_accumulation_steps` forwards per rank of ceil(rows on the fullest rank / gradient_accumulation_steps) rows
    each (one row per forward, the official `ppo_micro_batch_size_per_gpu=1`, while the rollout has at most
    `gradient_accumulation_steps` rows per rank).
    """

    tool_return_mode: str = field(default="agent", metadata={"help": "agent (EnvACE) | real | external."})
    model_sharing: bool = field(default=True, metadata={"help": "One model for both roles (official share script)."})
    simulator_model: str | None = field(default=None, metadata={"help": "Separate rehearsal model (no-share)."})
    external_simulator_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible simulator URL."})
    external_simulator_model: str = field(default="gpt-4.1", metadata={"help": "caller-only script default."})
    simulator_think: bool = field(default=True, metadata={"help": "SIM_APPEND_THINK_SWITCH (default on)."})
    judge: str = field(default="endpoint", metadata={"help": "endpoint (paper) | rule (generated tasks)."})
    judge_url: str | None = field(default=None, metadata={"help": "Judge server, e.g. http://host:30000/v1."})
    judge_model: str = field(default="Qwen/Qwen3-30B-A3B", metadata={"help": "Judge model (paper: Qwen3-30B-A3B)."})
    judge_temperature: float = field(default=0.6, metadata={"help": "Judge sampling temperature (official 0.6)."})
    judge_top_p: float = field(default=0.8, metadata={"help": "Judge top-p (official 0.8)."})
    judge_max_tokens: int = field(default=6000, metadata={"help": "Judge max_tokens (official 6000)."})
    judge_retries: int = field(default=5, metadata={"help": "Tries per judge request (official JUDGE_RETRY=5)."})
    terminate_on_judge_failure: bool = field(default=True, metadata={"help": "Official: judge failure ends it."})
    caller_mode: str = field(default="train", metadata={"help": "train | frozen (CALLER_MODE, no-share only)."})
    empty_output_penalty: float = field(default=0.1, metadata={"help": "R - 0.1 on rows with empty text (official)."})
    tts_budget: int = field(default=4, metadata={"help": "Test-time rehearsals N per task (val_n=4; paper: N n/a)."})
    num_rollouts: int = field(default=470, metadata={"help": "Training length in rollouts. Paper: 470 (one epoch)."})
    micro_batch_rows: int | None = field(
        default=None, metadata={"help": "Derived by the trainer (rows per forward are sized per rollout); not set."}
    )
    log_prob_micro_batch_rows: int | None = field(
        default=None,
        metadata={
            "help": "Rows per no-grad forward (verl log_prob_micro_batch_size_per_gpu); None: micro_batch_rows."
        },
    )

    # --- re-defaulted GRPOConfig fields (run_checklist_share.sh, verl ppo_trainer.yaml) ---
    learning_rate: float = field(default=1e-6, metadata={"help": "actor.optim.lr=1e-6 for both roles, constant."})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "verl: constant LR, no warmup."})
    weight_decay: float = field(default=0.01, metadata={"help": "verl actor.optim.weight_decay=0.01."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "verl actor.grad_clip=1.0."})
    beta: float = field(default=0.0, metadata={"help": "use_kl_loss=False (if on: kl_loss_coef=1e-4, low_var_kl)."})
    use_bias_correction_kl: bool = field(default=False, metadata={"help": "verl low_var_kl (k3) has no IS weight."})
    epsilon: float = field(default=0.2, metadata={"help": "clip_ratio_low=0.2."})
    epsilon_high: float = field(default=0.2, metadata={"help": "clip_ratio_high=0.2."})
    delta: float | None = field(default=3.0, metadata={"help": "dual clip clip_ratio_c=3.0."})
    loss_type: str = field(
        default="grpo",
        metadata={
            "help": "grpo: each row's token mean, mean over the step's rows (official); dapo: global token mean."
        },
    )
    entropy_coef: float = field(default=0.0, metadata={"help": "entropy_coeff=0."})
    num_generations: int | None = field(default=4, metadata={"help": "env.rollout.n=4 (group size G)."})
    max_completion_length: int | None = field(default=8000, metadata={"help": "data.max_response_length=8000."})
    temperature: float = field(default=1.0, metadata={"help": "rollout temperature 1.0."})
    top_p: float = field(default=1.0, metadata={"help": "rollout top_p 1.0."})
    num_iterations: int = field(default=1, metadata={"help": "ppo_mini_update_num=1: fully on-policy."})
    vllm_max_model_length: int | None = field(default=20000, metadata={"help": "max_model_len=20000."})
    vllm_importance_sampling_correction: bool = field(
        default=False, metadata={"help": "The reference loss has no vLLM IS term."}
    )
    chat_template_kwargs: dict | None = field(
        default_factory=lambda: {"enable_thinking": True}, metadata={"help": "Caller renders with thinking on."}
    )
    gradient_checkpointing: bool = field(default=True, metadata={"help": "enable_gradient_checkpointing=True."})
    save_steps: float = field(default=50, metadata={"help": "trainer.save_freq=50."})
    logging_steps: float = field(default=1, metadata={"help": "Log every optimizer step."})
    report_to: str | list[str] | None = field(default="none", metadata={"help": "W&B etc. are opt-in."})

    def __post_init__(self):
        if self.max_steps > 0:
            raise ValueError(
                f"max_steps={self.max_steps} is set, but EnvACE counts training in rollouts (one optimizer step "
                "each); set trainer.num_rollouts instead (paper: 470)."
            )
        if self.micro_batch_rows is not None:
            raise ValueError(
                f"micro_batch_rows={self.micro_batch_rows} is set, but EnvACE sizes each rollout's forwards itself "
                "(ceil(rows per rank / gradient_accumulation_steps) rows, one optimizer step per rollout); set "
                "trainer.gradient_accumulation_steps to bound the rows per forward."
            )
        super().__post_init__()
        if self.tool_return_mode not in TOOL_RETURN_MODES:
            raise ValueError(
                f"Unknown tool_return_mode {self.tool_return_mode!r}; valid: {', '.join(TOOL_RETURN_MODES)}."
            )
        if self.loss_type not in LOSS_TYPES:
            # the trainer rescales TRL's grpo / dapo branch to the step's rows / tokens (`EnvACETrainer._compute_loss`)
            raise ValueError(
                f"loss_type={self.loss_type!r}: EnvACE weighs each row the same (grpo, official: a row's token mean, "
                "mean over the step's rows) or each token (dapo, global token mean); set loss_type=grpo or dapo."
            )
        if self.caller_mode not in ("train", "frozen"):
            raise ValueError(f"Unknown caller_mode {self.caller_mode!r}; valid: train, frozen.")
        if self.caller_mode == "frozen" and (self.model_sharing or self.tool_return_mode != "agent"):
            raise ValueError(
                "caller_mode=frozen trains the separate rehearsal model only: set model_sharing=false and "
                "tool_return_mode=agent (a frozen caller freezes a shared model entirely, as in the official code)."
            )
        if self.judge not in JUDGES:
            raise ValueError(f"Unknown judge {self.judge!r}; valid: {', '.join(JUDGES)}.")
        if self.judge == "endpoint" and not self.judge_url:
            raise ValueError("judge=endpoint needs trainer.judge_url (an OpenAI-compatible server); or judge=rule.")
        if self.tool_return_mode == "external" and not self.external_simulator_url:
            raise ValueError("tool_return_mode=external needs trainer.external_simulator_url.")
        if self.num_iterations != 1:
            # ppo_mini_update_num=1: exactly one optimizer step per rollout batch
            raise ValueError(
                f"EnvACE makes one optimizer step per rollout: set num_iterations=1 (now {self.num_iterations})."
            )


@dataclass
class EnvConfig:
    """Tasks, episode caps and evaluation (never part of `GRPOConfig`).

    Args:
        source (`str`): `generated` (tool tasks with real back ends, `data.generate_tasks`) or `file` (official data).
        train_path / eval_path (`str`): official checklist files (`*_train.parquet`, `*_val_small100.parquet`).
        num_train_tasks / num_eval_tasks (`int`): tasks drawn (generated) or kept (file).
        task_seed (`int`): seed of the generated tasks (train and eval draw from disjoint seeds).
        max_task_turns (`int`): user turns per generated task (1 to this).
        max_num_checklist (`int`): checklists per sample (official 1).
        max_steps (`int`): micro-steps (generations) per episode (`env.max_steps=200`).
        max_assistant_turns / max_user_turns (`int`): caps (30 / 30), checked when a user turn ends (official
            `envs.py` INTERACTING: an episode is never cut inside a turn by them).
        max_parallel_calls (`int`): tool calls executed per caller response; 0 (default) = all of them, as the
            official code (its `max_parallel_calls=20` is read but never applied); N > 0 drops and counts the rest.
        max_prompt_length (`int`): rollout prompt cap, left truncation (`rollout_max_prompt_length=12000`).
        max_model_len (`int`): caller context + `max_completion_length` must stay below it (20000), else the episode
            ends with `length_exceeded`.
        tools_in_system_prompt (`bool`): write the tool schemas into a system message ourselves, for chat templates
            that ignore `tools=` (SmolLM2); Qwen3's template renders them.
        eval_temperature / eval_top_p (`float`): validation sampling (T 0.6, top-p 0.95).
        eval_episodes (`int`): fixed panel (the first N eval tasks).
        eval_seeds (`list[int]`): one pass over the panel per seed (`val_n=4` samples per prompt in the paper).
        eval_every (`int`): evaluate every N rollouts (`trainer.test_freq=10`); 0 = off.
        eval_before_train (`bool`): with `eval_every`, also evaluate before the first rollout (off, as the official
            launch scripts: `trainer.val_before_train=False`).
        max_task_prompt_tokens (`int`): drop tasks whose first prompt (system, first user message, tools, chat
            template with the generation prompt) is longer (official `filter_overlong_prompts` at
            `data.max_prompt_length - 500` = 3500 tokens, `checklist_dataset.py`); 0 = keep all.
        eval_tool_return_mode (`str`): tool responses at evaluation: `real` (committed execution) by default.
        eval_batch_size (`int`, *optional*): episodes played together in one evaluation pass, one batched
            generation per micro-step for all of them (verl `data.val_batch_size`); `None`: the training rollout's
            episodes per rank.
        num_val_tasks (`int`): generated validation tasks (their own seed, disjoint from train, eval and warm
            start) on which `envace tune` chooses the CPU plan's learning rate; 0 = none.
    """

    source: str = "generated"
    train_path: str | None = None
    eval_path: str | None = None
    num_train_tasks: int = 7520  # 470 steps x 16 prompts
    num_eval_tasks: int = 100  # val_small100
    task_seed: int = 0
    max_task_turns: int = 2
    max_num_checklist: int = 1
    max_steps: int = 200
    max_assistant_turns: int = 30
    max_user_turns: int = 30
    max_parallel_calls: int = 0
    max_prompt_length: int = 12000
    max_model_len: int = 20000
    tools_in_system_prompt: bool = False
    eval_temperature: float = 0.6
    eval_top_p: float = 0.95
    eval_episodes: int = 100
    eval_seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    eval_every: int = 10
    eval_before_train: bool = False
    max_task_prompt_tokens: int = 3500
    eval_tool_return_mode: str = "real"
    eval_batch_size: int | None = None
    num_val_tasks: int = 0

    def __post_init__(self):
        if self.source not in ("generated", "file"):
            raise ValueError(f"Unknown env.source {self.source!r}; valid: generated, file.")
        if self.eval_tool_return_mode not in TOOL_RETURN_MODES:
            raise ValueError(f"Unknown env.eval_tool_return_mode {self.eval_tool_return_mode!r}.")

    @property
    def name(self) -> str:
        """The task family, as the shared results payload names environments: `tooltasks` (generated tool tasks) or
        `checklist` (the official checklist files)."""
        return "tooltasks" if self.source == "generated" else "checklist"


@dataclass
class WarmStartConfig:
    """Format warm start before RL (`warmstart.py`; CPU scale only, off by default: the paper's Qwen3-8B already emits
    tool calls and follows the rehearsal format, so the paper runs none).

    Args:
        num_tasks (`int`): generated warm-start tasks (their own seed, disjoint from training and evaluation); 0 = off.
        rehearsal_rows (`bool`): also fit the gold rehearsal outputs (`<execution_result>` with the ground-truth
            response), so that the rehearsal role can produce parseable tool responses at all; the caller rows alone
            otherwise.
        epochs (`int`): passes over the gold rows.
        batch_rows (`int`): rows per optimizer step.
        learning_rate (`float`): AdamW learning rate (no weight decay, grad clip 1.0).
    """

    num_tasks: int = 0
    rehearsal_rows: bool = True
    epochs: int = 1
    batch_rows: int = 4
    learning_rate: float = 1e-4
