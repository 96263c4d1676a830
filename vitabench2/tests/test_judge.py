"""The sliding-window judge with a scripted model: all pass, one fails, state carried across windows, malformed
output (retries, then a recorded failure), and the optional outcome check."""

import json

import pytest

from conftest import judge_all
from vitabench2.backends import ScriptedBackend
from vitabench2.judge import SlidingWindowJudge, parse_window_output, sliding_windows
from vitabench2.tasks import load_tasks, sample_tasks_path
from vitabench2.tools import Environment


@pytest.fixture
def subtask():
    return load_tasks(sample_tasks_path())[0].subtasks[0]  # 4 rubrics


def convo(n):
    msgs = [{"role": "system", "content": "sys"}]
    for i in range(n):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
    return msgs


def test_window_spans():
    assert sliding_windows(5) == [(0, 5)]
    assert sliding_windows(10) == [(0, 10)]
    assert sliding_windows(11) == [(0, 10), (8, 11)]
    assert sliding_windows(26) == [(0, 10), (8, 18), (16, 26)]
    assert sliding_windows(0) == []


def test_all_pass_and_one_fails(subtask):
    judge = SlidingWindowJudge(ScriptedBackend(judge_all()))
    res = judge.evaluate(subtask, convo(4))
    assert res.reward == 1.0 and res.reward_breakdown == 1.0 and res.judge_calls == 1 and not res.failed
    res = SlidingWindowJudge(ScriptedBackend(judge_all(fail_idx=2))).evaluate(subtask, convo(4))
    assert (
        res.reward == 0.0
        and res.reward_breakdown == pytest.approx(0.75)
        and res.rubric_states == [True, True, False, True]
    )


def test_states_carried_across_windows(subtask):
    prompts = []

    def script(messages, tools):
        prompts.append(messages[-1]["content"])
        if len(prompts) == 1:  # window 1 meets rubrics 0..3; window 2 mentions only rubric 1, overturning it
            return json.dumps([{"rubric_idx": f"rubric_{i}", "meetExpectation": True} for i in range(4)])
        return json.dumps([{"rubric_idx": "rubric_1", "justification": "overturned", "meetExpectation": False}])

    res = SlidingWindowJudge(ScriptedBackend(script)).evaluate(subtask, convo(12))
    assert len(prompts) == 2 and "window 2 of 2" in prompts[1]
    assert '"meetExpectation": true' in prompts[1]  # window 2 sees the carried states
    assert "[8] user: message 8" in prompts[1] and "[7]" not in prompts[1]  # overlap of 2 messages
    assert res.rubric_states == [True, False, True, True] and res.reward == 0.0


def test_malformed_output_retried_then_recorded(subtask):
    replies = iter(
        ["not json at all", '[{"rubric_idx": "rubric_0"}]']
        + [json.dumps([{"rubric_idx": f"rubric_{i}", "meetExpectation": True} for i in range(4)])]
    )
    res = SlidingWindowJudge(ScriptedBackend(lambda m, t: next(replies)), max_retries=3).evaluate(subtask, convo(4))
    assert res.reward == 1.0 and res.judge_calls == 3 and not res.failed  # recovered on the 3rd try
    res = SlidingWindowJudge(ScriptedBackend(lambda m, t: "I think it went well."), max_retries=2).evaluate(
        subtask, convo(4)
    )
    assert res.failed and res.reward == 0.0 and res.judge_calls == 2
    assert "window 1/1" in res.failure_reason and "no parseable JSON" in res.failure_reason
    with pytest.raises(ValueError, match="unknown rubric_idx"):
        parse_window_output('[{"rubric_idx": "rubric_9", "meetExpectation": true}]', 4)
    with pytest.raises(ValueError, match="true/false"):
        parse_window_output('[{"rubric_idx": "rubric_0", "meetExpectation": "maybe"}]', 4)


def test_outcome_check_on_write_actions(subtask):
    env = Environment(subtask.environment, subtask.domains)
    args = {
        "user_id": "U_SAMPLE_01",
        "store_id": "S_BURGER",
        "product_ids": ["P_BURGER"],
        "product_cnts": [1],
        "address": "Xixi Center",
        "dispatch_time": "2025-06-10 11:40:00",
    }
    result = env.call("create_delivery_order", args)
    msgs = convo(2) + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "create_delivery_order", "arguments": args}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "create_delivery_order", "content": result, "error": False},
    ]
    outcome_prompts = []

    def script(messages, tools):
        text = messages[-1]["content"]
        if "<current_rubrics>" in text:
            return judge_all()(messages, tools)
        outcome_prompts.append(text)
        return json.dumps({"justification": "burger is fried", "meetExpectation": "S_BURGER" not in text})

    res = SlidingWindowJudge(ScriptedBackend(script), outcome_reward=True).evaluate(subtask, msgs, env)
    assert res.outcome_reward == 0.0 and res.reward == 0.0  # min(trajectory 1, outcome 0)
    assert "Golden Burger Bar" in outcome_prompts[0] and "distraction" not in outcome_prompts[0]  # labels hidden
    no_write = SlidingWindowJudge(ScriptedBackend(script), outcome_reward=True).evaluate(subtask, convo(2), env)
    assert no_write.outcome_reward is None and no_write.reward == 1.0  # no write call: trajectory reward stands
