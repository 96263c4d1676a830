"""`rolewise_advantages`: R - mean over (group, role), no std, singleton mean 0 (official compute_grpo_outcome_advantage
with group_by_agent_id=True, norm_adv_by_std_in_grpo=False)."""

import pytest
import torch

from envace.advantages import rolewise_advantages


def naive(rewards, groups, roles):
    out = []
    for r, g, k in zip(rewards, groups, roles, strict=True):
        same = [r2 for r2, g2, k2 in zip(rewards, groups, roles, strict=True) if (g2, k2) == (g, k)]
        out.append(r - (sum(same) / len(same) if len(same) > 1 else 0.0))
    return out


def test_hand_computed_unequal_step_counts():
    # group 0: trajectory a (R=1) has 3 caller rows and 1 simulator row, trajectory b (R=0) has 1 caller row, 2 sim
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    groups = [0, 0, 0, 0, 0, 0, 0]
    roles = ["caller", "caller", "caller", "simulator", "caller", "simulator", "simulator"]
    adv = rolewise_advantages(rewards, groups, roles)
    # caller mean is step-pooled: (1+1+1+0)/4 = 0.75 (not the trajectory mean 0.5); simulator mean (1+0+0)/3
    expected = torch.tensor([0.25, 0.25, 0.25, 1 - 1 / 3, -0.75, -1 / 3, -1 / 3])
    torch.testing.assert_close(adv, expected)


def test_no_std_division_and_roles_and_groups_separate():
    rewards = torch.tensor([0.2, 0.6, 0.9, 0.1, 0.5, 0.7])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    roles = ["caller", "caller", "simulator", "caller", "simulator", "simulator"]
    adv = rolewise_advantages(rewards, groups, roles)
    torch.testing.assert_close(adv, torch.tensor(naive(rewards.tolist(), groups.tolist(), roles)))
    # with std division the group-0 caller pair would be +-0.7071, not +-0.2
    torch.testing.assert_close(adv[:2], torch.tensor([-0.2, 0.2]))


def test_singleton_group_role_uses_mean_zero():
    adv = rolewise_advantages(torch.tensor([0.8, 0.3, 0.5]), [0, 0, 1], ["caller", "simulator", "caller"])
    torch.testing.assert_close(adv, torch.tensor([0.8, 0.3, 0.5]))


def test_all_equal_rewards_give_zero():
    adv = rolewise_advantages(torch.full((4,), 0.5), [3, 3, 3, 3], ["caller", "caller", "simulator", "simulator"])
    assert torch.count_nonzero(adv) == 0


def test_random_against_naive_loop():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(50, generator=g)
    groups = torch.randint(0, 5, (50,), generator=g).tolist()
    roles = [["caller", "simulator"][i] for i in torch.randint(0, 2, (50,), generator=g).tolist()]
    torch.testing.assert_close(
        rolewise_advantages(rewards, groups, roles), torch.tensor(naive(rewards.tolist(), groups, roles))
    )


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differ"):
        rolewise_advantages(torch.zeros(3), [0, 0], ["caller"] * 3)


def test_empty_generations_are_penalised_before_the_advantages():
    from envace.advantages import penalised_row_rewards

    rewards = penalised_row_rewards([1.0, 1.0, 0.5, 0.5], ["<tool_call>x</tool_call>", "", "  \n", "ok"], 0.1)
    assert rewards.tolist() == pytest.approx([1.0, 0.9, 0.4, 0.5])
    assert penalised_row_rewards([1.0], [""], 0.0).tolist() == [1.0]  # the switch off
