"""`skillrise report`'s paired table: repeat pass@1 per panel instance from the runs' trial records, against GRPO."""

import json

import pytest

from skillrise.report import METHOD_NAMES, repeat_outcomes


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _trial(task, seed, won, failed=False, **extra):
    return {"task_ids": [task] * 3, "seed": seed, "won": won, "failed": failed, **extra}


def test_repeat_outcomes_read_the_last_validation_or_an_evaluation(tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    _write(train / "eval_trials.jsonl", [
        _trial("a", 0, [True, True, True], rollouts=4, mode="repeat"),  # an earlier validation: ignored
        _trial("a", 0, [False, True, True], rollouts=12, mode="repeat"),  # pass@1 lost, pass@2 won: 0
        _trial("b", 0, [True, False, False], rollouts=12, mode="repeat"),
        _trial("c", 0, [True, True, True], failed=True, rollouts=12, mode="repeat"),  # a failed trial counts as lost
        _trial("a", 0, [True, True, True], rollouts=12, mode="cross"),  # cross mode: not this metric
    ])  # fmt: skip
    assert repeat_outcomes(train) == {(("a",) * 3, 0): 0.0, (("b",) * 3, 0): 100.0, (("c",) * 3, 0): 0.0}
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    _write(evaluation / "trials_repeat.jsonl", [_trial("a", 1, [True, False, False])])
    assert repeat_outcomes(evaluation) == {(("a",) * 3, 1): 100.0}
    assert repeat_outcomes(tmp_path) == {}  # a run filed before the records were kept


def test_paired_table_against_grpo_by_hand(tmp_path):
    """Two training seeds x two instances: SkillRise - GRPO = (+100, 0) at seed 0 and (0, -100) at seed 1."""
    from agentrl_shared.report import paired_table

    won = {"grpo": {0: [False, True], 1: [True, True]}, "skillrise": {0: [True, True], 1: [True, False]}}
    for method, by_seed in won.items():
        for seed, outcomes in by_seed.items():
            run = tmp_path / "cpu" / method / f"seed{seed}"
            run.mkdir(parents=True)
            (run / "results.json").write_text(json.dumps({"seed": seed}))
            _write(run / "eval_trials.jsonl", [_trial(task, 100, [w, w, w], rollouts=12, mode="repeat")
                                               for task, w in zip("ab", outcomes, strict=True)])  # fmt: skip
    table = paired_table(tmp_path, "cpu", METHOD_NAMES, "grpo", repeat_outcomes)
    row = next(line for line in table.splitlines() if line.startswith("| SkillRise |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "+0.0" and cells[4] == "2 x 2" and cells[5] == "+50.0 / -50.0" and cells[6] == "1 / 1"
    assert "| No carry | not run |" in table  # no runs, no row to pair
    with pytest.raises(ValueError, match="seed 0: the method's and the baseline's final evaluations played"):
        _write(tmp_path / "cpu" / "skillrise" / "seed0" / "eval_trials.jsonl",
               [_trial("z", 100, [True] * 3, rollouts=12, mode="repeat")])  # fmt: skip
        paired_table(tmp_path, "cpu", METHOD_NAMES, "grpo", repeat_outcomes)
