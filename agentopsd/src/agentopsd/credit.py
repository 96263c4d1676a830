"""AgentOPSD's credit assignment as pure tensor functions: the recursive log-odds belief and its multipliers.

Official code: ZethWang/AgentOPSD@0c478b2 `verl/trainer/ppo/opsd_utils.py` (`compute_opsd_turn_advantage`,
`compute_opsd_token_advantage`, `compute_group_mean_v0`, `_discounted_cumsum`, `_group_normalize*`) and, for the RLSD
baseline, ZJU-REAL/SDAR@8b85c23 `verl/trainer/ppo/rlsd_utils.py::compute_rlsd_token_advantage`.

The belief over task success lives in log-odds space (the code's "Bayesian value recursion"):
    logit V_k = logit V_0 + sum_{j<=k} e_j,   V_k = clamp(sigmoid(.), 1e-6, 1 - 1e-6),   q_k = V_k - V_{k-1}
with e the teacher-student log-prob gap (summed per turn, or per token). The full method ("paper Eq. 6" in the code's
comments, `belief_mult=true, signed=true`) z-scores q within an episode (turn) or a row (token) and turns it into an
outcome-consistent multiplier m = clip(1 + b * sign(A) * z, 1 - b, 1 + b) of the GRPO advantage:
    A_hat = A * ((1 - lam) + lam * m)  in  A * [1 - lam * b, 1 + lam * b],  never a sign flip.
"""

import math

import torch
from torch import Tensor


V0_CLAMP = 1e-4  # opsd_utils.py: V0 = clamp(V0, 1e-4, 1 - 1e-4) so logit(V_0) stays finite
EPS = 1e-6  # opsd_utils.py `eps`: the V_k clamp and the z-score denominators


def discounted_cumsum(x: Tensor, gamma: float) -> Tensor:
    """Leaky cumulative sum along the last dim: c_t = gamma * c_{t-1} + x_t (`_discounted_cumsum`); gamma >= 1 is
    the plain cumsum (the full method, `belief_decay_gamma=1`).

    Args:
        x: (..., K) evidence.
    """
    if gamma >= 1.0:
        return torch.cumsum(x, dim=-1)
    out = torch.empty_like(x)
    acc = torch.zeros_like(x[..., 0])
    for t in range(x.size(-1)):  # O(K) recurrence: the closed form gamma^{-j} overflows on long horizons (official)
        acc = gamma * acc + x[..., t]
        out[..., t] = acc
    return out


def belief_increments(evidence: Tensor, v0: Tensor | float, *, gamma: float = 1.0) -> tuple[Tensor, Tensor]:
    """The belief path V_1..V_K and its marginal revisions q_k = V_k - V_{k-1} (V_0 the clamped prior).

    Args:
        evidence: (..., K) per-step evidence e_k (already masked).
        v0: (...,) or scalar prior success probability.
    Returns:
        (V, q), both (..., K).
    """
    v0 = torch.as_tensor(v0, dtype=evidence.dtype, device=evidence.device).clamp(V0_CLAMP, 1.0 - V0_CLAMP)
    logit_v0 = torch.log(v0 / (1.0 - v0)).unsqueeze(-1)  # (..., 1)
    V = torch.sigmoid(logit_v0 + discounted_cumsum(evidence, gamma)).clamp(EPS, 1.0 - EPS)  # (..., K)
    V_prev = torch.cat([v0.unsqueeze(-1).expand_as(V[..., :1]), V[..., :-1]], dim=-1)  # (..., K), V_{-1} = V_0
    return V, V - V_prev


def _multiplier(z: Tensor, advantage: Tensor, band: float) -> Tensor:
    """m = clip(1 + b * sign(A) * z, 1 - b, 1 + b): Eq. 6 of the code, "outcome-consistency"."""
    return torch.clamp(1.0 + band * torch.sign(advantage) * z, 1.0 - band, 1.0 + band)


