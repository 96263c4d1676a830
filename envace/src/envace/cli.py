"""`envace train|eval|reproduce|report|mechanisms`: the EnvACE command line (`envace <command> --help` for its flags).

`train` runs one configuration and evaluates the result on the fixed panel with the real tool back ends (one
committed execution per task); `eval` evaluates a model (the untrained baseline, or a checkpoint), optionally with
test-time rehearsal (`--tts parallel|sequential`); `reproduce` runs one scale's plan (methods x seeds) under an output
folder (git-ignored); `report` copies finished runs into `envace/results` and rebuilds the README tables from those
files, the only command that writes tracked files; `mechanisms` measures the rehearsal role's validity and its
agreement with the real tools on the panel, for the warm-started and the EnvACE models (`envace.mechanisms`). No
algorithm logic here.
"""

import json
import logging
import statistics
import sys
import time
from pathlib import Path

from agentrl_shared.cli import (
    LaunchFlags,
    add_mechanisms_flags,
    append_jsonl,
    build_parser,
    check_plan,
    dump_config,
    eval_payload,
    eval_records,
    launch_flags,
    log_to_file,
    method_switches,
    model_tag,
    parse_args,
    pending_runs,
    reproduce_paper,
    resume_args,
    run_command,
    run_folder,
    run_training,
    seeds_arg,
    set_model_init_kwargs,
    setup_logging,
    training_payload,
    warn_launch_size,
)
from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

logger = logging.getLogger("envace")

PACKAGE = "envace"
CPU_CONFIG = "tooltasks_smollm2-135m_cpu"
# EnvACE and its baselines (paper section 5) as switches of any config: `train --method NAME` applies them before the
# overrides (`run`, the default, applies none)
METHODS = {
    "caller_only_real": ["trainer.tool_return_mode=real"],
    "envace": [],
}
CPU_TTS = {"tts_parallel": "parallel", "tts_sequential": "sequential"}
# the CPU plan's runs after the warm start and the untrained row (`reproduce --methods` chooses among them)
CPU_PLAN = [*METHODS, *(f"{name}_{policy}" for name in CPU_TTS for policy in ("untrained", "envace"))]
TUNE_HELP = ("the CPU plan's learning rate, chosen on the validation split: the warm start and one EnvACE run per "
             "--lrs value, rehearsal valid rate and real-tool reward (envace/tune.py)")  # fmt: skip
PAPER_CONFIGS = ["checklist_qwen3-8b_paper"]
MECHANISMS_HELP = ("the rehearsal role's parse rate and its agreement with the real tools on the panel, and the "
                   "success with rehearsed vs real tool returns: untrained (warm start) and EnvACE-final (writes "
                   "mechanisms.json)")  # fmt: skip


def sections():
    from agentrl_shared.config import LaunchConfig, ModelConfig

    from .config import EnvACEConfig, EnvConfig, WarmStartConfig

    return {"trainer": EnvACEConfig, "env": EnvConfig, "model": ModelConfig, "warmstart": WarmStartConfig,
            "launch": LaunchConfig}  # fmt: skip


def load(config: str, overrides: list[str]) -> dict:
    """The resolved config; a bad file, key or value (the dataclasses' own checks too) raises `ConfigError`."""
    from agentrl_shared.config import load_config

    return load_config(config, overrides, sections(), PACKAGE)


def run_name(cfg: dict, method: str) -> str:
    model = model_tag(cfg["model"].name_or_path)
    return f"{cfg['env'].source}_{model}_{method}_seed{cfg['trainer'].seed}"


def headline(cfg: dict) -> str:
    t = cfg["trainer"]
    return (f"source={cfg['env'].source} model={cfg['model'].name_or_path} lr={t.learning_rate} "
            f"tool_return_mode={t.tool_return_mode} model_sharing={t.model_sharing} judge={t.judge} beta={t.beta} "
            f"G={t.num_generations} num_rollouts={t.num_rollouts}")  # fmt: skip


