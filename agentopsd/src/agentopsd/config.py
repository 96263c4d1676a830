"""AgentOPSD's knobs (`AgentOPSDConfig`, a `GRPOConfig`) and the environment/rollout settings (`EnvConfig`).

Every AgentOPSD default is the full method of the official scripts, ZethWang/AgentOPSD@0c478b2
`examples/agentopsd_trainer/run_alfworld_7b.sh` (`+algorithm.opsd.*`), or, where a script sets nothing, the default
read by `verl/trainer/ppo/opsd_ray_trainer.py` (`opsd_cfg.get(...)`). ALFWorld values are the defaults; WebShop and
Search-QA override them in `configs/*.yaml`. Shared verl-agent values (learning rate, clip, KL, ...) are the same as
SDAR's, on the same codebase (ZJU-REAL/SDAR@8b85c23 `examples/sdar_trainer/run_alfworld_*.sh`).
"""

from dataclasses import dataclass, field

from trl import GRPOConfig


CREDITS = ("agentopsd", "grpo", "rlsd")
GRANULARITIES = ("turn", "token")
SKILL_POSITIONS = ("legacy", "user")
STUDENT_LOGPS = ("recompute", "generation")
ADVANTAGE_MODES = ("grpo", "gigpo")  # `MultiTurnGRPOTrainer._score`'s estimators