def turn_advantages(
    advantage: Tensor | float,
    turn_evidence: Tensor,
    v0: Tensor | float,
    *,
    lam: float = 0.5,
    band: float = 0.2,
    gamma: float = 1.0,
    signed: bool = True,
    belief_gate: bool = True,
    mult_signed: bool = True,
    center: bool = False,
) -> Tensor:
    """Turn-level AgentOPSD credit for ONE episode (`compute_opsd_turn_advantage`, `belief_mult` route).

    e_k = per-turn sum of (teacher - student) log-probs over response tokens; V_0 = clamp(v0, 1e-4, 1 - 1e-4);
    logit V_k = logit V_0 + cumsum(e); V_k = clamp(sigmoid(.), 1e-6, 1 - 1e-6); q_k = V_k - V_{k-1};
    z = (q - mean q) / (population std q + 1e-6); m = clamp(1 + band * sign(A) * z, 1 - band, 1 + band);
    returns A * ((1 - lam) + lam * m). With K = 1 the std is 0, so z = 0 and m = 1.

    Args:
        advantage: scalar GRPO advantage A of the episode, or (K,) one per row (rows can differ by the invalid-action
            penalty; the official code reads each row's own advantage, so row k gets `turn_advantages(A_k, ...)[k]`).
        turn_evidence: (K,) e_k in turn order.
        v0: the group prior (see `group_mean_v0`).
        lam, band: `mult_lambda`, `mult_band`.
        gamma: `belief_decay_gamma` (ablation; 1 = plain cumsum).
        signed: `signed=True` z-scores the signed q (full method); False: magnitude-only z-score of |q| with no
            sign(A) steering (ablation).
        belief_gate: True uses q (which carries the implicit V(1-V) gate); False the raw evidence e (ablation).
        mult_signed: True multiplies A; False |A| (ablation "drop the verifier's direction").
        center: `center_delta`: subtract the episode's mean turn evidence first (ablation).
    Returns:
        (K,) reweighted advantages.
    """
    e = turn_evidence
    if center and e.numel() > 1:
        e = e - e.mean()
    _, q = belief_increments(e, v0, gamma=gamma)  # (K,)
    A = torch.as_tensor(advantage, dtype=e.dtype, device=e.device).expand_as(e)  # (K,)
    if signed:
        s = q if belief_gate else e
        z = (s - s.mean()) / (s.std(unbiased=False) + EPS)  # population std; K = 1 -> std 0 -> z = 0
        m = _multiplier(z, A, band)
    else:
        s = q.abs() if belief_gate else e.abs()
        z = (s - s.mean()) / (s.std(unbiased=False) + EPS)
        m = torch.clamp(1.0 + band * z, 1.0 - band, 1.0 + band)
    direction = A if mult_signed else A.abs()
    return direction * ((1.0 - lam) + lam * m)  # (K,)


def token_advantages(
    advantage: Tensor | float,
    token_evidence: Tensor,
    mask: Tensor,
    v0: Tensor | float,
    *,
    lam: float = 0.5,
    band: float = 0.2,
    gamma: float = 1.0,
    signed: bool = True,
    belief_gate: bool = True,
    mult_signed: bool = True,
    center: bool = False,
) -> Tensor:
    """Token-level AgentOPSD credit for one row (`compute_opsd_token_advantage`, `belief_mult` route), used by the
    official WebShop and Search-QA scripts (`granularity=token`).

    e_t = (teacher - student log-prob) * mask; the recursion of `turn_advantages` over the row's tokens, from the group
    prior V_0 (not a neutral 0.5); z over the valid tokens with the population variance and the epsilon inside the
    square root: z = (q - mean q) / (sqrt(var q + 1e-6) + 1e-6); the same multiplier; returns
    A * ((1 - lam) + lam * m) * mask. Leading batch dims are allowed (rows are independent).

    Args:
        advantage: (...,) or scalar GRPO advantage of the row.
        token_evidence: (..., T) teacher - student log-prob per token.
        mask: (..., T) response mask.
        v0: (...,) or scalar prior.
        Others: as `turn_advantages`.
    Returns:
        (..., T) per-token advantages, zero outside `mask`.
    """
    mask = mask.to(token_evidence.dtype)
    e = token_evidence * mask  # (..., T)
    n = mask.sum(dim=-1, keepdim=True).clamp(min=1.0)  # (..., 1) valid tokens
    if center:
        e = (e - e.sum(dim=-1, keepdim=True) / n) * mask
    _, q = belief_increments(e, v0, gamma=gamma)
    q = q * mask  # increments outside the response are zeroed, as the official `A_t * response_mask`
    A = torch.as_tensor(advantage, dtype=e.dtype, device=e.device).unsqueeze(-1)  # (..., 1)
    if signed:
        s = q if belief_gate else e
    else:
        s = q.abs() if belief_gate else e.abs()
    mean = (s * mask).sum(dim=-1, keepdim=True) / n
    var = (((s - mean) ** 2) * mask).sum(dim=-1, keepdim=True) / n  # population variance over valid tokens
    z = (s - mean) / (torch.sqrt(var + EPS) + EPS)
    m = _multiplier(z, A, band) if signed else torch.clamp(1.0 + band * z, 1.0 - band, 1.0 + band)
    direction = A if mult_signed else A.abs()
    return direction * ((1.0 - lam) + lam * m) * mask  # (..., T)


