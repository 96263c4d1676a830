"""The pieces every trainer package's `cli.py` would otherwise write again: `<pkg> train|eval|reproduce|report`.

Plain functions a package's `cli.py` calls; the package keeps its own plan (configs x methods x seeds), its trainer
and its evaluation. Runs go under an output folder the user names (default `runs/<pkg>`, ignored by git); only
`report` writes committed files. Configuration and data errors end the command with one line naming the problem and
the fix, and a non-zero exit status, without a traceback.
"""

import argparse
import dataclasses
import difflib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from .config import (
    ConfigError,
    LaunchConfig,
    build_section,
    merge_config,
    resolve_config_path,
    section_values,
    to_dict,
)
from .provenance import redact


logger = logging.getLogger(__name__)
NOISY_LOGGERS = ("httpx", "datasets", "deepspeed", "torch.distributed")


# ------------------------------------------------------------------------------------------------- processes, logs


def is_main_process() -> bool:
    """Rank 0 of a `torchrun`/`accelerate` launch (or a plain process); the one that writes files and logs INFO."""
    return int(os.environ.get("RANK", "0")) == 0


def setup_logging() -> None:
    """INFO on the main process, warnings only on the other ranks; chatty libraries at WARNING."""
    logging.basicConfig(level=logging.INFO if is_main_process() else logging.WARNING, format="%(message)s")
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class RunLogHandler(logging.FileHandler):
    """The file handler of the current run's log (one at a time: a new run's replaces the previous run's)."""


def log_to_file(out: Path, name: str = "train.log") -> None:
    """Send every log record (every metric line) to `<out>/<name>` on the main process; the console keeps one
    progress line per rollout. A previous run's log file (earlier in the same `reproduce`) is closed first."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, RunLogHandler)]:
        root.removeHandler(handler)
        handler.close()
    if is_main_process():
        out.mkdir(parents=True, exist_ok=True)
        handler = RunLogHandler(out / name)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root.addHandler(handler)


# ----------------------------------------------------------------------------------------------- one run's folder


def run_folder(args, output: Path, name: str) -> Path:
    """The run's folder: `trainer.output_dir` when the user set it, else `<output>/<name>` (written back into
    `args.output_dir`, where TRL puts checkpoints)."""
    if args.output_dir == "trainer_output":  # TRL's default: name the run under the output folder instead
        args.output_dir = str(output / name)
    return Path(args.output_dir)


def model_tag(name_or_path: str) -> str:
    """A model's short name in run folders: a checkpoint folder (`.../<run>/final`, `.../checkpoint-N`) keeps its
    run's name (`<run>-final`), so two runs' checkpoints get two folders; anything else its last path part."""
    path = Path(name_or_path)
    if path.name == "final" or path.name.startswith("checkpoint-"):
        return f"{path.parent.name}-{path.name}"
    return path.name


def dump_config(cfg: dict, out: Path, headline: str) -> dict:
    """Write the resolved config to `<out>/config.json` (main process) and log one headline line; returns the
    resolved config as a JSON-friendly dict (on every rank, for the results payload), secrets redacted."""
    resolved = redact(to_dict(cfg))
    if is_main_process():
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    logger.info(f"{cfg['_source']}: {headline} output_dir={out}")
    return resolved


def set_model_init_kwargs(args, model_cfg) -> None:
    """`model:` section into TRL's `model_init_kwargs` (dtype, attention implementation); the YAML's own
    `trainer.model_init_kwargs` entries win."""
    kwargs = {"dtype": model_cfg.dtype}
    if model_cfg.attn_implementation:
        kwargs["attn_implementation"] = model_cfg.attn_implementation
    args.model_init_kwargs = {**kwargs, **(args.model_init_kwargs or {})}


def append_jsonl(path: Path, record: dict) -> None:
    """Append one record (an evaluation point, a trial) to a JSONL file, so results are on disk as they come."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def eval_records(path: Path, resume) -> Callable[[object, Iterable[dict]], None]:
    """The writer of a training run's per-instance evaluation records (`report` pairs them): `write(trainer, records)`
    appends one JSON line per record to `path`, tagged with `trainer.rollouts_done`, on the main process only. A fresh
    run (`resume` falsy) starts the file anew; a resumed one appends (`report` reads the last evaluation's lines)."""
    if is_main_process() and not resume:
        path.unlink(missing_ok=True)

    def write(trainer, records: Iterable[dict]) -> None:
        if trainer.accelerator.is_main_process:
            with path.open("a") as f:
                f.writelines(json.dumps({"rollouts": trainer.rollouts_done, **r}) + "\n" for r in records)

    return write


def env_tasks(env, split: str) -> list[dict]:
    """The tasks of one split of a shared environment (`EnvConfig` `name`, `task_kwargs`); missing data, a missing
    extra or a bad task setting is a configuration error (one line naming the fix), raised before any model loads."""
    from .envs import load_tasks

    try:
        return load_tasks(env.name, split, **env.task_kwargs)
    except (FileNotFoundError, ImportError, ValueError) as exc:
        raise ConfigError(f"env {env.name!r} ({split} split): {exc}") from exc


