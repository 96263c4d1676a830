"""`python -m vad.bench`: VAD step time / plain on-policy distillation step time on the same tiny config.

VAD adds one no-grad teacher forward (x-) and the x- prompt processing to plain on-policy distillation
(`target=direct`, `reg_weight=0`: one teacher forward on x+); the claim is the ratio (target <= 1.5), not absolute
times. To compare like with like, both variants must do the same work apart from that extra forward:

- identical completions of identical lengths: learning rate 0 (the models never move, so they cannot diverge and
  sample differently), the same seed (same prompts, same sampling stream), and EOS blocked until
  `max_completion_length` (`generation_kwargs.min_new_tokens`), so every rollout has the full length. The bench
  fingerprints every step's completion ids and mask and fails if the two variants saw different completions;
- alternating runs (VAD, OPD, OPD, VAD, ...) after a throw-away warm-up run, so drift in the machine's load cancels;
  the first step of each run is dropped (lazy init) and medians are taken over the remaining steps of all runs;
- one intra-op thread: on a shared machine a second thread mostly waits for a busy core, which adds noise, not work.

Per optimizer step it reports the full step (TRL's `step_time` window: rollout + view processing + forwards + loss +
backward), the rollout side (`_prepare_inputs`: generation, reward, teacher prompt processing) and the loss side (the
rest: student forward, teacher forward(s), the loss and backward), each as wall time and as process CPU time (CPU time
is blind to time spent waiting for a core another job holds). Figures are merged into the repository's
`bench-results.json` under keys prefixed `vad/`, with the config and commit.
"""

import hashlib
import json
import logging
import statistics
import time
from pathlib import Path

import torch

from . import cli
from .trainer import VADTrainer


logger = logging.getLogger("vad.bench")

BENCH_CONFIG = "smoke"
RUNS_PER_VARIANT = 4  # alternated VAD, OPD, OPD, VAD, VAD, OPD, OPD, VAD
STEPS_PER_RUN = 5  # the first step of each run (lazy init, allocator warm-up) is dropped
WARMUP_STEPS = 3  # a throw-away run first: the first trainer of a process is slow whichever target it trains
THREADS = 1
VARIANTS = {
    "vad": ["target=vad"],
    "opd": ["target=direct", "reg_weight=0.0"],  # plain on-policy distillation: direct matching, no regulariser
}
SIDES = ("step", "rollout", "loss")
RESULTS = Path("bench-results.json")  # the repository's figures file (`make bench` runs from the root)


