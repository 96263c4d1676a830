"""`python -m vad.bench`: VAD step time / plain on-policy distillation step time on the same tiny config.

VAD adds one teacher forward (x-) and the x- prompt processing to plain on-policy distillation (`target=direct`, one
teacher forward on x+); the claim is the ratio (target <= 1.5), not absolute times. Figures are merged into the
repository's `bench-results.json` under keys prefixed `vad/`, with the config and commit.
"""

import json
import statistics

from . import cli


BENCH_STEPS = 5  # the first step (warm-up: allocations, lazy init) is dropped; the median resists CPU noise
BENCH_CONFIG = "smoke"
RESULTS = cli.PACKAGE_DIR.parent / "bench-results.json"


def step_times(target: str, output_dir: str) -> list[float]:
    overrides = [f"target={target}", f"max_steps={BENCH_STEPS}", f"trainer.output_dir={output_dir}", "trainer.seed=0"]
    if target == "direct":
        overrides.append("reg_weight=0.0")  # plain on-policy distillation: direct matching, no regulariser
    trainer = cli.run(["train", "--config", BENCH_CONFIG, *overrides])
    return [h["step_time"] for h in trainer.state.log_history if "step_time" in h][1:]


def main() -> None:
    # The first trainer of a process runs slowly for several steps on CPU (thread pools, allocator warm-up) whichever
    # target it trains, so a throw-away run goes first and both measured runs start warm.
    step_times("direct", "/tmp/vad-bench-warmup")
    vad = step_times("vad", "/tmp/vad-bench-vad")
    opd = step_times("direct", "/tmp/vad-bench-direct")
    figures = {
        "vad/step_time_s": statistics.median(vad),
        "vad/opd_step_time_s": statistics.median(opd),
        "vad/step_time_ratio_vad_over_opd": statistics.median(vad) / statistics.median(opd),
    }
    print("| variant | median step time (s) |\n|---|---|")
    print(f"| VAD (student + teacher x+ + teacher x-) | {figures['vad/step_time_s']:.3f} |")
    print(f"| plain OPD (student + teacher x+) | {figures['vad/opd_step_time_s']:.3f} |")
    print(f"| ratio VAD / OPD (target <= 1.5) | {figures['vad/step_time_ratio_vad_over_opd']:.3f} |")
    merged = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    merged.update(figures)
    merged["vad/config"] = {"config": BENCH_CONFIG, "steps": BENCH_STEPS, "steps_in_median": BENCH_STEPS - 1}
    merged["vad/commit"] = cli.commit()
    RESULTS.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
