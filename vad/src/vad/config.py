"""Configuration of VAD (paper arXiv 2607.28590, Sec. 4.1 implementation details).

`VADConfig(GRPOConfig)` holds the paper's knobs with the paper's defaults (each cited) and the baselines/ablations as
exact-name switches (Tab. 2 and 4 rows). `DataConfig` holds data, view and evaluation settings; they never enter
`GRPOConfig`. Values marked UNCERTAIN are not fixed by the paper; the README lists them under Deviations.
"""

from dataclasses import dataclass, field

from trl import GRPOConfig

from .benchmarks import BENCHMARKS
from .evaluation import NO_THINKING
from .losses import BRANCH_WEIGHTS, DIVERGENCES, Q_TAILS, TARGETS
from .rows import ROWS
from .views import COLOURS, MINUS_FRAMINGS


TRAINER_TARGETS = (*TARGETS, "grpo")  # "grpo": the reward-based RL baseline (paper Tab. 1), TRL's own loss
DATASETS = ("procedural", "vision_opd")
EVAL_BACKENDS = ("hf", "openai", "vllm")
EVAL_VIEWS = {"full": "procedural", "plus": "procedural_x+", "minus": "procedural_x-"}  # view -> score name


@dataclass
class VADConfig(GRPOConfig):
    """[`~trl.GRPOConfig`] plus VAD's knobs. Paper: https://huggingface.co/papers/2607.28590

    Defaults are the paper's (Sec. 4.1): top-100 support + tail bucket, zeta = 1e-3,
    c = 20, lambda = 0.1, tau_plus = 0.8 (4B; 0.7 for 9B), JSD, lr 2e-6, 8 rollouts per prompt, 1024 response tokens,
    one epoch with 10 warm-up steps then a constant LR, weight decay 0.01, thinking off (VisionOPD/Vision-OPD @
    c2e345f, `scripts/run_vision_opd.sh`, `verl/trainer/config/optim/fsdp.yaml`), no KL to a reference (beta = 0),
    unfiltered sampling (TRL's `top_k` 0, `top_p` 1; the support size is `support_k`).
    """

    # --- VAD (Sec. 3) ---
    target: str = field(
        default="vad",
        metadata={
            "help": "Target construction (Tab. 2): `vad` (branch-aware q^VAD, Eq. 8), `one_sided` (q^one = "
            "softmax(phi_S + r_vis)), `scalar` (scalar scaling of r_t), `direct` (q = p_T+, Vision-OPD-style direct "
            "teacher matching), `grpo` (reward-based RL baseline, TRL's GRPO loss)."
        },
    )
    divergence: str = field(
        default="jsd", metadata={"help": "`jsd` (paper), `fkl` or `rkl` (Tab. 4 ablation). Sec. 3.3."}
    )
    support_k: int = field(
        default=100,
        metadata={
            "help": "Student top-K support size of the distillation loss. Paper Sec. 4.1: K = 100 (Vision-OPD "
            "`distillation_topk=100`). Not TRL's sampling `top_k`, which stays 0: rollouts sample unfiltered "
            "(VisionOPD/Vision-OPD @ c2e345f `verl/trainer/config/rollout/rollout.yaml`: `top_k: -1`)."
        },
    )
    tail_bucket: bool = field(default=True, metadata={"help": "Append one tail bucket to the support. Sec. 4.1."})
    q_tail: str = field(
        default="student_mass",
        metadata={
            "help": "UNCERTAIN (Sec. 4.1 does not say): tail of q: `student_mass` (scale q_K by the student's top-K mass, tail = "
            "student's tail mass) or `zero` (tail gets zero mass)."
        },
    )
    zeta: float = field(default=1e-3, metadata={"help": "Ridge of the projection beta_t (Eq. 4). Paper: 1e-3."})
    target_clip: float = field(default=20.0, metadata={"help": "c in clip(r_VAD, -c, c) (Eq. 8). Paper: 20."})
    reg_weight: float = field(default=0.1, metadata={"help": "lambda, weak teacher regulariser (Eq. 10). Paper: 0.1."})
    tau_plus: float = field(
        default=0.8, metadata={"help": "Cap on the support-branch share (Eq. 7). Paper: 0.8 (4B), 0.7 (9B)."}
    )
    branch_weights: str = field(
        default="capped",
        metadata={
            "help": "UNCERTAIN (Sec. 3.2 does not say): `capped` (w- = a-/(a+ + a-), the cut budget is not redistributed) or "
            "`redistribute` (w- = 1 - w+, ablation)."
        },
    )
    eps: float = field(default=1e-8, metadata={"help": "UNCERTAIN (Sec. 3.2 does not say): norm-denominator epsilon."})
    log_eps: float = field(
        default=1e-10, metadata={"help": "UNCERTAIN (Sec. 3.2 does not say): epsilon inside phi's logs."}
    )
    scalar_scale: float | None = field(
        default=None,
        metadata={
            "help": "UNCERTAIN (Tab. 2 does not say): s for target=scalar; None uses s = |r_vis| / |r| per position."
        },
    )
    is_clip: float | None = field(
        default=2.0,
        metadata={
            "help": "Vision-OPD `is_clip` (VisionOPD/Vision-OPD @ c2e345f, `scripts/run_vision_opd.sh`; UNCERTAIN for VAD): per-token ratio exp(logp - logp_old) clipped "
            "at this value multiplies the loss when old log-probs exist; None disables."
        },
    )
    teacher_ema: float | None = field(
        default=None,
        metadata={
            "help": "None: the teacher is the frozen initial model (VAD, Sec. 3.1). A rate: after every optimizer "
            "step theta_T <- (1 - rate) theta_T + rate theta_S, Vision-OPD's EMA teacher (0.05; VisionOPD/Vision-OPD "
            "@ c2e345f `verl/workers/actor/dp_actor.py` `_update_teacher`), the `vision_opd` row."
        },
    )
    logit_chunk_size: int = field(
        default=256,
        metadata={
            "help": "Completion positions per chunk when the (B, C, V) logits are reduced to the top-K support "
            "(memory, not maths: each chunk's fp32 softmax is recomputed in backward)."
        },
    )
    # --- re-defaulted GRPOConfig fields (paper values) ---
    learning_rate: float = field(default=2e-6, metadata={"help": "Paper Sec. 4.1 (`optim.lr`): 2e-6."})
    num_generations: int | None = field(default=8, metadata={"help": "Rollouts per prompt. Paper: 8."})
    max_completion_length: int | None = field(
        default=1024, metadata={"help": "Vision-OPD `data.max_response_length`: 1024."}
    )
    beta: float = field(default=0.0, metadata={"help": "No KL to a reference model: the teacher is the anchor."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Vision-OPD: 1 epoch (~65 steps of 96 prompts)."})
    warmup_steps: float = field(default=10, metadata={"help": "Vision-OPD: 10 warm-up steps."})
    lr_scheduler_type: str = field(
        default="constant_with_warmup",
        metadata={
            "help": "Vision-OPD: constant LR after the warm-up (VisionOPD/Vision-OPD @ c2e345f "
            "`verl/trainer/config/optim/fsdp.yaml` `lr_scheduler_type: constant`, `lr_warmup_steps=10` in "
            "`scripts/run_vision_opd.sh`); TRL's default decays linearly to 0."
        },
    )
    weight_decay: float = field(
        default=0.01, metadata={"help": "Vision-OPD AdamW weight decay (`optim/fsdp.yaml` `weight_decay: 0.01`)."}
    )
    chat_template_kwargs: dict | str | None = field(
        default_factory=lambda: dict(NO_THINKING),
        metadata={
            "help": "Thinking off for the student rollouts and the teacher's x+/x- prompts, as in evaluation: "
            "Vision-OPD trains with a template whose generation prompt always closes the think block "
            "(VisionOPD/Vision-OPD @ c2e345f `chat_templates/perception_chat_template_qwen35.jinja`, used by "
            "`scripts/run_vision_opd.sh`); Qwen3.5-4B/9B's own template opens one unless `enable_thinking` is false."
        },
    )
    report_to: str | list[str] = field(default="none", metadata={"help": "W&B is opt-in (`report_to=wandb`)."})

    def __post_init__(self):
        for name, value, valid in (
            ("target", self.target, TRAINER_TARGETS),
            ("divergence", self.divergence, DIVERGENCES),
            ("q_tail", self.q_tail, Q_TAILS),
            ("branch_weights", self.branch_weights, BRANCH_WEIGHTS),
        ):
            if value not in valid:
                raise ValueError(f"Unknown {name} {value!r}; valid: {', '.join(valid)}.")
        if self.teacher_ema is not None and not 0 < self.teacher_ema <= 1:
            raise ValueError(f"teacher_ema {self.teacher_ema} must be in (0, 1] (Vision-OPD: 0.05), or null.")
        if self.teacher_ema is not None and self.target == "grpo":
            raise ValueError("teacher_ema needs a teacher: target=grpo has none (set teacher_ema=null).")
        if self.divergence == "rkl" and self.tail_bucket and self.q_tail == "zero":
            raise ValueError("divergence=rkl with q_tail=zero is infinite (KL(p_S || q) with q_tail = 0).")
        super().__post_init__()


def row_label(args: VADConfig, minus_framing: str = "crop") -> str:
    """The table row a trained configuration belongs to: target, regulariser on/off and divergence, plus any other
    ablation switch off its default (`vad+branch_weights=redistribute`), so a run lands only in the row it is."""
    if args.target == "grpo":
        return "grpo"
    name = args.target
    if (args.target, args.reg_weight, args.divergence, args.teacher_ema) == ("direct", 0.0, "jsd", 0.05):
        name = "vision_opd"
    if args.target == "vad" and args.reg_weight == 0:
        name = "vad_noreg"
    elif args.target in ("one_sided", "scalar") and args.reg_weight > 0:
        name += "_reg"
    if args.divergence != "jsd":
        name += f"_{args.divergence}"
    extra = []
    if args.target != "direct" and args.reg_weight not in (0.0, 0.1):
        extra.append(f"reg_weight={args.reg_weight}")
    for key, default in (("branch_weights", "capped"), ("q_tail", "student_mass"), ("tail_bucket", True),
                         ("scalar_scale", None), ("teacher_ema", 0.05 if name == "vision_opd" else None)):  # fmt: skip
        if getattr(args, key) != default:
            extra.append(f"{key}={getattr(args, key)}")
    if minus_framing != "crop":
        extra.append(f"minus_framing={minus_framing}")
    return "+".join([name, *extra])


@dataclass
class DataConfig:
    """Data, views, evaluation and the reproduction plan (paper Sec. 3.1 and 4.1).

    Args:
        name (`str`): `procedural` (generated fine-grained questions, CPU scale) or `vision_opd` (Vision-OPD-6K).
        path (`str` or `None`): Vision-OPD-6K folder (holding `train.jsonl`) or the file; default
            `$AGENTRL_DATA/vad/vision_opd`.
        benchmark_root (`str` or `None`): folder holding one snapshot folder per benchmark
            (`vad.benchmarks.SOURCES`); default `$AGENTRL_DATA/vad`.
        num_train (`int`): procedural training rows (a cap on Vision-OPD rows when > 0).
        num_eval (`int`): held-out procedural questions (a cap per benchmark when > 0).
        seed (`int`): seed of the held-out procedural panel, the same for every training seed (the training
            questions, the CPU warm start and TRL's sampler follow `trainer.seed`).
        image_size, detail_size (`int`): procedural image side and evidence patch side in pixels.
        cell (`int`): procedural texture cell (stripe / square) width in pixels; `detail_size` holds an even number.
        align (`int`): the procedural patch's corner lies on this pixel grid (1: anywhere, away from the border).
        distractors (`int`): flat one-colour squares of the patch's size on grid cells outside the patch's 3 x 3
            neighbourhood (needs `align` > 1; with `align` = `detail_size` a `crop_context` 3 crop holds none unless
            the image border shifts it).
        shuffle_options (`bool`): shuffle the procedural options per question (False: the letter names the texture).
        colours (`list[str]` or `None`): the procedural patch's two colours (names in `views.COLOURS`); None: a random
            pair per question.
        eval_views (`list[str]`): procedural panel views evaluated: `full` (x0, the score `procedural`), `plus`
            (x+, `procedural_x+`) and `minus` (x-, `procedural_x-`); the last two show what the views carry.
        x0_contrast (`float`): procedural x0 only: its pixels pulled toward mid-grey, 128 + c (p - 128) (1: unchanged;
            x+ and x- are cut from the unchanged image; a CPU-scale stand-in for the detail lost when a large image is
            shrunk to the model's input, README Deviation 11).
        crop_context (`float`): x+ window = `crop_context` x the evidence box (UNCERTAIN, Sec. 3.1).
        degrade_scale (`float`): x- downsampling factor. Paper: 0.1.
        minus_framing (`str`): `crop` (x+ framing, evidence pixelated; default) or `full` (UNCERTAIN, Sec. 3.1).
        benchmarks (`list[str]`): evaluation benchmarks at paper scale (Avg6 + Avg4).
        eval_backend (`str`): `hf` (transformers generate), `openai` (an OpenAI-compatible server at
            `eval_base_url`, as the official pipeline), `vllm` (TRL's colocated engine after training, or a `vllm.LLM`).
        eval_base_url, eval_model (`str` or `None`): server URL and served model name for `eval_backend=openai`.
        eval_max_new_tokens (`int`): generation budget at evaluation (Vision-OPD eval: 32768).
        eval_batch_size (`int`): items generated (and written) per batch on each rank.
        eval_seed (`int`): sampling seed of the evaluation requests (Vision-OPD eval: 42).
        judge_base_url (`str` or `None`): OpenAI-compatible judge for answers the rules reject (3 attempts, then "No");
            None = rules only (the report marks such results rule-scored).
        judge_model (`str`): judge model name. Paper: openai/gpt-oss-120b.
        rows (`list[str]`): table rows `vad reproduce` produces (`ROWS`).
    """

    name: str = "procedural"
    path: str | None = None
    benchmark_root: str | None = None
    num_train: int = 64
    num_eval: int = 32
    seed: int = 0
    image_size: int = 448
    detail_size: int = 10
    cell: int = 1
    align: int = 1
    distractors: int = 0
    shuffle_options: bool = True
    colours: list[str] | None = None
    eval_views: list[str] = field(default_factory=lambda: ["full"])
    x0_contrast: float = 1.0
    crop_context: float = 2.0
    degrade_scale: float = 0.1
    minus_framing: str = "crop"
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    eval_backend: str = "hf"
    eval_base_url: str | None = None
    eval_model: str | None = None
    eval_max_new_tokens: int = 1024
    eval_batch_size: int = 8
    eval_seed: int = 42
    judge_base_url: str | None = None
    judge_model: str = "openai/gpt-oss-120b"
    rows: list[str] = field(default_factory=lambda: ["base", "vad", "direct"])

    def __post_init__(self):
        for key, value, valid in (
            ("dataset", self.name, DATASETS),
            ("minus_framing", self.minus_framing, MINUS_FRAMINGS),
            ("eval_backend", self.eval_backend, EVAL_BACKENDS),
        ):
            if value not in valid:
                raise ValueError(f"Unknown {key} {value!r}; valid: {', '.join(valid)}.")
        for name in self.benchmarks:
            if name not in BENCHMARKS:
                raise ValueError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")
        if self.colours is not None and (len(self.colours) != 2 or not set(self.colours) <= set(COLOURS)):
            raise ValueError(f"data.colours must be two of {', '.join(COLOURS)}; got {self.colours}.")
        if self.detail_size % (2 * self.cell):
            raise ValueError(
                f"data.detail_size {self.detail_size} must hold an even number of data.cell {self.cell} px."
            )
        if not 1 <= self.align <= self.image_size - self.detail_size:
            raise ValueError(
                f"data.align {self.align} must be between 1 and data.image_size - data.detail_size "
                f"({self.image_size - self.detail_size})."
            )
        if not 0 < self.x0_contrast <= 1:
            raise ValueError(f"data.x0_contrast {self.x0_contrast} must be in (0, 1] (1: x0 unchanged).")
        if self.distractors and self.align == 1:
            raise ValueError("data.distractors needs the patch on a grid: set data.align > 1 (e.g. data.detail_size).")
        for view in self.eval_views:
            if view not in EVAL_VIEWS:
                raise ValueError(f"Unknown eval view {view!r}; valid: {', '.join(EVAL_VIEWS)}.")
        for name in self.rows:
            if name not in ROWS:
                raise ValueError(f"Unknown row {name!r}; valid: {', '.join(ROWS)}.")
        if self.eval_backend == "openai" and not self.eval_base_url:
            raise ValueError("data.eval_backend=openai needs data.eval_base_url=http://<host>:<port>/v1.")
