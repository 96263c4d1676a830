"""`envace report`'s CPU reward plot: a line per trained method from its same-seed start point to after RL."""

from envace.report import reward_plot


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