def load_panel(env) -> tuple[list[dict], list[int]]:
    """The fixed evaluation panel of an `EnvConfig` with the shared environments: the first `eval_episodes` tasks of
    `eval_split`, and the evaluation seeds (`seed_offset_eval + eval_seeds`)."""
    return env_tasks(env, env.eval_split)[: env.eval_episodes], [env.seed_offset_eval + s for s in env.eval_seeds]


# ------------------------------------------------------------------------------------------------------- run loop


def run_training(
    trainer,
    evaluate: Callable[[object], dict],
    describe: Callable[[dict], str],
    out: Path,
    *,
    eval_every: int,
    eval_before_train: bool,
    resume_from_checkpoint: str | bool | None = None,
) -> dict | None:
    """The one run loop: train -> an evaluation every `eval_every` rollouts -> the final evaluation -> results.

    Every evaluation runs on every rank (their generation is collective) and every rank keeps the same curve, so
    every rank takes the same branch at the end: the last rollout's evaluation is reused when it ran, otherwise
    every rank runs the final one. `evaluate(trainer)` returns the panel summary (the same on every rank);
    `describe(summary)` is its console line. The main process appends each point to `<out>/eval_curve.jsonl`; a
    resumed run keeps the points logged before its checkpoint. Returns `{"curve", "final", "train_seconds"}`; raises
    `Stopped` on every rank when a signal stopped training (SIGTERM/SIGINT, `RolloutCadence`: the last rollout is in
    a checkpoint), which ends the command, and a `reproduce` plan, without results.
    """
    import time

    from transformers import TrainerCallback

    curve_path = out / "eval_curve.jsonl"
    curve: list[dict] = []
    if trainer.accelerator.is_main_process and curve_path.exists():
        if resume_from_checkpoint:
            curve = [json.loads(line) for line in curve_path.read_text().splitlines() if line.strip()]
        else:
            curve_path.unlink()
    curve = trainer._all_ranks(curve)[0]  # rank 0's file, on every rank

    def point() -> dict:
        summary = evaluate(trainer)
        entry = {"step": trainer.state.global_step, "rollouts": trainer.rollouts_done, **summary}
        curve.append(entry)
        if trainer.accelerator.is_main_process:
            append_jsonl(curve_path, entry)
            logger.info(f"eval after {trainer.rollouts_done} rollouts: {describe(summary)}")
        return entry

    class PanelEvaluation(TrainerCallback):
        """An evaluation after every `eval_every`-th rollout (verl `trainer.test_freq`), on every rank."""

        def on_step_end(self, args, state, control, **kwargs):
            if eval_every and trainer.rollout_finished and trainer.rollouts_done % eval_every == 0:
                point()

    trainer.add_callback(PanelEvaluation())
    t0 = time.perf_counter()
    if eval_every and eval_before_train and not resume_from_checkpoint:
        point()
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    train_s = time.perf_counter() - t0
    if trainer.stopped_by_signal:  # a checkpoint of the last finished rollout exists; `reproduce` resumes from it
        logger.warning(
            f"stopped by a signal after {trainer.rollouts_done} rollouts; the same command with "
            f"trainer.resume_from_checkpoint={out}/checkpoint-<last> (`reproduce`: the same command) goes on"
        )
        raise Stopped()
    # the curve is the same on every rank, so every rank takes the same branch here (no lone evaluation)
    final = curve[-1] if curve and curve[-1]["rollouts"] == trainer.rollouts_done else point()
    return {
        "curve": curve,
        "final": {k: v for k, v in final.items() if k not in ("step", "rollouts")},
        "train_seconds": train_s,
    }


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 matmuls (oneDNN uses either)


def cpu_bf16_flags() -> list[str]:
    """This CPU's native-bf16 flags among `CPU_BF16_FLAGS` (Linux `/proc/cpuinfo`; none elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return []
    flags = set(next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "").split())
    return [f for f in CPU_BF16_FLAGS if f in flags]


def cpu_precision(overrides: list[str]) -> list[str]:
    """The CPU plans' precision: bf16 autocast (`trainer.bf16=true`) where the CPU has native bf16 (`cpu_bf16_flags`;
    3-4x faster than fp32 there, 6-100x slower without), fp32 elsewhere; a `trainer.bf16=...` override wins, so
    `trainer.bf16=false` reproduces fp32 results on any machine. Every results file records the precision and flags."""
    if any(o.startswith("trainer.bf16=") for o in overrides):
        return []
    flags = cpu_bf16_flags()
    logger.info(f"CPU precision: {'bf16 autocast (' + ', '.join(flags) + ')' if flags else 'fp32 (no native bf16)'}")
    return ["trainer.bf16=true"] if flags else []


def precision_fields(cfg: dict) -> dict:
    """What a results file records of the precision it ran in: `bf16` autocast or `fp32`, and the CPU's bf16 flags."""
    return {"precision": "bf16" if cfg["trainer"].bf16 else "fp32", "cpu_bf16_flags": cpu_bf16_flags()}


def panel_fields(panel: list[dict], eval_seeds: list[int]) -> dict:
    """The evaluation panel a results file was measured on: its seeds, every instance (task id, seed) in the order
    played, and the panel's hash (`evaluation.panel_identity`), so that two results files can be paired."""
    from .evaluation import panel_identity

    return {"eval_seeds": eval_seeds, "panel": [[t["task_id"], s] for s in eval_seeds for t in panel],
            "panel_identity": panel_identity(panel, eval_seeds)}  # fmt: skip


