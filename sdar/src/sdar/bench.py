"""`python -m sdar.bench`: SDAR's costs side by side, as ratios (architecture.md, "Benchmarks").

1. Step time of SDAR over GRPO on the same tiny config (`smoke.yaml`, more steps): the only difference is one no-grad
   teacher forward per rollout over skill-prefixed prompts (target <= 1.5).
2. Batched rollout (one generation call per turn for all episodes) over one episode at a time, 8 episodes of
   TextRooms, greedy, with the tiny Qwen3 and with SmolLM2-135M (target >= 4x).
Figures are printed and merged under `sdar/` into `bench-results.json` at the repository root.
"""

import json
import statistics
import tempfile
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

ROOT = Path(__file__).resolve().parents[3]


def step_times(overrides: list[str]) -> list[float]:
    from .cli import load, train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load("smoke", ["trainer.max_steps=6", f"trainer.output_dir={tmp}", *overrides])
        payload = train(cfg, "bench")
    times = [h["step_time"] for h in payload["log_history"] if "step_time" in h]
    return times[1:]  # the first step pays one-off costs (JIT, allocator warm-up)


def rollout_seconds(model_name: str, batched: bool, episodes: int = 8) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl_shared.envs import load_tasks, make_env
    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.models import model_path
    from agentrl_shared.prompts import make_prompt
    from agentrl_shared.rollout import RolloutCollector

    path = model_path(model_name)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tasks = load_tasks("textrooms", "valid_seen", num_tasks=episodes)
    generate = HFGenerator(model, tok, max_new_tokens=12, temperature=0.0)
    with EnvPool(lambda: make_env("textrooms"), num_slots=episodes, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=2, max_prompt_length=1024)
        collector.collect(tasks[:1], [0], [0], generate)  # warm-up
        t0 = time.perf_counter()
        if batched:
            collector.collect(tasks, list(range(episodes)), [0] * episodes, generate)
        else:
            for i, task in enumerate(tasks):
                collector.collect([task], [i], [0], generate)
        return time.perf_counter() - t0


def merge(figures: dict) -> None:
    from agentrl_shared.provenance import git_commit

    path = ROOT / "bench-results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({f"sdar/{k}": v for k, v in figures.items()})
    data["sdar/commit"] = git_commit()
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main() -> None:
    grpo = step_times(["trainer.sdar_coef=0.0"])
    sdar = step_times([])
    figures = {
        "config": {"step_time": "smoke.yaml, 6 steps, first dropped", "rollout": "textrooms, 8 episodes, 2 turns"},
        "grpo_step_time_s": statistics.median(grpo),
        "sdar_step_time_s": statistics.median(sdar),
    }
    figures["step_time_ratio_sdar_over_grpo"] = figures["sdar_step_time_s"] / figures["grpo_step_time_s"]
    for model in ("tiny-qwen3", "smollm2-135m"):
        seq, bat = rollout_seconds(model, batched=False), rollout_seconds(model, batched=True)
        figures[f"rollout_{model}_sequential_s"] = seq
        figures[f"rollout_{model}_batched_s"] = bat
        figures[f"rollout_{model}_batched_speedup"] = seq / bat
    print(f"{'comparison':48s} {'baseline':>10s} {'method':>10s} {'ratio':>7s}")
    print(f"{'step time: SDAR / GRPO (s)':48s} {figures['grpo_step_time_s']:10.2f} "
          f"{figures['sdar_step_time_s']:10.2f} {figures['step_time_ratio_sdar_over_grpo']:7.2f}")  # fmt: skip
    for model in ("tiny-qwen3", "smollm2-135m"):
        seq, bat = figures[f"rollout_{model}_sequential_s"], figures[f"rollout_{model}_batched_s"]
        print(
            f"{f'rollout 8 episodes, {model}: sequential / batched (s)':48s} {seq:10.2f} {bat:10.2f} {seq / bat:7.2f}"
        )
    merge(figures)


if __name__ == "__main__":
    main()
