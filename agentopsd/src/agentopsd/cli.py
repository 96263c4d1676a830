"""`agentopsd train|eval|reproduce|report --config NAME key=value ...`.

`train` runs one configuration and evaluates the result on the fixed panel; `eval` evaluates a model (the untrained
Vanilla / Skill-Prompt* baselines, or a checkpoint); `reproduce` runs one scale's plan (configs x methods x seeds)
and writes results JSON, learning curves and the README table; `report` regenerates the table and curves from the
result files. No algorithm logic lives here.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

PACKAGE = "agentopsd"
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # agentopsd/ (the folder holding README.md)
RESULTS_DIR = PACKAGE_DIR / "results"
CPU_CONFIG = "textrooms_smollm2-135m_cpu"
# the paper's baselines that live in this package, as switches of one config (OPSD, GRPO+OPSD and SDAR are the sdar
# package's; `make compare` runs them side by side)
BASELINES = {
    "grpo": ["trainer.credit=grpo"],
    "rlsd": ["trainer.credit=rlsd", "trainer.granularity=token"],
    "skill_sd": ["trainer.credit=grpo", "trainer.sdl_coef=0.001"],
    "skill_grpo": ["trainer.credit=grpo", "trainer.skills_in_student_prompt=true"],
    "agentopsd": [],
}
# reproduce plans: the method against GRPO (and, on CPU, the untrained model)
CPU_METHODS = {m: BASELINES[m] for m in ("grpo", "agentopsd")}
PAPER_CONFIGS = ["alfworld_qwen2.5-7b_paper", "webshop_qwen2.5-7b_paper", "search_qwen2.5-7b_paper"]


def sections():
    from agentrl_shared.config import ModelConfig

    from .config import AgentOPSDConfig, EnvConfig

    return {"trainer": AgentOPSDConfig, "env": EnvConfig, "model": ModelConfig}


def load(config: str, overrides: list[str]) -> dict:
    from agentrl_shared.config import load_config

    return load_config(config, overrides, sections(), PACKAGE)


def run_name(cfg: dict, method: str) -> str:
    model = Path(cfg["model"].name_or_path).name
    return f"{cfg['env'].name}_{model}_{method}_seed{cfg['trainer'].seed}"


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _dump(cfg: dict, out: Path) -> None:
    """Write the resolved config next to the run's results (main process only) and print its headline."""
    from agentrl_shared.config import to_dict

    if not _is_main_process():
        return
    out.mkdir(parents=True, exist_ok=True)
    resolved = to_dict(cfg)
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    print(json.dumps({k: v for k, v in resolved.items() if k != "trainer"}, indent=2))
    t = cfg["trainer"]
    print(f"trainer: lr={t.learning_rate} credit={t.credit} granularity={t.granularity} lambda={t.mult_lambda} "
          f"band={t.mult_band} beta={t.beta} "
          f"G={t.num_generations} num_rollouts={t.num_rollouts} output_dir={t.output_dir}")  # fmt: skip


def _panel(cfg: dict) -> tuple[list[dict], list[int]]:
    from agentrl_shared.envs import load_tasks

    env = cfg["env"]
    tasks = load_tasks(env.name, env.eval_split, **env.task_kwargs)[: env.eval_episodes]
    return tasks, [env.seed_offset_eval + s for s in env.eval_seeds]


