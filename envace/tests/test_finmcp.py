"""FinMCP-Bench: loader on a file in the official layout (aliyun/qwen-dianjin `DianJin-TIR/Benchmark/`), the
official tool precision/recall/F1 and exact match against hand-computed values, and the offline inference loop."""

import json

import pytest

from envace.finmcp import FinMCPError, counts, derived_schemas, load_finmcp, predict_sample, replay_tool, score


def call(name: str, args: dict, cid: str) -> dict:
    return {"id": cid, "type": "function", "index": 0,
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}  # fmt: skip


def assistant(*calls, content=None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": list(calls) or None}


def sample(sid, scenery, level, task, gold_calls, pred_calls, **extra) -> dict:
    """One sample in the official layout; each call list is a list of assistant steps (lists of (name, args))."""

    def msgs(steps, tag):
        out = [{"role": "user", "content": f"question {sid}"}]
        for j, step in enumerate(steps):
            calls = [call(n, a, f"{tag}{sid}_{j}_{k}") for k, (n, a) in enumerate(step)]
            out.append(assistant(*calls))
            out += [
                {"role": "tool", "tool_call_id": c["id"], "content": f"result of {c['function']['name']}"}
                for c in calls
            ]
        out.append(assistant(content="answer"))
        return out

    gold = msgs(gold_calls, "g")
    return {"id": sid, "scenery": scenery, "diff_level": {"turns": 1, "tool_number": sum(map(len, gold_calls)),
            "para_tool_call_number": 0, "level": level}, "tool_list": [[n for n, _ in s] for s in gold_calls],
            "question": f"question {sid}", "answer": "answer", "messages": gold, "task": task,
            "messages_pred": msgs(pred_calls, "p"), **extra}  # fmt: skip


@pytest.fixture
def bench(tmp_path):
    """Three samples (three tasks, two level-1 scenarios) and a failed one that the evaluation drops."""
    samples = [
        # gold [A]; pred [A]: TP 1, FP 0, FN 0; exact
        sample(
            1, "市场分析与研究-宏观经济-市场环境研判", "easy", "single step", [[("A", {"x": 1})]], [[("A", {"x": 2})]]
        ),
        # gold [A, B, B]; pred [B, A, C]: TP 2 (A, B), FP 1 (C), FN 1 (B); not exact
        sample(
            2,
            "基金投资-基金筛选",
            "medium",
            "multi step",
            [[("A", {})], [("B", {"k": "1"}), ("B", {"k": "2"})]],
            [[("B", {})], [("A", {}), ("C", {})]],
        ),
        # gold [A, B]; pred [B, A]: TP 2, FP 0, FN 0; same multiset, other order: not exact
        sample(3, "基金投资-持仓分析", "hard", "multi turn", [[("A", {})], [("B", {})]], [[("B", {})], [("A", {})]]),
        sample(4, "基金投资-基金筛选", "hard", "multi turn", [[("A", {})]], [], error=True),
    ]
    path = tmp_path / "Benchmark" / "benchmark_final.json"
    path.parent.mkdir()
    path.write_text(json.dumps(samples, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def test_counts_are_multiset_differences():
    assert counts(["A", "A", "B"], ["A", "B", "B", "C"]) == (2, 1, 2)
    assert counts([], ["A"]) == (0, 0, 1) and counts(["A"], []) == (0, 1, 0)


def test_scores_match_hand_computed_values(bench):
    samples = load_finmcp(bench.parent)  # a folder resolves to benchmark_final.json
    assert len(samples) == 4
    out = score(samples)
    assert out["dropped_errors"] == 1
    o = out["overall"]
    # per sample (P, R, F1): s1 (1, 1, 1); s2 (2/3, 2/3, 2/3); s3 (1, 1, 1)
    assert o["n"] == 3
    assert o["macro_precision"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert o["macro_recall"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert o["macro_f1"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    # summed: TP 5, FP 1, FN 1
    assert o["micro_precision"] == pytest.approx(5 / 6) and o["micro_recall"] == pytest.approx(5 / 6)
    assert o["micro_f1"] == pytest.approx(5 / 6)
    assert o["exact_match"] == pytest.approx(1 / 3)  # only s1: s3 has the right tools in the wrong order
    assert set(out["by_task"]) == {"single_step", "multi_step", "multi_turn"}
    fund = out["by_scenario"]["基金投资"]
    assert fund["n"] == 2 and fund["micro_precision"] == pytest.approx(4 / 5) and fund["exact_match"] == 0
    assert out["by_difficulty"]["easy"]["macro_f1"] == 1.0
    with_errors = score(samples, drop_errors=False)["overall"]
    assert with_errors["n"] == 4 and with_errors["micro_recall"] == pytest.approx(5 / 7)  # the empty prediction: FN 1


def test_unequal_sets_give_a_lower_asymmetric_score(bench):
    samples = load_finmcp(bench)
    over = [dict(s, messages_pred=s["messages"] + [assistant(call("Z", {}, "z"))]) for s in samples[:3]]
    o = score(over)["overall"]
    assert o["micro_recall"] == 1.0 and o["micro_precision"] < 1.0 and o["exact_match"] == 0.0
    gold = [dict(s, messages_pred=s["messages"]) for s in samples[:3]]
    assert score(gold)["overall"] | {"n": 0} == {"macro_precision": 1.0, "macro_recall": 1.0, "macro_f1": 1.0,
        "micro_precision": 1.0, "micro_recall": 1.0, "micro_f1": 1.0, "exact_match": 1.0, "n": 0}  # fmt: skip


def test_loader_errors_name_the_problem(tmp_path, bench):
    with pytest.raises(FinMCPError, match="not found"):
        load_finmcp(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": 7, "scenery": "a-b", "messages": []}]))
    with pytest.raises(FinMCPError, match=r"sample 7 lacks diff_level \("):
        load_finmcp(bad)
    bad.write_text(json.dumps({"id": 1}))
    with pytest.raises(FinMCPError, match="JSON list"):
        load_finmcp(bad)
    samples = load_finmcp(bench)
    del samples[0]["messages_pred"]
    with pytest.raises(FinMCPError, match="no `messages_pred`"):
        score(samples)


def test_offline_inference_replays_ground_truth_results(bench):
    s = load_finmcp(bench)[1]  # gold: A, then B(k=1), B(k=2)
    assert replay_tool(s, "B", {"k": "2"}) == "result of B"
    assert "not available" in replay_tool(s, "Z", {})
    names = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in derived_schemas([s])}
    assert names == {"A": {}, "B": {"k": {"type": "string"}}}
    script = iter([assistant(call("A", {}, "c1")), assistant(call("B", {"k": "1"}, "c2")), assistant(content="done")])
    seen = []

    def chat(messages, tools):
        seen.append([m["role"] for m in messages])
        return next(script)

    pred = predict_sample(s, chat, derived_schemas([s]))["messages_pred"]
    assert [m["role"] for m in pred] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert pred[2]["tool_call_id"] == "c1" and pred[2]["content"] == "result of A"
    assert seen[0] == ["user"] and seen[2] == ["user", "assistant", "tool", "assistant", "tool"]
    rec = score([{**s, "messages_pred": pred}])["overall"]
    assert rec["micro_precision"] == 1.0 and rec["micro_recall"] == pytest.approx(2 / 3)


def test_malformed_arguments_drop_the_sample(bench, tmp_path):
    """Official inference json.loads the arguments unguarded: the sample fails and `score` drops it."""
    from envace.finmcp import run

    samples = load_finmcp(bench)[:2]
    bad = {"id": "x", "type": "function", "function": {"name": "A", "arguments": '{"k": '}}
    replies = iter([assistant(bad), assistant(content="done")])

    def chat(messages, tools):
        return next(replies, assistant(content="done"))

    scores = run(samples, chat, derived_schemas(samples), tmp_path)
    preds = json.loads((tmp_path / "predictions.json").read_text())
    assert preds[0]["error"] is True and "JSONDecodeError" in preds[0]["error_message"]
    assert scores["dropped_errors"] == 1
