"""`envace tune`: the CPU plan's learning rate, chosen on a validation split, never on the panel.

At CPU scale the rehearsal role is what breaks first: on the one-seed CPU run at lr 2e-5 its invalid rate
(`envace/invalid_simulator_ratio`, unparseable or error rehearsals) went from 0.25 to 1.0 in 4 rollouts, and an
invalid rehearsal ends its episode with reward 0 (official `tool_return_mode="agent"`: the caller's only view of the
tools in training is its own rehearsal). So each candidate learning rate trains EnvACE from the same warm start
(the CPU plan's `cpu/warmstart/seed<seed>`, written first when missing, exactly as `envace reproduce` writes it) with
the config's CPU plan, and is then measured on the generated validation split (`env.num_val_tasks` tasks drawn from
their own seed, disjoint from the training, panel and warm-start tasks): the rehearsal role's valid rate on every
rehearsed call (`mechanisms.measure_panel`: parsed and not an error object), and the episode reward with the real
tools (the committed execution the CPU table reports). The warm start itself is measured the same way (`tune_warmstart`).

Choice (`choose`): among the learning rates whose validation valid rate stays at least `KEEP_VALID` x the warm
start's, the highest real-tool reward (ties: the higher valid rate, then the smaller learning rate); when none keeps
it, the highest valid rate. Runs go to `<output>/cpu/tune_lr<lr>/seed<seed>` (a finished one is not redone); `envace
report --runs <output>` files them and the README's tune table. The CPU config's `trainer.learning_rate` is then set
to the chosen value by hand, citing the table (the plan never reads these files).
"""

import json
import logging
from pathlib import Path

from agentrl_shared.config import ConfigError
from agentrl_shared.report import markdown_table


logger = logging.getLogger(__name__)
KEEP_VALID = 0.9  # a candidate "keeps the rehearsal role valid" at >= 90 % of the warm start's validation valid rate


def validation_summary(trainer, tasks: list[dict], cfg: dict) -> dict:
    """One model on the validation split (`mechanisms.measure_panel`: under rehearsal and with the real tools):
    the real-tool `reward_mean` / `success_mean` (what `run_training` logs) and the rehearsal role's figures."""
    from .mechanisms import measure_panel

    figures = measure_panel(trainer, tasks, cfg)
    calls, real, rehearsal = figures["calls"]["all"], figures["real"]["summary"], figures["rehearsal"]["summary"]
    return {
        "reward_mean": real["reward_mean"],
        "success_mean": real["success_mean"],
        "rehearsal_calls": calls["calls"],
        "rehearsal_parsed": calls["parsed"],
        "rehearsal_valid": calls["valid"],
        "rehearsal_match": calls["match"],
        "rehearsal_reward_mean": rehearsal["reward_mean"],
        "rehearsal_success_mean": rehearsal["success_mean"],
        "task_ids": [t["task_id"] for t in tasks],
    }


def choose(reference: dict, candidates: dict[float, dict], keep: float = KEEP_VALID) -> float:
    """The learning rate to use (module docstring): `reference` is the warm start's validation summary,
    `candidates` {lr: validation summary after training}."""
    floor = keep * reference["rehearsal_valid"]
    kept = [lr for lr, s in candidates.items() if s["rehearsal_valid"] >= floor]
    if not kept:
        return max(candidates, key=lambda lr: (candidates[lr]["rehearsal_valid"], -lr))
    return max(kept, key=lambda lr: (candidates[lr]["reward_mean"], candidates[lr]["rehearsal_valid"], -lr))


def method_name(lr: float) -> str:
    return f"tune_lr{lr:g}"


