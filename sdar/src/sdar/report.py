"""`sdar report`: the README results table and learning curves, generated from result files only.

`sdar report --runs runs/sdar` first copies every finished run (its `results.json`, curve, episodes and config) from
the runs folder into `<README folder>/results/<scale>/<method>/<run>/`; the tables are then rebuilt from those files
only. Paper numbers come from `<README folder>/paper_results.json` (Table 1 of the paper). A row with no result file
says `not run`. Each paper metric is computed as the paper computes it (`paper_metric`).

`--compare runs/compare/sdar_coef` also files the output of `make compare ENV=sdar_coef` (GRPO, SDAR and SDAR at
larger `sdar_coef`, gated and ungated, on the CPU plan: `compare.md`, `compare.json`, `learning_curves.png`) into
`<README folder>/results/compare/sdar_coef/` and puts its table into the README's `compare-sdar_coef` block; repeat
`--compare` for several plans (`make report PAPER=sdar` passes every one found: sdar_coef, sdar_long).
"""

import json
import logging
import statistics
from pathlib import Path

from agentrl_shared.mechanisms import file_mechanisms, load_mechanisms
from agentrl_shared.report import (
    collect_runs,
    compare_blocks,
    cpu_results_table,
    file_compares,
    horizon_report,
    load_runs,
    markdown_table,
    mean_std,
    paired_table,
    replace_block,
    success_curves,
    training_table,
)

from .mechanisms import table as mechanisms_table


logger = logging.getLogger(__name__)
CPU_TITLE = "TextRooms, SmolLM2-135M (CPU scale)"
RUN_FILES = ("results.json", "eval_curve.jsonl", "episodes.jsonl", "eval_episodes.jsonl", "config.json")
# Table 1's Search-QA sources (the seven `data_source` values of the Search-R1 test set)
SEARCH_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def paper_metric(env: str, final: dict) -> float:
    """The number Table 1 reports, from a results summary (fractions in [0, 1]).

    Search-QA "Avg" is the unweighted mean of the seven per-source exact-match rates (for GRPO-3B:
    (39.3 + 60.6 + 41.1 + 37.4 + 34.6 + 15.4 + 26.4) / 7 = 36.4), not EM pooled over questions. ALFWorld "Avg" is the
    success rate over all evaluated games (pooled), not the mean of the six per-type rates. WebShop "Acc" is the
    success rate.
    """
    if env == "search_qa":
        sources = [s for s in SEARCH_SOURCES if f"{s}_success_rate" in final]
        if not sources:
            raise ValueError("Search-QA results carry no per-source success rates (task_type = data_source).")
        return statistics.fmean(final[f"{s}_success_rate"] for s in sources)
    return final["success_rate_mean"]


METHOD_NAMES = {"untrained": "Vanilla", "grpo": "GRPO", "grpo_opsd": "GRPO+OPSD", "sdar": "SDAR", "opsd": "OPSD"}
PAPER_MODELS = {"qwen2.5-3b": "Qwen2.5-3B-Instruct", "qwen2.5-7b": "Qwen2.5-7B-Instruct", "qwen3-1.7b": "Qwen3-1.7B"}


# what SDAR's term acted on during training (`losses.update_shares`; env/all_fail_group_ratio: `rollout.py`)
TRAINING_METRICS = [
    ("all-fail groups %", ("env/all_fail_group_ratio",), 100),
    ("gate mean, gap > 0 / gap < 0", ("sdar/gate_mean_pos_gap", "sdar/gate_mean_neg_gap"), 1),
    (
        "SDAR share of the update %, micro-batch mean (all / on all-fail groups)",
        ("sdar/update_share", "sdar/update_share_all_fail"),
        100,
    ),
]


def paper_table(runs: dict[str, list[dict]], paper: dict) -> str:
    rows = []
    for model, envs in paper["results"].items():
        for env, methods in envs.items():
            for method in ("GRPO", "SDAR"):
                key = "grpo" if method == "GRPO" else "sdar"
                mine = [p for p in runs.get(key, []) if p["env"] == env and p["model"].endswith(model)]
                values = [paper_metric(env, p["final"]) for p in mine]
                commits = ", ".join(sorted({p["commit"] for p in mine})) or "-"
                rows.append(
                    [env, model, method, paper["metrics"][env], f"{methods[method]:.1f}", mean_std(values), commits]
                )
    return markdown_table(["Env", "Model", "Method", "Metric", "Paper", "Ours (mean +- std, n seeds)", "commit"], rows)


def report(readme: Path, runs: Path | None = None, compares: list[Path] = ()) -> None:
    """Rebuild `readme`'s result blocks (and the CPU learning curves) from `<readme folder>/results`, after copying
    finished runs from `runs` (and the `make compare` folders `compares`) there when given."""
    package = readme.parent
    results = package / "results"
    if runs is not None:
        logger.info(f"report: copied {collect_runs(runs, results, RUN_FILES)} finished runs from {runs} to {results}")
        if file_mechanisms(runs, results):
            logger.info(f"report: filed {runs}/cpu/mechanisms in {results}/cpu/mechanisms")
    for compare, target in zip(compares, file_compares(list(compares), results), strict=True):
        logger.info(f"report: filed {compare} in {target}")
    text = compare_blocks(readme.read_text(), results)
    cpu = load_runs(results, "cpu")
    text = replace_block(text, "results-cpu", cpu_results_table(cpu, METHOD_NAMES, "TextRooms chains"))
    trained = {m: n for m, n in METHOD_NAMES.items() if m != "untrained"}
    text = replace_block(text, "training-cpu", training_table(cpu, trained, TRAINING_METRICS))
    horizon = horizon_report(results, "cpu", METHOD_NAMES, results / "cpu" / "horizon.png")
    text = replace_block(text, "horizon-cpu", horizon)
    text = replace_block(text, "paired-cpu", paired_table(results, "cpu", METHOD_NAMES, "grpo"))
    text = replace_block(text, "mechanisms-cpu", mechanisms_table(load_mechanisms(results)))
    paper = json.loads((package / "paper_results.json").read_text())
    text = replace_block(text, "results-paper", paper_table(load_runs(results, "paper"), paper))
    readme.write_text(text)
    if cpu:
        success_curves(cpu, METHOD_NAMES, results / "cpu" / "learning_curves.png", CPU_TITLE)
    logger.info(f"report: wrote {readme}")
