"""The sliding-window judge with a scripted model: all pass, one fails, state carried across windows, malformed
output (repaired as the official, else retried, then a recorded failure), the two evaluation types without rubrics,
and the optional outcome check."""

import json

import pytest

from conftest import judge_all
from vitabench2.backends import ScriptedBackend
from vitabench2.judge import (
    EVALUATION_TYPES,
    SlidingWindowJudge,
    parse_no_rubric_output,
    parse_window_output,
    sliding_windows,
)
from vitabench2.tasks import load_tasks, sample_tasks_path


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
    assert "[9] user: message 8" in prompts[1] and "[8]" not in prompts[1]  # overlap of 2, numbered from 1
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


def write_call(call_id, args, name="create_delivery_order"):
    return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "name": name, "arguments": args}]}


def test_outcome_check_on_write_actions(subtask):
    """Official outcome evaluator: the last resolved WRITE call is judged against the overall rubrics next to the
    target entity; WRITE calls that resolve nowhere score 0; no WRITE call leaves the trajectory reward."""
    args = {"user_id": "U_SAMPLE_01", "store_id": "S_BURGER", "product_ids": ["P_BURGER"], "product_cnts": [1]}
    msgs = convo(2) + [write_call("c0", {**args, "store_id": "S_NOODLE"}), write_call("c1", args)]
    environment = json.loads(json.dumps(subtask.environment))  # undeclared fields never reach the outcome judge
    for store in environment["stores"].values():
        store.update(target_reason="UNDECLARED-REASON", category="UNDECLARED-CATEGORY")
    subtask = subtask.model_copy(update={"environment": environment})
    outcome_prompts = []

    def script(messages, tools):
        text = messages[-1]["content"]
        if "<current_rubrics>" in text:
            return judge_all()(messages, tools)
        outcome_prompts.append(text)
        acted_on = text.split("# The entity the assistant actually acted on")[1]
        return json.dumps({"rubric_results": [], "all_met": False, "action_reward": float("S_BURGER" not in acted_on)})

    res = SlidingWindowJudge(ScriptedBackend(script), outcome_reward=True).evaluate(subtask, msgs)
    assert res.outcome_reward == 0.0 and res.reward == 0.0  # min(trajectory 1, outcome 0): the LAST write is judged
    prompt = outcome_prompts[0]
    assert "Golden Burger Bar" in prompt and "distraction" not in prompt and "store_type" not in prompt
    assert "UNDECLARED" not in prompt
    target = prompt.split("# The correct target entity in the environment")[1].split("# The entity")[0]
    assert "S_NOODLE" in target  # the target entity is shown to the outcome judge
    for rubric in subtask.evaluation_criteria.overall_rubrics:
        assert rubric in prompt
    unresolved = SlidingWindowJudge(ScriptedBackend(script), outcome_reward=True).evaluate(
        subtask, convo(2) + [write_call("c2", {**args, "store_id": "S_NOWHERE"})]
    )
    assert unresolved.outcome_reward == 0.0 and unresolved.reward == 0.0 and len(outcome_prompts) == 1
    no_write = SlidingWindowJudge(ScriptedBackend(script), outcome_reward=True).evaluate(subtask, convo(2))
    assert no_write.outcome_reward is None and no_write.reward == 1.0  # no write call: trajectory reward stands


def test_judge_sees_time_and_instruction_only(subtask):
    """Official judge input: system time with weekday, an empty database, and the subtask instruction (not the hidden
    intention); tool calls shown as name(k='v'); the full trajectory option judges in one call."""
    st = subtask.model_copy(update={"user_intention": "SECRET-INTENTION"})
    prompts = []

    def script(messages, tools):
        prompts.append(messages[-1]["content"])
        return judge_all()(messages, tools)

    msgs = convo(2) + [write_call("c1", {"store_id": "S_BURGER"}, name="get_delivery_store_info")]
    SlidingWindowJudge(ScriptedBackend(script)).evaluate(st, msgs)
    assert '"system_time": "2025-06-10 11:30:00 (Tuesday)", "database": []' in prompts[0]
    assert st.instruction in prompts[0] and "SECRET-INTENTION" not in prompts[0]
    assert "[3] assistant: get_delivery_store_info(store_id='S_BURGER')" in prompts[0]
    for rule in ("order it themselves", "compromises", "message numbers [x]"):
        assert rule in prompts[0]
    prompts.clear()
    res = SlidingWindowJudge(ScriptedBackend(script), evaluation_type="trajectory_full_traj_rubric").evaluate(
        st, convo(25)
    )
    assert len(prompts) == 1 and "[25] user: message 24" in prompts[0] and res.reward == 1.0
    with pytest.raises(ValueError, match="Unknown evaluation type"):
        SlidingWindowJudge(ScriptedBackend(script), evaluation_type="trajectory_wo_rubric")


