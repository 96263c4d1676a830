"""Benchmark: subtasks per minute with concurrency 1 vs 8 against a scripted back end with a fixed per-call delay.

Not a paper number: it checks that the runner overlaps (user, trial) sequences (the official `--max-concurrency`
of the reference CLI). `python -m vitabench2.bench` prints the table and merges its figures under the `vitabench2/`
prefix into `bench-results.json` at the repository root.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from agentrl_shared.provenance import git_commit

from .backends import ScriptedBackend
from .memory import count_tokens
from .runner import RunConfig, Runner
from .tasks import PersonalizationTask, load_tasks, sample_tasks_path


STOP = "###STOP###"


def scripted_agent(messages: list[dict], tools: list[dict] | None) -> str:
    """One search-free tool call, then stop: 2 agent calls per subtask."""
    if messages[-1]["role"] == "tool":
        return f"Done. {STOP}"
    return '<tool_call>{"name": "get_user_all_orders", "arguments": {}}</tool_call>'


def scripted_user(messages: list[dict], tools: list[dict] | None) -> str:
    return f"Thanks. {STOP}"


def scripted_judge(messages: list[dict], tools: list[dict] | None) -> str:
    prompt = messages[-1]["content"]
    n = prompt.split("<current_rubrics>")[-1].split("</current_rubrics>")[0].count('"rubric_idx"')
    return json.dumps(
        [{"rubric_idx": f"rubric_{i}", "rubric": "", "justification": "ok", "meetExpectation": True} for i in range(n)]
    )


def synthetic_users(num_users: int) -> list[PersonalizationTask]:
    """Copies of the sample users under fresh ids."""
    base = load_tasks(sample_tasks_path())
    out = []
    for i in range(num_users):
        src = base[i % len(base)]
        out.append(src.model_copy(update={"id": f"{src.id}_{i}", "user_id": f"{src.user_id}_{i}"}))
    return out


def measure(concurrency: int, num_users: int, delay_s: float) -> dict:
    tasks = synthetic_users(num_users)
    count_tokens("warm up")  # load the tokenizer outside the timed region
    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig(
            output=tmp,
            agent="scripted",
            user="scripted",
            judge="scripted",
            memory_type="full_context",
            max_concurrency=concurrency,
        )
        backends = [ScriptedBackend(f, delay_s=delay_s) for f in (scripted_agent, scripted_user, scripted_judge)]
        start = time.perf_counter()
        summary = Runner(config, *backends, tasks=tasks).run()
        elapsed = time.perf_counter() - start
    n = summary["num_records"]
    return {"subtasks": n, "seconds": elapsed, "subtasks_per_min": 60.0 * n / elapsed}


def merge_results(path: Path, figures: dict, config: dict) -> None:
    """Read `bench-results.json`, replace our `vitabench2/` keys, write back (other packages' keys are kept)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    for key, value in figures.items():
        data[f"vitabench2/{key}"] = value
    data["vitabench2/config"] = config
    data["vitabench2/commit"] = git_commit()
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per scripted model call")
    parser.add_argument("--output", default="bench-results.json", help="JSON file to merge the figures into")
    args = parser.parse_args(argv)
    seq = measure(1, args.users, args.delay)
    par = measure(8, args.users, args.delay)
    figures = {
        "subtasks_per_min_concurrency1": round(seq["subtasks_per_min"], 1),
        "subtasks_per_min_concurrency8": round(par["subtasks_per_min"], 1),
        "speedup_8_vs_1": round(par["subtasks_per_min"] / seq["subtasks_per_min"], 2),
    }
    print(f"{'':<16}{'concurrency 1':>16}{'concurrency 8':>16}")
    print(f"{'subtasks':<16}{seq['subtasks']:>16}{par['subtasks']:>16}")
    print(f"{'seconds':<16}{seq['seconds']:>16.2f}{par['seconds']:>16.2f}")
    print(f"{'subtasks/min':<16}{seq['subtasks_per_min']:>16.1f}{par['subtasks_per_min']:>16.1f}")
    print(f"speedup 8 vs 1: {figures['speedup_8_vs_1']}x")
    merge_results(Path(args.output), figures, {"users": args.users, "delay_s": args.delay, "memory": "full_context"})
    return figures


if __name__ == "__main__":
    main()
