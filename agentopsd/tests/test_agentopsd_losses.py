"""The verl-agent row rewards and GRPO advantages AgentOPSD reshapes, and the Skill-SD loss, by hand."""

import math

import pytest
import torch

from agentopsd.losses import skill_sd_loss
from agentrl_shared.trainer import grpo_row_advantages, row_rewards


def test_row_rewards_and_grpo_over_rows_hand_computed():
    rewards = row_rewards(torch.tensor([10.0, 10.0, 0.0, 0.0]), torch.tensor([True, False, True, True]),
                          penalty_coef=0.1)  # fmt: skip
    assert rewards.tolist() == pytest.approx([10.0, 9.9, 0.0, 0.0])
    adv = grpo_row_advantages(rewards, torch.tensor([0, 0, 0, 0]))
    mean, std = 19.9 / 4, torch.tensor([10.0, 9.9, 0.0, 0.0]).std(unbiased=True).item()
    assert adv.tolist() == pytest.approx([(r - mean) / (std + 1e-6) for r in (10.0, 9.9, 0.0, 0.0)])
    assert grpo_row_advantages(torch.tensor([3.0]), torch.tensor([1])).item() == pytest.approx(3.0 / (1 + 1e-6))


def test_skill_sd_loss_hand_computed_and_gradient():
    student = torch.tensor([[-1.0, -2.0, -0.3]], requires_grad=True)
    teacher = torch.tensor([[-0.5, -2.5, -9.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss = skill_sd_loss(student, teacher, student.detach(), mask)  # one update per rollout: rho = 1
    k3 = [math.exp(0.5) - 1 - 0.5, math.exp(-0.5) - 1 + 0.5]  # exp(l_T - l_S) - 1 + (l_S - l_T)
    assert loss.item() == pytest.approx(sum(k3) / 2, rel=1e-6)
    loss.backward()
    # d/dl_S (rho * k3) at rho = 1 = k3 + (1 - exp(l_T - l_S)); rho is not detached (official)
    grads = [(k3[0] + 1 - math.exp(0.5)) / 2, (k3[1] + 1 - math.exp(-0.5)) / 2, 0.0]
    assert student.grad[0].tolist() == pytest.approx(grads, rel=1e-5)


def test_exponents_are_capped():
    loss = skill_sd_loss(torch.tensor([[-100.0]]), torch.tensor([[0.0]]), torch.tensor([[-200.0]]), torch.ones(1, 1))
    assert torch.isfinite(loss)
    # k3 exponent capped at 20, rho exponent at 10
    assert loss.item() == pytest.approx(math.exp(10) * (math.exp(20) - 1 - 100), rel=1e-5)
