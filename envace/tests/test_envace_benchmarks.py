"""`envace eval --benchmark ...` against a checkpoint served in process (`agentrl_shared.serve`, offline tiny Qwen3):
VitaBench through the vitabench2 CLI (a subprocess), FinMCP-Bench, and BFCL-v4 through bfcl-eval's CLI in its own
uv environment (`slow`: the first run builds envace/bfcl/.venv, about 6 GB).

Run the slow ones from the repository root:
`uv run --locked --extra alfworld --extra scienceworld --extra tau2 pytest -q -m slow envace/tests/test_envace_benchmarks.py`
"""

import json
import os
from pathlib import Path

import pytest

from envace import cli
from envace.bfcl import (
    GOLD_CHECKED,
    MULTI_TURN,
    NEEDS_NETWORK,
    OFFLINE,
    bfcl,
    evaluate,
    run_bfcl,
    scores,
    v4_summary,
)


REPO = Path(__file__).resolve().parents[2]  # tests run from anywhere; envace/bfcl is found from the repository root
PROJECT = REPO / "envace" / "bfcl"


def test_vitabench_cli_runs_the_harness_against_the_served_model(tmp_path):
    harness = "--harness-args=--users U_SAMPLE_02 --max-steps 4 --judge-retries 1 --concurrency 1 --timeout 300"
    cli.main(["eval", "--benchmark", "vitabench", "--output", str(tmp_path), "--max-new-tokens", "8", harness,
              "--user-is-policy", "model.name_or_path=tiny-qwen3"])  # fmt: skip
    payload = json.loads((tmp_path / "benchmarks" / "results.json").read_text())
    assert payload["benchmark"] == "vitabench" and payload["commit"]
    assert "vitabench2 run --agent openai:policy@http://127.0.0.1:" in payload["harness_command"]
    summary = payload["summary"]
    assert summary["num_records"] == 2  # U_SAMPLE_02's two subtasks, each ended and recorded
    agent = summary["usage_this_session"]["agent"]
    assert agent["calls"] >= 2 and agent["completion_tokens"] <= 8 * agent["calls"]  # the served tiny Qwen3, capped
    records = (tmp_path / "benchmarks" / "vitabench" / "results.jsonl").read_text().splitlines()
    assert {json.loads(r)["user_id"] for r in records} == {"U_SAMPLE_02"}


@pytest.mark.parametrize("benchmark, flags, missing", [
    ("tau2", [], "--user-endpoint, --user-model"),
    ("vitabench", ["--user-endpoint", "http://u/v1", "--user-model", "u"], "--judge-endpoint, --judge-model"),
])  # fmt: skip
def test_user_simulator_and_judge_are_not_the_policy_unless_asked(tmp_path, benchmark, flags, missing):
    with pytest.raises(SystemExit, match=f"needs {missing} .*--user-is-policy"):
        cli.main(
            ["eval", "--benchmark", benchmark, *flags, "--output", str(tmp_path), "model.name_or_path=tiny-qwen3"]
        )
    assert not (tmp_path / "benchmarks").exists()  # refused before anything is served or written


def test_finmcp_cli_predicts_and_scores_with_the_served_model(tmp_path):
    def msgs(q, name):
        call = {"id": f"c{q}", "type": "function", "function": {"name": name, "arguments": '{"code": "000001"}'}}
        return [{"role": "user", "content": q}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{q}", "content": '{"nav": 1.2}'},
                {"role": "assistant", "content": "1.2"}]  # fmt: skip

    samples = [{"id": i, "scenery": "基金投资-净值查询", "diff_level": {"turns": 1, "tool_number": 1,
                "para_tool_call_number": 0, "level": "easy"}, "tool_list": [[name]], "task": "single step",
                "messages": msgs(f"q{i}", name)} for i, name in enumerate(["GetFundNav", "SearchFinancialNews"])]  # fmt: skip
    data = tmp_path / "benchmark_stss.json"
    data.write_text(json.dumps(samples, ensure_ascii=False))
    cli.main(["eval", "--benchmark", "finmcp", "--data", str(data), "--output", str(tmp_path / "out"),
              "--max-new-tokens", "8", "model.name_or_path=tiny-qwen3"])  # fmt: skip
    preds = json.loads((tmp_path / "out" / "benchmarks" / "finmcp" / "predictions.json").read_text())
    assert [p["id"] for p in preds] == [0, 1] and not any(p.get("error") for p in preds)
    for p in preds:  # the ground-truth user turn, then the served model's reply
        assert p["messages_pred"][0] == p["messages"][0] and p["messages_pred"][1]["role"] == "assistant"
    scores = json.loads((tmp_path / "out" / "benchmarks" / "results.json").read_text())["scores"]
    assert scores["overall"]["n"] == 2 and set(scores["by_task"]) == {"single_step"}


