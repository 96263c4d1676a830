"""`envace mechanisms` end to end on the smoke config (tiny Qwen3, scripted generation, seconds): the results file's
provenance and panel, the call counts against the rehearsals the policy was asked for, the comparison with the real
tools (a rehearsal that copies the ground truth matches, one that alters every value does not, and the episodes
played on it fail where the real tools' succeed), the report block, and the one-line error for a missing warm start.

Generation is scripted (`scripted.ScriptedPolicy`, as in the smoke test): a random tiny model never emits a tool
call, so it would never rehearse one.
"""

import json
import shlex
import shutil
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

import agentrl_shared.trainer
from agentrl_shared.models import model_path
from agentrl_shared.smoke import error_line
from envace.cli import main
from envace.data import generate_tasks
from envace.mechanisms import compare, table
from envace.report import report


def scripted(monkeypatch, **kwargs) -> list[ScriptedPolicy]:
    policies = []

    def fake(trainer):  # called per generation; counts add up over the list
        policies.append(ScriptedPolicy(trainer.processing_class, generate_tasks(4, seed=1_000_000), **kwargs))
        return policies[-1]

    monkeypatch.setattr(agentrl_shared.trainer, "trainer_generate_fn", fake)
    return policies


def run(tmp_path: Path, with_envace: bool) -> tuple[dict, list[str], Path]:
    runs = tmp_path / "runs"
    runs.mkdir()
    if with_envace:  # the tiny model stands in for EnvACE-final
        (runs / "cpu" / "envace" / "seed0").mkdir(parents=True)
        (runs / "cpu" / "envace" / "seed0" / "final").symlink_to(Path(model_path("tiny-qwen3")))
    argv = ["mechanisms", "--config", "smoke", "--runs", str(runs), "--seed", "0", "--output",
            str(runs / "cpu" / "mechanisms")]  # fmt: skip
    main(argv)
    return json.loads((runs / "cpu" / "mechanisms" / "mechanisms.json").read_text()), argv, runs


def test_compare_by_hand():
    assert compare({"a": 1, "b": 2}, {"b": 2.0, "a": 1}) == {"match": True, "field_agreement": 1.0, "key_overlap": 1.0}
    assert compare({"a": 1, "b": 2}, {"a": 1, "b": 3}) == {"match": False, "field_agreement": 0.5, "key_overlap": 1.0}
    got = compare({"a": 1, "c": 0}, {"a": 1, "b": 2})  # keys of either: a, b, c
    assert got == {"match": False, "field_agreement": pytest.approx(1 / 3), "key_overlap": pytest.approx(1 / 3)}
    assert compare(None, {"a": 1}) == {"match": False, "field_agreement": 0.0, "key_overlap": 0.0}  # did not parse
    assert compare([{"a": 1}], {"a": 1}) == {"match": False, "field_agreement": 0.0, "key_overlap": 0.0}


def test_mechanisms_counts_and_a_faithful_rehearsal_matches_the_real_tools(tmp_path, monkeypatch):
    policies = scripted(monkeypatch)
    payload, argv, runs = run(tmp_path, with_envace=True)
    assert payload["commit"] != "unknown" and payload["command"] == shlex.join(["envace", *argv])
    panel = [t["task_id"] for t in generate_tasks(2, seed=1_000_000)]  # smoke.yaml: eval_episodes 2, seed 0
    assert payload["panel"]["task_ids"] == panel and payload["panel"]["instances"] == [[t, 0] for t in panel]
    assert list(payload["models"]) == ["untrained", "envace"]
    rehearsals = 0
    for entry in payload["models"].values():
        calls = entry["calls"]
        n = calls["all"]["calls"]
        assert n == len(entry["call_records"]) >= 2  # at least one call per episode
        assert calls["won"]["calls"] + calls["failed"]["calls"] == n
        assert calls["few_shot"]["calls"] + calls["other"]["calls"] == n
        # the scripted rehearsal copies the ground-truth result of the gold call, which the real tool returns
        for key in ("parsed", "valid", "match", "field_agreement", "key_overlap", "in_few_shot"):
            assert calls["all"][key] == 1.0, key
        for record in entry["call_records"]:
            assert record["real"] == json.loads(record["rehearsal"].split("<execution_result>\n")[1].split("\n")[0])
        assert entry["rehearsal"]["summary"]["success_mean"] == entry["real"]["summary"]["success_mean"] == 1.0
        assert entry["paired"] == {"both": 2, "rehearsal_only": 0, "real_only": 0, "neither": 0}
        assert {"model", "fingerprint", "commit", "command", "seconds"} <= set(entry)
        rehearsals += n
    # every rehearsal prompt the policy answered is one counted call (the real-tool plays rehearse nothing)
    assert sum(p.calls["simulator"] for p in policies) == rehearsals

    readme = tmp_path / "README.md"
    package = Path(__file__).resolve().parents[1]
    shutil.copy(package / "README.md", readme)
    shutil.copy(package / "paper_results.json", tmp_path / "paper_results.json")
    report(readme, runs)  # files runs/cpu/mechanisms/mechanisms.json into results/, then rebuilds the block
    assert (tmp_path / "results" / "cpu" / "mechanisms" / "mechanisms.json").is_file()
    block = readme.read_text().split("<!-- mechanisms-cpu:start -->")[1].split("<!-- mechanisms-cpu:end -->")[0]
    commit = payload["commit"]
    for label in ("untrained (warm start, no RL)", "EnvACE-final"):
        n = payload["models"]["untrained" if label.startswith("untrained") else "envace"]["calls"]["all"]["calls"]
        assert f"| {label} | {n} / {n} / 0 | 100.0 / 100.0 / n/a | 100.0 |" in block
        assert f"| 100.0 / 100.0 | 100.0 / 100.0 | {commit} |" in block


def test_a_wrong_rehearsal_lowers_the_match_and_the_untrained_row_runs_alone(tmp_path, monkeypatch):
    scripted(monkeypatch, wrong_rehearsal=True)  # every value of the ground-truth result altered
    payload, _, _ = run(tmp_path, with_envace=False)
    assert list(payload["models"]) == ["untrained"]
    entry = payload["models"]["untrained"]
    calls = entry["calls"]["all"]
    assert calls["parsed"] == calls["valid"] == calls["key_overlap"] == 1.0  # well-formed, the right keys
    assert calls["match"] == calls["field_agreement"] == 0.0  # but no value the real tool returns
    # the caller reports the rehearsed value: the reply item fails under rehearsal, passes with the real tools
    assert entry["rehearsal"]["summary"]["success_mean"] == 0.0 < entry["real"]["summary"]["success_mean"] == 1.0
    assert entry["paired"]["real_only"] == 2 and entry["calls"]["failed"]["calls"] == calls["calls"]
    rows = table(payload)
    assert "| EnvACE-final | not run |" in rows and "| untrained (warm start, no RL) |" in rows


def test_a_missing_warm_start_is_one_line_naming_the_command(tmp_path):
    message = error_line(main, ["mechanisms", "--config", "tooltasks_smollm2-135m_cpu", "--runs",
                                str(tmp_path / "none"), "--output", str(tmp_path / "mech")])  # fmt: skip
    assert message.startswith("envace: no warm-started model at ") and "envace reproduce" in message
