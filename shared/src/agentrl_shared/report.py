"""README report helpers: generated blocks between markers, mean +- std cells, learning-curve PNGs.

Every number a package README shows is produced here from result files;
`make report` rewrites only the text between `<!-- NAME:start -->` and `<!-- NAME:end -->`. Runs are written under an
output folder (ignored by git); `collect_runs` is the one step that copies finished runs into the committed results.
"""

import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

from .config import ConfigError


def collect_runs(runs: Path, results: Path, names: tuple[str, ...]) -> int:
    """Copy the files `names` of every finished run (`<scale>/<method>/<run>/results.json`) from the runs folder
    `runs` into the committed `results` folder (same relative path); returns how many runs were copied."""
    n = 0
    for path in sorted(runs.glob("*/*/*/results.json")):
        keep = results / path.parent.relative_to(runs)
        keep.mkdir(parents=True, exist_ok=True)
        for name in names:
            if (path.parent / name).exists():
                shutil.copy(path.parent / name, keep / name)
        n += 1
    return n


COMPARE_FILES = ("compare.md", "compare.json", "learning_curves.png")  # what `agentrl_shared.compare` writes


def file_compares(compares: list[Path], results: Path) -> list[Path]:
    """Copy finished `agentrl_shared.compare` output folders (`runs/compare/<name>`) to `results/compare/<name>`;
    every folder is checked before any is copied, so one unfinished plan files none. Returns the folders written."""
    for compare in compares:
        missing = [name for name in COMPARE_FILES if not (compare / name).exists()]
        if missing:
            raise ConfigError(f"{compare} has no {', '.join(missing)}: run `make compare ENV={compare.name}` first.")
    targets = []
    for compare in compares:
        target = results / "compare" / compare.name
        target.mkdir(parents=True, exist_ok=True)
        for name in COMPARE_FILES:
            shutil.copyfile(compare / name, target / name)
        targets.append(target)
    return targets


def compare_blocks(text: str, results: Path) -> str:
    """Each filed comparison's table (`results/compare/<name>/compare.md`) into the README's `compare-<name>` block."""
    for table in sorted((results / "compare").glob("*/compare.md")):
        text = replace_block(text, f"compare-{table.parent.name}", table.read_text().strip())
    return text


def load_runs(results: Path, scale: str) -> dict[str, list[dict]]:
    """`{method: [results.json payloads, one per run]}` of one scale in a results folder."""
    runs: dict[str, list[dict]] = {}
    for path in sorted((results / scale).glob("*/seed*/results.json")):
        runs.setdefault(path.parent.parent.name, []).append(json.loads(path.read_text()))
    return runs