def training_payload(trainer, cfg: dict, resolved: dict, method: str, panel: list[dict], eval_seeds: list[int],
                     run: dict) -> dict:  # fmt: skip
    """The results payload every trainer package writes after `run_training` (a package adds its own fields)."""
    import torch

    return {
        "method": method,
        "env": cfg["env"].name,
        "model": cfg["model"].name_or_path,
        "seed": cfg["trainer"].seed,
        **panel_fields(panel, eval_seeds),
        "train_seconds": run["train_seconds"],
        "steps": trainer.state.global_step,
        "rollouts": trainer.rollouts_done,
        "num_processes": trainer.accelerator.num_processes,
        "final": run["final"],
        "curve": run["curve"],
        "log_history": trainer.state.log_history,
        "config": resolved,
        "torch_threads": torch.get_num_threads(),
        **precision_fields(cfg),
    }


def eval_payload(cfg: dict, resolved: dict, method: str, panel: list[dict], eval_seeds: list[int], seconds: float,
                 final: dict) -> dict:  # fmt: skip
    """The results payload of a standalone evaluation (`<pkg> eval`); a package adds its own fields."""
    return {
        "method": method,
        "env": cfg["env"].name,
        "model": cfg["model"].name_or_path,
        "seed": cfg["trainer"].seed,
        **panel_fields(panel, eval_seeds),
        "eval_seconds": seconds,
        "final": final,
        "curve": [],
        "config": resolved,
        **precision_fields(cfg),
    }


def train_on_episodes(trainer_cls, cfg: dict, method: str, out: Path, headline: str) -> dict:
    """`<pkg> train` of a package whose trainer plays verl-agent episodes on a shared environment (SDAR, AgentOPSD):
    load the tasks and the panel, build `trainer_cls(model, args, env, tasks)`, `run_training` (every evaluation's
    per-episode records go to `<out>/eval_episodes.jsonl`, tagged with the rollouts done), save the final
    weights under `<out>/final`, write `<out>/results.json` (main process); returns the payload on every rank (raises
    `Stopped` when a signal stopped the run before its end)."""
    from transformers import AutoTokenizer

    from .evaluation import episode_record, summarize, write_results
    from .lora import peft_config
    from .models import model_path
    from .skills import skills_folder

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    if args.skills_dir is not None:  # official skill documents asked for: present, or one line naming the fix
        skills_folder(env.name, args.skills_dir)
    log_to_file(out)
    resolved = dump_config(cfg, out, headline)
    path = model_path(model_cfg.name_or_path)
    set_model_init_kwargs(args, model_cfg)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    tasks = env_tasks(env, env.train_split)
    panel, seeds = load_panel(env)

    # every evaluation's per-episode records (paired tables, horizon analyses)
    log_records = eval_records(out / "eval_episodes.jsonl", args.resume_from_checkpoint)

    def evaluate(trainer) -> dict:
        records = [episode_record(e) for e in trainer.evaluate_panel(panel, seeds, env.eval_temperature)]
        log_records(trainer, records)
        return summarize(records, seeds)

    trainer = trainer_cls(path, args, env, tasks, processing_class=tok, peft_config=peft_config(model_cfg.lora))
    warn_launch_size(cfg, trainer)
    try:
        run = run_training(trainer, evaluate, lambda s: f"success {s['success_rate_mean']:.3f}", out,
                           eval_every=env.eval_every, eval_before_train=env.eval_before_train,
                           resume_from_checkpoint=args.resume_from_checkpoint)  # fmt: skip
    finally:
        trainer.pool.close()
    trainer.save_model(str(out / "final"))  # weights stay under the run's folder
    payload = training_payload(trainer, cfg, resolved, method, panel, seeds, run)
    if trainer.accelerator.is_main_process:
        write_results(out / "results.json", payload)
    return payload


