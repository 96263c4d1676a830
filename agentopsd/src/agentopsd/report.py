"""`agentopsd report`: the README results table and learning curves, generated from result files only.

`agentopsd report --runs runs/agentopsd` first copies every finished run (results, curve, episodes, config) from the
runs folder into `<README folder>/results/<scale>/<method>/<run>/`; the tables are then rebuilt from those files only.
Paper numbers come from `<README folder>/paper_results.json` (which cites their source). A row with no result file
says `not run`.

`--compare runs/compare/textrooms` also files the output of `make compare ENV=textrooms` (`compare.md`, `compare.json`,
`learning_curves.png`: GRPO, SDAR, AgentOPSD, RLSD, Skill-SD and GiGPO on one model, panel and budget) into
`<README folder>/results/compare/<env>/` and puts its table into the README's `compare-<env>` block.
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


METHOD_NAMES = {"untrained": "Vanilla", "grpo": "GRPO", "agentopsd": "AgentOPSD"}
HEADER = ["Env", "Model", "Method", "Metric", "Paper", "Ours (mean +- std, n seeds)", "commit"]
PAPER_ENVS = {"alfworld": "ALFWorld", "webshop": "WebShop", "search_qa": "Search-QA"}
PAPER_MODELS = ("Qwen2.5-3B-Instruct", "Qwen2.5-7B-Instruct")


# what the belief did during training (`AgentOPSDTrainer._credit_accuracy`, `_log_credit`; `rollout.py`)
TRAINING_METRICS = [
    ("all-fail groups %", ("env/all_fail_group_ratio",), 100),
    ("credit accuracy %: run's prior / 0.5 prior / chance",
     ("agentopsd/credit_accuracy", "agentopsd/credit_accuracy_prior_0.5", "agentopsd/credit_chance"), 100),
    ("V_0 saturated %", ("agentopsd/v0_saturated_ratio",), 100),
    ("multiplier min / max", ("agentopsd/multiplier_min", "agentopsd/multiplier_max"), 1),
]  # fmt: skip


def paper_table(runs: dict[str, list[dict]], paper: dict) -> str:
    rows = []
    for model in PAPER_MODELS:
        for env, env_name in PAPER_ENVS.items():
            for method in ("grpo", "agentopsd"):
                cited = paper["results"].get(model, {}).get(env, {}).get(METHOD_NAMES[method])
                mine = [p for p in runs.get(method, []) if p["env"] == env and p["model"].endswith(model)]
                values = [paper_metric(env, p["final"]) for p in mine]
                commits = ", ".join(sorted({p["commit"] for p in mine})) or "-"
                rows.append([env_name, model, METHOD_NAMES[method], paper["metrics"][env],
                             "n/a" if cited is None else f"{cited:.1f}", mean_std(values), commits])  # fmt: skip
                if env == "webshop":  # the WebShop score (mean task score x 100), beside the success rate
                    scores = [p["final"]["score_mean"] for p in mine if "score_mean" in p["final"]]
                    rows.append([env_name, model, METHOD_NAMES[method], paper["metrics"]["webshop_score"], "n/a",
                                 mean_std(scores), commits])  # fmt: skip
    return markdown_table(HEADER, rows)


def bench_line(path: Path) -> str:
    """The step-time ratio from `bench-results.json` (written by `python -m agentopsd.bench`), or `not run`."""
    data = json.loads(path.read_text()) if path.exists() else {}
    key = "agentopsd/step_time_ratio_agentopsd_over_grpo"
    if key not in data:
        return "not run"
    note = f"; {data['agentopsd/note']}" if data.get("agentopsd/note") else ""
    return (f"AgentOPSD / GRPO step time = {data[key]:.2f} (GRPO {data['agentopsd/grpo_step_time_s']:.2f} s, AgentOPSD "
            f"{data['agentopsd/agentopsd_step_time_s']:.2f} s; {data['agentopsd/config']['step_time']}; commit "
            f"{data['agentopsd/commit']}{note})")  # fmt: skip


def report(readme: Path, runs: Path | None = None, compares: list[Path] = ()) -> None:
    """Rebuild `readme`'s result blocks (and the CPU learning curves) from `<readme folder>/results`, after copying
    finished runs from `runs` (and the `make compare` folders `compares`) there when given; the bench line reads
    `bench-results.json` next to the package."""
    results = readme.parent / "results"
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
    paper = json.loads((readme.parent / "paper_results.json").read_text())
    text = replace_block(text, "results-paper", paper_table(load_runs(results, "paper"), paper))
    text = replace_block(text, "bench", bench_line(readme.resolve().parent.parent / "bench-results.json"))
    readme.write_text(text)
    if cpu:
        success_curves(cpu, METHOD_NAMES, results / "cpu" / "learning_curves.png", CPU_TITLE)
    logger.info(f"report: wrote {readme}")