def replace_block(text: str, name: str, block: str) -> str:
    """Replace the text between the `name` markers; the markers must exist."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise ValueError(f"README has no {start} ... {end} markers to fill.")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block.rstrip()}\n{end}{tail}"


def mean_std(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """`m +- s (n seeds)` in percent by default; one seed has no spread to show (`m (1 seed)`); `not run` for an
    empty list."""
    if not values:
        return "not run"
    m = statistics.fmean(values) * scale
    if len(values) == 1:
        return f"{m:.{digits}f} (1 seed)"
    return f"{m:.{digits}f} +- {statistics.stdev(values) * scale:.{digits}f} ({len(values)} seeds)"


def log_mean(payloads: list[dict], key: str) -> list[float]:
    """Each run's mean of `key` over the entries of its logged history that have it (a rollout's or a step's
    metrics); runs that never logged it are left out."""
    out = []
    for p in payloads:
        values = [e[key] for e in p.get("log_history", []) if key in e]
        if values:
            out.append(statistics.fmean(values))
    return out


CHAIN_METRICS = [("success % (valid_seen, greedy)", "success_rate_mean")] + [
    (f"chains of {n} %", f"chain{n}_success_rate") for n in (1, 2, 3, 4)
]  # the TextRooms chain panel's success, overall and per chain length (task type `chain<L>`)


def cpu_results_table(runs: dict[str, list[dict]], names: dict[str, str], env: str,
                      metrics: list[tuple[str, str]] = CHAIN_METRICS) -> str:  # fmt: skip
    """The CPU plan's results: per method of `names` (in order) and metric (header, key of the final summary), the
    mean +- std over seeds, with the model the runs started from, their precision (`precision_fields`) and commits."""
    rows = []
    for method, name in names.items():
        payloads = runs.get(method, [])
        commits = ", ".join(sorted({p["commit"] for p in payloads})) or "-"
        models = ", ".join(sorted({p["model"] for p in payloads})) or "-"
        precision = ", ".join(sorted({p.get("precision", "fp32") for p in payloads})) or "-"
        for metric, key in metrics:
            values = [p["final"][key] for p in payloads if key in p["final"]]
            rows.append([env, models, precision, name, metric, mean_std(values), commits])
    return markdown_table(["Env", "Model", "Precision", "Method", "Metric", "Ours (mean +- std, n seeds)", "commit"],
                          rows)  # fmt: skip


def training_table(runs: dict[str, list[dict]], names: dict[str, str],
                   metrics: list[tuple[str, tuple[str, ...], float]]) -> str:  # fmt: skip
    """What each trained method's mechanism did during training: per `(header, logged keys, scale)` of `metrics`,
    each run's mean over its logged history (`log_mean`), then mean +- std over seeds, keys joined by ` / `; the
    optimizer steps first; `not run` where no run logged a key (GRPO has no teacher)."""
    rows = []
    for method, name in names.items():
        payloads = [p for p in runs.get(method, []) if "log_history" in p]
        if not payloads:
            continue
        cells = [" / ".join(mean_std(log_mean(payloads, k), scale=scale, digits=1 if scale == 100 else 2)
                            for k in keys) for _, keys, scale in metrics]  # fmt: skip
        rows.append([name, mean_std([p["steps"] for p in payloads], scale=1.0), *cells])
    return markdown_table(["Method", "optimizer steps", *[h for h, _, _ in metrics]], rows)


def final_episodes(run: Path, trained: str = "eval_episodes.jsonl", evaluated: str = "episodes.jsonl") -> list[dict]:
    """The per-instance records of a run's final evaluation: the last evaluation in `trained` (a training run, every
    evaluation tagged with `rollouts`, `cli.eval_records`), else `evaluated` (a standalone evaluation); [] if neither.
    SkillRise's trials: `eval_trials.jsonl` / `trials_<mode>.jsonl`."""
    if (run / trained).exists():
        records = [json.loads(line) for line in (run / trained).read_text().splitlines() if line]
        last = max((r["rollouts"] for r in records), default=None)
        return [r for r in records if r["rollouts"] == last]
    if (run / evaluated).exists():
        return [json.loads(line) for line in (run / evaluated).read_text().splitlines() if line]
    return []


def horizon_slope(records: list[dict]) -> float | None:
    """Success points lost per extra turn (AgentOPSD's "sensitivity to task horizon", `docs/agentopsd/dynamics.png`):
    the least-squares slope of success (0 or 100) on the episode's trajectory length in turns; None when every
    episode has the same length. The figure does not say how it was fitted: this is our reading (README)."""
    xs = [r["turns"] for r in records]
    ys = [100.0 * bool(r["won"] and not r["failed"]) for r in records]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def horizon_report(results: Path, scale: str, names: dict[str, str], path: Path) -> str:
    """The horizon table (slope per method: mean +- std over the seeds' final evaluations, and the slope of all
    their episodes pooled) and its bar chart at `path`; methods without per-episode records are `not run`."""
    rows, bars = [], {}
    for method, name in names.items():
        runs = sorted((results / scale / method).glob("seed*"))
        per_seed = [horizon_slope(final_episodes(r)) for r in runs]
        per_seed = [s for s in per_seed if s is not None]
        pooled = horizon_slope([e for r in runs for e in final_episodes(r)])
        if pooled is None:
            rows.append([name, "not run", "not run", "0"])
            continue
        spread = f"{statistics.fmean(per_seed):.2f}" + (
            f" +- {statistics.stdev(per_seed):.2f}" if len(per_seed) > 1 else ""
        )
        episodes = sum(len(final_episodes(r)) for r in runs)
        rows.append([name, f"{spread} ({len(per_seed)} seed{'s' if len(per_seed) != 1 else ''})", f"{pooled:.2f}",
                     str(episodes)])  # fmt: skip
        bars[name] = pooled
    if bars:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar(list(bars), list(bars.values()), color="#9ecae1", edgecolor="black")
        for i, v in enumerate(bars.values()):
            ax.annotate(f"{v:.2f}", (i, v), ha="center", va="top" if v < 0 else "bottom")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel("success pts per extra turn (closer to 0 = more robust)")
        ax.set_title("Sensitivity to trajectory length (final evaluation)")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
    header = ["Method", "slope per seed (mean +- std, n)", "slope, episodes pooled", "episodes"]
    return markdown_table(header, rows)


