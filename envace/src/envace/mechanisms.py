"""`envace mechanisms`: what EnvACE acts on, measured on the CPU task before and after training.

EnvACE trains the caller on its own rehearsed tool responses (official `mcp_tool.py::execute`@173e941 with
`tool_return_mode="agent"`): the rehearsal role's outputs are the caller's only view of the tools during training,
and "nothing supervises the rehearsed responses directly — the dynamics are learned because acting on bad dynamics
loses reward" (project page, https://within-yao.github.io/EnvACE). The quantity the method acts on is therefore how
often a rehearsal is usable at all (the strict `<execution_result>` parse that ends an episode when it fails) and
how often it says what the real tool would have said. Per model (the warm-started start point and EnvACE-final), with
the package's trainer built on it (`cli.build_trainer`, the config with only the model swapped):

- the panel played as the trainer's evaluation plays it (`EnvACETrainer.evaluate_panel`, the config's evaluation
  temperature and top-p), with the policy in its rehearsal role for every caller tool call (the training collector,
  `make_collector(..., "agent")`, judged by the config's judge); for each rehearsed call, the real back end's
  response to the same call (`rehearsal.real_tool_response`) and the comparison below;
- the same panel with the real tools (`make_collector(..., "real")`: the committed execution the CPU table reports),
  so that the episode reward under rehearsal stands next to the reward under the real tools, instance by instance.

Comparison of one call, on decoded JSON (the strict parser's `parse_execution_block` of the rehearsal, the back end's
result): `match` is Python equality of the two values (key order, whitespace and escaping do not count, 2 == 2.0);
`field_agreement` = |{k in both: equal values}| / |keys of either| over the top-level keys (1 iff they match); `key
overlap` = |keys in both| / |keys of either|; a rehearsal that does not parse, or is not an object, scores 0 on all
three. `valid` is the training rows' `is_action_valid` (parsed and not an `error_tool_call` object; 1 -
`envace/invalid_simulator_ratio`). The results file records the panel's instances, the command and the commit at
process start.
"""

import json
import logging
import math
from pathlib import Path

from agentrl_shared.config import ConfigError
from agentrl_shared.evaluation import panel_identity
from agentrl_shared.mechanisms import fmt, measure_models
from agentrl_shared.report import markdown_table

from .parsing import ToolCall, is_error_result, parse_execution_block, parse_tool_calls
from .rehearsal import Trajectory, real_tool_response


logger = logging.getLogger(__name__)
LABELS = {"untrained": "untrained (warm start, no RL)", "envace": "EnvACE-final"}
SPLITS = ("all", "won", "failed", "few_shot", "other")  # "won": R = 1 under rehearsal; "few_shot": call in the prompt


def models_of(cfg: dict, runs: Path, seed: int) -> dict[str, str]:
    """`{"untrained": ..., "envace": ...}` of the CPU plan in `runs`: the warm start's `<runs>/cpu/warmstart/
    seed<seed>/final` when the config has one (else the config's model), and `<runs>/cpu/envace/seed<seed>/final`
    when it exists (else the row stays not run); a missing warm start is a configuration error naming the command."""
    out = {"untrained": cfg["model"].name_or_path}
    if cfg["warmstart"].num_tasks > 0:
        warm = runs / "cpu" / "warmstart" / f"seed{seed}" / "final"
        if not (warm / "config.json").is_file():
            raise ConfigError(f"no warm-started model at {warm}: run `envace reproduce --output {runs}` (its first "
                              "run, cpu/warmstart, writes it), or pass the --runs folder that holds it.")  # fmt: skip
        out["untrained"] = str(warm)
    final = runs / "cpu" / "envace" / f"seed{seed}" / "final"
    if (final / "config.json").is_file():
        out["envace"] = str(final)
    else:
        logger.info(f"mechanisms: no EnvACE-final checkpoint at {final} (`envace reproduce` trains it); not run")
    return out


def rehearsed_calls(traj: Trajectory, max_parallel_calls: int) -> list[tuple[ToolCall, object]]:
    """(call, rehearsal row) of every rehearsal generation of an episode, in order: each caller row's calls as the
    collector parsed them (`parse_tool_calls`, capped by `max_parallel_calls`, 0 = none), rehearsed one per row."""
    out, pending = [], []
    for row in traj.rows:
        if row.role == "caller":
            calls, _ = parse_tool_calls(row.completion_text)
            pending = calls[: max_parallel_calls or len(calls)]
        else:
            out.append((pending.pop(0), row))
    return out


