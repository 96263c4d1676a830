"""Configuration of VAD (paper arXiv 2607.28590, Sec. 4.1 implementation details; spec vad.md section 4).

`VADConfig(GRPOConfig)` holds the paper's knobs with the paper's defaults (each cited) and the baselines/ablations as
exact-name switches (spec section 5). `DataConfig` holds data, view and evaluation settings; they never enter
`GRPOConfig`. Values marked UNCERTAIN come from the spec's list of unresolved items and are listed in the README.
"""

from dataclasses import dataclass, field

from trl import GRPOConfig

from .data import BENCHMARKS, MINUS_FRAMINGS
from .losses import BRANCH_WEIGHTS, DIVERGENCES, Q_TAILS, TARGETS


TRAINER_TARGETS = (*TARGETS, "grpo")  # "grpo": the reward-based RL baseline (spec 5), TRL's own loss
DATASETS = ("procedural", "vision_opd")


@dataclass
class VADConfig(GRPOConfig):
    """[`~trl.GRPOConfig`] plus VAD's knobs. Paper: https://huggingface.co/papers/2607.28590

    Defaults are the paper's (Sec. 4.1 as quoted by spec vad.md 4): top-100 support + tail bucket, zeta = 1e-3,
    c = 20, lambda = 0.1, tau_plus = 0.8 (4B; 0.7 for 9B), JSD, lr 2e-6, 8 rollouts per prompt, 1024 response tokens,
    one epoch with 10 warm-up steps (Vision-OPD `scripts/run_vision_opd.sh`), no KL to a reference (beta = 0).
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
    top_k: int = field(default=100, metadata={"help": "Student top-K support size. Paper Sec. 4.1: K = 100."})
    tail_bucket: bool = field(default=True, metadata={"help": "Append one tail bucket to the support. Sec. 4.1."})
    q_tail: str = field(
        default="student_mass",
        metadata={
            "help": "UNCERTAIN (spec 2.4): tail of q: `student_mass` (scale q_K by the student's top-K mass, tail = "
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
            "help": "UNCERTAIN (spec 2.2): `capped` (w- = a-/(a+ + a-), the cut budget is not redistributed) or "
            "`redistribute` (w- = 1 - w+, ablation)."
        },
    )
    eps: float = field(default=1e-8, metadata={"help": "UNCERTAIN (spec 2.2): norm-denominator epsilon."})
    log_eps: float = field(default=1e-10, metadata={"help": "UNCERTAIN (spec 2.2): epsilon inside phi's logs."})
    scalar_scale: float | None = field(
        default=None,
        metadata={"help": "UNCERTAIN (spec 5): s for target=scalar; None uses s = |r_vis| / |r| per position."},
    )
    is_clip: float | None = field(
        default=2.0,
        metadata={
            "help": "Vision-OPD `is_clip` (spec 2.5, UNCERTAIN for VAD): per-token ratio exp(logp - logp_old) clipped "
            "at this value multiplies the loss when old log-probs exist; None disables."
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
        if self.divergence == "rkl" and self.tail_bucket and self.q_tail == "zero":
            raise ValueError("divergence=rkl with q_tail=zero is infinite (KL(p_S || q) with q_tail = 0).")
        super().__post_init__()


@dataclass
class DataConfig:
    """Data, views and evaluation (spec vad.md 2.1 and 6).

    Args:
        name (`str`): `procedural` (generated fine-grained questions, CPU scale) or `vision_opd` (Vision-OPD-6K).
        path (`str` or `None`): Vision-OPD-6K folder/file; default `$AGENTRL_DATA/Vision-OPD-6K`.
        num_train (`int`): procedural training rows (or a cap on Vision-OPD rows when > 0).
        num_eval (`int`): held-out procedural questions (or a cap per benchmark when > 0).
        seed (`int`): data seed (the training seed is `trainer.seed`).
        image_size, detail_size (`int`): procedural image side and evidence size in pixels.
        crop_context (`float`): x+ window = `crop_context` x the evidence box (UNCERTAIN, spec 2.1).
        degrade_scale (`float`): x- downsampling factor. Paper: 0.1.
        minus_framing (`str`): `crop` (x+ framing, pixelated evidence; default) or `full` (UNCERTAIN, spec 2.1).
        benchmarks (`list[str]`): evaluation benchmarks for `vad eval` at paper scale.
        eval_max_new_tokens (`int`): generation budget at evaluation.
        judge_base_url (`str` or `None`): OpenAI-compatible judge endpoint; None scores by exact option matching.
        judge_model (`str`): judge model name. Paper: openai/gpt-oss-120b.
        seeds (`list[int]`): training seeds run by `vad reproduce`.
        baselines (`list[str]`): trainer targets run by `vad reproduce` next to the configured one.
        results_dir (`str`): where results JSON, curves and resolved configs are written.
    """

    name: str = "procedural"
    path: str | None = None
    num_train: int = 64
    num_eval: int = 32
    seed: int = 0
    image_size: int = 448
    detail_size: int = 20
    crop_context: float = 2.0
    degrade_scale: float = 0.1
    minus_framing: str = "crop"
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    eval_max_new_tokens: int = 1024
    judge_base_url: str | None = None
    judge_model: str = "openai/gpt-oss-120b"
    seeds: list[int] = field(default_factory=lambda: [0])
    baselines: list[str] = field(default_factory=lambda: ["direct"])
    results_dir: str = "vad/results"

    def __post_init__(self):
        if self.name not in DATASETS:
            raise ValueError(f"Unknown dataset {self.name!r}; valid: {', '.join(DATASETS)}.")
        if self.minus_framing not in MINUS_FRAMINGS:
            raise ValueError(f"Unknown minus_framing {self.minus_framing!r}; valid: {', '.join(MINUS_FRAMINGS)}.")
        for name in self.benchmarks:
            if name not in BENCHMARKS:
                raise ValueError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")
        for name in self.baselines:
            if name not in TRAINER_TARGETS:
                raise ValueError(f"Unknown baseline target {name!r}; valid: {', '.join(TRAINER_TARGETS)}.")