def episode_outcomes(run: Path) -> dict[tuple, float]:
    """Success (100 won, 0 lost or failed) per panel instance (task id, evaluation seed) of a run's final evaluation
    (`final_episodes`); {} when the run kept no per-episode records."""
    return {(e["task_id"], e["seed"]): 100.0 * bool(e["won"] and not e["failed"]) for e in final_episodes(run)}


def paired_difference(runs: list[Path], baseline: list[Path], n_boot: int = 10_000,
                      outcomes: Callable[[Path], dict[tuple, float]] = episode_outcomes) -> dict | None:  # fmt: skip
    """A method's success (or another per-instance outcome) minus the baseline's on the same panel instances, with
    bootstrap 95 % intervals.

    A run is a run folder (its `results.json`) or a filed result file (VAD's `<row>_seed<s>.json`). Runs are paired by
    training seed (the result file's `seed`) and, within a pair, outcomes by panel instance: `outcomes`
    (default `episode_outcomes`: success per task id and evaluation seed of the final evaluation's episodes; SkillRise
    and EnvACE pass their own) gives D[s, k], the difference (in points) at training seed s and instance k. The mean
    is over all of D. Two intervals, each the 2.5 / 97.5 percentiles of the mean over `n_boot` resamples (fixed
    generator seed, so a report is reproducible):
    - `lo` / `hi`: the instances resampled with replacement, each instance's difference averaged over the seeds. It
      answers "would another panel of such tasks show the gap" for these trained models, not for another training run.
    - `lo_seeds` / `hi_seeds` (None with one seed): training seeds and instances resampled together, each with
      replacement and independently (the two-way bootstrap of a crossed design: every seed plays every instance), so
      the spread between training runs counts too. With few seeds it is itself rough: 3 seeds give 10 distinct seed
      draws.
    None when no seed pairs up; a pair whose panels differ raises, naming the seed (a paired difference over different
    tasks means nothing). Returns `{"mean", "lo", "hi", "lo_seeds", "hi_seeds"}` in points, `instances`, `seeds`,
    `per_seed` (the mean difference at each paired seed, in seed order), and `better` / `worse`: instances where the
    method's mean outcome is above / below the baseline's.
    """
    import numpy as np

    def by_seed(folders: list[Path]) -> dict[int, dict[tuple, float]]:
        out = {}
        for run in folders:
            won = outcomes(run)
            if won:
                out[json.loads((run / "results.json" if run.is_dir() else run).read_text())["seed"]] = won
        return out

    mine, base = by_seed(runs), by_seed(baseline)
    seeds = sorted(set(mine) & set(base))
    if not seeds:
        return None
    for s in seeds:
        if mine[s].keys() != base[s].keys():
            raise ValueError(f"seed {s}: the method's and the baseline's final evaluations played different panels")
    keys = sorted(mine[seeds[0]])
    table = np.array([[mine[s][k] - base[s][k] for k in keys] for s in seeds])  # D: [seeds, instances]
    diff = table.mean(axis=0)  # [instances]
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)  # [n_boot]
    lo, hi = np.percentile(means, [2.5, 97.5])
    lo_seeds = hi_seeds = None
    if len(seeds) > 1:  # the mean of D over a seed draw crossed with an instance draw: (w_s^T D w_k) / (S K)
        n_seeds, n_keys = table.shape
        w_s = rng.multinomial(n_seeds, [1 / n_seeds] * n_seeds, size=n_boot)  # [n_boot, seeds] draw counts
        w_k = rng.multinomial(n_keys, [1 / n_keys] * n_keys, size=n_boot)  # [n_boot, instances]
        means = ((w_s @ table) * w_k).sum(axis=1) / (n_seeds * n_keys)  # [n_boot]
        lo_seeds, hi_seeds = (float(x) for x in np.percentile(means, [2.5, 97.5]))
    return {"mean": float(diff.mean()), "lo": float(lo), "hi": float(hi), "lo_seeds": lo_seeds, "hi_seeds": hi_seeds,
            "instances": len(keys), "seeds": len(seeds), "per_seed": [float(x) for x in table.mean(axis=1)],
            "better": int((diff > 0).sum()), "worse": int((diff < 0).sum())}  # fmt: skip


