"""SDAR's equations as pure tensor functions (paper arXiv 2605.15155 section 3; official code ZJU-REAL/SDAR@8b85c23).

- `gated_distillation_loss`: the SDAR term, token-mean of g * (l_T - l_S) with g = sg(sigmoid(beta * (l_T - sg(l_S))))
  (`verl/trainer/ppo/sdar_utils.py`).
- `step_loss`: one micro-batch's share of an optimizer step's total actor loss, L = pg - c_ent H + c_KL k3 + lambda
  L_SDAR, every term summed over tokens and divided by the step's global token count.
- `gate_statistics`, `update_shares`: the logged `sdar/*` metrics.

The row rewards and GRPO row advantages SDAR keeps from verl-agent are `agentrl_shared.trainer`'s.
"""

import torch
from torch import Tensor


def gated_distillation_loss(student_logps: Tensor, teacher_logps: Tensor, mask: Tensor, *, gate_beta: float = 5.0):
    """The SDAR term (sdar.md 2.6): token-mean over `mask` of g_t * (l^T_t - l^S_t).

    g_t = sigmoid(gate_beta * (l^T_t - sg(l^S_t))), detached. Gradient flows only through `student_logps`:
    grad = -mean_t g_t grad l^S_t, so minimising raises the likelihood of the sampled tokens the teacher endorses
    (g near 1 where the skill-conditioned teacher is more confident) and fades where it disagrees (g near 0).
    `gate_beta=0` gives the ungated GRPO+OPSD baseline (g = 0.5 everywhere).

    Args:
        student_logps: (B, T) log-probs of the sampled tokens under the current policy (with grad).
        teacher_logps: (B, T) the same tokens under the skill-conditioned teacher (constant).
        mask: (B, T) loss mask.
    Returns:
        scalar, the token-mean over the micro-batch (verl `loss_agg_mode=token-mean`).
    """
    per_token = gated_distillation_per_token(student_logps, teacher_logps, gate_beta=gate_beta)  # (B, T)
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def gated_distillation_per_token(student_logps: Tensor, teacher_logps: Tensor, *, gate_beta: float) -> Tensor:
    """g_t * (l^T_t - l^S_t) per token, g_t = sigmoid(gate_beta * (l^T_t - sg(l^S_t))) detached: the term that
    `gated_distillation_loss` token-averages and `step_loss` adds (one function, so the tested term is the trained
    one; official `verl/trainer/ppo/sdar_utils.py`). (B, T) in, (B, T) out."""
    teacher_logps = teacher_logps.detach()
    gate = torch.sigmoid(gate_beta * (teacher_logps - student_logps.detach()))  # (B, T) g_t, constant
    return gate * (teacher_logps - student_logps)  # (B, T)


def dual_clip_policy_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float,
                          clip_c: float) -> Tensor:  # fmt: skip
    """Per-token PPO clipped surrogate with dual clip (verl `core_algos.compute_policy_loss`, `clip_ratio_c`).

    pg = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); for A < 0 also capped at -A c.

    Args:
        logps, old_logps: (B, T) current (with grad) and rollout-time log-probs of the sampled tokens.
        advantages: (B,) per-row advantages.
    Returns:
        (B, T) per-token loss.
    """
    adv = advantages.unsqueeze(1)  # (B, 1)
    ratio = torch.exp(logps - old_logps)  # (B, T)
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high))
    return torch.where(adv < 0, torch.minimum(pg, -adv * clip_c), pg)


def k3_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """verl `kl_penalty(..., "low_var_kl")`: k3 = exp(d) - d - 1 with d = l_ref - l, clamped to [-10, 10]. (B, T)"""
    d = ref_logps - logps
    return torch.clamp(torch.exp(d) - d - 1, min=-10.0, max=10.0)


