"""`skillrise.losses` against a naive per-token loop: dual-clip PPO (verl `compute_policy_loss`, clip_ratio_c=3) minus
the entropy bonus, summed over the step's tokens and divided by the step's token normaliser; values and gradients."""

import pytest
import torch

from skillrise.losses import dual_clip_policy_loss, step_loss


def naive_loss(logps, entropies, mask, advantages, old, normalizer, eps=0.2, c=3.0, ent=0.001):
    total = 0.0
    for b in range(logps.size(0)):
        a = advantages[b].item()
        for t in range(logps.size(1)):
            if not mask[b, t]:
                continue
            ratio = torch.exp(logps[b, t] - old[b, t])
            pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - eps, 1 + eps))
            if a < 0:
                pg = torch.minimum(pg, torch.tensor(-a * c))  # dual clip: the loss of a negative row is capped
            total = total + pg - ent * entropies[b, t]
    return total / normalizer


def test_step_loss_equals_a_naive_loop_in_value_and_gradient():
    torch.manual_seed(0)
    B, T = 4, 5
    old = -torch.rand(B, T) * 2  # (B, T)
    logps = (old + torch.randn(B, T) * 0.8).requires_grad_()  # ratios far outside the clip range too
    entropies = torch.rand(B, T, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    advantages = torch.tensor([1.5, -2.0, -0.5, 3.0])
    loss, sums = step_loss(logps, entropies, mask, advantages, old, token_normalizer=7.0, eps_low=0.2, eps_high=0.2,
                           clip_c=3.0, entropy_coef=0.001)  # fmt: skip
    expected = naive_loss(logps, entropies, mask, advantages, old, 7.0)
    torch.testing.assert_close(loss, expected)
    g = torch.autograd.grad(loss, [logps, entropies])
    g_ref = torch.autograd.grad(expected, [logps, entropies])
    for a, b in zip(g, g_ref, strict=True):
        torch.testing.assert_close(a, b)
    assert sums["entropy"].item() == pytest.approx((entropies * mask).sum().item())


def test_dual_clip_caps_negative_rows_only():
    old = torch.zeros(2, 1)
    logps = torch.log(torch.tensor([[10.0], [10.0]]))  # ratio 10
    pg = dual_clip_policy_loss(logps, old, torch.tensor([-1.0, 1.0]), eps_low=0.2, eps_high=0.2, clip_c=3.0)
    assert pg[0, 0].item() == pytest.approx(3.0)  # -A * c instead of -A * 10
    assert pg[1, 0].item() == pytest.approx(-1.2)  # A > 0: the clipped ratio 1.2


def test_dual_clip_policy_loss_is_a_word_for_word_copy_of_sdars():
    # duplicated on purpose (a package needs only agentrl_shared); the copies must stay identical
    import inspect
    from pathlib import Path

    sdar_src = Path(__file__).resolve().parents[2] / "sdar" / "src" / "sdar" / "losses.py"
    if not sdar_src.exists():
        pytest.skip("sdar package not beside this one (a copied package)")
    assert inspect.getsource(dual_clip_policy_loss) in sdar_src.read_text()
