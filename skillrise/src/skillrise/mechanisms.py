"""`skillrise mechanisms`: what SkillRise acts on, measured on the CPU task before and after training.

SkillRise trains one policy to curate a skill document between the K tasks of a trial and to solve the later tasks
with it in context; the curate rows are credited only through the later tasks' success (README "What the paper
does"). The quantity the method acts on is therefore the carried document's effect on success at positions 2..K. The
carried document is the trial's `skills[row]`: it starts empty at every trial (`reset`), is replaced by the last
parsed `<skill>` block of each curate phase and kept on a parse failure (`step(phase='curate')`), and is read by the
next solve prompt; with `carry_mode='none'` no curate phase runs and every solve prompt reads the empty document
(`build_text_obs`: "none (GRPO/GiGPO) sees empty skill") (official `agent_system/environments/skillrise_alfworld/
env_manager.py`; the phases in `agent_system/multi_turn_rollout/skillrise_rollout_loop.py::vanilla_multi_turn_loop`,
lyq1119/SkillRise-reproduction-and-refinement@79bbd91). Our `trial.TrialRunner` keeps the same switch, so withholding
the document needs no new code: the same trials are played by the trainer's own evaluation twice,

- with the document: `carry_mode="skill"`, as SkillRise is validated (`cli.play_panels`, `SkillRiseTrainer.
  evaluate_trials`, the config's panels, seeds and evaluation temperature);
- without it: `carry_mode="none"`, every position shown the initial (empty) document, no curate phase,

per model (the config's model untrained, and GRPO-final and SkillRise-final of the CPU plan when `--runs` holds them),
each with the package's trainer built on it (`cli.build_trainer`, the config with only the model swapped). Position 1
is shown the empty document in both plays, so it is the control: under greedy decoding its two outcomes are equal.

Success at position p is the evaluation's own (`trial.summarize_trials`): repeat mode (the same task K times) pass@p,
solved within the first p attempts; cross mode (K different tasks of a family) won at p, padded positions left out.
Trials are paired by their tasks and seed; a trial with an environment failure in either play is left out. The
results file records the panels' trials and seeds, the command and the commit at process start.
"""

import logging
from pathlib import Path

from agentrl_shared.mechanisms import fmt, measure_models
from agentrl_shared.report import markdown_table

from .trial import summarize_trials


logger = logging.getLogger(__name__)
LABELS = {"untrained": "untrained", "grpo": "GRPO-final", "skillrise": "SkillRise-final"}
PLAYS = {"with": "skill", "without": "none"}  # the carry mode of each play (official `carry_mode`)
PROTOCOLS = {"repeat": "repeat (pass@p)", "cross": "cross (won at p)"}


def models_of(cfg: dict, runs: Path, seed: int) -> dict[str, str]:
    """`{"untrained": ..., "grpo": ..., "skillrise": ...}`: the untrained model is the one the CPU plan's methods start
    from, its curation warm start `<runs>/cpu/warmstart/seed<seed>/final` where it exists (README deviation 10), else
    the config's model; the trained models are the CPU plan's `<runs>/cpu/<method>/seed<seed>/final` where they exist
    (`skillrise reproduce` trains them); a missing one is left out (its row stays not run)."""
    warm = runs / "cpu" / "warmstart" / f"seed{seed}" / "final"
    out = {"untrained": str(warm) if (warm / "config.json").is_file() else cfg["model"].name_or_path}
    for method in ("grpo", "skillrise"):
        final = runs / "cpu" / method / f"seed{seed}" / "final"
        if (final / "config.json").is_file():
            out[method] = str(final)
        else:
            logger.info(f"mechanisms: no {LABELS[method]} checkpoint at {final} (`skillrise reproduce` trains it)")
    return out


def trial_key(record: dict) -> tuple:
    return tuple(record["task_ids"]), record["seed"]


def outcome(record: dict, mode: str, p: int) -> bool | None:
    """A trial's success at position p as `summarize_trials` counts it (repeat: pass@(p+1); cross: won at p); None
    where it is not counted (an environment failure, a padded cross position)."""
    if record["failed"] or (mode == "cross" and record["padded"][p]):
        return None
    return any(record["won"][: p + 1]) if mode == "repeat" else record["won"][p]


def positions(with_doc: list[dict], without_doc: list[dict], mode: str) -> list[dict]:
    """Per position p = 1..K: the paired trials (counted in both plays), their success with and without the document,
    the difference, and the paired counts (both / with only / without only / neither); with the document, the share
    of paired trials shown a non-empty one at p and its mean length."""
    without = {trial_key(r): r for r in without_doc}
    out = []
    for p in range(len(with_doc[0]["won"])):
        counts = {"both": 0, "with_only": 0, "without_only": 0, "neither": 0}
        shown = []
        for r in with_doc:
            a, b = outcome(r, mode, p), outcome(without[trial_key(r)], mode, p)
            if a is None or b is None:
                continue
            counts["both" if a and b else "with_only" if a else "without_only" if b else "neither"] += 1
            shown.append(len(r["documents"][p].strip()))
        n = sum(counts.values())
        won_with, won_without = counts["both"] + counts["with_only"], counts["both"] + counts["without_only"]
        out.append({
            "position": p + 1, "trials": n, "won_with": won_with, "won_without": won_without,
            "success_with": won_with / n if n else float("nan"),
            "success_without": won_without / n if n else float("nan"),
            # the mean paired difference (with - without, each trial 1, 0 or -1) = difference of the paired rates
            "difference": (won_with - won_without) / n if n else float("nan"), **counts,
            "document_shown": sum(c > 0 for c in shown) / n if n else float("nan"),
            "document_chars": sum(shown) / n if n else float("nan"),
        })  # fmt: skip
    return out