@dataclass
class AgentOPSDConfig(GRPOConfig):
    r"""
    Configuration class for [`AgentOPSDTrainer`]: [`~trl.GRPOConfig`] plus AgentOPSD's belief reweighting of the
    GRPO advantage. AgentOPSD adds no loss term.

    Parameters that AgentOPSD adds (official key `algorithm.opsd.<name>` unless said otherwise):
        credit (`str`, *optional*, defaults to `"agentopsd"`): the advantage: `agentopsd` (belief reweighting),
            `grpo` (A_hat = A, the GRPO baseline) or `rlsd` (RLSD baseline, SDAR repo `rlsd_utils.py`).
        granularity (`str`, *optional*, defaults to `"turn"`): `turn` (ALFWorld script) or `token` (WebShop and
            Search-QA scripts). The trainer's own fallback is `token`; every script sets it.
        belief_mult (`bool`, *optional*, defaults to `True`): the multiplier route (all scripts: `true`); `False` is
            the raw telescoping ablation (A_k = V_k - V_{k-1} rescaled to R - V_0), with `use_anchoring` and
            `use_group_norm` as its stabilisers.
        signed (`bool`, *optional*, defaults to `True`): z-score the signed increment and steer by sign(A) ("paper
            Eq.6" in the code; all scripts: `true`). `False`: magnitude-only ablation.
        mult_lambda (`float`, *optional*, defaults to `0.5`): lambda in A * ((1 - lambda) + lambda * m) (scripts).
        mult_band (`float`, *optional*, defaults to `0.2`): b, m in [1 - b, 1 + b] (trainer default; scripts unset).
        belief_gate (`bool`, *optional*, defaults to `True`): use q = V_k - V_{k-1} (implicit V(1-V) gate); `False`
            uses the raw evidence (ablation).
        mult_signed (`bool`, *optional*, defaults to `True`): multiply A; `False` multiplies |A| (ablation).
        warmdown_steps (`int`, *optional*, defaults to `-1`): linear decay of lambda to 0 over this many rollouts;
            `-1` keeps it constant (trainer default).
        v0_prior (`float` or `None`, *optional*, defaults to `None`): `None` = V_0 from the group mean of the returns
            (`compute_group_mean_v0`, what the official trainer uses whenever `uid`/`traj_uid` exist); a number = a
            fixed prior (the code's 0.5 fallback; the "neutral prior" alternative of the token path).
        v0_reward_scale (`float`, *optional*, defaults to `1.0`): divide returns by this before the V_0 mean. `1` is
            the official behaviour, whose V_0 saturates on the 10-point reward scale; `10` gives a success rate
            (our deviation switch).
        belief_decay_gamma (`float`, *optional*, defaults to `1.0`): leaky cumulative sum of evidence (ablation < 1).
        use_anchoring, use_group_norm, center_delta (`bool`, *optional*, default `False`): the code's ablations.
        rlsd_lambda (`float`, *optional*, defaults to `0.5`), rlsd_warmdown_steps (`int`, *optional*, defaults to
            `100`), rlsd_clip (`float`, *optional*, defaults to `0.2`): the RLSD baseline (SDAR repo
            `examples/rlsd_trainer/run_alfworld_7b.sh`).
        sdl_coef (`float`, *optional*, defaults to `0.0`): Skill-SD baseline loss weight (SDAR repo
            `examples/skillsd_trainer/run_*.sh`: `sdl_lambda=0.001`); 0 = off.
        advantage_mode (`str`, *optional*, defaults to `"grpo"`): the advantage estimator of the default `_score`:
            `grpo` (verl-agent `compute_grpo_outcome_advantage`, the paper's) or `gigpo` (the GiGPO baseline, verl-agent
            `gigpo/core_gigpo.py::compute_gigpo_outcome_advantage`, mode `mean_norm`; `agentrl_shared.gigpo`).
        step_gamma (`float`, *optional*, defaults to `0.95`): GiGPO's discount of the step returns (verl-agent GiGPO
            scripts: `algorithm.gamma=0.95`).
        step_advantage_w (`float`, *optional*, defaults to `1.0`): GiGPO's weight of the step advantage
            (`algorithm.gigpo.step_advantage_w=1.0`).
        invalid_action_penalty_coef (`float`, *optional*, defaults to `0.1`): verl-agent penalty (0.01 on Search).
        retry_failed_episodes (`int`, *optional*, defaults to `0`): replay an episode whose environment crashed or timed
            out, from the start in a fresh environment, up to this many times (0: the official behaviour, where the
            failed episode is left out of the group statistics and the loss; `agentrl_shared.rollout.collect_with_retries`).
        skills_in_student_prompt (`bool`, *optional*, defaults to `False`): Skill-GRPO baseline.
        eval_with_skills (`bool`, *optional*, defaults to `False`): evaluate with skills (the `*` rows).
        skill_position (`str`, *optional*, defaults to `"legacy"`): `build_teacher_batch(skill_position=...)`:
            `legacy` before the whole templated prompt, `user` after the first user header.
        shared_prefix_teacher (`bool`, *optional*, defaults to `False`): the teacher forward runs the prompt prefix
            that a micro-batch's rows share (the skill block, the chat header) once and only each row's rest
            (`agentrl_shared.prefix`); False: TRL's plain forward of every whole row. The same log-probs up to float
            rounding: in fp32 on SmolLM2-135M it is as close to each row's own unpadded forward as the plain padded
            forward is (`shared/tests/test_prefix.py`); a switch because in bf16 the two round differently. On in
            the CPU and smoke configs (1.6x faster there, `make bench`); off by default, so the paper
            configs keep TRL's forward: its gain at paper shapes was not shown (0.8x with 2 rows of 2048 + 512
            tokens on CPU) and it has not run on a GPU, in bf16 or with FlashAttention.
        shared_prefix_policy (`bool`, *optional*, defaults to `False`): the same for the policy's own forwards: the
            rollout-time student log-probs of the gap (no grad) and the loss forward (with grad through the prefix's
            keys/values, `agentrl_shared.prefix.shared_prefix_logps_and_entropies`); the G identical first-turn
            prompts of a group run once. Log-probs, entropies and gradients equal the plain forward at atol 1e-5 in
            fp32 (`shared/tests/test_prefix.py`). On in the CPU and smoke configs, off by default (as above).
        student_logps (`str`, *optional*, defaults to `"recompute"`): where the rollout-time student log-probs l^S of
            the gap come from when the rollout makes one optimizer step (with several, theta_old is recomputed for the
            loss anyway and read from there). `recompute`: a no-grad forward of every row, as the official trainer
            (verl `actor.compute_log_prob` -> `old_log_probs`). `generation`: with HF generation (no vLLM), the
            log-probs of the sampled tokens taken from the logits the policy sampled them with
            (`agentrl_shared.generation.SampledTokenLogps`): the same weights, precision and function, so equal to the
            recompute up to float rounding (the key/value cache, the padding), without its forward (verl's
            `algorithm.rollout_correction.bypass_mode` takes the rollout's log-probs as old log-probs the same way).
            With vLLM the base already recomputes theta_old to measure the engine gap, and that is used. On in the
            CPU config (the forward is about a tenth of a step there, `make bench`); off by default.
        skills_dir (`str`, *optional*): a folder of the official skill documents in their layout (`<env>/
            skill_mapping.json` and the files it names; ZJU-REAL/SDAR@8b85c23 `skills/`, fetched by
            `make data ENV=skills`); the paper configs read `${SKILLS_DATA}`. None (CPU and test configs): this
            project's own documents (`agentrl_shared/skills/`, shorter rewrites; README Deviations).
        micro_batch_rows (`int`, *optional*, defaults to `32`): turn-rows per forward/backward (verl-agent
            `ppo_micro_batch_size_per_gpu`=32 on ALFWorld). An optimizer step takes `gradient_accumulation_steps`
            micro-batches per rank, i.e. a mini-batch of `world * gradient_accumulation_steps * micro_batch_rows`
            rows (verl-agent `ppo_mini_batch_size`), and a rollout makes ceil(rows / mini-batch) optimizer steps over
            every row once (`agentrl_shared.batch.plan_steps`).
        log_prob_micro_batch_rows (`int`, *optional*): rows per no-grad forward (theta_old when a rollout makes several
            optimizer steps, the reference when `beta` > 0, the self-teacher and the rollout-time student), verl
            `log_prob_micro_batch_size_per_gpu` (all official scripts: 32 ALFWorld and Search, 16 WebShop); None:
            `micro_batch_rows`. Under the shared-prefix forwards a larger chunk runs a shared prompt prefix once for
            more rows. Every rank runs the same number of these forwards.
        num_rollouts (`int`, *optional*, defaults to `150`): training length in rollouts (verl `total_epochs` /
            `total_training_steps`: one rollout per training step, all scripts 150); lambda schedules and the
            learning-rate schedule count rollouts too. `max_steps` is derived from it and must not be set.

    `per_device_train_batch_size * steps_per_generation` is the number of episodes a rank plays per rollout (TRL's
    generation batch); it must be a multiple of `num_generations`.
    """

    credit: str = field(default="agentopsd", metadata={"help": "agentopsd | grpo | rlsd (baselines)."})
    granularity: str = field(default="turn", metadata={"help": "turn (ALFWorld script) | token (WebShop, Search)."})
    belief_mult: bool = field(default=True, metadata={"help": "Multiplier route; scripts: belief_mult=true."})
    signed: bool = field(default=True, metadata={"help": "Signed z-score (code Eq. 6); scripts: signed=true."})
    mult_lambda: float = field(default=0.5, metadata={"help": "lambda; scripts: mult_lambda=0.5."})
    mult_band: float = field(default=0.2, metadata={"help": "band b; opsd_ray_trainer.py default 0.2."})
    belief_gate: bool = field(default=True, metadata={"help": "q = V_k - V_{k-1} (True) or raw delta; default True."})
    mult_signed: bool = field(default=True, metadata={"help": "A (True) or |A| in the multiplier; default True."})
    warmdown_steps: int = field(default=-1, metadata={"help": "lambda decay horizon in rollouts; -1 = constant."})
    v0_prior: float | None = field(default=None, metadata={"help": "None = group-mean V_0 (official); or fixed."})
    v0_reward_scale: float = field(default=1.0, metadata={"help": "1 = official (saturates on 10*won); 10 = rate."})
    belief_decay_gamma: float = field(default=1.0, metadata={"help": "Leaky cumsum gamma; default 1 (plain)."})
    use_anchoring: bool = field(default=False, metadata={"help": "Raw-path ablation: sign from A."})
    use_group_norm: bool = field(default=False, metadata={"help": "Raw-path ablation: z-score within the group."})
    center_delta: bool = field(default=False, metadata={"help": "Ablation: subtract the mean evidence."})
    rlsd_lambda: float = field(default=0.5, metadata={"help": "RLSD lambda_0; SDAR repo rlsd scripts: 0.5."})
    rlsd_warmdown_steps: int = field(default=100, metadata={"help": "RLSD lambda decay; rlsd scripts: 100."})
    rlsd_clip: float = field(default=0.2, metadata={"help": "RLSD weight clip; rlsd scripts: clip_eps=0.2."})
    sdl_coef: float = field(default=0.0, metadata={"help": "Skill-SD loss weight; skillsd scripts: 0.001."})
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
    skills_in_student_prompt: bool = field(default=False, metadata={"help": "Skill-GRPO baseline."})
    eval_with_skills: bool = field(default=False, metadata={"help": "Evaluate with skills (`*` rows)."})
    skill_position: str = field(default="legacy", metadata={"help": "legacy | user (build_teacher_batch)."})
    shared_prefix_teacher: bool = field(
        default=False, metadata={"help": "teacher forward: shared prompt prefix once per micro-batch (prefix.py)."}
    )
    shared_prefix_policy: bool = field(
        default=False, metadata={"help": "student and loss forwards: shared prompt prefix once per micro-batch."}
    )
    student_logps: str = field(
        default="recompute", metadata={"help": "recompute (official) | generation (HF's sampling logits, no forward)."}
    )
    skills_dir: str | None = field(
        default=None,
        metadata={
            "help": "Official skill documents (make data ENV=skills; ZJU-REAL/SDAR@8b85c23 skills/); None: ours."
        },
    )
    micro_batch_rows: int = field(default=32, metadata={"help": "Rows per forward. ALFWorld micro-batch 32."})
    log_prob_micro_batch_rows: int | None = field(
        default=None,
        metadata={
            "help": "Rows per no-grad forward (verl log_prob_micro_batch_size_per_gpu); None: micro_batch_rows."
        },
    )
    num_rollouts: int = field(default=150, metadata={"help": "Training length in rollouts. Scripts: 150."})

    # --- re-defaulted GRPOConfig fields (verl defaults kept by the official scripts) ---
    learning_rate: float = field(default=1e-6, metadata={"help": "actor.optim.lr=1e-6, constant."})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "verl: constant LR (HF default: linear)."})
    weight_decay: float = field(default=0.01, metadata={"help": "verl actor.optim.weight_decay=0.01."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "verl actor.grad_clip=1.0."})
    beta: float = field(default=0.01, metadata={"help": "kl_loss_coef: 0.01 ALFWorld/WebShop, 0.001 Search."})
    use_bias_correction_kl: bool = field(default=False, metadata={"help": "verl low_var_kl (k3) has no IS weight."})
    epsilon: float = field(default=0.2, metadata={"help": "clip_ratio_low=0.2."})
    epsilon_high: float = field(default=0.2, metadata={"help": "clip_ratio_high=0.2."})
    delta: float | None = field(default=3.0, metadata={"help": "verl dual clip clip_ratio_c=3.0."})
    loss_type: str = field(default="dapo", metadata={"help": "Only dapo: token-mean over the step's global tokens."})
    entropy_coef: float = field(default=0.001, metadata={"help": "verl actor.entropy_coeff=0.001."})
    num_generations: int | None = field(default=8, metadata={"help": "env.rollout.n=8 (group size G)."})
    max_completion_length: int | None = field(default=512, metadata={"help": "data.max_response_length=512."})
    temperature: float = field(default=1.0, metadata={"help": "rollout temperature 1.0, top-p 1.0."})
    vllm_importance_sampling_correction: bool = field(
        default=False, metadata={"help": "The reference loss has no vLLM IS term."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every optimizer step."})
    report_to: str | list[str] | None = field(default="none", metadata={"help": "W&B etc. are opt-in."})

    def __post_init__(self):
        if self.loss_type != "dapo":  # `losses.step_loss` is the only loss; TRL's loss types are not read
            raise ValueError(
                f"loss_type={self.loss_type!r}: AgentOPSD's loss is token-mean over all real tokens of an optimizer step "
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
                f"max_steps={self.max_steps} is set, but AgentOPSD counts training in rollouts (a rollout makes a "
                "variable number of optimizer steps); set trainer.num_rollouts instead (scripts: 150)."
            )
        super().__post_init__()
        for name, value, valid in (
            ("credit", self.credit, CREDITS),
            ("granularity", self.granularity, GRANULARITIES),
            ("skill_position", self.skill_position, SKILL_POSITIONS),
            ("student_logps", self.student_logps, STUDENT_LOGPS),
            ("advantage_mode", self.advantage_mode, ADVANTAGE_MODES),
        ):
            if value not in valid:
                raise ValueError(f"Unknown trainer.{name} {value!r}; valid: {', '.join(valid)}.")
        if self.advantage_mode == "gigpo" and self.credit != "grpo":
            raise ValueError(
                f"advantage_mode=gigpo with credit={self.credit!r}: AgentOPSD's and RLSD's weights rescale the GRPO "
                "advantage their papers define; set trainer.credit=grpo for the GiGPO baseline."
            )
        if not 0.0 <= self.mult_lambda <= 1.0 or not 0.0 <= self.mult_band < 1.0:
            raise ValueError("trainer.mult_lambda must be in [0, 1] and trainer.mult_band in [0, 1).")


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
        reward_scale (`float`): episode return = reward_scale * won (10 ALFWorld/WebShop, 1 Search).
        num_workers (`int`, *optional*): environment processes, the slots spread over them (`0` = in-process);
            `None`: one per slot, at most one per CPU core of this rank (`agentrl_shared.envs.pool.default_workers`).
            A crashed or hung process ends the episodes of every slot it hosts.
        step_timeout (`float`): seconds before a hung environment is killed and its episode marked failed.
        eval_episodes (`int`): fixed panel size (the first N tasks of `eval_split`).
        eval_temperature (`float`): 0.4 sampled on ALFWorld/WebShop, 0 (greedy) on Search.
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
