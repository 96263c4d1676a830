"""`python -m agentopsd.bench`: AgentOPSD's cost side by side, as a ratio.

Step time of AgentOPSD over GRPO on the SmolLM2 CPU config (`textrooms_smollm2-135m_cpu`, no evaluation),
alternating the two runs: the only difference is two no-grad forwards per rollout over every row (rollout-time student
log-probs, and the teacher over skill-prefixed prompts) plus the belief recursion (goal <= 1.25, issue "The main job
in 10 minutes"). Figures are printed and merged under `agentopsd/` into `bench-results.json` at the repository root.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

ROOT = Path(__file__).resolve().parents[3]
STEPS = 3  # rollouts per run (one optimizer step each on the CPU config)


def step_times(overrides: list[str]) -> list[float]:
    from .cli import CPU_CONFIG, load, train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load(CPU_CONFIG, [f"trainer.num_rollouts={STEPS}", f"trainer.output_dir={tmp}", "env.eval_every=0",
                                *overrides])  # fmt: skip
        payload = train(cfg, "bench")
    times = [h["step_time"] for h in payload["log_history"] if "step_time" in h]
    return times[1:]  # the first step pays one-off costs (JIT, allocator warm-up)


def merge(figures: dict, path: Path) -> None:
    from agentrl_shared.provenance import git_commit

    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({f"agentopsd/{k}": v for k, v in figures.items()})
    data["agentopsd/commit"] = git_commit()
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentopsd.bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results.json", help="results file to merge into")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each method, alternating (ABAB)")
    parser.add_argument("--note", default="", help="how it was measured (machine, load), kept with the figures")
    ns = parser.parse_args(argv)
    grpo: list[float] = []
    opsd: list[float] = []
    for _ in range(ns.repeats):  # ABAB: machine load drifts over minutes on a shared box
        grpo += step_times(["trainer.credit=grpo"])
        opsd += step_times([])
    figures = {
        "config": {
            "step_time": f"textrooms_smollm2-135m_cpu, {STEPS} rollouts x {ns.repeats} runs per method (ABAB), "
            "first of each run dropped"
        },
        "note": ns.note,
        "grpo_step_time_s": statistics.median(grpo),
        "agentopsd_step_time_s": statistics.median(opsd),
    }
    figures["step_time_ratio_agentopsd_over_grpo"] = figures["agentopsd_step_time_s"] / figures["grpo_step_time_s"]
    print(f"{'comparison':40s} {'baseline':>10s} {'method':>10s} {'ratio':>7s}")
    print(f"{'step time: AgentOPSD / GRPO (s)':40s} {figures['grpo_step_time_s']:10.2f} "
          f"{figures['agentopsd_step_time_s']:10.2f} {figures['step_time_ratio_agentopsd_over_grpo']:7.2f}")  # fmt: skip
    merge(figures, ns.out)


if __name__ == "__main__":
    main()
