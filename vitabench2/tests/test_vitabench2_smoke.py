"""SmolLM2-135M in process as agent, user and judge: a handful of generations on one subtask (default suite), and
the full offline sample run through the CLI (`slow`)."""

import json

import pytest

from agentrl_shared.models import smollm2_135m
from vitabench2.backends import TransformersBackend, parse_tool_calls
from vitabench2.cli import main
from vitabench2.runner import RunConfig, Runner, read_records


def test_parse_tool_calls():
    text, calls = parse_tool_calls(
        'ok <tool_call>{"name": "weather", "arguments": {"address": "x"}}</tool_call> <tool_call>{bad</tool_call>'
    )
    assert [c["name"] for c in calls] == ["weather"] and calls[0]["arguments"] == {"address": "x"}
    assert text.startswith("ok") and "{bad" in text


def test_smollm2_one_subtask_in_process(tmp_path):
    backend = TransformersBackend(str(smollm2_135m()), max_new_tokens=24)
    config = RunConfig(
        output=str(tmp_path / "run"),
        memory_type="full_context",
        subtasks=["U_SAMPLE_02_T1"],
        max_steps=3,
        judge_retries=1,
        max_concurrency=1,
    )
    summary = Runner(config, backend, backend, backend).run()
    (rec,) = read_records(tmp_path / "run" / "results.jsonl")
    assert rec["messages"][2]["content"] == "Get me a coffee."  # after the greeting
    assert rec["tokens"]["agent_prompt"] > 200 and rec["tokens"]["agent_completion"] > 0
    assert rec["reward"] in (0.0, 1.0) and rec["termination"] in (
        "max_steps",
        "agent_stop",
        "user_stop",
        "invalid_agent_message",
        "too_many_errors",
    )
    assert 1 <= len(backend.calls) <= 4 and summary["num_records"] == 1
    assert all(c["latency_s"] > 0 for c in backend.calls)


@pytest.mark.slow
def test_smollm2_sample_end_to_end_cli(tmp_path):
    out = tmp_path / "run"
    main(
        [
            "run",
            "--agent",
            "transformers:smollm2-135m",
            "--memory-type",
            "rag",
            "--trials",
            "1",
            "--max-steps",
            "6",
            "--max-new-tokens",
            "64",
            "--concurrency",
            "1",
            "--output",
            str(out),
        ]
    )
    records = read_records(out / "results.jsonl")
    assert len(records) == 5
    main(["report", str(out), "--results", str(tmp_path / "rep")])
    assert (tmp_path / "rep" / "report.md").read_text().count("RAG Memory") == 1
    assert json.loads((out / "summary.json").read_text())["metrics"]["num_units"] == 5


def test_smollm2_as_in_process_judge(tmp_path):
    """SmolLM2 judges a short sample conversation: a parsed verdict, or retries ending in a recorded failure."""
    from vitabench2.judge import SlidingWindowJudge
    from vitabench2.tasks import load_tasks, sample_tasks_path

    subtask = load_tasks(sample_tasks_path())[0].subtasks[0]
    messages = [
        {"role": "system", "content": "You are a delivery assistant."},
        {"role": "user", "content": "Get me a coffee."},
        {"role": "assistant", "content": "I ordered an oat latte from Oat Lab Coffee for you."},
    ]
    backend = TransformersBackend(str(smollm2_135m()), max_new_tokens=32, max_input_tokens=1024)
    result = SlidingWindowJudge(backend, max_retries=2).evaluate(subtask, messages)
    assert 1 <= result.judge_calls <= 2 and len(backend.calls) == result.judge_calls
    if result.failed:
        assert result.reward == 0.0 and "window 1/1" in result.failure_reason
    else:
        assert result.reward in (0.0, 1.0)
