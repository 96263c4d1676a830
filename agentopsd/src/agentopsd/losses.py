"""The actor loss and the Skill-SD baseline term as pure tensor functions.

AgentOPSD reshapes the verl-agent GRPO row advantage (`agentrl_shared.trainer.grpo_row_advantages`, with
`compute_mean_std_cross_steps=True`).
- `skill_sd_per_token`, `skill_sd_loss`: the Skill-SD baseline's SDL term (ZJU-REAL/SDAR@8b85c23 `verl/trainer/ppo/skillsd_utils.py`).
- `dual_clip_policy_loss`, `k3_kl`, `step_loss`: the PPO actor loss of the SDAR codebase that AgentOPSD runs unchanged
  (verl `core_algos.compute_policy_loss` with `clip_ratio_c`, `kl_penalty(low_var_kl)`, entropy bonus), as in
  `sdar/losses.py` but with per-token advantages (B, T) allowed, and the Skill-SD term in place of SDAR's.
"""

import torch
from torch import Tensor


def skill_sd_per_token(student_logps: Tensor, teacher_logps: Tensor, old_logps: Tensor) -> Tensor:
    """Skill-SD's per-token SDL term (`compute_sdl_loss`): rho_t * k3_t with k3_t = exp(min(l^T - l^S, 20)) - 1 +
    (l^S - l^T) and rho_t = exp(min(l^S - l^S_old, 10)).

    Teacher and rollout-time log-probs are constants; the current student log-probs carry the gradient both in k3
    and in rho (the official code does not detach rho).

    Args:
        student_logps: (B, T) current policy, with grad. teacher_logps, old_logps: (B, T).
    Returns:
        (B, T).
    """
    ell = student_logps - teacher_logps.detach()  # (B, T)
    k3 = torch.exp((-ell).clamp(max=20.0)) - 1.0 + ell
    rho = torch.exp((student_logps - old_logps.detach()).clamp(max=10.0))
    return rho * k3


def skill_sd_loss(student_logps: Tensor, teacher_logps: Tensor, old_logps: Tensor, mask: Tensor) -> Tensor:
    """Skill-SD's SDL loss: token-mean over `mask` of `skill_sd_per_token` (verl `loss_agg_mode=token-mean` over one
    micro-batch). Shapes (B, T); returns a scalar."""
    mask = mask.to(student_logps.dtype)
    return (skill_sd_per_token(student_logps, teacher_logps, old_logps) * mask).sum() / mask.sum().clamp(min=1.0)


def dual_clip_policy_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float,
                          clip_c: float) -> Tensor:  # fmt: skip
    """Per-token PPO clipped surrogate with dual clip (verl `core_algos.compute_policy_loss`, `clip_ratio_c`).

    pg = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); for A < 0 also capped at -A c.

    Args:
        logps, old_logps: (B, T) current (with grad) and rollout-time log-probs of the sampled tokens.
        advantages: (B,) per-row or (B, T) per-token advantages (AgentOPSD's token granularity, RLSD).
    Returns:
        (B, T) per-token loss.
    """
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(1)  # (B, T) or (B, 1)
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
    sdl_coef: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """This micro-batch's share of one optimizer step's actor loss:

    L = sum_t m_t [pg_t + c_KL k3_t - c_ent H_t + c_SDL rho_t k3^SDL_t] / token_normalizer

    AgentOPSD itself adds no term: its change is in `advantages`. The last term is the Skill-SD baseline
    (`sdl_coef > 0`, with `teacher_logps`). With `token_normalizer` = (real loss tokens of the whole step over all
    ranks) / world size, the data-parallel mean of the gradients is the token-mean of every term over all of the
    step's tokens, whatever micro-batch or rank holds them (as `sdar.losses.step_loss`).

    Args:
        logps, entropies: (B, T) student log-probs (with grad) and entropies of the loss forward.
        mask: (B, T) loss mask. advantages: (B,) or (B, T). old_logps, ref_logps, teacher_logps: (B, T), constants.
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
    if teacher_logps is not None and sdl_coef != 0.0:
        sdl = skill_sd_per_token(logps, teacher_logps, old_logps)  # (B, T)
        per_token = per_token + sdl_coef * sdl
        sums["sdl"] = (sdl * m).sum()
    loss = (per_token * m).sum() / token_normalizer
    return loss, {k: v.detach() for k, v in sums.items()}