def evaluate_on_episodes(cfg: dict, method: str, out: Path, headline: str, prompt_family: str,
                         transform: Callable[[str, dict], str] | None = None) -> dict:  # fmt: skip
    """`<pkg> eval` for the same packages: `model.name_or_path` on the fixed panel (`load_panel`) with the shared
    collector and prompt family `prompt_family` (`transform` rewrites each prompt, e.g. skills in the student
    prompt), HF generation on the GPU when there is one, in the trainer's precision; resumable (episodes are logged as
    they end, `<out>/episodes.jsonl`). Writes `<out>/results.json`; returns the payload."""
    import time
    from functools import partial

    import torch
    from transformers import AutoTokenizer

    from .envs import make_env
    from .envs.pool import EnvPool
    from .evaluation import check_log_identity, model_identity, panel_identity, run_panel, summarize, write_results
    from .generation import HFGenerator, load_eval_model
    from .models import model_path
    from .prompts import make_prompt
    from .rollout import RolloutCollector
    from .skills import skills_folder

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    if args.skills_dir is not None and args.eval_with_skills:
        skills_folder(env.name, args.skills_dir)
    log_to_file(out, "eval.log")
    resolved = dump_config(cfg, out, headline)
    path = model_path(model_cfg.name_or_path)
    panel, seeds = load_panel(env)
    log = out / "episodes.jsonl"  # resumed only if this model and panel wrote it (before the model loads)
    check_log_identity(log, {**model_identity(path), "panel": panel_identity(panel, seeds)})
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = load_eval_model(path, model_cfg.dtype, args.use_cpu)
    torch.manual_seed(args.seed)
    slots = env.eval_batch_size or args.per_device_train_batch_size * (args.steps_per_generation or 1)
    # in the trainer's precision: bf16 autocast when `bf16=True` (as the trained models are evaluated)
    autocast_dtype = torch.bfloat16 if args.bf16 else None
    generate = HFGenerator(model, tok, args.max_completion_length, env.eval_temperature, batch_size=slots,
                           autocast_dtype=autocast_dtype)  # fmt: skip
    with EnvPool(partial(make_env, env.name, **env.env_kwargs), slots, env.step_timeout, env.num_workers) as pool:
        collector = RolloutCollector(
            pool, make_prompt(prompt_family, env.history_length), tok, env.max_turns, env.max_prompt_length,
            transform, args.chat_template_kwargs,
        )  # fmt: skip
        t0 = time.perf_counter()
        records = run_panel(collector, generate, panel, seeds, log)
    summary = summarize(records, seeds)
    payload = eval_payload(cfg, resolved, method, panel, seeds, time.perf_counter() - t0, summary)
    write_results(out / "results.json", payload)
    logger.info(f"eval {method}: success {summary['success_rate_mean']:.3f} +- {summary['success_rate_std']:.3f}")
    return payload


# ------------------------------------------------------------------------------------------------------ reproduce


def pending_runs(
    output: Path, scale: str, seeds: list[int], methods: list[str], configs: list[str | None] = (None,)
) -> Iterator[tuple[str | None, int, str, Path]]:
    """`(config, seed, method, run folder)` for every run of a plan that has not finished; a finished run (its
    `results.json` exists) is logged and skipped, so an interrupted plan resumes. Folders:
    `<output>/<scale>/<method>/seed<seed>[_<config>]`.

    A SIGTERM or SIGINT ends the plan: during training the run stops after its rollout with a checkpoint and raises
    `Stopped` (`run_training`); during a run that is not training (an evaluation, a warm start, a launched
    subprocess, which sees the signal itself when it is sent to the process group as Slurm and Ctrl-C do) that run
    ends first. Either way no later run starts, and the command exits with 128 + the signal's number."""
    received: list[int] = []

    def on_signal(signum, frame) -> None:
        if received and signum == signal.SIGINT:  # a second Ctrl-C: at once
            raise KeyboardInterrupt
        received.append(signum)
        logger.warning(f"{signal.Signals(signum).name}: the plan ends after the run in progress")

    handlers = {}
    if threading.current_thread() is threading.main_thread():  # (signal handlers live in the main thread)
        handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for config in configs:
            for seed in seeds:
                for method in methods:
                    run = output / scale / method / (f"seed{seed}" + (f"_{config}" if config else ""))
                    if (run / "results.json").exists():
                        logger.info(f"reproduce: {method} seed {seed} finished earlier in {run}, not redone")
                        continue
                    yield config, seed, method, run
                    if received:
                        logger.warning("reproduce: stopped by a signal; the same command goes on from here")
                        raise Stopped(received[0])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def accelerate_config() -> Path:
    """The DeepSpeed ZeRO-3 `accelerate` config shipped with `agentrl_shared` (paper-scale launches)."""
    return Path(str(files("agentrl_shared") / "accelerate" / "zero3.yaml"))


def latest_checkpoint(run: Path) -> Path | None:
    """The run folder's last `checkpoint-<step>` folder (the HF Trainer's naming), or None."""
    steps = [p for p in run.glob("checkpoint-*") if p.is_dir() and p.name.removeprefix("checkpoint-").isdigit()]
    return max(steps, key=lambda p: int(p.name.removeprefix("checkpoint-")), default=None)


def resume_args(run: Path) -> list[str]:
    """`trainer.resume_from_checkpoint=<its last checkpoint>` for a run that stopped before its `results.json`, so
    `reproduce` goes on from there; `[]` for a run with no checkpoint (it starts over) or a finished one."""
    last = None if (run / "results.json").exists() else latest_checkpoint(run)
    return [f"trainer.resume_from_checkpoint={last}"] if last else []


def launch_size(config: str, package: str, overrides: list[str] = ()) -> LaunchConfig:
    """A config's `launch:` section with the command line's `launch.*` overrides, read without expanding its
    `${...}` data locations (a launch command needs none), so `reproduce --dry-run` plans on any machine."""
    path = resolve_config_path(config, package)
    cfg = merge_config(path, [o for o in overrides if o.startswith("launch.")], {"launch": LaunchConfig})
    size = build_section(LaunchConfig, section_values(cfg, "launch", path), f"{path} (section 'launch')")
    if size.num_processes % size.num_machines:
        raise ConfigError(f"{path}: launch.num_processes {size.num_processes} is not a multiple of launch.num_machines "
                          f"{size.num_machines} (accelerate starts num_processes / num_machines on each machine).")  # fmt: skip
    return size


