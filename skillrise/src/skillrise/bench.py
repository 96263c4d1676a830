"""`python -m skillrise.bench`: SkillRise's training cost against GRPO's, as a ratio.

The paper claims less overhead than multi-stage skill pipelines: its only extra work is one curate generation per
task boundary inside the same rollout. Measured here as the step time per generated token (rollout + update) of
SkillRise over GRPO with the matched task-play budget on the same tiny config (`smoke.yaml`, more steps): SkillRise
4 trials x K 2 tasks, GRPO 8 single-task episodes (2 groups of 4). Target <= 1.2. The first step of each run is
dropped (one-off warm-up). Figures are printed and merged under `skillrise/` into `bench-results.json`.
"""

import json
import statistics
import tempfile
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

ROOT = Path(__file__).resolve().parents[3]
GRPO = ["trainer.group_size_k=1", "trainer.carry_mode=none", "trainer.advantage_mode=grpo",
        "trainer.num_generations=4", "trainer.per_device_train_batch_size=4"]  # fmt: skip


def cost_per_token(overrides: list[str], steps: int = 6) -> tuple[float, float, float]:
    """(median seconds per step, median generated tokens per step, median seconds per generated token)."""
    from .cli import load, train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load("smoke", [f"trainer.num_rollouts={steps}", f"trainer.output_dir={tmp}", *overrides])
        payload = train(cfg, "bench")
    logs = [h for h in payload["log_history"] if "step_time" in h][1:]
    times = [h["step_time"] for h in logs]
    tokens = [h["skillrise/generated_tokens"] for h in logs]
    return (
        statistics.median(times),
        statistics.median(tokens),
        statistics.median(t / n for t, n in zip(times, tokens, strict=True)),
    )


def merge(figures: dict) -> None:
    from agentrl_shared.provenance import git_commit

    path = ROOT / "bench-results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({f"skillrise/{k}": v for k, v in figures.items()})
    data["skillrise/commit"] = git_commit()
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m skillrise.bench", description=__doc__)
    parser.add_argument("--steps", type=int, default=6, help="rollouts per run (the first is dropped)")
    steps = parser.parse_args(argv).steps
    g_time, g_tokens, g_cost = cost_per_token(GRPO, steps)
    s_time, s_tokens, s_cost = cost_per_token([], steps)
    figures = {
        "config": f"smoke.yaml, {steps} steps, first dropped; SkillRise 4 trials x K 2, GRPO 8 episodes (groups of 4)",
        "grpo_step_time_s": g_time,
        "grpo_generated_tokens_per_step": g_tokens,
        "skillrise_step_time_s": s_time,
        "skillrise_generated_tokens_per_step": s_tokens,
        "cost_per_token_ratio_skillrise_over_grpo": s_cost / g_cost,
    }
    print(f"{'comparison':52s} {'GRPO':>10s} {'SkillRise':>10s} {'ratio':>7s}")
    print(f"{'step time (s)':52s} {g_time:10.2f} {s_time:10.2f} {s_time / g_time:7.2f}")
    print(f"{'generated tokens per step':52s} {g_tokens:10.0f} {s_tokens:10.0f} {s_tokens / g_tokens:7.2f}")
    print(f"{'seconds per generated token (x1000), target <= 1.2':52s} {1000 * g_cost:10.3f} {1000 * s_cost:10.3f} "
          f"{s_cost / g_cost:7.2f}")  # fmt: skip
    merge(figures)


if __name__ == "__main__":
    main()
