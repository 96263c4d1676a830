"""SkillRise's actor loss as pure tensor functions (official verl `ppo_trainer.yaml` defaults as set by
`examples/skillrise_*/skillrise_*_qwen3_4b.sh`: clip 0.2, dual clip 3, entropy 0.001, `use_kl_loss=False`,
`loss_agg_mode=token-mean`; Within-yao/SkillRise as imported by lyq1119/SkillRise-reproduction-and-refinement@79bbd91).

- `dual_clip_policy_loss`: the per-token PPO surrogate with dual clip (word for word the copy in `sdar/losses.py`).
- `step_loss`: one micro-batch's share of an optimizer step's actor loss, L = pg - c_ent H, every term summed over
  tokens and divided by the step's global token count (verl's token-mean over the step's mini-batch).
"""

import torch
from torch import Tensor


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


def step_loss(
    logps: Tensor,
    entropies: Tensor,
    mask: Tensor,
    advantages: Tensor,
    old_logps: Tensor,
    *,
    token_normalizer: float,
    eps_low: float,
    eps_high: float,
    clip_c: float,
    entropy_coef: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """This micro-batch's share of one optimizer step's actor loss (verl PPO actor, no KL term):

    L = sum_t m_t [pg_t - c_ent H_t] / token_normalizer

    With `token_normalizer` = (real loss tokens of the whole step over all ranks) / world size, the gradient that the
    data-parallel mean produces is the token-mean of both terms over all of the step's tokens (verl
    `loss_agg_mode=token-mean`), whatever micro-batch or rank holds them: solve and curate rows, short and long
    episodes, weigh the same per token.

    Args:
        logps, entropies: (B, T) log-probs (with grad) and entropies of the loss forward.
        mask: (B, T) loss mask. advantages: (B,). old_logps: (B, T), constant.
    Returns:
        `(loss, sums)`: the scalar to backpropagate, and detached per-term token sums (for logging).
    """
    m = mask.to(logps.dtype)
    pg = dual_clip_policy_loss(logps, old_logps, advantages, eps_low=eps_low, eps_high=eps_high, clip_c=clip_c)
    loss = ((pg - entropy_coef * entropies) * m).sum() / token_normalizer
    return loss, {"pg": (pg * m).sum().detach(), "entropy": (entropies * m).sum().detach()}
