"""`envace report`'s CPU reward plot (a line per trained method from its same-seed start point to after RL) and its
table paired to caller-only on the episode reward per panel instance."""

import json

from envace.report import CPU_METHODS, reward_outcomes, reward_plot


def payload(seed: int, reward: float, rollouts: int | None = None) -> dict:
    p = {"seed": seed, "final": {"reward_mean": reward}}
    return p if rollouts is None else {**p, "rollouts": rollouts}


def test_reward_plot_pairs_each_trained_seed_with_its_start_point(tmp_path):
    path = tmp_path / "reward.png"
    # a trained seed without a same-seed untrained run has no start point: nothing to draw
    assert not reward_plot({"untrained": [payload(0, 0.6)], "envace": [payload(1, 0.7, 4)]}, path)
    assert not path.exists()
    runs = {"untrained": [payload(0, 0.6), payload(1, 0.5)], "envace": [payload(0, 0.7, 4), payload(1, 0.5, 4)],
            "caller_only_real": [payload(0, 0.8, 4)]}  # fmt: skip
    assert reward_plot(runs, path)
    assert path.stat().st_size > 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reward_outcomes_and_the_table_paired_to_caller_only(tmp_path):
    """The last evaluation of a training run (`eval_episodes.jsonl`) or an evaluation's `episodes.jsonl`; EnvACE -
    caller-only on two tasks x two seeds: (+50, 0) at seed 0, (0, -100) at seed 1, by hand."""
    from agentrl_shared.report import paired_table

    rewards = {"caller_only_real": {0: [0.5, 1.0], 1: [1.0, 1.0]}, "envace": {0: [1.0, 1.0], 1: [1.0, 0.0]}}
    for method, by_seed in rewards.items():
        for seed, values in by_seed.items():
            run = tmp_path / "cpu" / method / f"seed{seed}"
            run.mkdir(parents=True)
            (run / "results.json").write_text(json.dumps({"seed": seed}))
            first = [{"rollouts": 0, "task_id": t, "seed": 7, "reward": 0.0} for t in "ab"]  # before training
            last = [{"rollouts": 4, "task_id": t, "seed": 7, "reward": v} for t, v in zip("ab", values, strict=True)]
            (run / "eval_episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first + last))
    assert reward_outcomes(tmp_path / "cpu" / "envace" / "seed1") == {("a", 7): 100.0, ("b", 7): 0.0}
    evaluation = tmp_path / "cpu" / "untrained" / "seed0"
    evaluation.mkdir(parents=True)
    (evaluation / "results.json").write_text(json.dumps({"seed": 0}))
    (evaluation / "episodes.jsonl").write_text("".join(json.dumps({"task_id": t, "seed": 7, "reward": 0.5}) + "\n"
                                                       for t in "ab"))  # fmt: skip
    assert reward_outcomes(evaluation) == {("a", 7): 50.0, ("b", 7): 50.0}
    assert reward_outcomes(tmp_path) == {}  # a run filed before the records were kept
    names = {method: label.replace(" N={n}", "") for method, label in CPU_METHODS.items()}
    table = paired_table(tmp_path, "cpu", names, "caller_only_real", reward_outcomes, "reward R")
    assert "reward R pts (paired mean)" in table.splitlines()[0]
    envace = next(line for line in table.splitlines() if line.startswith("| EnvACE"))
    cells = [c.strip() for c in envace.strip("|").split("|")]
    assert cells[1] == "-12.5" and cells[4] == "2 x 2" and cells[5] == "+25.0 / -50.0" and cells[6] == "1 / 1"
    untrained = next(line for line in table.splitlines() if line.startswith("| untrained"))
    assert [c.strip() for c in untrained.strip("|").split("|")][5] == "-25.0"  # seed 0 only: 50 - 75
