"""Smoke training on CPU with the tiny random Qwen2.5-VL: plain, under single-process ZeRO-3, and the CLI end to end.

`smoke.yaml` trains 2 optimizer steps with lr 0.1 (paper: 2e-6) so that every trainable parameter, vision tower
included, visibly moves; the checks are that every parameter changed and the VAD metrics are logged and finite.
"""

import json
import math
import socket
import subprocess
import sys

import pytest
import torch
from transformers import TrainerCallback

from vad import cli


ZERO3 = (
    'trainer.deepspeed={"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", '
    '"zero_optimization": {"stage": 3}, "zero_allow_untested_optimizer": true, "bf16": {"enabled": false}}'
)


def _initial_params() -> dict[str, torch.Tensor]:
    from transformers import Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(cli.model_path(cli.TINY_VLM))
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _check_logs(trainer) -> None:
    logs = [h for h in trainer.state.log_history if "vad/vis_loss" in h]
    assert len(logs) == 2
    for key in ("vad/vis_loss", "vad/reg_loss", "vad/reg_weight", "vad/beta", "vad/rho", "vad/misaligned_frac"):
        assert all(math.isfinite(h[key]) for h in logs), key
    assert all(0.0 <= h["vad/reg_weight"] <= 1.0 for h in logs)


class StudentSnapshots(TrainerCallback):
    """The student's (gathered) parameters after every optimizer step."""

    def __init__(self, trainer):
        self.trainer, self.steps = trainer, []

    def on_optimizer_step(self, args, state, control, **kwargs):
        params = list(self.trainer.model.parameters())
        if self.trainer.is_deepspeed_enabled:
            import deepspeed

            with deepspeed.zero.GatheredParameters(params):
                self.steps.append([p.detach().clone() for p in params])
        else:
            self.steps.append([p.detach().clone() for p in params])


def _trainer(tmp_path, *overrides, snapshots: bool = False):
    cfg = cli.load("smoke", [f"trainer.output_dir={tmp_path}", *overrides])
    trainer = cli.build_trainer(cfg)
    if snapshots:
        trainer.snapshots = StudentSnapshots(trainer)
        trainer.add_callback(trainer.snapshots)
    trainer.train()
    return trainer


def _check_ema_teacher(trainer, initial: dict, rate: float) -> None:
    """theta_T = EMA of the student's parameters after each step, from the initial model (Vision-OPD dp_actor.py)."""
    teacher = list(trainer.accelerator.unwrap_model(trainer.teacher_model).named_parameters())
    expected = [initial[n].clone() for n, _ in teacher]
    for step in trainer.snapshots.steps:
        expected = [(1 - rate) * e + rate * s for e, s in zip(expected, step, strict=True)]
    assert len(trainer.snapshots.steps) == 2
    if trainer.is_deepspeed_enabled:
        import deepspeed

        with deepspeed.zero.GatheredParameters([p for _, p in teacher]):
            got = [p.detach().clone() for _, p in teacher]
    else:
        got = [p.detach() for _, p in teacher]
    for (name, _), g, e in zip(teacher, got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, msg=name)
    assert not all(torch.equal(g, initial[n]) for (n, _), g in zip(teacher, got, strict=True))  # it moved


def test_train_every_parameter_changes(tmp_path):
    initial = _initial_params()
    trainer = _trainer(tmp_path)
    params = dict(trainer.model.named_parameters())
    assert set(params) == set(initial)
    unchanged = [n for n, p in params.items() if p.requires_grad and torch.equal(p.detach(), initial[n])]
    assert unchanged == [], unchanged
    _check_logs(trainer)
    # the loss support (support_k 16) does not reach generation: rollouts sample unfiltered (TRL's top_k 0)
    assert trainer.args.support_k == 16 and trainer.generation_kwargs["top_k"] == 0
    assert trainer.generation_kwargs["top_p"] == 1.0