class TimedVADTrainer(VADTrainer):
    """[`VADTrainer`] recording, per training step, wall and CPU time of the whole step and of `_prepare_inputs`, and a
    fingerprint of the completions it trained on. Timing only: the computation is the parent's, unchanged."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bench_records: list[dict] = []
        self._bench_rollout = (0.0, 0.0)
        self._bench_fingerprint = ""
        self._bench_shape: tuple = ()

    def _prepare_inputs(self, generation_batch):
        wall, cpu = time.perf_counter(), time.process_time()
        inputs = super()._prepare_inputs(generation_batch)
        self._bench_rollout = (time.perf_counter() - wall, time.process_time() - cpu)
        ids, mask = inputs["completion_ids"].cpu(), inputs["completion_mask"].cpu()
        self._bench_fingerprint = hashlib.sha1(ids.numpy().tobytes() + mask.numpy().tobytes()).hexdigest()[:12]
        self._bench_shape = (tuple(ids.shape), int(mask.sum()))
        return inputs

    def training_step(self, model, inputs, num_items_in_batch):
        wall, cpu = time.perf_counter(), time.process_time()
        out = super().training_step(model, inputs, num_items_in_batch)
        step_wall, step_cpu = time.perf_counter() - wall, time.process_time() - cpu
        rollout_wall, rollout_cpu = self._bench_rollout
        self.bench_records.append(
            {
                "wall": {"step": step_wall, "rollout": rollout_wall, "loss": step_wall - rollout_wall},
                "cpu": {"step": step_cpu, "rollout": rollout_cpu, "loss": step_cpu - rollout_cpu},
                "fingerprint": self._bench_fingerprint,
                "shape": self._bench_shape,
            }
        )
        return out


def bench_run(variant: str, steps: int, output_dir: str) -> list[dict]:
    """One training run of `variant` on the bench config; returns the per-step records (all steps)."""
    resolved = cli.load(
        BENCH_CONFIG, [*VARIANTS[variant], f"max_steps={steps}", f"trainer.output_dir={output_dir}", "trainer.seed=0"]
    )
    args = resolved["trainer"]
    args.learning_rate = 0.0  # nothing moves: both variants sample the same completions every step
    args.generation_kwargs = {**(args.generation_kwargs or {}), "min_new_tokens": args.max_completion_length}
    trainer = cli.build_trainer(resolved, TimedVADTrainer)
    trainer.train()
    full = (trainer.args.per_device_train_batch_size, trainer.args.max_completion_length)
    for rec in trainer.bench_records:
        if rec["shape"] != (full, full[0] * full[1]):
            raise RuntimeError(f"{variant}: completions not at full length: {rec['shape']} (expected {full}).")
    return trainer.bench_records


def main() -> None:
    cli.setup_logging()
    torch.set_num_threads(THREADS)
    bench_run("opd", WARMUP_STEPS, "/tmp/vad-bench-warmup")
    records: dict[str, list[list[dict]]] = {name: [] for name in VARIANTS}
    order = []
    for i in range(RUNS_PER_VARIANT):
        pair = ["vad", "opd"] if i % 2 == 0 else ["opd", "vad"]  # ABBA...: cancels linear drift as well as jumps
        for name in pair:
            order.append(name)
            records[name].append(bench_run(name, STEPS_PER_RUN, f"/tmp/vad-bench-{name}"))
    # Same work apart from the x- forward: every run of both variants saw the same completions, step by step
    reference = [r["fingerprint"] for r in records["opd"][0]]
    for name, runs in records.items():
        for run in runs:
            if [r["fingerprint"] for r in run] != reference:
                raise RuntimeError(f"{name}: completions differ between runs/variants; the comparison is unfair.")
    kept = {name: [r for run in runs for r in run[1:]] for name, runs in records.items()}

    def median(name: str, clock: str, side: str) -> float:
        return statistics.median(r[clock][side] for r in kept[name])

    figures = {}
    for clock, suffix in (("wall", ""), ("cpu", "_cpu")):
        for side in SIDES:
            vad, opd = median("vad", clock, side), median("opd", clock, side)
            figures[f"vad/{side}_time{suffix}_s"] = vad
            figures[f"vad/opd_{side}_time{suffix}_s"] = opd
            figures[f"vad/{side}_time{suffix}_ratio_vad_over_opd"] = vad / opd
    figures["vad/step_time_ratio_vad_over_opd"] = figures.pop("vad/step_time_ratio_vad_over_opd")  # the headline
    lines = [f"| median over {len(kept['vad'])} steps x 2 variants (s) | VAD | plain OPD | VAD / OPD (target <= 1.5) |",
             "|---|---|---|---|"]  # fmt: skip
    for clock, suffix in (("wall", ""), ("cpu", "_cpu")):
        for side in SIDES:
            vad, opd = figures[f"vad/{side}_time{suffix}_s"], figures[f"vad/opd_{side}_time{suffix}_s"]
            lines.append(f"| {side} ({clock}) | {vad:.3f} | {opd:.3f} | {vad / opd:.3f} |")
    logger.info("\n%s", "\n".join(lines))
    merged = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    merged = {k: v for k, v in merged.items() if not k.startswith("vad/")}  # drop stale keys of earlier versions
    merged.update(figures)
    merged["vad/config"] = {
        "config": BENCH_CONFIG,
        "learning_rate": 0.0,
        "min_new_tokens": "max_completion_length",
        "order": order,
        "steps_per_run": STEPS_PER_RUN,
        "steps_in_median": len(kept["vad"]),
        "torch_threads": THREADS,
        "step": "TRL training_step: rollout + view processing + forwards + loss + backward",
        "rollout": "_prepare_inputs: generation, rewards, teacher prompt processing",
        "loss": "step - rollout: student forward, teacher forward(s), loss, backward",
    }
    merged["vad/commit"] = cli.git_commit()
    RESULTS.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
