"""`python -m sdar.bench`: where the CPU main job's time goes, and SDAR's costs side by side as ratios.
Every figure is printed with its wall-clock and CPU (process) time: on a shared
machine wall time is noisy, CPU time much less so.

1. Main job time split: `textrooms_smollm2-135m_cpu` (the config `sdar reproduce --scale cpu` trains), SDAR, two
   rollouts and one evaluation pass, timed by stage: generation (multi-turn rollout: generate + environment),
   no-grad log-prob forwards (old / reference / teacher), loss forward, backward, the rest of the optimizer step, and
   the evaluation pass over the fixed panel.
2. Batched rollout against its ceiling, SmolLM2-135M, TextRooms, greedy, the CPU config's precision: 16 episodes (one training
   rollout) played one at a time, played together (one generation call per turn), and the ceiling: the same per-turn
   prompt batches given to `generate` alone (no prompt building, tokenising or environment). Claims: batched /
   sequential speedup, and batched time as a fraction of the ceiling (`batched_over_ceiling` = ceiling / batched).
3. Evaluation pass: the 64-task panel in one batch against chunks of 16 (the old pool size), same episodes.
4. Step time of SDAR over GRPO on the tiny `smoke.yaml` (the only difference is the teacher forward).
Figures are merged under `sdar/` into `bench-results.json` at the repository root (earlier `sdar/` keys replaced),
after each section. Run order: 2, 1, 3, 4.
"""

import json
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

ROOT = Path(__file__).resolve().parents[3]
CPU_CONFIG = "textrooms_smollm2-135m_cpu"


class Clock:
    """Wall-clock and CPU seconds per named stage."""

    def __init__(self):
        self.wall, self.cpu = defaultdict(float), defaultdict(float)

    @contextmanager
    def __call__(self, stage: str):
        w, c = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[stage] += time.perf_counter() - w
            self.cpu[stage] += time.process_time() - c


@contextmanager
def stage_timers(clock: Clock):
    """Time the trainer's stages by wrapping the methods that run them (bench only; restored on exit)."""
    from accelerate import Accelerator

    from agentrl_shared.rollout import RolloutCollector

    from .trainer import SDARTrainer

    inside_eval = [False]

    def timed(cls, name, stage):
        original = getattr(cls, name)

        def wrapper(*args, **kwargs):
            if inside_eval[0]:  # generation inside an evaluation pass counts as evaluation
                return original(*args, **kwargs)
            inside_eval[0] = stage == "evaluation pass"
            try:
                with clock(stage):
                    return original(*args, **kwargs)
            finally:
                inside_eval[0] = False

        setattr(cls, name, wrapper)
        return cls, name, original

    patches = [
        timed(RolloutCollector, "collect", "generation"),
        timed(SDARTrainer, "_logps", "no-grad forwards (teacher/old/ref)"),
        timed(SDARTrainer, "_compute_loss", "loss forward"),
        timed(Accelerator, "backward", "backward"),
        timed(SDARTrainer, "training_step", "training steps"),
        timed(SDARTrainer, "evaluate_panel", "evaluation pass"),
    ]
    try:
        yield
    finally:
        for cls, name, original in patches:
            setattr(cls, name, original)


def main_job_split(rollouts: int = 2) -> dict:
    """Train the CPU config for `rollouts` rollouts and evaluate once; seconds per stage (per rollout for training)."""
    from .cli import load, train

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp, stage_timers(clock):
        cfg = load(CPU_CONFIG, [f"trainer.num_rollouts={rollouts}", f"trainer.output_dir={tmp}", "env.eval_every=0"])
        with clock("run total"):
            payload = train(cfg, "bench")
    n = payload["rollouts"]
    # trainer.train = training steps (rollout: generation, no-grad forwards, batching; micro-batches: loss forward,
    # backward) + optimizer steps, logging and callbacks
    stages = ("generation", "no-grad forwards (teacher/old/ref)", "loss forward", "backward")
    split = {f"{k}_s_per_rollout": {"wall": clock.wall[k] / n, "cpu": clock.cpu[k] / n} for k in stages}
    split["batching and other_s_per_rollout"] = {
        kind: (getattr(clock, kind)["training steps"] - sum(getattr(clock, kind)[k] for k in stages)) / n
        for kind in ("wall", "cpu")
    }
    split["optimizer step and logging_s_per_rollout"] = {
        "wall": (payload["train_seconds"] - clock.wall["training steps"]) / n,
        "cpu": None,
    }
    split["training total_s_per_rollout"] = {"wall": payload["train_seconds"] / n, "cpu": None}
    split["evaluation pass_s"] = {"wall": clock.wall["evaluation pass"], "cpu": clock.cpu["evaluation pass"]}
    split["rollouts"] = n
    # the CPU plan from this split: untrained evaluation, then each method of `CPU_PLAN` (GRPO without the teacher
    # forward), R rollouts and its evaluation passes each (model loading and start-up not counted)
    from .cli import CPU_PLAN

    plan_cfg = load(CPU_CONFIG, [])
    R, env = plan_cfg["trainer"].num_rollouts, plan_cfg["env"]
    evals = R // env.eval_every + int(env.eval_before_train) + int(R % env.eval_every != 0)
    for kind in ("wall", "cpu"):
        rollout = sum(split[f"{k}_s_per_rollout"][kind] for k in (*stages, "batching and other"))
        rollout += split["optimizer step and logging_s_per_rollout"]["wall"]
        teacher, ev = split["no-grad forwards (teacher/old/ref)_s_per_rollout"][kind], split["evaluation pass_s"][kind]
        per_method = [rollout - (teacher if method == "grpo" else 0.0) for method in CPU_PLAN]
        split[f"estimated_reproduce_one_seed_s_{kind}"] = ev + R * sum(per_method) + len(CPU_PLAN) * evals * ev
    split["rows_per_rollout"] = statistics.fmean(
        h["rollout/rows"] for h in payload["log_history"] if "rollout/rows" in h
    )
    return split


