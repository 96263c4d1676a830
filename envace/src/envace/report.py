"""`envace report`: the README results tables, generated from result files only.

`envace report --runs runs/envace` first copies every finished run (its `results.json`, curve and config) from the
runs folder into `<README folder>/results/<scale>/<method>/<run>/`; the tables are then rebuilt from those files only.
Paper numbers come from `<README folder>/paper_results.json` (which cites the project-page tables). A row with no
result file says `not run`.
"""

import json
import logging
from pathlib import Path

from agentrl_shared.report import collect_runs, load_runs, markdown_table, mean_std, replace_block


logger = logging.getLogger(__name__)
RUN_FILES = ("results.json", "eval_curve.jsonl", "config.json")
CPU_METHODS = {
    "untrained": "untrained (SmolLM2-135M-Instruct)",
    "caller_only_real": "caller-only, real tools",
    "envace": "EnvACE (shared caller + rehearsal)",
    "tts_parallel_untrained": "parallel rehearsal N=2, base policy",
    "tts_parallel_envace": "parallel rehearsal N=2, EnvACE policy",
    "tts_sequential_untrained": "sequential rehearsal N=2, base policy",
    "tts_sequential_envace": "sequential rehearsal N=2, EnvACE policy",
}
HEADER = ["Tasks", "Method", "Metric", "Paper", "Ours (mean +- std, n seeds)", "commit"]


def cpu_table(runs: dict[str, list[dict]]) -> str:
    rows = []
    for method, label in CPU_METHODS.items():
        payloads = runs.get(method, [])
        commits = ", ".join(sorted({p["commit"] for p in payloads})) or "-"
        for metric, key in (("episode reward R %", "reward_mean"), ("success (R = 1) %", "success_mean")):
            values = [p["final"][key] for p in payloads]
            rows.append(["generated tool tasks (eval panel, real tools)", label, metric, "n/a (our tasks)",
                         mean_std(values), commits])  # fmt: skip
    return markdown_table(HEADER, rows)


def paper_table(paper: dict) -> str:
    rows = []
    for table in ("main", "tts"):
        cols = paper[table]["columns"]
        for method, values in paper[table]["rows"].items():
            for col, value in zip(cols, values, strict=True):
                rows.append([col, method, "score", f"{value:.2f}", "not run", "-"])
    return markdown_table(HEADER, rows)


def report(readme: Path, runs: Path | None = None) -> None:
    """Rebuild `readme`'s result blocks from `<readme folder>/results`, after copying finished runs from `runs` there
    when given."""
    results = readme.parent / "results"
    if runs is not None:
        logger.info(f"report: copied {collect_runs(runs, results, RUN_FILES)} finished runs from {runs} to {results}")
    text = readme.read_text()
    text = replace_block(text, "results-cpu", cpu_table(load_runs(results, "cpu")))
    text = replace_block(
        text, "results-paper", paper_table(json.loads((readme.parent / "paper_results.json").read_text()))
    )
    readme.write_text(text)
    logger.info(f"report: wrote {readme}")
