"""Config tests: every YAML in vad/configs loads, paper defaults are pinned (Sec. 4.1), unknown keys are rejected,
and every paper row maps to the switches that define it and back."""

import importlib.resources

import pytest

from agentrl_shared.config import ConfigError, LaunchConfig, ModelConfig, load_config
from vad.config import ROWS, DataConfig, VADConfig, row_label
from vad.trainer import VADTrainer


SECTIONS = {"trainer": VADConfig, "data": DataConfig, "model": ModelConfig, "launch": LaunchConfig}
CONFIGS = sorted(
    p.name[:-5] for p in (importlib.resources.files("vad") / "configs").iterdir() if p.name.endswith(".yaml")
)
PAPER_CONFIGS = [c for c in CONFIGS if c.endswith("_paper")]


def test_config_files_exist():
    assert {
        "smoke",
        "procedural_warm-tiny-qwen25vl_cpu",
        "visionopd_qwen3.5-4b_paper",
        "visionopd_qwen3.5-9b_paper",
    } <= set(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_yaml_loads(name):
    overrides = ["trainer.use_cpu=true", "trainer.bf16=false", "trainer.use_vllm=false"]
    resolved = load_config(name, overrides, SECTIONS, "vad")
    assert isinstance(resolved["trainer"], VADConfig) and isinstance(resolved["data"], DataConfig)


def test_paper_defaults_pinned():
    args = VADConfig(output_dir="/tmp/vad-cfg", use_cpu=True)
    assert args.support_k == 100 and args.tail_bucket  # Sec. 4.1: top-100 + tail bucket
    assert args.zeta == 1e-3 and args.target_clip == 20.0 and args.reg_weight == 0.1
    assert args.tau_plus == 0.8  # 4B
    assert args.divergence == "jsd" and args.target == "vad" and args.branch_weights == "capped"
    assert args.q_tail == "student_mass" and args.is_clip == 2.0
    assert args.learning_rate == 2e-6 and args.num_generations == 8 and args.max_completion_length == 1024
    assert args.beta == 0.0 and args.num_train_epochs == 1 and args.warmup_steps == 10
    assert args.lr_scheduler_type == "constant_with_warmup" and args.weight_decay == 0.01  # Vision-OPD optim/fsdp.yaml
    assert args.chat_template_kwargs == {"enable_thinking": False}
    assert args.top_k == 0 and args.top_p == 1.0 and args.min_p is None  # TRL's sampling: unfiltered
    assert args.report_to == [] or args.report_to == "none" or args.report_to == ["none"]
    data = DataConfig()
    assert data.degrade_scale == 0.1 and data.minus_framing == "crop" and data.judge_model == "openai/gpt-oss-120b"


def test_paper_9b_tau():
    resolved = load_config(
        "visionopd_qwen3.5-9b_paper", ["use_cpu=true", "bf16=false", "use_vllm=false"], SECTIONS, "vad"
    )
    assert resolved["trainer"].tau_plus == 0.7 and resolved["model"].name_or_path == "Qwen/Qwen3.5-9B"


def test_unknown_key_names_valid_ones():
    with pytest.raises(ConfigError, match="tau_plus"):
        load_config("smoke", ["trainer.tau_pluss=0.5"], SECTIONS, "vad")


@pytest.mark.parametrize(
    "override, valid",
    [
        ("target=other", "vad, one_sided, scalar, direct, grpo"),
        ("divergence=tv", "jsd, fkl, rkl"),
        ("branch_weights=x", "capped, redistribute"),
        ("q_tail=x", "student_mass, zero"),
        ("data.minus_framing=x", "crop, full"),
        ("data.name=x", "procedural, vision_opd"),
        ("data.rows=[vad,nope]", "base, vad"),
        ("data.eval_backend=x", "hf, openai, vllm"),
        ("data.align=0", "between 1 and data.image_size - data.detail_size"),
        ("data.x0_contrast=0", "must be in \\(0, 1\\]"),
        ("teacher_ema=0", "teacher_ema 0(\\.0)? must be in \\(0, 1\\]"),
    ],
)
def test_exact_name_switches(override, valid):
    with pytest.raises(ValueError, match=valid):
        load_config("smoke", [override], SECTIONS, "vad")


@pytest.mark.parametrize("row", [r for r, switches in ROWS.items() if switches is not None])
def test_row_switches_round_trip(row):
    resolved = load_config("smoke", [f"trainer.{k}={v}" for k, v in ROWS[row].items()], SECTIONS, "vad")
    assert row_label(resolved["trainer"], resolved["data"].minus_framing) == row


def test_ema_teacher_needs_a_teacher_and_files_off_rate_runs_apart():
    with pytest.raises(ValueError, match="target=grpo has none"):
        load_config("smoke", ["target=grpo", "teacher_ema=0.05"], SECTIONS, "vad")
    args = VADConfig(output_dir="/tmp/vad-cfg", use_cpu=True, target="direct", reg_weight=0.0, teacher_ema=0.1)
    assert row_label(args) == "direct+teacher_ema=0.1"  # Vision-OPD's row is rate 0.05
    assert row_label(VADConfig(output_dir="/tmp/vad-cfg", use_cpu=True, teacher_ema=0.05)) == "vad+teacher_ema=0.05"


def test_row_label_keeps_ablations_out_of_paper_rows():
    args = VADConfig(output_dir="/tmp/vad-cfg", use_cpu=True, divergence="fkl", reg_weight=0.0)
    assert row_label(args) == "vad_noreg_fkl"  # not the vad_fkl row (which keeps the regulariser)
    args = VADConfig(output_dir="/tmp/vad-cfg", use_cpu=True, branch_weights="redistribute")
    assert row_label(args, "full") == "vad+branch_weights=redistribute+minus_framing=full"


def test_paper_configs_plan_every_paper_row():
    import json

    rows = json.loads((importlib.resources.files("vad") / "paper_results.json").read_text())["rows"]
    overrides = ["trainer.use_cpu=true", "trainer.bf16=false", "trainer.use_vllm=false"]
    planned = {
        m: set(load_config(c, overrides, SECTIONS, "vad")["data"].rows)
        for m, c in (
            ("Qwen/Qwen3.5-4B", "visionopd_qwen3.5-4b_paper"),
            ("Qwen/Qwen3.5-9B", "visionopd_qwen3.5-9b_paper"),
        )
    }
    missing = [(r["model"], r["row"]) for r in rows if r["row"] not in planned[r["model"]]]
    assert missing == []


def _paper_trainer_args(name: str, *overrides: str) -> VADConfig:
    # use_vllm stays as the config sets it (true): only the fields are read, no engine starts
    return load_config(name, ["trainer.use_cpu=true", "trainer.bf16=false", *overrides], SECTIONS, "vad")["trainer"]


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_config_rollouts_and_optimiser_are_vision_opd(name):
    # what GRPOTrainer.__init__ hands vLLM / HF generate (`self.top_p`, `self.top_k`, `self.min_p` from these
    # fields): unfiltered sampling (VisionOPD/Vision-OPD @ c2e345f rollout.yaml top_k -1, top_p 1); the distillation
    # support is support_k = 100 (`distillation_topk=100`)
    args = _paper_trainer_args(name)
    assert args.use_vllm and args.vllm_importance_sampling_correction
    assert (args.top_k, args.top_p, args.min_p, args.temperature) == (0, 1.0, None, 1.0)
    assert args.support_k == 100
    # constant LR after 10 warm-up steps, weight decay 0.01 (optim/fsdp.yaml:21,39; run_vision_opd.sh lr_warmup_steps)
    assert (args.lr_scheduler_type, args.warmup_steps, args.weight_decay) == ("constant_with_warmup", 10, 0.01)
    assert args.chat_template_kwargs == {"enable_thinking": False}


def test_is_guard_refuses_truncated_sampling_before_any_model_loads():
    args = _paper_trainer_args("visionopd_qwen3.5-4b_paper", "trainer.top_k=20")
    with pytest.raises(ConfigError, match="top_k=20.*vllm_importance_sampling_correction=false"):
        VADTrainer("no-such-model", args=args)  # the check runs before the model path is read


def test_cpu_seeds_have_their_own_warm_start_and_training_questions(monkeypatch):
    """Each training seed of the CPU check gets its own warm start (init and pre-training questions) and its own
    training questions, while the held-out panel stays the same questions for every seed."""
    from vad import cli, warmstart

    built = []
    monkeypatch.setattr(warmstart, "warm_start", lambda **kw: built.append(kw["seed"]) or f"warm-{kw['seed']}")
    cfgs = [cli.load(cli.SCALE_CONFIGS["cpu"], [f"trainer.seed={s}", "data.num_train=8", "data.num_eval=4"])
            for s in (0, 1)]  # fmt: skip
    assert [cli.resolve_model(c) for c in cfgs] == ["warm-0", "warm-1"] and built == [0, 1]
    rows = [cli.train_dataset(c["data"], c["trainer"].seed) for c in cfgs]
    images = [[r["image"].tobytes() for r in seed_rows] for seed_rows in rows]
    assert all(a != b for a, b in zip(*images, strict=True))
    panels = [[(it.answer, it.image().tobytes()) for it in cli.procedural_items(c["data"], cli.Path("."))]
              for c in cfgs]  # fmt: skip
    assert panels[0] == panels[1]


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_the_paper_lr_warm_up_is_verls(name):
    """Vision-OPD's actor LR (VisionOPD/Vision-OPD @ c2e345f): `verl/utils/torch_functional.py`
    `get_constant_schedule_with_warmup` gives step/10 during 10 warm-up steps, then 1, and `fsdp_workers.py`
    `update_actor` steps it once per update after the update; so the first update runs at LR 0. With one optimizer
    step per generation batch (the paper configs), the HF scheduler the trainer builds must give the same LRs."""
    import torch
    from transformers import get_scheduler

    args = load_config(name, ["trainer.use_cpu=true", "trainer.bf16=false", "trainer.use_vllm=false"], SECTIONS,
                       "vad")["trainer"]  # fmt: skip
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    steps = 65  # ~65 steps of 96 prompts (1 epoch of Vision-OPD-6K)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(steps),
                              num_training_steps=steps)  # fmt: skip
    lrs = []
    for _ in range(12):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([k / 10 for k in range(10)] + [1.0, 1.0])


def test_fields_file_is_current():
    """`configs/fields.json` (the field types `vad train` checks before torch loads) matches the config classes."""
    from agentrl_shared.schema import stale

    assert (why := stale("vad")) is None, why
