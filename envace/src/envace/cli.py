"""`envace train|eval|reproduce|report --config NAME key=value ...` (same skeleton as every package's CLI).

`train` runs one configuration and evaluates the result on the fixed panel with the real tool back ends (one
committed execution per task); `eval` evaluates a model (the untrained baseline, or a checkpoint), optionally with
test-time rehearsal (`--tts parallel|sequential`); `reproduce` runs one scale's plan (methods x seeds) and writes
results JSON and the README table; `report` regenerates the table from the result files. No algorithm logic here.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

PACKAGE = "envace"
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # envace/ (the folder holding README.md)
RESULTS_DIR = PACKAGE_DIR / "results"
# CPU plan: EnvACE against its baselines (paper section 5) as overrides of one config
CPU_CONFIG = "tooltasks_smollm2-135m_cpu"
CPU_METHODS = {
    "caller_only_real": ["trainer.tool_return_mode=real"],
    "envace": [],
}
CPU_TTS = {"tts_parallel": "parallel", "tts_sequential": "sequential"}
PAPER_CONFIGS = ["checklist_qwen3-8b_paper"]


def sections():
    from agentrl_shared.config import ModelConfig

    from .config import EnvACEConfig, EnvConfig

    return {"trainer": EnvACEConfig, "env": EnvConfig, "model": ModelConfig}


def load(config: str, overrides: list[str]) -> dict:
    from agentrl_shared.config import ConfigError, load_config

    try:
        return load_config(config, overrides, sections(), PACKAGE)
    except (ConfigError, ValueError) as exc:  # config errors: one line naming the problem and the fix
        raise SystemExit(f"envace: {exc}") from None


def run_name(cfg: dict, method: str) -> str:
    model = Path(cfg["model"].name_or_path).name
    return f"{cfg['env'].source}_{model}_{method}_seed{cfg['trainer'].seed}"


def _dump(cfg: dict, out: Path) -> None:
    from agentrl_shared.config import to_dict

    out.mkdir(parents=True, exist_ok=True)
    resolved = to_dict(cfg)
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    print(json.dumps({k: v for k, v in resolved.items() if k != "trainer"}, indent=2))
    t = cfg["trainer"]
    print(f"trainer: lr={t.learning_rate} tool_return_mode={t.tool_return_mode} model_sharing={t.model_sharing} "
          f"judge={t.judge} beta={t.beta} G={t.num_generations} max_steps={t.max_steps} output_dir={t.output_dir}")  # fmt: skip


def _tasks(cfg: dict, split: str) -> list[dict]:
    from .data import DataError, load_tasks

    env = cfg["env"]
    n = env.num_train_tasks if split == "train" else env.num_eval_tasks
    path = env.train_path if split == "train" else env.eval_path
    try:
        tasks = load_tasks(env.source, split, n, env.task_seed, path, env.max_task_turns, env.max_num_checklist)
    except DataError as exc:
        raise SystemExit(f"envace: {exc}") from None
    return tasks if split == "train" else tasks[: env.eval_episodes]


def summarize(trajs: list[dict], seeds: list[int]) -> dict:
    """Mean episode reward R and success (R = 1) per evaluation seed, mean +- std over seeds."""
    out = {"num_episodes": len(trajs)}
    for key in ("reward", "success"):
        per_seed = [statistics.fmean(float(t[key]) for t in trajs if t["seed"] == s) for s in seeds]
        out[f"{key}_per_seed"] = per_seed
        out[f"{key}_mean"] = statistics.fmean(per_seed)
        out[f"{key}_std"] = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
    reasons = [t["stop_reason"] for t in trajs]
    out["stop_reasons"] = {r: reasons.count(r) / len(reasons) for r in sorted(set(reasons))}
    return out


def trajectory_record(t, seed: int) -> dict:
    return {"task_id": t.task["task_id"], "seed": seed, "reward": t.reward, "success": t.success,
            "stop_reason": t.stop_reason, "turn_scores": t.turn_scores, "judge_failures": t.judge_failures,
            "messages": t.messages}  # fmt: skip


def train(cfg: dict, method: str = "run") -> dict:
    """Train one configuration, then evaluate it on the fixed panel; returns the results payload."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from agentrl_shared.evaluation import write_results
    from agentrl_shared.models import model_path

    from .trainer import EnvACETrainer, make_collector

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    if args.output_dir == "trainer_output":  # TRL's default: name the run instead
        args.output_dir = f"runs/envace/{run_name(cfg, method)}"
    out = Path(args.output_dir)
    _dump(cfg, out)
    path = model_path(model_cfg.name_or_path)
    args.model_init_kwargs = {"dtype": model_cfg.dtype, **(args.model_init_kwargs or {})}
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    dataset = Dataset.from_list(
        [{"prompt": t["user_turns"][0], "task_json": json.dumps(t)} for t in _tasks(cfg, "train")]
    )
    panel, seeds = _tasks(cfg, "eval"), env.eval_seeds
    curve: list[dict] = []
    curve_path = out / "eval_curve.jsonl"

    def evaluate(trainer, step: int) -> dict:
        collector = make_collector(args, env, tok, env.eval_tool_return_mode)
        records = []
        for seed in seeds:
            torch.manual_seed(seed)
            records += [trajectory_record(t, seed) for t in trainer.evaluate_panel(panel, [seed], collector)]
        summary = summarize(records, seeds)
        point = {"step": step, "rollouts": trainer.rollouts_done, **summary}
        if trainer.accelerator.is_main_process:
            curve.append(point)
            with curve_path.open("a") as f:
                f.write(json.dumps(point) + "\n")
            print(f"[eval] rollout {trainer.rollouts_done}: reward {summary['reward_mean']:.3f} "
                  f"success {summary['success_mean']:.3f}")  # fmt: skip
        return summary

    class PanelEval(TrainerCallback):
        """Evaluate every `env.eval_every` rollouts on the panel (verl `trainer.test_freq`)."""

        def on_step_end(self, targs, state, control, **kwargs):
            if env.eval_every and state.global_step % env.eval_every == 0:
                evaluate(trainer, state.global_step)

    trainer = EnvACETrainer(path, args, env, dataset, processing_class=tok, callbacks=[PanelEval()])
    if curve_path.exists():
        curve_path.unlink()
    t0 = time.perf_counter()
    if env.eval_every:
        evaluate(trainer, 0)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    train_s = time.perf_counter() - t0
    trainer.save_model(str(out / "final"))  # weights stay under runs/ (git-ignored); results go to results/
    if trainer.simulator is not None and trainer.accelerator.is_main_process:  # no-share: the rehearsal model too
        trainer.simulator.save_pretrained(out / "final" / "simulator")
    final = curve[-1] if curve and curve[-1]["step"] == trainer.state.global_step else None
    summary = final if final is not None else evaluate(trainer, trainer.state.global_step)
    payload = {
        "method": method,
        "source": env.source,
        "model": model_cfg.name_or_path,
        "seed": args.seed,
        "eval_seeds": seeds,
        "train_seconds": train_s,
        "steps": trainer.state.global_step,
        "rollouts": trainer.rollouts_done,
        "final": {k: v for k, v in summary.items() if k not in ("step", "rollouts")},
        "curve": curve,
        "log_history": trainer.state.log_history,
        "config": json.loads((out / "config.json").read_text()),
        "torch_threads": torch.get_num_threads(),
    }
    if trainer.accelerator.is_main_process:
        write_results(out / "results.json", payload)
    return payload


