"""`skillrise report`: the README results tables and learning curves, generated from result files only.

`skillrise report --runs runs/skillrise` first copies every finished run (its `results.json`, curve and config) from
the runs folder into `<README folder>/results/<scale>/<method>/<run>/`; the tables are then rebuilt from those files
only. The paper publishes no numbers (its results are a figure only), so the Paper column says so. A row with no
result file says `not run`. The mechanism check's table is built from `results/cpu/mechanisms/mechanisms.json`.
"""

import json
import logging
import statistics
from pathlib import Path

from agentrl_shared.mechanisms import file_mechanisms, load_mechanisms
from agentrl_shared.report import (
    collect_runs,
    final_episodes,
    load_runs,
    markdown_table,
    mean_std,
    paired_table,
    plot_curves,
    replace_block,
)

from .mechanisms import table as mechanisms_table


logger = logging.getLogger(__name__)
# the per-trial records of a training run's validations (`eval_trials.jsonl`) or of an evaluation
# (`trials_<mode>.jsonl`): the outcomes `repeat_outcomes` pairs
RUN_FILES = ("results.json", "eval_curve.jsonl", "config.json", "eval_trials.jsonl", "trials_repeat.jsonl",
             "trials_cross.jsonl")  # fmt: skip
METHOD_NAMES = {"untrained": "Untrained (skill carry)", "grpo": "GRPO (group 24 matched; 12 at CPU scale)",
                "gigpo": "GiGPO (group 24 matched; 12 at CPU scale)", "no_carry": "No carry",
                "reflect": "No-carry training, LaMer reflect carry at validation", "skillrise": "SkillRise"}  # fmt: skip
PAPER = "n/a (figure only)"
HEADER = ["Env", "Model", "Method", "Metric", "Paper", "Ours (mean +- std, n seeds)", "commit"]


def metric_rows(env: str, model: str, runs: dict[str, list[dict]], K: int) -> list[list[str]]:
    """Repeat-mode cumulative pass@1..K and cross-mode per-position pass@1, one row per method and metric; WebShop and
    ScienceWorld also the task score (official `task_score[pos]`). Per-task-type rates stay in the result files."""
    rows = []
    metrics = [("repeat", f"pass@{k}", f"repeat pass@{k} %") for k in range(1, K + 1)]
    metrics += [("cross", f"success_pos{p}", f"cross pass@1, task {p + 1} %") for p in range(K)]
    if env.lower() in ("webshop", "scienceworld"):
        metrics += [("repeat", f"task_score@{k}", f"repeat task score@{k} %") for k in range(1, K + 1)]
        metrics += [("cross", f"task_score_pos{p}", f"cross task score, task {p + 1} %") for p in range(K)]
    for method, name in METHOD_NAMES.items():
        payloads = runs.get(method, [])
        commits = ", ".join(sorted({p["commit"] for p in payloads})) or "-"
        for mode, key, label in metrics:
            values = [p["final"][mode][key] for p in payloads if key in p["final"].get(mode, {})]
            rows.append([env, model, name, label, PAPER, mean_std(values), commits])
    return rows


def repeat_outcomes(run: Path) -> dict[tuple, float]:
    """Repeat-mode pass@1 per panel instance (a trial's task ids and evaluation seed) of a run's final evaluation, for
    `paired_table`: 100 when the first attempt won, 0 when it lost or the trial failed. From `eval_trials.jsonl` (a
    training run: the last validation's repeat records), else `trials_repeat.jsonl` (an evaluation); {} when the run
    kept neither (runs filed before the records were kept)."""
    records = [r for r in final_episodes(run, "eval_trials.jsonl", "trials_repeat.jsonl")
               if r.get("mode", "repeat") == "repeat"]  # fmt: skip
    return {(tuple(r["task_ids"]), r["seed"]): 100.0 * bool(r["won"][0] and not r["failed"]) for r in records}


def curves(runs: dict[str, list[dict]], path: Path, title: str) -> None:
    series = {
        METHOD_NAMES[m]: [[(pt["rollouts"], 100 * pt["repeat"]["pass@1"]) for pt in p["curve"] if "repeat" in pt]
                          for p in payloads]
        for m, payloads in runs.items()
        if m in METHOD_NAMES and any(p["curve"] for p in payloads)
    }  # fmt: skip
    # the warm-started start point (evaluated with the skill carry): a reference level beside the trained methods
    untrained = [100 * p["final"]["repeat"]["pass@1"] for p in runs.get("untrained", [])]
    levels = {f"{METHOD_NAMES['untrained']} (n={len(untrained)})": statistics.fmean(untrained)} if untrained else None
    plot_curves(series, path, "rollouts", "held-out repeat-mode pass@1 %", title, levels)