def step_loss(
    logps: Tensor,
    entropies: Tensor,
    mask: Tensor,
    advantages: Tensor,
    old_logps: Tensor,
    ref_logps: Tensor | None,
    teacher_logps: Tensor | None,
    *,
    token_normalizer: float,
    eps_low: float,
    eps_high: float,
    clip_c: float,
    kl_coef: float,
    entropy_coef: float,
    sdar_coef: float,
    gate_beta: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """This micro-batch's share of one optimizer step's actor loss (SDAR's total loss, verl-agent PPO actor):

    L = sum_t m_t [pg_t + c_KL k3_t - c_ent H_t + lambda g_t (l^T_t - l^S_t)] / token_normalizer

    With `token_normalizer` = (real loss tokens of the whole step over all ranks) / world size, the gradient that the
    data-parallel mean produces is the token-mean of every term over all of the step's tokens, whatever micro-batch
    or rank holds them.

    Args:
        logps, entropies: (B, T) student log-probs (with grad) and entropies of the loss forward.
        mask: (B, T) loss mask. advantages: (B,). old_logps, ref_logps, teacher_logps: (B, T), constants.
    Returns:
        `(loss, sums)`: the scalar to backpropagate, and detached per-term token sums (for logging).
    """
    m = mask.to(logps.dtype)
    pg = dual_clip_policy_loss(logps, old_logps, advantages, eps_low=eps_low, eps_high=eps_high, clip_c=clip_c)
    per_token = pg - entropy_coef * entropies
    sums = {"pg": (pg * m).sum(), "entropy": (entropies * m).sum()}
    if ref_logps is not None:
        kl = k3_kl(logps, ref_logps)
        per_token = per_token + kl_coef * kl
        sums["kl"] = (kl * m).sum()
    if teacher_logps is not None:
        sdar = gated_distillation_per_token(logps, teacher_logps, gate_beta=gate_beta)  # (B, T)
        per_token = per_token + sdar_coef * sdar
        sums["sdar"] = (sdar * m).sum()
    loss = (per_token * m).sum() / token_normalizer
    return loss, {k: v.detach() for k, v in sums.items()}


def gate_statistics(student_logps: Tensor, teacher_logps: Tensor, mask: Tensor, *, gate_beta: float) -> dict:
    """`sdar/gate_mean`, `sdar/gate_active_ratio` (g > 0.5) and `sdar/teacher_gap_mean` over masked tokens."""
    with torch.no_grad():
        gap = teacher_logps - student_logps  # (B, T)
        gate = torch.sigmoid(gate_beta * gap)
        m = mask.bool()
        n = m.sum().clamp(min=1)
        return {
            "gate_mean": (gate[m].sum() / n).item(),
            "gate_active_ratio": ((gate[m] > 0.5).sum() / n).item(),
            "teacher_gap_mean": (gap[m].sum() / n).item(),
        }


def update_shares(
    student_logps: Tensor,
    teacher_logps: Tensor,
    mask: Tensor,
    advantages: Tensor,
    all_fail: Tensor,
    *,
    sdar_coef: float,
    gate_beta: float,
) -> dict[str, tuple[Tensor, Tensor]]:
    """(numerator, denominator) token sums of the mechanism metrics, to be reduced over ranks before dividing.

    Per token, the PPO term's gradient is -A r grad l^S (r = 1 at theta_old) and the SDAR term's is -lambda g grad l^S
    (`gated_distillation_per_token`), so |A| and lambda * g are the two terms' weights on the same direction:
    - `gate_mean_pos_gap`, `gate_mean_neg_gap`: the mean gate g on tokens with l^T - l^S > 0 (teacher endorses) and
      < 0 (teacher rejects);
    - `update_share`: sum lambda g / sum (|A| + lambda g), SDAR's share of the update's token weights;
    - `update_share_all_fail`: the same numerator on the tokens of all-fail groups only (GRPO's A = 0 there, so this
      is the update that only SDAR makes), over every token's weights;
    - `all_fail_token_ratio`: the share of tokens in all-fail groups.

    Args:
        student_logps, teacher_logps, mask: (B, T). advantages: (B,) or (B, T). all_fail: (B, T), 1 on rows of a
            group whose episodes all failed.
    """
    with torch.no_grad():
        m = mask.float()
        gap = (teacher_logps - student_logps).float()  # (B, T)
        gate = torch.sigmoid(gate_beta * gap)  # (B, T)
        adv = advantages.float() if advantages.dim() == 2 else advantages.float().unsqueeze(1).expand_as(gap)
        sdar, pg = sdar_coef * gate * m, adv.abs() * m  # (B, T) each
        pos, neg, af = (gap > 0).float() * m, (gap < 0).float() * m, all_fail.float() * m
        total = (sdar + pg).sum()
        return {
            "gate_mean_pos_gap": ((gate * pos).sum(), pos.sum()),
            "gate_mean_neg_gap": ((gate * neg).sum(), neg.sum()),
            "update_share": (sdar.sum(), total),
            "update_share_all_fail": ((sdar * af).sum(), total),
            "all_fail_token_ratio": (af.sum(), m.sum()),
        }
