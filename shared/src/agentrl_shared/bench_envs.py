"""Environment throughput for `make bench`: steps per second of each adapter, worker pool against one process.

`python -m agentrl_shared.bench_envs [--slots 4] [--steps 20]` runs the same scripted episodes (first admissible
action, or a search for Search-QA) through `EnvPool(num_workers=0)` and `EnvPool(num_workers=slots)`, prints both
side by side and merges `envs/<name>/{single,pool}_steps_per_s` and their ratio into `bench-results.json`.
"""

import argparse
import functools
import json
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

from .envs import EnvFailure, make_env
from .envs.pool import EnvPool


def _setups(tmp: Path) -> dict:
    """name -> (factory, tasks, action function) for every adapter whose engine is installed."""
    from .envs import search_qa, webshop
    from .testing import write_synthetic_catalog, write_synthetic_qa

    ws = write_synthetic_catalog(tmp / "webshop")
    qa = write_synthetic_qa(tmp / "search_qa")
    setups = {
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


def measure(factory, tasks, act, slots: int, steps: int, workers: int) -> float:
    """Steps per second of `slots` episodes stepped together `steps` times (resets and start-up not counted)."""
    ids = list(range(slots))
    with EnvPool(factory, num_slots=slots, timeout=120.0, num_workers=workers) as pool:
        states = pool.reset(ids, [tasks[i % len(tasks)] for i in ids], [0] * slots)
        start = time.perf_counter()
        for _ in range(steps):
            states = pool.step(ids, [act(s) for s in states])
            if any(isinstance(s, EnvFailure) for s in states):
                raise RuntimeError(f"benchmark episode failed: {states}")
        return slots * steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default="bench-results.json")
    args = parser.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'env':<14}{'single (steps/s)':>18}{'pool x' + str(args.slots) + ' (steps/s)':>22}{'ratio':>8}")
        for name, (factory, tasks, act) in _setups(Path(tmp)).items():
            single = measure(factory, tasks, act, args.slots, args.steps, workers=0)
            pool = measure(factory, tasks, act, args.slots, args.steps, workers=args.slots)
            print(f"{name:<14}{single:>18.1f}{pool:>22.1f}{pool / single:>8.2f}")
            figures[f"envs/{name}/single_steps_per_s"] = round(single, 2)
            figures[f"envs/{name}/pool_steps_per_s"] = round(pool, 2)
            figures[f"envs/{name}/pool_over_single"] = round(pool / single, 3)
    figures["envs/config"] = {"slots": args.slots, "steps": args.steps}
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results.update(figures)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return figures


if __name__ == "__main__":
    main()