def warm_start_line(payloads: list[dict]) -> str:
    """The CPU curation warm start's figures per seed (README deviation 10; every CPU method starts from it)."""
    if not payloads:
        return "Curation warm start: not run."
    runs = "; ".join(f"seed {p['seed']}: {p['rows']['play']} play + {p['rows']['curate']} curate rows, "
                     f"{p['tokens']} tokens, loss {p['losses'][0]:.3f} -> {p['losses'][-1]:.3f} over "
                     f"{len(p['losses'])} steps, {p['train_seconds']:.0f} s (commit {p['commit']})"
                     for p in payloads)  # fmt: skip
    return f"Curation warm start (deviation 10; every row above starts from it): {runs}."


def times_line(runs: dict[str, list[dict]]) -> str:
    """Each CPU run's wall time from its result files, mean over seeds (training: the rollouts, `train_seconds`; the
    untrained row: its evaluation, `eval_seconds`)."""
    parts = []
    for method, name in METHOD_NAMES.items():
        key = "eval_seconds" if method == "untrained" else "train_seconds"
        values = [p[key] for p in runs.get(method, [])]
        if values:
            parts.append(f"{name} {sum(values) / len(values) / 60:.1f} min (n = {len(values)})")
    what = "evaluation of the untrained row, rollouts of a trained one (its final evaluation not included)"
    return f"Time per run, mean over seeds ({what}): {'; '.join(parts)}." if parts else ""


def bench_block(path: Path) -> str:
    """The SkillRise/GRPO cost ratio from `bench-results.json`, or `not run`."""
    data = json.loads(path.read_text()) if path.exists() else {}
    key = "skillrise/cost_per_token_ratio_skillrise_over_grpo"
    if key not in data:
        return "not run"
    rows = [["step time (s)", f"{data['skillrise/grpo_step_time_s']:.2f}", f"{data['skillrise/skillrise_step_time_s']:.2f}"],
            ["generated tokens per step", f"{data['skillrise/grpo_generated_tokens_per_step']:.0f}",
             f"{data['skillrise/skillrise_generated_tokens_per_step']:.0f}"],
            ["cost per generated token, SkillRise / GRPO", "1.00", f"{data[key]:.2f}"]]  # fmt: skip
    return markdown_table(["Comparison", "GRPO", "SkillRise"], rows) + f"\n\ncommit {data['skillrise/commit']}"


def report(readme: Path, runs: Path | None = None) -> None:
    """Rebuild `readme`'s result blocks (and the CPU learning curves) from `<readme folder>/results`, after copying
    finished runs from `runs` there when given (and `<runs>/cpu/mechanisms/mechanisms.json`, `skillrise mechanisms`);
    the bench block reads `bench-results.json` next to the package."""
    results = readme.parent / "results"
    if runs is not None:
        logger.info(f"report: copied {collect_runs(runs, results, RUN_FILES)} finished runs from {runs} to {results}")
        if file_mechanisms(runs, results):
            logger.info(f"report: filed {runs}/cpu/mechanisms in {results}/cpu/mechanisms")
    text = readme.read_text()
    cpu = load_runs(results, "cpu")
    table = markdown_table(HEADER, metric_rows("TextRooms", "SmolLM2-135M-Instruct", cpu, 3))
    notes = "\n\n".join(line for line in (warm_start_line(cpu.get("warmstart", [])), times_line(cpu)) if line)
    text = replace_block(text, "results-cpu", f"{table}\n\n{notes}")
    text = replace_block(
        text, "paired-cpu", paired_table(results, "cpu", METHOD_NAMES, "grpo", repeat_outcomes, "repeat pass@1")
    )
    paper = load_runs(results, "paper")
    rows = []
    for env, model in (("scienceworld", "Qwen3-4B"), ("alfworld", "Qwen3-4B"), ("webshop", "Qwen3-4B")):
        mine = {m: [p for p in ps if p["env"] == env] for m, ps in paper.items()}
        rows += metric_rows(env, model, mine, 3)
    text = replace_block(text, "results-paper", markdown_table(HEADER, rows))
    text = replace_block(text, "mechanisms-cpu", mechanisms_table(load_mechanisms(results)))
    text = replace_block(text, "bench", bench_block(readme.resolve().parent.parent / "bench-results.json"))
    readme.write_text(text)
    if cpu:
        curves(cpu, results / "cpu" / "learning_curves.png", "TextRooms, SmolLM2-135M (CPU scale)")
    logger.info(f"report: wrote {readme}")
