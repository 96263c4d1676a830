"""`vad train|eval|reproduce|report`: one table row per run, written under an output folder the user names.

- `vad train --config NAME [--row ROW] [--output DIR] key=value ...`: train one row of the paper's tables (the row's
  switches, then the overrides), evaluate the trained student, write `<DIR>/<config>/<row>_seed<s>/result.json`.
- `vad eval --config NAME [--output DIR] key=value ...`: evaluate `model.name_or_path` (the `base` row, or a
  checkpoint) with the configured back end; streaming and resumable.
- `vad reproduce --scale cpu|paper [--config NAME] [--output DIR] key=value ...`: every row in `data.rows` x
  `data.seeds` (finished runs are not redone).
- `vad report [RUN_DIR ...] [--results DIR] [--readme FILE]`: copy finished runs' results into the results folder
  and rebuild the README table from it. Only `report` writes committed files.
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

from agentrl_shared.cli import LaunchFlags, add_launch_flags, launch, launch_flags, warn_launch_size  # noqa: E402
from agentrl_shared.config import ConfigError, LaunchConfig, ModelConfig, load_config, to_dict  # noqa: E402
from agentrl_shared.models import model_path  # noqa: E402
from agentrl_shared.provenance import git_commit  # noqa: E402

from .config import EVAL_VIEWS, ROWS, DataConfig, VADConfig, row_label  # noqa: E402
from .views import DataError  # noqa: E402
from .warmstart import WARM_START  # noqa: E402


logger = logging.getLogger("vad")
SECTIONS = {"trainer": VADConfig, "data": DataConfig, "model": ModelConfig, "launch": LaunchConfig}
SCALE_CONFIGS = {"cpu": "procedural_warm-tiny-qwen25vl_cpu", "paper": "visionopd_qwen3.5-4b_paper"}
DEFAULT_OUTPUT = "runs/vad"
TINY_VLM = "tiny-qwen25-vl"  # built offline by agentrl_shared.vlm


class UsageError(Exception):
    """A configuration or data problem: `main` prints its one-line message and exits with status 2."""


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


def load(config: str, overrides: list[str], row: str | None = None) -> dict:
    """Load `config`, apply the row's switches (`ROWS`), then the command-line overrides."""
    try:
        resolved = load_config(config, overrides, SECTIONS, "vad")
        if row is not None:
            if row not in ROWS or ROWS[row] is None:
                raise ValueError(f"Unknown trained row {row!r}; valid: {', '.join(k for k, v in ROWS.items() if v)}.")
            switches = [f"trainer.{k}={v}" for k, v in ROWS[row].items()]
            resolved = load_config(config, [*switches, *overrides], SECTIONS, "vad")
    except (ConfigError, ValueError) as err:
        raise UsageError(str(err)) from err
    resolved["_name"] = config
    return resolved


def resolve_model(cfg: dict) -> str:
    """`model.name_or_path` as a local path: `vad-warm-start` builds (once) the warm start for the data config's
    procedural task and the run's seed `trainer.seed` (`warmstart.warm_start`: its own random init and pre-training
    questions per seed); other names go through `agentrl_shared.models.model_path`."""
    name = cfg["model"].name_or_path
    if name != WARM_START:
        return model_path(name)
    from .warmstart import warm_start

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
            trainer.vllm_generation.sync_weights()
            if trainer.args.vllm_enable_sleep_mode:
                trainer.vllm_generation.llm.wake_up()
            return VLLMGenerator(trainer.vllm_generation.llm, max_new, seed=data.eval_seed)
        import torch
        from vllm import LLM

        llm = LLM(model=resolve_model(cfg), tensor_parallel_size=max(torch.cuda.device_count(), 1),
                  seed=data.eval_seed)  # fmt: skip
        return VLLMGenerator(llm, max_new, seed=data.eval_seed)
    if model is None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        path = resolve_model(cfg)
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=cfg["model"].dtype)
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

    from .trainer import VADTrainer

    args: VADConfig = cfg["trainer"]
    path = resolve_model(cfg)
    args.model_init_kwargs = {"dtype": cfg["model"].dtype, **(args.model_init_kwargs or {})}
    if cfg["model"].attn_implementation is not None:
        args.model_init_kwargs["attn_implementation"] = cfg["model"].attn_implementation
    processor = AutoProcessor.from_pretrained(path, padding_side="left")
    dataset = train_dataset(cfg["data"], args.seed)
    return (trainer_cls or VADTrainer)(path, args=args, train_dataset=dataset, processing_class=processor)


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


def train(cfg: dict, output: str, callbacks: list | None = None) -> dict:
    """Train one row, evaluate the trained student, write `result.json` (rank 0); returns the record (or {}).

    The run is filed under the row its switches define (`config.row_label`), whatever asked for it. `callbacks`:
    extra `transformers.TrainerCallback`s (e.g. `vad.gpu_check`'s time budget).
    """
    args: VADConfig = cfg["trainer"]
    check_eval_world(cfg, int(os.environ.get("WORLD_SIZE", "1")))  # before any model loads
    check_judge(cfg["data"])
    row = row_label(args, cfg["data"].minus_framing)
    out = run_dir(output, cfg, row)
    args.output_dir = str(out / "trainer")
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
    if is_main:
        write_json(out / "log_history.json", {"log_history": trainer.state.log_history})
    generate = generator_for(cfg, trainer.model, processor, trainer)
    acc = trainer.accelerator
    scores = evaluate(cfg, out / "eval", generate, acc.process_index, acc.num_processes, acc.wait_for_everyone)
    if not is_main:
        return {}
    record = result_record(cfg, row, scores, train_seconds=round(train_s, 1), steps=trainer.state.global_step,
                           log_history=trainer.state.log_history)  # fmt: skip
    write_json(out / "result.json", record)
    logger.info("%s seed %d: %s", row, args.seed, json.dumps(scores["scores"]))
    return record


