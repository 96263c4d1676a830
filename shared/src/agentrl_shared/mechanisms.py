"""Mechanism check of a skill-conditioned self-teacher (SDAR, AgentOPSD) on a fixed panel, before and after training.

SDAR (arXiv 2605.15155, section 3) and AgentOPSD (arXiv 2608.05987) act on one quantity: the per-token log-prob gap
delta_t = l^T_t - l^S_t between the policy given the privileged skill block (the teacher prompt the trainer builds,
`MultiTurnGRPOTrainer._teacher_prompt`) and the policy on its plain prompt, on the student's own sampled tokens. If
the teacher is no better with skills, or the gap does not separate the student's failed turns from its won ones,
there is nothing for SDAR's gate or AgentOPSD's belief to act on. Per model (untrained, GRPO-final, method-final),
with the package's own trainer built on that model:

- the student's panel success (plain prompt) and the teacher's (the same policy acting on the teacher prompt), both
  played as the trainer plays its panel (`MultiTurnGRPOTrainer._evaluate_items`, the config's temperature);
- delta on the student's panel tokens, from the trainer's own forwards: `_logps` (the student, TRL's
  `_get_per_token_logps_and_entropies`) and `_teacher_row_logps` (the teacher, incl. the shared-prefix path), in
  chunks of `log_prob_micro_batch_rows` rows (`_row_logps`), as a rollout's no-grad forwards run;
- the package's derived quantity (`analyse`: SDAR's gate, AgentOPSD's belief and advantage weights), computed by the
  package's own loss / credit functions on those tensors.

The results file records the panel's task ids and seeds, the command and the commit at process start.
"""

import json
import logging
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from .batch import plan_steps
from .config import ConfigError
from .provenance import git_commit, redact
from .rollout import Episode, RolloutCollector


logger = logging.getLogger(__name__)
RESULTS_FILE = "mechanisms.json"
QUANTILES = (0.1, 0.5, 0.9)


def checkpoints(runs: Path, method: str, seed: int = 0) -> dict[str, str]:
    """The trained models of a package's CPU plan: `{"grpo": <runs>/cpu/grpo/seed<seed>/final, method: ...}`; a
    missing one is a configuration error naming the command that trains it."""
    out = {}
    for label in ("grpo", method):
        path = runs / "cpu" / label / f"seed{seed}" / "final"
        if not (path / "config.json").is_file():
            raise ConfigError(f"no trained {label} checkpoint at {path}: run `make reproduce` of the package first "
                              "(or pass the --runs folder that holds its cpu/ runs).")  # fmt: skip
        out[label] = str(path)
    return out


def build_trainer(trainer_cls, cfg: dict):
    """The package's trainer on `cfg["model"]` exactly as `<pkg> train` builds it (tasks, tokenizer, model kwargs);
    it is never trained here, only its collectors, generation and forwards are used."""
    from transformers import AutoTokenizer

    from .cli import env_tasks, set_model_init_kwargs
    from .models import model_path

    args, env = cfg["trainer"], cfg["env"]
    path = model_path(cfg["model"].name_or_path)
    set_model_init_kwargs(args, cfg["model"])
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    return trainer_cls(path, args, env, env_tasks(env, env.train_split), processing_class=tok)


def play_panel(
    trainer, panel: list[dict], seeds: list[int], temperature: float
) -> tuple[list[Episode], list[Episode]]:
    """The panel played twice by the trainer's policy: as the student (plain prompts; every row also records its
    teacher prompt, as training rows do) and as the teacher acting itself (the teacher prompt as its own prompt)."""
    c = trainer.eval_collector
    common = {"pool": c.pool, "prompt": c.prompt, "tokenizer": c.tokenizer, "max_turns": c.max_turns,
              "max_prompt_length": c.max_prompt_length, "chat_template_kwargs": c.chat_template_kwargs}  # fmt: skip
    student = RolloutCollector(
        prompt_transform=c.prompt_transform, teacher_transform=trainer._teacher_prompt, **common
    )
    teacher = RolloutCollector(prompt_transform=trainer._teacher_prompt, **common)
    items = [(t, s) for s in seeds for t in panel]

    def play(collector):
        def chunk(part):
            return collector.collect([t for t, _ in part], list(range(len(part))), [s for _, s in part],
                                     trainer._generate, trainer._prompt_count)  # fmt: skip

        return trainer._evaluate_items(items, trainer.eval_batch_size, temperature, chunk)

    return play(student), play(teacher)


