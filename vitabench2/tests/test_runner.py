"""Orchestrator end to end with scripted back ends: memory updated between subtasks, system prompt contents,
terminations, incremental results and resume after an interrupted run; `view` and `report` on the result."""

import json

import pytest

from conftest import agent_one_call, judge_all, user_stop
from vitabench2.backends import ScriptedBackend
from vitabench2.cli import main
from vitabench2.runner import RunConfig, Runner, read_records


def make_runner(tmp_path, agent=agent_one_call, memory_type="full_context", **over):
    over.setdefault("max_concurrency", 2)
    config = RunConfig(output=str(tmp_path / "run"), memory_type=memory_type, **over)
    backends = [ScriptedBackend(agent), ScriptedBackend(user_stop), ScriptedBackend(judge_all())]
    return Runner(config, *backends), backends


def test_run_sample_records_and_memory(tmp_path):
    runner, (agent, user, judge) = make_runner(tmp_path, num_trials=2)
    summary = runner.run()
    records = read_records(runner.results_path)
    assert len(records) == 5 * 2 and summary["metrics"]["avg@2"] == 1.0 and summary["metrics"]["pass^2"] == 1.0
    by_key = {(r["subtask_id"], r["trial"]): r for r in records}
    first, third = by_key[("U_SAMPLE_01_T1", 0)], by_key[("U_SAMPLE_01_T3", 0)]
    # memory grows with the interactions revealed before each subtask, and is in the system prompt
    assert (
        "coriander" in first["memory_read"] and "spa" in third["memory_read"] and "gym matters" in third["memory_read"]
    )
    assert (
        "## User Preference Memory" in third["messages"][0]["content"]
        and "gym matters" in third["messages"][0]["content"]
    )
    # official trajectory: the agent's greeting, then the instruction verbatim as user turn 1
    assert first["messages"][1] == {"role": "assistant", "content": "Hello, how can I help you?"}
    assert first["messages"][2] == {"role": "user", "content": "Order me some lunch to the office."}
    assert first["num_steps"] == 4  # user, agent tool call, tool results, agent stop: every step counts
    assert (
        first["termination"] == "agent_stop"
        and first["tokens"]["agent_completion"] > 0
        and first["tokens"]["judge_prompt"] > 0
    )
    proactive = by_key[("U_SAMPLE_01_T2", 0)]["messages"][0]["content"]
    assert "missing" in proactive and "missing" not in first["messages"][0]["content"]  # proactive policy variant
    assert "2025-06-10 11:30:00 (Tuesday)" in first["messages"][0]["content"]  # clock + weekday
    assert summary["usage_this_session"]["agent"]["calls"] == len(agent.calls)
    assert all(c["latency_s"] >= 0 for c in agent.calls)


def test_premature_terminations_score_zero(tmp_path):
    def chatty(messages, tools):
        return "Let me think about it."  # never stops; the user script stops on turn 2 unless steps run out

    runner, (_, _, judge) = make_runner(tmp_path, agent=chatty, max_steps=2, users=["U_SAMPLE_02"])
    runner.run()
    recs = read_records(runner.results_path)
    assert {r["termination"] for r in recs} == {"max_steps"} and all(r["reward"] == 0.0 for r in recs)
    assert judge.calls == []  # premature termination: judge not called

    def bad_tools(messages, tools):
        return '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'

    # official default: tool errors never end a conversation (the error counter is never incremented)
    runner, _ = make_runner(tmp_path / "b", agent=bad_tools, max_steps=21, users=["U_SAMPLE_02"])
    runner.run()
    recs = read_records(runner.results_path)
    assert {r["termination"] for r in recs} == {"max_steps"} and recs[0]["num_errors"] == 10
    runner, _ = make_runner(tmp_path / "b2", agent=bad_tools, max_errors=3, users=["U_SAMPLE_02"])  # opt-in limit
    runner.run()
    recs = read_records(runner.results_path)
    assert {r["termination"] for r in recs} == {"too_many_errors"} and recs[0]["num_errors"] == 3

    # an empty agent reply is retried 3 times, then the conversation ends as invalid
    runner, (agent, _, _) = make_runner(tmp_path / "c", agent=lambda m, t: "", users=["U_SAMPLE_02"])
    runner.run()
    assert {r["termination"] for r in read_records(runner.results_path)} == {"invalid_agent_message"}
    assert len(agent.calls) == 3 * 2  # 2 subtasks
    assert RunConfig(output="x").max_steps == 300  # official default limit