def train(cfg: dict, method: str = "run") -> dict:
    """Train one configuration, then evaluate it on the fixed panel; returns the results payload (on every rank;
    files are written by the main process)."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from agentrl_shared.envs import load_tasks
    from agentrl_shared.evaluation import episode_record, summarize, write_results
    from agentrl_shared.models import model_path

    from .trainer import AgentOPSDTrainer

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    if args.output_dir == "trainer_output":  # TRL's default: name the run instead
        args.output_dir = f"runs/agentopsd/{run_name(cfg, method)}"
    out = Path(args.output_dir)
    _dump(cfg, out)
    path = model_path(model_cfg.name_or_path)
    args.model_init_kwargs = {"dtype": model_cfg.dtype, **(args.model_init_kwargs or {})}
    if model_cfg.attn_implementation:
        args.model_init_kwargs["attn_implementation"] = model_cfg.attn_implementation
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    tasks = load_tasks(env.name, env.train_split, **env.task_kwargs)
    panel, seeds = _panel(cfg)
    curve: list[dict] = []
    curve_path = out / "eval_curve.jsonl"

    def evaluate(trainer) -> dict:
        """Every rank evaluates (lock-step generation) and gets the same summary; the main process writes it."""
        episodes = trainer.evaluate_panel(panel, seeds, env.eval_temperature)
        summary = summarize([episode_record(e) for e in episodes], seeds)
        point = {"step": trainer.state.global_step, "rollouts": trainer.rollouts_done, **summary}
        curve.append(point)
        if trainer.accelerator.is_main_process:
            with curve_path.open("a") as f:
                f.write(json.dumps(point) + "\n")
            print(f"[eval] rollout {trainer.rollouts_done}: success {summary['success_rate_mean']:.3f}")
        return summary

    class PanelEval(TrainerCallback):
        """Evaluate every `env.eval_every` rollouts on the panel (verl `trainer.test_freq`)."""

        def on_step_end(self, targs, state, control, **kwargs):
            if env.eval_every and trainer.rollout_finished and trainer.rollouts_done % env.eval_every == 0:
                evaluate(trainer)

    trainer = AgentOPSDTrainer(path, args, env, tasks, processing_class=tok, callbacks=[PanelEval()])
    if trainer.accelerator.is_main_process and curve_path.exists():
        curve_path.unlink()
    t0 = time.perf_counter()
    if env.eval_every and env.eval_before_train:
        evaluate(trainer)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    train_s = time.perf_counter() - t0
    trainer.save_model(str(out / "final"))  # weights stay under runs/ (git-ignored); results go to results/
    # the curve is filled on every rank, so every rank takes the same branch here (no lone evaluation)
    final = curve[-1] if curve and curve[-1]["rollouts"] == trainer.rollouts_done else None
    summary = final if final is not None else evaluate(trainer)
    trainer.pool.close()
    payload = {
        "method": method,
        "env": env.name,
        "model": model_cfg.name_or_path,
        "seed": args.seed,
        "eval_seeds": seeds,
        "train_seconds": train_s,
        "steps": trainer.state.global_step,
        "rollouts": trainer.rollouts_done,
        "num_processes": trainer.accelerator.num_processes,
        "final": {k: v for k, v in summary.items() if k not in ("step", "rollouts")},
        "curve": curve,
        "log_history": trainer.state.log_history,
        "config": json.loads((out / "config.json").read_text()) if trainer.accelerator.is_main_process else None,
        "torch_threads": torch.get_num_threads(),
    }
    if trainer.accelerator.is_main_process:
        write_results(out / "results.json", payload)
    return payload


def evaluate_model(cfg: dict, method: str = "eval", out: Path | None = None) -> dict:
    """Evaluate `model.name_or_path` on the panel with HF generation (resumable: episodes are logged as they end)."""
    from functools import partial

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl_shared.envs import make_env
    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.evaluation import run_panel, summarize, write_results
    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.models import model_path
    from agentrl_shared.prompts import make_prompt
    from agentrl_shared.rollout import RolloutCollector
    from agentrl_shared.skills import student_prompt

    from .config import ENV_TO_PROMPT

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    out = out or Path(args.output_dir)
    _dump(cfg, out)
    path = model_path(model_cfg.name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, model_cfg.dtype))
    torch.manual_seed(args.seed)
    panel, seeds = _panel(cfg)
    transform = None
    if args.eval_with_skills:

        def transform(text: str, task: dict) -> str:
            return student_prompt(env.name, text, task)  # Skill-Prompt*: skills in the user message

    slots = env.eval_batch_size or args.per_device_train_batch_size * (args.steps_per_generation or 1)
    # in the trainer's precision: bf16 autocast when `bf16=True` (as the trained models are evaluated)
    autocast_dtype = torch.bfloat16 if args.bf16 else None
    generate = HFGenerator(model, tok, args.max_completion_length, env.eval_temperature, batch_size=slots,
                           autocast_dtype=autocast_dtype)  # fmt: skip
    with EnvPool(partial(make_env, env.name, **env.env_kwargs), slots, env.step_timeout, env.num_workers) as pool:
        collector = RolloutCollector(
            pool, make_prompt(ENV_TO_PROMPT[env.name], env.history_length), tok, env.max_turns,
            env.max_prompt_length, transform, args.chat_template_kwargs,
        )  # fmt: skip
        t0 = time.perf_counter()
        records = run_panel(collector, generate, panel, seeds, out / "episodes.jsonl")
    summary = summarize(records, seeds)
    payload = {
        "method": method,
        "env": env.name,
        "model": model_cfg.name_or_path,
        "seed": args.seed,
        "eval_seeds": seeds,
        "eval_seconds": time.perf_counter() - t0,
        "final": summary,
        "curve": [],
        "config": json.loads((out / "config.json").read_text()),
    }
    write_results(out / "results.json", payload)
    print(f"[eval] {method}: success {summary['success_rate_mean']:.3f} +- {summary['success_rate_std']:.3f}")
    return payload


def reproduce(scale: str, seeds: list[int], overrides: list[str]) -> None:
    """Run one scale's plan. CPU: untrained vs GRPO vs AgentOPSD on TextRooms, per seed. Runs live in
    `runs/agentopsd/cpu/` (git-ignored; a finished run is not redone, so an interrupted plan resumes); their results
    JSON and curves are copied to `agentopsd/results/cpu/` and the README table and curves are rebuilt from there."""
    if scale == "cpu":
        from .report import report

        for seed in seeds:
            for method, extra in {"untrained": [], **CPU_METHODS}.items():
                run = Path("runs") / "agentopsd" / "cpu" / method / f"seed{seed}"
                if (run / "results.json").exists():
                    print(f"[reproduce] {method} seed {seed}: finished earlier in {run}, not redone")
                else:
                    cfg = load(CPU_CONFIG, [*extra, *overrides, f"trainer.seed={seed}", f"trainer.output_dir={run}"])
                    if method == "untrained":
                        evaluate_model(cfg, method, run)
                    else:
                        train(cfg, method)
                keep = RESULTS_DIR / "cpu" / method / f"seed{seed}"
                keep.mkdir(parents=True, exist_ok=True)
                for name in ("results.json", "eval_curve.jsonl", "episodes.jsonl", "config.json"):
                    if (run / name).exists():
                        shutil.copy(run / name, keep / name)
        report()
        return
    if scale != "paper":
        raise SystemExit(f"Unknown scale {scale!r}; valid: cpu, paper.")
    check_paper_prerequisites(PAPER_CONFIGS)
    for name in PAPER_CONFIGS:
        for seed in seeds:
            for method, extra in CPU_METHODS.items():
                run = Path("runs") / "agentopsd" / "paper" / method / f"seed{seed}_{name}"
                if not (run / "results.json").exists():
                    cmd = [
                        "accelerate", "launch", "--config_file", str(accelerate_config()), "-m", "agentopsd.cli", "train",
                        "--config", name, "--method", method, f"trainer.seed={seed}", f"trainer.output_dir={run}",
                        *extra, *overrides,
                    ]  # fmt: skip
                    print("[reproduce]", " ".join(cmd))
                    subprocess.run(cmd, check=True)
                keep = RESULTS_DIR / "paper" / method / f"seed{seed}_{name}"
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

    from agentrl_shared.config import ConfigError

    problems = []
    if not torch.cuda.is_available():
        problems.append("no CUDA device is visible (paper scale needs GPUs; SCALE=cpu runs anywhere)")
    try:
        import vllm  # noqa: F401
    except ImportError:
        problems.append("vLLM is not installed: run `uv sync --locked --extra vllm`")
    for name in configs:
        try:
            load(name, ["trainer.use_cpu=true"])  # data locations only; the GPU check is above
        except ConfigError as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise SystemExit("Cannot start the paper-scale AgentOPSD run:\n- " + "\n- ".join(problems))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="agentopsd", description=__doc__)
    parser.add_argument("command", choices=["train", "eval", "reproduce", "report"])
    parser.add_argument("--config", default=CPU_CONFIG, help="a file in agentopsd/configs/ (without .yaml) or a path")
    parser.add_argument("--scale", default="cpu", help="reproduce: cpu (default) or paper")
    parser.add_argument("--seeds", default="0", help="reproduce: comma-separated training seeds")
    parser.add_argument(
        "--method",
        default="run",
        help=f"label written into results.json; {', '.join(BASELINES)} also apply their switches",
    )
    parser.add_argument("overrides", nargs="*", help="key=value or section.key=value")
    ns = parser.parse_intermixed_args(argv)
    if ns.command == "report":
        from .report import report

        report()
    elif ns.command == "reproduce":
        reproduce(ns.scale, [int(s) for s in ns.seeds.split(",")], ns.overrides)
    elif ns.command == "train":
        train(load(ns.config, [*BASELINES.get(ns.method, []), *ns.overrides]), ns.method)
    else:
        evaluate_model(load(ns.config, ns.overrides), ns.method)


if __name__ == "__main__":
    main(sys.argv[1:])
