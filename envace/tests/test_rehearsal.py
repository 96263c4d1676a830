"""The two-role rollout with a scripted policy and the exact Qwen3 tokenizer/template: rows per generation, the
rehearsed text as prompt (never completion) of later caller rows, token-in token-out contexts, early termination,
parallel calls rehearsed one at a time, caps, and the caller-only baselines (real tools, external simulator)."""

import json

import pytest
from scripted import ScriptedPolicy
from test_reward import _Server
from transformers import AutoTokenizer

from agentrl_shared.models import tiny_qwen3
from envace.data import generate_tasks
from envace.rehearsal import ExternalSimulator, RehearsalCollector, trajectory_metrics
from envace.reward import RuleJudge


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(tiny_qwen3(), padding_side="left")


@pytest.fixture(scope="module")
def tasks():
    return [t for t in generate_tasks(30, seed=11) if len(t["user_turns"]) == 2][:3]


def collector(tok, mode="agent", **kw):
    return RehearsalCollector(tok, RuleJudge(), mode, max_completion_length=64, max_model_len=8192, **kw)


def test_gold_policy_with_rehearsal_gets_reward_one_and_rows_of_both_roles(tok, tasks):
    policy = ScriptedPolicy(tok, tasks)
    trajs = collector(tok).collect(tasks, [0, 0, 1], policy)
    for t in trajs:
        assert t.stop_reason == "done" and t.reward == pytest.approx(1.0) and t.turn_scores == [1.0, 1.0]
        # per 2-turn episode: call, rehearsal, reply per turn
        assert [r.role for r in t.rows] == ["caller", "simulator", "caller"] * 2
        assert [r.turn_idx for r in t.rows] == [0, 0, 0, 1, 1, 1]
    t = trajs[0]
    caller_rows = [r for r in t.rows if r.role == "caller"]
    sim_row = t.rows[1]
    rehearsed = json.loads(sim_row.completion_text.split("<execution_result>\n")[1].split("\n</execution_result>")[0])
    # token-in token-out: the next caller prompt extends the previous prompt + completion
    first, second = caller_rows[0], caller_rows[1]
    assert (
        second.prompt_ids[: len(first.prompt_ids) + len(first.completion_ids)]
        == first.prompt_ids + first.completion_ids
    )
    # the rehearsed response is in the later caller prompt, not in any caller completion
    later_prompt = tok.decode(second.prompt_ids, skip_special_tokens=False)
    assert json.dumps(rehearsed) in later_prompt
    assert all(json.dumps(rehearsed) not in r.completion_text for r in caller_rows)
    # the context equals a fresh rendering of the conversation up to the first turn's end
    assert later_prompt.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert "Candidate tools" in tok.decode(sim_row.prompt_ids) and "RL model's latest response" in tok.decode(
        sim_row.prompt_ids
    )
    m = trajectory_metrics(trajs)
    assert m["envace/success_rate"] == 1.0 and m["envace/simulator_rows"] == 6 and m["envace/stop/done"] == 1.0


def test_wrong_rehearsal_costs_reward_through_the_caller(tok, tasks):
    trajs = collector(tok).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks, wrong_rehearsal=True))
    (t,) = trajs
    # call item passes, the reply reports the (wrong) rehearsed value: 0.5 per turn
    assert t.turn_scores == [0.5, 0.5] and t.reward == pytest.approx(0.5)


def test_malformed_caller_output_ends_the_episode(tok, tasks):
    bad = '<think>\n</think>\n<tool_call>{"name": "x", "arguments": {}}</tool_call>'  # newlines missing
    policy = ScriptedPolicy(tok, tasks, caller_text=bad)
    (t,) = collector(tok).collect(tasks[:1], [0], policy)
    assert t.stop_reason == "malformed_tool_call" and t.reward == 0.0 and len(t.rows) == 1
    assert not t.rows[0].is_action_valid and "error_tool_call" in t.messages[-1]["content"]


def test_rehearsal_error_object_ends_the_episode(tok, tasks):
    call = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nowhere"}}\n</tool_call>'
    policy = ScriptedPolicy(tok, tasks, caller_text=call)  # the scripted rehearsal rejects unknown calls
    (t,) = collector(tok).collect(tasks[:1], [0], policy)
    assert t.stop_reason == "tool_error" and t.reward == 0.0 and [r.role for r in t.rows] == ["caller", "simulator"]
    assert t.tool_failure


def test_required_item_failure_ends_the_episode_after_the_turn(tok, tasks):
    policy = ScriptedPolicy(tok, tasks, caller_text="<think>\n</think>\n\nNo idea.")
    (t,) = collector(tok).collect(tasks[:1], [0], policy)
    assert t.stop_reason == "required_item_failed" and t.turn_scores == [0.0] and len(t.rows) == 1


def test_parallel_calls_are_rehearsed_one_at_a_time_and_capped(tok, tasks):
    (t,) = collector(tok).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks, parallel=True))
    assert [r.role for r in t.rows][:4] == ["caller", "simulator", "simulator", "caller"]
    assert t.reward == pytest.approx(1.0)
    (t,) = collector(tok, max_parallel_calls=1).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks, parallel=True))
    assert [r.role for r in t.rows][:3] == ["caller", "simulator", "caller"] and t.dropped_calls == 2


def test_caps_end_episodes(tok, tasks):
    (t,) = collector(tok, max_steps=2).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks))
    assert t.stop_reason == "step_limit" and len(t.rows) == 2 and t.reward == 0.0
    (t,) = collector(tok, max_assistant_turns=1).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks))
    assert t.stop_reason == "turn_limit" and len(t.rows) == 2
    # the first caller prompt + max_completion_length just fits; after the call and its rehearsal it does not
    initial = len(collector(tok)._initial_ids(tasks[0])[1])
    c = RehearsalCollector(tok, RuleJudge(), "agent", max_completion_length=64, max_model_len=initial + 65)
    (t,) = c.collect(tasks[:1], [0], ScriptedPolicy(tok, tasks))
    assert t.stop_reason == "length_exceeded" and [r.role for r in t.rows] == ["caller", "simulator"]


def test_caller_only_with_real_tools_has_no_rehearsal_rows(tok, tasks):
    policy = ScriptedPolicy(tok, tasks)
    trajs = collector(tok, "real").collect(tasks, [0, 1, 2], policy)
    assert all(t.reward == pytest.approx(1.0) for t in trajs) and policy.calls["simulator"] == 0
    assert all(r.role == "caller" for t in trajs for r in t.rows)


def test_caller_only_with_an_external_simulator_endpoint(tok, tasks):
    task = tasks[0]
    gold = [task["reference_messages"][2]["content"], task["reference_messages"][6]["content"]]  # one per turn
    server = _Server([f"\n<execution_result>\n{g}\n</execution_result>" for g in gold])
    try:
        ext = ExternalSimulator(server.url, "gpt-4.1")
        (t,) = collector(tok, "external", external_simulator=ext).collect([task], [0], ScriptedPolicy(tok, tasks))
        assert all(r.role == "caller" for r in t.rows) and t.reward == pytest.approx(1.0) and len(server.requests) == 2
        assert server.requests[0]["messages"][0]["role"] == "system" and server.requests[0]["model"] == "gpt-4.1"
    finally:
        server.close()