def compare(rehearsed, real) -> dict[str, float | bool]:
    """`match`, `field_agreement` and `key_overlap` of a decoded rehearsal (None: it did not parse) and the real
    result (module docstring)."""
    match = rehearsed is not None and rehearsed == real
    if not (isinstance(rehearsed, dict) and isinstance(real, dict)):
        return {"match": match, "field_agreement": float(match), "key_overlap": float(match)}
    keys = rehearsed.keys() | real.keys()
    both = rehearsed.keys() & real.keys()
    return {"match": match, "field_agreement": sum(rehearsed[k] == real[k] for k in both) / max(len(keys), 1),
            "key_overlap": len(both) / max(len(keys), 1)}  # fmt: skip


def call_records(played: list[tuple[Trajectory, int]], max_parallel_calls: int) -> list[dict]:
    """One record per rehearsed call of the panel's (episode, seed) pairs."""
    records = []
    for traj, seed in played:
        few_shot = traj.task["tool_call_response_map"]
        for call, row in rehearsed_calls(traj, max_parallel_calls):
            rehearsed, _ = parse_execution_block(row.completion_text)
            content, real_error = real_tool_response(traj.task, call)
            real = json.loads(content)
            records.append({
                "task_id": traj.task["task_id"], "seed": seed, "won": traj.success,
                "call": {"name": call.name, "arguments": call.arguments},
                "in_few_shot": any(args == call.arguments for args, _ in few_shot.get(call.name, [])),
                "rehearsal": row.completion_text, "parsed": rehearsed is not None, "valid": row.is_action_valid,
                "rehearsed_error": is_error_result(rehearsed), "real": real, "real_error": real_error,
                **compare(rehearsed, real),
            })  # fmt: skip
    return records


def call_summary(records: list[dict]) -> dict[str, float]:
    """Counts and rates of a set of call records: parsed, valid, match, field agreement, key overlap, the share of
    calls whose rehearsal rejects (an `error_tool_call` object) exactly when the real tool does (over parsed ones),
    and the share of calls in the prompt's few-shot; NaN rates when there are none."""

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values) if values else math.nan

    parsed = [r for r in records if r["parsed"]]
    return {
        "calls": len(records),
        "parsed": mean(r["parsed"] for r in records),
        "valid": mean(r["valid"] for r in records),
        "match": mean(r["match"] for r in records),
        "field_agreement": mean(r["field_agreement"] for r in records),
        "key_overlap": mean(r["key_overlap"] for r in records),
        "error_agreement_of_parsed": mean(r["rehearsed_error"] == r["real_error"] for r in parsed),
        "in_few_shot": mean(r["in_few_shot"] for r in records),
    }


def split_summaries(records: list[dict]) -> dict[str, dict]:
    """`call_summary` of all calls, of won and failed episodes (under rehearsal) and of calls in / not in the
    few-shot."""
    keep = {"all": lambda r: True, "won": lambda r: r["won"], "failed": lambda r: not r["won"],
            "few_shot": lambda r: r["in_few_shot"], "other": lambda r: not r["in_few_shot"]}  # fmt: skip
    return {name: call_summary([r for r in records if keep[name](r)]) for name in SPLITS}


def paired(rehearsal: list[dict], real: list[dict]) -> dict[str, int]:
    """Instances (task, seed) by success under rehearsal and under the real tools."""
    won_real = {(r["task_id"], r["seed"]): r["success"] for r in real}
    out = {"both": 0, "rehearsal_only": 0, "real_only": 0, "neither": 0}
    for r in rehearsal:
        a, b = r["success"], won_real[(r["task_id"], r["seed"])]
        out["both" if a and b else "rehearsal_only" if a else "real_only" if b else "neither"] += 1
    return out


def measure_panel(trainer, panel: list[dict], cfg: dict) -> dict:
    """One model's entry (without provenance): the panel under rehearsal and under the real tools, the rehearsed
    calls' records and their summaries."""
    from .cli import play_panel, summarize, trajectory_record
    from .trainer import make_collector

    args, env, tok = cfg["trainer"], cfg["env"], trainer.processing_class
    played = play_panel(trainer, panel, env.eval_seeds, make_collector(args, env, tok, "agent"))
    records = call_records(played, env.max_parallel_calls)
    rehearsal = [trajectory_record(t, s) for t, s in played]
    real = [trajectory_record(t, s) for t, s in play_panel(trainer, panel, env.eval_seeds,
                                                           make_collector(args, env, tok, "real"))]  # fmt: skip
    slim = ("task_id", "seed", "reward", "success", "stop_reason")
    return {
        "calls": split_summaries(records),
        "rehearsal": {"summary": summarize(rehearsal, env.eval_seeds),
                      "episodes": [{k: r[k] for k in slim} for r in rehearsal]},
        "real": {"summary": summarize(real, env.eval_seeds), "episodes": [{k: r[k] for k in slim} for r in real]},
        "paired": paired(rehearsal, real),
        "call_records": records,
    }  # fmt: skip


