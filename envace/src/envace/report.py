"""`envace report`: the README results tables, generated from result files only.

`envace report --runs runs/envace` first copies every finished run (its `results.json`, curve and config) from the
runs folder into `<README folder>/results/<scale>/<method>/<run>/`; the tables are then rebuilt from those files only.
Paper numbers come from `<README folder>/paper_results.json` (which cites the project-page tables). A row with no
result file says `not run`.
"""

import json
import logging
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
from .tune import table as tune_table


logger = logging.getLogger(__name__)
# with the per-task records of a training run's evaluations (`eval_episodes.jsonl`) or of an evaluation
# (`episodes.jsonl`): the outcomes `reward_outcomes` pairs
RUN_FILES = ("results.json", "eval_curve.jsonl", "config.json", "eval_episodes.jsonl", "episodes.jsonl")
CPU_METHODS = {
    "untrained": "untrained (SmolLM2-135M-Instruct)",
    "caller_only_real": "caller-only, real tools",
    "envace": "EnvACE (shared caller + rehearsal)",
    "tts_parallel_untrained": "parallel rehearsal N={n}, base policy",
    "tts_parallel_envace": "parallel rehearsal N={n}, EnvACE policy",
    "tts_sequential_untrained": "sequential rehearsal N={n}, base policy",
    "tts_sequential_envace": "sequential rehearsal N={n}, EnvACE policy",
}
HEADER = ["Tasks", "Method", "Metric", "Paper", "Ours (mean +- std, n seeds)", "commit"]


def warm_start_line(payloads: list[dict]) -> str:
    """What the format warm start of the CPU plan did, from its `results.json` files."""
    if not payloads:
        return "Format warm start: not run (the plan's config has none, or it has not run)."
    parts = [f"seed {p['seed']}: {p['rows']['caller']} caller + {p['rows']['simulator']} rehearsal rows, "
             f"{p['tokens']} tokens, loss {p['losses'][0]:.3f} -> {p['losses'][-1]:.3f} over {len(p['losses'])} "
             f"steps, {p['train_seconds']:.0f} s, commit {p['commit']}" for p in payloads]  # fmt: skip
    return "Format warm start (every method starts from it; README deviation 11): " + "; ".join(parts) + "."


def cpu_table(runs: dict[str, list[dict]]) -> str:
    rows = []
    for method, label in CPU_METHODS.items():
        payloads = runs.get(method, [])
        if method == "untrained" and runs.get("warmstart"):
            label = "untrained (SmolLM2-135M-Instruct + format warm start, no RL)"
        commits = ", ".join(sorted({p["commit"] for p in payloads})) or "-"
        budget = {str(p["config"]["trainer"]["tts_budget"]) for p in payloads} or {"tts_budget"}
        label = label.format(n="/".join(sorted(budget)))
        if payloads and "rollouts" in payloads[0]:  # a trained run: how long it trained
            label += f" ({'/'.join(sorted({str(p['rollouts']) for p in payloads}))} rollouts)"
        panel = "/".join(sorted({str(p["config"]["env"]["eval_episodes"]) for p in payloads})) or "fixed"
        for metric, key in (("episode reward R %", "reward_mean"), ("success (R = 1) %", "success_mean")):
            values = [p["final"][key] for p in payloads]
            rows.append([f"generated tool tasks ({panel}-task eval panel, real tools)", label, metric,
                         "n/a (our tasks)", mean_std(values), commits])  # fmt: skip
    return markdown_table(HEADER, rows) + "\n\n" + warm_start_line(runs.get("warmstart", []))


def reward_outcomes(run: Path) -> dict[tuple, float]:
    """The episode reward R (in points) per panel instance (task id, evaluation seed) of a run's final evaluation, for
    `paired_table`; {} for a run filed before its per-task records were kept."""
    return {(r["task_id"], r["seed"]): 100.0 * r["reward"] for r in final_episodes(run)}


