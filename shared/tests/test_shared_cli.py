"""The shared command-line skeleton: subcommands and their flags, key=value overrides anywhere, finished runs skipped,
one-line configuration errors, one log file per run."""

import logging
import os

import pytest

from agentrl_shared.cli import (
    RunLogHandler,
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


def test_configuration_errors_end_in_one_line_without_traceback():
    def bad():
        raise ConfigError("Unknown key 'lr' in override 'lr=1'.\nValid keys: learning_rate.")

    with pytest.raises(SystemExit) as exc:
        run_command("pkg", bad)
    assert exc.value.code == "pkg: Unknown key 'lr' in override 'lr=1'. Valid keys: learning_rate."
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

    assert help_flags(main, "reproduce") == {"--scale", "--seeds", "--output"}
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
