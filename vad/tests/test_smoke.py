"""Smoke training through the CLI on CPU with the tiny random Qwen2.5-VL: plain, and under single-process ZeRO-3.

`smoke.yaml` trains 2 optimizer steps with lr 0.1 (paper: 2e-6) so that every trainable parameter, vision tower
included, visibly moves; the checks are that every parameter changed and the VAD metrics are logged and finite.
"""

import math
import socket

import pytest
import torch

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


def test_train_cli_every_parameter_changes(tmp_path):
    initial = _initial_params()
    trainer = cli.run(["train", "--config", "smoke", f"trainer.output_dir={tmp_path}"])
    params = dict(trainer.model.named_parameters())
    assert set(params) == set(initial)
    unchanged = [n for n, p in params.items() if p.requires_grad and torch.equal(p.detach(), initial[n])]
    assert unchanged == [], unchanged
    _check_logs(trainer)
    assert (tmp_path / "resolved_config.json").exists() and (tmp_path / "log_history.json").exists()


def test_train_cli_grpo_baseline_runs(tmp_path):
    # target=grpo skips the teacher and uses TRL's own loss on the exact-match reward (spec 5)
    trainer = cli.run(["train", "--config", "smoke", f"trainer.output_dir={tmp_path}", "target=grpo", "max_steps=1"])
    assert trainer.teacher_model is None
    assert not any("vad/vis_loss" in h for h in trainer.state.log_history)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_train_cli_zero3_every_parameter_changes(tmp_path, monkeypatch):
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
    trainer = cli.run(["train", "--config", "smoke", f"trainer.output_dir={tmp_path}", ZERO3])
    try:
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


@pytest.mark.parametrize("command", ["train", "eval"])
def test_cli_rejects_unknown_key(command):
    from agentrl_shared.config import ConfigError

    with pytest.raises(ConfigError, match="top_k"):
        cli.run([command, "--config", "smoke", "trainer.top_kk=3"])
