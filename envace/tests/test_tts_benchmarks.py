"""Test-time private rehearsal on tau2-bench and BFCL (`tts_chat.PrivateRehearsal`) with a served model
(`agentrl_shared.serve`): `envace eval --benchmark tau2 --rehearsal 0,2` end to end with the budget table; BFCL at
its handler boundary (bfcl-eval's `_query_prompting` step, `tts_chat.query_with_memory`), since bfcl-eval itself
lives in its 6 GB isolated environment (its real run through `envace/bfcl/rehearse.py` is the `slow` test at the
end)."""

import json
import shutil
from pathlib import Path

import httpx
import pytest

from agentrl_shared.serve import ChatModel, OpenAIServer
from envace import cli
from envace.tts_chat import TEMPERATURE, TOP_P, PrivateRehearsal, query_with_memory


class Recording(ChatModel):
    """The tiny Qwen3, recording every (prompt, sampling) it is asked to complete."""

    def __init__(self, **kwargs):
        super().__init__("tiny-qwen3", **kwargs)
        self.requests = []

    def generate(self, prompt, body):
        self.requests.append((prompt, body.get("temperature"), body.get("top_p")))
        return super().generate(prompt, body)


class ScriptedUser(ChatModel):
    """A tau2 user that opens with one message and then stops (tau2's stop token)."""

    def __init__(self):
        super().__init__("tiny-qwen3")

    def generate(self, prompt, body):
        return ("My phone has no data." if prompt.count("<|im_start|>user") == 1 else "###STOP###"), 1, 1, True


def test_tau2_rehearsal_budgets_with_the_served_model_write_the_budget_table(tmp_path):
    """N = 0 and N = 2 on one tau2 mock task: N = 2 rehearses twice at T 0.6 / top-p 0.95 (different samples of the
    tiny model), the committed call (the harness's greedy one) carries their memory; N = 0 has neither."""
    pytest.importorskip("tau2", reason="needs the tau2 extra")
    policy = Recording(max_new_tokens=12)
    with OpenAIServer(policy, "policy") as server, OpenAIServer(ScriptedUser(), "user") as user:
        cli.main(["eval", "--benchmark", "tau2", "--rehearsal", "0,2", "--data", "mock", "--num-tasks", "1",
                  "--max-steps", "4", "--max-new-tokens", "12", "--endpoint", server.url, "--served-model", "policy",
                  "--user-endpoint", user.url, "--user-model", "user", "--output", str(tmp_path),
                  "model.name_or_path=tiny-qwen3"])  # fmt: skip
    out = tmp_path / "benchmarks"
    payload = json.loads((out / "results.json").read_text())
    rehearsal = payload["rehearsal"]
    assert (rehearsal["mode"], rehearsal["temperature"], rehearsal["top_p"]) == ("parallel", 0.6, 0.95)
    assert set(rehearsal["budgets"]) == {"0", "2"}
    assert rehearsal["budgets"]["2"]["scores"]["mock"]["tasks"] == 1
    assert not (out / "tau2" / "rehearsal_parallel_N0" / "rehearsals.jsonl").exists()
    (turn,) = [json.loads(x) for x in (out / "tau2" / "rehearsal_parallel_N2" / "rehearsals.jsonl").open()]
    assert len(turn["attempts"]) == 2 and "## Rehearsal 2" in turn["memory"]
    assert turn["attempts"][0]["messages"] != turn["attempts"][1]["messages"]  # sampled: the two rehearsals differ

    sampled = [i for i, (_, t, p) in enumerate(policy.requests) if (t, p) == (TEMPERATURE, TOP_P)]
    committed = [i for i, (_, t, _) in enumerate(policy.requests) if t == 0.0]
    assert len(sampled) == 2 and len(committed) == 2  # N = 0: one greedy call; N = 2: two samples, then it
    assert committed[0] < sampled[0] < sampled[1] < committed[1]
    without, with_memory = policy.requests[committed[0]][0], policy.requests[committed[1]][0]
    assert "Rehearsal memory" not in without and "## Rehearsal 1" in with_memory and "## Rehearsal 2" in with_memory

    table = (out / "rehearsal_budget.md").read_text()
    rows = [r for r in table.splitlines() if r.startswith("| tau2 ")]
    assert [r.split(" | ")[3] for r in rows] == ["0", "0", "2", "2"]  # N, per metric
    assert "pass^1, mean over domains" in table and "T 0.6, top-p 0.95" in table and payload["commit"] in table


