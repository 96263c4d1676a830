"""`sdar <command> --help` lists exactly the flags that command honours; a bad config key ends in one line."""

import pytest

from agentrl_shared.smoke import error_line, help_flags
from sdar.cli import main


FLAGS = {
    "train": {"--config", "--output", "--method"},
    "eval": {"--config", "--output", "--method"},
    "reproduce": {
        "--scale",
        "--seeds",
        "--output",
        "--methods",
        "--configs",
        "--jobs",
        "--dry-run",
        "--machine-rank",
        "--main-process-ip",
    },
    "report": {"--runs", "--readme", "--compare"},
}


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_help_of_each_command_lists_only_its_flags(command):
    assert help_flags(main, command) == FLAGS[command]


def test_bad_config_key_exits_with_one_line():
    message = error_line(main, ["train", "--config", "smoke", "trainer.no_such_key=1"])
    assert message.startswith("sdar: ") and "no_such_key" in message and "Valid" in message
