"""`sdar report`: paper metrics computed as the paper computes them; runs copied into results/ only by report."""

import json

import pytest

from agentrl_shared.report import collect_runs
from sdar.report import RUN_FILES, paper_metric


# Table 1, GRPO on Qwen2.5-3B-Instruct: per-source EM (%) and the reported "SQA Avg" 36.4
TABLE1_GRPO_3B = {"nq": 39.3, "triviaqa": 60.6, "popqa": 41.1, "hotpotqa": 37.4, "2wikimultihopqa": 34.6,
                  "musique": 15.4, "bamboogle": 26.4}  # fmt: skip
# Search-R1 test-set sizes per source, for the pooled EM the paper does not report
TEST_SIZES = {"nq": 3610, "triviaqa": 11313, "popqa": 14267, "hotpotqa": 7405, "2wikimultihopqa": 12576,
              "musique": 2417, "bamboogle": 125}  # fmt: skip


def test_search_qa_average_is_the_unweighted_mean_of_the_seven_sources():
    final = {f"{k}_success_rate": v / 100 for k, v in TABLE1_GRPO_3B.items()}
    pooled = sum(TABLE1_GRPO_3B[k] * n for k, n in TEST_SIZES.items()) / sum(TEST_SIZES.values()) / 100
    final["success_rate_mean"] = pooled
    assert round(100 * paper_metric("search_qa", final), 1) == 36.4
    assert abs(100 * pooled - 36.4) > 3  # pooling would weight TriviaQA and PopQA by their size


def test_alfworld_average_is_pooled_over_games_and_webshop_is_success():
    final = {"success_rate_mean": 0.75, "pick_success_rate": 0.912, "look_success_rate": 0.625}
    assert paper_metric("alfworld", final) == 0.75
    assert paper_metric("webshop", {"success_rate_mean": 0.633}) == 0.633
    with pytest.raises(ValueError, match="per-source"):
        paper_metric("search_qa", {"success_rate_mean": 0.3})


def test_report_copies_finished_runs_only(tmp_path):
    runs, results = tmp_path / "runs", tmp_path / "results"
    done = runs / "cpu" / "sdar" / "seed0"
    done.mkdir(parents=True)
    (done / "results.json").write_text(json.dumps({"final": {}}))
    (done / "eval_curve.jsonl").write_text("")
    (runs / "cpu" / "grpo" / "seed0").mkdir(parents=True)  # unfinished: no results.json
    assert collect_runs(runs, results, RUN_FILES) == 1
    assert (results / "cpu" / "sdar" / "seed0" / "results.json").exists()
    assert not (results / "cpu" / "grpo").exists()
