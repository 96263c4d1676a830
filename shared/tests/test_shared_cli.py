"""The shared command-line skeleton: subcommands and their flags, key=value overrides anywhere, finished runs skipped,
one-line configuration errors, one log file per run."""

import logging
import os
import signal

import pytest

from agentrl_shared.cli import (
    RunLogHandler,
    Stopped,
    build_parser,
    check_paper_prerequisites,
    log_to_file,
    parse_args,
    pending_runs,
    run_command,
    seeds_arg,
)
from agentrl_shared.config import ConfigError


def test_overrides_may_sit_before_between_and_after_the_options():
    parser, subs = build_parser("pkg", "doc", "cpu_config")
    ns = parse_args(parser, subs, ["train", "a=1", "--config", "smoke", "b=2", "--method", "grpo", "c=3"])
    assert (ns.command, ns.config, ns.method, ns.overrides) == ("train", "smoke", "grpo", ["a=1", "b=2", "c=3"])
    ns = parse_args(parser, subs, ["reproduce", "--seeds", "0,1"])
    assert (ns.command, ns.scale, ns.seeds, str(ns.output)) == ("reproduce", "cpu", "0,1", "runs/pkg")


def test_unknown_command_and_flag_are_usage_errors(capsys):
    parser, subs = build_parser("pkg", "doc", "cpu_config")
    with pytest.raises(SystemExit) as exc:
        parse_args(parser, subs, ["fit"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        parse_args(parser, subs, ["report", "--scale", "cpu"])  # report has no --scale
    assert exc.value.code == 2


def test_pending_runs_skips_finished_runs(tmp_path):
    done = tmp_path / "cpu" / "grpo" / "seed0"
    done.mkdir(parents=True)
    (done / "results.json").write_text("{}")
    todo = [(seed, method, run.relative_to(tmp_path).as_posix())
            for _, seed, method, run in pending_runs(tmp_path, "cpu", [0, 1], ["untrained", "grpo"])]  # fmt: skip
    assert todo == [(0, "untrained", "cpu/untrained/seed0"), (1, "untrained", "cpu/untrained/seed1"),
                    (1, "grpo", "cpu/grpo/seed1")]  # fmt: skip
    paper = [run.name for *_, run in pending_runs(tmp_path, "paper", [0], ["sdar"], ["alfworld_paper"])]
    assert paper == ["seed0_alfworld_paper"]


def test_a_signal_during_a_run_ends_the_plan_after_that_run(tmp_path):
    """SIGTERM while a run that is not training (an evaluation, a launched subprocess) is in progress: that run ends,
    no later run starts, the plan exits 143 (as a stopped training run does), and the handlers are given back."""
    started, before = [], {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(SystemExit) as exc:
        for _, seed, method, _run in pending_runs(tmp_path, "cpu", [0, 1], ["untrained", "grpo"]):
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the first run is in progress
            started.append((seed, method))  # ... which is not interrupted
    assert started == [(0, "untrained")] and exc.value.code == 143
    assert {sig: signal.getsignal(sig) for sig in before} == before  # (SIGINT is ignored under nohup)
    # a training run stopped by a signal raises `Stopped` itself (`run_training`): the plan ends there too
    with pytest.raises(Stopped):
        for _ in pending_runs(tmp_path, "cpu", [0, 1], ["untrained", "grpo"]):
            raise Stopped()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_configuration_errors_end_in_one_line_without_traceback(capsys):
    def bad():
        raise ConfigError("Unknown key 'lr' in override 'lr=1'.\nValid keys: learning_rate.")

    with pytest.raises(SystemExit) as exc:
        run_command("pkg", bad)
    line = "pkg: Unknown key 'lr' in override 'lr=1'. Valid keys: learning_rate."
    assert exc.value.code == 2 and str(exc.value) == line and capsys.readouterr().err == line + "\n"
    with pytest.raises(SystemExit, match="comma-separated"):
        run_command("pkg", lambda: seeds_arg("0;1"))

    class DataError(Exception):
        pass

    def missing():
        raise DataError("no data")

    with pytest.raises(SystemExit, match="pkg: no data"):
        run_command("pkg", missing, (DataError,))
    with pytest.raises(KeyError):  # a bug is not a configuration error: its traceback stays
        run_command("pkg", lambda: {}["x"])


def test_paper_prerequisites_name_every_problem():
    def load(name, overrides):
        raise ConfigError(f"{name} needs the environment variable(s) DATA")

    with pytest.raises(ConfigError, match=r"paper-scale Test run: .*a_paper: a_paper needs the environment"):
        check_paper_prerequisites("Test", ["a_paper"], load)


def test_each_run_logs_to_its_own_file(tmp_path):
    log = logging.getLogger("agentrl_shared.test_cli")
    log.setLevel(logging.INFO)
    log_to_file(tmp_path / "a")
    log.info("first run")
    log_to_file(tmp_path / "b")
    log.info("second run")
    log_to_file(tmp_path / "c")  # closes b's handler
    assert sum(isinstance(h, RunLogHandler) for h in logging.getLogger().handlers) == 1
    assert "first run" in (tmp_path / "a" / "train.log").read_text()
    assert "second run" not in (tmp_path / "a" / "train.log").read_text()
    assert "second run" in (tmp_path / "b" / "train.log").read_text()
    for h in [h for h in logging.getLogger().handlers if isinstance(h, RunLogHandler)]:
        logging.getLogger().removeHandler(h)
        h.close()


def test_help_flags_and_error_line_read_a_command_line():
    from agentrl_shared.smoke import error_line, help_flags

    def main(argv):
        parser, subs = build_parser("pkg", "doc", "cpu_config")
        ns = parse_args(parser, subs, argv)
        run_command("pkg", lambda: seeds_arg(ns.seeds))

    assert help_flags(main, "reproduce") == {
        "--scale",
        "--seeds",
        "--output",
        "--dry-run",
        "--machine-rank",
        "--main-process-ip",
    }
    assert help_flags(main, "report") == {"--runs", "--readme"}
    assert error_line(main, ["reproduce", "--seeds", "x"]).startswith("pkg: --seeds 'x' is not")


def test_two_rank_launch_that_times_out_kills_its_ranks(tmp_path):
    """A hung 2-process test must not leave its ranks running (they would hold the cores for the rest of the run)."""
    import time

    import psutil

    from agentrl_shared.smoke import launch_two_ranks

    script = tmp_path / "hang.py"
    script.write_text(
        "import os, sys, time\n"
        "open(os.path.join(sys.argv[1], 'pid' + os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(pytest.fail.Exception, match="did not finish in 30s"):
        launch_two_ranks(tmp_path / "out", [str(script), str(tmp_path)], timeout=30, deepspeed=False)
    time.sleep(1)
    for rank in (0, 1):
        pid = int((tmp_path / f"pid{rank}").read_text())
        try:  # gone, or a zombie waiting to be reaped by whoever adopted it
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"rank {rank} (pid {pid}) still runs"
        except psutil.NoSuchProcess:
            pass


def test_zero3_single_process_restores_the_environment_and_clears_the_deepspeed_config(monkeypatch):
    from transformers.integrations import HfDeepSpeedConfig, is_deepspeed_zero3_enabled

    from agentrl_shared.smoke import zero3_single_process

    monkeypatch.setenv("RANK", "7")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with zero3_single_process():
        assert [os.environ[k] for k in ("RANK", "LOCAL_RANK", "ACCELERATE_USE_DEEPSPEED")] == ["0", "0", "true"]
        config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
        assert is_deepspeed_zero3_enabled()  # what a ZeRO-3 run leaves behind while its arguments live
    assert config is not None and not is_deepspeed_zero3_enabled()
    assert os.environ["RANK"] == "7" and "LOCAL_RANK" not in os.environ


# ------------------------------------------------------------------------------------------ paper-scale launches


def test_an_unfinished_run_resumes_from_its_last_checkpoint(tmp_path):
    from agentrl_shared.cli import latest_checkpoint, resume_args

    run = tmp_path / "paper" / "sdar" / "seed0_alfworld"
    assert latest_checkpoint(run) is None and resume_args(run) == []  # never started: from the beginning
    for name in ("checkpoint-20", "checkpoint-160", "checkpoint-80", "checkpoint-tmp"):
        (run / name).mkdir(parents=True)
    (run / "checkpoint-999").write_text("")  # a file, not a checkpoint
    assert latest_checkpoint(run) == run / "checkpoint-160"  # by step, not by name
    assert resume_args(run) == [f"trainer.resume_from_checkpoint={run / 'checkpoint-160'}"]
    (run / "results.json").write_text("{}")
    assert resume_args(run) == []  # finished: nothing to resume


def _no_subprocess(monkeypatch):
    import subprocess

    def fail(*args, **kwargs):
        raise AssertionError(f"launched {args}")

    monkeypatch.setattr(subprocess, "run", fail)


def test_dry_run_prints_the_launch_and_runs_nothing(monkeypatch, capsys):
    from agentrl_shared.cli import LaunchFlags, launch
    from agentrl_shared.config import LaunchConfig

    _no_subprocess(monkeypatch)
    launch("pkg", LaunchConfig(4), ["--config", "c", "--method", "m"], LaunchFlags(dry_run=True))
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("accelerate launch --config_file ") and "zero3.yaml" in line
    assert line.endswith("--num_processes 4 --num_machines 1 -m pkg.cli train --config c --method m")


def test_a_multi_machine_launch_needs_this_machines_rank(monkeypatch, capsys):
    import subprocess

    from agentrl_shared.cli import LaunchFlags, launch
    from agentrl_shared.config import LaunchConfig

    two = LaunchConfig(num_processes=16, num_machines=2)
    _no_subprocess(monkeypatch)
    launch("pkg", two, ["--config", "c"], LaunchFlags(dry_run=True))
    command, note = capsys.readouterr().out.splitlines()
    assert "--num_processes 16 --num_machines 2 -m pkg.cli" in command
    assert note.startswith("# runs on each of the 2 machines with --machine_rank 0..1 and --main_process_ip")
    with pytest.raises(ConfigError, match="--machine-rank R .0 to 1. and --main-process-ip"):
        launch("pkg", two, ["--config", "c"], LaunchFlags())
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda cmd: commands.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    launch("pkg", two, ["--config", "c"], LaunchFlags(machine_rank=1, main_process_ip="10.0.0.1"))
    (cmd,) = commands
    assert cmd[cmd.index("--num_machines") :][:6] == ["--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                                                      "10.0.0.1"]  # fmt: skip


def test_launch_size_reads_no_data_location_and_takes_launch_overrides(tmp_path, monkeypatch):
    from agentrl_shared.cli import launch_size

    monkeypatch.delenv("NO_SUCH_DATA", raising=False)
    config = tmp_path / "paper.yaml"
    config.write_text("env:\n  data_dir: ${NO_SUCH_DATA}/x\nlaunch:\n  num_processes: 16\n  num_machines: 2\n")
    assert (launch_size(str(config), "agentrl_shared").num_processes, launch_size(str(config), "agentrl_shared").num_machines) == (16, 2)  # fmt: skip
    assert launch_size(str(config), "agentrl_shared", ["trainer.seed=1", "launch.num_processes=8"]).num_processes == 8
    with pytest.raises(ConfigError, match="not a multiple of launch.num_machines"):
        launch_size(str(config), "agentrl_shared", ["launch.num_processes=3"])
    with pytest.raises(ConfigError, match="num_gpus"):
        launch_size(str(config), "agentrl_shared", ["launch.num_gpus=3"])


def test_dry_run_is_for_the_paper_scale(monkeypatch):
    from agentrl_shared.smoke import error_line

    def main(argv):
        from agentrl_shared.cli import launch_flags

        parser, subs = build_parser("pkg", "doc", "cpu_config")
        ns = parse_args(parser, subs, argv)
        run_command("pkg", lambda: launch_flags(ns))

    assert error_line(main, ["reproduce", "--dry-run"]) == (
        "pkg: --dry-run prints the paper-scale launch commands: use it with --scale paper."
    )
    main(["reproduce", "--scale", "paper", "--dry-run"])  # accepted


def test_method_switches_refuse_an_unknown_method_with_the_valid_names():
    from agentrl_shared.cli import method_switches
    from agentrl_shared.smoke import error_line

    methods = {"grpo": ["trainer.credit=grpo"], "rlsd": ["trainer.credit=rlsd"], "agentopsd": []}
    assert method_switches(methods, "run") == [] and method_switches(methods, "grpo") == ["trainer.credit=grpo"]

    def main(argv):
        parser, subs = build_parser("pkg", "doc", "cpu_config", list(methods))
        ns = parse_args(parser, subs, argv)
        run_command("pkg", lambda: method_switches(methods, ns.method))

    assert error_line(main, ["train", "--method", "rlds"]) == (
        "pkg: Unknown --method 'rlds'. Did you mean rlsd? Valid: run (the config as it is), grpo, rlsd, agentopsd."
    )


def test_launch_size_warning_counts_prompts_per_step(caplog):
    from types import SimpleNamespace

    from agentrl_shared.cli import warn_launch_size
    from agentrl_shared.config import LaunchConfig

    # VAD's paper sizes (a plain TRL GRPOTrainer): 2 x 48 per rank x 8 ranks = 96 prompts x 8 rollouts
    args = SimpleNamespace(per_device_train_batch_size=2, steps_per_generation=48, num_generations=8)
    trainer = SimpleNamespace(args=args, accelerator=SimpleNamespace(num_processes=4))
    cfg = {"_source": "paper.yaml", "launch": LaunchConfig(8)}
    with caplog.at_level(logging.WARNING):
        warn_launch_size(cfg, trainer)
        trainer.accelerator.num_processes = 8
        warn_launch_size(cfg, trainer)  # as sized: silent
    (record,) = caplog.records
    assert record.getMessage() == (
        "paper.yaml is sized for 8 processes and runs on 4: 48 prompts x 8 generations per step instead of 96 x 8."
    )


def test_run_parallel_runs_each_command_on_one_core_with_its_label(capsys):
    """Each run: one thread, pinned to one core of its own (where the OS pins), every line shown with its label; a
    failing run ends the plan with its exit status after the others finished."""
    import sys

    from agentrl_shared.cli import cpu_cores, run_parallel

    probe = "import os; print(os.environ['OMP_NUM_THREADS'], sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 'any')"
    run_parallel([(f"run{i}", [sys.executable, "-c", probe]) for i in range(3)], jobs=2)
    lines = sorted(line for line in capsys.readouterr().out.splitlines() if line.startswith("[run"))
    assert [line.split()[0] for line in lines] == ["[run0]", "[run1]", "[run2]"]
    assert all(line.split()[1] == "1" for line in lines)
    if hasattr(os, "sched_getaffinity"):
        assert all(line.split(" ", 2)[2] in {f"[{c}]" for c in cpu_cores()} for line in lines)
    with pytest.raises(SystemExit, match="bad exited with 3"):
        run_parallel(
            [("bad", [sys.executable, "-c", "raise SystemExit(3)"]), ("good", [sys.executable, "-c", "1"])], 2
        )


def test_cpu_precision_is_bf16_where_native_and_an_override_wins(monkeypatch):
    from agentrl_shared import cli

    monkeypatch.setattr(cli, "cpu_bf16_flags", lambda: ["avx512_bf16"])
    assert cli.cpu_precision([]) == ["trainer.bf16=true"]
    assert cli.cpu_precision(["trainer.bf16=false"]) == []  # fp32 on any machine
    monkeypatch.setattr(cli, "cpu_bf16_flags", lambda: [])
    assert cli.cpu_precision([]) == []
    monkeypatch.undo()
    assert set(cli.cpu_bf16_flags()) <= set(cli.CPU_BF16_FLAGS)  # this machine's, whatever it has
