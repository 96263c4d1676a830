"""Fault injection through a real local HTTP server speaking the OpenAI API: a memory-model call that fails, tool
calls whose arguments are `null` or cut-off JSON, a 400 from the judge. The run completes, each affected subtask is recorded with its
reason (`backend_error`, the tool's error observation), nothing else is lost, and a resume repeats no finished
subtask."""

import csv
import json

import pytest
from test_served import FakeServer, completion, happy, role_of

from vitabench2.backends import OpenAIBackend
from vitabench2.cli import main
from vitabench2.runner import RunConfig, Runner, read_records


def memory_call(body) -> bool:
    return not body.get("tools") and "You maintain a user's preference memory" in body["messages"][-1]["content"]


class Faults:
    """The served model: the first memory update answers 500 (on every try); on "Get me a coffee" the agent calls a
    tool with `null` arguments and one with cut-off JSON; the judge answers 400 on the hotel subtask."""

    def __init__(self):
        self.memory_calls = 0

    def __call__(self, body):
        text = json.dumps(body["messages"])
        if memory_call(body):
            self.memory_calls += 1
            if self.memory_calls <= 2:  # both tries (max_retries=1) of the first update
                return 500, {"error": {"message": "memory model is down"}}
            return 200, completion("The user likes spicy food.")
        if role_of(body) == "judge" and "Book me a hotel in Shanghai" in text:
            return 400, {"error": {"message": "Unsupported parameter: 'seed'"}}
        if role_of(body) == "agent" and "Get me a coffee" in text and body["messages"][-1]["role"] == "user":
            null = {"id": "call_null", "type": "function", "function": {"name": "get_nearby", "arguments": "null"}}
            cut = {"id": "call_cut", "type": "function", "function": {"name": "get_nearby", "arguments": '{"lat": 31'}}
            return 200, completion("", [null, cut])
        return happy(body)


def test_faults_are_recorded_per_subtask_and_the_run_completes(tmp_path):
    server = FakeServer(Faults())
    try:
        b = OpenAIBackend("fake-model", server.url, retry_wait_s=0.01, max_retries=1)
        config = RunConfig(
            output=str(tmp_path / "run"),
            agent="openai",
            user="openai",
            judge="openai",
            memory_type="rewrite",
            max_concurrency=1,
        )
        summary = Runner(config, b, b, b).run()
        records = {r["subtask_id"]: r for r in read_records(tmp_path / "run" / "results.jsonl")}
        assert len(records) == 5  # nothing lost

        # the failed memory update: recorded on the subtask it preceded, which still ran on the fallback memory
        first = records["U_SAMPLE_01_T1"]
        assert first["termination"] == "agent_stop" and first["reward"] == 1.0
        assert len(first["backend_error"]) == 1 and "memory update" in first["backend_error"][0]
        assert "memory model is down" in first["backend_error"][0]
        assert first["memory_read"].startswith("User preference observations:")  # official append fallback

        # the null-argument tool call: that call's error observation, the conversation went on
        coffee = records["U_SAMPLE_02_T1"]
        null, cut = [m for m in coffee["messages"] if m["role"] == "tool"]
        assert null["error"] and null["content"].startswith("Error: ") and "JSON object" in null["content"]
        # ... and arguments that are not JSON at all: the observation quotes them
        assert cut["error"] and "not valid JSON: '{\"lat\": 31'" in cut["content"]
        assert coffee["termination"] == "agent_stop" and coffee["backend_error"] == []

        # the judge's 400: a judge failure with its reason and a backend_error entry
        hotel = records["U_SAMPLE_01_T3"]
        assert hotel["judge_failed"] and "HTTP 400" in hotel["failure_reason"] and hotel["reward"] == 0.0
        assert hotel["backend_error"] and hotel["backend_error"][0].startswith("judge: ")

        # everything else is clean
        for sid in ("U_SAMPLE_01_T2", "U_SAMPLE_02_T2"):
            assert records[sid]["backend_error"] == [] and not records[sid]["judge_failed"]
        assert summary["backend_errors"] == 2 and summary["judge_failures"] == 1

        # resume: no finished subtask runs again; only the failed judgement is asked again
        server.reply.memory_calls = 10  # the memory model is up now
        before = len(server.requests)
        Runner(config, b, b, b).run()
        again = server.requests[before:]
        assert again and all(role_of(r["body"]) == "judge" for r in again)
        assert all("Book me a hotel in Shanghai" in json.dumps(r["body"]["messages"]) for r in again)
        assert len(read_records(tmp_path / "run" / "results.jsonl")) == 5
    finally:
        server.close()


