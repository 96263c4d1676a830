"""`vad train|eval|reproduce|report`: one table row per run, written under an output folder the user names.

- `vad train --config NAME [--method ROW] [--output DIR] key=value ...`: train one row of the paper's tables (the row's
  switches, then the overrides; `run`, the default, is the config as it is), evaluate the trained student, write
  `<DIR>/<config>/<row>_seed<s>/results.json`.
- `vad eval --config NAME [--method LABEL] [--output DIR] key=value ...`: evaluate `model.name_or_path` (the `base`
  row, or a checkpoint under the label given) with the configured back end; streaming and resumable.
- `vad reproduce --scale cpu|paper [--seeds 0,1,2] [--config NAME] [--output DIR] key=value ...`: every row in
  `data.rows` for every seed (finished runs are not redone).
- `vad report [--runs DIR] [--readme FILE]`: copy finished runs' results into `<README folder>/results` and rebuild
  the README table from it. Only `report` writes committed files.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

# the command line needs none of TRL, transformers or torch: they load when a command runs (`vad --help` stays fast)
from agentrl_shared.cli import (  # noqa: E402
    LaunchFlags,
    Stopped,
    build_parser,
    launch,
    launch_flags,
    method_switches,
    parse_args,
    run_command,
    seeds_arg,
    warn_launch_size,
)
from agentrl_shared.config import ConfigError, to_dict  # noqa: E402
from agentrl_shared.models import model_path  # noqa: E402
from agentrl_shared.provenance import git_commit  # noqa: E402

from .rows import ROWS  # noqa: E402


if TYPE_CHECKING:
    from .config import DataConfig, VADConfig

logger = logging.getLogger("vad")
PACKAGE = "vad"
SCALE_CONFIGS = {"cpu": "procedural_warm-tiny-qwen25vl_cpu", "paper": "visionopd_qwen3.5-4b_paper"}
DEFAULT_OUTPUT = "runs/vad"
TINY_VLM = "tiny-qwen25-vl"  # built offline by agentrl_shared.vlm
RESULTS = "results.json"  # each run's record, in its folder
# `train --method ROW`: the switches of each trained row of the paper's tables (`rows.ROWS`)
METHODS = {row: [f"trainer.{k}={v}" for k, v in switches.items()] for row, switches in ROWS.items()
           if switches is not None}  # fmt: skip


class UsageError(ConfigError):
    """A configuration or data problem found by a command: `main` prints its one-line message and exits with 1."""


def setup_logging() -> None:
    """INFO on rank 0, warnings only on the other ranks."""
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING, format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )  # fmt: skip


def data_root() -> Path:
    """`$AGENTRL_DATA/vad` (default `../shared/data/vad` from the working directory, the repository root)."""
    return Path(os.environ.get("AGENTRL_DATA", "../shared/data")) / "vad"


def sections() -> dict:
    from agentrl_shared.config import LaunchConfig, ModelConfig

    from .config import DataConfig, VADConfig

    return {"trainer": VADConfig, "data": DataConfig, "model": ModelConfig, "launch": LaunchConfig}


def load(config: str, overrides: list[str], method: str = "run") -> dict:
    """Load `config`, apply the switches of the row `method` (`METHODS`; `run`: none), then the overrides."""
    from agentrl_shared.config import load_config

    switches = method_switches(METHODS, method)
    try:
        resolved = load_config(config, [*switches, *overrides], sections(), PACKAGE)
    except ValueError as err:
        raise UsageError(str(err)) from err
    resolved["_name"] = config
    return resolved


def resolve_model(cfg: dict) -> str:
    """`model.name_or_path` as a local path: `vad-warm-start` builds (once) the warm start for the data config's
    procedural task and the run's seed `trainer.seed` (`warmstart.warm_start`: its own random init and pre-training
    questions per seed); other names go through `agentrl_shared.models.model_path`."""
    from .warmstart import WARM_START, warm_start

    name = cfg["model"].name_or_path
    if name != WARM_START:
        return model_path(name)

    data: DataConfig = cfg["data"]
    return str(warm_start(image_size=data.image_size, detail_size=data.detail_size, cell=data.cell,
                          colours=data.colours, degrade_scale=data.degrade_scale, align=data.align,
                          distractors=data.distractors, crop_context=data.crop_context,
                          seed=cfg["trainer"].seed))  # fmt: skip


def run_dir(output: str, cfg: dict, row: str) -> Path:
    return Path(output) / cfg["_name"] / f"{row}_seed{cfg['trainer'].seed}"


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")


def train_dataset(data: DataConfig, seed: int):
    """The training rows: Vision-OPD-6K, or `data.num_train` procedural questions drawn from the run's seed (each
    seed its own questions; TRL's sampler shuffles them with the same seed)."""
    from datasets import Dataset

    from .views import load_vision_opd, procedural_rows

    views = {
        "crop_context": data.crop_context,
        "degrade_scale": data.degrade_scale,
        "minus_framing": data.minus_framing,
    }
    if data.name == "procedural":
        task = {"image_size": data.image_size, "detail_size": data.detail_size, "cell": data.cell,
                "align": data.align, "distractors": data.distractors, "shuffle_options": data.shuffle_options, "colours": data.colours,
                "x0_contrast": data.x0_contrast}  # fmt: skip
        return Dataset.from_list(procedural_rows(data.num_train, seed=seed, **task, **views))
    path = data.path or data_root() / "vision_opd"
    return load_vision_opd(path, limit=data.num_train if data.num_train > 0 else None, **views)