def tune(config: str, lrs: list[float], seed: int, output: Path, overrides: list[str]) -> float:
    """Measure the warm start and one EnvACE run per learning rate on the validation split; returns the choice."""
    from agentrl_shared.cli import resume_args
    from agentrl_shared.evaluation import write_results

    from .cli import build_trainer, load, train, warm_start

    base = load(config, overrides)
    env = base["env"]
    if env.source != "generated" or env.num_val_tasks <= 0:
        raise ConfigError("envace tune needs generated tasks with a validation split: env.source=generated and "
                          "env.num_val_tasks > 0 (the CPU config has 16).")  # fmt: skip
    if not lrs:
        raise ConfigError("envace tune needs at least one learning rate: --lrs 2e-5,1e-5,5e-6.")
    fixed = [*overrides, f"trainer.seed={seed}"]
    model: list[str] = []
    if base["warmstart"].num_tasks > 0:
        warm = output / "cpu" / "warmstart" / f"seed{seed}"
        if not (warm / "results.json").exists():
            warm_start(load(config, [*fixed, f"trainer.output_dir={warm}"]), "warmstart")
        model = [f"model.name_or_path={warm / 'final'}"]
    ref_run = output / "cpu" / "tune_warmstart" / f"seed{seed}"
    if not (ref_run / "results.json").exists():
        cfg = load(config, [*fixed, *model])
        trainer, tasks = build_trainer(cfg, "val")
        summary = validation_summary(trainer, tasks, cfg)
        if trainer.accelerator.is_main_process:
            write_results(ref_run / "results.json", {"method": "tune_warmstart", "seed": seed, "learning_rate": 0.0,
                                                     "model": cfg["model"].name_or_path, "final": summary})  # fmt: skip
        del trainer
    for lr in lrs:
        run = output / "cpu" / method_name(lr) / f"seed{seed}"
        if (run / "results.json").exists():
            logger.info(f"tune: lr {lr:g} finished earlier in {run}, not redone")
            continue
        cfg = load(config, [*fixed, *model, f"trainer.learning_rate={lr}", f"trainer.output_dir={run}",
                            *resume_args(run)])  # fmt: skip
        train(cfg, method_name(lr), output, split="val")
    payloads = load_tune(output / "cpu", seed)
    lr = choose(payloads["reference"], payloads["candidates"])
    logger.info(f"tune: learning rate {lr:g} (validation split, seed {seed}); `envace report --runs {output}` files "
                "the table")  # fmt: skip
    return lr


def load_tune(folder: Path, seed: int) -> dict:
    """`{"reference": warm start summary, "candidates": {lr: summary}, "payloads": [...]}` of one seed's tune runs
    under a runs or results folder's `cpu/`."""
    payloads = [json.loads(p.read_text()) for p in sorted(folder.glob(f"tune_*/seed{seed}/results.json"))]
    ref = [p for p in payloads if p["method"] == "tune_warmstart"]
    cands = {p["config"]["trainer"]["learning_rate"]: p["final"] for p in payloads if p["method"] != "tune_warmstart"}
    return {"reference": ref[0]["final"] if ref else None, "candidates": cands, "payloads": payloads}


def table(folder: Path, seed: int = 0) -> str:
    """The README's tune table from the filed `cpu/tune_*` results (`not run` when there are none)."""
    runs = load_tune(folder, seed)
    if runs["reference"] is None or not runs["candidates"]:
        return "not run"
    chosen = choose(runs["reference"], runs["candidates"])

    def row(label: str, s: dict, commit: str) -> list[str]:
        return [label, f"{100 * s['rehearsal_valid']:.1f}", f"{100 * s['rehearsal_parsed']:.1f}",
                f"{100 * s['rehearsal_match']:.1f}", f"{100 * s['reward_mean']:.1f}", f"{100 * s['success_mean']:.1f}",
                commit]  # fmt: skip

    commits = {p["method"]: p["commit"] for p in runs["payloads"]}
    rows = [row("warm start (no RL)", runs["reference"], commits["tune_warmstart"])]
    for lr in sorted(runs["candidates"], reverse=True):
        label = f"EnvACE, lr {lr:g}" + (" (chosen)" if lr == chosen else "")
        rows.append(row(label, runs["candidates"][lr], commits[method_name(lr)]))
    header = ["Model", "rehearsal valid %", "parsed %", "match real tool %", "reward R % (real tools)",
              "success % (real tools)", "commit"]  # fmt: skip
    ids = runs["reference"]["task_ids"]
    return (
        f"{markdown_table(header, rows)}\n\nValidation split: {len(ids)} generated tasks (`{ids[0]}` .. "
        f"`{ids[-1]}`), seed {seed}; chosen: valid rate >= {KEEP_VALID} x the warm start's "
        f"({100 * KEEP_VALID * runs['reference']['rehearsal_valid']:.1f} %), then the highest reward with the real "
        "tools (`envace.tune.choose`). Command: `envace tune --lrs "
        f"{','.join(f'{lr:g}' for lr in sorted(runs['candidates'], reverse=True))} --seed {seed}`."
    )
