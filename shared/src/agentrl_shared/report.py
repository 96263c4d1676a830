"""README report helpers: generated blocks between markers, mean +- std cells, learning-curve PNGs.

Every number a package README shows is produced here from result files;
`make report` rewrites only the text between `<!-- NAME:start -->` and `<!-- NAME:end -->`. Runs are written under an
output folder (ignored by git); `collect_runs` is the one step that copies finished runs into the committed results.
"""

import json
import shutil
import statistics
from pathlib import Path


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


def mean_std(values: list[float], scale: float = 100.0) -> str:
    """`m +- s (n seeds)` in percent by default; `not run` for an empty list."""
    if not values:
        return "not run"
    m = statistics.fmean(values) * scale
    s = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{m:.1f} +- {s:.1f} ({len(values)} seed{'s' if len(values) > 1 else ''})"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def band(values: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    """Per point: mean, mean - std, mean + std over its seeds (sample std, 0 where one seed has the point)."""
    mean = [statistics.fmean(v) for v in values]
    std = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]
    return mean, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]


def plot_curves(series: dict[str, list[list[tuple[float, float]]]], path: Path, xlabel: str, ylabel: str, title: str):
    """One line per method: mean over seeds, shaded mean +- std (as the tables); `series[method]`: per-seed (x, y) lists.

    A point that only one seed reaches gets a zero-width band.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, runs in series.items():
        xs = sorted({x for run in runs for x, _ in run})
        if not xs:
            continue
        ys = [[y for run in runs for x2, y in run if x2 == x] for x in xs]
        mean, low, high = band(ys)
        ax.plot(xs, mean, marker="o", label=f"{method} (n={len(runs)})")
        if len(runs) > 1:
            ax.fill_between(xs, low, high, alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
