"""Paper-scale launch: `agentopsd reproduce --scale paper --dry-run` prints each `accelerate launch` on the paper's
process count (ALFWorld 8, WebShop 2, Search 4) and runs nothing; an unfinished run resumes from its last checkpoint;
`train --method` applies the baseline's switches and refuses a typo with the valid names."""

import shlex
import subprocess

import agentopsd.cli
import agentrl_shared.cli
from agentopsd.cli import main
from agentrl_shared.smoke import error_line


GPUS = {"alfworld_qwen2.5-7b_paper": 8, "webshop_qwen2.5-7b_paper": 2, "search_qwen2.5-7b_paper": 4}


def test_reproduce_paper_dry_run_prints_every_launch_on_the_papers_process_count(tmp_path, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise AssertionError(f"a dry run ran {args}")

    monkeypatch.setattr(subprocess, "run", fail)
    monkeypatch.setattr(agentrl_shared.cli, "check_paper_prerequisites", fail)
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA", "SEARCH_QA_DATA"):
        monkeypatch.delenv(var, raising=False)
    unfinished = tmp_path / "paper" / "grpo" / "seed0_search_qwen2.5-7b_paper"
    for step in (9, 30):
        (unfinished / f"checkpoint-{step}").mkdir(parents=True)
    main(["reproduce", "--scale", "paper", "--dry-run", "--output", str(tmp_path)])
    commands = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if line.startswith("accelerate ")]
    launches = {(c[c.index("--config") + 1], c[c.index("--method") + 1]): c for c in commands}
    assert sorted(launches) == sorted((c, m) for c in GPUS for m in ("grpo", "agentopsd"))
    for (config, _), cmd in launches.items():
        at = cmd.index("--num_processes")
        assert cmd[at : at + 4] == ["--num_processes", str(GPUS[config]), "--num_machines", "1"], config
        assert cmd[cmd.index("-m") : cmd.index("-m") + 3] == ["-m", "agentopsd.cli", "train"]
    assert launches["search_qwen2.5-7b_paper", "grpo"][-1] == (
        f"trainer.resume_from_checkpoint={unfinished / 'checkpoint-30'}"
    )


def test_train_method_applies_its_switches_and_refuses_a_typo(monkeypatch):
    trained = []
    monkeypatch.setattr(agentopsd.cli, "train", lambda cfg, method, output: trained.append((method, cfg["trainer"])))
    main(["train", "--config", "smoke", "--method", "rlsd"])
    main(["train", "--config", "smoke"])
    (rlsd, t_rlsd), (run, t_run) = trained
    assert (rlsd, t_rlsd.credit, t_rlsd.granularity) == ("rlsd", "rlsd", "token")
    assert (run, t_run.credit) == ("run", "agentopsd")
    message = error_line(main, ["train", "--config", "smoke", "--method", "rlds"])
    assert message == (
        "agentopsd: Unknown --method 'rlds'. Did you mean rlsd? Valid: run (the config as it is), grpo, rlsd, "
        "skill_sd, skill_grpo, tether_seq, gigpo, agentopsd."
    )
