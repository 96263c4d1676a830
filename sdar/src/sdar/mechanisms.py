"""`sdar mechanisms`: what SDAR's gate acts on, measured on the CPU task before and after training.

The shared check (`agentrl_shared.mechanisms`: student and skill-conditioned teacher success on the panel, the
teacher-student log-prob gap on the student's tokens from the trainer's own forwards) plus SDAR's derived quantity,
the gate g_t = sigmoid(gate_beta * (l^T_t - l^S_t)) of Eq. 5 (official `verl/trainer/ppo/sdar_utils.py`), summarised
by `losses.gate_statistics` (the `sdar/gate_mean` and `sdar/gate_active_ratio` the trainer logs) and the distillation
term `losses.gated_distillation_loss` it would add, on all tokens and on those of won and failed episodes.
"""

from pathlib import Path

import torch

from agentrl_shared.mechanisms import checkpoints, fmt, mechanisms_table, row_labels, run_mechanisms, stack_rows

from .losses import gate_statistics, gated_distillation_loss


def analyse(trainer, episodes, logps) -> dict:
    """Gate statistics (`gate_statistics`) and the SDAR term (`gated_distillation_loss`) over the student's panel
    tokens: all, won episodes' and failed episodes' (NaN where there are none)."""
    student, teacher, mask = stack_rows(logps)  # (N, C) each
    _, won, _ = row_labels(episodes)
    beta = trainer.args.gate_beta
    out: dict = {"gate_beta": beta}
    for name, keep in (("all", torch.ones_like(won)), ("won", won), ("failed", ~won)):
        m = mask * keep[:, None].float()  # (N, C)
        if m.sum() == 0:
            out[name] = {"gate_mean": float("nan"), "gate_active_ratio": float("nan"),
                         "teacher_gap_mean": float("nan"), "sdar_term": float("nan")}  # fmt: skip
            continue
        out[name] = {**gate_statistics(student, teacher, m, gate_beta=beta),
                     "sdar_term": gated_distillation_loss(student, teacher, m, gate_beta=beta).item()}  # fmt: skip
    return out


def mechanisms(config: str, runs: Path, seed: int, output: Path, overrides: list[str]) -> dict:
    """The check on the untrained model (the config's), GRPO-final and SDAR-final of `runs` (`<runs>/cpu/<method>/
    seed<seed>/final`), each with the SDAR config (its teacher prompt, gate_beta) and only the model swapped."""
    from agentrl_shared.cli import cpu_precision

    from .cli import CPU_CONFIG, load
    from .trainer import SDARTrainer

    if config == CPU_CONFIG:  # the CPU plan's checkpoints, in the plan's precision (recorded in the command)
        overrides = [*cpu_precision(overrides), *overrides]

    trained = checkpoints(runs, "sdar", seed)  # the before / after pair first, GRPO-final last
    models = {
        "untrained": load(config, overrides)["model"].name_or_path,
        "sdar": trained["sdar"],
        "grpo": trained["grpo"],
    }
    command = ["sdar", "mechanisms", "--config", config, "--runs", str(runs), "--seed", str(seed), "--output",
               str(output), *overrides]  # fmt: skip
    return run_mechanisms(SDARTrainer, lambda extra: load(config, [*overrides, *extra]), models, analyse, output,
                          command)  # fmt: skip


def table(payload: dict | None) -> str:
    """The README's mechanisms table (`sdar report`)."""

    def three(key: str, scale: float = 1.0, digits: int = 2):
        return lambda e: " / ".join(fmt(scale * e["method"][k][key], digits) for k in ("all", "won", "failed"))

    return mechanisms_table(payload, ["untrained", "grpo", "sdar"], [
        ("gate mean (all / won / failed)", three("gate_mean", 1.0, 3)),
        ("gate open % (g > 0.5; all / won / failed)", three("gate_active_ratio", 100.0, 1)),
        ("SDAR term mean g (l_T - l_S) (all / won / failed)", three("sdar_term", 1.0, 4)),
    ])  # fmt: skip