def reward_plot(runs: dict[str, list[dict]], path: Path) -> bool:
    """The CPU plan's trained methods as lines from their start point to after RL: per seed, the untrained
    (warm-started) model's panel reward at rollout 0 and the method's final panel reward at its last rollout; mean
    over the seeds with a +- std band (`plot_curves`). False (nothing written) when no trained run has a same-seed
    untrained run."""
    start = {p["seed"]: 100 * p["final"]["reward_mean"] for p in runs.get("untrained", [])}
    series = {}
    for method in ("caller_only_real", "envace"):
        pairs = [[(0, start[p["seed"]]), (p["rollouts"], 100 * p["final"]["reward_mean"])]
                 for p in runs.get(method, []) if p["seed"] in start]  # fmt: skip
        if pairs:
            series[CPU_METHODS[method]] = pairs
    if not series:
        return False
    plot_curves(series, path, "rollouts (0 = the warm-started start point)", "panel reward R % (real tools, greedy)",
                "EnvACE CPU plan: panel reward before and after RL")  # fmt: skip
    return True


def paper_table(paper: dict) -> str:
    rows = []
    for table in ("main", "tts"):
        cols = paper[table]["columns"]
        for method, values in paper[table]["rows"].items():
            for col, value in zip(cols, values, strict=True):
                rows.append([col, method, "score", f"{value:.2f}", "not run", "-"])
    return markdown_table(HEADER, rows)


