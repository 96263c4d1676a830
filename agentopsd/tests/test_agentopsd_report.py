"""`agentopsd report`: README tables from result files only; `--compare` files a `make compare` output."""

import inspect
import json
import shutil
from pathlib import Path

import pytest

from agentopsd.report import paper_metric, report
from agentrl_shared.config import ConfigError


PACKAGE = Path(__file__).resolve().parent.parent
BLOCKS = (
    "results-cpu",
    "training-cpu",
    "horizon-cpu",
    "paired-cpu",
    "mechanisms-cpu",
    "results-paper",
    "bench",
    "compare-textrooms",
)


def readme(tmp_path) -> Path:
    pkg = tmp_path / "agentopsd"
    pkg.mkdir()
    shutil.copy(PACKAGE / "paper_results.json", pkg / "paper_results.json")
    path = pkg / "README.md"
    path.write_text("".join(f"<!-- {b}:start -->\nold\n<!-- {b}:end -->\n" for b in BLOCKS))
    return path


def finished_run(runs: Path, method: str, success: float) -> None:
    run = runs / "cpu" / method / "seed0"
    run.mkdir(parents=True)
    final = {"success_rate_mean": success, "chain1_success_rate": 0.75, "chain4_success_rate": 0.25}
    curve = [{"rollouts": 3, "success_rate_mean": success}]
    # two rollouts' metrics and a step's loss: a run's mean of a metric is over the entries that have it
    log = [{"env/all_fail_group_ratio": 0.5, "agentopsd/credit_accuracy": 0.4, "agentopsd/credit_chance": 0.3},
           {"loss": 0.1}, {"env/all_fail_group_ratio": 0.25, "agentopsd/credit_accuracy": 0.6}]  # fmt: skip
    payload = {"method": method, "seed": 0, "commit": "abc1234", "env": "textrooms", "model": "smollm2-135m",
               "final": final, "curve": curve, "steps": 12, "log_history": log, "precision": "bf16"}  # fmt: skip
    (run / "results.json").write_text(json.dumps(payload))
    # the final evaluation's episodes (the one at 3 rollouts; the one before training is not the final one)
    episodes = [{"rollouts": 0, "task_id": "t0", "seed": 1000, "turns": 9, "won": False, "failed": False}] + [
        {"rollouts": 3, "task_id": f"t{i}", "seed": 1000, "turns": t, "won": w, "failed": False}
        for i, (t, w) in enumerate(((2, True), (4, True), (6, False), (8, False)))
    ]
    (run / "eval_episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))


def test_report_files_runs_and_the_compare_table(tmp_path):
    path, runs, compare = readme(tmp_path), tmp_path / "runs", tmp_path / "compare" / "textrooms"
    finished_run(runs, "agentopsd", 0.5)
    (runs / "cpu" / "grpo" / "seed0").mkdir(parents=True)  # unfinished: no results.json, stays "not run"
    compare.mkdir(parents=True)
    (compare / "compare.md").write_text("| Env | Method |\n|---|---|\n| textrooms | RLSD |\n\nSkillRise: not a row.\n")
    (compare / "compare.json").write_text("{}")
    (compare / "learning_curves.png").write_bytes(b"png")
    report(path, runs, [compare])
    text = path.read_text()
    row = "| TextRooms chains | smollm2-135m | bf16 | AgentOPSD |"
    assert f"{row} success % (valid_seen, greedy) | 50.0 (1 seed) | abc1234 |" in text
    assert f"{row} chains of 1 % | 75.0 (1 seed) | abc1234 |" in text
    assert f"{row} chains of 2 % | not run | abc1234 |" in text  # a length the panel did not have
    assert "| TextRooms chains | - | - | GRPO | success % (valid_seen, greedy) | not run | - |" in text
    assert "| AgentOPSD | 12.0 (1 seed) | 37.5 (1 seed) | 50.0 (1 seed) / not run / 30.0 (1 seed) | not run |" in text
    assert "<!-- compare-textrooms:start -->\n| Env | Method |\n|---|---|\n| textrooms | RLSD |\n\nSkillRise: not a " \
           "row.\n<!-- compare-textrooms:end -->" in text  # fmt: skip
    assert "<!-- bench:start -->\nnot run\n<!-- bench:end -->" in text
    # horizon: success 100, 100, 0, 0 at 2, 4, 6, 8 turns: slope -400 / 20 = -20 points per turn
    assert "| AgentOPSD | -20.00 (1 seed) | -20.00 | 4 |" in text and "| GRPO | not run | not run | 0 |" in text
    assert "| AgentOPSD | not run | not run | not run | 0 | - | - |" in text  # no finished GRPO run to pair with
    assert (path.parent / "results" / "cpu" / "horizon.png").stat().st_size > 0
    filed = path.parent / "results"
    assert (filed / "cpu" / "agentopsd" / "seed0" / "results.json").exists()
    assert sorted(p.name for p in (filed / "compare" / "textrooms").iterdir()) == [
        "compare.json", "compare.md", "learning_curves.png"
    ]  # fmt: skip
    assert (filed / "cpu" / "learning_curves.png").stat().st_size > 0


def test_report_cli_files_every_compare_folder_given(tmp_path):
    """`agentopsd report --compare A --compare B` (what `make report` passes when several plans ran) files both."""
    from agentopsd.cli import main

    path = readme(tmp_path)
    path.write_text(
        path.read_text() + "<!-- compare-textrooms_long:start -->\nold\n<!-- compare-textrooms_long:end -->\n"
    )
    folders = [tmp_path / "compare" / name for name in ("textrooms", "textrooms_long")]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "compare.md").write_text(f"| {folder.name} |\n")
        (folder / "compare.json").write_text("{}")
        (folder / "learning_curves.png").write_bytes(b"png")
    main(["report", "--readme", str(path), "--compare", str(folders[0]), "--compare", str(folders[1])])
    text = path.read_text()
    for name in ("textrooms", "textrooms_long"):
        assert f"<!-- compare-{name}:start -->\n| {name} |\n<!-- compare-{name}:end -->" in text
        assert (path.parent / "results" / "compare" / name / "compare.md").exists()