# ------------------------------------------------------------------------------------------------ evaluation


def procedural_items(data: DataConfig, root: Path, view: str = "full"):
    """The fixed held-out procedural panel (stream `10_000 + data.seed`: the same questions for every training seed,
    apart from the training rows' streams) on one view."""
    import random

    from .benchmarks import EvalItem
    from .config import EVAL_VIEWS
    from .views import format_question, low_contrast, make_views, procedural_sample

    rng = random.Random(10_000 + data.seed)
    for i in range(data.num_eval):
        s = procedural_sample(rng, image_size=data.image_size, detail_size=data.detail_size, cell=data.cell,
                              shuffle_options=data.shuffle_options, colours=data.colours, align=data.align,
                              distractors=data.distractors)  # fmt: skip
        image = low_contrast(s.image, data.x0_contrast)
        if view != "full":
            views = make_views(s.image, s.box, crop_context=data.crop_context, degrade_scale=data.degrade_scale,
                               minus_framing=data.minus_framing)  # fmt: skip
            image = getattr(views, view)
        yield EvalItem(EVAL_VIEWS[view], str(i), format_question(s.question, s.options), s.answer, image, root)


def evaluate(cfg: dict, out: Path, generate, rank: int = 0, world: int = 1, barrier=lambda: None) -> dict | None:
    """Evaluate with `generate` on the procedural panel (cpu) or the benchmarks; rank 0 returns the scores."""
    from . import evaluation
    from .benchmarks import folder
    from .config import EVAL_VIEWS

    data: DataConfig = cfg["data"]
    judge = None
    if data.judge_base_url:
        judge = {"base_url": data.judge_base_url, "model": data.judge_model}
    if data.name == "procedural":
        for view in data.eval_views:
            path = out / EVAL_VIEWS[view] / f"rank{rank}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            items = [it for i, it in enumerate(procedural_items(data, out, view)) if i % world == rank]
            with path.open("w") as f:
                for batch in evaluation.batches(items, data.eval_batch_size):
                    for it, response in zip(batch, generate(batch), strict=True):
                        correct = evaluation.rule_correct("procedural", response, it.answer, multiple_choice=True)
                        rec = {"uid": it.uid, "answer": it.answer, "response": response, "correct": correct,
                               "info": {}}  # fmt: skip
                        f.write(json.dumps(rec) + "\n")
        barrier()
        if rank != 0:
            return None
        result = evaluation.collect_scores(out, [EVAL_VIEWS[v] for v in data.eval_views])
        write_json(out / "scores.json", result)
        return result
    root = Path(data.benchmark_root) if data.benchmark_root else data_root()
    roots = {name: folder(name, root) for name in data.benchmarks}
    limit = data.num_eval if data.num_eval > 0 else None
    return evaluation.evaluate(generate, roots, out, rank=rank, world=world, limit=limit,
                               batch_size=data.eval_batch_size, judge=judge, barrier=barrier)  # fmt: skip


