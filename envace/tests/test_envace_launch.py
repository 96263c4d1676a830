"""Paper-scale launch: `envace reproduce --scale paper --dry-run` prints the `accelerate launch` of the paper's 16
processes over 2 machines (and how each machine joins) and runs nothing; a real multi-machine launch needs this
machine's rank; `train --method` applies the method's switches and refuses a typo with the valid names."""

import shlex
import subprocess

import agentrl_shared.cli
import envace.cli
from agentrl_shared.smoke import error_line
from envace.cli import main


def nothing_runs(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError(f"a dry run ran {args}")

    monkeypatch.setattr(subprocess, "run", fail)
    monkeypatch.setattr(agentrl_shared.cli, "check_paper_prerequisites", fail)
    for var in ("ENVACE_DATA", "ENVACE_JUDGE_URL"):
        monkeypatch.delenv(var, raising=False)


def test_reproduce_paper_dry_run_prints_16_processes_over_2_machines(tmp_path, monkeypatch, capsys):
    nothing_runs(monkeypatch)
    main(["reproduce", "--scale", "paper", "--dry-run", "--seeds", "0,1", "--output", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in out if line.startswith("accelerate launch ")]
    assert [(c[c.index("--config") + 1], c[c.index("--method") + 1]) for c in commands] == [
        ("checklist_qwen3-8b_paper", "envace")
    ] * 2
    for cmd in commands:
        at = cmd.index("--num_processes")
        assert cmd[at : at + 5] == ["--num_processes", "16", "--num_machines", "2", "-m"]
    notes = [line for line in out if line.startswith("# runs on each of the 2 machines")]
    assert len(notes) == 2 and all("--machine_rank 0..1" in n and "--main_process_ip" in n for n in notes)


def test_a_real_two_machine_launch_without_this_machines_rank_is_refused(tmp_path, monkeypatch):
    nothing_runs(monkeypatch)
    monkeypatch.setattr(agentrl_shared.cli, "check_paper_prerequisites", lambda *args: None)  # as on a GPU node
    message = error_line(main, ["reproduce", "--scale", "paper", "--output", str(tmp_path)])
    assert message.startswith("envace: this run is launched on 2 machines: run `envace reproduce` on each with")


def test_train_method_applies_its_switches_and_refuses_a_typo(monkeypatch):
    trained = []
    monkeypatch.setattr(envace.cli, "train", lambda cfg, method, output: trained.append((method, cfg["trainer"])))
    main(["train", "--config", "smoke", "--method", "caller_only_real"])
    main(["train", "--config", "smoke"])
    (real, t_real), (run, t_run) = trained
    assert (real, t_real.tool_return_mode, run, t_run.tool_return_mode) == ("caller_only_real", "real", "run", "agent")
    message = error_line(main, ["train", "--config", "smoke", "--method", "caller_only"])
    assert message == (
        "envace: Unknown --method 'caller_only'. Did you mean caller_only_real? Valid: run (the config as it is), "
        "caller_only_real, envace."
    )