def eval_base(cfg: dict, output: str, row: str = "base") -> dict:
    """Evaluate `model.name_or_path` as is (the `base` row, or a given checkpoint), one process."""
    check_judge(cfg["data"])
    out = run_dir(output, cfg, row)
    write_json(out / "config.json", to_dict({k: v for k, v in cfg.items() if k != "_name"}))
    scores = evaluate(cfg, out / "eval", generator_for(cfg))
    record = result_record(cfg, row, scores)
    write_json(out / "result.json", record)
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
    scale: str, config: str | None, output: str, overrides: list[str], flags: LaunchFlags = LaunchFlags()
) -> list[dict]:
    """Every row of `data.rows` for every seed of `data.seeds`; a run whose `result.json` exists is not redone (an
    unfinished trained row goes on from its last checkpoint: `train` resumes).

    cpu: in this process. paper: each trained row in its own `accelerate launch` (ZeRO-3) on the config's processes
    (`launch:`), so every row starts from fresh GPU memory; the `base` row is evaluated in this process.
    `flags.dry_run` prints the launch commands and runs nothing (no GPU or data check, no evaluation).
    """
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
    for seed in cfg["data"].seeds:
        for row in cfg["data"].rows:
            run = load(config, [*plan, f"trainer.seed={seed}"], None if ROWS[row] is None else row)
            label = row if ROWS[row] is None else row_label(run["trainer"], run["data"].minus_framing)
            done = run_dir(output, run, label) / "result.json"
            if done.exists():
                logger.info("%s seed %d: finished earlier (%s), not redone", row, seed, done)
                records.append(json.loads(done.read_text()))
            elif ROWS[row] is None and flags.dry_run:
                print(f"# {row} seed {seed}: evaluated in this process (`vad eval --config {config}`), no launch")
            elif ROWS[row] is None:
                records.append(eval_base(run, output, row))
            elif scale == "cpu":
                records.append(train(run, output))
            else:
                train_args = ["--config", config, "--row", row, "--output", output, f"trainer.seed={seed}", *overrides]
                launch("vad", run["launch"], train_args, flags)
                if not flags.dry_run:
                    records.append(json.loads(done.read_text()))
    return records


# --------------------------------------------------------------------------------------------------- entry


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vad", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def common(q, config_help):
        q.add_argument("--config", default=None, help=config_help)
        q.add_argument(
            "--output", default=DEFAULT_OUTPUT, help=f"folder for runs (default {DEFAULT_OUTPUT}, git-ignored)"
        )
        q.add_argument("overrides", nargs="*", help="section.key=value or key=value (e.g. trainer.learning_rate=1e-5)")

    q = sub.add_parser("train", help="train one table row, then evaluate it")
    common(q, "config in vad/configs (name without .yaml) or a YAML path; default smoke")
    q.add_argument("--row", choices=[k for k, v in ROWS.items() if v is not None], default=None,
                   help="apply this row's switches before the overrides (default: the row the config defines)")  # fmt: skip
    q = sub.add_parser("eval", help="evaluate model.name_or_path as is (the base row, or a checkpoint)")
    common(q, "config in vad/configs or a YAML path; default smoke")
    q.add_argument("--row", default="base", help="row name the result is filed under (default base)")
    q = sub.add_parser("reproduce", help="every row in data.rows x data.seeds of one scale")
    common(q, f"default: {SCALE_CONFIGS['cpu']} (cpu) / {SCALE_CONFIGS['paper']} (paper)")
    q.add_argument("--scale", choices=sorted(SCALE_CONFIGS), default="cpu",
                   help="cpu: tiny VLM on procedural data, minutes; paper: GPU node, Vision-OPD-6K + 10 benchmarks")  # fmt: skip
    add_launch_flags(q)
    q = sub.add_parser("report", help="file finished runs' results under --results and rebuild the README table")
    q.add_argument("runs", nargs="*", help="run folders to take result.json files from (searched recursively)")
    q.add_argument("--results", default="vad/results", help="committed results folder (default vad/results)")
    q.add_argument("--readme", default="vad/README.md", help="README whose results block is rewritten")
    return p


def run(argv: list[str] | None = None):
    """`main` without the exit-code handling (in-process tests): returns what the command produced."""
    p = parser()
    ns, rest = p.parse_known_args(argv)  # overrides may sit before, between or after the options
    unknown = [r for r in rest if r.startswith("-") or "=" not in r]
    if unknown or (rest and ns.command == "report"):
        p.error(f"unrecognized arguments: {' '.join(unknown or rest)}")
    if ns.command != "report":
        ns.overrides = [*ns.overrides, *rest]
    if ns.command == "report":
        from .report import report

        return report([Path(r) for r in ns.runs], Path(ns.results), Path(ns.readme))
    if ns.command == "reproduce":
        return reproduce(ns.scale, ns.config, ns.output, ns.overrides, launch_flags(ns))
    cfg = load(ns.config or "smoke", ns.overrides, ns.row if ns.command == "train" else None)
    if ns.command == "train":
        return train(cfg, ns.output)
    return eval_base(cfg, ns.output, ns.row)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    try:
        run(argv if argv is not None else sys.argv[1:])
    except (UsageError, DataError, ConfigError) as err:
        logger.error("%s", err)
        sys.exit(2)


if __name__ == "__main__":
    main()