def row_logps(trainer, rows: list) -> list[tuple[Tensor, Tensor]]:
    """(student, teacher) log-probs of each row's completion tokens, each (C_row,), from the trainer's own no-grad
    forwards of a rollout (`_row_logps` with `_logps`, and `_teacher_row_logps`: chunks of
    `log_prob_micro_batch_rows` rows) on one rank, in the training precision, the model in eval mode (dropout-free
    models alike)."""
    from .trainer import TrainRow  # not at import time: `report` reads this module without TRL

    train_rows = [TrainRow(r.prompt_ids, r.completion_ids, True, 0.0, teacher_prompt_ids=r.teacher_prompt_ids)
                  for r in rows]  # fmt: skip
    plan = plan_steps([len(r.prompt_ids) + len(r.completion_ids) for r in train_rows],
                      [len(r.completion_ids) for r in train_rows], 1, trainer.args.micro_batch_rows, 1)  # fmt: skip
    was_training = trainer.model.training
    trainer.model.eval()
    with torch.no_grad(), trainer.accelerator.autocast():
        student = trainer._row_logps(train_rows, plan, trainer._logps_of(trainer.model), "mechanisms_student_s")
        teacher = trainer._teacher_row_logps(train_rows, plan)
    trainer.model.train(was_training)
    return [(student[i].float().cpu(), teacher[i].float().cpu()) for i in range(len(rows))]


