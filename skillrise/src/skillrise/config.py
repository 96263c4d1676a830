"""SkillRise's knobs (`SkillRiseConfig`, a `GRPOConfig`) and the environment/trial settings (`EnvConfig`).

Defaults are the official ScienceWorld recipe, `examples/skillrise_sciworld/skillrise_sciworld_qwen3_4b.sh` with verl's
`ppo_trainer.yaml` defaults (lyq1119/SkillRise-reproduction-and-refinement@79bbd91, imported from
Within-yao/SkillRise); ALFWorld and WebShop override them in `configs/*.yaml`. TRL fields are re-defaulted where verl
differs from TRL.
"""

from dataclasses import dataclass, field

from trl import GRPOConfig

from .credit import ADVANTAGE_MODES
from .trial import CARRY_MODES


@dataclass
class SkillRiseConfig(GRPOConfig):
    r"""
    Configuration class for [`SkillRiseTrainer`]: [`~trl.GRPOConfig`] plus SkillRise's trial and credit knobs.

    One dataset row is one task group; TRL's sampler repeats it `num_generations` times, which gives the N = 8
    parallel trials of the group (official `env.rollout.n=8`).

    Parameters that SkillRise adds:
        group_size_k (`int`, *optional*, defaults to `3`): K, tasks per trial (official group files `*_K3.jsonl`,
            `env.num_attempts=3`). `1` with `carry_mode="none"` gives single-task GRPO.
        carry_mode (`str`, *optional*, defaults to `"skill"`): what a training trial carries between tasks (official
            `train_carry_mode`): `skill` (SkillRise) or `none` (no-carry ablation / GRPO / GiGPO); `reflect` (LaMer)
            is a validation carry only (`env.eval_carry_mode`).
        traj_gamma (`float`, *optional*, defaults to `0.6`): downstream discount of the curate return (official
            `algorithm.traj_gamma=0.6`).
        curate_loss_weight (`float`, *optional*, defaults to `1.0`): multiplies curate advantages (official
            `curate_loss_weight=1.0`).
        advantage_mode (`str`, *optional*, defaults to `"mean_norm"`): `mean_norm` (A = R - mean, official default),
            `mean_std_norm` (ablation), `grpo` (verl-agent row-level GRPO, the GRPO baseline) or `gigpo` (the GiGPO
            baseline, verl-agent `core_gigpo.py`; needs `carry_mode="none"`).
        step_gamma (`float`, *optional*, defaults to `0.95`): GiGPO's discount of the step returns (verl-agent
            `algorithm.gamma=0.95`).
        step_advantage_w (`float`, *optional*, defaults to `1.0`): GiGPO's weight of the step advantage
            (`algorithm.gigpo.step_advantage_w=1.0`).
        invalid_action_penalty_coef (`float`, *optional*, defaults to `0.5`): subtracted from invalid rows (official
            `invalid_action_penalty_coef=0.5`), solve rows without `<action>` and curate rows without `<skill>`.
        skill_max_chars (`int`, *optional*, defaults to `4000`): cap of the parsed skill document (official
            curate projection `[:4000]`).
        micro_batch_rows (`int`, *optional*, defaults to `4`): rows per forward/backward (official
            `ppo_micro_batch_size_per_gpu=4`). An optimizer step takes `gradient_accumulation_steps` micro-batches per
            rank, i.e. a mini-batch of `world * gradient_accumulation_steps * micro_batch_rows` rows (official
            `ppo_mini_batch_size=128`), and a rollout makes ceil(rows / mini-batch) optimizer steps: every row once.
        log_prob_micro_batch_rows (`int`, *optional*): rows per no-grad forward (theta_old when a rollout makes several
            optimizer steps, the reference when `beta` > 0), verl `log_prob_micro_batch_size_per_gpu` (the official
            scripts are not public here); None: `micro_batch_rows`. Under the shared-prefix forwards a larger chunk runs
            a shared prompt prefix once for more rows. Every rank runs the same number of these forwards.
        num_rollouts (`int`, *optional*, defaults to `150`): training length in rollouts (official
            `trainer.total_epochs=150`, one rollout per epoch); the learning-rate schedule counts rollouts too.
            `max_steps` is derived from it and must not be set.

    `per_device_train_batch_size * steps_per_generation` is the number of trials a rank plays per rollout; it must be
    a multiple of `num_generations`. The loss is `losses.step_loss` (TRL's `loss_type` is not read).
    """

    group_size_k: int = field(default=3, metadata={"help": "K tasks per trial. Official: *_K3 groups."})
    carry_mode: str = field(default="skill", metadata={"help": "skill | none | reflect (official carry_mode)."})
    traj_gamma: float = field(default=0.6, metadata={"help": "Curate return discount. Official: traj_gamma=0.6."})
    curate_loss_weight: float = field(default=1.0, metadata={"help": "Official curate_loss_weight=1.0."})
    advantage_mode: str = field(default="mean_norm", metadata={"help": "mean_norm | mean_std_norm | grpo | gigpo."})
    step_gamma: float = field(default=0.95, metadata={"help": "GiGPO step-return discount (algorithm.gamma=0.95)."})
    step_advantage_w: float = field(default=1.0, metadata={"help": "GiGPO step advantage weight (1.0)."})
    invalid_action_penalty_coef: float = field(
        default=0.5, metadata={"help": "Official invalid_action_penalty_coef=0.5."}
    )
    skill_max_chars: int = field(default=4000, metadata={"help": "Official curate projection cap: 4000."})
    micro_batch_rows: int = field(default=4, metadata={"help": "Official ppo_micro_batch_size_per_gpu=4."})
    log_prob_micro_batch_rows: int | None = field(
        default=None,
        metadata={
            "help": "Rows per no-grad forward (verl log_prob_micro_batch_size_per_gpu); None: micro_batch_rows."
        },
    )
    num_rollouts: int = field(default=150, metadata={"help": "Rollouts to train. Official: total_epochs=150."})

    # --- re-defaulted GRPOConfig fields (official scripts and verl defaults) ---
    learning_rate: float = field(default=1e-6, metadata={"help": "actor.optim.lr=1e-6, constant."})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "verl: constant LR (HF default: linear)."})
    weight_decay: float = field(default=0.01, metadata={"help": "verl actor.optim.weight_decay=0.01."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "verl actor.grad_clip=1.0."})
    beta: float = field(default=0.0, metadata={"help": "use_kl_loss=False: no KL term, no reference model."})
    epsilon: float = field(default=0.2, metadata={"help": "clip_ratio_low=0.2."})
    epsilon_high: float = field(default=0.2, metadata={"help": "clip_ratio_high=0.2."})
    delta: float | None = field(default=3.0, metadata={"help": "verl dual clip clip_ratio_c=3.0."})
    entropy_coef: float = field(default=0.001, metadata={"help": "verl actor.entropy_coeff=0.001."})
    num_generations: int | None = field(default=8, metadata={"help": "N = 8 trials per group (env.rollout.n=8)."})
    max_completion_length: int | None = field(default=1024, metadata={"help": "data.max_response_length=1024."})
    temperature: float = field(default=1.0, metadata={"help": "rollout temperature 1.0."})
    shuffle_dataset: bool | None = field(
        default=False, metadata={"help": "Groups are shuffled once (seed) and served cyclically (group_loader)."}
    )
    chat_template_kwargs: dict | None = field(
        default_factory=lambda: {"enable_thinking": False}, metadata={"help": "Qwen3 thinking off (official)."}
    )
    vllm_importance_sampling_correction: bool = field(
        default=False, metadata={"help": "The reference loss has no vLLM IS term."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every optimizer step."})
    report_to: str | list[str] | None = field(default="none", metadata={"help": "W&B etc. are opt-in."})

    def __post_init__(self):
        if self.max_steps > 0:
            raise ValueError(
                f"max_steps={self.max_steps} is set, but SkillRise counts training in rollouts (a rollout makes a "
                "variable number of optimizer steps); set trainer.num_rollouts instead (paper: 150)."
            )
        super().__post_init__()
        if self.carry_mode not in CARRY_MODES:
            raise ValueError(f"Unknown carry_mode {self.carry_mode!r}; valid: {', '.join(CARRY_MODES)}.")
        if self.carry_mode == "reflect":
            raise ValueError("carry_mode=reflect is a validation carry (official train_carry_mode is skill or none): "
                             "train with carry_mode=none and set env.eval_carry_mode=reflect (`--method reflect`).")  # fmt: skip
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(f"Unknown advantage_mode {self.advantage_mode!r}; valid: {', '.join(ADVANTAGE_MODES)}.")
        if self.advantage_mode == "gigpo" and self.carry_mode != "none":
            raise ValueError(f"advantage_mode=gigpo has no credit for carry rows (carry_mode={self.carry_mode!r}); set "
                             "carry_mode=none (the GiGPO baseline) or another advantage_mode.")  # fmt: skip
        if self.beta != 0.0:
            raise ValueError(
                f"beta={self.beta}, but the SkillRise loss has no KL term (official use_kl_loss=False); set beta=0."
            )


ENV_NAMES = ("scienceworld", "alfworld", "webshop", "textrooms")


@dataclass
class EnvConfig:
    """Environment, trial and evaluation settings (never part of `GRPOConfig`).

    Args:
        name (`str`): `scienceworld`, `alfworld`, `webshop` or `textrooms` (our offline CPU test bed).
        train_split / eval_split (`str`): ScienceWorld `train` / `test` variations (official validation on test);
            ALFWorld `train` / `valid_seen` (eval_in_distribution); WebShop `train` / `test` (goals 0-499).
        task_kwargs (`dict`): extra arguments of the family's task loader (e.g. `task_names`, a data path).
        env_kwargs (`dict`): constructor arguments (ScienceWorld `simplifications="easy"`, official preset).
        max_tasks_per_family (`int`): keep the first N tasks of each family before grouping (0 = all).
        groups (`str`): where the training groups come from (`groups.py`): `official` (the official group file of the
            environment in `$SKILLRISE_GROUPS`, fetched by `make data ENV=skillrise-groups`, where it exists; else the
            rules, logged), `rules`, or the path of a file in the official layout.
        history_length (`int`): past steps in the solve prompt (official: ALFWorld 15, WebShop 5, ScienceWorld 2).
        solve_prompt (`str`): `skillrise` (the SkillRise solve prompt, `prompts.py`; TextRooms: its family with the
            document section first) or `plain` (the shared verl-agent family without a document section: the official
            GRPO/GiGPO baselines run the plain environments).
        prompt_overflow (`str`): a prompt longer than `max_prompt_length`: `raise` (official `data.truncation=error`
            for ALFWorld and ScienceWorld) or `truncate` (left, counted in `env/prompt_truncated_ratio`; WebShop).
        max_turns (`int`): turn cap per task (official `env.max_turns`: 30 ScienceWorld, 10 ALFWorld, 12 WebShop).
        max_prompt_length (`int`): `data.max_prompt_length` (10240 ScienceWorld, 4096 ALFWorld, 12288 WebShop).
        curate_history (`int`): attempt steps in the curate prompt (official ScienceWorld `curate_history_length` 30).
        curate_prefix (`str`): prefilled start of curate answers (`""` official; `<skill>` at CPU scale).
        reward_scale (`float`): r_p = reward_scale * won (official reward 10 on success, else 0).
        num_workers (`int`, *optional*): environment processes, the slots spread over them (`0` = in-process);
            `None`: one per slot, at most one per CPU core of this rank (`agentrl_shared.envs.pool.default_workers`).
            A crashed or hung process ends the episodes of every slot it hosts.
        step_timeout (`float`): seconds before a hung environment is killed and its task marked failed.
        eval_tasks (`int`): panel size (official 128 validation tasks).
        eval_panel (`str`): `random` (official: drawn without replacement from the eval split with seed
            `seed_offset_eval`, redrawn at every validation) or `fixed` (the same panel at every validation, the
            families in turn, each in loader order: every task type once `eval_tasks` >= the number of families).
        eval_k (`int`): attempts (repeat) or tasks (cross) per evaluation trial (official 3, also for the GRPO
            baseline: `val_num_attempts=3`); the knob for "success grows with longer task sequences".
        eval_modes (`list[str]`): `repeat` (official default: same task K times, cumulative pass@1..K) and/or `cross`
            (K different tasks of a family, per-position pass@1).
        eval_carry_mode (`str` or `None`): carry at evaluation (official `val_carry_mode`); None = the training one.
        eval_temperature (`float`): official `val_kwargs.temperature=0.7`, sampled.
        eval_seeds (`list[int]`): evaluation seeds.
        eval_every (`int`): evaluate every this many rollouts (`trainer.test_freq=5`); 0 = off.
        eval_before_train (`bool`): also evaluate before the first rollout (verl `trainer.val_before_train=True`).
        eval_batch_size (`int`, *optional*): trials played together in one evaluation pass, one batched generation
            per turn and per carry phase for all of them (verl-agent `data.val_batch_size`); `None`: the training
            rollout's trials per rank. Each pass holds this many environments (in `num_workers`
            processes).
        seed_offset_eval (`int`): validation seeds are offset like verl-agent's `seed + 1000`.
    """

    name: str = "scienceworld"
    train_split: str = "train"
    eval_split: str = "test"
    task_kwargs: dict = field(default_factory=dict)
    env_kwargs: dict = field(default_factory=lambda: {"simplifications": "easy", "max_steps": 30})
    max_tasks_per_family: int = 0
    groups: str = "official"
    history_length: int = 2
    solve_prompt: str = "skillrise"
    prompt_overflow: str = "raise"
    max_turns: int = 30
    max_prompt_length: int = 10240
    curate_history: int = 30
    curate_prefix: str = ""
    reward_scale: float = 10.0
    num_workers: int | None = None
    step_timeout: float = 60.0
    eval_tasks: int = 128
    eval_panel: str = "random"
    eval_k: int = 3
    eval_modes: list[str] = field(default_factory=lambda: ["repeat"])
    eval_carry_mode: str | None = None
    eval_temperature: float = 0.7
    eval_seeds: list[int] = field(default_factory=lambda: [0])
    eval_every: int = 5
    eval_before_train: bool = True
    eval_batch_size: int | None = None
    seed_offset_eval: int = 1000

    def __post_init__(self):
        if self.name not in ENV_NAMES:
            raise ValueError(f"Unknown env.name {self.name!r}; valid names: {', '.join(ENV_NAMES)}.")
        if self.solve_prompt not in ("skillrise", "plain"):
            raise ValueError(f"Unknown env.solve_prompt {self.solve_prompt!r}; valid: skillrise, plain.")
        if self.prompt_overflow not in ("raise", "truncate"):
            raise ValueError(f"Unknown env.prompt_overflow {self.prompt_overflow!r}; valid: raise, truncate.")
        if self.eval_panel not in ("random", "fixed"):
            raise ValueError(f"Unknown env.eval_panel {self.eval_panel!r}; valid: random, fixed.")
        for mode in self.eval_modes:
            if mode not in ("repeat", "cross"):
                raise ValueError(f"Unknown eval mode {mode!r}; valid: repeat, cross.")
        if self.eval_carry_mode is not None and self.eval_carry_mode not in CARRY_MODES:
            raise ValueError(f"Unknown eval_carry_mode {self.eval_carry_mode!r}; valid: {', '.join(CARRY_MODES)}.")


def make_base_prompt(env: EnvConfig):
    """The environment's shared prompt family (`agentrl_shared.prompts`) with the configured history window."""
    from agentrl_shared.prompts import ScienceWorldPrompt, make_prompt

    if env.name == "scienceworld":
        return ScienceWorldPrompt(history_length=env.history_length)
    return make_prompt(env.name, env.history_length)


def make_solve_prompt(env: EnvConfig):
    """The solve prompt (`env.solve_prompt`): SkillRise's own for ALFWorld, WebShop and ScienceWorld
    (`prompts.SkillRisePrompt`), TextRooms' family with the document section first (`trial.SolvePrompt`), or the
    plain shared family (no document section)."""
    from .prompts import SkillRisePrompt
    from .trial import DOC_SLOT, SolvePrompt

    if env.solve_prompt == "plain":
        return make_base_prompt(env)
    if env.name == "textrooms":
        return SolvePrompt(make_base_prompt(env))
    return SkillRisePrompt(env.name, env.history_length, DOC_SLOT)


def make_env_factory(env: EnvConfig):
    """The pool's environment constructor (ScienceWorld with the official action block under SkillRise prompts)."""
    from .prompts import env_factory

    return env_factory(env.name, env.env_kwargs, action_block=env.solve_prompt == "skillrise")


@dataclass
class WarmStartConfig:
    """Curation warm start before RL (`warmstart.py`; CPU scale only, off by default: the paper's Qwen3-4B already
    curates and reads skill documents, so the paper runs none).

    Args:
        num_tasks (`int`): made-up TextRooms tasks (`skill_reader.synthetic_tasks`, drawn with the trainer's seed; no
            real object of training or evaluation), played as cross and repeat trials of K; 0 = off.
        epochs (`int`): passes over the gold rows.
        batch_rows (`int`): rows per optimizer step.
        learning_rate (`float`): AdamW learning rate (no weight decay, grad clip `trainer.max_grad_norm`).
    """

    num_tasks: int = 0
    epochs: int = 1
    batch_rows: int = 4
    learning_rate: float = 1e-4
