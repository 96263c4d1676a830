"""Shared fixtures: offline env, scripted back ends for agent/user/judge, the real-data root."""

import json
import os
from pathlib import Path

import pytest

from agentrl_shared.offline import set_offline_env


set_offline_env()

from vitabench2.backends import ScriptedBackend  # noqa: E402


STOP = "###STOP###"


def real_data_root() -> Path:
    default = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
    return Path(os.environ.get("AGENTRL_DATA", default)) / "vitabench"


@pytest.fixture
def vitabench_root() -> Path:
    root = real_data_root()
    if not root.exists() or not any(root.rglob("tasks*.json")):
        pytest.skip(f"no VitaBench data under {root} (set AGENTRL_DATA)")
    return root


def judge_all(meet: bool = True, fail_idx: int | None = None):
    """Judge script answering every rubric in the prompt; rubric `fail_idx` gets false."""

    def script(messages, tools):
        n = messages[-1]["content"].split("<current_rubrics>")[-1].split("</current_rubrics>")[0].count('"rubric_idx"')
        return (
            "```json\n"
            + json.dumps(
                [
                    {
                        "rubric_idx": f"rubric_{i}",
                        "rubric": "r",
                        "justification": "j",
                        "meetExpectation": meet and i != fail_idx,
                    }
                    for i in range(n)
                ]
            )
            + "\n```"
        )

    return script


def agent_one_call(messages, tools):
    """Calls one general tool, then replies with the stop token."""
    if messages[-1]["role"] == "tool":
        return f"I have checked your orders. {STOP}"
    return '<tool_call>{"name": "get_user_all_orders", "arguments": {}}</tool_call>'


def user_stop(messages, tools):
    return f"Fine. {STOP}"


@pytest.fixture
def scripted():
    return {
        "agent": ScriptedBackend(agent_one_call),
        "user": ScriptedBackend(user_stop),
        "judge": ScriptedBackend(judge_all()),
    }
