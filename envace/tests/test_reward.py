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
    RuleJudge,
    episode_reward,
    parse_verdict,
    score_turn,
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
    """A local OpenAI-compatible endpoint that answers with scripted contents (first N requests fail with 500)."""

    def __init__(self, contents, fail_first=0):
        self.requests, outer = [], self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if len(outer.requests) <= fail_first:
                    self.send_response(500)
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
