"""SDAR's equations as pure tensor functions (papers/sdar.md 2.3, 2.4, 2.6; official code ZJU-REAL/SDAR@8b85c23).

- `row_rewards`: R_row = R_episode - coef * 1[invalid(row)] (verl-agent invalid-action penalty, sdar.md 2.3).
- `grpo_row_advantages`: verl-agent GRPO over turn-rows grouped by `uid`, unbiased std, eps 1e-6 (sdar.md 2.4).
- `gated_distillation_loss`: the SDAR term, token-mean of g * (l_T - l_S) with g = sg(sigmoid(beta * (l_T - sg(l_S))))
  (sdar.md 2.6; `verl/trainer/ppo/sdar_utils.py`).
- `gate_statistics`: the logged `sdar/*` metrics (sdar.md 2.10).
"""

import torch
from torch import Tensor


def row_rewards(episode_returns: Tensor, is_action_valid: Tensor, *, penalty_coef: float) -> Tensor:
    """Per-row reward: the episode return on every row, minus `penalty_coef` on rows whose action was invalid.

    Args:
        episode_returns: (N,) the return of each row's episode (e.g. 10 * won on ALFWorld).
        is_action_valid: (N,) bool.
    """
    return episode_returns - penalty_coef * (~is_action_valid.bool()).to(episode_returns.dtype)  # (N,)


def grpo_row_advantages(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6) -> Tensor:
    """verl-agent GRPO advantage over rows: A = (r - mean_g) / (std_g + eps) within each group id.

    Statistics run over all rows that share a group id (every turn of every episode of a task), with the unbiased
    (Bessel-corrected) std, as verl's `compute_grpo_outcome_advantage` with `compute_mean_std_cross_steps=True`. A
    group with a single row uses mean 0 and std 1 (verl's convention), so its advantage is r / (1 + eps).

    Args:
        rewards: (N,) float per-row rewards.
        group_ids: (N,) int group ids.
    Returns:
        (N,) advantages.
    """
    advantages = torch.empty_like(rewards)
    for g in torch.unique(group_ids):
        idx = group_ids == g
        r = rewards[idx]  # (n_g,)
        if r.numel() == 1:
            mean, std = torch.zeros((), dtype=r.dtype), torch.ones((), dtype=r.dtype)
        else:
            mean, std = r.mean(), r.std(unbiased=True)
        advantages[idx] = (r - mean) / (std + eps)
    return advantages


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
    teacher_logps = teacher_logps.detach()
    gap = teacher_logps - student_logps.detach()  # (B, T) Delta_t
    gate = torch.sigmoid(gate_beta * gap)  # (B, T) g_t, constant
    per_token = gate * (teacher_logps - student_logps)  # (B, T)
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


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
