"""The two-role rollout with a scripted policy and the exact Qwen3 tokenizer/template: rows per generation, the
rehearsed text as prompt (never completion) of later caller rows, token-in token-out contexts, early termination,
parallel calls rehearsed one at a time, caps, and the caller-only baselines (real tools, external simulator)."""

import json

import pytest
from scripted import ScriptedPolicy, parse_chat
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


def test_rehearsal_prompt_golden_structure_on_the_second_turn(tok, tasks):
    """The rehearsal prompt of the second turn's call, as the collector builds it (official validation-mode
    simulator, `build_validation_user_prompt` with the payload of `envs.py::_build_info`): the system prompt carries
    the three checks with their error codes, the reuse rule for similar arguments and the output rules; the user
    prompt has the five sections in order, the first turn's call exactly once in the history (the assistant message
    keeps the text before its call block, the call comes from `tool_calls`), the latest caller response verbatim,
    and the whole schema of the current tool, description included."""
    policy = ScriptedPolicy(tok, tasks[:1])
    prompts = []

    def generate(prompt_ids):
        prompts.extend(tok.decode(p) for p in prompt_ids)
        return policy(prompt_ids)

    (t,) = collector(tok).collect(tasks[:1], [0], generate)
    assert t.stop_reason == "done"
    rehearsals = [p for p in prompts if "RL model's latest response:" in p]
    assert len(rehearsals) == 2  # one call per turn
    (system, user), _ = parse_chat(rehearsals[1])[:2], None
    assert system[0] == "system" and user[0] == "user"
    for rule in ("INVALID_TOOL_CALL_FORMAT", "TOOL_NOT_AVAILABLE", "INVALID_PARAMETERS", "similar arguments",
                 "<execution_result>", "non-empty object or an array", "no markdown"):  # fmt: skip
        assert rule in system[1]
    text = user[1]
    sections = ["Candidate tools (whitelist for this sample):\n", "Previous tool calls and results (few-shot):\n",
                "Current conversation history:\n", "RL model's latest response:\n", "Current tool to simulate:\n",
                "- input schema (JSON Schema):\n", "- arguments (JSON, parsed from caller's tool_call):\n"]  # fmt: skip
    positions = [text.index(s) for s in sections]
    assert positions == sorted(positions) and text.endswith("\n\n/think")
    history = text[positions[2] : positions[3]]
    first_call = t.messages[1]["tool_calls"][0]["function"]
    assert history.count("<tool_call>") == 1 and history.count(f'"name": "{first_call["name"]}"') == 1
    assert t.task["user_turns"][1] in history
    latest = text[positions[3] : positions[4]]
    assert latest.count("<tool_call>") == 1 and latest.startswith("RL model's latest response:\n<think>")
    name = t.messages[-3]["tool_calls"][0]["function"]["name"]
    tool = next(x for x in t.task["tools"] if x["function"]["name"] == name)
    schema = text[positions[5] : positions[6]]
    assert json.loads(schema.split("\n", 1)[1]) == tool  # the whole tool: type, name, description, parameters
    assert tool["function"]["description"] in schema


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
    # the assistant-turn cap is checked when a turn ends (official): the first turn (2 assistant turns) is finished
    # and judged, then the episode ends
    (t,) = collector(tok, max_assistant_turns=1).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks))
    assert t.stop_reason == "turn_limit" and [r.role for r in t.rows] == ["caller", "simulator", "caller"]
    assert t.turn_scores == [1.0]
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


def test_caller_only_with_an_external_simulator_endpoint(tok, tasks, monkeypatch):
    """Official httpx mode: the fallback instruction, the single-call prompt (few-shot, name, whole schema,
    arguments; no history), T 0.6 / top-p 0.8 / 8000 tokens, the {analysis, execution_result} response format, the
    key of TOOL_API_KEY; the tool message is the execution_result."""
    task = tasks[0]
    gold = [json.loads(task["reference_messages"][i]["content"]) for i in (2, 6)]  # one per turn
    server = _Server([json.dumps({"analysis": "lookup", "execution_result": g}) for g in gold])
    try:
        ext = ExternalSimulator(server.url, "gpt-4.1", api_key="sk-tool")
        (t,) = collector(tok, "external", external_simulator=ext).collect([task], [0], ScriptedPolicy(tok, tasks))
        assert all(r.role == "caller" for r in t.rows) and t.reward == pytest.approx(1.0) and len(server.requests) == 2
        body = server.requests[0]
        assert body["model"] == "gpt-4.1" and (body["temperature"], body["top_p"], body["max_tokens"]) == (
            0.6,
            0.8,
            8000,
        )
        schema = body["response_format"]["json_schema"]["schema"]
        assert schema["required"] == ["analysis", "execution_result"]
        system, user = body["messages"]
        assert system["role"] == "system" and '"execution_result": JSON array or object' in system["content"]
        tool = next(x for x in task["tools"] if x["function"]["name"] == t.messages[2]["name"])
        assert json.dumps(tool, ensure_ascii=True, indent=0) in user["content"]  # the whole schema
        assert user["content"].startswith("Previous tool calls and results (few-shot):\n")
        assert user["content"].endswith("Generate tool execution result in JSON format.")
        assert "Current conversation history" not in user["content"] and task["user_turns"][0] not in user["content"]
        assert json.loads(t.messages[2]["content"]) == gold[0]
        assert server.headers[0]["Authorization"] == "Bearer sk-tool"
    finally:
        server.close()


def test_external_simulator_failure_ends_the_episode_after_five_tries(tok, tasks):
    server = _Server(["not json"])
    try:
        ext = ExternalSimulator(server.url, "gpt-4.1", backoff_s=0.001)
        (t,) = collector(tok, "external", external_simulator=ext).collect(tasks[:1], [0], ScriptedPolicy(tok, tasks))
        assert len(server.requests) == 5 and t.stop_reason == "tool_error" and t.reward == 0.0
        assert "JSONDecodeError" in json.loads(t.messages[-1]["content"])["error"]
    finally:
        server.close()


def test_judge_is_called_once_per_round_for_all_ended_turns(tok, tasks):
    """Three episodes end their first turn in the same round: one judge call with all their requests."""
    calls = []

    class Counting(RuleJudge):
        def __call__(self, requests):
            calls.append(len(requests))
            return super().__call__(requests)

    c = RehearsalCollector(tok, Counting(), "agent", max_completion_length=64, max_model_len=8192)
    trajs = c.collect(tasks, [0, 1, 2], ScriptedPolicy(tok, tasks))
    assert all(t.reward == pytest.approx(1.0) for t in trajs)
    assert calls == [3 * 2 * 2, 3 * 2 * 2]  # per turn: 3 episodes x 2 steps x 2 items, in one call


def test_rows_of_both_roles_keep_the_engines_log_probs(tok, tasks):
    """The sampler/trainer gap metric (`sampling/logp_gap_*`) reads each row's engine log-probs: caller and rehearsal
    rows carry the generator's, one per completion token."""
    policy = ScriptedPolicy(tok, tasks)

    def with_logps(prompt_ids):
        out, _ = policy(prompt_ids)
        return out, [[-0.5 - k for k in range(len(ids))] for ids in out]

    (t,) = collector(tok).collect(tasks[:1], [0], with_logps)
    assert {r.role for r in t.rows} == {"caller", "simulator"}
    for r in t.rows:
        assert r.sampling_logps == [-0.5 - k for k in range(len(r.completion_ids))]
    (t,) = collector(tok).collect(tasks[:1], [0], policy)  # HF generation: no engine log-probs
    assert all(r.sampling_logps is None for r in t.rows)