def mechanisms(config: str, runs: Path, seed: int, output: Path, overrides: list[str]) -> dict:
    """The check for the untrained (warm-started) model and, when `runs` holds it, EnvACE-final (`models_of`), each
    with the config and only the model swapped (`agentrl_shared.mechanisms.measure_models`: `<output>/mechanisms.json`
    after each model, a rerun on the same panel keeps the models an earlier process finished); returns the payload."""
    from .cli import build_trainer, load

    command = ["envace", "mechanisms", "--config", config, "--runs", str(runs), "--seed", str(seed), "--output",
               str(output), *overrides]  # fmt: skip

    def prepare(cfg: dict):
        env = cfg["env"]
        trainer, panel = build_trainer(cfg)  # the panel is the prompt-filtered evaluation tasks (the tokenizer's)
        record = {"split": "eval", "task_ids": [t["task_id"] for t in panel], "seeds": env.eval_seeds,
                  "instances": [[t["task_id"], s] for s in env.eval_seeds for t in panel],
                  "identity": panel_identity(panel, env.eval_seeds), "temperature": env.eval_temperature,
                  "top_p": env.eval_top_p}  # fmt: skip

        def measure():
            figures = measure_panel(trainer, panel, cfg)
            calls = figures["calls"]["all"]
            success = {k: figures[k]["summary"]["success_mean"] for k in ("rehearsal", "real")}
            logger.info(f"mechanisms: {calls['calls']} rehearsed calls, parsed {calls['parsed']:.3f}, match "
                        f"{calls['match']:.3f}; success with rehearsal {success['rehearsal']:.3f}, with real tools "
                        f"{success['real']:.3f}")  # fmt: skip
            return trainer, figures

        return record, measure

    return measure_models(models_of(load(config, overrides), runs, seed), lambda extra: load(config, [*overrides, *extra]),
                          output, command, prepare)  # fmt: skip


def table(payload: dict | None) -> str:
    """The README's mechanisms table (`envace report`): one row per model, `not run` where the file has none."""

    def pct(split: str, key: str):
        return lambda e: fmt(100 * e["calls"][split][key], 1)

    def per(key: str, splits=("all", "won", "failed")):
        return lambda e: " / ".join(pct(s, key)(e) for s in splits)

    def episodes(key: str):
        return lambda e: f"{fmt(100 * e['rehearsal']['summary'][key], 1)} / {fmt(100 * e['real']['summary'][key], 1)}"

    columns = [
        ("rehearsed calls (all / won / failed)", lambda e: " / ".join(str(e["calls"][s]["calls"]) for s in
                                                                      ("all", "won", "failed"))),
        ("parsed % (all / won / failed)", per("parsed")),
        ("valid % (parsed, no error object)", pct("all", "valid")),
        ("match % (all / won / failed)", per("match")),
        ("match %, call in few-shot / other", per("match", ("few_shot", "other"))),
        ("field agreement % / key overlap %", lambda e: f"{pct('all', 'field_agreement')(e)} / "
                                                        f"{pct('all', 'key_overlap')(e)}"),
        ("success % rehearsal / real tools", episodes("success_mean")),
        ("reward R % rehearsal / real tools", episodes("reward_mean")),
    ]  # fmt: skip
    header = ["Model", *[h for h, _ in columns], "commit"]
    done = payload["models"] if payload else {}
    rows = [[LABELS[label], *[cell(done[label]) for _, cell in columns], done[label]["commit"]] if label in done
            else [LABELS[label]] + ["not run"] * len(columns) + ["-"] for label in LABELS]  # fmt: skip
    if not done:
        return markdown_table(header, rows)
    p = payload["panel"]
    commands = sorted({e["command"] for e in done.values()})
    return (f"{markdown_table(header, rows)}\n\nPanel: {len(p['task_ids'])} generated tasks (`{p['task_ids'][0]}` .. "
            f"`{p['task_ids'][-1]}`), seeds {p['seeds']}, temperature {p['temperature']}, top-p {p['top_p']}; "
            "won / failed: the episode's R = 1 under rehearsal; commit: at process start. Command: "
            + "; ".join(f"`{c}`" for c in commands) + ".")  # fmt: skip