def paired_markdown(runs: dict[str, list[Path]], baseline: str,
                    outcomes: Callable[[Path], dict[tuple, float]] = episode_outcomes,
                    metric: str = "success") -> str:  # fmt: skip
    """The table of each name's paired difference to `baseline` (a key of `runs`, run folders per name): the mean
    per-instance difference in points of `metric` (what `outcomes` gives), its bootstrap 95 % intervals over
    instances and over training seeds and instances (`paired_difference`), and the mean difference at each seed;
    `not run` where nothing pairs."""
    rows = [paired_row(name, paired_difference(folders, runs[baseline], outcomes=outcomes))
            for name, folders in runs.items() if name != baseline]  # fmt: skip
    return markdown_table(paired_header(f"Method - {baseline}", metric), rows)


def paired_header(first: str, metric: str = "success") -> list[str]:
    return [first, f"{metric} pts (paired mean)", "95 % interval, instances resampled",
            "95 % interval, seeds and instances resampled", "panel instances x seeds", "per seed",
            "instances better / worse"]  # fmt: skip


def paired_row(name: str, d: dict | None) -> list[str]:
    """One row of a paired table (`paired_header`) from `paired_difference`'s result; `not run` where None."""
    if d is None:
        return [name, "not run", "not run", "not run", "0", "-", "-"]
    seeds = "- (1 seed)" if d["lo_seeds"] is None else f"[{d['lo_seeds']:+.1f}, {d['hi_seeds']:+.1f}]"
    return [name, f"{d['mean']:+.1f}", f"[{d['lo']:+.1f}, {d['hi']:+.1f}]", seeds, f"{d['instances']} x {d['seeds']}",
            " / ".join(f"{x:+.1f}" for x in d["per_seed"]), f"{d['better']} / {d['worse']}"]  # fmt: skip


def paired_table(results: Path, scale: str, names: dict[str, str], baseline: str,
                 outcomes: Callable[[Path], dict[tuple, float]] = episode_outcomes,
                 metric: str = "success") -> str:  # fmt: skip
    """`paired_markdown` of the committed runs of `scale`, methods named by `names`, against `baseline` (a key)."""
    runs = {name: sorted((results / scale / method).glob("seed*")) for method, name in names.items()}
    return paired_markdown(runs, names[baseline], outcomes, metric)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def band(values: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    """Per point: mean, mean - std, mean + std over its seeds (sample std, 0 where one seed has the point)."""
    mean = [statistics.fmean(v) for v in values]
    std = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]
    return mean, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]


