"""SDAR's equations against hand-computed values and naive loops (SDAR paper Section 3: GRPO advantage and the gated distillation term)."""

import math

import pytest
import torch

from agentrl_shared.trainer import grpo_row_advantages, row_rewards
from sdar.losses import (
    dual_clip_policy_loss,
    gate_statistics,
    gated_distillation_loss,
    k3_kl,
    step_loss,
    update_shares,
)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_gated_distillation_loss_hand_computed():
    student = torch.tensor([[-1.0, -2.0, -0.5]])
    teacher = torch.tensor([[-0.5, -3.0, -0.5]])
    mask = torch.tensor([[1, 1, 0]])
    # token 1: gap 0.5, g = sig(2.5); token 2: gap -1, g = sig(-5); token 3 masked
    expected = (sigmoid(2.5) * 0.5 + sigmoid(-5.0) * -1.0) / 2
    got = gated_distillation_loss(student, teacher, mask, gate_beta=5.0)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_gated_distillation_loss_matches_naive_loop():
    torch.manual_seed(0)
    B, T = 3, 7
    student = -torch.rand(B, T) * 3
    teacher = -torch.rand(B, T) * 3
    mask = (torch.rand(B, T) > 0.3).long()
    num, den = 0.0, 0
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                gap = teacher[b, t].item() - student[b, t].item()
                num += sigmoid(2.0 * gap) * gap
                den += 1
    got = gated_distillation_loss(student, teacher, mask, gate_beta=2.0)
    assert got.item() == pytest.approx(num / den, rel=1e-5)


