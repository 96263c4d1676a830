"""Checklist reward: any-step pass, sticky tool failure, R normalisation, required items, judge back ends and their
failures (official checklist_reward.py, envs.py::_aggregate_turn_score, reward_manager/checklist.py)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from envace.data import generate_tasks
from envace.reward import (
    EndpointJudge,
    JudgeRequest,
    JudgeUnavailable,
    RuleJudge,
    TurnJob,
    endpoint_judge_from_env,
    episode_reward,
    judge_prompt,
    parse_verdict,
    score_turn,
    score_turns,
    serialize_for_judge,
    turn_score,
)


def test_turn_score_counts_an_item_passed_at_any_step():
    # one checklist, 2 steps, 3 items (weights 0.5, 0.3, 0.2): item 0 passes at step 0, item 1 at step 1, item 2 never
    passed = [[[True, False, False], [False, True, False]]]
    assert turn_score(passed, [[0.5, 0.3, 0.2]], tool_failure_before=False) == pytest.approx(0.8)
    assert turn_score(passed, [[0.5, 0.3, 0.2]], tool_failure_before=True) == 0.0  # sticky tool failure


def test_turn_score_sums_checklists_and_episode_reward_normalises():
    passed = [[[True, True]], [[False, True]]]
    s = turn_score(passed, [[0.4, 0.6], [0.4, 0.6]], False)
    assert s == pytest.approx(1.6)
    # R = sum of turn scores / (num_checklists * num_turns): 2 checklists, 3 reference turns, one turn reached
    assert episode_reward([s], num_checklists=2, num_turns=3) == pytest.approx(1.6 / 6)
    assert episode_reward([1.0, 1.0], 1, 2) == 1.0
    assert episode_reward([1.0], 1, 2) == 0.5  # early termination: the unreached turn adds 0


def gold_turn(task, t):
    """The reference messages of user turn t (user, assistant call, tool, assistant reply)."""
    return task["reference_messages"][4 * t : 4 * t + 4]


def test_rule_judge_scores_the_gold_conversation_one_and_wrong_ones_lower():
    task = next(t for t in generate_tasks(20, seed=0) if len(t["user_turns"]) == 2)
    judge = RuleJudge()
    for t in range(2):
        res = score_turn(judge, task, t, task["reference_messages"][: 4 * t], gold_turn(task, t))
        assert res.score == pytest.approx(1.0) and not res.required_failed and res.judge_failures == []
    user, call, tool, reply = gold_turn(task, 0)
    wrong_reply = dict(reply, content="I could not find it.")
    res = score_turn(judge, task, 0, [], [user, call, tool, wrong_reply])
    assert res.score == pytest.approx(0.5) and not res.required_failed  # reply item is not required
    no_call = [user, {"role": "assistant", "content": reply["content"]}]
    res = score_turn(judge, task, 0, [], no_call)
    assert res.score == pytest.approx(0.5) and res.required_failed  # the call item is required for the next turn


def test_tool_error_after_a_step_fails_its_tool_items_without_a_judge_call():
    task = generate_tasks(1, seed=1)[0]
    user, call, _, reply = gold_turn(task, 0)
    error = {
        "role": "tool",
        "content": json.dumps({"error_tool_call": {"code": "INVALID_PARAMETERS", "message": "x"}}),
    }
    seen = []

    def judge(requests):
        seen.extend(requests)
        return RuleJudge()(requests)

    res = score_turn(judge, task, 0, [], [user, call, error, reply])
    assert res.passed_any[0][0] is False  # the gold call, but followed by a tool error
    assert all(r.item["focus_on"] != "assistant.tool_calls" or r.current[-1]["role"] != "tool" for r in seen)


def test_rule_judge_without_rule_is_a_logged_failure():
    item = {"id": "C0", "focus_on": "assistant.tool_calls", "weight": 1.0}
    (v,) = RuleJudge()(
        [JudgeRequest(item, [], [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])]
    )
    assert not v.passed and not v.ok and "no rule" in v.reason


def test_parse_verdict():
    assert parse_verdict(json.dumps({"answer": True, "analysis_of_if_focus_on": "x"})) is True
    for bad in ("not json", json.dumps({"answer": "yes"}), json.dumps([True])):
        with pytest.raises((ValueError, json.JSONDecodeError)):
            parse_verdict(bad)


class _Server:
    """A local OpenAI-compatible endpoint that answers with scripted contents (the first `fail_first` requests fail
    with `status`); it records every request body and its headers."""

    def __init__(self, contents, fail_first=0, status=500):
        self.requests, self.headers, outer = [], [], self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.headers.append(dict(self.headers))
                if len(outer.requests) <= fail_first:
                    self.send_response(status)
                    self.end_headers()
                    return
                content = contents[(len(outer.requests) - fail_first - 1) % len(contents)]
                data = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def close(self):
        self.httpd.shutdown()


def test_endpoint_judge_request_shape_retry_and_verdict():
    server = _Server([json.dumps({"high_level_understanding_of_the_question": "", "analysis_of_if_focus_on": "",
                                  "analysis_of_pass_condition": "", "analysis_of_failure_examples": "",
                                  "answer": True})], fail_first=1)  # fmt: skip
    try:
        task = generate_tasks(1, seed=2)[0]
        judge = EndpointJudge(server.url, "qwen3-30b-a3b", retries=3, backoff_s=0.01, concurrency=1)
        res = score_turn(judge, task, 0, [], gold_turn(task, 0))
        assert res.score == pytest.approx(1.0) and res.judge_failures == []
        body = server.requests[-1]
        assert body["temperature"] == 0.6 and body["top_p"] == 0.8 and body["max_tokens"] == 6000
        schema = body["response_format"]["json_schema"]["schema"]
        assert schema["required"][-1] == "answer" and schema["properties"]["answer"]["type"] == "boolean"
        prompt = body["messages"][0]["content"]
        assert "# Current Messages to Evaluate" in prompt and "**Pass condition:**" in prompt
    finally:
        server.close()


def test_endpoint_judge_failures_count_as_failed_items_with_reason():
    server = _Server(["this is not json"])
    try:
        task = generate_tasks(1, seed=2)[0]
        judge = EndpointJudge(server.url, "m", retries=2, backoff_s=0.01, concurrency=2)
        res = score_turn(judge, task, 0, [], gold_turn(task, 0))
        # 2 assistant steps x 2 items, each tried twice
        assert res.score == 0.0 and len(res.judge_failures) == 4 and "JSONDecodeError" in res.judge_failures[0]
        assert len(server.requests) == 8
    finally:
        server.close()


VERDICT_TRUE = json.dumps({"high_level_understanding_of_the_question": "", "analysis_of_if_focus_on": "",
                           "analysis_of_pass_condition": "", "analysis_of_failure_examples": "", "answer": True})  # fmt: skip


def test_judge_prompt_golden_structure():
    """The sections of the official `get_input_prompt_v2` in order, the criterion's fields, the previous turns and
    the current turn serialized as `get_messages_str_v2` does (the current turn counted from 0, thinking, visible
    reply and tool calls apart), the special rule, the five-step process and the output keys."""
    item = {"id": "C1", "question": "Did it call f?", "focus_on": "assistant.tool_calls", "pass_condition": "f called",
            "failure_examples": ["no call", "wrong tool"], "evidence": [{"snippet": "SNIP-1"}, {"snippet": "SNIP-2"}],
            "weight": 1.0}  # fmt: skip
    previous = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "<think>\nT0\n</think>\n\nR0"}]  # fmt: skip
    current = [{"role": "user", "content": "second"},
               {"role": "assistant", "content": "<think>\nplan\n</think>\n",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
               {"role": "tool", "name": "f", "content": '{"y": 2}'}]  # fmt: skip
    prompt = judge_prompt(item, serialize_for_judge(previous), serialize_for_judge(current))
    sections = ["# Role\n", "# Objective\n", "# Criteria\n", "**Question:** Did it call f?", "**Focus on:** assistant.tool_calls",
                "**Pass condition:** f called", "**Failure examples:**", "**Reference snippet:**",
                "# Previous Messages\n", "# Current Messages to Evaluate\n", "# Special rule of tool call\n",
                "# Evaluation Process", "1. high_level_understanding_of_the_question:", "2. analysis_of_if_focus_on:",
                "3. analysis_of_pass_condition:", "4. analysis_of_failure_examples:", "5. answer:",
                "# Output Format\n"]  # fmt: skip
    positions = [prompt.index(s) for s in sections]
    assert positions == sorted(positions)
    assert (
        json.dumps(["no call", "wrong tool"], indent=2) in prompt
        and json.dumps(["SNIP-1", "SNIP-2"], indent=2) in prompt
    )
    before = prompt[positions[8] : positions[9]]
    assert "Role: system\ncontent: SYS\n# Turn: 0\nRole: user\ncontent: first\n## Step: 0\n" in before
    assert "content.thinking: \nT0\n\ncontent.user_visible_reply: R0\ntool_call: None\n" in before
    now = prompt[positions[9] : positions[10]]
    assert now.startswith("# Current Messages to Evaluate\n# Turn: 0\nRole: user\ncontent: second\n## Step: 0\n")
    assert "content.user_visible_reply: None\ntool_call: " + json.dumps(current[1]["tool_calls"]) in now
    assert now.count('Role: tool\ncontent: {"y": 2}\n') == 1 and "first" not in now
    for key in ("high_level_understanding_of_the_question", "analysis_of_if_focus_on", "analysis_of_pass_condition",
                "analysis_of_failure_examples", "answer"):  # fmt: skip
        assert f'"{key}"' in prompt[positions[-1] :]
    # a reply without a think block is all "thinking" and no visible reply there (official); call tags in a reply
    # become the tool_call text
    plain = serialize_for_judge([{"role": "assistant", "content": "It is 3."}])
    assert "content.thinking: It is 3.\ncontent.user_visible_reply: None\ntool_call: None" in plain
    tagged = serialize_for_judge([{"role": "assistant", "content": "<think>x</think>\n<tool_call>\n{}\n</tool_call>"}])
    assert "content.user_visible_reply: None\ntool_call: <|tool_call_start|>\n{}\n<|tool_call_end|>" in tagged


def test_endpoint_judge_sends_the_key_from_the_environment_and_tries_five_times(monkeypatch):
    server = _Server(["not json"])
    try:
        monkeypatch.setenv("JUDGE_API_KEY", "sk-test")
        judge = endpoint_judge_from_env(server.url, "m", backoff_s=0.001)
        assert judge.retries == 5  # official JUDGE_RETRY=5
        (v,) = judge([JudgeRequest({"question": "q", "focus_on": "f", "pass_condition": "p"}, [],
                                   [{"role": "user", "content": "u"}])])  # fmt: skip
        assert not v.ok and len(server.requests) == 5
        assert {h["Authorization"] for h in server.headers} == {"Bearer sk-test"}
        monkeypatch.delenv("JUDGE_API_KEY")  # no key (a local sglang): no Authorization header
        endpoint_judge_from_env(server.url, "m", retries=1)._one(JudgeRequest({"question": "q", "focus_on": "f",
                                                                               "pass_condition": "p"}, [], []))  # fmt: skip
        assert "Authorization" not in server.headers[-1]
    finally:
        server.close()


def test_judge_start_up_check_is_one_line_on_an_unauthorised_endpoint():
    server = _Server([VERDICT_TRUE], fail_first=1, status=401)
    try:
        judge = EndpointJudge(server.url, "qwen3", retries=5, backoff_s=0.001)
        with pytest.raises(JudgeUnavailable) as err:
            judge.check()
        message = str(err.value)
        assert "\n" not in message and "401" in message and server.url in message and "JUDGE_API_KEY" in message
        assert len(server.requests) == 1  # one try, no retries at start-up
        judge.check()  # the endpoint answers a verdict now: no error
    finally:
        server.close()


def test_judge_calls_are_batched_across_turns():
    """`score_turns` sends the requests of every job in ONE judge call; the results equal scoring each alone."""
    tasks = generate_tasks(3, seed=2)
    calls = []

    class Counting(RuleJudge):
        def __call__(self, requests):
            calls.append(len(requests))
            return super().__call__(requests)

    jobs = [TurnJob(t, 0, [], gold_turn(t, 0)) for t in tasks]
    batched = score_turns(Counting(), jobs)
    assert calls == [sum(2 * len(t["checklists"][0][0]) for t in tasks)]  # 2 steps x items, all tasks at once
    assert batched == [score_turn(RuleJudge(), t, 0, [], gold_turn(t, 0)) for t in tasks]
