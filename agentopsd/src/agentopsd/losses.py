"""Rewards, GRPO row advantages and the Skill-SD baseline loss as pure tensor functions.

- `row_rewards`, `grpo_row_advantages`: word-for-word copies of `sdar/losses.py` (verl-agent invalid-action penalty and
  GRPO over turn-rows with `compute_mean_std_cross_steps=True`); AgentOPSD reshapes exactly this advantage.
- `skill_sd_loss`: the Skill-SD baseline's SDL term (ZJU-REAL/SDAR@8b85c23 `verl/trainer/ppo/skillsd_utils.py`).
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


def skill_sd_loss(student_logps: Tensor, teacher_logps: Tensor, old_logps: Tensor, mask: Tensor) -> Tensor:
    """Skill-SD's SDL term (`compute_sdl_loss`): token-mean over `mask` of rho_t * k3_t with
    k3_t = exp(min(l^T - l^S, 20)) - 1 + (l^S - l^T) and rho_t = exp(min(l^S - l^S_old, 10)).

    Teacher and rollout-time log-probs are constants; the current student log-probs carry the gradient both in k3
    and in rho (the official code does not detach rho).

    Args:
        student_logps: (B, T) current policy, with grad. teacher_logps, old_logps: (B, T). mask: (B, T).
    Returns:
        scalar, token-mean over the micro-batch (verl `loss_agg_mode=token-mean`).
    """
    ell = student_logps - teacher_logps.detach()  # (B, T)
    k3 = torch.exp((-ell).clamp(max=20.0)) - 1.0 + ell
    rho = torch.exp((student_logps - old_logps.detach()).clamp(max=10.0))
    mask = mask.to(k3.dtype)
    return (rho * k3 * mask).sum() / mask.sum().clamp(min=1.0)
