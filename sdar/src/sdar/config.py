"""SDAR's knobs (`SDARConfig`, a `GRPOConfig`) and the environment/rollout settings (`EnvConfig`).

Every default is the paper's, read from the official scripts `examples/sdar_trainer/run_alfworld_*.sh` and verl's
`ppo_trainer.yaml` (ZJU-REAL/SDAR@8b85c23 `examples/sdar_trainer/run_*.sh`); the ALFWorld values are the defaults, other environments override them
in `configs/*.yaml`. TRL fields are re-defaulted where verl-agent differs from TRL (verl `ppo_trainer.yaml` key by key).
"""

from dataclasses import dataclass, field

from trl import GRPOConfig


ADVANTAGE_MODES = ("grpo", "gigpo")  # `MultiTurnGRPOTrainer._score`'s estimators


@dataclass
class SDARConfig(GRPOConfig):
    r"""
    Configuration class for [`SDARTrainer`]: [`~trl.GRPOConfig`] plus SDAR's gated self-distillation term.

    Parameters that SDAR adds:
        sdar_coef (`float`, *optional*, defaults to `0.01`): lambda, weight of the SDAR term (sdar.md 2.7: "every
            script sets 0.01"). `0` gives the GRPO baseline.
        gate_beta (`float`, *optional*, defaults to `5.0`): beta of the gate sigmoid(beta * (l_T - sg(l_S)))
            (sdar.md 2.6). `0` gives the GRPO+OPSD baseline (constant gate 0.5).
        pg_loss_coef (`float`, *optional*, defaults to `1.0`): weight of the policy-gradient term; `0` gives the OPSD
            baseline (sdar.md section 5).
        advantage_mode (`str`, *optional*, defaults to `"grpo"`): the advantage estimator of the default `_score`:
            `grpo` (verl-agent `compute_grpo_outcome_advantage`, the paper's) or `gigpo` (the GiGPO baseline, verl-agent
            `gigpo/core_gigpo.py::compute_gigpo_outcome_advantage`, mode `mean_norm`; `agentrl_shared.gigpo`).
        step_gamma (`float`, *optional*, defaults to `0.95`): GiGPO's discount of the step returns (verl-agent GiGPO
            scripts: `algorithm.gamma=0.95`).
        step_advantage_w (`float`, *optional*, defaults to `1.0`): GiGPO's weight of the step advantage
            (`algorithm.gigpo.step_advantage_w=1.0`).
        invalid_action_penalty_coef (`float`, *optional*, defaults to `0.1`): subtracted from an invalid row's reward
            (verl-agent `invalid_action_penalty_coef`; 0.01 on Search-QA).
        retry_failed_episodes (`int`, *optional*, defaults to `0`): replay an episode whose environment crashed or timed
            out, from the start in a fresh environment, up to this many times (0: the official behaviour, where the
            failed episode is left out of the group statistics and the loss; `agentrl_shared.rollout.collect_with_retries`).
        skills_in_student_prompt (`bool`, *optional*, defaults to `False`): Skill-GRPO baseline: the student sees the
            skills during training.
        eval_with_skills (`bool`, *optional*, defaults to `False`): evaluate with skills in the prompt (the `*`
            columns of Table 1: Skill-Prompt*, Skill-GRPO*).
        skill_position (`str`, *optional*, defaults to `"legacy"`): where the privileged block goes: `legacy` before
            the whole chat-templated prompt (SDAR's results), `user` right after the user header (AgentOPSD's fork).
        shared_prefix_teacher (`bool`, *optional*, defaults to `False`): the teacher forward runs the prompt prefix
            that a micro-batch's rows share (the skill block, the chat header) once and only each row's rest
            (`agentrl_shared.prefix`); False: TRL's plain forward of every whole row. The same log-probs up to float
            rounding: in fp32 on SmolLM2-135M it is as close to each row's own unpadded forward as the plain padded
            forward is (`shared/tests/test_prefix.py`); a switch because in bf16 the two round differently. On in
            the CPU and smoke configs (1.6x faster there, `make bench`); off by default, so the paper
            configs keep TRL's forward: its gain at paper shapes was not shown (0.8x with 2 rows of 2048 + 512
            tokens on CPU) and it has not run on a GPU, in bf16 or with FlashAttention.
        shared_prefix_policy (`bool`, *optional*, defaults to `False`): the same for the policy's loss forward (with
            grad): the prompt prefix that a micro-batch's rows share (a group's G identical first-turn prompts, the
            chat header) runs once and only each row's rest; gradients reach the prefix through its keys/values and
            its backward runs once too (`agentrl_shared.prefix.shared_prefix_logps_and_entropies`). Log-probs,
            entropies and parameter gradients equal TRL's plain forward to float rounding
            (`shared/tests/test_prefix.py`, fp32). On in the CPU and smoke configs (`make bench`:
            `sdar/loss_forward`); off by default for the reasons of `shared_prefix_teacher`. The old/reference
            log-prob forwards (a second optimizer step, `beta` > 0) keep the plain forward.
            Both switches need `gradient_checkpointing=False`: a checkpointed layer in training mode drops the
            cache (transformers 5.17 `GradientCheckpointingLayer.__call__`).
        skills_dir (`str`, *optional*): a folder of the official skill documents in their layout (`<env>/
            skill_mapping.json` and the files it names; ZJU-REAL/SDAR@8b85c23 `skills/`, fetched by
            `make data ENV=skills`); the paper configs read `${SKILLS_DATA}`. None (CPU and test configs): this
            project's own documents (`agentrl_shared/skills/`, shorter rewrites; README Deviations).
        micro_batch_rows (`int`, *optional*, defaults to `32`): turn-rows per forward/backward (verl-agent
            `ppo_micro_batch_size_per_gpu`=32 on ALFWorld). An optimizer step takes `gradient_accumulation_steps`
            micro-batches per rank, i.e. a mini-batch of `world * gradient_accumulation_steps * micro_batch_rows`
            rows (verl-agent `ppo_mini_batch_size`), and a rollout makes ceil(rows / mini-batch) optimizer steps.
        log_prob_micro_batch_rows (`int`, *optional*): rows per no-grad forward (theta_old when a rollout makes several
            optimizer steps, the reference when `beta` > 0, the self-teacher), verl `log_prob_micro_batch_size_per_gpu`
            (all official scripts: 32 ALFWorld and Search, 16 WebShop); None: `micro_batch_rows`. Under the shared-
            prefix forwards a larger chunk runs a shared prompt prefix once for more rows. Every rank runs the same
            number of these forwards.
        num_rollouts (`int`, *optional*, defaults to `150`): training length in rollouts (verl `total_epochs` /
            `total_training_steps`: one rollout per training step); the learning-rate schedule counts rollouts too.
            `max_steps` is derived from it and must not be set.

    `per_device_train_batch_size * steps_per_generation` is the number of episodes a rank plays per rollout (TRL's
    generation batch); it must be a multiple of `num_generations`.
    """

    sdar_coef: float = field(default=0.01, metadata={"help": "lambda of the SDAR term. Paper: all scripts, 0.01."})
    gate_beta: float = field(default=5.0, metadata={"help": "beta of the gap gate. Paper: all scripts, 5.0."})
    pg_loss_coef: float = field(default=1.0, metadata={"help": "Policy-gradient weight; 0 = OPSD baseline."})
    advantage_mode: str = field(default="grpo", metadata={"help": "grpo (the paper's) | gigpo (GiGPO baseline)."})
    step_gamma: float = field(default=0.95, metadata={"help": "GiGPO step-return discount (algorithm.gamma=0.95)."})
    step_advantage_w: float = field(default=1.0, metadata={"help": "GiGPO step advantage weight (1.0)."})
    invalid_action_penalty_coef: float = field(
        default=0.1, metadata={"help": "verl-agent invalid_action_penalty_coef: 0.1 ALFWorld/WebShop, 0.01 Search."}
    )
    retry_failed_episodes: int = field(
        default=0,
        metadata={"help": "Replays of a failed (crashed, timed-out) episode in a fresh environment; 0: none."},
    )
    skills_in_student_prompt: bool = field(default=False, metadata={"help": "Skill-GRPO baseline (sdar.md 5)."})
    eval_with_skills: bool = field(default=False, metadata={"help": "Evaluate with skills (Table 1 `*` rows)."})
    skill_position: str = field(default="legacy", metadata={"help": "legacy (SDAR) or user (AgentOPSD fork)."})
    shared_prefix_teacher: bool = field(
        default=False, metadata={"help": "teacher forward: shared prompt prefix once per micro-batch (prefix.py)."}
    )
    shared_prefix_policy: bool = field(
        default=False, metadata={"help": "loss forward: shared prompt prefix once per micro-batch (prefix.py)."}
    )
    skills_dir: str | None = field(
        default=None,
        metadata={
            "help": "Official skill documents (make data ENV=skills; ZJU-REAL/SDAR@8b85c23 skills/); None: ours."
        },
    )
    micro_batch_rows: int = field(default=32, metadata={"help": "Rows per forward. Paper: micro-batch 32 (ALFWorld)."})
    log_prob_micro_batch_rows: int | None = field(
        default=None,
        metadata={
            "help": "Rows per no-grad forward (verl log_prob_micro_batch_size_per_gpu); None: micro_batch_rows."
        },
    )
    num_rollouts: int = field(default=150, metadata={"help": "Training length in rollouts. Paper: 150."})

    # --- re-defaulted GRPOConfig fields (verl defaults kept by the paper, sdar.md 2.5 and section 4) ---
    learning_rate: float = field(default=1e-6, metadata={"help": "actor.optim.lr=1e-6, constant."})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "verl: constant LR (HF default: linear)."})
    weight_decay: float = field(default=0.01, metadata={"help": "verl actor.optim.weight_decay=0.01."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "verl actor.grad_clip=1.0."})
    beta: float = field(default=0.01, metadata={"help": "kl_loss_coef: 0.01 ALFWorld/WebShop, 0.001 Search."})
    use_bias_correction_kl: bool = field(default=False, metadata={"help": "verl low_var_kl (k3) has no IS weight."})
    epsilon: float = field(default=0.2, metadata={"help": "clip_ratio_low=0.2."})
    epsilon_high: float = field(default=0.2, metadata={"help": "clip_ratio_high=0.2."})
    delta: float | None = field(
        default=3.0, metadata={"help": "verl dual clip clip_ratio_c=3.0 (verl `core_algos.compute_policy_loss`)."}
    )
    loss_type: str = field(default="dapo", metadata={"help": "Only dapo: token-mean over the step's global tokens."})
    entropy_coef: float = field(default=0.001, metadata={"help": "verl actor.entropy_coeff=0.001."})
    num_generations: int | None = field(default=8, metadata={"help": "env.rollout.n=8 (group size G)."})
    max_completion_length: int | None = field(default=512, metadata={"help": "data.max_response_length=512."})
    temperature: float = field(default=1.0, metadata={"help": "rollout temperature 1.0, top-p 1.0."})
    vllm_importance_sampling_correction: bool = field(
        default=False,
        metadata={"help": "The reference loss has no vLLM IS term (verl `core_algos.compute_policy_loss`)."},
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every optimizer step."})
    report_to: str | list[str] | None = field(default="none", metadata={"help": "W&B etc. are opt-in."})

    def __post_init__(self):
        if self.loss_type != "dapo":  # `losses.step_loss` is the only loss; TRL's loss types are not read
            raise ValueError(
                f"loss_type={self.loss_type!r}: SDAR's loss is token-mean over all real tokens of an optimizer step "
                "on all ranks (verl loss_agg_mode=token-mean, TRL's name: dapo); set trainer.loss_type=dapo or drop it."
            )
        if (self.shared_prefix_teacher or self.shared_prefix_policy) and self.gradient_checkpointing:
            raise ValueError(
                "shared_prefix_teacher / shared_prefix_policy run the suffixes against a key/value cache, which "
                "gradient checkpointing drops in training mode (transformers GradientCheckpointingLayer); set "
                "trainer.gradient_checkpointing=false or turn the switches off."
            )
        if self.max_steps > 0:
            raise ValueError(
                f"max_steps={self.max_steps} is set, but SDAR counts training in rollouts (a rollout makes a variable "
                "number of optimizer steps); set trainer.num_rollouts instead (paper: 150)."
            )
        super().__post_init__()
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(
                f"Unknown trainer.advantage_mode {self.advantage_mode!r}; valid: {', '.join(ADVANTAGE_MODES)}."
            )


ENV_TO_PROMPT = {"alfworld": "alfworld", "webshop": "webshop", "search_qa": "search", "textrooms": "textrooms"}


@dataclass
class EnvConfig:
    """Environment, rollout and evaluation settings (never part of `GRPOConfig`).

    Args:
        name (`str`): environment family (`alfworld`, `webshop`, `search_qa`, `textrooms`).
        train_split / eval_split (`str`): task splits (ALFWorld `train` / `valid_seen`, WebShop `train` / `test`).
        task_kwargs (`dict`): extra arguments of the family's task loader (e.g. a data path, `num_tasks`).
        env_kwargs (`dict`): constructor arguments of the environment.
        history_length (`int`): verl-agent `env.history_length` (2 ALFWorld/WebShop, 4 Search).
        max_turns (`int`): verl-agent `env.max_steps` (50 ALFWorld, 15 WebShop, 4 Search).
        max_prompt_length (`int`): `data.max_prompt_length` (2048 ALFWorld, 4096 WebShop/Search); longer prompts are
            left-truncated and counted in `env/prompt_truncated_ratio`.
        reward_scale (`float`): episode return = reward_scale * won (10 ALFWorld/WebShop, 1 Search; sdar.md 2.3).
        num_workers (`int`, *optional*): environment processes, the slots spread over them (`0` = in-process);
            `None`: one per slot, at most one per CPU core of this rank (`agentrl_shared.envs.pool.default_workers`).
            A crashed or hung process ends the episodes of every slot it hosts.
        step_timeout (`float`): seconds before a hung environment is killed and its episode marked failed.
        eval_episodes (`int`): fixed panel size (the first N tasks of `eval_split`; sdar.md 8 item 4).
        eval_temperature (`float`): 0.4 sampled on ALFWorld/WebShop, 0 (greedy) on Search (sdar.md 6).
        eval_seeds (`list[int]`): evaluation seeds; each gives one pass over the panel.
        eval_every (`int`): evaluate every this many rollouts during training (`trainer.test_freq`=5); 0 = off.
        eval_before_train (`bool`): also evaluate before the first rollout (verl `trainer.val_before_train`).
        eval_batch_size (`int`, *optional*): episodes played together in one evaluation pass, one batched generation
            per turn for all of them (verl-agent `data.val_batch_size`); `None`: the training rollout's episodes per
            rank. Each pass holds this many environments (in `num_workers` processes).
        seed_offset_eval (`int`): validation seeds are offset like verl-agent's `seed + 1000`.
    """

    name: str = "alfworld"
    train_split: str = "train"
    eval_split: str = "valid_seen"
    task_kwargs: dict = field(default_factory=dict)
    env_kwargs: dict = field(default_factory=dict)
    history_length: int = 2
    max_turns: int = 50
    max_prompt_length: int = 2048
    reward_scale: float = 10.0
    num_workers: int | None = None
    step_timeout: float = 60.0
    eval_episodes: int = 128
    eval_temperature: float = 0.4
    eval_seeds: list[int] = field(default_factory=lambda: [0])
    eval_every: int = 5
    eval_before_train: bool = True
    eval_batch_size: int | None = None
    seed_offset_eval: int = 1000

    def __post_init__(self):
        if self.name not in ENV_TO_PROMPT:
            raise ValueError(f"Unknown env.name {self.name!r}; valid names: {', '.join(ENV_TO_PROMPT)}.")