def generator_for(cfg: dict, model=None, processor=None, trainer=None):
    """The configured generation back end (`data.eval_backend`)."""
    from agentrl_shared.generation import sync_vllm_weights

    from .evaluation import HFGenerator, OpenAIGenerator, VLLMGenerator

    data: DataConfig = cfg["data"]
    max_new = data.eval_max_new_tokens
    if data.eval_backend == "openai":
        return OpenAIGenerator(data.eval_base_url, data.eval_model or cfg["model"].name_or_path, max_new,
                               seed=data.eval_seed)  # fmt: skip
    if data.eval_backend == "vllm":
        if trainer is not None:  # TRL's colocated engine: load the trained weights into it first
            if not trainer.use_vllm or trainer.args.vllm_mode != "colocate":
                raise UsageError(
                    "data.eval_backend=vllm after training needs trainer.use_vllm=true vllm_mode=colocate."
                )
            if trainer.args.vllm_tensor_parallel_size != 1:
                raise UsageError("data.eval_backend=vllm shards items over ranks: set vllm_tensor_parallel_size=1.")
            sync_vllm_weights(trainer.vllm_generation)
            if trainer.args.vllm_enable_sleep_mode:
                trainer.vllm_generation.llm.wake_up()
            return VLLMGenerator(trainer.vllm_generation.llm, max_new, seed=data.eval_seed)
        import torch
        from vllm import LLM

        from agentrl_shared.lora import is_adapter_checkpoint, merge_checkpoint

        path = resolve_model(cfg)
        if is_adapter_checkpoint(path):  # vLLM reads plain weights: the adapters merged once, next to the checkpoint
            merged = Path(f"{path}-merged")
            path = str(merged if (merged / "config.json").exists() else merge_checkpoint(path, merged))
        llm = LLM(model=path, tensor_parallel_size=max(torch.cuda.device_count(), 1),
                  seed=data.eval_seed)  # fmt: skip
        return VLLMGenerator(llm, max_new, seed=data.eval_seed)
    if model is None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from agentrl_shared.lora import load_model

        path = resolve_model(cfg)
        model = load_model(path, AutoModelForImageTextToText, dtype=cfg["model"].dtype)  # an adapter one merged
        processor = AutoProcessor.from_pretrained(path, padding_side="left")
    model.eval()
    return HFGenerator(model, processor, max_new)


def result_record(cfg: dict, row: str, scores: dict, **extra) -> dict:
    return {
        "row": row,
        "model": cfg["model"].name_or_path,
        "config": cfg["_name"],
        "seed": cfg["trainer"].seed,
        "commit": git_commit(),
        # the judge that graded the answers the rules reject; None: rules only (the report marks it rule-scored)
        "judge": cfg["data"].judge_model if cfg["data"].judge_base_url else None,
        "scores": scores["scores"],
        "details": scores["details"],
        **extra,
    }


# --------------------------------------------------------------------------------------------------- commands


def build_trainer(cfg: dict, trainer_cls: type | None = None):
    """The dataset, the processor and [`VADTrainer`] (or `trainer_cls`, a subclass such as the bench's timed one)."""
    from transformers import AutoProcessor

    from agentrl_shared.lora import peft_config

    from .trainer import VADTrainer

    args: VADConfig = cfg["trainer"]
    path = resolve_model(cfg)
    args.model_init_kwargs = {"dtype": cfg["model"].dtype, **(args.model_init_kwargs or {})}
    if cfg["model"].attn_implementation is not None:
        args.model_init_kwargs["attn_implementation"] = cfg["model"].attn_implementation
    processor = AutoProcessor.from_pretrained(path, padding_side="left")
    dataset = train_dataset(cfg["data"], args.seed)
    lora = peft_config(cfg["model"].lora)
    if lora is not None and args.teacher_ema is not None:  # (VADTrainer refuses it too, after the model loads)
        raise UsageError(f"trainer.teacher_ema={args.teacher_ema} (vision_opd) with model.lora.r="
                         f"{cfg['model'].lora.r} is not supported: set model.lora.r=0 for that row.")  # fmt: skip
    return (trainer_cls or VADTrainer)(path, args=args, train_dataset=dataset, processing_class=processor,
                                       peft_config=lora)  # fmt: skip


def check_eval_world(cfg: dict, world: int) -> None:
    """`data.eval_backend=hf` evaluates on one process only: under ZeRO-3 every rank's `generate` all-gathers the
    shards at each decoding step, so ranks with other item counts or answer lengths would hang one another."""
    if cfg["data"].eval_backend == "hf" and world > 1:
        raise UsageError(
            f"data.eval_backend=hf evaluates on one process, not {world}: set data.eval_backend=vllm (or openai), or "
            "evaluate the saved checkpoint afterwards with `vad eval` in one process."
        )


