"""GiGPO advantages (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv
2505.10978), as verl-agent computes them (langfengQ/verl-agent@796ed31 `gigpo/core_gigpo.py`:
`compute_step_discounted_returns`, `compute_gigpo_outcome_advantage`; the same file ships in the SkillRise and SDAR
imports): an episode-group advantage plus w x a step advantage over the rows of a group that acted on the identical
anchor observation. Pure functions; `MultiTurnGRPOTrainer._score` (`advantage_mode="gigpo"`) and SkillRise's GiGPO
baseline call them, and their `_rollout_metrics` log the step groups' sizes (`step_group_counts`).
"""

from collections import Counter
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor


def won_step_rewards(num_steps: int, won: bool, *, reward_scale: float) -> list[float]:
    """Per-step rewards of one episode of `num_steps` rows: `reward_scale` on the last step of a won episode, 0
    elsewhere (verl-agent's per-step environment reward, `env_package/alfworld/envs.py` `compute_reward`: 10 * won on
    the winning step), on the scale of the episode reward `reward_scale * won` whatever the environment's own success
    reward is (TextRooms gives 1, ALFWorld 10). A won episode's last row is the action that won it."""
    rewards = [0.0] * num_steps
    if won and num_steps:
        rewards[-1] = float(reward_scale)
    return rewards


def discounted_step_returns(rewards: Sequence[float], *, gamma: float = 0.95) -> list[float]:
    """G_t = r_t + gamma G_{t+1} over one episode's per-step environment rewards (core_gigpo.py
    `compute_step_discounted_returns`, `algorithm.gamma` 0.95): a win at step T gives 10 gamma^(T-t) to step t."""
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def _group_normalize(values: Tensor, keys: Sequence[Hashable], *, single_mean: str, mode: str, eps: float) -> Tensor:
    """(R - mean_key) [/ (std_key + eps)] over every row of a key (no de-duplication), unbiased std; a key with one row
    has std 1 and mean 0 (`single_mean="zero"`, core_gigpo.py `episode_norm_reward`) or its own value
    (`single_mean="self"`, `step_norm_reward`: a state visited once gets no step advantage)."""
    per_key: dict[Hashable, list[float]] = {}
    for k, v in zip(keys, values.tolist(), strict=True):
        per_key.setdefault(k, []).append(v)
    stats = {}
    for k, vals in per_key.items():
        if len(vals) == 1:
            stats[k] = (0.0 if single_mean == "zero" else vals[0], 1.0)
        else:
            t = torch.tensor(vals)
            stats[k] = (t.mean().item(), t.std(unbiased=True).item())
    mean = torch.tensor([stats[k][0] for k in keys])  # (N,)
    if mode == "mean_norm":
        return values - mean
    return (values - mean) / (torch.tensor([stats[k][1] for k in keys]) + eps)


def gigpo_advantages(
    episode_rewards: Sequence[float] | Tensor,
    step_returns: Sequence[float] | Tensor,
    groups: Sequence[Hashable],
    anchors: Sequence[Hashable],
    *,
    step_advantage_w: float = 1.0,
    mode: str = "mean_norm",
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO advantage of N rows (core_gigpo.py `compute_gigpo_outcome_advantage`, Eq. 3, 6-8 of the GiGPO paper).

    A_i = A^E_i + w A^S_i with
    - A^E: the row's episode reward (return, minus the invalid penalty) centred on the mean over every row of its
      episode group (`episode_norm_reward` with `compute_mean_std_cross_all_data=True`: rows, not episodes, are the
      samples), a group of one row has mean 0;
    - A^S: the row's discounted step return centred on the mean over the rows of its group that acted on the
      identical anchor observation (`build_step_group`: exact match of the raw observation, no history), a state seen
      once has mean = its own return (A^S = 0);
    `mode="mean_norm"` (verl-agent's GiGPO scripts) subtracts the mean only; `mean_std_norm` also divides by the
    unbiased std + eps (std 1 for one row).

    Args:
        episode_rewards: (N,) per-row episode rewards.
        step_returns: (N,) per-row discounted step returns (`discounted_step_returns`).
        groups: N episode-group keys (the trials of one group replay the same task).
        anchors: N anchor observations (hashable, e.g. the observation text the row acted on).
    Returns:
        (N,) advantages.
    """
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"Unknown GiGPO mode {mode!r}; valid: mean_norm, mean_std_norm.")
    E = torch.as_tensor(episode_rewards, dtype=torch.float32).flatten()  # (N,)
    S = torch.as_tensor(step_returns, dtype=torch.float32).flatten()  # (N,)
    if not (len(E) == len(S) == len(groups) == len(anchors)):
        raise ValueError(f"GiGPO inputs differ in length: {len(E)}, {len(S)}, {len(groups)}, {len(anchors)}.")
    episode = _group_normalize(E, groups, single_mean="zero", mode=mode, eps=eps)
    step_keys = [(g, a) for g, a in zip(groups, anchors, strict=True)]
    step = _group_normalize(S, step_keys, single_mean="self", mode=mode, eps=eps)
    return episode + step_advantage_w * step


def step_group_counts(groups: Sequence[Hashable], anchors: Sequence[Hashable]) -> dict[str, int]:
    """Sums over the step groups of N rows, keyed (group, anchor) as `gigpo_advantages` forms them: groups, rows, and
    groups of one row (a state no other episode of its group acted on: A^S = 0). Add them over ranks, then
    `step_group_metrics`; verl-agent prints the same distribution each step (core_gigpo.py `summarize_group_size`)."""
    sizes = Counter(zip(groups, anchors, strict=True)).values()
    return {"step_groups": len(sizes), "step_group_rows": sum(sizes), "step_groups_single": sum(n == 1 for n in sizes)}


def step_group_metrics(counts: dict[str, float]) -> dict[str, float]:
    """`gigpo/step_group_size_mean` (rows per step group), `gigpo/step_group_single_ratio` (the share of step groups
    with one row) and `gigpo/step_grouped_row_ratio` (the share of rows in a step group of two or more: the rows the
    step advantage can act on) from `step_group_counts` summed over ranks."""
    groups, rows = counts.get("step_groups", 0), counts.get("step_group_rows", 0)
    single = counts.get("step_groups_single", 0)
    return {
        "gigpo/step_group_size_mean": rows / max(groups, 1),
        "gigpo/step_group_single_ratio": single / max(groups, 1),
        "gigpo/step_grouped_row_ratio": (rows - single) / max(rows, 1),
    }


__all__ = [
    "discounted_step_returns",
    "gigpo_advantages",
    "step_group_counts",
    "step_group_metrics",
    "won_step_rewards",
]
