"""Report: memory-comparison table, decline of the score over the temporal task index, the paper's leaderboard, and
the README section between markers, all generated from run folders (never typed by hand).

VitaBench 2.0 (arXiv 2605.27141): leaderboard (Avg@4 / Pass@4 / Pass^4 per memory setting, official README) and Fig. 5 decline
over task index; Fig. 6 proactive vs personalization).
"""

import json
from pathlib import Path

from agentrl_shared.report import replace_block

from .metrics import compute_metrics
from .runner import read_records


MEMORY_LABELS = {
    "full_context": "Full Context",
    "rewrite": "Agentic Memory",
    "rag": "RAG Memory",
    "null": "No memory",
    "groundtruth": "Ground truth (oracle)",
}


def paper_leaderboard() -> dict:
    """The paper's leaderboard as checked in (`data/paper_leaderboard.json`, with its source)."""
    return json.loads((Path(__file__).parent / "data" / "paper_leaderboard.json").read_text())


def load_run(run_dir: str | Path) -> dict:
    """Config, records and metrics of one run folder (`config.json` + `results.jsonl`)."""
    run_dir = Path(run_dir)
    config_path = run_dir / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(
            f"{run_dir} is not a run folder (no config.json); pass the --output of `vitabench2 run`"
        )
    config = json.loads(config_path.read_text())
    records = read_records(run_dir / "results.jsonl")
    metrics = compute_metrics(records, config["num_trials"])
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    return {"dir": str(run_dir), "config": config, "records": records, "metrics": metrics, "summary": summary}


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def paper_row(config: dict) -> tuple[str, list[float]] | None:
    """The paper's (Avg@4, Pass@4, Pass^4) for a run's agent and memory: the leaderboard row whose model name equals
    the agent's model (the last path component of `openai:MODEL@URL` / `transformers:PATH`, ignoring case and
    punctuation), in the thinking table when the run sent `enable_thinking` true, else the non-thinking one; None
    when the model or the memory (only Full Context, Agentic and RAG memory are on the leaderboard) is not there."""
    memory = config.get("memory_type")
    if config.get("memory_class") or memory not in ("full_context", "rewrite", "rag", "rag_cache"):
        return None
    model = _norm(config["agent"].partition(":")[2].partition("@")[0].rstrip("/").rsplit("/", 1)[-1])
    kind = "thinking" if config.get("enable_thinking") else "non-thinking"
    for row in paper_leaderboard()["tables"][kind]:
        if _norm(row["model"]) == model:
            return f"{row['model']} ({kind})", row["rag" if memory == "rag_cache" else memory]
    return None