def stack_rows(logps: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row (student, teacher) log-probs as right-padded (N, C) tensors and their (N, C) float mask."""
    C = max([len(s) for s, _ in logps] + [1])
    student, teacher, mask = torch.zeros(len(logps), C), torch.zeros(len(logps), C), torch.zeros(len(logps), C)
    for i, (s, t) in enumerate(logps):
        student[i, : len(s)], teacher[i, : len(t)], mask[i, : len(s)] = s, t, 1.0
    return student, teacher, mask


def distribution(values: Tensor) -> dict[str, float]:
    """Count, mean, population std, 10/50/90 % quantiles and the positive share of a 1-D tensor (NaN when empty)."""
    v = values.double()
    if v.numel() == 0:
        return {"n": 0, "mean": float("nan"), "std": float("nan"), "p10": float("nan"), "p50": float("nan"),
                "p90": float("nan"), "positive_ratio": float("nan")}  # fmt: skip
    q = torch.quantile(v, torch.tensor(QUANTILES, dtype=v.dtype)).tolist()
    return {"n": v.numel(), "mean": v.mean().item(), "std": v.std(unbiased=False).item(), "p10": q[0], "p50": q[1],
            "p90": q[2], "positive_ratio": (v > 0).double().mean().item()}  # fmt: skip


def row_labels(episodes: list[Episode]) -> tuple[list, Tensor, Tensor]:
    """The panel's rows in episode order, with (N,) bool `won` of their episode and (N,) int turn index."""
    rows = [r for e in episodes for r in e.rows]
    won = torch.tensor([e.won for e in episodes for _ in e.rows], dtype=torch.bool)
    turn = torch.tensor([r.turn_idx for r in rows], dtype=torch.long)
    return rows, won, turn


def gap_report(delta: Tensor, mask: Tensor, won: Tensor, turn: Tensor) -> dict[str, dict]:
    """delta = l^T - l^S over the student's tokens: all of them, those of won and of failed episodes, per turn.

    Args:
        delta, mask: (N, C). won: (N,) bool. turn: (N,) int.
    """
    m = mask.bool()
    out = {"all": distribution(delta[m]), "won": distribution(delta[m & won[:, None]]),
           "failed": distribution(delta[m & ~won[:, None]])}  # fmt: skip
    for k in sorted(set(turn.tolist())):
        out[f"turn{k + 1}"] = distribution(delta[m & (turn == k)[:, None]])
    # per row: the turn's summed gap (AgentOPSD's turn evidence e_k) of won and failed episodes
    per_row = (delta * mask).sum(-1)
    out["row_sum_won"], out["row_sum_failed"] = distribution(per_row[won]), distribution(per_row[~won])
    return out


def panel_success(episodes: list[Episode], seeds: list[int]) -> dict:
    """`evaluation.summarize` of the episodes, plus their records (task id, seed, won, actions)."""
    from .evaluation import episode_record, summarize

    records = [episode_record(e) for e in episodes]
    return {"summary": summarize(records, seeds),
            "episodes": [{k: r[k] for k in ("task_id", "task_type", "seed", "won", "actions")} for r in records]}  # fmt: skip


def measure_models(
    models: dict[str, str],
    load: Callable[[list[str]], dict],
    output: Path,
    command: list[str],
    prepare: Callable[[dict], tuple[dict, Callable[[], tuple[object, dict]]]],
) -> dict:
    """The loop of every package's check: for each of `models` (`{label: name_or_path}`, in that order) the package's
    config with only the model swapped (`load(overrides)`), then `prepare(cfg)` -> (the panel's record, `measure`),
    and `measure()` -> (the trainer it built, the model's figures). `<output>/mechanisms.json` is written after each
    model, on the main process only (a partial file says which models are done; a rerun on the same panel keeps them
    and runs the others, each entry with the commit and command of the process that wrote it). Returns the payload.
    """
    import gc

    from .evaluation import model_identity
    from .models import model_path

    commit, started = git_commit(), time.strftime("%Y-%m-%dT%H:%M:%S")  # at process start, before any run
    output.mkdir(parents=True, exist_ok=True)
    path = output / RESULTS_FILE
    payload: dict = {"commit": commit, "time": started, "command": shlex.join(command), "models": {}}
    for label, name in models.items():
        cfg = load([f"model.name_or_path={name}", f"trainer.output_dir={output / 'trainer' / label}"])
        payload["panel"], measure = prepare(cfg)
        earlier = json.loads(path.read_text()) if path.is_file() else {}
        if earlier.get("panel") == payload["panel"] and label in earlier["models"]:  # done by an earlier process
            kept = earlier["models"][label]
            payload["models"][label] = {"commit": earlier["commit"], "time": earlier["time"],
                                        "command": earlier["command"], **kept}  # fmt: skip
            logger.info(f"mechanisms {label}: kept from {path} (commit {payload['models'][label]['commit']})")
            continue
        t0 = time.perf_counter()
        trainer, figures = measure()
        entry = {"commit": commit, "time": started, "command": payload["command"], **model_identity(model_path(name)),
                 **figures, "seconds": time.perf_counter() - t0}  # fmt: skip
        payload["models"][label] = entry
        logger.info(f"mechanisms {label}: measured in {entry['seconds']:.0f}s")
        if trainer.accelerator.is_main_process:
            path.write_text(json.dumps(redact(payload), indent=2, default=str) + "\n")
        del trainer
        gc.collect()
    return payload


def run_mechanisms(
    trainer_cls,
    load: Callable[[list[str]], dict],
    models: dict[str, str],
    analyse: Callable[[object, list[Episode], list[tuple[Tensor, Tensor]]], dict],
    output: Path,
    command: list[str],
) -> dict:
    """The SDAR / AgentOPSD check for each of `models` (`measure_models`): student and teacher success on the panel,
    the gap on the student's tokens and the package's derived quantity, `analyse(trainer, student_episodes, logps)`
    from the rows' (student, teacher) log-probs. `load(overrides)` loads the package's config with overrides;
    `command`: the command line that asked for it (`<pkg> mechanisms ...`, recorded with the commit)."""
    from .cli import load_panel

    def prepare(cfg: dict):
        panel, seeds = load_panel(cfg["env"])
        record = {"split": cfg["env"].eval_split, "task_ids": [t["task_id"] for t in panel], "seeds": seeds,
                  "temperature": cfg["env"].eval_temperature}  # fmt: skip

        def measure():
            trainer = build_trainer(trainer_cls, cfg)
            student_eps, teacher_eps = play_panel(trainer, panel, seeds, cfg["env"].eval_temperature)
            rows, won, turn = row_labels(student_eps)
            logps = row_logps(trainer, rows)
            student, teacher, mask = stack_rows(logps)
            trainer.pool.close()
            figures = {
                "student": panel_success(student_eps, seeds),
                "teacher": panel_success(teacher_eps, seeds),
                "gap": gap_report(teacher - student, mask, won, turn),
                "method": analyse(trainer, student_eps, logps),
            }
            s, t = figures["student"]["summary"], figures["teacher"]["summary"]
            logger.info(f"mechanisms: student {s['success_rate_mean']:.3f}, teacher {t['success_rate_mean']:.3f}, "
                        f"gap mean {figures['gap']['all']['mean']:.3f}")  # fmt: skip
            return trainer, figures

        return record, measure

    return measure_models(models, load, output, command, prepare)


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"  # NaN: no tokens of that kind


def by_length(entry: dict) -> str:
    """Student and teacher success per TextRooms chain length (the summaries' `chain<L>_success_rate`); `-` for a
    panel without chains."""
    cells = []
    for who in ("student", "teacher"):
        summary = entry[who]["summary"]
        rates = [summary.get(f"chain{n}_success_rate") for n in (1, 2, 3, 4)]
        cells.append(" / ".join("-" if r is None else fmt(100 * r, 0) for r in rates))
    return " vs ".join(cells)


def mechanisms_table(payload: dict | None, labels: list[str], columns: list[tuple[str, Callable[[dict], str]]]) -> str:
    """The README table of a mechanisms file: one row per model of `labels`, the shared columns (student and teacher
    success, the gap's mean on all / won / failed tokens and its quantiles), then the package's `columns` (header,
    cell of a model entry), then the commit; `not run` for a model the file lacks (or without a file)."""
    from .report import markdown_table

    shared = [
        ("student success %", lambda e: fmt(100 * e["student"]["summary"]["success_rate_mean"], 1)),
        ("teacher success % (skill prompt, acting)", lambda e: fmt(100 * e["teacher"]["summary"]["success_rate_mean"], 1)),
        ("gap mean, all tokens", lambda e: fmt(e["gap"]["all"]["mean"], 3)),
        ("gap p10 / p50 / p90", lambda e: " / ".join(fmt(e["gap"]["all"][k], 3) for k in ("p10", "p50", "p90"))),
        ("gap mean, won / failed episodes", lambda e: f"{fmt(e['gap']['won']['mean'], 3)} / {fmt(e['gap']['failed']['mean'], 3)}"),
        ("student / teacher success % by chain length 1 / 2 / 3 / 4", by_length),
    ]  # fmt: skip
    header = ["Model", *[h for h, _ in shared + columns], "commit"]
    if not payload:
        return markdown_table(header, [[label] + ["not run"] * (len(header) - 2) + ["-"] for label in labels])
    done = payload["models"]
    rows = [[label, *[cell(done[label]) for _, cell in shared + columns], done[label].get("commit", payload["commit"])]
            if label in done else [label] + ["not run"] * (len(header) - 2) + ["-"] for label in labels]  # fmt: skip
    commands = sorted({e.get("command", payload["command"]) for e in done.values()})
    return (f"{markdown_table(header, rows)}\n\nPanel: {len(payload['panel']['task_ids'])} tasks of "
            f"{payload['panel']['split']} (`{payload['panel']['task_ids'][0]}` .. `{payload['panel']['task_ids'][-1]}`), "
            f"seeds {payload['panel']['seeds']}, temperature {payload['panel']['temperature']}; commit: at process "
            "start. Command: " + "; ".join(f"`{c}`" for c in commands) + ".")  # fmt: skip


def load_mechanisms(results: Path) -> dict | None:
    """The filed mechanisms file of a package's results folder (`results/cpu/mechanisms/mechanisms.json`), or None."""
    path = results / "cpu" / "mechanisms" / RESULTS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def file_mechanisms(runs: Path, results: Path) -> bool:
    """Copy `<runs>/cpu/mechanisms/mechanisms.json` into `<results>/cpu/mechanisms/` (the report step files it);
    False when the runs folder has none."""
    src = runs / "cpu" / "mechanisms" / RESULTS_FILE
    if not src.is_file():
        return False
    dst = results / "cpu" / "mechanisms" / RESULTS_FILE
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(src.read_text())
    return True


__all__ = [
    "build_trainer",
    "checkpoints",
    "distribution",
    "file_mechanisms",
    "gap_report",
    "load_mechanisms",
    "mechanisms_table",
    "play_panel",
    "row_labels",
    "row_logps",
    "run_mechanisms",
    "stack_rows",
]
