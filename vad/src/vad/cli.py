"""`vad train|eval|reproduce|report --config NAME key=value ...` (design/architecture.md "Two scales, one command").

Parses, loads the config through `agentrl_shared.config`, prints the resolved config and writes it next to the
results, then dispatches. `reproduce --scale cpu` trains the method and its baselines on procedural data with a tiny
random Qwen2.5-VL (mechanics only, not the paper's numbers); `--scale paper` fails fast without CUDA or data.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

from agentrl_shared.config import ModelConfig, load_config, to_dict  # noqa: E402
from agentrl_shared.report import replace_block  # noqa: E402

from .config import DataConfig, VADConfig  # noqa: E402


SECTIONS = {"trainer": VADConfig, "data": DataConfig, "model": ModelConfig}
COMMANDS = ("train", "eval", "reproduce", "report")
SCALES = ("cpu", "paper")
SCALE_CONFIGS = {"cpu": "procedural_tiny-qwen25vl_cpu", "paper": "visionopd_qwen3.5-4b_paper"}
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # vad/
README = PACKAGE_DIR / "README.md"
PAPER_RESULTS = PACKAGE_DIR / "paper_results.json"
TINY_VLM = "tiny-qwen25-vl"


def commit() -> str:
    """Short commit of the working tree (results and bench figures carry it), or `unknown`."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=PACKAGE_DIR)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def model_path(name: str) -> str:
    """`tiny-qwen25-vl` is built offline (agentrl_shared.vlm); anything else is a local path or a Hub id."""
    if name == TINY_VLM:
        from agentrl_shared.vlm import tiny_qwen25_vl

        return str(tiny_qwen25_vl())
    return name


def data_path(data: DataConfig, folder: str) -> Path:
    """`data.path`, else `$AGENTRL_DATA/<folder>` (default `../shared/data/<folder>` from the repository root)."""
    if data.path is not None:
        return Path(data.path)
    return Path(os.environ.get("AGENTRL_DATA", PACKAGE_DIR.parent.parent / "shared" / "data")) / folder


def view_kwargs(data: DataConfig) -> dict:
    return {
        "crop_context": data.crop_context,
        "degrade_scale": data.degrade_scale,
        "minus_framing": data.minus_framing,
    }


def train_rows(data: DataConfig) -> list[dict]:
    from .data import load_vision_opd, procedural_rows

    if data.name == "procedural":
        size = {"image_size": data.image_size, "detail_size": data.detail_size}
        return procedural_rows(data.num_train, seed=data.seed, **size, **view_kwargs(data))
    if data.name == "vision_opd":
        limit = data.num_train if data.num_train > 0 else None
        return load_vision_opd(data_path(data, "Vision-OPD-6K"), limit=limit, **view_kwargs(data))
    raise ValueError(f"Unknown dataset {data.name!r}; valid: procedural, vision_opd.")


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------------------------------- commands


def train(resolved: dict, trainer_cls: type | None = None):
    """Build the dataset, the processor and [`VADTrainer`] (or `trainer_cls`, a subclass: the bench's timed one),
    train, and write the log history; returns the trainer."""
    from datasets import Dataset
    from transformers import AutoProcessor

    from .data import choice_accuracy_reward
    from .trainer import VADTrainer

    args: VADConfig = resolved["trainer"]
    model: ModelConfig = resolved["model"]
    path = model_path(model.name_or_path)
    args.model_init_kwargs = {"dtype": model.dtype, **(args.model_init_kwargs or {})}
    if model.attn_implementation is not None:
        args.model_init_kwargs["attn_implementation"] = model.attn_implementation
    processor = AutoProcessor.from_pretrained(path, padding_side="left")
    dataset = Dataset.from_list(train_rows(resolved["data"]))
    # The exact-match reward is logged as training accuracy; only target=grpo optimises it (spec 5).
    trainer = (trainer_cls or VADTrainer)(
        path, reward_funcs=[choice_accuracy_reward], args=args, train_dataset=dataset, processing_class=processor
    )
    trainer.train()
    write_json(Path(args.output_dir) / "log_history.json", {"log_history": trainer.state.log_history})
    return trainer