def test_vision_opd_row_trains_an_ema_teacher(tmp_path):
    initial = _initial_params()
    trainer = _trainer(tmp_path, "trainer.teacher_ema=0.5", "trainer.target=direct", "trainer.reg_weight=0.0",
                       snapshots=True)  # fmt: skip
    _check_ema_teacher(trainer, initial, 0.5)


def _teacher_state(trainer) -> dict[str, torch.Tensor]:
    teacher = trainer.accelerator.unwrap_model(trainer.teacher_model)
    return {n: p.detach().clone() for n, p in teacher.named_parameters()}


def test_ema_teacher_is_checkpointed_and_resumed(tmp_path):
    """The EMA teacher is saved with each checkpoint; resuming restores it and the EMA goes on from it (not from the
    initial model); a checkpoint without it is refused."""
    from safetensors.torch import load_file

    from vad.trainer import TEACHER_EMA_FILE

    ema = ["trainer.teacher_ema=0.5", "trainer.target=direct", "trainer.reg_weight=0.0",
           "trainer.save_strategy=steps", "trainer.save_steps=1"]  # fmt: skip
    first = _trainer(tmp_path, *ema, "trainer.max_steps=1")
    after_one = _teacher_state(first)
    saved = load_file(tmp_path / "checkpoint-1" / TEACHER_EMA_FILE)
    assert saved.keys() == after_one.keys()
    for name, value in after_one.items():
        torch.testing.assert_close(saved[name], value, rtol=0, atol=0, msg=name)

    cfg = cli.load("smoke", [f"trainer.output_dir={tmp_path}", *ema])  # max_steps 2: one more step after resuming
    resumed = cli.build_trainer(cfg)
    resumed.snapshots = StudentSnapshots(resumed)
    resumed.add_callback(resumed.snapshots)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 2 and len(resumed.snapshots.steps) == 1
    got = _teacher_state(resumed)
    student = resumed.snapshots.steps[0]
    for (name, g), s in zip(got.items(), student, strict=True):
        torch.testing.assert_close(g, 0.5 * after_one[name] + 0.5 * s, rtol=1e-5, atol=1e-6, msg=name)
    assert not all(torch.equal(g, after_one[n]) for n, g in got.items())  # it moved on from the saved teacher

    (tmp_path / "checkpoint-2" / TEACHER_EMA_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="teacher_ema.safetensors"):
        resumed.load_teacher(str(tmp_path / "checkpoint-2"))


def test_train_grpo_baseline_runs(tmp_path):
    # target=grpo skips the teacher and uses TRL's own loss on the option-letter reward
    trainer = _trainer(tmp_path, "target=grpo", "max_steps=1")
    assert trainer.teacher_model is None
    assert not any("vad/vis_loss" in h for h in trainer.state.log_history)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_teacher_save_load_zero3(trainer, folder) -> None:
    """Under ZeRO-3 the checkpointed teacher is the gathered full teacher, and loading it re-partitions it."""
    import deepspeed
    from safetensors.torch import load_file

    from vad.trainer import TEACHER_EMA_FILE

    teacher = list(trainer.accelerator.unwrap_model(trainer.teacher_model).named_parameters())
    trainer.save_teacher(str(folder))
    saved = load_file(folder / TEACHER_EMA_FILE)
    with deepspeed.zero.GatheredParameters([p for _, p in teacher], modifier_rank=0):
        for name, p in teacher:
            assert torch.equal(saved[name], p.detach().cpu()), name
            p.data.zero_()  # then loading must bring every value back
    trainer.load_teacher(str(folder))
    with deepspeed.zero.GatheredParameters([p for _, p in teacher]):
        for name, p in teacher:
            assert torch.equal(p.detach().cpu(), saved[name]), name