class ScriptedFC(ChatModel):
    """A Qwen3 text policy behind `/v1/completions`: sampled caller prompts call `add` once and then answer; the
    rehearsal role's prompts get an `<execution_result>`; the greedy committed query answers at once."""

    def __init__(self):
        super().__init__("tiny-qwen3")
        self.requests, self.n = [], 0

    def generate(self, prompt, body):
        self.requests.append((prompt, body.get("temperature"), body.get("top_p")))
        if "exact tool simulator" in prompt:
            self.n += 1
            return f'\n<execution_result>\n{{"sum": {self.n}}}\n</execution_result>', 1, 1, True
        if body.get("temperature") != TEMPERATURE or "<tool_response>" in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return "The sum is 3.", 1, 1, True
        return '\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', 1, 1, True


ADD = {"name": "add", "description": "Adds two integers a and b.",
       "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"]}}  # fmt: skip


def test_bfcl_rehearsal_at_the_handler_boundary(tmp_path):
    """The steps of a two-turn BFCL entry as bfcl-eval's OSS handler takes them (`inference_data` with the message
    list in its format, BFCL function docs; `_query_prompting` replaced by a stand-in that renders the chat template
    and calls `/v1/completions` as the handler does): each user turn is rehearsed once (N = 2, sampled), its later
    steps reuse the memory, the handler's history never holds it, and the rehearsal role sees the whole function doc
    without ground truth."""
    model = ScriptedFC()
    with OpenAIServer(model, "policy") as server:
        client = httpx.Client(base_url=server.url)

        def complete(messages, tools, **sampling):
            prompt = model.prompt(messages, [{"type": "function", "function": t} for t in tools] or None)
            body = {"model": "policy", "prompt": prompt, "max_tokens": 64, **sampling}
            return client.post("/completions", json=body).json()["choices"][0]["text"]

        def query(data):  # OSSHandler._query_prompting at BFCL's default temperature 0.001
            data["inference_input_log"] = {"formatted_prompt": "..."}
            return complete(data["message"], data["function"], temperature=0.001)

        log = tmp_path / "rehearsals.jsonl"
        sample = lambda m, t: complete(m, t, temperature=TEMPERATURE, top_p=TOP_P)  # noqa: E731
        rehearsal = PrivateRehearsal(sample, budget=2, mode="sequential", log=log)
        data = {"message": [{"role": "user", "content": "Add 1 and 2."}], "function": [ADD]}
        assert query_with_memory(rehearsal, data, query) == "The sum is 3."
        assert data["message"] == [{"role": "user", "content": "Add 1 and 2."}] and data["inference_input_log"]
        data["message"] += [{"role": "assistant", "content": "<tool_call>..."},
                            {"role": "tool", "name": "add", "content": "3"}]  # fmt: skip
        query_with_memory(rehearsal, data, query)  # a later step of the same turn: no new rehearsal
        assert len(log.read_text().splitlines()) == 1
        data["message"].append({"role": "user", "content": "Now add 2 and 2."})
        query_with_memory(rehearsal, data, query)
    turns = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(turns) == 2 and all(len(t["attempts"]) == 2 for t in turns)
    assert all(a["stop_reason"] == "done" for t in turns for a in t["attempts"])
    assert '- add({"a": 1, "b": 2}) -> {"sum": 1}' in turns[0]["memory"]
    assert '-> {"sum": 2}' in turns[0]["memory"]  # the second attempt's own rehearsed result

    committed = [p for p, t, _ in model.requests if t == 0.001]
    assert len(committed) == 3 and all("# Rehearsal memory" in p for p in committed)
    assert '{"sum": 2}' in committed[1] and '{"sum": 4}' in committed[2] and '{"sum": 2}' not in committed[2]
    sim = [p for p, _, _ in model.requests if "exact tool simulator" in p]
    assert len(sim) == 4 and all(t == TEMPERATURE for p, t, _ in model.requests if p in sim)
    assert all("Adds two integers a and b." in p and "(few-shot): <unavailable>" in p for p in sim)
    callers = [p for p, t, _ in model.requests if t == TEMPERATURE and p not in sim]
    assert len(callers) == 8  # 2 turns x 2 attempts x (the call, then the answer)
    assert "Rehearsal memory" not in callers[0] and "## Rehearsal 1" in callers[2]  # sequential: attempt 2 sees 1