def _smollm2():
    """SmolLM2-135M and its HF generator in the CPU config's precision (bf16 autocast only where it asks for it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.models import model_path

    from .cli import load

    path = model_path("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    dtype = torch.bfloat16 if load(CPU_CONFIG, [])["trainer"].bf16 else None
    return tok, model, HFGenerator(model, tok, max_new_tokens=12, temperature=0.0, autocast_dtype=dtype)


def _collector(tok, slots: int):
    from agentrl_shared.envs import make_env
    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.prompts import make_prompt
    from agentrl_shared.rollout import RolloutCollector

    pool = EnvPool(lambda: make_env("textrooms"), num_slots=slots, num_workers=0)
    return pool, RolloutCollector(pool, make_prompt("textrooms", 2), tok, max_turns=2, max_prompt_length=1024)


def batched_rollout_vs_ceiling(episodes: int = 16, repeats: int = 2) -> dict:
    """Sequential vs batched rollout vs `generate` alone on the batched rollout's own prompt batches."""
    from agentrl_shared.envs import load_tasks

    tok, _, generate = _smollm2()
    tasks = load_tasks("textrooms", "valid_seen", num_tasks=episodes, num_rooms=3)
    seeds = [1000] * episodes
    pool, collector = _collector(tok, episodes)
    calls: list[list[list[int]]] = []

    def recording(prompt_ids):
        calls.append(prompt_ids)
        return generate(prompt_ids)

    clock = Clock()
    with pool:
        collector.collect(tasks[:2], [0, 1], seeds[:2], generate)  # warm-up
        for _ in range(repeats):  # ABC ABC: drift on a shared machine hits every arm alike
            with clock("sequential"):
                for i, task in enumerate(tasks):
                    collector.collect([task], [i], [seeds[i]], generate)
            calls.clear()
            with clock("batched"):
                batched = collector.collect(tasks, list(range(episodes)), seeds, recording)
            with clock("ceiling"):
                for prompt_ids in calls:
                    generate(prompt_ids)
    out = {f"{k}_s": {"wall": clock.wall[k] / repeats, "cpu": clock.cpu[k] / repeats} for k in clock.wall}
    out["episodes"], out["turn_batches"] = episodes, [len(c) for c in calls]
    out["tokens_generated"] = sum(len(r.completion_ids) for e in batched for r in e.rows)
    for kind in ("wall", "cpu"):
        seq, bat, ceil = (out[f"{k}_s"][kind] for k in ("sequential", "batched", "ceiling"))
        out[f"batched_speedup_{kind}"] = seq / bat
        out[f"ceiling_speedup_{kind}"] = seq / ceil
        out[f"batched_over_ceiling_{kind}"] = ceil / bat
    return out


def evaluation_pass(panel: int = 64, chunk: int = 16, repeats: int = 1) -> dict:
    """The fixed panel played in one batch against chunks of `chunk` episodes (greedy, the CPU config's precision)."""
    from agentrl_shared.envs import load_tasks
    from agentrl_shared.evaluation import run_panel

    tok, _, generate = _smollm2()
    tasks = load_tasks("textrooms", "valid_seen", num_tasks=panel, num_rooms=3)
    clock, results = Clock(), {}
    for _ in range(repeats):
        for slots in (chunk, panel):
            pool, collector = _collector(tok, slots)
            generate.batch_size = slots
            with pool, clock(f"slots{slots}"):
                results[slots] = run_panel(collector, generate, tasks, [1000], progress=lambda _: None)
    same = sum(a["actions"] == b["actions"] for a, b in zip(results[chunk], results[panel], strict=True))
    out = {f"chunks_of_{chunk}_s": {"wall": clock.wall[f"slots{chunk}"] / repeats,
                                    "cpu": clock.cpu[f"slots{chunk}"] / repeats},
           f"one_pass_of_{panel}_s": {"wall": clock.wall[f"slots{panel}"] / repeats,
                                      "cpu": clock.cpu[f"slots{panel}"] / repeats},
           "episodes_with_identical_actions": same, "episodes": panel}  # fmt: skip
    for kind in ("wall", "cpu"):
        out[f"one_pass_speedup_{kind}"] = out[f"chunks_of_{chunk}_s"][kind] / out[f"one_pass_of_{panel}_s"][kind]
    return out