def measure_panels(trainer, panels: dict[str, list[list[dict]]], cfg: dict) -> dict:
    """One model's entry (without provenance): every panel played with and without the document, the evaluation's
    summaries of both, the per-position comparison and the trial records."""
    import torch

    from .cli import eval_seeds, play_panels

    seeds, temperature = eval_seeds(cfg), cfg["env"].eval_temperature
    played = {}
    for play, carry in PLAYS.items():
        torch.manual_seed(cfg["trainer"].seed)  # both plays start from the same sampler state (T > 0)
        played[play] = play_panels(trainer, panels, seeds, temperature, carry)
    return {
        "summary": {play: {mode: summarize_trials(records, mode, seeds) for mode, records in by_mode.items()}
                    for play, by_mode in played.items()},
        "positions": {mode: positions(played["with"][mode], played["without"][mode], mode) for mode in panels},
        "trials": played,
    }  # fmt: skip


def mechanisms(config: str, runs: Path, seed: int, output: Path, overrides: list[str]) -> dict:
    """The check for the untrained model and, where `runs` holds them, GRPO-final and SkillRise-final (`models_of`),
    each with the config and only the model swapped (`agentrl_shared.mechanisms.measure_models`: `<output>/
    mechanisms.json` after each model, a rerun on the same panels keeps the models an earlier process finished);
    returns the payload."""
    from .cli import build_trainer, eval_seeds, load, panel_drawer

    command = ["skillrise", "mechanisms", "--config", config, "--runs", str(runs), "--seed", str(seed), "--output",
               str(output), *overrides]  # fmt: skip

    def prepare(cfg: dict):
        env, seeds = cfg["env"], eval_seeds(cfg)
        panels = panel_drawer(cfg)()  # the first validation's panels (`random`: its first draw)
        record = {
            "split": env.eval_split, "K": env.eval_k, "seeds": seeds, "temperature": env.eval_temperature,
            "panel": env.eval_panel,
            "instances": [[f"{mode}:" + ",".join(t["task_id"] for t in g), s] for mode, groups in panels.items()
                          for s in seeds for g in groups],
        }  # fmt: skip

        def measure():
            trainer = build_trainer(cfg)
            figures = measure_panels(trainer, panels, cfg)
            trainer.pool.close()
            for mode, rows in figures["positions"].items():
                logger.info(f"mechanisms {mode}: with / without the document " + ", ".join(
                    f"p{r['position']} {r['success_with']:.3f} / {r['success_without']:.3f}" for r in rows))  # fmt: skip
            return trainer, figures

        return record, measure

    return measure_models(models_of(load(config, overrides), runs, seed), lambda extra: load(config, [*overrides, *extra]),
                          output, command, prepare)  # fmt: skip


def table(payload: dict | None) -> str:
    """The README's mechanisms table (`skillrise report`): one row per model, protocol and position; one `not run`
    row for a model the file lacks (or without a file)."""
    header = ["Model", "Protocol", "Position", "paired trials", "success % with document", "without document",
              "difference (pts)", "trials better / worse with document", "shown a document % (mean chars)", "commit"]  # fmt: skip
    done = payload["models"] if payload else {}
    rows = []
    for label, name in LABELS.items():
        if label not in done:
            rows.append([name] + ["not run"] * (len(header) - 2) + ["-"])
            continue
        for mode, positions_ in done[label]["positions"].items():
            for r in positions_:
                rows.append([name, PROTOCOLS[mode], str(r["position"]), str(r["trials"]),
                             fmt(100 * r["success_with"], 1), fmt(100 * r["success_without"], 1),
                             f"{100 * r['difference']:+.1f}" if r["trials"] else "n/a",
                             f"{r['with_only']} / {r['without_only']}",
                             f"{fmt(100 * r['document_shown'], 1)} ({fmt(r['document_chars'], 0)})",
                             done[label]["commit"]])  # fmt: skip
    if not done:
        return markdown_table(header, rows)
    p = payload["panel"]
    counts = {mode: sum(i[0].startswith(f"{mode}:") for i in p["instances"]) for mode in PROTOCOLS}
    commands = sorted({e["command"] for e in done.values()})
    return (f"{markdown_table(header, rows)}\n\nPanel: {p['split']}, K = {p['K']} ({p['panel']}): "
            + ", ".join(f"{n} {mode} trials" for mode, n in counts.items() if n)
            + f" (seeds {p['seeds']}), temperature {p['temperature']}; without document: carry_mode none "
            "(the empty document at every position); commit: at process start. Command: "
            + "; ".join(f"`{c}`" for c in commands) + ".")  # fmt: skip
