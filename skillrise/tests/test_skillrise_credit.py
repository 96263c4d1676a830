"""`skillrise.credit` against hand-computed values: trial returns, de-duplicated mean-centred advantages; and the shared
penalty and GRPO row advantages SkillRise uses (0.5 penalty, the GRPO baseline)."""

import pytest
import torch

from agentrl_shared.trainer import grpo_row_advantages, row_rewards
from skillrise.credit import mean_centered_advantages, trial_returns


def test_trial_returns_k3_by_hand():
    solve, curate = trial_returns([10.0, 0.0, 10.0])
    assert solve == [10.0, 0.0, 10.0]
    # curate_0 = 0.6 * r_1 + 0.36 * r_2 = 0 + 3.6; curate_1 = 0.6 * r_2 = 6
    assert curate == pytest.approx([3.6, 6.0])
    solve, curate = trial_returns([0.0, 10.0, 10.0])
    assert curate == pytest.approx([6.0 + 3.6, 6.0])


def test_trial_returns_k4_gamma_and_edges():
    _, curate = trial_returns([1.0, 2.0, 3.0, 4.0], gamma=0.5)
    # p=0: .5*2 + .25*3 + .125*4 = 1 + .75 + .5; p=1: .5*3 + .25*4 = 2.5; p=2: .5*4 = 2
    assert curate == pytest.approx([2.25, 2.5, 2.0])
    assert trial_returns([10.0]) == ([10.0], [])  # K = 1: no curate step
    assert trial_returns([0.0, 0.0, 0.0]) == ([0.0, 0.0, 0.0], [0.0, 0.0])


def test_row_rewards_penalise_invalid_rows_only():
    out = row_rewards(torch.tensor([10.0, 10.0, 0.0]), torch.tensor([True, False, False]), penalty_coef=0.5)
    assert out.tolist() == [10.0, 9.5, -0.5]


def test_mean_centered_dedups_by_trial():
    # group 0, position 0, role play: trial a has 3 solve turns (R = 10), trial b has 1 (R = 0).
    # Row-level mean would be 7.5; the trial-level mean is (10 + 0) / 2 = 5.
    values = [10.0, 10.0, 10.0, 0.0]
    keys = [(0, 0, "play")] * 4
    trajs = ["a", "a", "a", "b"]
    assert mean_centered_advantages(values, keys, trajs).tolist() == [5.0, 5.0, 5.0, -5.0]


def test_mean_centered_first_seen_value_and_penalised_row():
    # trial a's first row is 10, a later penalised row of a is 9.5: the baseline uses a's first-seen 10,
    # the penalised row keeps its own R: A = 9.5 - mean(10, 0) = 4.5
    values = [10.0, 9.5, 0.0]
    keys = [(0, 0, "play")] * 3
    out = mean_centered_advantages(values, keys, ["a", "a", "b"])
    assert out.tolist() == [5.0, 4.5, -5.0]


def test_mean_centered_roles_positions_groups_never_mix_and_singletons_use_zero():
    values = [10.0, 0.0, 6.0, 3.6, 4.0, 7.0]
    keys = [(0, 0, "play"), (0, 0, "play"), (0, 0, "curate"), (0, 0, "curate"), (0, 1, "play"), (1, 0, "play")]
    trajs = ["a", "b", "a", "b", "a", "c"]
    out = mean_centered_advantages(values, keys, trajs)
    # play p0: mean 5 -> 5, -5; curate p0: mean 4.8 -> 1.2, -1.2; (0,1,play) and group 1 are single trials: A = R
    assert out.tolist() == pytest.approx([5.0, -5.0, 1.2, -1.2, 4.0, 7.0])


def test_mean_centered_no_std_division_and_std_mode():
    values, keys, trajs = [4.0, 0.0, 2.0], [(0, 0, "play")] * 3, ["a", "b", "c"]
    assert mean_centered_advantages(values, keys, trajs).tolist() == pytest.approx([2.0, -2.0, 0.0])
    # mean_std_norm: unbiased std of (4, 0, 2) = 2
    out = mean_centered_advantages(values, keys, trajs, mode="mean_std_norm", eps=0.0)
    assert out.tolist() == pytest.approx([1.0, -1.0, 0.0])
    with pytest.raises(ValueError, match="mean_norm, mean_std_norm"):
        mean_centered_advantages(values, keys, trajs, mode="grpo")