def test_train_zero3_every_parameter_changes(tmp_path, monkeypatch):
    import deepspeed

    for key, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "ACCELERATE_USE_DEEPSPEED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    initial = _initial_params()
    trainer = _trainer(tmp_path, ZERO3, "trainer.teacher_ema=0.5", snapshots=True)  # the EMA teacher under ZeRO-3
    try:
        _check_ema_teacher(trainer, initial, 0.5)
        _check_teacher_save_load_zero3(trainer, tmp_path / "teacher")
        assert trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3
        assert type(trainer.teacher_model).__name__ == "DeepSpeedEngine"  # prepare_deepspeed wrapped the teacher
        params = list(trainer.model.named_parameters())
        with deepspeed.zero.GatheredParameters([p for _, p in params]):
            unchanged = [n for n, p in params if p.requires_grad and torch.equal(p.detach(), initial[n])]
        assert unchanged == [], unchanged
        _check_logs(trainer)
    finally:
        from accelerate.state import AcceleratorState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def test_cli_config_error_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "vad.cli", "train", "--config", "smoke", "trainer.top_kk=3"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "top_k" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_train_eval_report_end_to_end(tmp_path, readme):
    """`vad train` writes one row's result under --output; `vad eval` the base row; `vad report` files both and
    fills the README block, leaving every paper row "not run"."""
    runs = tmp_path / "runs"
    record = cli.run(["train", "--config", "smoke", "--output", str(runs), "max_steps=1", "data.num_eval=4"])
    assert record["row"] == "vad" and "procedural" in record["scores"]
    assert (runs / "smoke" / "vad_seed0" / "eval" / "procedural" / "rank0.jsonl").exists()
    assert (runs / "smoke" / "vad_seed0" / "results.json").exists()
    base = cli.run(["eval", "--config", "smoke", "--output", str(runs), "data.num_eval=4"])
    assert base["row"] == "base" and 0.0 <= base["scores"]["procedural"] <= 100.0
    table = cli.run(["report", "--runs", str(runs), "--readme", str(readme)])  # results: next to the README
    assert (tmp_path / "results" / "smoke" / "vad_seed0.json").exists()
    assert "| Avg6 | Qwen/Qwen3.5-4B | vad | 78.32 (Tab. 1) | not run | - |" in table
    assert "| procedural | tiny-qwen25-vl (smoke) | vad |" in table and table in readme.read_text()
    assert json.loads((tmp_path / "results" / "smoke" / "base_seed0.json").read_text())["row"] == "base"


def test_loss_chunking_and_vllm_importance_sampling(tmp_path):
    """The loss is the same whatever `logit_chunk_size`, and TRL's vLLM importance-sampling ratio multiplies the
    per-token loss exactly as in TRL's own `_compute_loss` when `use_vllm` and the correction are on."""
    cfg = cli.load("smoke", [f"trainer.output_dir={tmp_path}", "trainer.logit_chunk_size=256"])
    trainer = cli.build_trainer(cfg)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # set by the train loop
    row = trainer.train_dataset[0]
    inputs = trainer._generate_and_score_completions([row] * trainer.args.num_generations)
    model = trainer.model
    with torch.no_grad():
        full = trainer._compute_loss(model, inputs)
        trainer.args.logit_chunk_size = 1
        chunked = trainer._compute_loss(model, inputs)
        torch.testing.assert_close(chunked, full)
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
        inputs["importance_sampling_ratio"] = torch.full_like(inputs["completion_mask"], 0.5, dtype=torch.float32)
        torch.testing.assert_close(trainer._compute_loss(model, inputs), 0.5 * full)
    assert full.item() >= 0.0


def test_report_reads_only_filed_run_records(tmp_path, readme):
    """Other JSON files under the results folder (the GPU check's) are not run records: `report` skips them."""
    from vad.report import report

    results = tmp_path / "results"
    record = {"row": "vad", "model": "m", "config": "c", "seed": 0, "commit": "abc", "scores": {"procedural": 50.0},
              "details": {}, "log_history": []}  # fmt: skip
    (results / "c").mkdir(parents=True)
    (results / "c" / "vad_seed0.json").write_text(json.dumps(record))
    (results / "gpu_check" / "seed0").mkdir(parents=True)
    (results / "gpu_check" / "seed0" / "x0_signal.json").write_text(json.dumps({"arms": {}}))
    (results / "gpu_check" / "seed0" / "arm_vad_seed0.json").write_text(json.dumps({"arm": "vad"}))
    report(readme)
    assert "| procedural | m (c) | vad | 50.00 +- 0.00 (n=1) |" in readme.read_text()