def _tasks(cfg: dict, split: str, tokenizer=None) -> list[dict]:
    """The split's tasks; with `tokenizer`, those whose first prompt is over `env.max_task_prompt_tokens` are dropped
    first (official `filter_overlong_prompts`, train and validation files alike)."""
    from .data import filter_long_prompts, load_tasks

    env = cfg["env"]
    n = {"train": env.num_train_tasks, "eval": env.num_eval_tasks, "val": env.num_val_tasks,
         "warmstart": cfg["warmstart"].num_tasks}[split]  # fmt: skip
    path = env.eval_path if split == "eval" else env.train_path
    tasks = load_tasks(env.source, split, n, env.task_seed, path, env.max_task_turns, env.max_num_checklist)
    if tokenizer is not None:
        tasks, dropped = filter_long_prompts(tasks, tokenizer, env.max_task_prompt_tokens,
                                             cfg["trainer"].chat_template_kwargs)  # fmt: skip
        if dropped:
            logger.info(f"{split}: {dropped} tasks dropped, first prompt over {env.max_task_prompt_tokens} tokens")
    return tasks[: env.eval_episodes] if split == "eval" else tasks


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


def check_judge(args) -> None:
    """The start-up check of an endpoint judge (`EndpointJudge.check`: one verdict on a trivial criterion), so that an
    unreachable or unauthorised judge is one line before any model loads, not a run trained on failed verdicts."""
    from .trainer import make_judge

    if args.judge == "endpoint":
        make_judge(args).check()


def build_trainer(cfg: dict, split: str = "eval"):
    """`EnvACETrainer` on `cfg["model"]` (tokenizer, model kwargs, LoRA, the training tasks after the prompt filter)
    and the tasks of `split` it is evaluated on (`eval`: the panel; `val`: the validation split of `envace tune`):
    what `train` trains and evaluates, and what `mechanisms` measures."""
    from transformers import AutoTokenizer

    from agentrl_shared.lora import peft_config
    from agentrl_shared.models import model_path

    from .trainer import EnvACETrainer

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    path = model_path(model_cfg.name_or_path)
    set_model_init_kwargs(args, model_cfg)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    trainer = EnvACETrainer(
        path, args, env, _tasks(cfg, "train", tok), processing_class=tok, peft_config=peft_config(model_cfg.lora)
    )
    return trainer, _tasks(cfg, split, tok)


def play_panel(trainer, panel: list[dict], seeds: list[int], collector) -> list[tuple]:
    """The trainer's evaluation (`EnvACETrainer.evaluate_panel`) of every (task, seed) with `collector`: one pass
    over the panel per seed (val_n), seeded alike on every rank; (trajectory, seed) pairs, seed by seed."""
    import torch

    played = []
    for seed in seeds:
        torch.manual_seed(seed)
        played += [(t, seed) for t in trainer.evaluate_panel(panel, [seed], collector)]
    return played


def train(cfg: dict, method: str = "run", output: Path = Path("runs/envace"), split: str = "eval") -> dict:
    """Train one configuration, then evaluate it on the fixed panel (`agentrl_shared.cli.run_training`: every
    evaluation on every rank); returns the results payload (on every rank; files are written by the main process).
    `split="val"` (`envace tune`): evaluated on the validation split instead, under rehearsal and with the real
    tools (`tune.validation_summary`), never on the panel. Every panel evaluation's per-task records go to
    `<out>/eval_episodes.jsonl`, tagged with the rollouts done (the per-instance outcomes `report` pairs)."""
    from agentrl_shared.evaluation import write_results

    from .trainer import SIMULATOR_DIR, make_collector

    args, env = cfg["trainer"], cfg["env"]
    check_judge(args)  # before any model loads
    out = run_folder(args, output, run_name(cfg, method))
    log_to_file(out)
    resolved = dump_config(cfg, out, headline(cfg))
    trainer, panel = build_trainer(cfg, split)
    seeds = env.eval_seeds
    log_records = eval_records(out / "eval_episodes.jsonl", args.resume_from_checkpoint)

    def evaluate(trainer) -> dict:
        if split == "val":
            from .tune import validation_summary

            return validation_summary(trainer, panel, cfg)
        collector = make_collector(args, env, trainer.processing_class, env.eval_tool_return_mode)
        records = [trajectory_record(t, s) for t, s in play_panel(trainer, panel, seeds, collector)]
        log_records(trainer, records)
        return summarize(records, seeds)

    warn_launch_size(cfg, trainer)
    # a signal stops training with a checkpoint and ends the command (`Stopped`): `reproduce` resumes it
    run = run_training(trainer, evaluate, lambda s: f"reward {s['reward_mean']:.3f} success {s['success_mean']:.3f}",
                       out, eval_every=env.eval_every, eval_before_train=env.eval_before_train,
                       resume_from_checkpoint=args.resume_from_checkpoint)  # fmt: skip
    trainer.save_model(str(out / "final"))  # weights stay under the run's folder
    if trainer.simulator is not None and trainer.accelerator.is_main_process:  # no-share: the rehearsal model too
        trainer.simulator.save_pretrained(out / "final" / SIMULATOR_DIR)
    payload = {**training_payload(trainer, cfg, resolved, method, panel, seeds, run), "source": env.source}
    if trainer.accelerator.is_main_process:
        write_results(out / "results.json", payload)
    return payload


