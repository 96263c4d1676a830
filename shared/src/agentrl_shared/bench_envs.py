"""Environment throughput for `make bench`: steps per second of each adapter, worker pool against one process.

`python -m agentrl_shared.bench_envs [--slots 4] [--workers N] [--steps 50] [--rounds 2] [--min-seconds 2]
[--repeats 1]` runs the same scripted episodes (first admissible action, a search for Search-QA, `look` for TextRooms)
through `EnvPool(num_workers=0)` (one process, the slots stepped one after another) and the trainers' pool (`--workers`
processes; default `envs.pool.default_workers`, one per slot up to one per core; moved into the process, one after
another or in threads, when it measures that faster, see `envs.pool`), in the order single, pool, pool, single (the
mean of each side, `--repeats` such blocks), in rounds of a reset and `steps` steps. Rounds are counted once the
placement is final (after one warm-up round in one process, after the pool's probe and trials in the pool: a training
run has hundreds of rounds), at least `rounds` of them and at least `min_seconds` of stepping: a TextRooms round of 200
steps lasts under a millisecond, where the clock's and the machine's noise would be the figure. Prints both side by
side with the ratio of each ABBA block (its spread is the noise), what the pool measured per step call (pooled wall,
the workers' CPU estimate, in-process wall in the one-after-another and in the threads trial) and its decision, then
the machine's ceiling for that many workers (`parallel_ceiling`: CPU-bound loops in that many processes against one
after another), and merges `envs/<name>/{single,pool}_steps_per_s`, their ratio, the blocks' ratios,
`envs/<name>/pool_step_cost`, `envs/<name>/slots_workers`, `envs/parallel_ceiling` and the commit into
`bench-results.json`.
"""

import argparse
import functools
import json
import multiprocessing as mp
import os
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

from .envs import EnvFailure, load_tasks, make_env
from .envs.pool import EnvPool, default_workers
from .provenance import git_commit


def _setups(tmp: Path) -> dict:
    """name -> (factory, tasks, action function) for every adapter whose engine is installed."""
    from .envs import search_qa, webshop
    from .testing import write_synthetic_catalog, write_synthetic_qa

    ws = write_synthetic_catalog(tmp / "webshop")
    qa = write_synthetic_qa(tmp / "search_qa")
    setups = {
        "textrooms": (
            functools.partial(make_env, "textrooms", max_steps=10**6),
            load_tasks("textrooms", "train", num_tasks=4),
            lambda s: "look",
        ),
        "webshop": (
            functools.partial(make_env, "webshop", data_dir=str(ws), max_steps=10**6),
            webshop.load_tasks("all", ws),
            lambda s: (
                "search[shoes]" if "search[<your query>]" in s.info["admissible_actions"] else "click[back to search]"
            ),
        ),
        "search_qa": (
            functools.partial(make_env, "search_qa", corpus_path=str(qa / "corpus.jsonl"), max_turns=10**6),
            search_qa.load_qa(qa / "test.jsonl"),
            lambda s: "<search>largest planet in the solar system</search>",
        ),
    }
    if find_spec("alfworld") is not None:
        from .envs import alfworld
        from .testing import write_synthetic_games

        write_synthetic_games(tmp / "alfworld", "train", n_games=2)
        setups["alfworld"] = (
            functools.partial(make_env, "alfworld", max_steps=10**6, expert_type="none"),  # as in training
            alfworld.load_tasks("train", tmp / "alfworld"),
            lambda s: s.info["admissible_actions"][0],
        )
    if find_spec("scienceworld") is not None:
        task = {"task_id": "boil:0", "task_type": "boil", "task_name": "boil", "variation": 0}
        setups["scienceworld"] = (
            functools.partial(make_env, "scienceworld", max_steps=10**6, env_step_limit=10**6),
            [task],
            lambda s: "look around",
        )
    return setups


def _spin(n: int) -> float:
    """Seconds of `n` iterations of pure-Python arithmetic: CPU-bound work that needs nothing from other processes."""
    start, total = time.perf_counter(), 0
    for i in range(n):
        total += i * i % 7
    return time.perf_counter() - start


def _spin_after(barrier, n: int, conn) -> None:
    barrier.wait()  # every process starts its loop together: their start-up is not counted
    conn.send(_spin(n))


def parallel_ceiling(workers: int, n: int = 10_000_000, repeats: int = 5) -> list[float]:
    """The most any pool of `workers` processes can give on this machine: `workers` CPU-bound loops one after another
    in this process over the same loops run at once in `workers` processes (the slowest one's time), once per repeat.
    Two vCPUs of a virtual machine do not give 2x: what they share (the host's cores, caches, memory bandwidth and
    clock) is the pool's limit as much as the loops'."""
    ctx = mp.get_context("spawn")
    ratios = []
    _spin(n)  # warm-up: the first loop of a process runs slower, which would inflate the first ratio
    for _ in range(repeats):
        serial = sum(_spin(n) for _ in range(workers))
        barrier, pipes = ctx.Barrier(workers), [ctx.Pipe(duplex=False) for _ in range(workers)]
        procs = [ctx.Process(target=_spin_after, args=(barrier, n, send)) for _, send in pipes]
        for proc in procs:
            proc.start()
        parallel = max(recv.recv() for recv, _ in pipes)
        for proc in procs:
            proc.join()
        ratios.append(round(serial / parallel, 3))
    return ratios