def test_report_refuses_an_unfinished_compare_folder(tmp_path):
    compare = tmp_path / "compare" / "textrooms"
    compare.mkdir(parents=True)
    (compare / "compare.md").write_text("| a |\n")
    with pytest.raises(ConfigError, match="no compare.json, learning_curves.png: run `make compare ENV=textrooms`"):
        report(readme(tmp_path), None, [compare])


def test_paper_cells_are_computed_as_the_paper_computes_them(tmp_path):
    """Search-QA: unweighted mean of the 7 per-source EMs (Table-1 style, as sdar's report); ALFWorld pooled success;
    WebShop success and the WebShop score."""
    per_source = {"nq": 0.393, "triviaqa": 0.606, "popqa": 0.411, "hotpotqa": 0.374, "2wikimultihopqa": 0.346,
                  "musique": 0.154, "bamboogle": 0.264}  # GRPO-3B in SDAR Table 1: avg 36.4  # fmt: skip
    final = {"success_rate_mean": 0.5, **{f"{s}_success_rate": v for s, v in per_source.items()}}
    assert round(100 * paper_metric("search_qa", final), 1) == 36.4  # pooled EM (0.5) would read 50.0
    assert paper_metric("alfworld", {"success_rate_mean": 0.75, "pick_success_rate": 0.1}) == 0.75
    path = readme(tmp_path)
    runs = tmp_path / "runs"
    for env, extra in (("search_qa", final), ("webshop", {"success_rate_mean": 0.6, "score_mean": 0.7})):
        run = runs / "paper" / "grpo" / f"seed0_{env}"
        run.mkdir(parents=True)
        payload = {"method": "grpo", "seed": 0, "commit": "abc1234", "env": env, "model": "Qwen/Qwen2.5-7B-Instruct",
                   "final": extra, "curve": []}  # fmt: skip
        (run / "results.json").write_text(json.dumps(payload))
    report(path, runs)
    text = path.read_text()
    assert (
        "| Search-QA | Qwen2.5-7B-Instruct | GRPO | Search-QA exact match % (unweighted mean of the 7 sources) | n/a | 36.4 (1 seed)"
        in text
    )
    assert (
        "| WebShop | Qwen2.5-7B-Instruct | GRPO | WebShop score (mean task score x 100) | n/a | 70.0 (1 seed)" in text
    )


def test_paper_metric_is_a_word_for_word_copy_of_sdars():
    # duplicated on purpose (a package needs only agentrl_shared); the copies must stay identical
    sdar_src = PACKAGE.parent / "sdar" / "src" / "sdar" / "report.py"
    if not sdar_src.exists():
        pytest.skip("sdar package not beside this one (a copied package)")
    assert inspect.getsource(paper_metric) in sdar_src.read_text()
