"""Paper-scale launch: `skillrise reproduce --scale paper --dry-run` prints each `accelerate launch` on the paper's
process count (ALFWorld 8, ScienceWorld 8, WebShop 4) and runs nothing; an unfinished run resumes from its last
checkpoint; `train --method` applies the method's switches (GRPO with the matched budget on any config) and refuses a
typo with the valid names."""

import shlex
import subprocess

import agentrl_shared.cli
import skillrise.cli
from agentrl_shared.smoke import error_line
from skillrise.cli import main, method_config


GPUS = {"alfworld_qwen3-4b_paper": 8, "scienceworld_qwen3-4b_paper": 8, "webshop_qwen3-4b_paper": 4}


def nothing_runs(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError(f"a dry run ran {args}")

    monkeypatch.setattr(subprocess, "run", fail)
    monkeypatch.setattr(agentrl_shared.cli, "check_paper_prerequisites", fail)
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA"):
        monkeypatch.delenv(var, raising=False)


def test_reproduce_paper_dry_run_prints_every_launch_on_the_papers_process_count(tmp_path, monkeypatch, capsys):
    nothing_runs(monkeypatch)
    unfinished = tmp_path / "paper" / "skillrise" / "seed0_webshop_qwen3-4b_paper"
    for step in (80, 160):
        (unfinished / f"checkpoint-{step}").mkdir(parents=True)
    main(["reproduce", "--scale", "paper", "--dry-run", "--output", str(tmp_path)])
    commands = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if line.startswith("accelerate ")]
    launches = {(c[c.index("--config") + 1], c[c.index("--method") + 1]): c for c in commands}
    assert sorted(launches) == sorted((c, m) for c in GPUS for m in ("grpo", "skillrise"))
    for (config, _), cmd in launches.items():
        at = cmd.index("--num_processes")
        assert cmd[at : at + 4] == ["--num_processes", str(GPUS[config]), "--num_machines", "1"], config
        assert cmd[cmd.index("-m") : cmd.index("-m") + 3] == ["-m", "skillrise.cli", "train"]
    assert launches["webshop_qwen3-4b_paper", "skillrise"][-1] == (
        f"trainer.resume_from_checkpoint={unfinished / 'checkpoint-160'}"
    )


def test_train_method_grpo_keeps_the_budget_and_a_typo_is_refused(monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", "/data")
    paper = method_config("alfworld_qwen3-4b_paper", "grpo", ["trainer.use_cpu=true"])
    base = method_config("alfworld_qwen3-4b_paper", "run", ["trainer.use_cpu=true"])
    t, b = paper["trainer"], base["trainer"]
    assert (t.group_size_k, t.num_generations, t.carry_mode, t.advantage_mode) == (1, 24, "none", "grpo")
    assert t.per_device_train_batch_size == 3 * b.per_device_train_batch_size and b.num_generations == 8
    assert paper["env"].eval_carry_mode == "none" and b.group_size_k == 3
    trained = []
    monkeypatch.setattr(skillrise.cli, "train", lambda cfg, method, output: trained.append((method, cfg["trainer"])))
    main(["train", "--method", "grpo"])  # the CPU config: 1 group x 4 trials x K 3 -> one group of 12
    (method, cpu), *_ = trained
    assert (method, cpu.group_size_k, cpu.num_generations, cpu.per_device_train_batch_size) == ("grpo", 1, 12, 6)
    message = error_line(main, ["train", "--method", "gipo"])
    assert message.startswith("skillrise: Unknown --method 'gipo'.")
    assert message.endswith("Valid: run (the config as it is), grpo, gigpo, no_carry, reflect, skillrise.")
    assert len(trained) == 1  # refused before any config or model loads
