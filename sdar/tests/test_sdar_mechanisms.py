"""`sdar mechanisms`: the results file's fields, the gap from the trainer's forwards against a naive forward, and
the gate statistics against sigmoid(gate_beta * gap) computed by hand (tiny model, seconds)."""

import torch

from agentrl_shared.mechanisms import stack_rows
from agentrl_shared.smoke import check_mechanisms_smoke
from sdar.cli import load, main
from sdar.mechanisms import analyse, table
from sdar.trainer import SDARTrainer


def test_mechanisms_writes_its_fields_and_the_gate_is_the_trainers(tmp_path):
    payload, trainer, episodes, logps = check_mechanisms_smoke(main, "sdar", "sdar", SDARTrainer, load, tmp_path)
    for entry in payload["models"].values():
        assert {"gate_mean", "gate_active_ratio", "sdar_term"} <= set(entry["method"]["all"])
    assert all(f"\n| {label} | " in table(payload) for label in ("untrained", "grpo", "sdar"))
    student, teacher, mask = stack_rows(logps)
    gate = torch.sigmoid(trainer.args.gate_beta * (teacher - student))[mask.bool()]  # by hand, per token
    gap = (teacher - student)[mask.bool()]
    got = analyse(trainer, episodes, logps)["all"]
    assert abs(got["gate_mean"] - gate.mean().item()) < 1e-6
    assert abs(got["gate_active_ratio"] - (gate > 0.5).float().mean().item()) < 1e-6
    assert abs(got["sdar_term"] - (gate * gap).mean().item()) < 1e-6