def evaluate(resolved: dict, model=None, processor=None) -> dict[str, float]:
    """Greedy accuracy by exact option matching (or the judge) on the procedural held-out set or the benchmarks."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from .data import (
        BENCHMARK_DIRS,
        extract_choice,
        judge_choice,
        load_benchmark,
        procedural_sample,
        score_answer,
    )

    data: DataConfig = resolved["data"]
    if model is None:
        path = model_path(resolved["model"].name_or_path)
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=resolved["model"].dtype)
        processor = AutoProcessor.from_pretrained(path, padding_side="left")
    model.eval()
    if data.name == "procedural":
        import random

        from .data import EvalItem, format_question

        rng = random.Random(10_000 + data.seed)  # held out: a different stream from the training rows
        samples = [
            procedural_sample(rng, image_size=data.image_size, detail_size=data.detail_size)
            for _ in range(data.num_eval)
        ]
        suites = {
            "procedural": [
                EvalItem(str(i), s.image, format_question(s.question, s.options), s.answer, s.options, s.kind)
                for i, s in enumerate(samples)
            ]
        }
        max_new = 8  # cpu scale: an option letter needs one or two tokens
    else:
        limit = data.num_eval if data.num_eval > 0 else None
        suites = {b: load_benchmark(b, data_path(data, BENCHMARK_DIRS[b]), limit=limit) for b in data.benchmarks}
        max_new = data.eval_max_new_tokens
    scores = {}
    for name, items in suites.items():
        correct = []
        for start in range(0, len(items), 8):
            batch = items[start : start + 8]
            texts = [
                processor.apply_chat_template(
                    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": it.prompt}]}],
                    add_generation_prompt=True,
                    tokenize=False,
                )
                for it in batch
            ]
            enc = processor(images=[[it.image] for it in batch], text=texts, padding=True, return_tensors="pt")
            enc = enc.to(model.device)
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=max_new, do_sample=False)  # spec 6.3: greedy, 1 sample
            answers = processor.batch_decode(out[:, enc["input_ids"].size(1) :], skip_special_tokens=True)
            for it, text in zip(batch, answers, strict=True):
                if data.judge_base_url is not None and it.options:
                    choice = extract_choice(text, len(it.options)) or judge_choice(
                        text, it, base_url=data.judge_base_url, model=data.judge_model
                    )
                    correct.append(float(choice == it.answer))
                else:
                    correct.append(score_answer(text, it.answer, max(len(it.options), 1)))
        scores[name] = 100.0 * sum(correct) / max(len(correct), 1)
    from .data import HELD_OUT_BENCHMARKS, MAIN_BENCHMARKS

    for avg, names in (("Avg6", MAIN_BENCHMARKS), ("Avg4", HELD_OUT_BENCHMARKS)):  # unweighted means (Tabs. 1, 3)
        if all(n in scores for n in names):
            scores[avg] = sum(scores[n] for n in names) / len(names)
    return scores


def check_paper_scale(resolved: dict) -> None:
    """Fail fast at paper scale: CUDA and the training data must be present (architecture.md "Two scales")."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            "vad reproduce --scale paper needs CUDA GPUs (paper: Qwen3.5-4B/9B, 96 prompts x 8 rollouts, vLLM + "
            "ZeRO-3); none is visible. Run `vad reproduce --scale cpu` on this machine."
        )
    path = data_path(resolved["data"], "Vision-OPD-6K")
    if not path.exists():
        raise SystemExit(
            f"Training data not found at {path}. Download Vision-OPD-6K with "
            "`huggingface-cli download --repo-type dataset yuanqianhao/Vision-OPD-6K --local-dir <dir>` and pass "
            "data.path=<dir> (or set $AGENTRL_DATA); evaluation sets are listed in vad/README.md."
        )


def reproduce(resolved: dict, scale: str, config_name: str) -> list[dict]:
    """Train the configured target and `data.baselines` for each seed, evaluate, write results JSON and curves."""
    import copy

    if scale == "paper":
        check_paper_scale(resolved)
    data: DataConfig = resolved["data"]
    base: VADConfig = resolved["trainer"]
    out_dir = Path(data.results_dir) / scale
    results = []
    for target in [base.target, *[b for b in data.baselines if b != base.target]]:
        for seed in data.seeds:
            run = copy.deepcopy(resolved)
            args = run["trainer"]
            args.target, args.seed = target, seed
            if target == "direct":
                args.reg_weight = 0.0  # spec 5: direct teacher matching has no regulariser
            args.output_dir = str(out_dir / f"{target}_seed{seed}")
            started = time.perf_counter()
            trainer = train(run)
            scores = evaluate(run, trainer.model, trainer.processing_class)
            for bench, value in scores.items():
                record = {
                    "benchmark": bench,
                    "model": run["model"].name_or_path,
                    "target": target,
                    "seed": seed,
                    "metric": "accuracy",
                    "value": value,
                    "scale": scale,
                    "config": config_name,
                    "commit": commit(),
                    "wall_s": round(time.perf_counter() - started, 1),
                    "log_history": trainer.state.log_history,
                }
                write_json(out_dir / f"{bench}_{target}_seed{seed}.json", record)
                results.append(record)
            del trainer
    plot_curves(results, out_dir / "learning_curves.png")
    print_table(results)
    return results