@dataclass(frozen=True)
class LaunchFlags:
    """`reproduce`'s launch flags: `--dry-run` prints each `accelerate launch` command and runs nothing;
    `--machine-rank` / `--main-process-ip` place this machine in a multi-machine launch (accelerate's
    `--machine_rank` / `--main_process_ip`: `reproduce` runs on every machine, each with its rank)."""

    dry_run: bool = False
    machine_rank: int | None = None
    main_process_ip: str | None = None


def add_launch_flags(q: argparse.ArgumentParser) -> None:
    """`--dry-run`, `--machine-rank` and `--main-process-ip` on a package's `reproduce` (read by `launch_flags`)."""
    q.add_argument("--dry-run", action="store_true",
                   help="--scale paper: print each `accelerate launch` command (processes and machines from the "
                   "config's launch: section) and run nothing: no GPU, vLLM or data check, no launch")  # fmt: skip
    q.add_argument("--machine-rank", type=int, default=None,
                   help="--scale paper, a config on several machines: this machine's rank (run reproduce on each)")  # fmt: skip
    q.add_argument("--main-process-ip", default=None,
                   help="--scale paper, a config on several machines: the address of the machine of rank 0")  # fmt: skip


def launch_flags(ns: argparse.Namespace) -> LaunchFlags:
    """The parsed launch flags of `reproduce`; `--dry-run` plans paper-scale launches only (CPU runs in process)."""
    if ns.dry_run and ns.scale != "paper":
        raise ConfigError("--dry-run prints the paper-scale launch commands: use it with --scale paper.")
    return LaunchFlags(ns.dry_run, ns.machine_rank, ns.main_process_ip)


def launch(package: str, size: LaunchConfig, train_args: list[str], flags: LaunchFlags) -> None:
    """`accelerate launch` (ZeRO-3) `<package> train TRAIN_ARGS` on `size`'s processes and machines, in a fresh
    process; with `flags.dry_run` print the command instead. On several machines the command runs on each, with its
    `--machine_rank` and the `--main_process_ip` of rank 0 (from `flags`; a dry run without them says so)."""
    machine = []
    if size.num_machines > 1:
        if flags.machine_rank is not None and flags.main_process_ip is not None:
            machine = ["--machine_rank", str(flags.machine_rank), "--main_process_ip", flags.main_process_ip]
        elif not flags.dry_run:
            raise ConfigError(f"this run is launched on {size.num_machines} machines: run `{package} reproduce` on "
                              f"each with --machine-rank R (0 to {size.num_machines - 1}) and --main-process-ip "
                              "<address of machine 0>; --dry-run prints the commands.")  # fmt: skip
    cmd = ["accelerate", "launch", "--config_file", str(accelerate_config()),
           "--num_processes", str(size.num_processes), "--num_machines", str(size.num_machines), *machine,
           "-m", f"{package}.cli", "train", *train_args]  # fmt: skip
    if flags.dry_run:
        print(shlex.join(cmd))
        if size.num_machines > 1 and not machine:
            print(f"# runs on each of the {size.num_machines} machines with --machine_rank 0..{size.num_machines - 1} "
                  "and --main_process_ip <address of machine 0> added (accelerate launch --help; "
                  f"`{package} reproduce --machine-rank R --main-process-ip HOST` adds them)")  # fmt: skip
        return
    logger.info("reproduce: " + shlex.join(cmd))
    done = subprocess.run(cmd)
    if done.returncode in (128 + signal.SIGTERM, 128 + signal.SIGINT):  # the run stopped cleanly (`Stopped`)
        raise Stopped(done.returncode - 128)
    done.check_returncode()


def reproduce_paper(
    package: str,
    title: str,
    configs: list[str],
    methods: list[str],
    seeds: list[int],
    overrides: list[str],
    output: Path,
    flags: LaunchFlags,
    load: Callable[[str, list[str]], dict],
) -> None:
    """A trainer package's `reproduce --scale paper`: every (config, seed, method) without `results.json` under
    `<output>/paper` is launched as `<package> train --config C --method M` on its config's processes and machines
    (`launch:`), from its last checkpoint when it has one. A dry run only prints the commands: it checks no GPU, vLLM
    or data location (`check_paper_prerequisites`, which a real run passes first)."""
    if not flags.dry_run:
        check_paper_prerequisites(title, configs, load)
    for config, seed, method, run in pending_runs(output, "paper", seeds, methods, configs):
        train_args = ["--config", config, "--method", method, f"trainer.output_dir={run}", f"trainer.seed={seed}",
                      *overrides, *resume_args(run)]  # fmt: skip
        launch(package, launch_size(config, package, overrides), train_args, flags)


def add_plan_flags(q: argparse.ArgumentParser, plan: list[str], methods: list[str], configs: list[str],
                   jobs: bool = False) -> None:  # fmt: skip
    """`reproduce --methods` (both scales) and `--configs` (paper scale) of a package whose plan can be chosen, and
    with `jobs` (a package whose CPU plan runs through `reproduce_cpu`) `--jobs`."""
    if jobs:
        q.add_argument("--jobs", type=int, default=len(cpu_cores()),
                       help=f"cpu scale: runs at a time, one core each (default: this machine's {len(cpu_cores())}; "
                       "1: one after another in this process, on every core)")  # fmt: skip
    q.add_argument("--methods", default=",".join(plan),
                   help=f"comma-separated, of {', '.join(methods)} (default {','.join(plan)}; at cpu scale the "
                   "untrained model is always evaluated too)")  # fmt: skip
    q.add_argument("--configs", default=",".join(configs),
                   help=f"paper scale: comma-separated configs (default {','.join(configs)}; any paper config of "
                   "the package, e.g. the other model sizes)")  # fmt: skip


