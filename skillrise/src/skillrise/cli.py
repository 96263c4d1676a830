"""`skillrise train|eval|reproduce|report --config NAME key=value ...`.

`train` runs one configuration and evaluates the result on the fixed panel (repeat and/or cross protocol); `eval`
evaluates a model (the untrained baseline, or a checkpoint); `reproduce` runs one scale's plan (methods x seeds) and
writes results JSON, learning curves and the README table; `report` regenerates the table and curves from the result
files. No algorithm logic lives here.
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

PACKAGE = "skillrise"
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # skillrise/ (the folder holding README.md)
RESULTS_DIR = PACKAGE_DIR / "results"
# CPU plan: SkillRise against its baselines (papers/skillrise section 5) as overrides of one config. GRPO keeps the
# rollout budget: 1 group x 4 trials x K 3 = 12 task plays per rollout, so single tasks with a group of 12.
CPU_CONFIG = "textrooms_smollm2-135m_cpu"
CPU_METHODS = {
    "grpo": ["trainer.group_size_k=1", "trainer.carry_mode=none", "trainer.advantage_mode=grpo",
             "trainer.num_generations=12", "trainer.per_device_train_batch_size=6", "env.eval_carry_mode=none"],
    "no_carry": ["trainer.carry_mode=none", "env.eval_carry_mode=none"],
    "reflect": ["trainer.carry_mode=reflect", "env.curate_prefix=<reflection>"],
    "skillrise": [],
}  # fmt: skip
PAPER_CONFIGS = ["scienceworld_qwen3-4b_paper", "alfworld_qwen3-4b_paper", "webshop_qwen3-4b_paper"]
# GRPO with the matched budget (16 groups x 8 trials x 3 tasks = 16 tasks x 24): single tasks, group 24, three times
# the trials per rank (`per_device_train_batch_size` is scaled in `reproduce`); validated with 3 attempts, no carry
PAPER_METHODS = {"grpo": ["trainer.group_size_k=1", "trainer.carry_mode=none", "trainer.advantage_mode=grpo",
                          "trainer.num_generations=24", "env.eval_carry_mode=none"], "skillrise": []}  # fmt: skip


def sections():
    from agentrl_shared.config import ModelConfig

    from .config import EnvConfig, SkillRiseConfig

    return {"trainer": SkillRiseConfig, "env": EnvConfig, "model": ModelConfig}


def load(config: str, overrides: list[str]) -> dict:
    """The resolved config; a bad file, key or value (the dataclasses' own checks too) raises `ConfigError`."""
    from agentrl_shared.config import ConfigError, load_config

    try:
        return load_config(config, overrides, sections(), PACKAGE)
    except ConfigError:
        raise
    except ValueError as exc:  # invalid values rejected by SkillRiseConfig / EnvConfig / GRPOConfig
        raise ConfigError(str(exc)) from None


def run_name(cfg: dict, method: str) -> str:
    model = Path(cfg["model"].name_or_path).name
    t = cfg["trainer"]
    return f"{cfg['env'].name}_{model}_{method}_K{t.group_size_k}_{t.carry_mode}_seed{t.seed}"


def _dump(cfg: dict, out: Path) -> None:
    from agentrl_shared.config import to_dict

    out.mkdir(parents=True, exist_ok=True)
    resolved = to_dict(cfg)
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    print(json.dumps({k: v for k, v in resolved.items() if k != "trainer"}, indent=2))
    t = cfg["trainer"]
    print(f"trainer: lr={t.learning_rate} K={t.group_size_k} carry={t.carry_mode} adv={t.advantage_mode} "
          f"gamma={t.traj_gamma} N={t.num_generations} max_steps={t.max_steps} output_dir={t.output_dir}")  # fmt: skip


def _tasks(env, split: str) -> list[dict]:
    """The split's tasks, capped to the first `max_tasks_per_family` of each family (in loader order)."""
    from agentrl_shared.envs import load_tasks

    from .groups import family_of

    tasks = load_tasks(env.name, split, **env.task_kwargs)
    if env.max_tasks_per_family:
        counts: dict[str, int] = {}
        kept = []
        for t in tasks:
            f = family_of(env.name, t)
            counts[f] = counts.get(f, 0) + 1
            if counts[f] <= env.max_tasks_per_family:
                kept.append(t)
        tasks = kept
    return tasks


def train_groups(cfg: dict) -> list[list[dict]]:
    from .groups import build_groups, difficulty_fn

    env, K = cfg["env"], cfg["trainer"].group_size_k
    tasks = _tasks(env, env.train_split)
    # the official pool is shuffled once with env.seed = 0 (group_loader.py)
    return build_groups(tasks, env.name, K, seed=0, difficulty=difficulty_fn(env.name, tasks, env.env_kwargs))


def panels(cfg: dict) -> dict[str, list[list[dict]]]:
    """Fixed evaluation panels: `repeat` = the first `eval_tasks` tasks, each K times; `cross` = groups of K
    different tasks of a family (the same grouping rule), the first `eval_tasks // K` of them."""
    from .groups import build_groups, difficulty_fn, repeat_groups

    env = cfg["env"]
    tasks = _tasks(env, env.eval_split)
    out = {}
    if "repeat" in env.eval_modes:
        out["repeat"] = repeat_groups(tasks[: env.eval_tasks], env.eval_k)
    if "cross" in env.eval_modes:
        groups = build_groups(
            tasks, env.name, env.eval_k, seed=0, difficulty=difficulty_fn(env.name, tasks, env.env_kwargs)
        )
        out["cross"] = groups[: max(env.eval_tasks // env.eval_k, 1)]
    return out


def eval_seeds(cfg: dict) -> list[int]:
    env = cfg["env"]
    return [env.seed_offset_eval + s for s in env.eval_seeds]


def headline(summary: dict) -> str:
    parts = []
    for mode, s in summary.items():
        if mode == "repeat":
            parts.append("repeat " + " ".join(f"pass@{k + 1} {s[f'pass@{k + 1}']:.3f}" for k in range(s["K"])))
        else:
            parts.append(f"cross success {s['success_rate']:.3f}")
    return "; ".join(parts)


def train(cfg: dict, method: str = "run") -> dict:
    """Train one configuration, then evaluate it on the fixed panels; returns the results payload."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from agentrl_shared.evaluation import write_results
    from agentrl_shared.models import model_path

    from .trainer import SkillRiseTrainer
    from .trial import summarize_trials, trial_record

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    if args.output_dir == "trainer_output":  # TRL's default: name the run instead
        args.output_dir = f"runs/skillrise/{run_name(cfg, method)}"
    out = Path(args.output_dir)
    _dump(cfg, out)
    path = model_path(model_cfg.name_or_path)
    args.model_init_kwargs = {"dtype": model_cfg.dtype, **(args.model_init_kwargs or {})}
    if model_cfg.attn_implementation:
        args.model_init_kwargs["attn_implementation"] = model_cfg.attn_implementation
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    groups = train_groups(cfg)
    dataset = Dataset.from_list([{"prompt": g[0]["family"], "group_json": json.dumps(g)} for g in groups])
    panel, seeds = panels(cfg), eval_seeds(cfg)
    carry = env.eval_carry_mode or args.carry_mode
    curve: list[dict] = []
    curve_path = out / "eval_curve.jsonl"

    def evaluate(trainer, step: int) -> dict:
        summary = {}
        for mode, groups_ in panel.items():
            trials = trainer.evaluate_trials(groups_, seeds, env.eval_temperature, carry, skip_won=mode == "repeat")
            summary[mode] = summarize_trials([trial_record(t) for t in trials], mode, seeds)
        point = {"step": step, "rollouts": trainer.rollouts_done, **summary}
        if trainer.accelerator.is_main_process:
            curve.append(point)
            with curve_path.open("a") as f:
                f.write(json.dumps(point) + "\n")
            print(f"[eval] rollout {trainer.rollouts_done}: {headline(summary)}")
        return summary

    class PanelEval(TrainerCallback):
        """Evaluate every `env.eval_every` rollouts on the panels (verl `trainer.test_freq`)."""

        def on_step_end(self, targs, state, control, **kwargs):
            per_rollout = args.steps_per_generation // args.gradient_accumulation_steps
            if env.eval_every and state.global_step % (env.eval_every * per_rollout) == 0:
                evaluate(trainer, state.global_step)

    trainer = SkillRiseTrainer(path, args, env, dataset, processing_class=tok, callbacks=[PanelEval()])
    if curve_path.exists():
        curve_path.unlink()
    t0 = time.perf_counter()
    if env.eval_every:
        evaluate(trainer, 0)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    train_s = time.perf_counter() - t0
    trainer.save_model(str(out / "final"))  # weights stay under runs/ (git-ignored); results go to results/
    final = curve[-1] if curve and curve[-1]["step"] == trainer.state.global_step else None
    summary = final if final is not None else evaluate(trainer, trainer.state.global_step)
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
        "final": {k: v for k, v in summary.items() if k not in ("step", "rollouts")},
        "curve": curve,
        "log_history": trainer.state.log_history,
        "config": json.loads((out / "config.json").read_text()),
        "torch_threads": torch.get_num_threads(),
    }
    if trainer.accelerator.is_main_process:
        write_results(out / "results.json", payload)
    return payload


def evaluate_model(cfg: dict, method: str = "eval", out: Path | None = None) -> dict:
    """Evaluate `model.name_or_path` on the panels with HF generation (resumable: trials are logged as they end)."""
    from functools import partial

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl_shared.envs import make_env
    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.evaluation import write_results
    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.models import model_path

    from .config import make_base_prompt
    from .trial import TrialRunner, summarize_trials, trial_record

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    out = out or Path(args.output_dir)
    _dump(cfg, out)
    path = model_path(model_cfg.name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, model_cfg.dtype))
    torch.manual_seed(args.seed)
    seeds = eval_seeds(cfg)
    slots = args.per_device_train_batch_size * args.steps_per_generation
    # in the trainer's precision: bf16 autocast when `bf16=True` (as the trained models are evaluated)
    autocast_dtype = torch.bfloat16 if args.bf16 else None
    generate = HFGenerator(model, tok, args.max_completion_length, env.eval_temperature, batch_size=slots,
                           autocast_dtype=autocast_dtype)  # fmt: skip
    carry = env.eval_carry_mode or args.carry_mode
    summary = {}
    t0 = time.perf_counter()
    with EnvPool(partial(make_env, env.name, **env.env_kwargs), slots, env.step_timeout, env.num_workers) as pool:
        runner = TrialRunner(pool, make_base_prompt(env), tok, env.name, env.max_turns, env.max_prompt_length, carry,
                             args.skill_max_chars, env.curate_history, env.curate_prefix,
                             args.chat_template_kwargs)  # fmt: skip
        for mode, groups in panels(cfg).items():
            log = out / f"trials_{mode}.jsonl"
            done = {}
            if log.exists():  # resume: finished trials are not replayed
                for line in log.read_text().splitlines():
                    rec = json.loads(line)
                    done[(tuple(rec["task_ids"]), rec["seed"])] = rec
            todo = [(g, s) for s in seeds for g in groups if (tuple(t["task_id"] for t in g), s) not in done]
            for start in range(0, len(todo), slots):
                chunk = todo[start : start + slots]
                trials = runner.run([g for g, _ in chunk], list(range(len(chunk))), [s for _, s in chunk], generate,
                                    skip_won=mode == "repeat")  # fmt: skip
                with log.open("a") as f:
                    for t in trials:
                        rec = trial_record(t)
                        done[(tuple(rec["task_ids"]), rec["seed"])] = rec
                        f.write(json.dumps(rec) + "\n")
                print(f"[eval] {mode}: {min(start + slots, len(todo))}/{len(todo)} trials")
            records = [done[(tuple(t["task_id"] for t in g), s)] for s in seeds for g in groups]
            summary[mode] = summarize_trials(records, mode, seeds)
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
    print(f"[eval] {method}: {headline(summary)}")
    return payload


def reproduce(scale: str, seeds: list[int], overrides: list[str]) -> None:
    """Run one scale's plan. CPU: untrained vs GRPO vs no-carry vs reflection carry vs SkillRise on TextRooms, per
    seed. Runs live in `runs/skillrise/<scale>/` (git-ignored; a finished run is not redone, so an interrupted plan
    resumes); their results JSON and curves are copied to `skillrise/results/<scale>/` and the README is rebuilt."""
    from .report import report

    if scale == "cpu":
        for seed in seeds:
            for method, extra in {"untrained": [], **CPU_METHODS}.items():
                run = Path("runs") / "skillrise" / "cpu" / method / f"seed{seed}"
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
            for method, extra in PAPER_METHODS.items():
                if method == "grpo":
                    per_device = load(name, ["trainer.use_cpu=true"])["trainer"].per_device_train_batch_size
                    extra = [*extra, f"trainer.per_device_train_batch_size={3 * per_device}"]
                run = Path("runs") / "skillrise" / "paper" / method / f"seed{seed}_{name}"
                if not (run / "results.json").exists():
                    cmd = [
                        "accelerate", "launch", "--config_file", str(accelerate_config()), "-m", "skillrise.cli",
                        "train", "--config", name, "--method", method, f"trainer.seed={seed}",
                        f"trainer.output_dir={run}", *extra, *overrides,
                    ]  # fmt: skip
                    print("[reproduce]", " ".join(cmd))
                    subprocess.run(cmd, check=True)
                keep = RESULTS_DIR / "paper" / method / f"seed{seed}_{name}"
                keep.mkdir(parents=True, exist_ok=True)
                for file in ("results.json", "eval_curve.jsonl", "config.json"):
                    shutil.copy(run / file, keep / file)
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
        raise SystemExit("Cannot start the paper-scale SkillRise run:\n- " + "\n- ".join(problems))


def main(argv: list[str] | None = None) -> None:
    from agentrl_shared.config import ConfigError

    parser = argparse.ArgumentParser(prog="skillrise", description=__doc__)
    parser.add_argument("command", choices=["train", "eval", "reproduce", "report"])
    parser.add_argument("--config", default=CPU_CONFIG, help="a file in skillrise/configs/ (without .yaml) or a path")
    parser.add_argument("--scale", default="cpu", help="reproduce: cpu (default) or paper")
    parser.add_argument("--seeds", default="0", help="reproduce: comma-separated training seeds")
    parser.add_argument("--method", default="run", help="label written into results.json")
    parser.add_argument("overrides", nargs="*", help="key=value or section.key=value")
    ns = parser.parse_intermixed_args(argv)
    try:
        if ns.command == "report":
            from .report import report

            report()
        elif ns.command == "reproduce":
            reproduce(ns.scale, [int(s) for s in ns.seeds.split(",")], ns.overrides)
        elif ns.command == "train":
            train(load(ns.config, ns.overrides), ns.method)
        else:
            evaluate_model(load(ns.config, ns.overrides), ns.method)
    except ConfigError as exc:  # one line naming the problem and the fix, no traceback
        raise SystemExit(f"skillrise: {exc}") from None


if __name__ == "__main__":
    main(sys.argv[1:])