def measure(factory, tasks, act, slots: int, steps: int, workers: int, rounds: int,
            min_seconds: float = 0.0) -> tuple[float, dict]:  # fmt: skip
    """Steps per second of `slots` episodes stepped together `steps` times per round, over at least `rounds` rounds and
    `min_seconds` of stepping that start with the placement final (resets and start-up not counted), and the pool's
    `step_cost`."""
    ids = list(range(slots))
    with EnvPool(factory, num_slots=slots, timeout=120.0, num_workers=workers) as pool:
        elapsed, counted, r = 0.0, 0, 0
        while counted < rounds or elapsed < min_seconds:
            final = r > 0 and (workers == 0 or pool.step_cost["in_process"] is not None)  # read before the reset moves
            states = pool.reset(ids, [tasks[i % len(tasks)] for i in ids], [r] * slots)
            start = time.perf_counter()
            for _ in range(steps):
                states = pool.step(ids, [act(s) for s in states])
                if any(isinstance(s, EnvFailure) for s in states):
                    raise RuntimeError(f"benchmark episode failed: {states}")
            if final:
                elapsed += time.perf_counter() - start
                counted += 1
            r += 1
        return slots * steps * counted / elapsed, dict(pool.step_cost)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--workers", type=int, help="the pool's processes (default: one per slot up to one per core)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=2.0, help="counted stepping per measurement, at least")
    parser.add_argument("--repeats", type=int, default=1, help="ABBA blocks (single, pool, pool, single)")
    parser.add_argument("--only", nargs="*", help="environments to measure (default: every installed one)")
    parser.add_argument("--out", default="bench-results.json")
    args = parser.parse_args(argv)
    figures, commit = {}, git_commit()  # the commit this process started from
    workers = args.workers or default_workers(args.slots)
    load_before = os.getloadavg()[0]  # a shared machine: the 1-minute load before and after, filed with the figures
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'env':<14}{'single (steps/s)':>18}{f'pool {args.slots}/{workers}w (steps/s)':>22}{'ratio':>8}"
              f"{'ms/call pooled':>16}{'ms/call CPU est':>17}{'ms/call in-proc':>17}{'ms/call threads':>17}"
              "  pool runs")  # fmt: skip
        for name, (factory, tasks, act) in _setups(Path(tmp)).items():
            if args.only and name not in args.only:
                continue
            # single, pool, pool, single (ABBA) `--repeats` times: the machine drifts over a run (caches, the shared
            # catalogue service warming up), and measured one after the other the second side reads a few per cent off
            runs: dict[int, list[float]] = {0: [], workers: []}
            for side in [0, workers, workers, 0] * args.repeats:
                value, step_cost = measure(factory, tasks, act, args.slots, args.steps, side, args.rounds,
                                           args.min_seconds)  # fmt: skip
                runs[side].append(value)
                if side:
                    cost = step_cost  # the last pool's probe and decision
            single, pool = (sum(runs[w]) / len(runs[w]) for w in (0, workers))
            blocks = [round((runs[workers][2 * b] + runs[workers][2 * b + 1])
                            / (runs[0][2 * b] + runs[0][2 * b + 1]), 3) for b in range(args.repeats)]  # fmt: skip
            pooled_ms = f"{1e3 * cost['pooled_s'] / cost['pooled_calls']:.3f}"
            cpu_ms = f"{1e3 * cost['worker_cpu_s'] / cost['pooled_calls']:.3f}"
            tried = cost["threaded_calls"] > 0
            trial_ms, threads_ms = (f"{1e3 * cost[f'{t}_s'] / cost[f'{t}_calls']:.3f}" if tried else "-"
                                    for t in ("in_process", "threaded"))  # fmt: skip
            where = (
                ("in-process, threads" if cost["threaded"] else "in-process") if cost["in_process"] else "in workers"
            )
            why = ("a trial won" if cost["in_process"] else "trials lost") if tried else "no trial"
            print(f"{name:<14}{single:>18.1f}{pool:>22.1f}{pool / single:>8.2f}{pooled_ms:>16}{cpu_ms:>17}"
                  f"{trial_ms:>17}{threads_ms:>17}  {where} ({why}); blocks {blocks}")  # fmt: skip
            figures[f"envs/{name}/single_steps_per_s"] = round(single, 2)
            figures[f"envs/{name}/pool_steps_per_s"] = round(pool, 2)
            figures[f"envs/{name}/pool_over_single"] = round(pool / single, 3)
            figures[f"envs/{name}/pool_over_single_blocks"] = blocks
            figures[f"envs/{name}/pool_step_cost"] = cost
            figures[f"envs/{name}/commit"] = commit  # per environment: a run with --only refiles only its own
            figures[f"envs/{name}/slots_workers"] = [args.slots, workers]
    if workers > 1:  # what the machine gives `workers` CPU-bound processes: the ceiling of the pool's ratio
        ceiling = parallel_ceiling(workers)
        ratio = sum(ceiling) / len(ceiling)
        print(f"machine: {workers} CPU-bound processes / one, {ratio:.2f} (repeats {ceiling})")
        figures["envs/parallel_ceiling"] = {"workers": workers, "ratio": round(ratio, 3), "repeats": ceiling,
                                            "commit": commit}  # fmt: skip
    figures["envs/load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    figures["envs/config"] = {"slots": args.slots, "workers": workers, "steps": args.steps, "rounds": args.rounds,
                              "min_seconds": args.min_seconds,
                              "order": f"single, pool, pool, single x {args.repeats}, means"}  # fmt: skip
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results.update(figures)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return figures


if __name__ == "__main__":
    main()