def group_mean_v0(rewards: Tensor, group_ids: Tensor, episode_ids: Tensor, *, reward_scale: float = 1.0) -> Tensor:
    """V_0 per row: the mean over the group's trajectories of each trajectory's first-seen row reward, clamped to
    [1e-4, 1 - 1e-4] (`compute_group_mean_v0`).

    The official rewards are on the environment scale (10 * won on ALFWorld/WebShop, minus penalties), so V_0
    saturates at 1 - 1e-4 whenever any trajectory of the group won; `reward_scale` (our switch `v0_reward_scale`,
    default 1 = official) divides the rewards first to get a success rate instead.

    Args:
        rewards: (N,) per-row rewards (the episode return minus the row's penalty), rows in rollout order.
        group_ids: (N,) task-group ids (verl `uid`). episode_ids: (N,) trajectory ids (`traj_uid`).
    Returns:
        (N,) prior per row.
    """
    first: dict[tuple[int, int], float] = {}
    for r, g, e in zip(rewards.tolist(), group_ids.tolist(), episode_ids.tolist(), strict=True):
        first.setdefault((g, e), r / reward_scale)  # dedup steps of a trajectory: the first row seen wins
    per_group: dict[int, list[float]] = {}
    for (g, _), r in first.items():
        per_group.setdefault(g, []).append(r)
    means = {g: sum(v) / len(v) for g, v in per_group.items()}
    v0 = torch.tensor([means[g] for g in group_ids.tolist()], dtype=rewards.dtype)
    return v0.clamp(V0_CLAMP, 1.0 - V0_CLAMP)  # (N,)


def telescoping_credit(
    q: Tensor, advantage: Tensor, episode_return: float, v0: float, *, anchoring: bool = False
) -> Tensor:
    """Raw-recursion ablation (`belief_mult=false`, no group norm): A_k = q_k (sign from A if `anchoring`, magnitude
    |q_k|), rescaled so that sum_k A_k = R - V_0; a zero-sum episode gets 0 (official guard).

    Args:
        q: (K,) or (T,) increments (masked). advantage: same shape, the GRPO advantage (sign only).
    """
    base = torch.sign(advantage) * q.abs() if anchoring else q
    total = base.sum()
    if total.abs() <= EPS:
        return torch.zeros_like(base)
    return base * ((episode_return - v0) / total)


def group_normalize(values: Tensor, group_ids: Tensor, mask: Tensor | None = None) -> Tensor:
    """`use_group_norm` ablation ("paper Eq. (20)(21) stabilisers" in the code): (x - mean) / (population std + 1e-6)
    over each group's valid entries; groups with at most one valid entry are left as they are (official).

    Args:
        values: (N,) per-turn credit, or (N, T) per-token credit with `mask` (N, T).
    """
    out = values.clone()
    valid = torch.ones_like(values, dtype=torch.bool) if mask is None else mask.bool()
    for g in torch.unique(group_ids):
        rows = group_ids == g
        sel = values[rows][valid[rows]]
        if sel.numel() <= 1:
            continue
        normed = (values[rows] - sel.mean()) / (sel.std(unbiased=False) + EPS)
        out[rows] = torch.where(valid[rows], normed, values[rows])
    return out if mask is None else out * mask.to(out.dtype)


def episode_turn_credit(
    advantages: Tensor,
    turn_evidence: Tensor,
    v0: Tensor,
    episode_ids: Tensor,
    turn_idx: Tensor,
    *,
    belief_mult: bool = True,
    group_ids: Tensor | None = None,
    returns: Tensor | None = None,
    anchoring: bool = False,
    group_norm: bool = False,
    **belief,
) -> Tensor:
    """Turn granularity over a whole rollout (`compute_opsd_turn_advantage`): rows grouped by episode, ordered by
    turn index; the full method gives row k `turn_advantages(A_k, e_episode, V_0)[k]`.

    With `belief_mult=False` (ablation) the raw increments q_k are the credit: anchored to sign(A) if `anchoring`,
    then either z-scored over the turns of each task group (`group_norm`) or rescaled to sum to R - V_0
    (`telescoping_credit`).

    Args:
        advantages: (N,) GRPO row advantages. turn_evidence: (N,) per-row sum of masked teacher - student gaps.
        v0: (N,) priors. episode_ids, turn_idx: (N,) ints. group_ids, returns: (N,) for the raw ablation paths.
        belief: `lam`, `band`, `gamma`, `signed`, `belief_gate`, `mult_signed`, `center` of `turn_advantages`.
    Returns:
        (N,) per-row advantages.
    """
    out = torch.zeros_like(advantages)
    for ep in torch.unique(episode_ids):
        rows = torch.nonzero(episode_ids == ep).flatten()
        rows = rows[torch.argsort(turn_idx[rows])]  # (K,) in turn order
        if belief_mult:
            out[rows] = turn_advantages(advantages[rows], turn_evidence[rows], v0[rows[0]], **belief)
            continue
        e = turn_evidence[rows]
        if belief.get("center", False) and e.numel() > 1:
            e = e - e.mean()
        _, q = belief_increments(e, v0[rows[0]], gamma=belief.get("gamma", 1.0))
        if group_norm:
            out[rows] = torch.sign(advantages[rows]) * q.abs() if anchoring else q
        else:
            out[rows] = telescoping_credit(
                q, advantages[rows], float(returns[rows[0]]), float(v0[rows[0]]), anchoring=anchoring
            )
    if group_norm and not belief_mult:
        out = group_normalize(out, group_ids)
    return out