def check_judge(data: DataConfig) -> None:
    """With `data.judge_base_url`, the judge must answer and serve `data.judge_model` before anything trains or
    generates (otherwise every answer the rules reject would wait out 3 failed requests and score "No")."""
    from .evaluation import served_models

    if not data.judge_base_url:
        return
    try:
        served = served_models(data.judge_base_url)
    except (OSError, ValueError, KeyError) as err:
        raise UsageError(
            f"The judge at data.judge_base_url={data.judge_base_url} does not answer ({err}): start it (`vllm serve "
            f"{data.judge_model} --port 8001`) or set data.judge_base_url=null to grade by the rules only (the "
            "report marks such results rule-scored)."
        ) from err
    if data.judge_model not in served:
        raise UsageError(
            f"The judge at {data.judge_base_url} serves {', '.join(served) or 'no model'}, not data.judge_model="
            f"{data.judge_model}: set data.judge_model to the served name."
        )


def check_resumable(args: VADConfig) -> None:
    """With `teacher_ema`, the checkpoint a run resumes from must hold the EMA teacher (`VADTrainer.load_teacher`)."""
    from transformers.trainer_utils import get_last_checkpoint

    from .trainer import TEACHER_EMA_FILE

    last = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
    if args.teacher_ema is not None and last is not None and not (Path(last) / TEACHER_EMA_FILE).exists():
        raise UsageError(
            f"{last} has no {TEACHER_EMA_FILE} (the EMA teacher of teacher_ema={args.teacher_ema}), so the run "
            f"cannot resume with its teacher: delete {args.output_dir} to rerun the row from the start."
        )


def train(cfg: dict, output: str, callbacks: list | None = None) -> dict:
    """Train one row, evaluate the trained student, write `results.json` (rank 0); returns the record (or {}). A
    SIGTERM/SIGINT saves the step in progress and ends the command (`Stopped`, exit 143): the same command resumes.

    The run is filed under the row its switches define (`config.row_label`), whatever asked for it. `callbacks`:
    extra `transformers.TrainerCallback`s (e.g. `vad.gpu_check`'s time budget).
    """
    from .config import row_label

    args: VADConfig = cfg["trainer"]
    check_eval_world(cfg, int(os.environ.get("WORLD_SIZE", "1")))  # before any model loads
    check_judge(cfg["data"])
    row = row_label(args, cfg["data"].minus_framing)
    out = run_dir(output, cfg, row)
    args.output_dir = str(out / "trainer")
    check_resumable(args)
    trainer = build_trainer(cfg)
    warn_launch_size(cfg, trainer)
    for callback in callbacks or []:
        trainer.add_callback(callback)
    processor = trainer.processing_class
    is_main = trainer.accelerator.is_main_process
    if is_main:
        write_json(out / "config.json", to_dict({k: v for k, v in cfg.items() if k != "_name"}))
    started = time.perf_counter()
    checkpoints = list(Path(args.output_dir).glob("checkpoint-*"))  # resumed with the EMA teacher, if any
    trainer.train(resume_from_checkpoint=bool(checkpoints) or None)
    train_s = time.perf_counter() - started
    if trainer.stopped_by_signal:  # (`SignalStop`) the step in progress is in a checkpoint; the same command resumes
        logger.warning("%s seed %d: stopped by a signal at step %d; the same command goes on from %s", row, args.seed,
                       trainer.state.global_step, args.output_dir)  # fmt: skip
        raise Stopped()
    if is_main:
        write_json(out / "log_history.json", {"log_history": trainer.state.log_history})
    generate = generator_for(cfg, trainer.model, processor, trainer)
    acc = trainer.accelerator
    scores = evaluate(cfg, out / "eval", generate, acc.process_index, acc.num_processes, acc.wait_for_everyone)
    if not is_main:
        return {}
    record = result_record(cfg, row, scores, train_seconds=round(train_s, 1), steps=trainer.state.global_step,
                           log_history=trainer.state.log_history)  # fmt: skip
    write_json(out / RESULTS, record)
    logger.info("%s seed %d: %s", row, args.seed, json.dumps(scores["scores"]))
    return record


def eval_base(cfg: dict, output: str, row: str = "base") -> dict:
    """Evaluate `model.name_or_path` as is (the `base` row, or a given checkpoint), one process."""
    check_judge(cfg["data"])
    out = run_dir(output, cfg, row)
    write_json(out / "config.json", to_dict({k: v for k, v in cfg.items() if k != "_name"}))
    scores = evaluate(cfg, out / "eval", generator_for(cfg))
    record = result_record(cfg, row, scores)
    write_json(out / RESULTS, record)
    logger.info("%s: %s", row, json.dumps(scores["scores"]))
    return record


