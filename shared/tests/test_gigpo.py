"""`agentrl_shared.gigpo` against hand-computed values (verl-agent `gigpo/core_gigpo.py`): discounted step returns,
the won episode's step rewards, and the episode-group + anchor-state GiGPO advantage."""

import pytest
import torch


def test_discounted_step_returns_by_hand():
    from agentrl_shared.gigpo import discounted_step_returns

    assert discounted_step_returns([0.0, 0.0, 10.0]) == pytest.approx([9.025, 9.5, 10.0])  # gamma 0.95
    assert discounted_step_returns([1.0, 2.0], gamma=0.5) == pytest.approx([2.0, 2.0])
    assert discounted_step_returns([]) == []


def test_gigpo_advantages_by_hand_with_repeated_anchor_states():
    """Group g: episode A wins at its 3rd step (states s0 s1 s2), B fails after 2 (s0 s1), C wins at its 2nd (s0 s3);
    group h: one row on a state that reads like g's s0 (anchor groups never cross episode groups)."""
    from agentrl_shared.gigpo import gigpo_advantages

    episode = [10, 10, 10, 0, 0, 10, 10, 10]
    step = [9.025, 9.5, 10.0, 0.0, 0.0, 9.5, 10.0, 10.0]
    groups = ["g"] * 7 + ["h"]
    anchors = ["s0", "s1", "s2", "s0", "s1", "s0", "s3", "s0"]
    e_mean = 50 / 7  # every row of g counts (not every episode): 5 rows of 10 out of 7
    s0_mean, s1_mean = (9.025 + 0.0 + 9.5) / 3, (9.5 + 0.0) / 2
    expected = [
        10 - e_mean + 9.025 - s0_mean,  # A on s0
        10 - e_mean + 9.5 - s1_mean,  # A on s1
        10 - e_mean + 0.0,  # A on s2, a state seen once: no step advantage
        0 - e_mean + 0.0 - s0_mean,  # B on s0
        0 - e_mean + 0.0 - s1_mean,  # B on s1
        10 - e_mean + 9.5 - s0_mean,  # C on s0
        10 - e_mean + 0.0,  # C on s3
        10.0,  # h: one row, episode mean 0, step advantage 0
    ]
    out = gigpo_advantages(episode, step, groups, anchors)
    assert out.tolist() == pytest.approx(expected, abs=1e-5)
    half = gigpo_advantages(episode, step, groups, anchors, step_advantage_w=0.5)
    assert half[0].item() == pytest.approx(10 - e_mean + 0.5 * (9.025 - s0_mean), abs=1e-5)
    e_std = torch.tensor(episode[:7], dtype=torch.float32).std().item()
    s1_std = torch.tensor([9.5, 0.0]).std().item()
    std = gigpo_advantages(episode, step, groups, anchors, mode="mean_std_norm")
    assert std[1].item() == pytest.approx((10 - e_mean) / (e_std + 1e-6) + (9.5 - s1_mean) / (s1_std + 1e-6), 1e-5)
    with pytest.raises(ValueError, match="mean_norm, mean_std_norm"):
        gigpo_advantages(episode, step, groups, anchors, mode="grpo")


def test_won_step_rewards_on_the_episode_rewards_scale():
    """reward_scale on a won episode's last step whatever the environment's own success reward; 0 for a loss; none for
    an episode without rows (failed at reset)."""
    from agentrl_shared.gigpo import won_step_rewards

    assert won_step_rewards(3, True, reward_scale=10.0) == [0.0, 0.0, 10.0]
    assert won_step_rewards(2, False, reward_scale=10.0) == [0.0, 0.0]
    assert won_step_rewards(0, True, reward_scale=10.0) == []