def test_mean_centered_matches_naive_loop():
    g = torch.Generator().manual_seed(0)
    n = 40
    values = torch.randint(0, 3, (n,), generator=g).float() * 5
    keys = [(int(torch.randint(0, 2, (1,), generator=g)), int(torch.randint(0, 3, (1,), generator=g)),
             "play" if torch.rand(1, generator=g) < 0.7 else "curate") for _ in range(n)]  # fmt: skip
    trajs = [int(torch.randint(0, 4, (1,), generator=g)) for _ in range(n)]
    out = mean_centered_advantages(values, keys, trajs)
    for i in range(n):
        first = {}
        for j in range(n):
            if keys[j] == keys[i] and trajs[j] not in first:
                first[trajs[j]] = values[j].item()
        base = sum(first.values()) / len(first) if len(first) > 1 else 0.0
        assert out[i].item() == pytest.approx(values[i].item() - base)


def test_grpo_row_advantages_by_hand():
    out = grpo_row_advantages(torch.tensor([10.0, 0.0, 10.0, 5.0]), torch.tensor([0, 0, 0, 1]), eps=0.0)
    std = torch.tensor([10.0, 0.0, 10.0]).std(unbiased=True).item()
    assert out[:3].tolist() == pytest.approx([(10 - 20 / 3) / std, (0 - 20 / 3) / std, (10 - 20 / 3) / std])
    assert out[3].item() == pytest.approx(5.0)


def test_gigpo_step_returns_follow_trial_rows():
    """Step returns are the episode's discounted rewards (reward_scale * won on the last step), in the order
    `Trial.rows()` gives the rows (what `_score` feeds `gigpo_advantages`, with each row's anchor)."""
    from agentrl_shared.rollout import Episode, Row
    from skillrise.trainer import gigpo_step_returns, trial_row_returns
    from skillrise.trial import Trial

    def row(k, anchor):
        return Row([1], [2], "", "", f"a{k}", True, 0, 0, k, role="play", anchor=anchor)

    won = Episode(0, 0, {}, 0, rows=[row(0, "s0"), row(1, "s1")], env_rewards=[0.0, 10.0], won=True)
    lost = Episode(1, 0, {}, 0, rows=[row(0, "s0")], env_rewards=[0.0])
    t1, t2 = Trial(0, 0, [{}], 0, episodes=[won]), Trial(1, 0, [{}], 0, episodes=[lost])
    assert gigpo_step_returns([t1, t2], gamma=0.95, reward_scale=10.0) == pytest.approx([9.5, 10.0, 0.0])
    # TextRooms' own success reward is 1: the step reward is still reward_scale * won, the episode reward's scale
    textrooms = Episode(0, 0, {}, 0, rows=[row(0, "s0"), row(1, "s1")], env_rewards=[0.0, 1.0], won=True)
    t3 = Trial(0, 0, [{}], 0, episodes=[textrooms])
    assert gigpo_step_returns([t3], gamma=0.95, reward_scale=10.0) == pytest.approx([9.5, 10.0])
    crashed = Trial(2, 0, [{}], 0, episodes=[Episode(2, 0, {}, 0, failed=True)])  # at reset
    assert gigpo_step_returns([crashed], gamma=0.95, reward_scale=10.0) == []
    rows, returns, *_ = trial_row_returns([t1, t2], 10.0, 0.6)
    assert [r.action for r in rows] == ["a0", "a1", "a0"] and returns == [10.0, 10.0, 0.0]

    # the step groups `_score` forms from them, as `_rollout_metrics` logs them: s0 (2 rows) and s1 (1 row)
    from types import SimpleNamespace

    from skillrise.trainer import SkillRiseTrainer

    fake = SimpleNamespace(group_size_k=1, _all_ranks=lambda v: [v], args=SimpleNamespace(advantage_mode="gigpo"))
    metrics = SkillRiseTrainer._rollout_metrics(fake, [t1, t2], rows)
    assert metrics["gigpo/step_group_size_mean"] == pytest.approx(1.5)
    assert metrics["gigpo/step_group_single_ratio"] == pytest.approx(0.5)
    assert metrics["gigpo/step_grouped_row_ratio"] == pytest.approx(2 / 3)