def test_thinking_and_completion_caps_per_role(tmp_path):
    server = FakeServer(happy)
    try:
        spec = f"openai:fake-model@{server.url}"
        argv = ["run", "--agent", spec, "--users", "U_SAMPLE_02", "--thinking", "off", "--context-length", "32768"]
        csv_path = tmp_path / "runs.csv"
        main([*argv, "--output", str(tmp_path / "run"), "--csv", str(csv_path)])
        sent = {(role_of(r["body"]), "chat_template_kwargs" in r["body"]) for r in server.requests}
        assert sent == {("agent", True), ("judge", False)}  # the sample's user turns here are verbatim
        caps = {(role_of(r["body"]), r["body"]["max_tokens"]) for r in server.requests}
        assert caps == {("agent", 4096), ("judge", 8192)}  # the judge's cap: official models.yaml (gpt-4.1)
        server.requests.clear()
        prices = '{"fake-model": {"prompt_price": 2.0, "completion_price": 8.0}}'
        run2 = [*argv, "--output", str(tmp_path / "run2"), "--thinking-roles", "agent,judge", "--csv", str(csv_path)]
        main([*run2, "--prices", prices])
        sent = {(role_of(r["body"]), "chat_template_kwargs" in r["body"]) for r in server.requests}
        assert sent == {("agent", True), ("judge", True)}
        # --csv: one summary row per run (official --csv-output-file)
        with csv_path.open() as f:
            rows = list(csv.DictReader(f))
        assert [r["output"] for r in rows] == [str(tmp_path / "run"), str(tmp_path / "run2")]
        assert rows[0]["avg@1"] == "1.0" and rows[1]["backend_errors"] == "0" and "agent_prompt_tokens" in rows[0]
        # cost (official models.yaml cost_1m_token_dollar): unpriced -> 0; priced -> from the recorded tokens
        assert rows[0]["total_agent_cost"] == "0.0" and float(rows[1]["total_agent_cost"]) > 0
        cost = json.loads((tmp_path / "run2" / "summary.json").read_text())["cost"]
        records = read_records(tmp_path / "run2" / "results.jsonl")
        for role in ("agent", "judge"):
            prompt = sum(r["tokens"][f"{role}_prompt"] for r in records)
            completion = sum(r["tokens"][f"{role}_completion"] for r in records)
            assert prompt > 0 and cost[f"total_{role}_cost"] == round((2.0 * prompt + 8.0 * completion) / 1e6, 6)
        assert cost["avg_agent_cost"] == round(cost["total_agent_cost"] / len(records), 6)
        with pytest.raises(SystemExit, match="prompt_price"):
            main([*run2, "--prices", '{"fake-model": 2.0}'])
    finally:
        server.close()


def test_rag_cache_miss_fails_only_its_subtask(tmp_path):
    """A cache file missing for one subtask: that subtask is recorded as failed with the reasons (official: no silent
    fallback); the other subtasks run."""
    from test_memory import _fake_embed

    from conftest import agent_one_call, judge_all, user_stop
    from vitabench2.backends import ScriptedBackend
    from vitabench2.memory import write_rag_cache
    from vitabench2.tasks import load_tasks, sample_tasks_path

    cache = tmp_path / "cache"
    assert write_rag_cache(load_tasks(sample_tasks_path()), cache, embed_fn=_fake_embed) == 5  # one per subtask
    (cache / "U_SAMPLE_01__U_SAMPLE_01_T2.npz").unlink()
    config = RunConfig(output=str(tmp_path / "run"), memory_type="rag_cache", memory_kwargs={"cache_dir": str(cache)})
    backends = [ScriptedBackend(agent_one_call), ScriptedBackend(user_stop), ScriptedBackend(judge_all())]
    Runner(config, *backends).run()
    records = {r["subtask_id"]: r for r in read_records(tmp_path / "run" / "results.jsonl")}
    assert len(records) == 5
    missed = records["U_SAMPLE_01_T2"]
    assert missed["termination"] == "backend_error" and "no cached embedding" in missed["failure_reason"]
    update, read = missed["backend_error"]
    assert update.startswith("memory update: ") and "no cache file" in update and read.startswith("memory read: ")
    assert all(r["termination"] == "agent_stop" for sid, r in records.items() if sid != "U_SAMPLE_01_T2")