def step_times(overrides: list[str]) -> list[float]:
    from .cli import load, train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load("smoke", ["trainer.num_rollouts=6", f"trainer.output_dir={tmp}", *overrides])
        payload = train(cfg, "bench")
    times = [h["step_time"] for h in payload["log_history"] if "step_time" in h]
    return times[1:]  # the first step pays one-off costs (JIT, allocator warm-up)


def merge(figures: dict) -> None:
    path = ROOT / "bench-results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data = {k: v for k, v in data.items() if not k.startswith("sdar/")}
    data.update({f"sdar/{k}": v for k, v in figures.items() if k != "commit"})
    data["sdar/commit"] = figures["commit"]
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    from agentrl_shared.provenance import git_commit

    commit = git_commit()  # before the bench writes bench-results.json, a tracked file
    figures = {"commit": commit,
               "config": {"main_job": f"{CPU_CONFIG}, SDAR, 2 rollouts + 1 evaluation pass (64 episodes)",
                          "rollout": "textrooms, SmolLM2-135M, greedy, CPU config precision, 16 episodes, 2 turns",
                          "step_time": "smoke.yaml, 6 steps, first dropped"}}  # fmt: skip
    roll = batched_rollout_vs_ceiling()
    figures["rollout"] = roll
    print(f"\n{'rollout, 16 episodes (s)':38s} {'sequential':>10s} {'batched':>8s} {'ceiling':>8s} "
          f"{'speedup':>8s} {'ceiling':>8s} {'batched/ceiling':>15s}")  # fmt: skip
    for kind in ("wall", "cpu"):
        seq, bat, ceil = (roll[f"{k}_s"][kind] for k in ("sequential", "batched", "ceiling"))
        print(f"  {kind:36s} {seq:10.2f} {bat:8.2f} {ceil:8.2f} {seq / bat:8.2f} {seq / ceil:8.2f} "
              f"{ceil / bat:15.2f}")  # fmt: skip

    merge(figures)  # written after every section: a long bench interrupted keeps what it measured

    split = main_job_split()
    figures["main_job_split"] = split
    print(f"\nmain job ({CPU_CONFIG}, SDAR), seconds per rollout unless noted    wall      cpu")
    for key, value in split.items():
        if isinstance(value, dict):
            print(f"  {key.removesuffix('_s_per_rollout').removesuffix('_s'):58s} {_fmt(value['wall']):>8s} "
                  f"{_fmt(value['cpu']):>8s}")  # fmt: skip
    print(f"  rows per rollout: {split['rows_per_rollout']:.1f}")
    print(
        f"  estimated `sdar reproduce --scale cpu` (one seed, from this split): "
        f"{split['estimated_reproduce_one_seed_s_wall'] / 60:.1f} min wall, "
        f"{split['estimated_reproduce_one_seed_s_cpu'] / 60:.1f} min from CPU time"
    )
    merge(figures)

    ev = evaluation_pass()
    figures["evaluation_pass"] = ev
    print(f"\n{'evaluation, 64 episodes (s)':38s} {'chunks 16':>10s} {'one pass':>8s} {'speedup':>8s}")
    for kind in ("wall", "cpu"):
        a, b = ev["chunks_of_16_s"][kind], ev["one_pass_of_64_s"][kind]
        print(f"  {kind:36s} {a:10.2f} {b:8.2f} {a / b:8.2f}")
    print(f"  episodes with identical actions: {ev['episodes_with_identical_actions']}/{ev['episodes']}")

    grpo = step_times(["trainer.sdar_coef=0.0"])
    sdar = step_times([])
    figures["grpo_step_time_s"] = statistics.median(grpo)
    figures["sdar_step_time_s"] = statistics.median(sdar)
    figures["step_time_ratio_sdar_over_grpo"] = figures["sdar_step_time_s"] / figures["grpo_step_time_s"]
    print(f"\n{'step time, smoke (s)':38s} {'GRPO':>10s} {'SDAR':>8s} {'ratio':>8s}")
    print(f"  {'wall, median':36s} {figures['grpo_step_time_s']:10.2f} {figures['sdar_step_time_s']:8.2f} "
          f"{figures['step_time_ratio_sdar_over_grpo']:8.2f}")  # fmt: skip
    merge(figures)


if __name__ == "__main__":
    main()
