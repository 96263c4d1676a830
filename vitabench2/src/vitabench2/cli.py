"""`vitabench2 run | eval | judge | reproduce | report | view | rag-cache`: evaluate agents on VitaBench 2.0 / 1.0.

Mirrors the official `vita run` / `vita view` CLI and its defaults (meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/cli.py`,
`src/vita/config.py`). `run` writes results as they
come into the folder given by --output and resumes there; `eval --config NAME key=value` runs a config of
`vitabench2/configs/` and writes `results.json` (the monorepo's command shape); `reproduce` runs the offline sample plan into an output
folder; `report` copies run folders into a results folder and regenerates its tables, plots and README section;
`judge` judges a saved run's conversations again (another judge model or evaluation type) into a new folder;
`view` prints transcripts; `rag-cache` writes the embeddings `--memory-type rag_cache` reads. Configuration and data
errors print one line and exit with status 2; Ctrl-C stops a run cleanly (status 130) and the same command resumes.
"""

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path


logger = logging.getLogger("vitabench2")
# The offline sample plan of `reproduce` (CPU scale): SmolLM2-135M in process as agent, user and judge.
SAMPLE_MEMORIES = ("full_context", "rag")
SAMPLE_ARGS = [
    "--agent", "transformers:smollm2-135m", "--trials", "1", "--max-steps", "8", "--max-new-tokens", "32",
    "--max-input-tokens", "1024", "--concurrency", "2",
]  # fmt: skip
# Official `--evaluation-type` values (judge.EVALUATION_TYPES; not imported here: `--help` stays fast).
EVALUATION_TYPES = (
    "trajectory",
    "trajectory_full_traj_rubric",
    "trajectory_sliding_wo_rubric",
    "trajectory_full_traj_wo_rubric",
)
DEFAULT_CONFIG = "sample_cpu"
SECRET_FLAGS = ("--api-key", "--agent-api-key", "--user-api-key", "--judge-api-key")
RUN_FILES = ("config.json", "results.jsonl", "summary.json", "run_info.json")


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _json_object(text: str | None, flag: str) -> dict:
    """`--memory-kwargs` / `--prices`: a JSON object, inline or in a file."""
    if not text:
        return {}
    raw = Path(text).read_text() if Path(text).is_file() else text
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise SystemExit(f"{flag}: not a JSON object nor a JSON file ({err}): {text[:200]!r}") from None
    if not isinstance(value, dict):
        raise SystemExit(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def redact(argv: list[str]) -> list[str]:
    """The command line with API keys replaced by `***` (it is written to run_info.json)."""
    out, hide = [], False
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if hide:
            out.append("***")
        elif flag in SECRET_FLAGS and "=" in arg:
            out.append(f"{flag}=***")
        else:
            out.append(arg)
        hide = arg in SECRET_FLAGS
    return out


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    g = run.add_argument_group("back ends (agent, user simulator, judge)")
    g.add_argument(
        "--agent", default="transformers:smollm2-135m", help="transformers:PATH_OR_NAME or openai:MODEL@URL"
    )
    g.add_argument("--user", default=None, help="user simulator back end (default: same as --agent)")
    g.add_argument("--judge", default=None, help="judge back end (default: same as --agent)")
    g.add_argument(
        "--api-key",
        default=None,
        help="bearer token for every openai back end (default: $OPENAI_API_KEY for the user and judge only: the "
        "agent endpoint, often a local server, never gets it unless asked)",
    )
    for role in ("agent", "user", "judge"):
        g.add_argument(
            f"--{role}-api-key", default=None, help=f"bearer token for the {role} only (overrides --api-key)"
        )
    g.add_argument(
        "--max-tokens", type=int, default=4096, help="completion cap of openai agent and user back ends (default 4096)"
    )
    g.add_argument(
        "--judge-max-tokens",
        type=int,
        default=8192,
        help="completion cap of an openai judge (default 8192: the official models.yaml entry of gpt-4.1, the judge)",
    )
    g.add_argument("--temperature", type=float, default=0.0, help="all roles (official models.yaml: 0.0)")
    g.add_argument(
        "--seed",
        type=int,
        default=300,
        help="run seed (official default 300): each trial's agent and user calls carry a seed drawn from it; the judge "
        "gets none",
    )
    g.add_argument(
        "--thinking",
        choices=["on", "off"],
        default=None,
        help="send chat_template_kwargs.enable_thinking to the openai back ends of --thinking-roles (vLLM, "
        "Qwen3-style); default: not sent",
    )
    g.add_argument(
        "--thinking-roles",
        default="agent",
        help="comma-separated roles that get --thinking (agent, user, judge; default: agent only: hosted user and "
        "judge models such as gpt-4.1 answer 400 to chat_template_kwargs)",
    )
    g.add_argument(
        "--context-length",
        type=int,
        default=None,
        help="agent context window in tokens; caps the Full Context budget (default: asked from a vLLM endpoint)",
    )
    g.add_argument("--timeout", type=float, default=600.0, help="seconds per request to openai back ends")
    g.add_argument("--max-new-tokens", type=int, default=256, help="completion cap of transformers back ends")
    g.add_argument(
        "--max-input-tokens", type=int, default=4096, help="prompt cap of transformers back ends (left-truncated)"
    )
    g.add_argument("--offline", action="store_true", help="no network for model or data hubs (set for transformers)")
    m = run.add_argument_group("memory")
    group = m.add_mutually_exclusive_group()
    group.add_argument(
        "--memory-type",
        default=None,
        help="null | groundtruth | full_context | rewrite | rag | rag_cache (default null)",
    )
    group.add_argument("--memory-class", default=None, help="dotted path of a BaseMemory subclass")
    m.add_argument("--rag-cache-dir", default=None, help="embeddings written by `vitabench2 rag-cache` (rag_cache)")
    m.add_argument(
        "--memory-kwargs",
        default=None,
        help="options of the memory as a JSON object or a path to a JSON file, e.g. '{\"top_k\": 4}' (official "
        "memory.yaml); recorded in config.json",
    )
    t = run.add_argument_group("tasks")
    t.add_argument(
        "--tasks",
        default=None,
        help="tasks JSON file or folder (official layout); default: packaged sample; 'hf:2.0' / 'hf:1.0:DOMAIN' download",
    )
    t.add_argument("--language", default="english", choices=["english", "chinese"])
    t.add_argument("--trials", type=int, default=1, help="independent runs of every user (leaderboard: 4)")
    t.add_argument("--users", default=None, help="comma-separated user ids")
    t.add_argument("--subtasks", default=None, help="comma-separated subtask ids")
    t.add_argument("--num-users", type=int, default=None)
    o = run.add_argument_group("orchestration and judging")
    o.add_argument(
        "--holidays",
        choices=["official", "computed"],
        default="official",
        help="get_holiday_date table: official (2023-2025 only, as the reference) or computed (any year; a deviation)",
    )
    o.add_argument(
        "--shuffle-search",
        action="store_true",
        help="ablation: search results in random order (official VITA_SHUFFLE_SEARCH), seeded by trial and subtask",
    )
    o.add_argument("--max-steps", type=int, default=300, help="user, agent and tool-result steps (official 300)")
    o.add_argument(
        "--max-errors",
        type=int,
        default=None,
        help="end a subtask after N failed tool calls (default: never, as the official orchestrator)",
    )
    o.add_argument("--concurrency", type=int, default=4, help="(user, trial) sequences in parallel; per-back-end cap")
    o.add_argument(
        "--evaluation-type",
        default="trajectory",
        choices=EVALUATION_TYPES,
        help="official evaluation types: trajectory (default: sliding windows over the rubrics), "
        "trajectory_full_traj_rubric, and without rubrics trajectory_sliding_wo_rubric, trajectory_full_traj_wo_rubric",
    )
    o.add_argument("--outcome-reward", action="store_true", help="also judge the last write action (min with traj)")
    o.add_argument("--judge-retries", type=int, default=3, help="malformed judge replies before a recorded failure")
    o.add_argument("--retry-failed", action="store_true", help="on resume, rerun subtasks whose back end failed")
    run.add_argument("--output", required=True, help="run folder; rerun with the same folder to resume")
    run.add_argument(
        "--csv", default=None, help="append this run's summary as one row to a CSV file (official --csv-output-file)"
    )
    run.add_argument(
        "--prices",
        default=None,
        help='USD per million tokens by model name, as a JSON object or file: \'{"my-model": {"prompt_price": 0.5, '
        '"completion_price": 1.5}}\' (official models.yaml cost_1m_token_dollar; gpt-4.1, gpt-4o-mini and o4-mini '
        "come with the official prices); summary.json gets the cost per role",
    )


EVAL_HELP = (
    "run an eval config (a file in vitabench2/configs/ or a YAML path) into <--output>/<config>_<method>, then write "
    "results.json there (the monorepo's `<pkg> eval --config NAME key=value` shape)"
)


def add_eval_arguments(ev: argparse.ArgumentParser) -> None:
    ev.add_argument("--config", default=DEFAULT_CONFIG, help=f"config name or YAML path (default {DEFAULT_CONFIG})")
    ev.add_argument("--output", default="runs/vitabench2", help="parent of the run folder (default runs/vitabench2)")
    ev.add_argument("--method", default="eval", help="label written into results.json and the run folder's name")
    ev.add_argument("overrides", nargs="*", help="key=value or run.key=value (the `run` flags without dashes)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitabench2", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="evaluate an agent over users' subtask sequences (resumable)")
    add_run_arguments(run)
    add_eval_arguments(sub.add_parser("eval", help=EVAL_HELP, description=EVAL_HELP))
    rep = sub.add_parser("reproduce", help="the offline CPU sample: SmolLM2-135M, Full Context and RAG memory")
    rep.add_argument("--output", default="runs/vitabench2", help="parent folder of the run folders")
    report = sub.add_parser("report", help="copy run folders into a results folder; tables, plots, README section")
    report.add_argument("run_dirs", nargs="*", help="run folders (default: the run folders already in --results)")
    report.add_argument("--results", required=True, help="results folder (run copies, PNGs, report.md)")
    report.add_argument("--readme", default=None, help="README to update between the report markers")
    rejudge = sub.add_parser("judge", help="judge a saved run's conversations again into a new run folder")
    rejudge.add_argument("run_dir", help="a run folder written by `vitabench2 run`")
    rejudge.add_argument("--judge", required=True, help="judge back end (openai:MODEL@URL or transformers:PATH)")
    rejudge.add_argument("--output", required=True, help="new run folder; rerun with the same folder to resume")
    rejudge.add_argument("--judge-api-key", default=None, help="bearer token (default: $OPENAI_API_KEY)")
    rejudge.add_argument("--judge-max-tokens", type=int, default=8192, help="completion cap of an openai judge")
    rejudge.add_argument("--evaluation-type", default="trajectory", choices=EVALUATION_TYPES)
    rejudge.add_argument("--outcome-reward", action="store_true", help="also judge the last write action")
    rejudge.add_argument("--judge-retries", type=int, default=3, help="malformed judge replies before a failure")
    rejudge.add_argument("--timeout", type=float, default=600.0, help="seconds per request to an openai judge")
    view = sub.add_parser("view", help="print a run's transcripts")
    view.add_argument("run_dir")
    view.add_argument("--user", default=None)
    view.add_argument("--subtask", default=None)
    view.add_argument("--trial", type=int, default=None)
    cache = sub.add_parser("rag-cache", help="embed every subtask's interactions and instruction for rag_cache")
    cache.add_argument("--tasks", default=None, help="as for run (default: packaged sample)")
    cache.add_argument("--language", default="english", choices=["english", "chinese"])
    cache.add_argument("--output", required=True, help="cache folder ({user_id}__{subtask_id}.npz files)")
    cache.add_argument(
        "--embedder",
        default="multilingual-e5-small",
        choices=["multilingual-e5-small", "all-MiniLM-L6-v2"],
        help="offline embedding model (default multilingual-e5-small; MiniLM is English-only)",
    )
    return parser


def load_task_list(spec: str | None, language: str):
    from .tasks import load_public, load_tasks, sample_tasks_path

    if spec and spec.startswith("hf:"):
        version, _, domain = spec[3:].partition(":")
        return load_public(version, language, domain or "personalization")
    return load_tasks(spec or sample_tasks_path(), language)


def cmd_run(args, argv: list[str]) -> None:
    from agentrl_shared.offline import set_offline_env
    from agentrl_shared.provenance import git_commit

    from .backends import OpenAIBackend, build_backend
    from .runner import RunConfig, Runner, append_run_info

    tasks = load_task_list(args.tasks, args.language)  # before any offline switch: hf: downloads need the network
    specs = {"agent": args.agent, "user": args.user or args.agent, "judge": args.judge or args.agent}
    if args.offline or any(s.startswith("transformers:") for s in specs.values()):
        set_offline_env()  # in-process models load from local files only
    thinking = None if args.thinking is None else args.thinking == "on"
    thinking_roles = _csv(args.thinking_roles) or []
    unknown = sorted(set(thinking_roles) - set(specs))
    if unknown:
        raise SystemExit(f"--thinking-roles: unknown roles {unknown}; valid: agent, user, judge")
    # one instance per distinct (spec, key, thinking, cap): a single in-process model serves all roles
    backends: dict = {}
    for role, spec in specs.items():
        key = (
            getattr(args, f"{role}_api_key")
            or args.api_key
            or (os.environ.get("OPENAI_API_KEY") if role != "agent" else None)
        )
        role_thinking = thinking if role in thinking_roles and spec.startswith("openai:") else None
        cap = args.judge_max_tokens if role == "judge" and spec.startswith("openai:") else args.max_tokens
        if (spec, key, role_thinking, cap) not in backends:
            backends[(spec, key, role_thinking, cap)] = build_backend(
                spec,
                max_concurrency=args.concurrency,
                max_new_tokens=args.max_new_tokens,
                max_input_tokens=args.max_input_tokens,
                api_key=key,
                temperature=args.temperature,
                max_tokens=cap,
                enable_thinking=role_thinking,
                timeout_s=args.timeout,
            )
        specs[role] = backends[(spec, key, role_thinking, cap)]
    context_length = args.context_length
    if context_length is None and isinstance(specs["agent"], OpenAIBackend):
        context_length = specs["agent"].context_length()
    memory_kwargs = _json_object(args.memory_kwargs, "--memory-kwargs")
    prices = _json_object(args.prices, "--prices")
    for model, price in prices.items():
        if not (isinstance(price, dict) and set(price) <= {"prompt_price", "completion_price"}):
            raise SystemExit(
                f"--prices: {model!r} must map to {{'prompt_price': USD per 1M tokens, 'completion_price': ...}}"
            )
    if args.rag_cache_dir:
        memory_kwargs["cache_dir"] = args.rag_cache_dir
    config = RunConfig(
        output=args.output,
        agent=args.agent,
        user=args.user or args.agent,
        judge=args.judge or args.agent,
        tasks=args.tasks,
        language=args.language,
        memory_type=args.memory_type if (args.memory_type or args.memory_class) else "null",
        memory_class=args.memory_class,
        memory_kwargs=memory_kwargs,
        num_trials=args.trials,
        users=_csv(args.users),
        subtasks=_csv(args.subtasks),
        num_users=args.num_users,
        max_steps=args.max_steps,
        max_errors=args.max_errors,
        max_concurrency=args.concurrency,
        outcome_reward=args.outcome_reward,
        evaluation_type=args.evaluation_type,
        judge_retries=args.judge_retries,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        judge_max_tokens=args.judge_max_tokens,
        max_new_tokens=args.max_new_tokens,
        max_input_tokens=args.max_input_tokens,
        enable_thinking=thinking,
        thinking_roles=thinking_roles,
        holidays=args.holidays,
        shuffle_search=args.shuffle_search,
        context_length=context_length,
        seed=args.seed,
        prices=prices,
    )
    runner = Runner(config, specs["agent"], specs["user"], specs["judge"], tasks=tasks, retry_failed=args.retry_failed)
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    entry = {
        "command": "vitabench2 " + " ".join(redact(argv)),
        "commit": git_commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        summary = runner.run()
    except KeyboardInterrupt:
        append_run_info(out, {**entry, "outcome": "interrupted"})
        raise
    append_run_info(out, {**entry, "outcome": "finished", "num_records": summary["num_records"]})
    m = summary["metrics"]
    k = m.get("k")
    keys = (f"avg@{k}", f"pass@{k}", f"pass^{k}", "avg_proactive", "avg_personalization", "num_units")
    report = {key: m.get(key) for key in keys} | {
        "judge_failures": summary["judge_failures"],
        "backend_errors": summary["backend_errors"],
        "terminations": summary["terminations"],
        "cost": {k: v for k, v in summary["cost"].items() if k.endswith("cost")},
    }
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    if args.csv:
        append_csv_row(Path(args.csv), summary_row(config, summary, entry["started"]))


def summary_row(config, summary: dict, started: str) -> dict:
    """One run as a CSV row (official `csv_utils.create_run_summary`): settings, metrics, failures, terminations,
    tokens per role of this invocation."""
    m = summary["metrics"]
    row = {
        "started": started,
        "output": config.output,
        "agent": config.agent,
        "user": config.user,
        "judge": config.judge,
        "memory": config.memory_name,
        "evaluation_type": config.evaluation_type,
        "num_trials": config.num_trials,
        "num_records": summary["num_records"],
        "num_units": m.get("num_units"),
    }
    row |= {k: v for k, v in m.items() if k.startswith(("avg@", "pass@", "pass^"))}
    row |= {"avg_proactive": m.get("avg_proactive"), "avg_personalization": m.get("avg_personalization")}
    row |= {"judge_failures": summary["judge_failures"], "backend_errors": summary["backend_errors"]}
    row |= {f"termination_{k}": v for k, v in summary["terminations"].items()}
    row |= {k: v for k, v in summary["cost"].items() if k.endswith("cost")}  # official total_agent_cost, ...
    for role, usage in summary["usage_this_session"].items():
        row |= {
            f"{role}_prompt_tokens": usage["prompt_tokens"],
            f"{role}_completion_tokens": usage["completion_tokens"],
        }
    return row


def append_csv_row(path: Path, row: dict) -> None:
    """Append `row`; when it brings new columns the file is rewritten with their union (old rows get blanks)."""
    import csv

    rows, columns = [], []
    if path.exists():
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows, columns = list(reader), list(reader.fieldnames or [])
    columns += [c for c in row if c not in columns]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows([*rows, row])


def cmd_eval(args) -> None:
    """`vitabench2 eval`: the config's `run` options, the run (resumable like any run), then `results.json` with the
    headline metrics, failures, cost and the resolved config (written with the commit and time)."""
    from agentrl_shared.config import load_config, to_dict
    from agentrl_shared.evaluation import write_results

    from .config import EvalConfig

    cfg = load_config(args.config, args.overrides, {"run": EvalConfig}, "vitabench2")
    out = Path(args.output) / f"{Path(cfg['_source']).stem}_{args.method}"
    argv = ["run", *cfg["run"].run_args(), "--output", str(out)]
    logger.info("vitabench2 %s", " ".join(redact(argv)))
    start = time.perf_counter()
    main(argv)
    summary = json.loads((out / "summary.json").read_text())
    m = summary["metrics"]
    payload = {
        "method": args.method,
        "model": cfg["run"].agent,
        "memory": summary["memory"],
        "seed": cfg["run"].seed,
        "eval_seconds": round(time.perf_counter() - start, 3),
        "final": {k: v for k, v in m.items() if not isinstance(v, dict)},
        "judge_failures": summary["judge_failures"],
        "backend_errors": summary["backend_errors"],
        "terminations": summary["terminations"],
        "cost": summary["cost"],
        "run_folder": str(out),
        "command": "vitabench2 " + " ".join(redact(argv)),
        "config": to_dict(cfg),
    }
    write_results(out / "results.json", payload)


def cmd_reproduce(args) -> None:
    """The offline sample plan: one run folder per memory under --output (commands recorded in each run_info)."""
    for memory in SAMPLE_MEMORIES:
        argv = [
            "run",
            *SAMPLE_ARGS,
            "--memory-type",
            memory,
            "--output",
            str(Path(args.output) / f"sample_smollm2_{memory}"),
        ]
        logger.info("vitabench2 %s", " ".join(argv))
        main(argv)


def cmd_judge(args) -> None:
    from .backends import build_backend
    from .judge import SlidingWindowJudge
    from .runner import rejudge_run

    if args.judge.startswith("transformers:"):
        from agentrl_shared.offline import set_offline_env

        set_offline_env()
    backend = build_backend(
        args.judge,
        api_key=args.judge_api_key or os.environ.get("OPENAI_API_KEY"),
        max_tokens=args.judge_max_tokens,
        timeout_s=args.timeout,
    )
    judge = SlidingWindowJudge(
        backend,
        max_retries=args.judge_retries,
        outcome_reward=args.outcome_reward,
        evaluation_type=args.evaluation_type,
    )
    config = json.loads((Path(args.run_dir) / "config.json").read_text())
    tasks = load_task_list(config["tasks"], config["language"])  # as the run loaded them (hf: specs included)
    summary = rejudge_run(Path(args.run_dir), Path(args.output), judge, args.judge, tasks=tasks)
    sys.stdout.write(json.dumps({k: v for k, v in summary.items() if k != "metrics"} | summary["metrics"], indent=1))
    sys.stdout.write("\n")


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
        lines = [
            f"=== user {r['user_id']} | subtask {r['subtask_id']} (index {r['task_index']}, {r['domain']}, "
            f"skills {r['skill_tested']}) | trial {r['trial']} | reward {r['reward']} | {r['termination']}"
        ]
        for m in r["messages"]:
            text = (m.get("content") or "").strip()
            if m["role"] == "system":
                text = text[:300] + (" ..." if len(text) > 300 else "")
            calls = " ".join(
                f"<call {c['name']} {json.dumps(c['arguments'], ensure_ascii=False)}>"
                for c in m.get("tool_calls") or []
            )
            lines.append(f"[{m['role']}] {text} {calls}".rstrip())
        lines.append(
            f"rubrics: {r.get('rubric_states')} judge_failed={r.get('judge_failed')} {r.get('failure_reason', '')}"
        )
        lines += [f"backend error: {e}" for e in r.get("backend_error", [])] + [""]
        sys.stdout.write("\n".join(lines) + "\n")
    if not shown:
        sys.stdout.write(f"No records match in {args.run_dir}\n")


def cmd_report(args) -> None:
    from .report import load_run, plot, render, update_readme

    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    run_dirs = [Path(d) for d in args.run_dirs]
    for d in run_dirs:  # committed results change only here: copy the run's files into the results folder
        load_run(d)  # a clear error if it is not a run folder
        target = results / d.name
        if target.resolve() != d.resolve():
            target.mkdir(exist_ok=True)
            for name in RUN_FILES:
                if (d / name).exists():
                    shutil.copy2(d / name, target / name)
    if not run_dirs:
        run_dirs = sorted(p.parent for p in results.glob("*/config.json"))
        if not run_dirs:
            raise FileNotFoundError(f"No run folders in {results}; pass run folders written by `vitabench2 run`")
    runs = []
    for d in run_dirs:
        run = load_run(results / d.name)
        info = results / d.name / "run_info.json"
        if info.exists():
            run["config"].update({k: v for k, v in json.loads(info.read_text()).items() if k != "history"})
        runs.append(run)
    figures = plot(runs, results)
    base = Path(args.readme).parent if args.readme else results
    rel = [
        str(p.resolve().relative_to(base.resolve())) if p.resolve().is_relative_to(base.resolve()) else str(p)
        for p in figures
    ]
    section = render(runs, rel)
    (results / "report.md").write_text(section + "\n")
    sys.stdout.write(section + "\n")
    if args.readme:
        update_readme(Path(args.readme), section)


def cmd_rag_cache(args) -> None:
    from .memory import write_rag_cache

    n = write_rag_cache(load_task_list(args.tasks, args.language), args.output, embedder=args.embedder)
    logger.info("wrote %d cache files to %s", n, args.output)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["eval"]:  # options and key=value overrides in any order, as in the other packages (argparse
        # cannot intermix through subparsers)
        ev = argparse.ArgumentParser(prog="vitabench2 eval", description=EVAL_HELP)
        add_eval_arguments(ev)
        args = ev.parse_intermixed_args(argv[1:])
        args.command, args.verbose = "eval", False
    else:
        args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    commands = {
        "run": lambda: cmd_run(args, argv),
        "eval": lambda: cmd_eval(args),
        "reproduce": lambda: cmd_reproduce(args),
        "report": lambda: cmd_report(args),
        "view": lambda: cmd_view(args),
        "rag-cache": lambda: cmd_rag_cache(args),
        "judge": lambda: cmd_judge(args),
    }
    commands[args.command]()


def exit_interrupted() -> None:
    """After a clean stop: ignore further Ctrl-C while exiting with status 130."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr.write("vitabench2: interrupted; finished subtasks are saved, rerun the same command to resume\n")
    sys.exit(130)


def entry_point() -> None:
    """Console script: configuration and data errors as one line (exit 2), Ctrl-C as a clean stop (exit 130)."""
    try:
        main()
    except KeyboardInterrupt:
        exit_interrupted()
    except (ValueError, FileNotFoundError, ImportError) as err:
        sys.stderr.write(f"vitabench2: error: {err}\n")
        sys.exit(2)


if __name__ == "__main__":
    entry_point()