def evaluate_model(cfg: dict, method: str = "eval", output: Path = Path("runs/envace"), tts: str = "none") -> dict:
    """Evaluate `model.name_or_path` on the panel with HF generation and the real tool back ends; with `tts`, each
    task is first rehearsed privately (`tts.py`) and then executed once. Episodes are logged as they end (resume)."""
    import torch
    from transformers import AutoTokenizer

    from agentrl_shared.evaluation import write_results
    from agentrl_shared.generation import HFGenerator, load_eval_model
    from agentrl_shared.models import model_path

    from . import tts_chat
    from .trainer import make_collector
    from .tts import rehearse_then_execute

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    check_judge(args)  # before the model loads
    out = run_folder(args, output, run_name(cfg, method))
    log_to_file(out, "eval.log")
    resolved = dump_config(cfg, out, headline(cfg))
    path = model_path(model_cfg.name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = load_eval_model(path, model_cfg.dtype, args.use_cpu)  # on the GPU when there is one
    panel, seeds = _tasks(cfg, "eval", tok), env.eval_seeds
    generate = HFGenerator(model, tok, args.max_completion_length, env.eval_temperature, env.eval_top_p)
    # the N private rehearsals of --tts sample (tts_chat: official val_kwargs), so that they differ
    sampled = HFGenerator(model, tok, args.max_completion_length, tts_chat.TEMPERATURE, tts_chat.TOP_P)
    collector = make_collector(args, env, tok, env.eval_tool_return_mode)
    log = out / "episodes.jsonl"
    done = (
        {(r["task_id"], r["seed"]): r for r in map(json.loads, log.read_text().splitlines())} if log.exists() else {}
    )
    chunk = env.eval_batch_size or max(args.per_device_train_batch_size * args.steps_per_generation, 1)
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
                trajs = rehearse_then_execute(batch, generate, rehearsal, collector, tts, args.tts_budget, sampled)
            records = [trajectory_record(t, seed) for t in trajs]
            for r in records:
                append_jsonl(log, r)
            done.update({(r["task_id"], r["seed"]): r for r in records})
            logger.info(f"eval {method} seed {seed}: {min(start + chunk, len(todo))}/{len(todo)} tasks")
    summary = summarize([done[(t["task_id"], s)] for s in seeds for t in panel], seeds)
    payload = {**eval_payload(cfg, resolved, method, panel, seeds, time.perf_counter() - t0, summary), "source": env.source,
               "tts": tts}  # fmt: skip
    write_results(out / "results.json", payload)
    logger.info(f"eval {method}: reward {summary['reward_mean']:.3f} +- {summary['reward_std']:.3f}, "
          f"success {summary['success_mean']:.3f}")  # fmt: skip
    return payload


def warm_start(cfg: dict, method: str = "warmstart", output: Path = Path("runs/envace")) -> dict:
    """Format warm start (`warmstart.py`): SFT of `model.name_or_path` on the gold rows of `warmstart.num_tasks`
    generated tasks; the model is saved to `<run>/final`, the losses to `results.json`."""
    from agentrl_shared.sft import warm_start_run

    from .trainer import make_collector
    from .warmstart import gold_rows

    args, env, ws = cfg["trainer"], cfg["env"], cfg["warmstart"]
    if ws.num_tasks <= 0:
        raise ValueError("warm start needs warmstart.num_tasks > 0.")
    out = run_folder(args, output, run_name(cfg, method))
    log_to_file(out)
    resolved = dump_config(cfg, out, headline(cfg))

    def gold(tok):
        return gold_rows(_tasks(cfg, "warmstart"), make_collector(args, env, tok, "agent"), ws.rehearsal_rows), {}

    return warm_start_run(cfg, method, out, resolved, ("caller", "simulator"), gold)


def reproduce(scale: str, seeds: list[int], overrides: list[str], output: Path, flags: LaunchFlags = LaunchFlags(),
              methods: list[str] = CPU_PLAN) -> None:  # fmt: skip
    """Run one scale's plan into `output/<scale>/<method>/...` (a finished run is not redone, an unfinished one goes on
    from its last checkpoint). CPU: the format warm start when the config has one (`warmstart.num_tasks`; every
    method then starts from its checkpoint, "untrained" = warm-started, no RL), untrained vs caller-only with real
    tools vs EnvACE on the generated tool tasks, then test-time rehearsal (parallel, sequential) of the untrained and
    the EnvACE policies. Paper: EnvACE on each paper config, an `accelerate launch` on its config's processes and
    machines (`launch:`, 16 over 2: `reproduce` runs on each machine with its `--machine-rank`); `flags.dry_run`
    prints those commands only. `methods` (CPU): the runs of `CPU_PLAN` to run, with the runs they start from.
    Tracked files are never written here: `envace report --runs <output>` copies the
    results into `envace/results/` and rebuilds the README tables."""
    if scale == "cpu":
        check_plan(methods, dict.fromkeys(CPU_PLAN), [], PACKAGE)
        warm = load(CPU_CONFIG, overrides)["warmstart"].num_tasks > 0
        # method -> (kind, its overrides, test-time rehearsal, the run whose final checkpoint it starts from); every
        # method starts from the same policy: the warm-started model when the config has a warm start
        base = "warmstart" if warm else None
        plan = {"warmstart": ("warmstart", [], "none", None)} if warm else {}
        plan |= {"untrained": ("eval", [], "none", base)}
        plan |= {m: ("train", extra, "none", base) for m, extra in METHODS.items()}
        plan |= {f"{name}_{policy}": ("eval", [], mode, start) for name, mode in CPU_TTS.items()
                 for policy, start in (("untrained", base), ("envace", "envace"))}  # fmt: skip
        wanted = {"warmstart", "untrained", *methods, *(plan[m][3] for m in methods if plan[m][3])}
        for _, seed, method, run in pending_runs(output, "cpu", seeds, [m for m in plan if m in wanted]):
            kind, extra, tts, start = plan[method]
            model = [f"model.name_or_path={output / 'cpu' / start / f'seed{seed}' / 'final'}"] if start else []
            cfg = load(CPU_CONFIG, [*extra, *overrides, *model, f"trainer.seed={seed}", f"trainer.output_dir={run}",
                                    *resume_args(run)])  # fmt: skip
            if kind == "warmstart":
                warm_start(cfg, method)
            elif kind == "eval":
                evaluate_model(cfg, method, tts=tts)
            else:
                train(cfg, method)
    else:
        reproduce_paper(PACKAGE, "EnvACE", PAPER_CONFIGS, ["envace"], seeds, overrides, output, flags, load)
    logger.info(f"reproduce: runs are in {output}; `envace report --runs {output}` updates envace/results and the "
                "README")  # fmt: skip


def budgets(text: str) -> list[int]:
    """`--rehearsal 0,2,4` -> [0, 2, 4]."""
    return [int(n) for n in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    from .data import DataError
    from .reward import JudgeUnavailable

    parser, subs = build_parser(PACKAGE, __doc__, CPU_CONFIG, list(METHODS), {"mechanisms": MECHANISMS_HELP,
                                                                              "tune": TUNE_HELP})  # fmt: skip
    add_mechanisms_flags(subs["mechanisms"], PACKAGE, CPU_CONFIG)
    subs["reproduce"].add_argument("--methods", default=",".join(CPU_PLAN),
                                   help=f"cpu scale: comma-separated runs of the plan, of {', '.join(CPU_PLAN)} "
                                   "(default all; the warm start, the untrained row and the runs a test-time "
                                   "rehearsal row starts from are always run)")  # fmt: skip
    t = subs["tune"]
    t.add_argument("--config", default=CPU_CONFIG, help=f"config name or path (default {CPU_CONFIG})")
    t.add_argument("--lrs", default="2e-5,1e-5,5e-6,2e-6", help="comma-separated learning rates (default "
                   "2e-5,1e-5,5e-6,2e-6)")  # fmt: skip
    t.add_argument("--seed", default=0, type=int, help="training seed of the warm start and the runs (default 0)")
    t.add_argument("--output", default=Path("runs/envace"), type=Path, help="runs folder (default runs/envace)")
    t.add_argument("overrides", nargs="*", help="key=value or section.key=value")
    q = subs["eval"]
    q.add_argument("--tts", default="none", choices=["none", "parallel", "sequential"],
                   help="test-time rehearsal before the one committed execution (default none)")  # fmt: skip
    q.add_argument("--benchmark", default="panel", choices=["panel", "bfcl", "finmcp", "vitabench", "tau2"],
                   help="the generated-task panel (default) or a benchmark run against the served model.name_or_path "
                   "(see envace/benchmarks.py), written under <--output>/benchmarks")  # fmt: skip
    q.add_argument("--endpoint", default=None, help="--benchmark: OpenAI-compatible base URL (e.g. vLLM); default: "
                   "serve model.name_or_path in process on CPU")  # fmt: skip
    q.add_argument("--served-model", default=None, help="--benchmark: model id at --endpoint")
    q.add_argument("--data", default=None, help="--benchmark: finmcp file/folder, vitabench tasks, comma-separated "
                   "bfcl categories (or a .json file {category: [test ids]}: a slice), or comma-separated tau2 "
                   "domains (default airline,retail,telecom)")  # fmt: skip
    q.add_argument("--max-new-tokens", type=int, default=None, help="--benchmark: completion cap")
    q.add_argument("--harness-args", default="", help="--benchmark vitabench: extra vitabench2 run flags")
    q.add_argument("--user-endpoint", default=None, help="--benchmark tau2/vitabench: the user simulator's "
                   "OpenAI-compatible URL (required, see below; key: USER_API_KEY)")  # fmt: skip
    q.add_argument("--user-model", default=None, help="--benchmark tau2/vitabench: the user simulator's model id")
    q.add_argument("--judge-endpoint", default=None, help="--benchmark vitabench: the judge's OpenAI-compatible URL "
                   "(required, see below)")  # fmt: skip
    q.add_argument("--judge-model", default=None, help="--benchmark vitabench: the judge's model id")
    q.add_argument("--user-is-policy", action="store_true", help="--benchmark tau2/vitabench: let the policy under "
                   "test also simulate the user (and judge); its numbers are not comparable with published ones")  # fmt: skip
    q.add_argument(
        "--num-tasks", type=int, default=None, help="--benchmark tau2: first N tasks per domain (default all)"
    )
    q.add_argument("--max-steps", type=int, default=200, help="--benchmark tau2: message cap per episode (tau2's 200)")
    q.add_argument("--rehearsal", type=budgets, default=None, metavar="N[,N...]",
                   help="--benchmark tau2/bfcl: test-time private rehearsal budgets, e.g. 0,2,4 (0 = none): one run "
                   "each, and the budget-vs-score table (rehearsal_budget.md)")  # fmt: skip
    q.add_argument("--rehearsal-mode", default="parallel", choices=["parallel", "sequential"],
                   help="--benchmark tau2/bfcl: independent rehearsals, or each seeing the earlier ones' memory")  # fmt: skip
    ns = parse_args(parser, subs, argv)
    setup_logging()

    def command():
        if ns.command == "report":
            from .report import report

            report(ns.readme, ns.runs)
        elif ns.command == "reproduce":
            reproduce(ns.scale, seeds_arg(ns.seeds), ns.overrides, ns.output, launch_flags(ns), ns.methods.split(","))
        elif ns.command == "tune":
            from .tune import tune

            tune(ns.config, [float(x) for x in ns.lrs.split(",")], ns.seed, ns.output, ns.overrides)
        elif ns.command == "mechanisms":
            from .mechanisms import mechanisms

            mechanisms(ns.config, ns.runs, ns.seed, ns.output, ns.overrides)
        elif ns.command == "train":
            train(load(ns.config, [*method_switches(METHODS, ns.method), *ns.overrides]), ns.method, ns.output)
        elif ns.benchmark != "panel":
            from .benchmarks import run_benchmark

            model = load(ns.config, ns.overrides)["model"].name_or_path
            run_benchmark(ns.benchmark, model, ns.output / "benchmarks", ns.endpoint, ns.served_model, ns.data,
                          ns.harness_args.split(), ns.max_new_tokens, ns.user_endpoint, ns.user_model, ns.num_tasks,
                          ns.max_steps, ns.judge_endpoint, ns.judge_model, ns.user_is_policy, ns.rehearsal,
                          ns.rehearsal_mode)  # fmt: skip
        else:
            evaluate_model(load(ns.config, ns.overrides), ns.method, ns.output, ns.tts)

    run_command(PACKAGE, command, (DataError, JudgeUnavailable))


if __name__ == "__main__":
    main(sys.argv[1:])
