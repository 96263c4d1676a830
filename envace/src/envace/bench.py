"""`python -m envace.bench`: EnvACE's training cost against caller-only with the real tool back ends, as a ratio.

EnvACE replaces the tool back end by a rehearsal generation of the policy (one per tool call) whose row is also
trained; caller-only (`tool_return_mode=real`) executes the calls. Measured: step time (rollout + forwards and
backwards of the one optimizer step per rollout; TRL's `step_time`) per generated token (caller + rehearsal
completions), EnvACE over caller-only, on the CPU config (`tooltasks_smollm2-135m_cpu.yaml`: SmolLM2-135M, 8 episodes
per rollout) with no evaluation pass. The two methods run alternately (`--repeats` pairs, caller-only first in odd
pairs, EnvACE first in even ones) so that machine load drifts hit both alike; the first step of every run is dropped
(warm-up). Figures: per-run medians, then the median over runs. Printed and merged under `envace/` into
`--output` (default `bench-results.json` in the working directory: `make bench` runs at the repository root).
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env

from .cli import CPU_CONFIG


set_offline_env()

WARM_START = Path("runs/envace/cpu/warmstart/seed0/final")  # `envace reproduce --scale cpu` writes it
METHODS = {"caller_only_real": ["trainer.tool_return_mode=real"], "envace": []}


def run(method: str, steps: int, config: str, model: str | None = None) -> dict:
    """Train `steps` rollouts of `method`; per-step seconds, generated tokens and seconds per token (first dropped)."""
    from transformers import AutoTokenizer

    from agentrl_shared.models import model_path

    from .cli import _tasks, load
    from .trainer import EnvACETrainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load(config, [*METHODS[method], f"trainer.num_rollouts={steps}", f"trainer.output_dir={tmp}",
                            "env.eval_every=0", *([f"model.name_or_path={model}"] if model else [])])  # fmt: skip
        args, env = cfg["trainer"], cfg["env"]
        path = model_path(cfg["model"].name_or_path)
        args.model_init_kwargs = {"dtype": cfg["model"].dtype, **(args.model_init_kwargs or {})}
        tok = AutoTokenizer.from_pretrained(path, padding_side="left")
        trainer = EnvACETrainer(path, args, env, _tasks(cfg, "train"), processing_class=tok)
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
    logs = [h for h in trainer.state.log_history if "step_time" in h][1:]
    times = [h["step_time"] for h in logs]
    tokens = [h["rollout/generated_tokens"] for h in logs]
    return {
        "step_time_s": statistics.median(times),
        "generated_tokens": statistics.median(tokens),
        "s_per_token": statistics.median(t / max(n, 1) for t, n in zip(times, tokens, strict=True)),
        "rehearsal_rows": statistics.median(h["envace/simulator_rows"] for h in logs),
        "caller_rows": statistics.median(h["envace/caller_rows"] for h in logs),
        "train_wall_s": wall,
    }


def merge(path: Path, figures: dict) -> None:
    from agentrl_shared.provenance import git_commit

    data = json.loads(path.read_text()) if path.exists() else {}
    data = {k: v for k, v in data.items() if not k.startswith("envace/")}
    data.update({f"envace/{k}": v for k, v in figures.items()})
    data["envace/commit"] = git_commit()
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envace.bench", description=__doc__)
    parser.add_argument(
        "--steps", type=int, default=3, help="optimizer steps (rollouts) per run; the first is dropped"
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs per method, interleaved")
    parser.add_argument("--config", default=CPU_CONFIG, help="an envace config (file name without .yaml)")
    parser.add_argument("--model", default=None, help=f"start from this checkpoint (default: the CPU plan's warm "
                        f"start {WARM_START} when it exists, else the config's model, with which the untrained 135M "
                        "caller makes no tool calls and EnvACE has no rehearsal rows)")  # fmt: skip
    parser.add_argument("--output", type=Path, default=Path("bench-results.json"))
    parser.add_argument("--note", default="", help="how the machine was shared during the run (kept with the figures)")
    ns = parser.parse_args(argv)
    if ns.steps < 2:
        raise SystemExit("envace.bench: --steps must be at least 2 (the first step of every run is dropped).")
    if ns.model is None and WARM_START.exists():
        ns.model = str(WARM_START)
    runs = {m: [] for m in METHODS}
    for r in range(ns.repeats):
        order = list(METHODS) if r % 2 == 0 else list(METHODS)[::-1]
        for method in order:
            runs[method].append(run(method, ns.steps, ns.config, ns.model))
            print(f"[bench] repeat {r + 1}/{ns.repeats} {method}: " + json.dumps(runs[method][-1]))
    med = {m: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for m, rs in runs.items()}
    c, e = med["caller_only_real"], med["envace"]
    figures = {
        "config": f"{ns.config}.yaml{', model ' + ns.model if ns.model else ''}, {ns.steps} steps per run (first "
        f"dropped), {ns.repeats} interleaved runs per method, no evaluation pass",
        "nice": os.nice(0),
        "cpu_cores_usable": len(os.sched_getaffinity(0)),  # 1 when pinned with taskset -c
        "note": ns.note,
        "load_average_1min_at_end": os.getloadavg()[0],
        "caller_only_step_time_s": c["step_time_s"],
        "caller_only_generated_tokens_per_step": c["generated_tokens"],
        "envace_step_time_s": e["step_time_s"],
        "envace_generated_tokens_per_step": e["generated_tokens"],
        "envace_rehearsal_rows_per_step": e["rehearsal_rows"],
        "caller_only_ms_per_generated_token": 1000 * c["s_per_token"],
        "envace_ms_per_generated_token": 1000 * e["s_per_token"],
        "step_time_per_token_ratio_envace_over_caller_only": e["s_per_token"] / c["s_per_token"],
        "step_time_ratio_envace_over_caller_only": e["step_time_s"] / c["step_time_s"],
        "runs": runs,
    }
    print(f"{'comparison':44s} {'caller-only':>12s} {'EnvACE':>10s} {'ratio':>7s}")
    print(f"{'step time (s)':44s} {c['step_time_s']:12.2f} {e['step_time_s']:10.2f} "
          f"{e['step_time_s'] / c['step_time_s']:7.2f}")  # fmt: skip
    print(f"{'generated tokens per step':44s} {c['generated_tokens']:12.0f} {e['generated_tokens']:10.0f} "
          f"{e['generated_tokens'] / max(c['generated_tokens'], 1):7.2f}")  # fmt: skip
    print(f"{'seconds per generated token (x1000)':44s} {1000 * c['s_per_token']:12.3f} {1000 * e['s_per_token']:10.3f} "
          f"{e['s_per_token'] / c['s_per_token']:7.2f}")  # fmt: skip
    merge(ns.output, figures)


if __name__ == "__main__":
    main()