def test_bfcl_categories_split_offline_and_network():
    assert not set(OFFLINE) & set(NEEDS_NETWORK)
    assert set(NEEDS_NETWORK) == {"web_search_base", "web_search_no_snippet", "memory_vector"}
    with pytest.raises(ValueError, match="need the network"):
        run_bfcl("http://127.0.0.1:9/v1", "/nowhere", Path("/tmp/unused"), ["web_search_base"], project=PROJECT)


# per-category accuracies and entry counts of a hypothetical full offline run, plus two offline memory categories
HAND = {"simple_python": (0.9, 400), "simple_java": (0.5, 100), "simple_javascript": (0.2, 50), "multiple": (0.8, 200),
        "parallel": (0.6, 200), "parallel_multiple": (0.4, 200), "irrelevance": (0.9, 240),
        "live_simple": (0.7, 258), "live_multiple": (0.5, 1053), "live_parallel": (0.25, 16),
        "live_parallel_multiple": (0.5, 24), "live_irrelevance": (0.7, 884), "live_relevance": (1.0, 16),
        "multi_turn_base": (0.4, 200), "multi_turn_miss_func": (0.3, 200), "multi_turn_miss_param": (0.2, 200),
        "multi_turn_long_context": (0.1, 200), "memory_kv": (0.3, 155), "memory_rec_sum": (0.6, 155)}  # fmt: skip


def _scores(hand: dict) -> dict:
    return {c: {"accuracy": a, "correct": round(a * n), "total": n} for c, (a, n) in hand.items()}


def test_bfcl_v4_means_as_the_leaderboard_computes_them():
    """Hand-computed from HAND by the formula of bfcl-eval 2026.3.23's `generate_leaderboard_csv`."""
    v4 = v4_summary(_scores(HAND))
    g = {k: v["accuracy"] for k, v in v4["groups"].items()}
    non_live = ((0.9 + 0.5 + 0.2) / 3 + 0.8 + 0.6 + 0.4) / 4  # simple = mean of the 3 languages, then mean of 4
    live = (0.7 * 258 + 0.5 * 1053 + 0.25 * 16 + 0.5 * 24) / (258 + 1053 + 16 + 24)  # weighted by entries
    assert g["non_live"] == pytest.approx(non_live) and g["non_live"] == pytest.approx(0.5833333333)
    assert g["live"] == pytest.approx(live) and g["live"] == pytest.approx(723.1 / 1351)
    assert g["irrelevance"] == pytest.approx(0.8)  # mean of irrelevance and live_irrelevance; relevance enters none
    assert v4["multi_turn_mean"] == g["multi_turn"] == pytest.approx(0.25)
    offline = (10 * non_live + 10 * live + 10 * 0.8 + 30 * 0.25) / 60
    assert v4["overall_offline"] == pytest.approx(offline) and offline == pytest.approx(0.444761, abs=1e-6)
    agentic = (0.0 + (0.3 + 0.0 + 0.6) / 3) / 2  # web search absent (0); memory_vector absent (0)
    assert g["agentic"] == pytest.approx(0.45)  # over the present memory categories only, and flagged:
    assert v4["groups"]["agentic"]["missing"] == ["web_search_base", "web_search_no_snippet", "memory_vector"]
    assert v4["overall_leaderboard_absent_zero"] == pytest.approx((60 * offline + 40 * agentic) / 100)
    assert not any(v4["groups"][k]["missing"] for k in ("non_live", "live", "irrelevance", "multi_turn"))

    part = v4_summary(_scores({k: v for k, v in HAND.items() if k != "multi_turn_long_context"}))
    assert part["multi_turn_mean"] == pytest.approx(0.3)  # over the three scored ones
    assert part["groups"]["multi_turn"]["missing"] == ["multi_turn_long_context"]
    assert part["overall_offline"] is None and part["overall_leaderboard_absent_zero"] is None


def _write_scores(root: Path, hand: dict) -> None:
    """Score files as `bfcl evaluate` writes them (first line: accuracy, correct_count, total_count)."""
    folder = root / "score" / "Qwen_Qwen3-8B-FC"
    folder.mkdir(parents=True)
    for c, (a, n) in hand.items():
        head = {"accuracy": a, "correct_count": round(a * n), "total_count": n}
        (folder / f"BFCL_v4_{c}_score.json").write_text(json.dumps(head) + "\n")


