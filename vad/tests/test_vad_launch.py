"""Paper-scale launch: `vad reproduce --scale paper --dry-run` prints one `accelerate launch` per trained row on the
config's 8 processes and runs nothing (no GPU or data check, no launch, no evaluation); `--method` refuses a typo with
the valid rows; `--dry-run` is refused at CPU scale; configuration errors end with one line and exit status 2."""

import shlex
import subprocess

import pytest

import vad.cli as cli
from vad.config import ROWS


def test_reproduce_paper_dry_run_prints_every_trained_row_on_8_processes(tmp_path, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise AssertionError(f"a dry run ran {args}")

    monkeypatch.setattr(subprocess, "run", fail)
    monkeypatch.setattr(cli, "check_paper_scale", fail)
    monkeypatch.setattr(cli, "eval_base", fail)
    cli.run(["reproduce", "--scale", "paper", "--dry-run", "--output", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in out if line.startswith("accelerate launch ")]
    rows = cli.load(cli.SCALE_CONFIGS["paper"], ["trainer.use_cpu=true"])["data"].rows
    trained = [r for r in rows if ROWS[r] is not None]
    assert [c[c.index("--method") + 1] for c in commands] == trained and len(trained) == 10
    for cmd in commands:
        at = cmd.index("--num_processes")
        assert cmd[at : at + 4] == ["--num_processes", "8", "--num_machines", "1"]
        assert cmd[cmd.index("-m") : cmd.index("-m") + 3] == ["-m", "vad.cli", "train"]
        assert "trainer.use_cpu=true" not in cmd  # the planning override stays out of the launched run
    assert any(line.startswith("# base seed 0: evaluated in this process") for line in out)
    assert not any(tmp_path.iterdir())  # nothing written


def _exit_line(argv: list[str]) -> str:
    """`vad ARGV` ends as every package's command line does on a user error (`agentrl_shared.cli.run_command`):
    exit status 2 and one line `vad: ...`, no traceback."""
    from agentrl_shared.cli import UserError

    with pytest.raises(UserError) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and "\n" not in str(exc.value) and str(exc.value).startswith("vad: ")
    return str(exc.value)


def test_train_row_typo_is_refused_with_the_valid_rows():
    error = _exit_line(["train", "--config", "smoke", "--method", "vad_fk"])
    assert error.startswith("vad: Unknown --method 'vad_fk'. Did you mean vad_fkl?")
    assert all(r in error for r, v in ROWS.items() if v is not None)


def test_dry_run_is_for_the_paper_scale():
    assert "use it with --scale paper" in _exit_line(["reproduce", "--dry-run"])


def test_cli_shape_matches_the_other_packages(capsys):
    """`--help` and the subcommands' flags need neither TRL nor torch; `reproduce --seeds`, `report --runs`."""
    import sys

    code = (
        "import sys, vad.cli as c\n"
        "try:\n    c.main(['reproduce', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('trl', 'torch', 'transformers') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr
    assert "--seeds" in proc.stdout and "--config" in proc.stdout and "--dry-run" in proc.stdout
    assert "--seeds 'x' is not a comma-separated list" in _exit_line(["reproduce", "--seeds", "x"])


def test_hf_evaluation_on_several_ranks_is_refused_before_any_model_loads(monkeypatch, tmp_path):
    def fail(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(cli, "build_trainer", fail)
    monkeypatch.setattr(cli, "launch", fail)
    cfg = cli.load("smoke", [])  # loaded in one process: TrainingArguments would set up the 2-rank group itself
    monkeypatch.setenv("WORLD_SIZE", "2")  # as `accelerate launch --num_processes 2` sets it for `vad train`
    with pytest.raises(cli.UsageError, match="data.eval_backend=hf evaluates on one process, not 2"):
        cli.train(cfg, str(tmp_path))
    monkeypatch.delenv("WORLD_SIZE")
    error = _exit_line(
        ["reproduce", "--scale", "paper", "--dry-run", "--output", str(tmp_path), "data.eval_backend=hf"]
    )
    assert "not 8: set data.eval_backend=vllm" in error  # the paper plan: 8 processes per trained row
    assert not any(tmp_path.iterdir())
