"""`python -m sdar.bench_lora`: SDAR on `smoke.yaml` with LoRA (`model.lora.r=8`, `agentrl_shared.lora`) against full
fine-tuning: step time (TRL's `step_time`, 6 rollouts, the first dropped) and peak memory, each arm in a fresh process
so that one arm's allocations do not count in the other's peak (peak resident set size of the process on CPU; peak
allocated CUDA memory where a GPU runs it). The tiny smoke model keeps the run in minutes: the ratios show the
mechanics (fewer trainable parameters, no reference copy), not the saving on a 7B model. Merged under `sdar_lora/` into
`bench-results.json` at the repository root.
"""

import json
import resource
import statistics
import subprocess
import sys
import tempfile

from agentrl_shared.offline import set_offline_env


set_offline_env()

ARMS = {"full": [], "lora": ["model.lora.r=8"]}


def arm(name: str) -> dict:
    """One arm in this process: step times, trainable parameters and peak memory."""
    import torch

    from .cli import load, train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load("smoke", ["trainer.num_rollouts=6", f"trainer.output_dir={tmp}", *ARMS[name]])
        payload = train(cfg, "bench")
    times = [h["step_time"] for h in payload["log_history"] if "step_time" in h][1:]  # first: one-off costs
    out = {"step_time_s": statistics.fmean(times), "steps": len(times),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # fmt: skip
    if torch.cuda.is_available():
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def main() -> None:
    from agentrl_shared.provenance import git_commit

    from .bench import ROOT

    commit = git_commit()  # before the bench writes bench-results.json, a tracked file
    figures = {}
    for name in ARMS:  # a fresh process per arm: its peak memory is its own
        proc = subprocess.run([sys.executable, "-m", "sdar.bench_lora", "--arm", name], capture_output=True,
                              text=True, check=True)  # fmt: skip
        figures[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("step_time_s", "peak_rss_mib", "peak_cuda_mib"):
        if key in figures["full"]:
            figures[f"lora_over_full_{key}"] = figures["lora"][key] / figures["full"][key]
    cuda = "peak_cuda_mib" in figures["full"]
    print(
        f"\n{'SDAR smoke.yaml':16s} {'step time (s)':>14s} {'peak RSS (MiB)':>15s}"
        + (" peak CUDA (MiB)" if cuda else "")
    )
    for name in (*ARMS, "lora_over_full"):
        f = figures[name] if name in ARMS else {k.removeprefix("lora_over_full_"): v for k, v in figures.items()
                                                 if k.startswith("lora_over_full_")}  # fmt: skip
        line = f"{name.replace('_over_', ' / '):16s} {f['step_time_s']:14.2f} {f['peak_rss_mib']:15.2f}"
        print(line + (f" {f['peak_cuda_mib']:15.2f}" if cuda else ""))
    path = ROOT / "bench-results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data = {k: v for k, v in data.items() if not k.startswith("sdar_lora/")}
    data.update({f"sdar_lora/{k}": v for k, v in figures.items()})
    data["sdar_lora/commit"] = commit
    data["sdar_lora/config"] = "sdar smoke.yaml, 6 rollouts (first step dropped), full vs model.lora.r=8"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--arm"]:
        print(json.dumps(arm(sys.argv[2])))
    else:
        main()
