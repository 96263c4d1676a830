"""`python -m agentrl_shared.compare`: several packages' methods on one environment, side by side (`make compare`).

Plumbing only: each entry `LABEL=PACKAGE:CONFIG[:METHOD[:KEY=VALUE...]]` runs `python -m PACKAGE.cli train --config
CONFIG --method METHOD trainer.seed=S [KEY=VALUE...]` for every seed under `--runs` (an entry's own overrides, e.g.
`SDAR coef 1=sdar:textrooms_smollm2-135m_cpu:sdar:trainer.sdar_coef=1.0` for a sweep; `--override` goes to every entry)
(git-ignored; a finished run is not redone), then checks that every run used the same model, environment and evaluation
panel, and writes one table (`compare.md`, mean +- std over seeds) and one plot (`learning_curves.png`) from the runs'
`results.json`, and, where a `GRPO` label is given, each label's paired per-task difference to it with a bootstrap 95 %
interval (`report.paired_difference`). No algorithm lives here: each package's CLI decides what its method means.

`--reuse LABEL=DIR` takes a label's finished runs from `DIR/seed<S>/results.json` instead of training them again: the
folder of a package's own reproduce plan that ran the same config and method (e.g. `runs/sdar/cpu/sdar`, written by
`sdar reproduce`). A run there is used only when its results name the same method and seed and no `--override` is
given; otherwise the label trains under `--runs` as usual.

Every run must share the model, the environment section (panel, turn limit, ...), the evaluation seeds and the training
budget (`BUDGET`: rollouts, group size, episodes per rollout, learning rate, precision, ...); `--note` lines go under
the table (e.g. why a method is not a row).

`--level LABEL=DIR` adds a reference that this plan does not train: the finished runs `DIR/seed*/results.json` (e.g.
the untrained model's evaluations filed by a package's reproduce plan, `sdar/results/cpu/untrained`), which must have
evaluated the same model on the same panel (`model`, `panel_identity`). Its mean +- std is a line under the table and a
dashed line in the plot: a curve that falls below it has lost what the model knew before training.
"""

import argparse
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

from .cli import cpu_precision, setup_logging
from .report import markdown_table, mean_std, paired_markdown, plot_curves


logger = logging.getLogger(__name__)
# trainer keys that make two runs' budgets comparable (a key a package does not have reads as None and differs)
BUDGET = ("num_rollouts", "num_generations", "per_device_train_batch_size", "steps_per_generation", "learning_rate",
          "bf16", "max_completion_length", "beta")  # fmt: skip


def parse_entry(text: str) -> tuple[str, str, str, str, list[str]]:
    """`LABEL=PACKAGE:CONFIG[:METHOD[:KEY=VALUE...]]` -> (label, package, config, method, the entry's overrides);
    METHOD defaults to the label, lowercased."""
    label, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not sep or len(parts) < 2 or not all(parts) or not all("=" in o for o in parts[3:]):
        raise SystemExit(f"Bad entry {text!r}; expected LABEL=PACKAGE:CONFIG[:METHOD[:KEY=VALUE...]], e.g. "
                         "SDAR=sdar:smoke:sdar or 'SDAR coef 1=sdar:smoke:sdar:trainer.sdar_coef=1.0'.")  # fmt: skip
    return label, parts[0], parts[1], parts[2] if len(parts) > 2 else label.lower(), parts[3:]


def train(package: str, config: str, method: str, seed: int, run: Path, overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", f"{package}.cli", "train", "--config", config, "--method", method,
           f"trainer.seed={seed}", f"trainer.output_dir={run}", *overrides]  # fmt: skip
    logger.info("compare: " + " ".join(cmd))
    subprocess.run(cmd, check=True)


def reusable(path: Path, method: str, seed: int, overrides: list[str]) -> bool:
    """A finished run at `path` (`results.json`) stands in for this label and seed: same method and seed, no overrides."""
    if overrides or not path.exists():
        return False
    payload = json.loads(path.read_text())
    return payload["method"] == method and payload["seed"] == seed


def same_setting(payloads: dict[str, list[dict]]) -> None:
    """Every run must share the model, the environment section (panel, turn limit, ...), the evaluation seeds, the
    training budget (`BUDGET` keys of the trainer section) and the precision (`cli.precision_fields`)."""
    seen: dict[str, tuple] = {}
    for label, runs in payloads.items():
        for p in runs:
            trainer = p["config"].get("trainer", {})
            budget = tuple(trainer.get(k) for k in BUDGET)
            key = (p["model"], json.dumps(p["config"]["env"], sort_keys=True), tuple(p["eval_seeds"]), budget,
                   p.get("precision", "fp32"))  # fmt: skip
            seen.setdefault(key, (label, p["seed"]))
    if len(seen) > 1:
        found = "; ".join(f"{label} seed {seed}" for label, seed in seen.values())
        raise SystemExit(f"The runs do not share one model, environment, panel, training budget and precision ({found}): "
                         "align their configs.")  # fmt: skip


def reference_levels(specs: list[str], payloads: dict[str, list[dict]]) -> dict[str, tuple[str, list[dict]]]:
    """`--level LABEL=DIR` -> {label: (DIR, the finished runs under it)}; each must share the model and the panel of
    the plan's runs (a level on another panel would be read against curves it does not measure)."""
    first = next(p for runs in payloads.values() for p in runs)
    out = {}
    for spec in specs:
        label, _, folder = spec.partition("=")
        runs = [json.loads(path.read_text()) for path in sorted(Path(folder).glob("seed*/results.json"))]
        if not label or not runs:
            raise SystemExit(f"--level {spec!r}: expected LABEL=DIR with finished runs DIR/seed*/results.json.")
        for p in runs:
            if (p["model"], p["panel_identity"]) != (first["model"], first["panel_identity"]):
                raise SystemExit(f"--level {label}: {folder} seed {p['seed']} evaluated another model or panel than "
                                 "the plan's runs; give the runs of the plan's config.")  # fmt: skip
        out[label] = (folder, runs)
    return out