def test_resume_after_interruption(tmp_path):
    calls = {"n": 0}

    def flaky(messages, tools):
        calls["n"] += 1
        if calls["n"] == 5:  # dies in the middle of the 3rd subtask (2 agent calls per subtask)
            raise KeyboardInterrupt("simulated crash")
        return agent_one_call(messages, tools)

    config = dict(num_trials=1, max_concurrency=1)
    runner, _ = make_runner(tmp_path, agent=flaky, **config)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    done_before = read_records(runner.results_path)
    # user 1's first two; the worker may run user 2's subtasks before the main thread sees the crash
    assert len(done_before) in (2, 3, 4)
    with open(runner.results_path, "a") as f:
        f.write('{"user_id": "U_SAMPLE_01", "truncated')  # a half-written line from the crash
    runner2, (agent2, _, _) = make_runner(tmp_path, **config)
    summary = runner2.run()
    records = read_records(runner2.results_path)
    keys = [(r["user_id"], r["subtask_id"], r["trial"]) for r in records]
    assert len(keys) == len(set(keys)) == 5  # nothing redone, nothing lost
    assert records[: len(done_before)] == done_before  # finished lines untouched
    assert len(agent2.calls) == (5 - len(done_before)) * 2  # only the unfinished subtasks ran
    resumed = next(r for r in records if r["subtask_id"] == "U_SAMPLE_01_T3")
    assert "gym matters" in resumed["memory_read"] and "coriander" in resumed["memory_read"]  # memory replayed
    assert summary["metrics"]["num_units"] == 5
    runner3, (agent3, _, _) = make_runner(tmp_path, **config)
    runner3.run()
    assert agent3.calls == []  # complete run: nothing to do
    runner4, _ = make_runner(tmp_path, memory_type="rag", **config)
    with pytest.raises(ValueError, match="different settings.*memory_type"):
        runner4.run()


def test_view_and_report(tmp_path, capsys):
    runner, _ = make_runner(tmp_path)
    runner.run()
    run_dir = str(tmp_path / "run")
    main(["view", run_dir, "--subtask", "U_SAMPLE_02_T1"])
    out = capsys.readouterr().out
    assert "Get me a coffee." in out and "get_user_all_orders" in out and out.count("=== user") == 1
    readme = tmp_path / "README.md"
    readme.write_text("head\n<!-- vitabench2:report:start -->\nOLD-SECTION\n<!-- vitabench2:report:end -->\ntail\n")
    main(["report", run_dir, "--results", str(tmp_path / "rep"), "--readme", str(readme)])
    text = readme.read_text()
    assert "OLD-SECTION" not in text and text.startswith("head") and text.endswith("tail\n")
    assert "| transformers:smollm2-135m | Full Context | 5 x 1 | 1.000 | 1.000 | 1.000 | – |" in text  # no paper row
    # the paper's tables, generated from the leaderboard file, beside ours
    assert "### Paper (VitaBench 2.0 repo README leaderboard" in text and "| DeepSeek-V4-Pro | 0.456 |" in text
    assert "| Claude-Opus-4.6 |" in text  # the thinking table too
    assert (tmp_path / "rep" / "memory_comparison.png").stat().st_size > 1000
    assert (tmp_path / "rep" / "task_index_decline.png").exists()
    assert (tmp_path / "rep" / "run" / "results.jsonl").read_text() == (tmp_path / "run" / "results.jsonl").read_text()
    main(["report", "--results", str(tmp_path / "rep")])  # regenerate from the copies alone
    assert "Full Context" in (tmp_path / "rep" / "report.md").read_text()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["judge_failures"] == 0


def test_judge_failures_are_judged_again_on_resume(tmp_path):
    config = RunConfig(output=str(tmp_path / "run"), memory_type="null", users=["U_SAMPLE_02"])
    bad_judge = ScriptedBackend(lambda m, t: "no verdict today")
    Runner(config, ScriptedBackend(agent_one_call), ScriptedBackend(user_stop), bad_judge).run()
    first = read_records(tmp_path / "run" / "results.jsonl")
    assert len(first) == 2 and all(r["judge_failed"] and r["reward"] == 0.0 for r in first)
    agent = ScriptedBackend(agent_one_call)
    Runner(config, agent, ScriptedBackend(user_stop), ScriptedBackend(judge_all())).run()
    again = read_records(tmp_path / "run" / "results.jsonl")
    assert len(again) == 2 and all(not r["judge_failed"] and r["reward"] == 1.0 and r["rejudged"] == 1 for r in again)
    assert agent.calls == []  # conversations kept, only the judge ran
    assert [r["messages"] for r in again] == [r["messages"] for r in first]


def test_subtask_selection_keeps_earlier_interactions_in_memory(tmp_path):
    """`--subtasks` picks which subtasks run; the memory still sees every earlier subtask's interactions."""
    runner, (agent, _, _) = make_runner(tmp_path, subtasks=["U_SAMPLE_01_T3"])
    summary = runner.run()
    (record,) = read_records(runner.results_path)
    assert record["subtask_id"] == "U_SAMPLE_01_T3" and record["task_index"] == 2
    assert "coriander" in record["memory_read"] and summary["num_records"] == 1


def test_paper_row_matches_the_agent_model_and_memory():
    from vitabench2.report import memory_table, paper_row

    served = {"agent": "openai:deepseek-ai/DeepSeek-V4-Pro@http://localhost:8000/v1", "memory_type": "rewrite"}
    assert paper_row(served) == ("DeepSeek-V4-Pro (non-thinking)", [0.427, 0.658, 0.207])
    assert paper_row({**served, "enable_thinking": True}) == ("DeepSeek-V4-Pro (thinking)", [0.449, 0.656, 0.255])
    assert paper_row({**served, "memory_type": "null"}) is None  # not on the leaderboard
    assert paper_row({**served, "agent": "openai:my-model@http://x/v1"}) is None
    run = {"config": {**served, "num_trials": 4}, "metrics": {"k": 4, "num_units": 3}, "records": []}
    assert "0.427 / 0.658 / 0.207 (DeepSeek-V4-Pro (non-thinking))" in memory_table([run])