def test_gated_distillation_gradient_flows_only_through_student_with_detached_gate():
    student = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    teacher = torch.tensor([[-0.5, -3.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    gated_distillation_loss(student, teacher, mask, gate_beta=5.0).backward()
    # d/dl_S of mean(g * (l_T - l_S)) with g constant = -g / n
    expected = torch.tensor([[-sigmoid(2.5) / 2, -sigmoid(-5.0) / 2]])
    assert torch.allclose(student.grad, expected, atol=1e-7)
    assert teacher.grad is None or torch.all(teacher.grad == 0)


def test_gate_beta_zero_is_uniform_half_weight():
    student = torch.tensor([[-1.0, -4.0]])
    teacher = torch.tensor([[-2.0, -1.0]])
    got = gated_distillation_loss(student, teacher, torch.ones(1, 2), gate_beta=0.0)
    assert got.item() == pytest.approx(0.5 * ((-1.0) + 3.0) / 2)


def test_gated_distillation_all_masked_is_zero():
    got = gated_distillation_loss(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3), gate_beta=5.0)
    assert got.item() == 0.0


def test_grpo_row_advantages_hand_computed():
    rewards = torch.tensor([10.0, 0.0, 10.0, 0.0, 5.0])
    groups = torch.tensor([0, 0, 0, 0, 1])
    adv = grpo_row_advantages(rewards, groups)
    std = math.sqrt(sum((r - 5.0) ** 2 for r in [10, 0, 10, 0]) / 3)  # unbiased
    assert adv[:4].tolist() == pytest.approx([5 / (std + 1e-6), -5 / (std + 1e-6)] * 2)
    assert adv[4].item() == pytest.approx(5.0 / (1.0 + 1e-6))  # single-row group: mean 0, std 1


def test_grpo_row_advantages_matches_naive_loop():
    torch.manual_seed(1)
    rewards = torch.randn(20)
    groups = torch.randint(0, 4, (20,))
    adv = grpo_row_advantages(rewards, groups)
    for i in range(20):
        members = [rewards[j].item() for j in range(20) if groups[j] == groups[i]]
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(members) / len(members)
            std = math.sqrt(sum((m - mean) ** 2 for m in members) / (len(members) - 1))
        assert adv[i].item() == pytest.approx((rewards[i].item() - mean) / (std + 1e-6), rel=1e-5, abs=1e-6)


def test_grpo_row_advantages_all_equal_rewards_are_zero():
    adv = grpo_row_advantages(torch.full((6,), 10.0), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert torch.all(adv == 0)


def test_row_rewards_penalise_only_invalid_rows():
    got = row_rewards(torch.tensor([10.0, 10.0, 0.0]), torch.tensor([True, False, False]), penalty_coef=0.1)
    assert got.tolist() == pytest.approx([10.0, 9.9, -0.1])


def test_gate_statistics():
    stats = gate_statistics(torch.tensor([[-1.0, -1.0, 0.0]]), torch.tensor([[0.0, -2.0, 5.0]]),
                            torch.tensor([[1, 1, 0]]), gate_beta=5.0)  # fmt: skip
    assert stats["gate_mean"] == pytest.approx((sigmoid(5.0) + sigmoid(-5.0)) / 2)
    assert stats["gate_active_ratio"] == pytest.approx(0.5)
    assert stats["teacher_gap_mean"] == pytest.approx(0.0)


def test_dual_clip_equals_trl_delta():
    """verl's dual clip (c = 3) equals TRL's ratio cap `delta=3` for the clipped surrogate (verl `core_algos.compute_policy_loss`)."""
    eps, c = 0.2, 3.0
    for ratio in [0.1, 0.9, 1.0, 1.5, 2.9, 3.5, 10.0]:
        for adv in [-2.0, -0.5, 0.5, 2.0]:
            # verl: pg = max(-A r, -A clip(r)); for A < 0 also min(pg, -A c)
            pg = max(-adv * ratio, -adv * min(max(ratio, 1 - eps), 1 + eps))
            if adv < 0:
                pg = min(pg, -adv * c)
            # TRL: coef_1 = min(r, delta); loss = -min(coef_1 A, clip(r) A)
            trl = -min(min(ratio, c) * adv, min(max(ratio, 1 - eps), 1 + eps) * adv)
            assert trl == pytest.approx(pg)


def test_dual_clip_policy_loss_matches_verl_per_token():
    ratios = torch.tensor([[0.1, 0.9, 1.0, 1.5, 2.9, 3.5, 10.0]])
    for adv in [-2.0, -0.5, 0.5, 2.0]:
        got = dual_clip_policy_loss(ratios.log(), torch.zeros_like(ratios), torch.tensor([adv]), eps_low=0.2,
                                    eps_high=0.2, clip_c=3.0)  # fmt: skip
        for r, g in zip(ratios[0].tolist(), got[0].tolist(), strict=True):
            pg = max(-adv * r, -adv * min(max(r, 0.8), 1.2))
            assert g == pytest.approx(min(pg, -adv * 3.0) if adv < 0 else pg, rel=1e-5)


def test_k3_is_clamped_like_verl():
    assert k3_kl(torch.tensor([0.0]), torch.tensor([20.0])).item() == 10.0
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0


def test_step_loss_is_a_global_token_mean_of_every_term():
    """Split over micro-batches and divided by the step's token count, the loss sums to the token-mean of the whole
    step, whatever the split (the normalisation behind one optimizer step on several ranks)."""
    torch.manual_seed(0)
    B, T = 6, 5
    logps = (-torch.rand(B, T) * 3).requires_grad_()
    ent, old, ref, teacher = torch.rand(B, T), -torch.rand(B, T) * 3, -torch.rand(B, T) * 3, -torch.rand(B, T) * 3
    mask = (torch.rand(B, T) > 0.3).long()
    adv = torch.randn(B)
    kw = dict(eps_low=0.2, eps_high=0.2, clip_c=3.0, kl_coef=0.01, entropy_coef=0.001, sdar_coef=0.01, gate_beta=5.0)
    n = mask.sum().item()
    whole, _ = step_loss(logps, ent, mask, adv, old, ref, teacher, token_normalizer=n, **kw)
    parts = [step_loss(logps[s], ent[s], mask[s], adv[s], old[s], ref[s], teacher[s], token_normalizer=n, **kw)[0]
             for s in (slice(0, 1), slice(1, 4), slice(4, 6))]  # fmt: skip
    assert sum(parts).item() == pytest.approx(whole.item(), rel=1e-6)
    naive = 0.0
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                r = math.exp(logps[b, t].item() - old[b, t].item())
                a = adv[b].item()
                pg = max(-a * r, -a * min(max(r, 0.8), 1.2))
                pg = min(pg, -a * 3.0) if a < 0 else pg
                d = ref[b, t].item() - logps[b, t].item()
                gap = teacher[b, t].item() - logps[b, t].item()
                naive += pg + 0.01 * (math.exp(d) - d - 1) - 0.001 * ent[b, t].item() + 0.01 * sigmoid(5 * gap) * gap
    assert whole.item() == pytest.approx(naive / n, rel=1e-5)


def test_update_shares_by_hand():
    """Two rows of two tokens: row 0 in a group with a win (A = 1.5), row 1 in an all-fail group (A = 0)."""
    student = torch.tensor([[-1.0, -2.0], [-1.0, -0.5]])
    teacher = torch.tensor([[-0.5, -2.5], [-0.2, -0.5]])  # gaps +0.5, -0.5 | +0.8, 0 (the tie is neither)
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    all_fail = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    shares = update_shares(student, teacher, mask, torch.tensor([1.5, 0.0]), all_fail, sdar_coef=0.1, gate_beta=5.0)
    g = [sigmoid(2.5), sigmoid(-2.5), sigmoid(4.0), 0.5]
    ratio = {k: (n / d).item() for k, (n, d) in shares.items()}
    assert ratio["gate_mean_pos_gap"] == pytest.approx((g[0] + g[2]) / 2)
    assert ratio["gate_mean_neg_gap"] == pytest.approx(g[1])
    total = 0.1 * sum(g) + 1.5 * 2
    assert ratio["update_share"] == pytest.approx(0.1 * sum(g) / total)
    assert ratio["update_share_all_fail"] == pytest.approx(0.1 * (g[2] + g[3]) / total)
    assert ratio["all_fail_token_ratio"] == pytest.approx(0.5)
    # a masked token counts nowhere
    masked = update_shares(student, teacher, torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([1.5, 0.0]),
                           all_fail, sdar_coef=0.1, gate_beta=5.0)  # fmt: skip
    assert (masked["gate_mean_neg_gap"][1].item(), masked["all_fail_token_ratio"][1].item()) == (0.0, 3.0)
