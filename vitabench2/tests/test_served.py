"""The served path against a local fake OpenAI-compatible HTTP server on 127.0.0.1: native tool calls, a 400 with a
message (recorded, not retried, the run goes on), a timeout (bounded retries), a 5xx then success, the context
window from /models, and the request fields (seed, completion cap, thinking switch, per-role keys)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vitabench2.backends import BackendError, OpenAIBackend
from vitabench2.runner import RunConfig, Runner, read_records, trial_seeds


class FakeServer:
    """`reply(body) -> (status, payload)`; payload "SLEEP" sleeps past the client timeout."""

    def __init__(self, reply, sleep_s: float = 1.0):
        self.reply, self.sleep_s, self.requests = reply, sleep_s, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"data": [{"id": "fake-model", "max_model_len": 32768}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                status, payload = server.reply(body)
                if payload == "SLEEP":
                    time.sleep(server.sleep_s)
                    status, payload = 200, completion("late")
                try:
                    self._send(status, payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(content="", tool_calls=None):
    msg = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return {"choices": [{"message": msg}], "usage": {"prompt_tokens": 11, "completion_tokens": 3}}


def role_of(body) -> str:
    text = body["messages"][-1].get("content") or ""
    if "<current_rubrics>" in text:
        return "judge"
    return "agent" if body.get("tools") else "user"


def happy(body):
    """Agent: one native tool call, then a stop; user: stop; judge: every rubric met."""
    role = role_of(body)
    if role == "judge":
        rubrics = body["messages"][-1]["content"].split("<current_rubrics>")[-1].split("</current_rubrics>")[0]
        n = rubrics.count('"rubric_idx"')
        return 200, completion(json.dumps([{"rubric_idx": f"rubric_{i}", "meetExpectation": True} for i in range(n)]))
    if role == "user":
        return 200, completion("Thanks. ###STOP###")
    if body["messages"][-1]["role"] == "tool":
        return 200, completion("Done. ###STOP###")
    call = {"id": "call_1", "type": "function", "function": {"name": "get_user_all_orders", "arguments": "{}"}}
    return 200, completion("", [call])


@pytest.fixture
def server_factory():
    servers = []

    def make(reply, **kw):
        servers.append(FakeServer(reply, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def backend(server, **kw):
    kw.setdefault("retry_wait_s", 0.01)
    return OpenAIBackend("fake-model", server.url, **kw)


def test_tool_calls_through_a_served_model(server_factory, tmp_path):
    server = server_factory(happy)
    agent = backend(server, api_key="agent-key", seed=300, max_tokens=512, enable_thinking=False)
    other = backend(server, api_key="judge-key")
    config = RunConfig(
        output=str(tmp_path / "run"), agent="openai", user="openai", judge="openai", users=["U_SAMPLE_02"]
    )
    summary = Runner(config, agent, other, other).run()
    records = read_records(tmp_path / "run" / "results.jsonl")
    assert len(records) == 2 and summary["metrics"]["avg@1"] == 1.0
    tool_msgs = [m for m in records[0]["messages"] if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["name"] == "get_user_all_orders" and not tool_msgs[0]["error"]
    agent_reqs = [r for r in server.requests if role_of(r["body"]) == "agent"]
    body = agent_reqs[0]["body"]
    # official: one seed per trial, drawn from the run seed, on agent and user calls; the judge gets none
    assert body["seed"] == trial_seeds(300, 1)[0] != 300 and records[0]["seed"] == body["seed"]
    assert all("seed" not in r["body"] for r in server.requests if role_of(r["body"]) == "judge")
    assert body["max_tokens"] == 512 and body["temperature"] == 0.0
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert {t["function"]["name"] for t in body["tools"]} >= {"create_delivery_order", "get_user_all_orders"}
    assert {r["auth"] for r in agent_reqs} == {"Bearer agent-key"}
    assert {r["auth"] for r in server.requests if role_of(r["body"]) != "agent"} == {"Bearer judge-key"}
    # the tool call went back to the server as an assistant tool_calls message plus a tool message
    second = agent_reqs[1]["body"]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "get_user_all_orders"
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": tool_msgs[0]["content"]}
    assert agent.context_length() == 32768


def test_400_is_recorded_with_its_message_and_the_run_goes_on(server_factory, tmp_path):
    def overflow_on_coffee(body):
        text = json.dumps(body["messages"])
        if role_of(body) == "agent" and "Get me a coffee" in text:
            return 400, {"error": {"message": "This model's maximum context length is 4096 tokens.", "code": 400}}
        return happy(body)

    server = server_factory(overflow_on_coffee)
    b = backend(server)
    config = RunConfig(output=str(tmp_path / "run"), agent="openai", user="openai", judge="openai")
    Runner(config, b, b, b).run()
    records = {r["subtask_id"]: r for r in read_records(tmp_path / "run" / "results.jsonl")}
    assert len(records) == 5  # the failure did not stop the other subtasks
    failed = records["U_SAMPLE_02_T1"]
    assert failed["termination"] == "backend_error" and failed["reward"] == 0.0
    assert "HTTP 400" in failed["failure_reason"] and "maximum context length is 4096" in failed["failure_reason"]
    coffee = [
        r for r in server.requests if "Get me a coffee" in json.dumps(r["body"]) and role_of(r["body"]) == "agent"
    ]
    assert len(coffee) == 1  # a 400 is not retried
    # resume: the failed subtask is skipped ...
    n = len(server.requests)
    Runner(config, b, b, b).run()
    assert len(server.requests) == n
    # ... unless asked to retry failures (here it succeeds: the server no longer refuses)
    server.reply = happy
    Runner(config, b, b, b, retry_failed=True).run()
    records = {r["subtask_id"]: r for r in read_records(tmp_path / "run" / "results.jsonl")}
    assert len(records) == 5 and records["U_SAMPLE_02_T1"]["termination"] == "agent_stop"
    assert len(read_records(tmp_path / "run" / "results.jsonl")) == 5  # replaced, not doubled


def test_timeout_retried_a_bounded_number_of_times(server_factory):
    server = server_factory(lambda body: (200, "SLEEP"), sleep_s=1.0)
    b = backend(server, timeout_s=0.2, max_retries=2)
    start = time.perf_counter()
    with pytest.raises(BackendError, match="failed after 3 tries: ReadTimeout"):
        b.chat([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 3 and time.perf_counter() - start < 5


def test_5xx_then_success(server_factory):
    replies = iter([(503, {"error": {"message": "overloaded"}}), (200, completion("hello"))])
    server = server_factory(lambda body: next(replies))
    result = backend(server).chat([{"role": "user", "content": "hi"}])
    assert result.content == "hello" and len(server.requests) == 2
    replies2 = iter([(429, {"error": {"message": "slow down"}})] * 3)
    server.reply = lambda body: next(replies2)
    with pytest.raises(BackendError, match="HTTP 429: slow down"):
        backend(server, max_retries=2).chat([{"role": "user", "content": "hi"}])
