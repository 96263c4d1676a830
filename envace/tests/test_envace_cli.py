"""`envace <command> --help` lists exactly the flags that command honours; a bad config key ends in one line."""

import re

import pytest

from envace.cli import main


FLAGS = {
    "train": {"--config", "--output", "--method"},
    "eval": {"--config", "--output", "--method", "--tts"},
    "reproduce": {"--scale", "--seeds", "--output"},
    "report": {"--runs", "--readme"},
}


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_help_of_each_command_lists_only_its_flags(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out)) - {"--help"} == FLAGS[command]


def test_bad_config_key_exits_with_one_line():
    with pytest.raises(SystemExit) as exc:
        main(["train", "--config", "smoke", "trainer.no_such_key=1"])
    message = exc.value.code
    assert isinstance(message, str) and message.startswith("envace: ") and "\n" not in message
    assert "no_such_key" in message and "Valid" in message