def test_memory_kwargs_from_the_cli(tmp_path):
    server = FakeServer(happy)
    try:
        spec = f"openai:fake-model@{server.url}"
        argv = ["run", "--agent", spec, "--users", "U_SAMPLE_02", "--memory-type", "full_context"]
        main([*argv, "--memory-kwargs", '{"max_tokens": 50}', "--output", str(tmp_path / "run")])
        config = json.loads((tmp_path / "run" / "config.json").read_text())
        assert config["memory_kwargs"] == {"max_tokens": 50}
        (tmp_path / "kw.json").write_text('{"no_such_option": 1}')
        with pytest.raises(ValueError, match="unknown options"):
            main([*argv, "--memory-kwargs", str(tmp_path / "kw.json"), "--output", str(tmp_path / "run2")])
    finally:
        server.close()


def test_rag_embeddings_through_an_endpoint_and_its_fallbacks():
    """`embedding_model` embeds through an OpenAI-compatible `/embeddings` endpoint; when it fails, chunks are kept
    without vectors and the query falls back to keyword overlap (official `RAGMemory`), each failure recorded."""
    from test_memory import INTERACTIONS, _fake_embed

    from vitabench2.memory import create_memory

    state = {"down": False}

    def reply(body):
        if state["down"]:
            return 503, {"error": {"message": "embeddings overloaded"}}
        data = [{"index": i, "embedding": v} for i, v in enumerate(_fake_embed(body["input"]))]
        return 200, {"data": data[::-1], "model": body["model"]}  # out of order: sorted by index

    server = FakeServer(reply)
    try:
        mem = create_memory("rag", top_k=1, similarity_threshold=0.5, embedding_model=f"fake-embed@{server.url}")
        mem.update(INTERACTIONS)
        assert "gym" in mem.read("which hotel has a gym") and "noodles" in mem.read("food, noodles")
        assert {r["body"]["model"] for r in server.requests} == {"fake-embed"} and mem.update_errors == []
        state["down"] = True
        mem.update([{"type": "review", "timestamp": "t", "content": "Quiet rooms matter."}])
        assert mem.vectors[-1] is None and "embeddings overloaded" in mem.update_errors[0]
        assert "Quiet rooms" in mem.read("quiet rooms")  # keyword fallback
        assert mem.update_errors[-1].startswith("memory query embedding: ")
    finally:
        server.close()


def test_rejudge_a_saved_run_with_another_judge(tmp_path):
    """`vitabench2 judge RUN --judge ... --output NEW`: the saved conversations judged again into a new folder (the
    source untouched); a rerun judges nothing twice."""
    from conftest import agent_one_call, judge_all, user_stop
    from vitabench2.backends import ScriptedBackend

    config = RunConfig(output=str(tmp_path / "run"), memory_type="full_context")
    backends = [ScriptedBackend(agent_one_call), ScriptedBackend(user_stop), ScriptedBackend(judge_all())]
    Runner(config, *backends).run()
    source = (tmp_path / "run" / "results.jsonl").read_text()

    def strict(body):  # the new judge fails rubric 0 everywhere
        rubrics = body["messages"][-1]["content"].split("<current_rubrics>")[-1].split("</current_rubrics>")[0]
        n = rubrics.count('"rubric_idx"')
        return 200, completion(
            json.dumps([{"rubric_idx": f"rubric_{i}", "meetExpectation": i != 0} for i in range(n)])
        )

    server = FakeServer(strict)
    try:
        argv = ["judge", str(tmp_path / "run"), "--judge", f"openai:strict-judge@{server.url}"]
        main([*argv, "--output", str(tmp_path / "strict")])
        records = read_records(tmp_path / "strict" / "results.jsonl")
        assert len(records) == 5 and all(r["reward"] == 0.0 and not r["judge_failed"] for r in records)
        assert all(r["messages"] for r in records) and (tmp_path / "run" / "results.jsonl").read_text() == source
        summary = json.loads((tmp_path / "strict" / "summary.json").read_text())
        config = json.loads((tmp_path / "strict" / "config.json").read_text())
        assert summary["metrics"]["avg@1"] == 0.0 and config["judge"] == f"openai:strict-judge@{server.url}"
        assert {r["body"]["max_tokens"] for r in server.requests} == {8192}
        n = len(server.requests)
        main([*argv, "--output", str(tmp_path / "strict")])  # resume: nothing left to judge
        assert len(server.requests) == n and len(read_records(tmp_path / "strict" / "results.jsonl")) == 5
    finally:
        server.close()