@pytest.mark.slow
def test_bfcl_cli_rehearsal_budgets_through_bfcl_evals_handler(tmp_path):
    """`envace eval --benchmark bfcl --rehearsal 0,2` on a slice (one multi-turn and one single-turn entry) with the
    served tiny Qwen3: bfcl-eval's Qwen3 FC handler with `envace/bfcl/rehearse.py` rehearses each user turn of
    the multi-turn entry twice (sampled) and the budget table carries the V4 multi-turn mean."""
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({"multi_turn_base": ["multi_turn_base_0"], "simple_python": ["simple_python_0"]}))
    cli.main(["eval", "--benchmark", "bfcl", "--rehearsal", "0,2", "--data", str(ids), "--max-new-tokens", "8",
              "--output", str(tmp_path), "model.name_or_path=tiny-qwen3"])  # fmt: skip
    out = tmp_path / "benchmarks"
    budgets = json.loads((out / "results.json").read_text())["rehearsal"]["budgets"]
    assert set(budgets) == {"0", "2"} and budgets["2"]["scores"]["multi_turn_base"]["total"] == 1
    assert budgets["2"]["v4"]["groups"]["multi_turn"]["missing"] == ["multi_turn_miss_func", "multi_turn_miss_param",
                                                                     "multi_turn_long_context"]  # fmt: skip
    turns = [json.loads(x) for x in (out / "bfcl" / "rehearsal_parallel_N2" / "rehearsals.jsonl").open()]
    assert len(turns) >= 2 and all(len(t["attempts"]) == 2 for t in turns)  # every user turn, two attempts each
    assert not (out / "bfcl" / "rehearsal_parallel_N0" / "rehearsals.jsonl").exists()
    assert "BFCL V4 multi-turn mean (1 of 4 categories), partial slice" in (out / "rehearsal_budget.md").read_text()


def test_report_fills_the_rehearsal_budget_block(tmp_path):
    """`envace report` writes the budget-vs-score table from `results/benchmarks/*/results.json` (a BFCL payload:
    the V4 multi-turn mean and the offline overall, the difference to N = 0)."""
    from envace.report import report

    package = Path(__file__).resolve().parents[1]
    shutil.copy(package / "README.md", tmp_path / "README.md")
    shutil.copy(package / "paper_results.json", tmp_path / "paper_results.json")

    def budget(multi_turn, overall):
        groups = {"multi_turn": {"accuracy": multi_turn, "missing": []}}
        return {"scores": {}, "partial": False, "v4": {"groups": groups, "multi_turn_mean": multi_turn,
                                                       "overall_offline": overall}}  # fmt: skip

    payload = {"benchmark": "bfcl", "model": "/ckpt/envace-8b", "commit": "abc1234", "rehearsal": {
        "mode": "parallel", "temperature": 0.6, "top_p": 0.95, "budgets": {"0": budget(0.25, None),
                                                                           "2": budget(0.5, 0.4)}}}  # fmt: skip
    (tmp_path / "results" / "benchmarks" / "bfcl_parallel_envace-8b").mkdir(parents=True)
    (tmp_path / "results" / "benchmarks" / "bfcl_parallel_envace-8b" / "results.json").write_text(json.dumps(payload))
    report(tmp_path / "README.md")
    block = (tmp_path / "README.md").read_text().split("<!-- results-tts-benchmarks:start -->")[1].split("<!--")[0]
    assert "| bfcl | /ckpt/envace-8b | parallel | 0 | BFCL V4 multi-turn mean | 25.0 | +0.0 | abc1234 |" in block
    assert "| bfcl | /ckpt/envace-8b | parallel | 2 | BFCL V4 multi-turn mean | 50.0 | +25.0 | abc1234 |" in block
    assert "| 2 | BFCL V4 overall, offline groups (weights 10/10/10/30 renormalised) | 40.0 | - |" in block
    assert "n/a (categories missing)" in block and "T 0.6, top-p 0.95" in block
