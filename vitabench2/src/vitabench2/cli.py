"""Command line: `vitabench2 run | view | report`.

Paper spec sec. 6.3 (the `vita run` / `vita view` CLI) and sec. 4 (settings). `run` writes results incrementally and
resumes an interrupted run in the same --output folder; `report` builds the tables and plots from run folders.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitabench2", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="evaluate an agent over users' subtask sequences")
    run.add_argument(
        "--agent", default="transformers:smollm2-135m", help="transformers:PATH_OR_NAME or openai:MODEL@BASE_URL"
    )
    run.add_argument("--user", default=None, help="user simulator back end (default: same as --agent)")
    run.add_argument("--judge", default=None, help="judge back end (default: same as --agent)")
    run.add_argument("--api-key", default=None, help="bearer token for openai back ends")
    group = run.add_mutually_exclusive_group()
    group.add_argument(
        "--memory-type", default=None, help="null | groundtruth | full_context | rewrite | rag (default null)"
    )
    group.add_argument("--memory-class", default=None, help="dotted path of a BaseMemory subclass")
    run.add_argument(
        "--tasks",
        default=None,
        help="tasks JSON file or folder (official layout); default: packaged sample; 'hf:2.0' downloads",
    )
    run.add_argument("--language", default="english", choices=["english", "chinese"])
    run.add_argument("--trials", type=int, default=1)
    run.add_argument("--users", default=None, help="comma-separated user ids")
    run.add_argument("--subtasks", default=None, help="comma-separated subtask ids")
    run.add_argument("--num-users", type=int, default=None)
    run.add_argument("--max-steps", type=int, default=50)
    run.add_argument("--max-errors", type=int, default=10)
    run.add_argument(
        "--concurrency", type=int, default=4, help="(user, trial) sequences in parallel; also the per-back-end cap"
    )
    run.add_argument("--outcome-reward", action="store_true")
    run.add_argument("--max-new-tokens", type=int, default=256, help="completion cap of transformers back ends")
    run.add_argument(
        "--max-input-tokens", type=int, default=4096, help="prompt cap of transformers back ends (left-truncated)"
    )
    run.add_argument("--output", required=True, help="run folder; rerun with the same folder to resume")
    view = sub.add_parser("view", help="print a run's transcripts")
    view.add_argument("run_dir")
    view.add_argument("--user", default=None)
    view.add_argument("--subtask", default=None)
    view.add_argument("--trial", type=int, default=None)
    report = sub.add_parser("report", help="tables and plots from run folders")
    report.add_argument("run_dirs", nargs="+")
    report.add_argument("--out", default=None, help="folder for PNGs and report.md (default: first run's parent)")
    report.add_argument("--readme", default=None, help="README to update between the report markers")
    return parser


def cmd_run(args, argv: list[str]) -> None:
    from agentrl_shared.offline import set_offline_env

    set_offline_env()
    from .backends import build_backend
    from .runner import RunConfig, Runner
    from .tasks import load_public

    memory_type = args.memory_type if (args.memory_type or args.memory_class) else "null"
    config = RunConfig(
        output=args.output,
        agent=args.agent,
        user=args.user or args.agent,
        judge=args.judge or args.agent,
        tasks=args.tasks,
        language=args.language,
        memory_type=memory_type,
        memory_class=args.memory_class,
        num_trials=args.trials,
        users=_csv(args.users),
        subtasks=_csv(args.subtasks),
        num_users=args.num_users,
        max_steps=args.max_steps,
        max_errors=args.max_errors,
        max_concurrency=args.concurrency,
        outcome_reward=args.outcome_reward,
        max_new_tokens=args.max_new_tokens,
    )
    backends: dict = {}  # one instance per distinct spec (a single in-process model serves all roles)
    for spec in (config.agent, config.user, config.judge):
        if spec not in backends:
            backends[spec] = build_backend(
                spec,
                max_concurrency=args.concurrency,
                max_new_tokens=args.max_new_tokens,
                max_input_tokens=args.max_input_tokens,
                api_key=args.api_key,
            )
    tasks = None
    if args.tasks and args.tasks.startswith("hf:"):
        tasks = load_public(args.tasks[3:], args.language)
    runner = Runner(config, backends[config.agent], backends[config.user], backends[config.judge], tasks=tasks)
    extra = {"command": "vitabench2 " + " ".join(argv), "commit": _commit()}
    Path(config.output).mkdir(parents=True, exist_ok=True)
    (Path(config.output) / "run_info.json").write_text(json.dumps(extra, indent=1))
    summary = runner.run()
    m = summary["metrics"]
    k = m.get("k")
    print(
        json.dumps(
            {
                key: m.get(key)
                for key in (f"avg@{k}", f"pass@{k}", f"pass^{k}", "avg_proactive", "avg_personalization", "num_units")
            }
            | {"judge_failures": summary["judge_failures"], "terminations": summary["terminations"]},
            indent=1,
        )
    )


def cmd_view(args) -> None:
    from .runner import read_records

    records = read_records(Path(args.run_dir) / "results.jsonl")
    shown = 0
    for r in records:
        if (
            (args.user and r["user_id"] != args.user)
            or (args.subtask and r["subtask_id"] != args.subtask)
            or (args.trial is not None and r["trial"] != args.trial)
        ):
            continue
        shown += 1
        print(
            f"=== user {r['user_id']} | subtask {r['subtask_id']} (index {r['task_index']}, {r['domain']}, "
            f"skills {r['skill_tested']}) | trial {r['trial']} | reward {r['reward']} | {r['termination']}"
        )
        for m in r["messages"]:
            text = (m.get("content") or "").strip()
            if m["role"] == "system":
                text = text[:300] + (" ..." if len(text) > 300 else "")
            calls = " ".join(
                f"<call {c['name']} {json.dumps(c['arguments'], ensure_ascii=False)}>"
                for c in m.get("tool_calls") or []
            )
            print(f"[{m['role']}] {text} {calls}".rstrip())
        print(
            f"rubrics: {r.get('rubric_states')} judge_failed={r.get('judge_failed')} {r.get('failure_reason', '')}\n"
        )
    if not shown:
        print(f"No records match in {args.run_dir}")


def cmd_report(args) -> None:
    from .report import load_run, plot, render, update_readme

    runs = []
    for d in args.run_dirs:
        run = load_run(d)
        info = Path(d) / "run_info.json"
        if info.exists():
            run["config"].update(json.loads(info.read_text()))
        runs.append(run)
    out = Path(args.out) if args.out else Path(args.run_dirs[0]).parent
    figures = plot(runs, out)
    base = Path(args.readme).parent if args.readme else out
    rel = [
        str(p.resolve().relative_to(base.resolve())) if p.resolve().is_relative_to(base.resolve()) else str(p)
        for p in figures
    ]
    section = render(runs, rel)
    (out / "report.md").write_text(section + "\n")
    print(section)
    if args.readme:
        update_readme(Path(args.readme), section)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "run":
        cmd_run(args, argv)
    elif args.command == "view":
        cmd_view(args)
    elif args.command == "report":
        cmd_report(args)
    else:
        raise ValueError(f"Unknown command {args.command!r}; valid: run, view, report")


if __name__ == "__main__":
    main()
