"""`agentopsd train|eval|reproduce|report|mechanisms`: the AgentOPSD command line (`agentopsd <command> --help`).

`train` runs one configuration and evaluates the result on the fixed panel; `eval` evaluates a model (the untrained
Vanilla / Skill-Prompt* baselines, or a checkpoint); `reproduce` runs one scale's plan (configs x methods x seeds)
under an output folder (git-ignored); `report` copies finished runs into `agentopsd/results` and rebuilds the README
tables and learning curves from those files, the only command that writes tracked files; `mechanisms` measures the
self-teacher's success and its gap, belief and advantage weights on the panel for the untrained, GRPO and AgentOPSD
models (`agentopsd.mechanisms`). No algorithm logic here.
"""

import logging
import sys
from pathlib import Path

from agentrl_shared.cli import (
    LaunchFlags,
    add_compare_flag,
    add_mechanisms_flags,
    add_plan_flags,
    build_parser,
    check_plan,
    evaluate_on_episodes,
    launch_flags,
    method_switches,
    model_tag,
    parse_args,
    reproduce_cpu,
    reproduce_paper,
    run_command,
    run_folder,
    seeds_arg,
    setup_logging,
    train_on_episodes,
)
from agentrl_shared.offline import set_offline_env


set_offline_env()  # before transformers / trl are imported

logger = logging.getLogger("agentopsd")

PACKAGE = "agentopsd"
CPU_CONFIG = "textrooms_smollm2-135m_cpu"
# the paper's baselines that live in this package, as switches of any config: `train --method NAME` applies them before
# the overrides (`run`, the default, applies none; OPSD, GRPO+OPSD and SDAR are the sdar package's; `make compare` runs
# them side by side)
BASELINES = {
    "grpo": ["trainer.credit=grpo"],
    "rlsd": ["trainer.credit=rlsd", "trainer.granularity=token"],
    "skill_sd": ["trainer.credit=grpo", "trainer.sdl_coef=0.001"],
    "skill_grpo": ["trainer.credit=grpo", "trainer.skills_in_student_prompt=true"],
    # AgentOPSD's own `tether_seq` (opsd_utils.py): RLSD's credit with a constant tether_lambda 0.5 and band 0.2, at
    # the config's granularity
    "tether_seq": ["trainer.credit=rlsd", "trainer.rlsd_warmdown_steps=-1"],
    # GiGPO (Feng et al. 2025; verl-agent `gigpo/core_gigpo.py`), the agentic RL baseline of SkillRise's tables: GRPO's
    # rows with the episode-group + anchor-state step advantage (`agentrl_shared.gigpo`), for `make compare`
    "gigpo": ["trainer.credit=grpo", "trainer.advantage_mode=gigpo"],
    "agentopsd": [],
}
# reproduce plans: the method against GRPO (and, on CPU, the untrained model); `--methods` takes any of BASELINES
PLAN = ["grpo", "agentopsd"]
MECHANISMS_HELP = ("the skill-conditioned teacher's success and its log-prob gap, belief and advantage weights on "
                   "the panel: untrained, GRPO-final and AgentOPSD-final (writes mechanisms.json)")  # fmt: skip
# the paper's headline model (its README table is Qwen2.5-7B); `--configs` adds the 3B ones
PAPER_CONFIGS = ["alfworld_qwen2.5-7b_paper", "webshop_qwen2.5-7b_paper", "search_qwen2.5-7b_paper"]


def sections():
    from agentrl_shared.config import LaunchConfig, ModelConfig

    from .config import AgentOPSDConfig, EnvConfig

    return {"trainer": AgentOPSDConfig, "env": EnvConfig, "model": ModelConfig, "launch": LaunchConfig}


def load(config: str, overrides: list[str]) -> dict:
    from agentrl_shared.config import load_config

    return load_config(config, overrides, sections(), PACKAGE)


def run_name(cfg: dict, method: str) -> str:
    model = model_tag(cfg["model"].name_or_path)
    return f"{cfg['env'].name}_{model}_{method}_seed{cfg['trainer'].seed}"


def headline(cfg: dict) -> str:
    t = cfg["trainer"]
    return (f"env={cfg['env'].name} model={cfg['model'].name_or_path} lr={t.learning_rate} credit={t.credit} "
            f"granularity={t.granularity} lambda={t.mult_lambda} band={t.mult_band} beta={t.beta} "
            f"G={t.num_generations} num_rollouts={t.num_rollouts}")  # fmt: skip