@pytest.mark.slow
def test_bfcl_v4_means_match_bfcl_evals_own_leaderboard_csv(tmp_path):
    """bfcl-eval's `generate_leaderboard_csv` (envace/bfcl/leaderboard.py) over the same score files writes the
    multi-turn mean and the overall (absent categories at 0) that `v4_summary` computes (its csv rounds to 0.01%)."""
    import csv

    _write_scores(tmp_path, HAND)
    bfcl([str(PROJECT / "leaderboard.py")], tmp_path, PROJECT)
    v4 = v4_summary(scores(tmp_path))
    rows = {n: next(csv.DictReader((tmp_path / "score" / n).open())) for n in ("data_overall.csv",
                                                                             "data_multi_turn.csv")}  # fmt: skip
    overall, multi_turn = rows["data_overall.csv"], rows["data_multi_turn.csv"]
    pct = lambda s: float(s.rstrip("%")) / 100  # noqa: E731
    assert pct(overall["Overall Acc"]) == pytest.approx(v4["overall_leaderboard_absent_zero"], abs=5e-5)
    assert pct(multi_turn["Multi Turn Overall Acc"]) == pytest.approx(v4["multi_turn_mean"], abs=5e-5)
    for column, group in (("Non-Live AST Acc", "non_live"), ("Live Acc", "live"),
                          ("Irrelevance Detection", "irrelevance")):  # fmt: skip
        assert pct(overall[column]) == pytest.approx(v4["groups"][group]["accuracy"], abs=5e-5)


@pytest.mark.slow
def test_bfcl_gold_answers_score_100_and_perturbed_lower(tmp_path):
    """The adapter's result files with BFCL's shipped gold answers score 100% under `bfcl evaluate` in every offline
    category but Java / JavaScript (bfcl.GOLD_CHECKED), apart from the entries no answer can pass (listed by gold.py;
    2 live_simple and 2 live_multiple entries in bfcl-eval 2026.3.23); perturbed answers score lower."""
    gold = tmp_path / "gold"
    bfcl([str(PROJECT / "gold.py"), "--categories", ",".join(GOLD_CHECKED)], gold, PROJECT)
    unsatisfiable = json.loads((gold / "unsatisfiable.json").read_text())
    assert sum(map(len, unsatisfiable.values())) <= 5
    scores = evaluate(gold, GOLD_CHECKED, project=PROJECT)
    assert set(scores) == set(GOLD_CHECKED)
    assert {c: s["correct"] for c, s in scores.items()} == {
        c: s["total"] - len(unsatisfiable[c]) for c, s in scores.items()
    }
    tried = ["simple_python", "parallel_multiple", "irrelevance", "live_relevance", MULTI_TURN[0]]
    bad = tmp_path / "perturbed"
    bfcl([str(PROJECT / "gold.py"), "--categories", ",".join(tried), "--perturbed"], bad, PROJECT)
    lower = evaluate(bad, tried, project=PROJECT)
    assert all(lower[c]["accuracy"] < 0.5 for c in tried), lower


@pytest.mark.slow
def test_bfcl_generate_against_the_served_tiny_qwen3(tmp_path):
    """`bfcl generate` with BFCL's Qwen3 FC handler talks to our CPU server's /v1/completions on a slice."""
    from agentrl_shared.models import model_path
    from agentrl_shared.serve import ChatModel, OpenAIServer

    ids = {"simple_python": ["simple_python_0", "simple_python_1"], "irrelevance": ["irrelevance_0"]}
    with OpenAIServer(ChatModel("tiny-qwen3", max_new_tokens=8), "policy") as server:
        result = run_bfcl(server.url, model_path("tiny-qwen3"), tmp_path, ids=ids, project=PROJECT)
    assert {c: s["total"] for c, s in result["scores"].items()} == {"simple_python": 2, "irrelevance": 1}
    assert result["scores"]["simple_python"]["accuracy"] == 0.0  # 8 random tokens are no valid call
    lines = (tmp_path / "result").rglob("BFCL_v4_simple_python_result.json")
    entries = [json.loads(x) for f in lines for x in f.read_text().splitlines()]
    assert sorted(e["id"] for e in entries) == ids["simple_python"]
    assert os.environ.get("BFCL_PROJECT_ROOT") is None  # the isolated run's settings did not leak into ours
