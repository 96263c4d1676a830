"""`vad report`: file finished runs' results, then rebuild the README results table and the learning curves.

Every paper row (`paper_results.json`: Tab. 1-4 keyed by benchmark average, model and row) shows our mean +- std over
seeds from the result files whose model and row match, or "not run"; a cell graded without the LLM judge says
"rule-scored (no judge)" (the paper's numbers are judge-graded). Rows we ran that the paper has no number for
(the CPU mechanics check) follow, with the training signal of the same runs. The CPU check's rows are also paired,
item by item on its x0 panel, to the direct target (`paired-cpu`).
"""

import importlib.resources
import json
import logging
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

from agentrl_shared.report import markdown_table, paired_markdown, plot_curves, replace_block

from .benchmarks import HELD_OUT, MAIN


logger = logging.getLogger(__name__)

# the row the CPU check's (`vad reproduce --scale cpu`) other rows are paired to: the direct target with the same
# divergence (paper Tab. 2's `direct`, in forward KL as the Tab. 4 row `vad_fkl`)
CPU_BASELINE = "direct_fkl"


def paper_rows() -> list[dict]:
    return json.loads((importlib.resources.files("vad") / "paper_results.json").read_text())["rows"]


def file_runs(runs: Path, results: Path) -> int:
    """Copy each run's `results.json` under `runs` to `results/<config>/<row>_seed<s>.json`; returns how many."""
    count = 0
    for path in sorted(runs.rglob("results.json")):
        rec = json.loads(path.read_text())
        dest = results / rec["config"] / f"{rec['row']}_seed{rec['seed']}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
        count += 1
    return count


def item_outcomes(benchmark: str) -> Callable[[Path], dict[tuple, float]]:
    """The per-item outcome of a filed result file on `benchmark`, for `paired_markdown`: 100 where the item (uid) was
    graded correct, 0 where not (`details[benchmark]["items"]`); {} for a file written before items were kept."""

    def outcomes(path: Path) -> dict[tuple, float]:
        items = json.loads(path.read_text())["details"].get(benchmark, {}).get("items", {})
        return {(uid,): 100.0 * correct for uid, correct in items.items()}

    return outcomes


def paired_cpu(results: Path) -> str:
    """The CPU check's rows (its config's `data.rows`) paired to `CPU_BASELINE` per item of its x0 panel (the
    config's task; x+ and x- are diagnostics) and training seed (`paired_markdown`)."""
    from .cli import SCALE_CONFIGS, load

    config = SCALE_CONFIGS["cpu"]
    data = load(config, [])["data"]
    runs = {row: sorted((results / config).glob(f"{row}_seed*.json")) for row in data.rows}
    return paired_markdown(runs, CPU_BASELINE, item_outcomes(data.name), "x0 accuracy")


def _cell(values: list[float]) -> str:
    if not values:
        return "not run"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} +- {std:.2f} (n={len(values)})"


def _grading(recs: list[dict], benchmark: str) -> str:
    """The grading note of one cell: "rule-scored (no judge)" when any run graded without a judge (answers the rules
    reject count as wrong: a lower bound of the paper's judge-graded number), and how many items the judge scored
    "No" after every request failed."""
    members = {"Avg6": MAIN, "Avg4": HELD_OUT}.get(benchmark, (benchmark,))
    note = " rule-scored (no judge)" if any(r.get("judge") is None for r in recs) else ""
    failed = sum(r["details"].get(b, {}).get("graded_by", {}).get("judge_failed", 0) for r in recs for b in members)
    return note + (f" (judge failed on {failed} items: scored No)" if failed else "")


def _signal(recs: list[dict], key: str) -> str:
    """First -> last logged value of `key` in the runs' training logs (mean over seeds)."""
    firsts, lasts = [], []
    for rec in recs:
        values = [h[key] for h in rec.get("log_history", []) if key in h]
        if values:
            firsts.append(values[0])
            lasts.append(values[-1])
    return f"{statistics.fmean(firsts):.3g} -> {statistics.fmean(lasts):.3g}" if firsts else "-"


def report(readme: Path, runs: Path | None = None) -> str:
    """File the finished runs under `runs` (if given) into `<README folder>/results`, rebuild the README blocks
    `results` and `paired-cpu` and `results/<config>/curves.png`."""
    results = readme.parent / "results"
    filed = file_runs(runs, results) if runs is not None else 0
    # only the filed run records (`<config>/<row>_seed<s>.json`; other folders such as gpu_check/ hold other files)
    records = [json.loads(p.read_text()) for p in sorted(results.glob("*/*_seed*.json"))]
    logger.info("filed %d run(s); %d result file(s) under %s", filed, len(records), results)
    header = ["Benchmark", "Model", "Row", "Paper", "Ours (mean +- std, n seeds)", "commit"]
    rows, used = [], set()
    for paper in paper_rows():
        match = [r for r in records if r["model"] == paper["model"] and r["row"] == paper["row"]]
        scored = [r for r in match if paper["benchmark"] in r["scores"]]
        values = [r["scores"][paper["benchmark"]] for r in scored]
        used.update(id(r) for r in match)
        cell = _cell(values)
        if scored:
            cell += _grading(scored, paper["benchmark"])
        commits = ", ".join(sorted({r["commit"] for r in match})) or "-"
        rows.append([paper["benchmark"], paper["model"], paper["row"], f"{paper['value']} ({paper['source']})", cell,
                     commits])  # fmt: skip
    table = markdown_table(header, rows)
    extra: dict[tuple[str, str, str], list[dict]] = {}
    for rec in records:
        if id(rec) not in used:
            extra.setdefault((rec["config"], rec["model"], rec["row"]), []).append(rec)
    if extra:
        lines = []
        for (config, model, row), recs in sorted(extra.items()):
            for bench in sorted({b for r in recs for b in r["scores"]}):
                values = [r["scores"][bench] for r in recs if bench in r["scores"]]
                lines.append([bench, f"{model} ({config})", row, _cell(values), _signal(recs, "vad/vis_loss"),
                              _signal(recs, "reward"), ", ".join(sorted({r["commit"] for r in recs}))])  # fmt: skip
        table += "\n\nRuns without a paper number (accuracy in %; training signal = first -> last logged value):\n\n"
        table += markdown_table(["Benchmark", "Model (config)", "Row", "Ours (mean +- std, n seeds)",
                                 "train D(q, p_S)", "train accuracy", "commit"], lines)  # fmt: skip
        for config in sorted({k[0] for k in extra}):
            series = {}
            for (cfg, _, row), recs in extra.items():
                if cfg == config:
                    curves = [[(h["step"], h["vad/vis_loss"]) for h in r.get("log_history", []) if "vad/vis_loss" in h]
                              for r in recs]  # fmt: skip
                    if any(curves):
                        series[row] = [c for c in curves if c]
            if series:
                plot_curves(series, results / config / "curves.png", "optimizer step", "D(q, p_S) (token mean)",
                            f"vad {config}: distillation loss")  # fmt: skip
    text = replace_block(readme.read_text(), "results", table)
    readme.write_text(replace_block(text, "paired-cpu", paired_cpu(results)))
    return table