def check_paper_scale(cfg: dict) -> None:
    """Fail fast at paper scale: CUDA and the training data must be present."""
    import torch

    from .views import vision_opd_file

    if not torch.cuda.is_available():
        raise UsageError(
            "vad reproduce --scale paper needs CUDA GPUs (Qwen3.5-4B/9B, 96 prompts x 8 rollouts, vLLM + ZeRO-3); "
            "none is visible. Run `vad reproduce --scale cpu` on this machine."
        )
    vision_opd_file(cfg["data"].path or data_root() / "vision_opd")


def reproduce(
    scale: str,
    seeds: list[int],
    config: str | None,
    output: str,
    overrides: list[str],
    flags: LaunchFlags = LaunchFlags(),
) -> list[dict]:
    """Every row of `data.rows` for every seed of `seeds`; a run whose `results.json` exists is not redone (an
    unfinished trained row goes on from its last checkpoint: `train` resumes).

    cpu: in this process. paper: each trained row in its own `accelerate launch` (ZeRO-3) on the config's processes
    (`launch:`), so every row starts from fresh GPU memory; the `base` row is evaluated in this process.
    `flags.dry_run` prints the launch commands and runs nothing (no GPU or data check, no evaluation).
    """
    from .config import row_label

    config = config or SCALE_CONFIGS[scale]
    # a dry run plans on any machine: the paper trainer section asks for bf16 GPUs, so it is read on the CPU
    plan = [*overrides, "trainer.use_cpu=true"] if flags.dry_run else overrides
    cfg = load(config, plan)
    if scale == "paper":  # each trained row runs on the config's processes
        check_eval_world(cfg, cfg["launch"].num_processes)
    if scale == "paper" and not flags.dry_run:
        check_paper_scale(cfg)
        check_judge(cfg["data"])
    records = []
    for seed in seeds:
        for row in cfg["data"].rows:
            trained = ROWS[row] is not None
            run = load(config, [*plan, f"trainer.seed={seed}"], row if trained else "run")
            label = row_label(run["trainer"], run["data"].minus_framing) if trained else row
            done = run_dir(output, run, label) / RESULTS
            if done.exists():
                logger.info("%s seed %d: finished earlier (%s), not redone", row, seed, done)
                records.append(json.loads(done.read_text()))
            elif not trained and flags.dry_run:
                print(f"# {row} seed {seed}: evaluated in this process (`vad eval --config {config}`), no launch")
            elif not trained:
                records.append(eval_base(run, output, row))
            elif scale == "cpu":
                records.append(train(run, output))
            else:
                train_args = ["--config", config, "--method", row, "--output", output, f"trainer.seed={seed}",
                              *overrides]  # fmt: skip
                launch(PACKAGE, run["launch"], train_args, flags)
                if not flags.dry_run:
                    records.append(json.loads(done.read_text()))
    logger.info("reproduce: runs are in %s; `vad report --runs %s` files them and rebuilds vad/README.md", output,
                output)  # fmt: skip
    return records


# --------------------------------------------------------------------------------------------------- entry


def parser():
    """`vad train|eval|reproduce|report` with the flags every trainer package's command line has
    (`agentrl_shared.cli.build_parser`), plus `reproduce --config`."""
    p, subs = build_parser(PACKAGE, __doc__, "smoke", list(METHODS))
    subs["eval"].set_defaults(method="base")
    subs["eval"].description = "evaluate model.name_or_path as is; --method: the row it is filed under (default base)"
    subs["reproduce"].add_argument(
        "--config", default=None,
        help=f"default: {SCALE_CONFIGS['cpu']} (cpu) / {SCALE_CONFIGS['paper']} (paper); any config of vad/configs",
    )  # fmt: skip
    return p, subs


def run(argv: list[str]):
    """`main` without the exit-code handling (in-process tests): returns what the command produced."""
    p, subs = parser()
    ns = parse_args(p, subs, argv)
    if ns.command == "report":
        from .report import report

        return report(ns.readme, ns.runs)
    if ns.command == "reproduce":
        return reproduce(ns.scale, seeds_arg(ns.seeds), ns.config, str(ns.output), ns.overrides, launch_flags(ns))
    if ns.command == "train":
        return train(load(ns.config, ns.overrides, ns.method), str(ns.output))
    return eval_base(load(ns.config, ns.overrides), str(ns.output), ns.method)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    argv = sys.argv[1:] if argv is None else argv

    def command():
        from .views import DataError

        try:
            run(argv)
        except DataError as err:
            raise UsageError(str(err)) from err

    run_command(PACKAGE, command)


if __name__ == "__main__":
    main()