def test_judge_json_is_repaired_as_the_official():
    """Official `evaluator_extracter`: `repair_json` before `json.loads` (trailing commas, a cut-off list, Python
    literals); what no repair can read stays malformed."""
    cut = '```json\n[{"rubric_idx": "rubric_0", "justification": "ordered [3]", "meetExpectation": true},\n{"rubric_idx": '
    cut += '"rubric_1", "meetExpectation": false'
    assert parse_window_output(cut, 2) == {0: (True, "ordered [3]"), 1: (False, "")}
    trailing = '[{"rubric_idx": "rubric_0", "meetExpectation": true,},]'
    assert parse_window_output(trailing, 1) == {0: (True, "")}
    assert parse_no_rubric_output("{'memory': 'm', 'justification': 'j', 'meetExpectation': True}", True) == (
        True,
        "j",
        "m",
    )
    with pytest.raises(ValueError, match="no parseable JSON"):
        parse_window_output("I think it went well.", 1)


def test_evaluation_types_without_rubrics(subtask):
    """Official `trajectory_sliding_wo_rubric` / `trajectory_full_traj_wo_rubric`: the judge sees the instruction
    and the conversation but no rubric, returns one verdict (sliding: with a memory of earlier windows, carried into
    the next window's prompt, and the previous verdict); reward = that verdict."""
    from vitabench2.cli import EVALUATION_TYPES as CLI_TYPES

    assert CLI_TYPES == EVALUATION_TYPES
    prompts = []

    def script(messages, tools):
        text = messages[-1]["content"]
        prompts.append(text)
        window = int(text.split("You are evaluating window ")[1].split(" ")[0])
        return json.dumps(
            {"memory": f"MEMORY-AFTER-{window}", "justification": f"w{window}", "meetExpectation": window == 3}
        )

    res = SlidingWindowJudge(ScriptedBackend(script), evaluation_type="trajectory_sliding_wo_rubric").evaluate(
        subtask, convo(26)
    )
    assert len(prompts) == 3 and res.reward == 1.0 and res.rubric_states == [True] and res.justifications == ["w3"]
    for rubric in subtask.evaluation_criteria.rubrics():
        assert all(rubric not in p for p in prompts)  # no rubric reaches the judge
    assert subtask.instruction in prompts[0] and "<memory>\n\n</memory>" in prompts[0]
    assert (
        "MEMORY-AFTER-1" in prompts[1]
        and '"justification": "w1"' in prompts[1]
        and "[9] user: message 8" in prompts[1]
    )
    # a sliding reply without its memory field is malformed: retried, then recorded
    res = SlidingWindowJudge(
        ScriptedBackend(lambda m, t: '{"justification": "x", "meetExpectation": true}'),
        evaluation_type="trajectory_sliding_wo_rubric",
        max_retries=2,
    ).evaluate(subtask, convo(4))
    assert res.failed and res.judge_calls == 2 and "memory field" in res.failure_reason
    prompts.clear()
    res = SlidingWindowJudge(
        ScriptedBackend(
            lambda m, t: (
                prompts.append(m[-1]["content"]) or '[{"justification": "no order", "meetExpectation": false}]'
            )
        ),
        evaluation_type="trajectory_full_traj_wo_rubric",
    ).evaluate(subtask, convo(26))
    assert len(prompts) == 1 and "<trajectory_content>" in prompts[0] and "[26] assistant: message 25" in prompts[0]
    assert res.reward == 0.0 and res.rubric_states == [False] and res.justifications == ["no order"]
