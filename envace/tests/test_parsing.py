"""Strict parsers of the two roles and the rehearsal prompt (official tool_parser.py, tool_simulator_agent.py,
simulate_core/_builders.py): good, malformed and error-object cases."""

import json

import pytest

from envace.data import generate_tasks
from envace.parsing import (
    ToolCall,
    parse_execution_result,
    parse_tool_calls,
    rehearsal_messages,
    serialize_history,
    visible_reply,
)


def block(obj) -> str:
    return f"\n<tool_call>\n{json.dumps(obj)}\n</tool_call>"


def test_caller_good_single_and_parallel_calls():
    text = "<think>\nneed weather\n</think>" + block({"name": "get_weather", "arguments": {"city": "Oslo"}})
    calls, err = parse_tool_calls(text)
    assert err is None and calls == [ToolCall("get_weather", {"city": "Oslo"})]
    two = block({"name": "a", "arguments": {}}) + block(
        [{"name": "b", "parameters": {"x": 1}}, {"name": "c", "arguments": '{"y": 2}'}]
    )
    calls, err = parse_tool_calls(two)
    assert err is None and [c.name for c in calls] == ["a", "b", "c"] and calls[2].arguments == {"y": 2}


def test_caller_no_tool_call_is_a_final_answer():
    assert parse_tool_calls("The temperature is 21.") == ([], None)


@pytest.mark.parametrize(
    "text, code",
    [
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call>', "NO_TOOL_CALL_FOUND"),  # newlines missing
        ("\n<tool_call>\n{name: a}\n</tool_call>", "JSON_DECODE_ERROR"),
        (block({"name": "a"}), "NO_ARGUMENTS"),
        (block({"name": " ", "arguments": {}}), "INVALID_TOOL_NAME"),
        (block({"name": "a", "arguments": {}}) + "\n<tool_call>\n{bad\n</tool_call>", "JSON_DECODE_ERROR"),
    ],
)
def test_caller_malformed_blocks(text, code):
    calls, err = parse_tool_calls(text)
    assert calls == [] and err["code"] == code and "error_tool_call" in err


def test_execution_result_good():
    content, is_err = parse_execution_result(
        '<think>\nx\n</think>\n<execution_result>\n{"temp": 3}\n</execution_result>'
    )
    assert not is_err and json.loads(content) == {"temp": 3}
    content, is_err = parse_execution_result("\n<execution_result>\n[]\n</execution_result>")
    assert not is_err and json.loads(content) == []


@pytest.mark.parametrize(
    "text, code",
    [
        ("", "EMPTY_SIMULATOR_OUTPUT"),
        ("<think>only thinking</think>", "EMPTY_SIMULATOR_OUTPUT"),
        ('{"temp": 3}', "NO_EXECUTION_RESULT_TAG_FOUND"),
        ('<execution_result>{"temp": 3}</execution_result>', "EXECUTION_RESULT_TAG_MALFORMED"),
        ("\n<execution_result>\n{temp: 3}\n</execution_result>", "SIMULATOR_JSON_DECODE_ERROR"),
        ("\n<execution_result>\n{}\n</execution_result>", "INVALID_EXECUTION_RESULT_TYPE"),
        ('\n<execution_result>\n"text"\n</execution_result>', "INVALID_EXECUTION_RESULT_TYPE"),
    ],
)
def test_execution_result_malformed(text, code):
    content, is_err = parse_execution_result(text)
    assert is_err and json.loads(content)["error_tool_call"]["code"] == code


def test_execution_result_error_object_ends_the_episode():
    text = '\n<execution_result>\n{"error_tool_call": {"code": "TOOL_NOT_AVAILABLE", "message": "no"}}\n</execution_result>'
    content, is_err = parse_execution_result(text)
    assert is_err and json.loads(content)["error_tool_call"]["code"] == "TOOL_NOT_AVAILABLE"


def test_rehearsal_prompt_sections_in_official_order():
    task = generate_tasks(1, seed=3)[0]
    history = task["reference_messages"][:2]
    call = ToolCall(task["reference_messages"][1]["tool_calls"][0]["function"]["name"], {"k": 1})
    system, user = rehearsal_messages(task, history, "RAW CALLER TEXT", call)
    assert system["role"] == "system" and "<execution_result>" in system["content"]
    for code in ("INVALID_TOOL_CALL_FORMAT", "TOOL_NOT_AVAILABLE", "INVALID_PARAMETERS"):
        assert code in system["content"]
    text = user["content"]
    marks = [
        "Candidate tools",
        "Previous tool calls and results (few-shot):",
        "Current conversation history:",
        "RL model's latest response:\nRAW CALLER TEXT",
        f"- name: {call.name}",
        '{\n"k": 1\n}',
    ]
    positions = [text.index(m) for m in marks]
    assert positions == sorted(positions) and text.endswith("\n\n/think")
    gt_args, gt_response = next(iter(task["tool_call_response_map"].values()))[0]
    assert json.dumps(gt_response, ensure_ascii=True, indent=0) in text  # ground-truth few-shot
    assert not rehearsal_messages(task, history, "x", call, think=False)[1]["content"].endswith("/think")
    empty = dict(task, tool_call_response_map={})
    assert "(few-shot): <unavailable>" in rehearsal_messages(empty, history, "x", call)[1]["content"]


def test_history_and_visible_reply():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "name": "f", "content": '{"r": 2}'},
    ]
    text = serialize_history(msgs)
    assert "sys" not in text and text.startswith("User: hi") and 'Tool[f]: {"r": 2}' in text
    assert '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>' in text
    assert visible_reply("<think>\nhmm 9\n</think>\n\nIt is 21.") == "It is 21."