def plot_curves(series: dict[str, list[list[tuple[float, float]]]], path: Path, xlabel: str, ylabel: str, title: str,
                levels: dict[str, float] | None = None):  # fmt: skip
    """One line per method: mean over seeds, shaded mean +- std (as the tables); `series[method]`: per-seed (x, y) lists.

    A point that only one seed reaches gets a zero-width band; a method evaluated at one x only (a plan that evaluates
    at the end) gets its band as an error bar, dodged sideways by its place in `series`. `levels`: reference values
    (e.g. the untrained model's success), each a dashed horizontal line with its name; with any, the x axis starts
    at 0.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (method, runs) in enumerate(series.items()):
        xs = sorted({x for run in runs for x, _ in run})
        if not xs:
            continue
        ys = [[y for run in runs for x2, y in run if x2 == x] for x in xs]
        mean, low, high = band(ys)
        if len(xs) == 1:  # one evaluation: the methods' error bars side by side around their x, not on top
            dodged = [xs[0] + 0.15 * (i - (len(series) - 1) / 2)]
            (line,) = ax.plot(dodged, mean, marker="o", linestyle="none", label=f"{method} (n={len(runs)})")
            ax.errorbar(dodged, mean, yerr=[[mean[0] - low[0]], [high[0] - mean[0]]], fmt="none", capsize=3,
                        color=line.get_color())  # fmt: skip
            continue
        ax.plot(xs, mean, marker="o", label=f"{method} (n={len(runs)})")
        if len(runs) > 1:
            ax.fill_between(xs, low, high, alpha=0.2)
    for name, y in (levels or {}).items():
        ax.axhline(y, linestyle="--", color="gray", linewidth=1, label=name)
    if levels:  # a level such as the untrained model's is where every curve starts: show the axis from 0
        ax.set_xlim(0, 1.04 * ax.get_xlim()[1])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def success_curves(runs: dict[str, list[dict]], names: dict[str, str], path: Path, title: str) -> None:
    """The held-out success curves of `runs` (method -> its seeds' results payloads), one line per method with its
    seed band, and the untrained model's success as a flat reference line."""
    series = {
        names[m]: [[(pt["rollouts"], 100 * pt["success_rate_mean"]) for pt in p["curve"]] for p in payloads]
        for m, payloads in runs.items()
        if any(p["curve"] for p in payloads)
    }
    untrained = [100 * p["final"]["success_rate_mean"] for p in runs.get("untrained", [])]
    levels = (
        {f"{names['untrained']} (untrained, n={len(untrained)})": statistics.fmean(untrained)} if untrained else None
    )
    if series:
        plot_curves(series, path, "rollouts", "held-out success % (greedy)", title, levels)


def plan_summary(output: Path, scale: str, names: dict[str, str], title: str,
                 pairs: list[tuple[str, str]] = ()) -> str:  # fmt: skip
    """What a finished `reproduce` prints: one row per method of `<output>/<scale>/<method>/seed*/results.json`
    (held-out success mean +- std over the seeds, n, and the seconds each run took: training with its evaluations, or
    the evaluation alone), the paired difference of each `(method, baseline)` of `pairs` on the same panel instances
    (`paired_difference`), and the learning curves written to `<output>/<scale>/learning_curves.png` (runs/ only;
    tracked files are `report`'s)."""
    rows, runs, total = [], {}, 0.0
    for method, name in names.items():
        payloads = [json.loads(p.read_text()) for p in sorted((output / scale / method).glob("seed*/results.json"))]
        if not payloads:
            continue
        runs[method] = payloads
        seconds = [p.get("train_seconds", p.get("eval_seconds", 0.0)) for p in payloads]
        total += sum(seconds)
        rows.append([name, mean_std([p["final"]["success_rate_mean"] for p in payloads]), str(len(payloads)),
                     f"{statistics.fmean(seconds):.0f}"])  # fmt: skip
    success_curves(runs, names, output / scale / "learning_curves.png", title)
    table = markdown_table(["Method", "success % (mean +- std, n seeds)", "n", "seconds per run"], rows)
    paired = [paired_row(f"{names[m]} - {names[b]}", paired_difference(*(sorted((output / scale / x).glob("seed*"))
                                                                       for x in (m, b)))) for m, b in pairs]  # fmt: skip
    if paired:
        table += "\n\n" + markdown_table(paired_header("Paired on the panel"), paired)
    return f"{table}\n\n{total:.0f} s of runs in all; curves: {output / scale / 'learning_curves.png'}"