def level_lines(levels: dict[str, tuple[str, list[dict]]]) -> str:
    """One line per reference level, under the table."""
    return "".join(
        f"\n\nReference, not trained by this plan: {label} {mean_std([p['final']['success_rate_mean'] for p in runs])}"
        f" % ({folder}, commit {', '.join(sorted({p['commit'] for p in runs}))})."
        for label, (folder, runs) in levels.items()
    )


def table(payloads: dict[str, list[dict]], env: str) -> str:
    rows = []
    for label, runs in payloads.items():
        values = [p["final"]["success_rate_mean"] for p in runs]
        commits = ", ".join(sorted({p["commit"] for p in runs}))
        model = runs[0]["model"] if runs else "-"
        rows.append([env, model, label, mean_std(values), ", ".join(str(p["seed"]) for p in runs), commits])
    return markdown_table(["Env", "Model", "Method", "Success % (mean +- std)", "seeds", "commit"], rows)


def paired(sources: dict[str, list[str]], baseline: str) -> str:
    """Each label's paired per-instance difference to `baseline` with its bootstrap 95 % interval
    (`report.paired_markdown`: same training seed, same panel instance); "" without the baseline."""
    if baseline not in sources:
        return ""
    return "\n\n" + paired_markdown({label: [Path(r) for r in runs] for label, runs in sources.items()}, baseline)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentrl_shared.compare", description=__doc__)
    parser.add_argument("entries", nargs="+", help="LABEL=PACKAGE:CONFIG[:METHOD]")
    parser.add_argument("--env", required=True, help="environment name, for the table and the title")
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds")
    parser.add_argument("--out", type=Path, required=True, help="output folder: compare.md, compare.json, the plot")
    parser.add_argument("--runs", type=Path, required=True, help="folder of the training runs (weights; git-ignored)")
    parser.add_argument("--override", action="append", default=[], help="key=value passed to every run")
    parser.add_argument("--note", action="append", default=[], help="a line written under the table")
    parser.add_argument("--reuse", action="append", default=[], metavar="LABEL=DIR",
                        help="take LABEL's finished runs from DIR/seed<S> (a package's reproduce folder)")  # fmt: skip
    parser.add_argument("--level", action="append", default=[], metavar="LABEL=DIR",
                        help="a reference this plan does not train (DIR/seed*/results.json, same model and panel), "
                        "e.g. Untrained=sdar/results/cpu/untrained: a line under the table, a dashed line in the plot")  # fmt: skip
    ns = parser.parse_args(argv)
    setup_logging()
    entries = [parse_entry(e) for e in ns.entries]
    seeds = [int(s) for s in ns.seeds.split(",")]
    reuse = dict(r.split("=", 1) for r in ns.reuse)
    unknown = set(reuse) - {entry[0] for entry in entries}
    if unknown:
        raise SystemExit(f"--reuse names labels that are not entries: {', '.join(sorted(unknown))}.")
    payloads: dict[str, list[dict]] = {}
    sources: dict[str, list[str]] = {}
    precision = cpu_precision(ns.override)  # as the packages' CPU plans: bf16 autocast where the CPU has it
    for label, package, config, method, own in entries:
        overrides = [*ns.override, *own]
        for seed in seeds:
            run = ns.runs / label / f"seed{seed}"
            done = Path(reuse[label]) / f"seed{seed}" if label in reuse else None
            if not (run / "results.json").exists():
                if done is not None and reusable(done / "results.json", method, seed, overrides):
                    logger.info(f"compare: {label} seed {seed}: reusing the finished run {done}")
                    run = done
                else:
                    train(package, config, method, seed, run, [*precision, *overrides])
            payloads.setdefault(label, []).append(json.loads((run / "results.json").read_text()))
            sources.setdefault(label, []).append(str(run))
    same_setting(payloads)
    levels = reference_levels(ns.level, payloads)
    text = (table(payloads, ns.env) + level_lines(levels) + paired(sources, "GRPO")
            + "".join(f"\n\n{note}" for note in ns.note))  # fmt: skip
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "compare.md").write_text(text + "\n")
    summary = {label: [{"run": src, **{k: p[k] for k in ("seed", "commit", "final", "curve")}}
                       for p, src in zip(runs, sources[label], strict=True)]
               for label, runs in payloads.items()}  # fmt: skip
    (ns.out / "compare.json").write_text(json.dumps(summary, indent=2) + "\n")
    series = {
        label: [[(pt["rollouts"], 100 * pt["success_rate_mean"]) for pt in p["curve"]] for p in runs]
        for label, runs in payloads.items()
    }
    lines = {f"{label} (n={len(runs)})": 100 * statistics.fmean(p["final"]["success_rate_mean"] for p in runs)
             for label, (_, runs) in levels.items()}  # fmt: skip
    plot_curves(series, ns.out / "learning_curves.png", "rollouts", "held-out success %", f"{ns.env}: same model, "
                f"seeds {ns.seeds}, fixed panel", lines)  # fmt: skip
    print(text)


if __name__ == "__main__":
    main()
