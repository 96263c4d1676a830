"""SkillRise's decoupled credit assignment and advantages: pure functions (the unit-test surface).

- `trial_returns`: solve returns r_p and curate returns sum_{j>p} gamma^(j-p) r_j (official
  `agent_system/multi_turn_rollout/skillrise_rollout_loop.py::skillrise_credit_assignment`).
- `mean_centered_advantages`: A = R - mean over the distinct trials of the row's (group, position, role) key
  (official `verl/trainer/ppo/core_gigpo.py::compute_skillrise_outcome_advantage`, mode `mean_norm`).
The invalid-format penalty (verl-agent `apply_invalid_action_penalty`), the GRPO baseline's row advantages and the GiGPO
baseline's are the shared `agentrl_shared.trainer.row_rewards` / `grpo_row_advantages` and `agentrl_shared.gigpo`.
Official code cited as imported by lyq1119/SkillRise-reproduction-and-refinement@79bbd91 (upstream Within-yao/SkillRise).
"""

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor


ADVANTAGE_MODES = ("mean_norm", "mean_std_norm", "grpo", "gigpo")


def trial_returns(outcomes: Sequence[float], *, gamma: float = 0.6) -> tuple[list[float], list[float]]:
    """Returns of one trial from its K task outcomes r_0..r_{K-1} (official `skillrise_credit_assignment`).

    Args:
        outcomes (`Sequence[float]`): r_p, the summed solve-phase environment reward of task p (0 or 10).
        gamma (`float`, *optional*, defaults to `0.6`): `traj_gamma`, the downstream discount.

    Returns:
        `(solve, curate)`: `solve[p] = r_p` for p = 0..K-1 (a task's own outcome only, no cross-task signal) and
        `curate[p] = sum_{j>p} gamma**(j-p) * r_j` for p = 0..K-2 (the discounted success of every later task; the
        only place where cross-task credit flows). K = 3: curate = [0.6 r_1 + 0.36 r_2, 0.6 r_2].
    """
    r = [float(x) for x in outcomes]
    K = len(r)
    curate = [sum(gamma ** (j - p) * r[j] for j in range(p + 1, K)) for p in range(K - 1)]
    return list(r), curate


def mean_centered_advantages(
    values: Sequence[float] | Tensor,
    keys: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    *,
    mode: str = "mean_norm",
    eps: float = 1e-6,
) -> Tensor:
    """SkillRise advantage (official `compute_skillrise_outcome_advantage`): A_i = R_i - mean_key(R).

    The baseline of row i is the mean, over the distinct trials (`traj_ids`) that share row i's key (group, task
    position, role), of each trial's FIRST-SEEN value: a trial with many solve turns contributes one value, so a long
    episode does not outweigh a short one. Solve and curate rows never share a baseline (role is in the key). A key
    with a single distinct trial uses mean 0 (A = R). `mode="mean_norm"` (the scripts' default) has no std division;
    `mode="mean_std_norm"` (the ablation) divides by the unbiased std of the de-duplicated values plus `eps` (std 1 for
    a single trial).

    Args:
        values: (N,) per-row returns R (already penalised).
        keys: N hashable keys, e.g. `(group_id, position, role)`.
        traj_ids: N trial ids (official `traj_uid`).

    Returns:
        (N,) float tensor of advantages (the curate loss weight is applied by the caller).
    """
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"Unknown SkillRise advantage mode {mode!r}; valid: mean_norm, mean_std_norm.")
    R = torch.as_tensor(values, dtype=torch.float32).flatten()  # (N,)
    if not (len(R) == len(keys) == len(traj_ids)):
        raise ValueError(f"values, keys and traj_ids differ in length: {len(R)}, {len(keys)}, {len(traj_ids)}.")
    per_key: dict[Hashable, list[float]] = {}
    seen: set = set()
    for i, (k, t) in enumerate(zip(keys, traj_ids, strict=True)):
        if (k, t) in seen:  # de-duplicate by trial: only the first row of a trial counts
            continue
        seen.add((k, t))
        per_key.setdefault(k, []).append(R[i].item())
    stats: dict[Hashable, tuple[float, float]] = {}
    for k, vals in per_key.items():
        if len(vals) == 1:
            stats[k] = (0.0, 1.0)  # official: a single trial has mean 0, std 1
        else:
            v = torch.tensor(vals)
            stats[k] = (v.mean().item(), v.std(unbiased=True).item())
    mean = torch.tensor([stats[k][0] for k in keys])  # (N,)
    if mode == "mean_norm":
        return R - mean
    std = torch.tensor([stats[k][1] for k in keys])  # (N,)
    return (R - mean) / (std + eps)
