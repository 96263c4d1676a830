"""Role-wise GRPO advantage of EnvACE (official code Within-yao/EnvACE@f811bc2
`verl/trainer/ppo/ray_trainer.py::compute_advantage` with `group_by_agent_id=True`,
`verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`, `norm_adv_by_std_in_grpo=False`).

Rows are grouped by (uid, agent id): the G rollouts of one prompt pool the rewards of all their step-rows of one role,
so a trajectory with more caller steps weighs more in the caller mean. A_row = R_row - mean over its (group, role); no
std division (Dr. GRPO style); a (group, role) with a single row uses mean 0, as verl's GRPO does.
"""

import torch


def penalised_row_rewards(episode_rewards: list[float], completion_texts: list[str], coef: float) -> torch.Tensor:
    """(N,) row rewards R - coef * 1[the row's generation is empty or whitespace] (official Dr.MAS
    `ray_trainer.py::apply_invalid_action_penalty`@173e941 with `invalid_action_penalty_coef=0.1`, applied before the
    advantages; the checklist agents mark a row invalid only when its text is empty, `tool_caller_agent.py` and
    `tool_simulator_agent.py` `is_action_valid`). `coef=0` leaves R unchanged."""
    return torch.tensor([r - coef * (not text.strip()) for r, text in zip(episode_rewards, completion_texts, strict=True)],
                        dtype=torch.float32)  # fmt: skip


def rolewise_advantages(rewards: torch.Tensor, group_ids, roles) -> torch.Tensor:
    """A_row = R_row - mean_{rows r' with the same (group, role)} R_r'; mean 0 for a singleton (group, role).

    Args:
        rewards (`torch.Tensor`): (N,) reward of each row (the episode reward R, same on both roles' rows).
        group_ids: (N,) prompt group (uid) of each row; a tensor or a sequence of hashables.
        roles: (N,) role of each row (`"caller"`, `"simulator"`); a sequence of hashables or a tensor.

    Returns:
        `torch.Tensor`: (N,) advantages, dtype of `rewards`.
    """
    group_ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    roles = roles.tolist() if isinstance(roles, torch.Tensor) else list(roles)
    if not (len(group_ids) == len(roles) == rewards.numel()):
        raise ValueError(f"rewards ({rewards.numel()}), group_ids ({len(group_ids)}) and roles ({len(roles)}) differ.")
    keys = list(zip(group_ids, roles, strict=True))
    index = {k: j for j, k in enumerate(dict.fromkeys(keys))}
    key_ids = torch.tensor([index[k] for k in keys], dtype=torch.long, device=rewards.device)  # (N,)
    sums = torch.zeros(len(index), dtype=rewards.dtype, device=rewards.device).index_add_(0, key_ids, rewards)
    counts = torch.bincount(key_ids, minlength=len(index)).to(rewards.dtype)  # (K,)
    means = torch.where(counts > 1, sums / counts, torch.zeros_like(sums))  # singleton: mean 0 (verl)
    return rewards - means[key_ids]