def train(cfg: dict, method: str = "run", output: Path = Path("runs/agentopsd")) -> dict:
    """Train one configuration, then evaluate it on the fixed panel (`agentrl_shared.cli.train_on_episodes`: the
    shared run loop); returns the results payload (on every rank; files are written by the main process)."""
    from .trainer import AgentOPSDTrainer

    out = run_folder(cfg["trainer"], output, run_name(cfg, method))
    return train_on_episodes(AgentOPSDTrainer, cfg, method, out, headline(cfg))


def evaluate_model(cfg: dict, method: str = "eval", output: Path = Path("runs/agentopsd")) -> dict:
    """Evaluate `model.name_or_path` on the panel (the untrained and Skill-Prompt* rows, or a checkpoint), with
    skills in the student prompt when `eval_with_skills` (`agentrl_shared.cli.evaluate_on_episodes`)."""
    from functools import partial

    from agentrl_shared.skills import student_prompt

    from .config import ENV_TO_PROMPT

    args, env = cfg["trainer"], cfg["env"]
    out = run_folder(args, output, run_name(cfg, method))
    transform = partial(student_prompt, env.name, skills_dir=args.skills_dir) if args.eval_with_skills else None
    return evaluate_on_episodes(cfg, method, out, headline(cfg), ENV_TO_PROMPT[env.name], transform)


def reproduce(
    scale: str,
    seeds: list[int],
    overrides: list[str],
    output: Path,
    flags: LaunchFlags = LaunchFlags(),
    methods: list[str] = PLAN,
    configs: list[str] = PAPER_CONFIGS,
    jobs: int = 1,
) -> None:
    """Run one scale's plan into `output/<scale>/<method>/...` (a finished run is not redone, an unfinished one goes on
    from its last checkpoint). CPU: the untrained model vs `methods` (default GRPO and AgentOPSD) on TextRooms, per
    seed. Paper: `methods` on each of `configs`, each an `accelerate launch` on its config's processes (`launch:`);
    `flags.dry_run` prints those commands only. Tracked files are never written here: `agentopsd report --runs
    <output>` copies the results into `agentopsd/results/` and rebuilds the README tables."""
    check_plan(methods, BASELINES, configs, PACKAGE)
    if scale == "cpu":
        plan = {"untrained": [], **{m: BASELINES[m] for m in methods}}

        def run_one(method: str, run_overrides: list[str]):
            cfg = load(CPU_CONFIG, run_overrides)
            return evaluate_model(cfg, method) if method == "untrained" else train(cfg, method)

        reproduce_cpu(PACKAGE, CPU_CONFIG, plan, seeds, overrides, output, jobs, run_one)
    else:
        reproduce_paper(PACKAGE, "AgentOPSD", configs, methods, seeds, overrides, output, flags, load)
    if not flags.dry_run:
        from agentrl_shared.report import plan_summary

        from .report import METHOD_NAMES

        # on CPU: GRPO against the untrained model, each other method against GRPO, paired on the panel's instances
        pairs = [("grpo", "untrained"), *[(m, "grpo") for m in methods if m != "grpo"]] if scale == "cpu" else []
        print(plan_summary(output, scale, METHOD_NAMES, f"AgentOPSD, {scale} scale", pairs))
    logger.info(f"reproduce: runs are in {output}; `agentopsd report --runs {output}` updates agentopsd/results and the "
                "README")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser, subs = build_parser(PACKAGE, __doc__, CPU_CONFIG, list(BASELINES), {"mechanisms": MECHANISMS_HELP})
    add_mechanisms_flags(subs["mechanisms"], PACKAGE, CPU_CONFIG)
    add_plan_flags(subs["reproduce"], PLAN, list(BASELINES), PAPER_CONFIGS, jobs=True)
    add_compare_flag(subs["report"], "runs/compare/textrooms")
    ns = parse_args(parser, subs, argv)
    setup_logging()

    def command():
        if ns.command == "report":
            from .report import report

            report(ns.readme, ns.runs, ns.compare)
        elif ns.command == "reproduce":
            reproduce(ns.scale, seeds_arg(ns.seeds), ns.overrides, ns.output, launch_flags(ns), ns.methods.split(","),
                      ns.configs.split(","), ns.jobs)  # fmt: skip
        elif ns.command == "mechanisms":
            from .mechanisms import mechanisms

            mechanisms(ns.config, ns.runs, ns.seed, ns.output, ns.overrides)
        elif ns.command == "train":
            train(load(ns.config, [*method_switches(BASELINES, ns.method), *ns.overrides]), ns.method, ns.output)
        else:
            evaluate_model(load(ns.config, ns.overrides), ns.method, ns.output)

    run_command(PACKAGE, command)


if __name__ == "__main__":
    main(sys.argv[1:])