def bench_block(path: Path) -> str:
    """EnvACE / caller-only step time per generated token from `bench-results.json` (`python -m envace.bench`)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    if "envace/step_time_per_token_ratio_envace_over_caller_only" not in data:
        return "not run"
    b = {k.removeprefix("envace/"): v for k, v in data.items() if k.startswith("envace/")}
    rows = [
        ["step time (s)", f"{b['caller_only_step_time_s']:.2f}", f"{b['envace_step_time_s']:.2f}",
         f"{b['step_time_ratio_envace_over_caller_only']:.2f}"],
        ["generated tokens per step", f"{b['caller_only_generated_tokens_per_step']:.0f}",
         f"{b['envace_generated_tokens_per_step']:.0f}",
         f"{b['envace_generated_tokens_per_step'] / max(b['caller_only_generated_tokens_per_step'], 1):.2f}"],
        ["step time per generated token (ms)", f"{b['caller_only_ms_per_generated_token']:.1f}",
         f"{b['envace_ms_per_generated_token']:.1f}",
         f"{b['step_time_per_token_ratio_envace_over_caller_only']:.2f}"],
    ]  # fmt: skip
    table = markdown_table(["Comparison", "caller-only (real tools)", "EnvACE", "EnvACE / caller-only"], rows)
    where = (f"{b['cpu_cores_usable']} CPU core(s) usable (affinity), nice {b['nice']}, 1-min load average "
             f"{b['load_average_1min_at_end']:.1f} at the end{'; ' + b['note'] if b['note'] else ''}")  # fmt: skip
    return f"{table}\n\n{b['config']}; {where}; commit {b['commit']}"


def _rehearsal_metrics(payload: dict, scores: dict) -> list[tuple[str, float | None]]:
    """(metric, fraction) of one budget's scores: tau2's pass^1 and average reward (means over the domains), BFCL's
    V4 multi-turn mean and overall over the offline groups (`bfcl.v4_summary`)."""
    if payload["benchmark"] == "tau2":
        mean = scores["scores"]["mean_over_domains"]
        return [("pass^1, mean over domains", mean["pass^1"]), ("avg reward, mean over domains", mean["avg_reward"])]
    v4 = scores["v4"]
    missing = v4["groups"]["multi_turn"]["missing"]
    label = "BFCL V4 multi-turn mean" + (f" ({4 - len(missing)} of 4 categories)" if missing else "")
    return [(label + (", partial slice" if scores["partial"] else ""), v4["multi_turn_mean"]),
            ("BFCL V4 overall, offline groups (weights 10/10/10/30 renormalised)", v4["overall_offline"])]  # fmt: skip


def rehearsal_table(payloads: list[dict]) -> str:
    """Budget vs score of test-time private rehearsal on tau2 / BFCL (`envace eval --benchmark B --rehearsal N,...`
    results payloads); N = 0 is the committed execution alone."""
    if not payloads:
        return "not run"
    rows = []
    for p in payloads:
        budgets = p["rehearsal"]["budgets"]
        base = dict(_rehearsal_metrics(p, budgets["0"])) if "0" in budgets else {}
        for n in sorted(budgets, key=int):
            for metric, value in _rehearsal_metrics(p, budgets[n]):
                delta = "-" if value is None or base.get(metric) is None else f"{100 * (value - base[metric]):+.1f}"
                rows.append([p["benchmark"], p["model"], p["rehearsal"]["mode"], n, metric,
                             "n/a (categories missing)" if value is None else f"{100 * value:.1f}", delta,
                             p["commit"]])  # fmt: skip
    header = ["Benchmark", "Model", "Mode", "N", "Metric", "Score %", "vs N = 0", "commit"]
    sampling = {f"T {p['rehearsal']['temperature']}, top-p {p['rehearsal']['top_p']}" for p in payloads}
    return markdown_table(header, rows) + f"\n\nRehearsals sampled at {'; '.join(sorted(sampling))}."


def collect_rehearsal_runs(runs: Path, results: Path) -> int:
    """Copy every `envace eval --benchmark tau2|bfcl --rehearsal ...` payload under `runs` (`**/benchmarks/results.json`
    with a `rehearsal` section) to `results/benchmarks/<benchmark>_<mode>_<model folder name>/results.json`."""
    n = 0
    for path in sorted(runs.rglob("benchmarks/results.json")):
        payload = json.loads(path.read_text())
        if "rehearsal" not in payload:
            continue
        name = f"{payload['benchmark']}_{payload['rehearsal']['mode']}_{Path(payload['model']).name}"
        keep = results / "benchmarks" / name
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "results.json").write_text(path.read_text())
        n += 1
    return n


def report(readme: Path, runs: Path | None = None) -> None:
    """Rebuild `readme`'s result blocks from `<readme folder>/results`, after copying finished runs from `runs` there
    when given (and `<runs>/cpu/mechanisms/mechanisms.json`, `envace mechanisms`); the bench block reads
    `bench-results.json` next to the package."""
    results = readme.parent / "results"
    if runs is not None:
        logger.info(f"report: copied {collect_runs(runs, results, RUN_FILES)} finished runs and "
                    f"{collect_rehearsal_runs(runs, results)} rehearsal benchmark runs from {runs} to {results}")  # fmt: skip
        if file_mechanisms(runs, results):
            logger.info(f"report: filed {runs}/cpu/mechanisms in {results}/cpu/mechanisms")
    text = readme.read_text()
    cpu_runs = load_runs(results, "cpu")
    text = replace_block(text, "results-cpu", cpu_table(cpu_runs))
    names = {method: label.replace(" N={n}", "") for method, label in CPU_METHODS.items()}
    text = replace_block(
        text, "paired-cpu", paired_table(results, "cpu", names, "caller_only_real", reward_outcomes, "reward R")
    )
    if reward_plot(cpu_runs, results / "cpu" / "reward.png"):
        logger.info(f"report: wrote {results / 'cpu' / 'reward.png'}")
    text = replace_block(
        text, "results-paper", paper_table(json.loads((readme.parent / "paper_results.json").read_text()))
    )
    rehearsal = [json.loads(p.read_text()) for p in sorted((results / "benchmarks").glob("*/results.json"))]
    text = replace_block(text, "results-tts-benchmarks", rehearsal_table(rehearsal))
    text = replace_block(text, "mechanisms-cpu", mechanisms_table(load_mechanisms(results)))
    text = replace_block(text, "tune-cpu", tune_table(results / "cpu"))
    text = replace_block(text, "bench", bench_block(readme.resolve().parent.parent / "bench-results.json"))
    readme.write_text(text)
    logger.info(f"report: wrote {readme}")