def test_trainer_score_gigpo_matches_a_naive_loop():
    """`MultiTurnGRPOTrainer._score` with `advantage_mode="gigpo"` against verl-agent's GiGPO written as plain loops
    over two groups' episodes: a won, a lost (one invalid row) and a failed episode in group 0, two in group 1. The
    failed episode's rows get advantage 0 and enter no statistic; "grpo" still gives `grpo_row_advantages`."""
    from types import SimpleNamespace

    from agentrl_shared.rollout import Episode, Row
    from agentrl_shared.trainer import MultiTurnGRPOTrainer, grpo_row_advantages

    def episode(eid, gid, anchors, won=False, failed=False, invalid=()):
        rows = [Row([1], [2], "", "", "a", k not in invalid, gid, eid, k, failed=failed, anchor=a)
                for k, a in enumerate(anchors)]  # fmt: skip
        return Episode(eid, gid, {}, 0, rows=rows, won=won, failed=failed)

    episodes = [
        episode(0, 0, ["s0", "s1", "s2"], won=True),
        episode(1, 0, ["s0", "s1"], invalid=(1,)),
        episode(2, 0, ["s0", "s1"], failed=True),
        episode(3, 1, ["t0", "t1"], won=True),
        episode(4, 1, ["t0"], won=True),
    ]
    fake = SimpleNamespace(
        env_config=SimpleNamespace(reward_scale=10.0),
        args=SimpleNamespace(
            invalid_action_penalty_coef=0.1, advantage_mode="gigpo", step_gamma=0.9, step_advantage_w=0.5
        ),
    )
    rows, adv = MultiTurnGRPOTrainer._score(fake, episodes)

    # naive: per row (group, anchor, episode reward - penalty, discounted 10 * won from its step to the episode's end)
    table = []
    for e in episodes:
        for k, r in enumerate(e.rows):
            if e.failed:
                continue
            R = 10.0 * e.won - (0.0 if r.is_action_valid else 0.1)
            G = 10.0 * e.won * 0.9 ** (len(e.rows) - 1 - k)
            table.append((e.group_id, r.anchor, R, G))
    expected = []
    for g, a, R, G in table:
        same_group = [x[2] for x in table if x[0] == g]
        same_state = [x[3] for x in table if x[0] == g and x[1] == a]
        expected.append(R - sum(same_group) / len(same_group) + 0.5 * (G - sum(same_state) / len(same_state)))
    failed = [i for i, r in enumerate(rows) if r.failed]
    assert failed == [5, 6] and adv[failed].tolist() == [0.0, 0.0]
    kept = [i for i in range(len(rows)) if i not in failed]
    assert adv[kept].tolist() == pytest.approx(expected, abs=1e-5)
    assert rows[4].reward == pytest.approx(-0.1) and rows[0].episode_return == 10.0

    # the step groups of the scored rows: s0, s1 (2 rows each), s2; t0 (2 rows), t1: 8 rows in 5 groups, 2 of one row
    fake._all_ranks = lambda value: [value]
    metrics = MultiTurnGRPOTrainer._rollout_metrics(fake, episodes, rows)
    assert metrics["gigpo/step_group_size_mean"] == pytest.approx(8 / 5)
    assert metrics["gigpo/step_group_single_ratio"] == pytest.approx(2 / 5)
    assert metrics["gigpo/step_grouped_row_ratio"] == pytest.approx(6 / 8)
    assert metrics["env/num_episodes"] == 5.0

    fake.args.advantage_mode = "grpo"
    assert not any(k.startswith("gigpo/") for k in MultiTurnGRPOTrainer._rollout_metrics(fake, episodes, rows))
    _, grpo = MultiTurnGRPOTrainer._score(fake, episodes)
    rewards = torch.tensor([10.0 * (e.won) - (0.0 if r.is_action_valid else 0.1) for e in episodes for r in e.rows])
    groups = torch.tensor([r.group_id for r in rows])
    assert grpo[kept].tolist() == pytest.approx(grpo_row_advantages(rewards[kept], groups[kept]).tolist(), abs=1e-6)