def memory_table(runs: list[dict]) -> str:
    """Markdown table, one row per run: model, memory, trials, Avg@k, Pass@k, Pass^k, the paper's Avg@4 / Pass@4 /
    Pass^4 for the same model and memory ([`paper_row`]; "–" when the paper has none), skill split, judge failures,
    subtasks with an endpoint failure (`backend_error`: a run of those reads as low scores otherwise), commit."""
    lines = [
        "| Agent | Memory | Subtasks x trials | Avg@k | Pass@k | Pass^k | Paper Avg@4 / Pass@4 / Pass^4 | Proactive | Personalization | Judge failures | Backend errors | Command | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        c, m = run["config"], run["metrics"]
        k = m.get("k", c["num_trials"])
        memory = c.get("memory_class") or c.get("memory_type")
        failures = sum(1 for r in run["records"] if r.get("judge_failed"))
        backend = sum(1 for r in run["records"] if r.get("backend_error"))
        paper = paper_row(c)
        paper_cell = "–" if paper is None else " / ".join(_fmt(v) for v in paper[1]) + f" ({paper[0]})"
        lines.append(
            f"| {c['agent']} | {MEMORY_LABELS.get(memory, memory)} | {m.get('num_units', 0)} x {c['num_trials']} | "
            f"{_fmt(m.get(f'avg@{k}'))} | {_fmt(m.get(f'pass@{k}'))} | {_fmt(m.get(f'pass^{k}'))} | {paper_cell} | "
            f"{_fmt(m.get('avg_proactive'))} | {_fmt(m.get('avg_personalization'))} | {failures}/{len(run['records'])} | "
            f"{backend}/{len(run['records'])} | "
            f"`{c.get('command', '')}` | {c.get('commit', '')} |"
        )
    return "\n".join(lines)


def paper_table(kind: str = "non-thinking") -> str:
    board = paper_leaderboard()
    lines = [
        "| Model | FC Avg@4 | FC Pass@4 | FC Pass^4 | AgM Avg@4 | AgM Pass@4 | AgM Pass^4 | RAG Avg@4 | RAG Pass@4 | RAG Pass^4 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in board["tables"][kind]:
        vals = row["full_context"] + row["rewrite"] + row["rag"]
        lines.append(f"| {row['model']} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    return "\n".join(lines)


def index_table(runs: list[dict]) -> str:
    """Mean reward by temporal task index (0 = a user's first subtask), one column per run."""
    indices = sorted({int(i) for run in runs for i in run["metrics"].get("avg_by_task_index", {})})
    head = (
        "| Task index | "
        + " | ".join(run["config"].get("memory_class") or run["config"]["memory_type"] for run in runs)
        + " |"
    )
    lines = [head, "|---|" + "---|" * len(runs)]
    for i in indices:
        cells = [_fmt(run["metrics"].get("avg_by_task_index", {}).get(i)) for run in runs]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: list[dict], out_dir: Path) -> list[Path]:
    """`memory_comparison.png` (Avg/Pass@k/Pass^k per run) and `task_index_decline.png` (Fig. 5 analogue)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [run["config"].get("memory_class") or run["config"]["memory_type"] for run in runs]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.25
    for j, metric in enumerate(("avg", "pass@", "pass^")):
        vals = []
        for run in runs:
            k = run["metrics"].get("k", 1)
            key = f"avg@{k}" if metric == "avg" else f"{metric}{k}"
            vals.append(run["metrics"].get(key) or 0.0)
        ax.bar(
            [i + (j - 1) * width for i in range(len(runs))],
            vals,
            width,
            label=metric.rstrip("@^") if metric != "avg" else "Avg@k",
        )
    ax.set_xticks(range(len(runs)), labels)
    ax.set_ylabel("score")
    ax.set_ylim(0, 1)
    ax.legend(["Avg@k", "Pass@k", "Pass^k"])
    ax.set_title("Memory comparison (subtask level)")
    fig.tight_layout()
    p1 = out_dir / "memory_comparison.png"
    fig.savefig(p1, dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run, label in zip(runs, labels):
        by = {int(i): v for i, v in run["metrics"].get("avg_by_task_index", {}).items()}
        xs = sorted(by)
        ax.plot(xs, [by[x] or 0.0 for x in xs], marker="o", label=label)
    ax.set_xlabel("temporal task index")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax.set_title("Score over the task sequence")
    fig.tight_layout()
    p2 = out_dir / "task_index_decline.png"
    fig.savefig(p2, dpi=100)
    plt.close(fig)
    return [p1, p2]


def render(runs: list[dict], figure_paths: list[str]) -> str:
    """The generated README section."""
    board = paper_leaderboard()
    parts = [
        "### Ours (generated by `vitabench2 report` from result files)",
        "",
        "The paper column holds the leaderboard row of the same agent model and memory (`data/paper_leaderboard.json`),",
        "where the paper has one.",
        "",
        memory_table(runs),
        "",
        "Mean reward by temporal task index:",
        "",
        index_table(runs),
        "",
    ]
    parts += [f"![{Path(p).stem}]({p})" for p in figure_paths]
    parts += ["", f"### Paper ({board['source']})", ""]
    for kind in ("non-thinking", "thinking"):
        parts += [f"{kind.capitalize()} models:", "", paper_table(kind), ""]
    return "\n".join(parts).rstrip()


def update_readme(readme: Path, section: str) -> None:
    """Replace the text between the report markers (the markers must exist)."""
    text = readme.read_text(encoding="utf-8")
    readme.write_text(replace_block(text, "vitabench2:report", section), encoding="utf-8")