def plot_curves(results: list[dict], path: Path) -> None:
    """Per-run training curves of the main loss and the logged accuracy reward (from the same runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    seen = set()
    for rec in results:
        key = (rec["target"], rec["seed"])
        if key in seen:
            continue
        seen.add(key)
        logs = [h for h in rec["log_history"] if "loss" in h and "step" in h]
        steps = [h["step"] for h in logs]
        axes[0].plot(steps, [h.get("vad/vis_loss", h["loss"]) for h in logs], label=f"{key[0]} s{key[1]}")
        axes[1].plot(steps, [h.get("reward", 0.0) for h in logs], label=f"{key[0]} s{key[1]}")
    axes[0].set(title="vad/vis_loss (loss for grpo)", xlabel="step")
    axes[1].set(title="train accuracy reward", xlabel="step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def aggregate(results: list[dict]) -> dict[tuple[str, str, str], str]:
    """(benchmark, model, target) -> 'mean +- std (n)' over seeds."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for rec in results:
        groups.setdefault((rec["benchmark"], rec["model"], rec["target"]), []).append(rec)
    out = {}
    for key, recs in groups.items():
        values = [r["value"] for r in recs]
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        out[key] = (f"{statistics.mean(values):.2f} +- {std:.2f} (n={len(values)})", recs[0]["commit"])
    return out


def print_table(results: list[dict]) -> None:
    print("| Benchmark | Model | Target | Ours |")
    print("|---|---|---|---|")
    for (bench, model, target), (cell, _) in sorted(aggregate(results).items()):
        print(f"| {bench} | {model} | {target} | {cell} |")


def report(results_dir: Path, readme: Path = README) -> str:
    """Rewrite the README results table between its markers from results JSON and `paper_results.json`."""
    results = [
        json.loads(p.read_text()) for p in sorted(results_dir.rglob("*.json")) if p.name != "resolved_config.json"
    ]
    results = [r for r in results if "benchmark" in r and "value" in r]
    ours = aggregate(results)
    paper = json.loads(PAPER_RESULTS.read_text())["rows"]
    lines = [
        "| Benchmark | Model | Metric | Target | Paper | Ours (mean +- std, n seeds) | commit |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in paper:
        cell, sha = ours.get((row["benchmark"], row["model"], row["target"]), ("not run", "-"))
        paper_cell = f"{row['value']} ({row['source']})"
        lines.append(
            f"| {row['benchmark']} | {row['model']} | {row['metric']} | {row['target']} | {paper_cell} | {cell} | {sha} |"
        )
    paper_keys = {(r["benchmark"], r["model"], r["target"]) for r in paper}
    for key, (cell, sha) in sorted(ours.items()):
        if key not in paper_keys:  # cpu-scale mechanics rows: no paper number exists for them
            lines.append(f"| {key[0]} | {key[1]} | accuracy | {key[2]} | - (mechanics check) | {cell} | {sha} |")
    table = "\n".join(lines)
    readme.write_text(replace_block(readme.read_text(), "results", table))
    return table


# --------------------------------------------------------------------------------------------------- entry


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vad", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--config", default=None, help="a file in vad/configs/ (without .yaml) or a YAML path")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="reproduce: cpu (minutes) or paper (GPU node)")
    parser.add_argument("overrides", nargs="*", help="section.key=value or key=value")
    return parser.parse_intermixed_args(argv)  # `--config` may come before or after the overrides


def run(argv: list[str] | None = None):
    """Same as `main`, returning what the command produced (the trainer for `train`), for in-process tests."""
    ns = parse(argv)
    if ns.command == "report":
        table = report(
            Path(load_config(ns.config or SCALE_CONFIGS["cpu"], ns.overrides, SECTIONS, "vad")["data"].results_dir)
        )
        print(table)
        return table
    name = ns.config or (SCALE_CONFIGS[ns.scale] if ns.command == "reproduce" else "smoke")
    resolved = load_config(name, ns.overrides, SECTIONS, "vad")
    dumped = to_dict(resolved)
    print(json.dumps(dumped, indent=2, default=str))
    where = (
        Path(resolved["data"].results_dir) / ns.scale
        if ns.command == "reproduce"
        else Path(resolved["trainer"].output_dir)
    )
    write_json(where / "resolved_config.json", dumped)
    if ns.command == "train":
        return train(resolved)
    if ns.command == "eval":
        scores = evaluate(resolved)
        write_json(where / "eval_results.json", {"scores": scores, "commit": commit(), "config": name})
        print(json.dumps(scores, indent=2))
        return scores
    if ns.command == "reproduce":
        return reproduce(resolved, ns.scale, name)
    raise ValueError(f"Unknown command {ns.command!r}; valid: {', '.join(COMMANDS)}.")


def main(argv: list[str] | None = None) -> None:
    run(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