def test_report_pairs_the_cpu_rows_to_the_direct_target_item_by_item(tmp_path, readme):
    """`paired-cpu`: each CPU row minus `direct_fkl` per x0 item (100 graded correct, 0 not), paired by training seed;
    a row whose files predate the items says not run."""
    from vad.cli import SCALE_CONFIGS
    from vad.report import report

    folder = tmp_path / "results" / SCALE_CONFIGS["cpu"]
    folder.mkdir(parents=True)
    correct = {  # row -> seed -> x0 items a..d graded correct
        "direct_fkl": {0: [1, 0, 0, 1], 1: [0, 0, 0, 0]},
        "vad_fkl": {0: [1, 1, 0, 1], 1: [1, 0, 0, 0]},
        "base": {0: [0, 0, 0, 0], 1: [1, 0, 0, 0]},
    }
    for row, seeds in correct.items():
        for seed, marks in seeds.items():
            items = {uid: bool(m) for uid, m in zip("abcd", marks, strict=True)}
            details = {"procedural": {"score": 25.0 * sum(marks), "items": items}} if row != "base" or seed else {}
            record = {"row": row, "model": "m", "config": SCALE_CONFIGS["cpu"], "seed": seed, "commit": "abc",
                      "scores": {"procedural": 25.0 * sum(marks)}, "details": details}  # fmt: skip
            (folder / f"{row}_seed{seed}.json").write_text(json.dumps(record))
    report(readme)
    lines = readme.read_text().splitlines()
    vad = next(ln for ln in lines if ln.startswith("| vad_fkl |"))
    assert "| vad_fkl | +25.0 |" in vad and "| 4 x 2 | +25.0 / +25.0 | 2 / 0 |" in vad
    base = next(ln for ln in lines if ln.startswith("| base |"))  # seed 0 kept no items: seed 1 pairs alone
    assert "| base | +25.0 |" in base and "| - (1 seed) | 4 x 1 | +25.0 | 1 / 0 |" in base


def test_sigterm_saves_the_step_in_progress_and_the_same_command_resumes(tmp_path, monkeypatch):
    """A SIGTERM during step 1 of the EMA row: that step finishes and is saved with its EMA teacher, the command ends
    as unfinished (exit 143, no results) with the handler given back; the same command then trains the last step
    from the checkpoint and files the row."""
    import os
    import signal

    from vad.trainer import TEACHER_EMA_FILE, VADTrainer

    runs = tmp_path / "runs"
    argv = ["train", "--config", "smoke", "--output", str(runs), "data.num_eval=2", "trainer.teacher_ema=0.5",
            "trainer.target=direct", "trainer.reg_weight=0.0"]  # fmt: skip
    compute_loss = VADTrainer.compute_loss

    def loss_then_sigterm(self, *args, **kwargs):  # the signal arrives while step 1 is computed
        if self.state.global_step == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return compute_loss(self, *args, **kwargs)

    monkeypatch.setattr(VADTrainer, "compute_loss", loss_then_sigterm)
    with pytest.raises(SystemExit) as exc:
        cli.run(argv)
    assert exc.value.code == 143 and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    [run] = (runs / "smoke").iterdir()
    assert sorted(p.name for p in (run / "trainer").glob("checkpoint-*")) == ["checkpoint-1"]
    assert (run / "trainer" / "checkpoint-1" / TEACHER_EMA_FILE).exists() and not (run / "results.json").exists()
    monkeypatch.undo()
    record = cli.run(argv)  # the same command: resumes at step 1, trains step 2 (smoke max_steps), files the row
    assert record["steps"] == 2 and (run / "results.json").exists()
