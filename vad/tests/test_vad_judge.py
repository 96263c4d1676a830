"""The LLM judge against a real local HTTP server (an OpenAI-compatible stand-in that answers a scripted sequence of
statuses): a 500 then a reply is scored by the reply; three failures score "No" and are recorded; the report marks
results graded without a judge "rule-scored (no judge)"; a judge that does not answer is refused up front."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vad import benchmarks as bm
from vad import cli, evaluation
from vad.report import report


class FakeJudge:
    """`POST /v1/chat/completions` answers the next status of `script` (200 with `reply`, else that error);
    `GET /v1/models` lists `judge`."""

    def __init__(self):
        self.script, self.reply, self.prompts = [], "Yes", []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._json(200, {"data": [{"id": "judge"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.prompts.append(body["messages"][0]["content"])
                status = judge.script.pop(0) if judge.script else 200
                self._json(status, {"choices": [{"message": {"content": judge.reply}}]} if status == 200 else {})

            def _json(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def judge():
    fake = FakeJudge()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _item(tmp_path, uid="0"):
    return bm.EvalItem("zoombench", uid, "What does the tiny sign say?", "exit", b"", tmp_path)


def test_one_500_then_a_reply_is_scored(judge, tmp_path):
    judge.script = [500]
    reply, error = bm.judge_reply(_item(tmp_path), "It reads EXIT.", base_url=judge.url, model="judge", pause_s=0.0)
    assert (reply, error) == ("Yes", None) and bm.judge_correct(reply) and len(judge.prompts) == 2
    prompt = judge.prompts[-1]  # the official template's parts: question, reference answer, response, Yes/No
    assert "What does the tiny sign say?" in prompt and "Reference answer: exit" in prompt
    assert "Response: It reads EXIT." in prompt and "Output Yes" in prompt and "No otherwise" in prompt


def test_three_failures_score_no_and_are_recorded(judge, tmp_path, monkeypatch):
    judge.script = [500, 500, 500]
    reply, error = bm.judge_reply(_item(tmp_path), "EXIT", base_url=judge.url, model="judge", pause_s=0.0)
    assert reply == "No" and not bm.judge_correct(reply) and "500" in error and len(judge.prompts) == 3

    # in the streaming evaluation: item 0 is judged after one 500, item 1 fails three times; both stay on record
    items = [_item(tmp_path, "0"), _item(tmp_path, "1")]
    monkeypatch.setattr(evaluation, "iter_benchmark", lambda name, root, **kw: iter(items))
    judge.script = [500, 200, 500, 500, 500]
    out = tmp_path / "eval"
    evaluation.run_benchmark("zoombench", tmp_path, lambda batch: ["the exit sign"] * len(batch), out,
                             judge={"base_url": judge.url, "model": "judge", "pause_s": 0.0})  # fmt: skip
    recs = [json.loads(line) for line in (out / "zoombench" / "rank0.jsonl").read_text().splitlines()]
    assert [(r["correct"], r["source"], r["judge"]) for r in recs] == [(True, "judge", "Yes"), (False, "judge", "No")]
    assert recs[0]["judge_error"] is None and "500" in recs[1]["judge_error"]
    details = evaluation.collect_scores(out, ["zoombench"])["details"]["zoombench"]
    assert details["score"] == 50.0
    assert details["graded_by"] == {"rule": 0, "judge": 2, "judge_failed": 1, "rule (no judge)": 0}


def _record(judge_model, failed=0):
    graded = {"rule": 1, "judge": 1, "judge_failed": failed, "rule (no judge)": 0}
    return {"row": "vad", "model": "Qwen/Qwen3.5-4B", "config": "visionopd_qwen3.5-4b_paper", "seed": 42,
            "commit": "abc", "judge": judge_model, "scores": {"Avg6": 70.0},
            "details": {"vstar": {"score": 70.0, "graded_by": graded}}}  # fmt: skip


@pytest.mark.parametrize(
    "record, cell",
    [
        (_record(None), "| 70.00 +- 0.00 (n=1) rule-scored (no judge) |"),
        ({k: v for k, v in _record(None).items() if k != "judge"}, "(n=1) rule-scored (no judge) |"),  # older files
        (_record("openai/gpt-oss-120b"), "| 70.00 +- 0.00 (n=1) |"),
        (_record("openai/gpt-oss-120b", failed=2), "| 70.00 +- 0.00 (n=1) (judge failed on 2 items: scored No) |"),
    ],
)
def test_report_marks_results_graded_without_a_judge(tmp_path, readme, record, cell):
    results = tmp_path / "results" / record["config"]
    results.mkdir(parents=True)
    (results / "vad_seed42.json").write_text(json.dumps(record))
    table = report(readme)  # the results folder next to the README
    line = next(ln for ln in table.splitlines() if ln.startswith("| Avg6 | Qwen/Qwen3.5-4B | vad |"))
    assert cell in line


def test_a_judge_that_does_not_serve_the_model_is_refused_up_front(judge):
    cli.check_judge(cli.load("smoke", [f"data.judge_base_url={judge.url}", "data.judge_model=judge"])["data"])
    with pytest.raises(cli.UsageError, match="serves judge, not data.judge_model=openai/gpt-oss-120b"):
        cli.check_judge(cli.load("smoke", [f"data.judge_base_url={judge.url}"])["data"])
    judge.server.shutdown()
    judge.server.server_close()
    with pytest.raises(cli.UsageError, match="does not answer.*data.judge_base_url=null"):
        cli.check_judge(cli.load("smoke", [f"data.judge_base_url={judge.url}"])["data"])
