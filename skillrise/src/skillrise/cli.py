"""`skillrise train|eval|reproduce|report|mechanisms`: the SkillRise command line (`skillrise <command> --help` for its
flags).

`train` runs one configuration and evaluates the result on the evaluation panels (repeat and/or cross protocol); `eval`
evaluates a model (the untrained baseline, or a checkpoint); `reproduce` runs one scale's plan (methods x seeds) under
an output folder (git-ignored); `report` copies finished runs into `skillrise/results` and rebuilds the README tables
and learning curves from those files, the only command that writes tracked files; `mechanisms` plays the evaluation
trials with and without the carried skill document, for the untrained, GRPO and SkillRise models
(`skillrise.mechanisms`). No algorithm logic lives here.
"""

import json
import logging
import sys
import time
from pathlib import Path

from agentrl_shared.cli import (
    LaunchFlags,
    add_mechanisms_flags,
    add_plan_flags,
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

logger = logging.getLogger("skillrise")

PACKAGE = "skillrise"
CPU_CONFIG = "textrooms_smollm2-135m_cpu"
# SkillRise and its baselines (the official README's GRPO, no-carry and reflect runs) as switches of any config:
# `train --method NAME` applies them before the overrides (`run`, the default, applies none). GRPO keeps the rollout
# budget (`method_config`): a trial's K tasks become K single-task plays in one group of K x N, K times the trials per
# rank (CPU: 1 group x 4 trials x K 3 = one group of 12; paper: 16 groups x 8 trials x 3 = 16 tasks x 24); validated
# with no carry. GRPO and GiGPO use the plain environment prompt (the official baselines run verl-agent's own
# environments, not the SkillRise prompt with an empty document); GiGPO keeps the budget too
METHODS = {
    "grpo": ["trainer.group_size_k=1", "trainer.carry_mode=none", "trainer.advantage_mode=grpo",
             "env.eval_carry_mode=none", "env.solve_prompt=plain"],
    "gigpo": ["trainer.group_size_k=1", "trainer.carry_mode=none", "trainer.advantage_mode=gigpo",
              "env.eval_carry_mode=none", "env.solve_prompt=plain"],
    "no_carry": ["trainer.carry_mode=none", "env.eval_carry_mode=none"],
    "reflect": ["trainer.carry_mode=none", "env.eval_carry_mode=reflect", "env.curate_prefix=<remark>"],
    "skillrise": [],
}  # fmt: skip
PAPER_CONFIGS = ["scienceworld_qwen3-4b_paper", "alfworld_qwen3-4b_paper", "webshop_qwen3-4b_paper"]
CPU_PLAN = list(METHODS)  # the CPU plan trains every method (`reproduce --methods` picks some)
PAPER_METHODS = ["grpo", "skillrise"]  # the paper's table: SkillRise against GRPO with the matched budget
MECHANISMS_HELP = ("success at each task position of the evaluation trials with and without the carried skill "
                   "document: untrained, GRPO-final and SkillRise-final (writes mechanisms.json)")  # fmt: skip


def sections():
    from agentrl_shared.config import LaunchConfig, ModelConfig

    from .config import EnvConfig, SkillRiseConfig, WarmStartConfig

    return {"trainer": SkillRiseConfig, "env": EnvConfig, "model": ModelConfig, "warmstart": WarmStartConfig,
            "launch": LaunchConfig}  # fmt: skip


def load(config: str, overrides: list[str]) -> dict:
    """The resolved config; a bad file, key or value (the dataclasses' own checks too) raises `ConfigError`."""
    from agentrl_shared.config import load_config

    return load_config(config, overrides, sections(), PACKAGE)


def run_name(cfg: dict, method: str) -> str:
    model = model_tag(cfg["model"].name_or_path)
    t = cfg["trainer"]
    return f"{cfg['env'].name}_{model}_{method}_K{t.group_size_k}_{t.carry_mode}_seed{t.seed}"


def headline(cfg: dict) -> str:
    t = cfg["trainer"]
    return (f"env={cfg['env'].name} model={cfg['model'].name_or_path} lr={t.learning_rate} K={t.group_size_k} "
            f"carry={t.carry_mode} adv={t.advantage_mode} gamma={t.traj_gamma} N={t.num_generations} "
            f"num_rollouts={t.num_rollouts}")  # fmt: skip


# official env.seed = 0: the WebShop training workers all shuffle their goals with it (skillrise_webshop/envs.py), the
# validation workers with seed + 1000 (`env.seed_offset_eval`)
TRAIN_GOAL_SEED = 0


def _tasks(env, split: str, goal_seed: int) -> list[dict]:
    """The split's tasks (WebShop: goals fixed with `goal_seed`, `groups.pin_webshop_goals`), capped to the first
    `max_tasks_per_family` of each family (in loader order)."""
    from agentrl_shared.envs import load_tasks

    from .groups import family_of, pin_webshop_goals

    tasks = load_tasks(env.name, split, **env.task_kwargs)
    if env.name == "webshop":
        kw = env.task_kwargs
        tasks = pin_webshop_goals(tasks, goal_seed, kw.get("data_dir"), kw.get("full", False),
                                  kw.get("human_goals", False))  # fmt: skip
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
    """The training groups: the official group file where `env.groups` finds one, else the rules (`groups.py`); the
    pool shuffled once with seed 0 (official `group_loader.py`, env.seed = 0)."""
    from .groups import build_groups, difficulty_fn, group_file, load_group_file

    env, K = cfg["env"], cfg["trainer"].group_size_k
    path = group_file(env.name, env.groups)  # before the tasks load: a missing file named fails fast
    tasks = _tasks(env, env.train_split, TRAIN_GOAL_SEED)
    if path is not None:
        groups = load_group_file(path, env.name, tasks, K, env.train_split, seed=0)
        logger.info(f"{len(groups)} training groups from {path}")
        return groups
    return build_groups(tasks, env.name, K, seed=0, difficulty=difficulty_fn(env.name))


def panel_drawer(cfg: dict):
    """A function that returns the evaluation panels of one validation (`env.eval_panel`):

    - `random` (official): `eval_tasks` tasks of the eval split drawn at random without replacement, redrawn at every
      validation from one generator seeded with `seed_offset_eval` (verl-agent validation workers: env.seed + 1000,
      `np.random.RandomState(seed).choice(..., replace=False)` at each `reset`); cross mode draws `eval_tasks // K`
      of the eval groups likewise;
    - `fixed` (our comparisons): the same panel at every validation, every family in turn (round robin over the
      families in loader order, each family's tasks in loader order), so every task type is in it once `eval_tasks`
      is at least the number of families; cross mode: the first `eval_tasks // K` eval groups.

    `repeat` = each panel task K times; `cross` = groups of K different tasks of a family (the rules of `groups.py`).
    Every rank draws the same panels (same seed, same number of calls)."""
    import numpy as np

    from .groups import build_groups, difficulty_fn, family_of, repeat_groups

    env = cfg["env"]
    tasks = _tasks(env, env.eval_split, env.seed_offset_eval)
    n_groups = max(env.eval_tasks // env.eval_k, 1)
    cross = []
    if "cross" in env.eval_modes:
        cross = build_groups(tasks, env.name, env.eval_k, seed=0, difficulty=difficulty_fn(env.name))
    rng = np.random.RandomState(env.seed_offset_eval)
    fixed_tasks = round_robin(tasks, lambda t: family_of(env.name, t))[: env.eval_tasks]

    def draw() -> dict[str, list[list[dict]]]:
        out = {}
        if env.eval_panel == "random":
            picked = [tasks[i] for i in rng.choice(len(tasks), size=min(env.eval_tasks, len(tasks)), replace=False)]
            groups = [cross[i] for i in rng.choice(len(cross), size=min(n_groups, len(cross)), replace=False)]
        else:
            picked, groups = fixed_tasks, cross[:n_groups]
        if "repeat" in env.eval_modes:
            out["repeat"] = repeat_groups(picked, env.eval_k)
        if "cross" in env.eval_modes:
            out["cross"] = groups
        return out

    return draw


def round_robin(tasks: list[dict], key) -> list[dict]:
    """Tasks one family at a time in turn (families in order of first appearance, each in loader order)."""
    families: dict[str, list[dict]] = {}
    for t in tasks:
        families.setdefault(key(t), []).append(t)
    queues = list(families.values())
    out = []
    for k in range(max((len(q) for q in queues), default=0)):
        out += [q[k] for q in queues if k < len(q)]
    return out


def eval_seeds(cfg: dict) -> list[int]:
    env = cfg["env"]
    return [env.seed_offset_eval + s for s in env.eval_seeds]


def eval_headline(summary: dict) -> str:
    parts = []
    for mode, s in summary.items():
        if mode == "repeat":
            parts.append("repeat " + " ".join(f"pass@{k + 1} {s[f'pass@{k + 1}']:.3f}" for k in range(s["K"])))
        else:
            parts.append(f"cross success {s['success_rate']:.3f}")
    return "; ".join(parts)


def trial_panel(groups_by_mode: dict[str, list[list[dict]]]) -> list[dict]:
    """The trials of one evaluation as panel entries for the results file: one per group, named by its mode and its
    tasks' ids in order."""
    return [{"task_id": f"{mode}:" + ",".join(t["task_id"] for t in g)} for mode, groups in groups_by_mode.items()
            for g in groups]  # fmt: skip


def build_trainer(cfg: dict):
    """`SkillRiseTrainer` on `cfg["model"]` (tokenizer, model kwargs, LoRA, the training groups): what `train` trains
    and evaluates, and what `mechanisms` evaluates with and without the carried document."""
    from transformers import AutoTokenizer

    from agentrl_shared.lora import peft_config
    from agentrl_shared.models import model_path

    from .trainer import SkillRiseTrainer

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    path = model_path(model_cfg.name_or_path)
    set_model_init_kwargs(args, model_cfg)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    return SkillRiseTrainer(
        path, args, env, train_groups(cfg), processing_class=tok, peft_config=peft_config(model_cfg.lora)
    )


def play_panels(trainer, panels: dict[str, list[list[dict]]], seeds: list[int], temperature: float,
                carry_mode: str) -> dict[str, list[dict]]:  # fmt: skip
    """The trainer's evaluation of one validation's panels (`SkillRiseTrainer.evaluate_trials`: one trial per group
    and seed, repeat mode skipping the attempts after a win): the trial records (`trial.trial_record`) per mode. Every
    rank must call this."""
    return {mode: trainer.evaluate_trials(groups, seeds, temperature, carry_mode, skip_won=mode == "repeat")
            for mode, groups in panels.items()}  # fmt: skip


def train(cfg: dict, method: str = "run", output: Path = Path("runs/skillrise")) -> dict:
    """Train one configuration, then evaluate it on the panels of `panel_drawer` (`agentrl_shared.cli.run_training`); returns the
    results payload (on every rank; files are written by the main process). Every validation's trial records go to
    `<out>/eval_trials.jsonl`, tagged with the rollouts done and the mode (the per-instance outcomes `report` pairs)."""
    from agentrl_shared.evaluation import write_results

    from .trial import summarize_trials

    args, env = cfg["trainer"], cfg["env"]
    out = run_folder(args, output, run_name(cfg, method))
    log_to_file(out)
    resolved = dump_config(cfg, out, headline(cfg))
    draw, seeds = panel_drawer(cfg), eval_seeds(cfg)
    carry = env.eval_carry_mode or args.carry_mode

    drawn: dict[str, list[list[dict]]] = {}  # the last validation's panel, for the results file
    log_records = eval_records(out / "eval_trials.jsonl", args.resume_from_checkpoint)

    def evaluate(trainer) -> dict:  # a new panel at every validation where env.eval_panel = random (official)
        drawn.clear()
        drawn.update(draw())
        played = play_panels(trainer, drawn, seeds, env.eval_temperature, carry)
        log_records(trainer, ({"mode": mode, **r} for mode, records in played.items() for r in records))
        return {mode: summarize_trials(records, mode, seeds) for mode, records in played.items()}

    trainer = build_trainer(cfg)
    warn_launch_size(cfg, trainer)
    try:  # a signal stops training with a checkpoint and ends the command (`Stopped`): `reproduce` resumes it
        run = run_training(trainer, evaluate, eval_headline, out, eval_every=env.eval_every,
                           eval_before_train=env.eval_before_train,
                           resume_from_checkpoint=args.resume_from_checkpoint)  # fmt: skip
    finally:
        trainer.pool.close()
    trainer.save_model(str(out / "final"))  # weights stay under the run's folder
    payload = training_payload(trainer, cfg, resolved, method, trial_panel(drawn), seeds, run)
    if trainer.accelerator.is_main_process:
        write_results(out / "results.json", payload)
    return payload


def evaluate_model(cfg: dict, method: str = "eval", output: Path = Path("runs/skillrise")) -> dict:
    """Evaluate `model.name_or_path` on the panels with HF generation (resumable: trials are logged as they end)."""
    import torch
    from transformers import AutoTokenizer

    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.evaluation import write_results
    from agentrl_shared.generation import HFGenerator, load_eval_model
    from agentrl_shared.models import model_path

    from .config import make_env_factory, make_solve_prompt
    from .trial import TrialRunner, summarize_trials, trial_record

    args, env, model_cfg = cfg["trainer"], cfg["env"], cfg["model"]
    out = run_folder(args, output, run_name(cfg, method))
    log_to_file(out, "eval.log")
    resolved = dump_config(cfg, out, headline(cfg))
    path = model_path(model_cfg.name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = load_eval_model(path, model_cfg.dtype, args.use_cpu)  # on the GPU when there is one
    torch.manual_seed(args.seed)
    seeds = eval_seeds(cfg)
    slots = env.eval_batch_size or args.per_device_train_batch_size * args.steps_per_generation
    # in the trainer's precision: bf16 autocast when `bf16=True` (as the trained models are evaluated)
    autocast_dtype = torch.bfloat16 if args.bf16 else None
    generate = HFGenerator(model, tok, args.max_completion_length, env.eval_temperature, batch_size=slots,
                           autocast_dtype=autocast_dtype)  # fmt: skip
    carry = env.eval_carry_mode or args.carry_mode
    summary = {}
    t0 = time.perf_counter()
    with EnvPool(make_env_factory(env), slots, env.step_timeout, env.num_workers) as pool:
        runner = TrialRunner(pool, make_solve_prompt(env), tok, env.name, env.max_turns, env.max_prompt_length, carry,
                             args.skill_max_chars, env.curate_history, env.curate_prefix,
                             args.chat_template_kwargs, env.prompt_overflow)  # fmt: skip
        panel = panel_drawer(cfg)()
        for mode, groups in panel.items():
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
                                    K=len(groups[0]), skip_won=mode == "repeat")  # fmt: skip
                for t in trials:
                    rec = trial_record(t)
                    done[(tuple(rec["task_ids"]), rec["seed"])] = rec
                    append_jsonl(log, rec)
                logger.info(f"eval {mode}: {min(start + slots, len(todo))}/{len(todo)} trials")
            records = [done[(tuple(t["task_id"] for t in g), s)] for s in seeds for g in groups]
            summary[mode] = summarize_trials(records, mode, seeds)
    payload = eval_payload(cfg, resolved, method, trial_panel(panel), seeds, time.perf_counter() - t0, summary)
    write_results(out / "results.json", payload)
    logger.info(f"eval {method}: {eval_headline(summary)}")
    return payload


def warm_start(cfg: dict, method: str = "warmstart", output: Path = Path("runs/skillrise")) -> dict:
    """Curation warm start (`warmstart.py`): SFT of `model.name_or_path` on the gold rows of `warmstart.num_tasks`
    made-up TextRooms tasks played through the RL prompts; the model is saved to `<run>/final`, the losses and the
    gold trials' outcomes to `results.json`."""
    from agentrl_shared.sft import warm_start_run

    from .trial import trial_record
    from .warmstart import gold_rows

    args, env, ws = cfg["trainer"], cfg["env"], cfg["warmstart"]
    if ws.num_tasks <= 0:
        raise ValueError("warm start needs warmstart.num_tasks > 0.")
    out = run_folder(args, output, run_name(cfg, method))
    log_to_file(out)
    resolved = dump_config(cfg, out, headline(cfg))

    def gold(tok):
        rows, trials = gold_rows(args, env, tok, ws.num_tasks, args.seed)
        return rows, {"gold_trials": [trial_record(t) for t in trials]}

    return warm_start_run(cfg, method, out, resolved, ("play", "curate"), gold)


def method_config(config: str, method: str, overrides: list[str]) -> dict:
    """`config` with `method`'s switches before the overrides (`METHODS`; an unknown name is a configuration error).
    GRPO's and GiGPO's group and trials per rank are K times the config's (as overridden), after the overrides: the budget."""
    switches = method_switches(METHODS, method)
    if method in ("grpo", "gigpo"):
        t = load(config, overrides)["trainer"]
        budget = [f"trainer.num_generations={t.group_size_k * t.num_generations}",
                  f"trainer.per_device_train_batch_size={t.group_size_k * t.per_device_train_batch_size}"]  # fmt: skip
        return load(config, [*switches, *overrides, *budget])
    return load(config, [*switches, *overrides])


def reproduce(
    scale: str,
    seeds: list[int],
    overrides: list[str],
    output: Path,
    flags: LaunchFlags = LaunchFlags(),
    methods: list[str] = CPU_PLAN,
    configs: list[str] = PAPER_CONFIGS,
) -> None:
    """Run one scale's plan into `output/<scale>/<method>/...` (a finished run is not redone, an unfinished one goes on
    from its last checkpoint). CPU: the curation warm start when the config has one (`warmstart.num_tasks`; every
    method then starts from its checkpoint, "untrained" = warm-started, no RL), then untrained vs GRPO vs GiGPO vs
    no-carry vs reflection carry vs SkillRise on TextRooms, per seed. Paper: GRPO (matched budget) and SkillRise on each paper config, each an `accelerate launch` on its config's
    processes (`launch:`); `flags.dry_run` prints those commands only. `methods` (CPU): which of `METHODS` to train
    (the warm start and the untrained evaluation always run first); `configs`: the paper configs. Tracked files are
    never written here:
    `skillrise report --runs <output>` copies the results into `skillrise/results/` and rebuilds the README."""
    check_plan(methods, METHODS, configs, PACKAGE)
    if scale == "cpu":
        warm = load(CPU_CONFIG, overrides)["warmstart"].num_tasks > 0
        plan = [*(["warmstart"] * warm), "untrained", *(m for m in METHODS if m in methods)]
        for _, seed, method, run in pending_runs(output, "cpu", seeds, plan):
            start = output / "cpu" / "warmstart" / f"seed{seed}" / "final"
            model = [f"model.name_or_path={start}"] if warm and method != "warmstart" else []
            run_overrides = [*overrides, *model, f"trainer.seed={seed}", f"trainer.output_dir={run}",
                             *resume_args(run)]  # fmt: skip
            if method == "warmstart":
                warm_start(load(CPU_CONFIG, run_overrides), method)
            elif method == "untrained":
                evaluate_model(load(CPU_CONFIG, run_overrides), method)
            else:
                train(method_config(CPU_CONFIG, method, run_overrides), method)
    else:
        reproduce_paper(PACKAGE, "SkillRise", configs, PAPER_METHODS, seeds, overrides, output, flags, load)
    logger.info(f"reproduce: runs are in {output}; `skillrise report --runs {output}` updates skillrise/results and "
                "the README")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser, subs = build_parser(PACKAGE, __doc__, CPU_CONFIG, list(METHODS), {"mechanisms": MECHANISMS_HELP})
    add_mechanisms_flags(subs["mechanisms"], PACKAGE, CPU_CONFIG)
    add_plan_flags(subs["reproduce"], CPU_PLAN, list(METHODS), PAPER_CONFIGS)
    ns = parse_args(parser, subs, argv)
    setup_logging()

    def command():
        if ns.command == "report":
            from .report import report

            report(ns.readme, ns.runs)
        elif ns.command == "reproduce":
            reproduce(ns.scale, seeds_arg(ns.seeds), ns.overrides, ns.output, launch_flags(ns), ns.methods.split(","),
                      ns.configs.split(","))  # fmt: skip
        elif ns.command == "mechanisms":
            from .mechanisms import mechanisms

            mechanisms(ns.config, ns.runs, ns.seed, ns.output, ns.overrides)
        elif ns.command == "train":
            train(method_config(ns.config, ns.method, ns.overrides), ns.method, ns.output)
        else:
            evaluate_model(load(ns.config, ns.overrides), ns.method, ns.output)

    run_command(PACKAGE, command)


if __name__ == "__main__":
    main(sys.argv[1:])