def check_plan(methods: list[str], valid: dict, configs: list[str], package: str) -> None:
    """`--methods` and `--configs` name methods and configs that exist (one line naming the valid ones)."""
    unknown = [m for m in methods if m not in valid]
    if unknown:
        raise ConfigError(f"Unknown method(s) {unknown}; valid: {', '.join(valid)}.")
    for config in configs:
        resolve_config_path(config, package)


def method_switches(methods: dict[str, list[str]], method: str) -> list[str]:
    """`train --method NAME`'s switches (overrides that go before the command line's): `run` is the config as it
    is; an unknown name is a configuration error that lists the valid ones."""
    if method == "run":
        return []
    if method not in methods:
        close = difflib.get_close_matches(method, methods, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ConfigError(
            f"Unknown --method {method!r}.{hint} Valid: run (the config as it is), {', '.join(methods)}."
        )
    return methods[method]


def warn_launch_size(cfg: dict, trainer) -> None:
    """Warn when a run is launched on another number of processes than its config's `launch:` section sizes it for:
    TRL's generation batch (`per_device_train_batch_size x steps_per_generation` per rank; episodes in a multi-turn
    trainer) scales with the number of ranks."""
    args, world, planned = trainer.args, trainer.accelerator.num_processes, cfg["launch"].num_processes
    if world != planned:
        per_rank, group = args.per_device_train_batch_size * args.steps_per_generation, args.num_generations
        logger.warning(
            f"{cfg['_source']} is sized for {planned} processes and runs on {world}: {per_rank * world // group} "
            f"prompts x {group} generations per step instead of {per_rank * planned // group} x {group}."
        )


def missing_inputs(cfg: dict) -> list[str]:
    """What a loaded config reads that is not on this machine: its model (a local folder, or a Hub id absent from the
    local Hugging Face cache), and every data path (an absolute path) or model id (a `*model_path` key) anywhere in its
    `env` section. One short phrase with its fix per missing input."""
    from .models import model_path

    wanted = [("model.name_or_path", cfg["model"].name_or_path)]

    def walk(where: str, value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{where}.{key}", item)
        elif isinstance(value, str) and (value.startswith("/") or where.endswith("model_path")):
            wanted.append((where, value))

    walk("env", dataclasses.asdict(cfg["env"]))
    problems = []
    for where, value in wanted:
        if value.startswith("/"):
            if not Path(value).exists():
                problems.append(f"{where}: {value} does not exist (see `make data`)")
            continue
        try:
            model_path(value)
        except ConfigError:
            problems.append(f"{where}: {value} is not in the local Hugging Face cache (`hf download {value}`)")
    return problems


def check_paper_prerequisites(title: str, configs: list[str], load: Callable[[str, list[str]], dict]) -> None:
    """Fail fast, with every reason and its fix, when a paper-scale run cannot start here: no CUDA device, no vLLM,
    a config whose data location is unset, or whose data files or models are not on this machine (`missing_inputs`;
    `load` is the package's config loader). Runs before any process is launched."""
    import torch

    problems = []
    if not torch.cuda.is_available():  # (make reproduce checks nvidia-smi before syncing; this covers direct calls)
        problems.append("no CUDA device is visible (paper scale needs GPUs; --scale cpu runs anywhere)")
    try:
        import vllm  # noqa: F401
    except ImportError:
        problems.append("vLLM is not installed: run `uv sync --locked --inexact --extra vllm`")
    for name in configs:
        try:
            cfg = load(name, ["trainer.use_cpu=true"])  # data locations only; the GPU check is above
        except ConfigError as exc:
            problems.append(f"{name}: {exc}")
            continue
        problems += [f"{name}: {p}" for p in missing_inputs(cfg)]
    if problems:
        raise ConfigError(f"cannot start the paper-scale {title} run: " + "; ".join(problems))


# --------------------------------------------------------------------------------------------------- command line


def build_parser(
    package: str, doc: str, default_config: str, methods: list[str] = (), extra: dict[str, str] | None = None
) -> tuple[argparse.ArgumentParser, dict]:
    """`<package> train|eval|reproduce|report`, each subcommand with the flags every trainer package honours; a
    package adds its own flags to the returned subparsers (`{"train": ..., "eval": ..., ...}`). `methods`: the names
    `train --method` accepts besides `run` (their switches: `method_switches`); `eval --method` is a label. `extra`:
    the package's further commands (`{name: help}`, e.g. `mechanisms`, whose flags `add_mechanisms_flags` adds)."""
    parser = argparse.ArgumentParser(prog=package, description=doc, formatter_class=argparse.RawTextHelpFormatter)
    helps = {
        "train": "train one configuration, then evaluate it on the fixed panel",
        "eval": "evaluate model.name_or_path on the fixed panel (the untrained baseline, or a checkpoint)",
        "reproduce": "run one scale's plan (methods x seeds) under --output; finished runs are not redone",
        "report": "copy finished runs into <README folder>/results and rebuild the README tables and curves",
        **(extra or {}),
    }
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(helps) + "}")
    subs = {name: sub.add_parser(name, help=text, description=text) for name, text in helps.items()}
    output = f"runs/{package}"
    for name in ("train", "eval"):
        q = subs[name]
        q.add_argument("--config", default=default_config,
                       help=f"a file in {package}/configs/ (name without .yaml) or a YAML path (default {default_config})")  # fmt: skip
        q.add_argument("--output", default=Path(output), type=Path,
                       help=f"folder the run's folder is created in (default {output}, git-ignored); "
                       "trainer.output_dir=DIR names the run's folder itself")  # fmt: skip
        label = "label written into results.json and the run's folder name"
        if name == "train" and methods:
            label = (f"the method: run (default: the config as it is) or one of {', '.join(methods)}, whose switches "
                     "go before the overrides; any other name is refused. Also the " + label)  # fmt: skip
        q.add_argument("--method", default="run" if name == "train" else "eval", help=label)
        q.add_argument("overrides", nargs="*", help="key=value or section.key=value")
    q = subs["reproduce"]
    q.add_argument("--scale", default="cpu", choices=["cpu", "paper"], help="cpu (default, minutes) or paper (GPUs)")
    q.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    q.add_argument("--output", default=Path(output), type=Path, help=f"where runs are written (default {output})")
    add_launch_flags(q)
    q.add_argument("overrides", nargs="*", help="key=value or section.key=value, applied to every run")
    q = subs["report"]
    q.add_argument("--runs", default=None, type=Path, help=f"copy finished runs from here first (e.g. {output})")
    q.add_argument("--readme", default=Path(f"{package}/README.md"), type=Path,
                   help=f"the README to rebuild (default {package}/README.md); results live in <its folder>/results")  # fmt: skip
    return parser, subs


def add_compare_flag(q: argparse.ArgumentParser, example: str) -> None:
    """`<package> report --compare DIR` (sdar, agentopsd: the packages whose READMEs carry `make compare` tables),
    repeatable: every `runs/compare/<plan>` folder given is filed (`agentrl_shared.report.file_compares`)."""
    q.add_argument("--compare", type=Path, action="append", default=[],
                   help=f"also file a `make compare` output folder (e.g. {example}); repeat for several")  # fmt: skip


def add_mechanisms_flags(q: argparse.ArgumentParser, package: str, default_config: str) -> None:
    """`<package> mechanisms` (every trainer package; `agentrl_shared.mechanisms.measure_models`): the config, the
    runs folder holding the trained checkpoints (`<runs>/cpu/<method>/seed<seed>/final`), the output folder and
    config overrides."""
    q.add_argument("--config", default=default_config,
                   help=f"a file in {package}/configs/ (name without .yaml) or a YAML path (default {default_config})")  # fmt: skip
    q.add_argument("--runs", default=Path(f"runs/{package}"), type=Path,
                   help=f"the runs folder of the CPU plan (default runs/{package}): cpu/<method>/seed<seed>/final")  # fmt: skip
    q.add_argument("--seed", default=0, type=int, help="training seed of the checkpoints (default 0)")
    q.add_argument("--output", default=Path(f"runs/{package}/cpu/mechanisms"), type=Path,
                   help=f"where mechanisms.json is written (default runs/{package}/cpu/mechanisms; `{package} report "
                   f"--runs runs/{package}` files it)")  # fmt: skip
    q.add_argument("overrides", nargs="*", help="key=value or section.key=value")


def parse_args(parser: argparse.ArgumentParser, subs: dict, argv: list[str] | None) -> argparse.Namespace:
    """Parse `<command> [options and key=value overrides in any order]`. For `train` and `eval`, the config and its
    overrides are checked against the package's `configs/fields.json` (`agentrl_shared.schema.precheck`) before the
    package imports TRL and torch: a bad key, value or data location is one line and exit 2 within a second."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    if not argv or argv[0] not in subs:
        return parser.parse_args(argv)  # --help, or a usage error naming the valid commands
    ns = subs[argv[0]].parse_intermixed_args(argv[1:])  # (argparse cannot intermix through subparsers)
    ns.command = argv[0]
    if ns.command in ("train", "eval", "mechanisms"):
        from .schema import precheck

        run_command(parser.prog, lambda: precheck(parser.prog, ns.config, ns.overrides))
    return ns


def seeds_arg(text: str) -> list[int]:
    """`--seeds 0,1,2` into a list; a malformed list is a configuration error."""
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(
            f"--seeds {text!r} is not a comma-separated list of integers (e.g. --seeds 0,1,2)."
        ) from None


def cpu_cores() -> list[int]:
    """The cores this process may run on (its affinity mask where the OS has one, else every core)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def reproduce_cpu(package: str, config: str, plan: dict[str, list[str]], seeds: list[int], overrides: list[str],
                  output: Path, jobs: int, run_one: Callable[[str, list[str]], object]) -> None:  # fmt: skip
    """A package's CPU plan: every unfinished run of `plan` (`{method: switches}`, `untrained` evaluated, the others
    trained) x `seeds` into `<output>/cpu/<method>/seed<seed>` (`pending_runs`), in the CPU's precision
    (`cpu_precision`), an unfinished run resuming from its checkpoint. `jobs` > 1: that many runs at a time, one core
    each (`run_parallel`: `<package> train|eval` subprocesses, the trained runs first); 1: one after another in this
    process, `run_one(method, overrides)` each."""
    precision = cpu_precision(overrides)

    def run_overrides(seed: int, run: Path) -> list[str]:
        return [*precision, *overrides, f"trainer.seed={seed}", f"trainer.output_dir={run}", *resume_args(run)]

    if jobs <= 1:
        for _, seed, method, run in pending_runs(output, "cpu", seeds, list(plan)):
            run_one(method, [*plan[method], *run_overrides(seed, run)])
        return
    pending = sorted(pending_runs(output, "cpu", seeds, list(plan)), key=lambda r: (r[2] == "untrained", r[1]))
    run_parallel([(f"{method} seed {seed}", [sys.executable, "-m", f"{package}.cli",
                                              "eval" if method == "untrained" else "train", "--config", config,
                                              "--method", method, *run_overrides(seed, run)])
                  for _, seed, method, run in pending], jobs)  # fmt: skip


def run_parallel(commands: list[tuple[str, list[str]]], jobs: int) -> None:
    """Run a CPU plan's runs as `(label, argv)` subprocesses, `jobs` at a time, each on one core: one thread
    (`OMP_NUM_THREADS=1`) and pinned to a core of its own where the OS allows it, as the filed runs were. Every line a
    run prints is shown prefixed with its label. A SIGTERM or SIGINT is passed on to the running ones (a training run
    stops after its rollout with a checkpoint), no further run starts, and the plan ends with `Stopped`; a run that
    fails ends the plan with its exit status once the others have finished."""
    import queue

    cores, todo, lines = cpu_cores(), list(commands), queue.Queue()
    running: dict[int, tuple[subprocess.Popen, str]] = {}  # core -> (process, label)
    received: list[int] = []
    failed: list[tuple[str, int]] = []

    def on_signal(signum, frame) -> None:
        received.append(signum)
        logger.warning(f"{signal.Signals(signum).name}: passed on to the running runs; no further run starts")
        for proc, _ in running.values():
            proc.send_signal(signum)

    def pump(proc: subprocess.Popen, label: str) -> None:
        for line in proc.stdout:
            lines.put(f"[{label}] {line.rstrip()}")

    handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while todo or running:
            for core in cores[: max(jobs, 1)]:
                if core not in running and todo and not received:
                    label, argv = todo.pop(0)
                    pin = (lambda c=core: os.sched_setaffinity(0, {c})) if hasattr(os, "sched_setaffinity") else None
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                            env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=pin)  # fmt: skip
                    threading.Thread(target=pump, args=(proc, label), daemon=True).start()
                    running[core] = (proc, label)
                    logger.info(f"reproduce: {label} started on core {core}")
            while not lines.empty():
                print(lines.get(), flush=True)
            for core, (proc, label) in list(running.items()):
                if proc.poll() is not None:
                    del running[core]
                    if proc.returncode != 0 and not received:
                        failed.append((label, proc.returncode))
            if received and not running:
                todo.clear()
            time.sleep(0.2)
        while not lines.empty():
            print(lines.get(), flush=True)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if received:
        raise Stopped(received[0])
    if failed:
        raise SystemExit(f"reproduce: {', '.join(f'{label} exited with {code}' for label, code in failed)}")