def row_token_credit(
    advantages: Tensor,
    token_evidence: Tensor,
    mask: Tensor,
    v0: Tensor,
    *,
    belief_mult: bool = True,
    group_ids: Tensor | None = None,
    returns: Tensor | None = None,
    anchoring: bool = False,
    group_norm: bool = False,
    **belief,
) -> Tensor:
    """Token granularity over a whole rollout (`compute_opsd_token_advantage`): every row runs its own recursion.

    Args:
        advantages: (N,). token_evidence, mask: (N, T). v0: (N,). Others as `episode_turn_credit`.
    Returns:
        (N, T) per-token advantages.
    """
    if belief_mult:
        return token_advantages(advantages, token_evidence, mask, v0, **belief)
    mask = mask.to(token_evidence.dtype)
    e = token_evidence * mask
    if belief.get("center", False):
        e = (e - e.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)) * mask
    _, q = belief_increments(e, v0, gamma=belief.get("gamma", 1.0))
    q = q * mask  # (N, T)
    if group_norm:
        base = torch.sign(advantages).unsqueeze(-1) * q.abs() if anchoring else q
        return group_normalize(base * mask, group_ids, mask)
    out = torch.stack(
        [telescoping_credit(q[i], advantages[i].expand_as(q[i]), float(returns[i]), float(v0[i]), anchoring=anchoring)
         for i in range(q.size(0))]
    )  # fmt: skip
    return out * mask


def rlsd_token_advantages(advantage: Tensor, token_evidence: Tensor, mask: Tensor, *, lam: float, clip: float = 0.2):
    """RLSD baseline (`compute_rlsd_token_advantage`): w_t = clip(exp(sign(A) * delta_t), 1 - clip, 1 + clip),
    A_t = A * ((1 - lam) + lam * w_t) * mask. The exponent is clipped before exp (same values; no overflow in bf16),
    as AgentOPSD's `tether_seq` copy of it does.

    Args:
        advantage: (B,) row advantages. token_evidence: (B, T) teacher - student. mask: (B, T).
    """
    A = advantage.unsqueeze(-1)  # (B, 1)
    lo, hi = 1.0 - clip, 1.0 + clip
    w = torch.exp(torch.clamp(torch.sign(A) * token_evidence, math.log(lo), math.log(hi)))  # (B, T)
    return A * ((1.0 - lam) + lam * w) * mask.to(w.dtype)


def linear_warmdown(lam0: float, step: int, warmdown_steps: int) -> float:
    """lam0 * (1 - step / W) until step W, then 0; W <= 0 keeps lam0 (`_get_opsd_mult_lambda`, `_get_rlsd_lambda`).
    `step` is verl's `global_steps`, which is 1 at the first update."""
    if warmdown_steps <= 0:
        return lam0
    if step >= warmdown_steps:
        return 0.0
    return lam0 * (1.0 - step / warmdown_steps)


def blamed_turns(evidence: Tensor, v0: Tensor | float, episode_ids: Tensor, turn_idx: Tensor) -> dict[int, int | None]:
    """Per episode, the turn the belief blames most: the most negative revision q_k = V_k - V_{k-1} (at A < 0 the
    multiplier m = clip(1 - b z(q)) is largest there, so is the blame), None where several turns tie for it (a
    saturated prior can flatten q to float zeros). A diagnostic of the credit, not part of it.

    Args:
        evidence: (N,) per-row (turn) evidence e_k. v0: (N,) or scalar prior. episode_ids, turn_idx: (N,).
    """
    v0 = torch.as_tensor(v0, dtype=evidence.dtype).expand_as(evidence)
    out: dict[int, int | None] = {}
    for eid in episode_ids.unique().tolist():
        rows = (episode_ids == eid).nonzero().flatten()
        rows = rows[turn_idx[rows].argsort()]
        _, q = belief_increments(evidence[rows], v0[rows[0]])  # (K,)
        lowest = (q == q.min()).nonzero().flatten()
        out[eid] = int(turn_idx[rows[lowest[0]]]) if lowest.numel() == 1 else None
    return out