def evaluate_model(cfg: dict, method: str = "eval", out: Path | None = None, tts: str = "none") -> dict:
    """Evaluate `model.name_or_path` on the panel with HF generation and the real tool back ends; with `tts`, each
    task is first rehearsed privately (`tts.py`) and then executed once. Episodes are logged as they end (resume)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl_shared.evaluation import write_results
    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.models import model_path

    from .trainer import make_collector
    from .tts import rehearse_then_execute

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    out = out or Path(args.output_dir)
    _dump(cfg, out)
    path = model_path(model_cfg.name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, model_cfg.dtype))
    panel, seeds = _tasks(cfg, "eval"), env.eval_seeds
    generate = HFGenerator(model, tok, args.max_completion_length, env.eval_temperature, env.eval_top_p)
    collector = make_collector(args, env, tok, env.eval_tool_return_mode)
    log = out / "episodes.jsonl"
    done = (
        {(r["task_id"], r["seed"]): r for r in map(json.loads, log.read_text().splitlines())} if log.exists() else {}
    )
    chunk = max(args.per_device_train_batch_size * args.steps_per_generation, 1)
    t0 = time.perf_counter()
    for seed in seeds:
        todo = [t for t in panel if (t["task_id"], seed) not in done]
        for start in range(0, len(todo), chunk):
            torch.manual_seed(seed * 100_003 + start)
            batch = todo[start : start + chunk]
            if tts == "none":
                trajs = collector.collect(batch, list(range(len(batch))), generate)
            else:
                rehearsal = make_collector(args, env, tok, "agent", judged=False)
                trajs = rehearse_then_execute(batch, generate, rehearsal, collector, tts, args.tts_budget)
            records = [trajectory_record(t, seed) for t in trajs]
            with log.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
            done.update({(r["task_id"], r["seed"]): r for r in records})
            print(f"[eval] {method} seed {seed}: {min(start + chunk, len(todo))}/{len(todo)} tasks")
    summary = summarize([done[(t["task_id"], s)] for s in seeds for t in panel], seeds)
    payload = {
        "method": method,
        "source": env.source,
        "model": model_cfg.name_or_path,
        "seed": args.seed,
        "eval_seeds": seeds,
        "tts": tts,
        "eval_seconds": time.perf_counter() - t0,
        "final": summary,
        "curve": [],
        "config": json.loads((out / "config.json").read_text()),
    }
    write_results(out / "results.json", payload)
    print(f"[eval] {method}: reward {summary['reward_mean']:.3f} +- {summary['reward_std']:.3f}, "
          f"success {summary['success_mean']:.3f}")  # fmt: skip
    return payload


def reproduce(scale: str, seeds: list[int], overrides: list[str]) -> None:
    """Run one scale's plan. CPU: untrained vs caller-only with real tools vs EnvACE on the generated tool tasks,
    then test-time rehearsal (parallel, sequential) of the untrained and the EnvACE policies. Runs live in
    `runs/envace/cpu/` (git-ignored; finished runs are not redone); results JSON are copied to `envace/results/cpu/`
    and the README table is rebuilt from there."""
    if scale == "cpu":
        from .report import report

        for seed in seeds:
            plan = [("untrained", None, "none", None)]
            plan += [(m, extra, "none", None) for m, extra in CPU_METHODS.items()]
            plan += [(f"{name}_{policy}", None, mode, policy) for name, mode in CPU_TTS.items()
                     for policy in ("untrained", "envace")]  # fmt: skip
            for method, extra, tts, policy in plan:
                run = Path("runs") / "envace" / "cpu" / method / f"seed{seed}"
                if (run / "results.json").exists():
                    print(f"[reproduce] {method} seed {seed}: finished earlier in {run}, not redone")
                else:
                    model = []
                    if policy == "envace":
                        model = [f"model.name_or_path={Path('runs/envace/cpu/envace') / f'seed{seed}' / 'final'}"]
                    cfg = load(CPU_CONFIG, [*(extra or []), *overrides, *model, f"trainer.seed={seed}",
                                            f"trainer.output_dir={run}"])  # fmt: skip
                    if extra is None:
                        evaluate_model(cfg, method, run, tts)
                    else:
                        train(cfg, method)
                keep = RESULTS_DIR / "cpu" / method / f"seed{seed}"
                keep.mkdir(parents=True, exist_ok=True)
                for name in ("results.json", "eval_curve.jsonl", "config.json"):
                    if (run / name).exists():
                        shutil.copy(run / name, keep / name)
        report()
        return
    if scale != "paper":
        raise SystemExit(f"Unknown scale {scale!r}; valid: cpu, paper.")
    check_paper_prerequisites(PAPER_CONFIGS)
    for name in PAPER_CONFIGS:
        for seed in seeds:
            run = Path("runs") / "envace" / "paper" / "envace" / f"seed{seed}_{name}"
            if not (run / "results.json").exists():
                cmd = ["accelerate", "launch", "--config_file", str(accelerate_config()), "-m", "envace.cli", "train",
                       "--config", name, "--method", "envace", f"trainer.seed={seed}", f"trainer.output_dir={run}",
                       *overrides]  # fmt: skip
                print("[reproduce]", " ".join(cmd))
                subprocess.run(cmd, check=True)
            keep = RESULTS_DIR / "paper" / "envace" / f"seed{seed}_{name}"
            keep.mkdir(parents=True, exist_ok=True)
            for file in ("results.json", "eval_curve.jsonl", "config.json"):
                shutil.copy(run / file, keep / file)
    from .report import report

    report()


def accelerate_config() -> Path:
    from importlib.resources import files

    return Path(str(files("agentrl_shared") / "accelerate" / "zero3.yaml"))


def check_paper_prerequisites(configs: list[str]) -> None:
    """Fail fast, with the reason and the fix, when a paper-scale run cannot start here."""
    import torch

    problems = []
    if not torch.cuda.is_available():
        problems.append("no CUDA device is visible (paper scale needs GPUs; SCALE=cpu runs anywhere)")
    try:
        import vllm  # noqa: F401
    except ImportError:
        problems.append("vLLM is not installed: run `uv sync --locked --extra vllm`")
    for name in configs:
        try:
            load(name, [])
        except SystemExit as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise SystemExit("Cannot start the paper-scale EnvACE run:\n- " + "\n- ".join(problems))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="envace", description=__doc__)
    parser.add_argument("command", choices=["train", "eval", "reproduce", "report"])
    parser.add_argument("--config", default=CPU_CONFIG, help="a file in envace/configs/ (without .yaml) or a path")
    parser.add_argument("--scale", default="cpu", help="reproduce: cpu (default) or paper")
    parser.add_argument("--seeds", default="0", help="reproduce: comma-separated training seeds")
    parser.add_argument("--method", default="run", help="label written into results.json")
    parser.add_argument("--tts", default="none", choices=["none", "parallel", "sequential"],
                        help="eval: test-time rehearsal before the one committed execution")  # fmt: skip
    parser.add_argument("--benchmark", default="panel", choices=["panel", "bfcl", "finmcp", "vitabench"],
                        help="eval: the generated-task panel (default) or a benchmark run against the served "
                        "model.name_or_path (see envace/benchmarks.py)")  # fmt: skip
    parser.add_argument("--endpoint", default=None, help="eval --benchmark: OpenAI-compatible base URL (e.g. vLLM); "
                        "default: serve model.name_or_path in process on CPU")  # fmt: skip
    parser.add_argument("--served-model", default=None, help="eval --benchmark: model id at --endpoint")
    parser.add_argument("--data", default=None, help="eval --benchmark: finmcp file/folder, vitabench tasks, "
                        "or comma-separated bfcl categories")  # fmt: skip
    parser.add_argument("--output", default="runs/envace/benchmarks", help="eval --benchmark: output folder")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="eval --benchmark: completion cap")
    parser.add_argument("--harness-args", default="", help="eval --benchmark vitabench: extra vitabench2 run flags")
    parser.add_argument("overrides", nargs="*", help="key=value or section.key=value")
    ns = parser.parse_intermixed_args(argv)
    if ns.command == "report":
        from .report import report

        report()
    elif ns.command == "reproduce":
        reproduce(ns.scale, [int(s) for s in ns.seeds.split(",")], ns.overrides)
    elif ns.command == "train":
        train(load(ns.config, ns.overrides), ns.method)
    elif ns.benchmark != "panel":
        from .benchmarks import run_benchmark

        model = load(ns.config, ns.overrides)["model"].name_or_path
        run_benchmark(ns.benchmark, model, Path(ns.output), ns.endpoint, ns.served_model, ns.data,
                      ns.harness_args.split(), ns.max_new_tokens)  # fmt: skip
    else:
        evaluate_model(load(ns.config, ns.overrides), ns.method, tts=ns.tts)


if __name__ == "__main__":
    main(sys.argv[1:])