class Stopped(SystemExit):
    """The end of a command that a signal stopped cleanly (a training run: its last rollout is in a checkpoint; a
    plan: no later run started): exit status 128 + the signal's number (143 for SIGTERM), so that a script or a
    scheduler never reads an unfinished run as done. The same command goes on from where it stopped."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(128 + signum)


class UserError(SystemExit):
    """The end of a command on a user error: exit status 2 (as argparse's usage errors), its one line on stderr."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def run_command(package: str, command: Callable[[], object], errors: tuple[type[Exception], ...] = ()) -> None:
    """Run `command`; a configuration error (or one of the package's data `errors`) ends it with one line
    `<package>: <problem and fix>` on stderr and exit status 2, without a traceback."""
    try:
        command()
    except (ConfigError, *errors) as exc:
        message = f"{package}: {' '.join(str(exc).split())}"
        print(message, file=sys.stderr)
        raise UserError(message) from None


__all__ = [
    "eval_payload",
    "evaluate_on_episodes",
    "train_on_episodes",
    "run_training",
    "training_payload",
    "warn_launch_size",
    "accelerate_config",
    "append_jsonl",
    "build_parser",
    "check_paper_prerequisites",
    "dump_config",
    "is_main_process",
    "LaunchFlags",
    "add_launch_flags",
    "add_mechanisms_flags",
    "add_plan_flags",
    "check_plan",
    "cpu_bf16_flags",
    "cpu_cores",
    "cpu_precision",
    "latest_checkpoint",
    "launch",
    "launch_flags",
    "launch_size",
    "env_tasks",
    "load_panel",
    "model_tag",
    "method_switches",
    "missing_inputs",
    "log_to_file",
    "parse_args",
    "pending_runs",
    "precision_fields",
    "reproduce_cpu",
    "reproduce_paper",
    "run_parallel",
    "resume_args",
    "run_command",
    "Stopped",
    "UserError",
    "run_folder",
    "seeds_arg",
    "set_model_init_kwargs",
    "setup_logging",
]
