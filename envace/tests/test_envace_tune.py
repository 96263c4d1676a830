"""`envace tune` (the CPU plan's learning rate, chosen on the validation split): the choice rule on hand-made
summaries, the runs end to end on the smoke config (tiny Qwen3, scripted generation as in the mechanisms test), the
validation split disjoint from the panel, the README table, and the one-line errors (no validation split, an unknown
`reproduce --methods` entry)."""

import json
import shutil
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

import agentrl_shared.trainer
from agentrl_shared.smoke import error_line
from envace.cli import main
from envace.data import generate_tasks
from envace.report import report
from envace.tune import choose


def summary(valid: float, reward: float) -> dict:
    return {"rehearsal_valid": valid, "reward_mean": reward}


def test_choose_keeps_the_rehearsal_valid_then_takes_the_best_reward():
    ref = summary(0.8, 0.5)  # floor 0.9 x 0.8 = 0.72
    cands = {2e-5: summary(0.5, 0.9), 1e-5: summary(0.75, 0.6), 5e-6: summary(0.8, 0.6), 2e-6: summary(0.9, 0.4)}
    assert choose(ref, cands) == 5e-6  # 2e-5 broke the rehearsal role; 1e-5 and 5e-6 tie on reward, 5e-6 more valid
    cands[1e-5] = summary(0.8, 0.6)
    assert choose(ref, cands) == 5e-6  # a full tie: the smaller learning rate
    assert choose(ref, {2e-5: summary(0.1, 0.9), 1e-5: summary(0.3, 0.2)}) == 1e-5  # none kept: the most valid


@pytest.mark.slow  # about 8 min on one core: a training run's backward over the tiny model's 151k vocabulary
def test_tune_end_to_end_on_the_validation_split(tmp_path, monkeypatch):
    tasks = generate_tasks(8, seed=0) + generate_tasks(4, seed=1_000_000) + generate_tasks(2, seed=3_000_000)
    monkeypatch.setattr(agentrl_shared.trainer, "trainer_generate_fn",
                        lambda trainer: ScriptedPolicy(trainer.processing_class, tasks))  # fmt: skip
    runs = tmp_path / "runs"
    main(["tune", "--config", "smoke", "--lrs", "0.01", "--output", str(runs), "env.num_val_tasks=2"])
    val = [t["task_id"] for t in generate_tasks(2, seed=3_000_000)]
    panel = [t["task_id"] for t in generate_tasks(2, seed=1_000_000)]
    assert not set(val) & set(panel)
    for method in ("tune_warmstart", "tune_lr0.01"):
        payload = json.loads((runs / "cpu" / method / "seed0" / "results.json").read_text())
        final = payload["final"]
        assert final["task_ids"] == val, method  # measured on the validation split, never the panel
        # the scripted rehearsal copies the ground truth: every rehearsed call is valid, every episode won
        assert final["rehearsal_valid"] == final["rehearsal_parsed"] == 1.0 and final["rehearsal_calls"] >= 2
        assert final["reward_mean"] == final["success_mean"] == final["rehearsal_success_mean"] == 1.0
        if method != "tune_warmstart":
            assert payload["rollouts"] == 2 and payload["config"]["trainer"]["learning_rate"] == float(method[7:])

    readme = tmp_path / "README.md"
    package = Path(__file__).resolve().parents[1]
    shutil.copy(package / "README.md", readme)
    shutil.copy(package / "paper_results.json", tmp_path / "paper_results.json")
    report(readme, runs)
    block = readme.read_text().split("<!-- tune-cpu:start -->")[1].split("<!-- tune-cpu:end -->")[0]
    assert "| warm start (no RL) | 100.0 |" in block
    assert "| EnvACE, lr 0.01 (chosen) | 100.0 |" in block
    assert f"`{val[0]}` .. `{val[-1]}`" in block


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["tune", "--config", "smoke"], "envace: envace tune needs generated tasks with a validation split"),
        (["reproduce", "--methods", "envace,nope"], "envace: Unknown method(s) ['nope']"),
    ],
)
def test_bad_plan_is_one_line(argv, start):
    assert error_line(main, argv).startswith(start)
