"""VAD's equations as pure tensor functions (paper arXiv 2607.28590, Sec. 3 / Eqs. 2-4 and 7-10).

Every function works on the student's top-K support: the last dimension is K (or K + 1 once a tail bucket is added).
Leading dimensions are free (usually (B, T)). Nothing here reads a config or a trainer; scalars are keyword-only.
Target-side quantities are returned detached where the paper puts a stop-gradient (sg).
"""

import math

import torch
from torch import Tensor


TARGETS = ("vad", "one_sided", "scalar", "direct")
DIVERGENCES = ("jsd", "fkl", "rkl")
BRANCH_WEIGHTS = ("capped", "redistribute")
Q_TAILS = ("student_mass", "zero")


def center(x: Tensor) -> Tensor:
    """phi_t (Sec. 3.2): x - mean(x) over the support (last dimension). Shapes (..., K) -> (..., K)."""
    return x - x.mean(dim=-1, keepdim=True)


def smoothed_logp(logp: Tensor, *, eps: float = 1e-10) -> Tensor:
    """log(p + eps), computed exactly from log p (the epsilon inside phi_t's logs, Sec. 3.2; UNCERTAIN value)."""
    if eps <= 0.0:
        return logp
    return torch.logaddexp(logp, torch.full_like(logp, math.log(eps)))


def visual_correction(
    student_logp: Tensor, teacher_pos_logp: Tensor, teacher_neg_logp: Tensor, *, zeta: float = 1e-3
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Teacher correction, evidence direction and one-sided projection (Eqs. 2-4).

    Args:
        student_logp (`Tensor`): log p_S^0 on the support, shape (..., K).
        teacher_pos_logp (`Tensor`): log p_T^+ (teacher with the evidence crop x+), shape (..., K).
        teacher_neg_logp (`Tensor`): log p_T^- (teacher with the degraded view x-), shape (..., K).
        zeta (`float`, *optional*, defaults to `1e-3`): ridge in the projection denominator (paper value).

    Returns:
        `(r, u, r_vis, r_res)`, each (..., K): r = phi(T+) - phi(S); u = phi(T+) - phi(T-);
        beta = relu(<r, u>) / (|u|^2 + zeta); r_vis = beta * u; r_res = r - r_vis.
    """
    phi_s, phi_pos, phi_neg = center(student_logp), center(teacher_pos_logp), center(teacher_neg_logp)
    r = phi_pos - phi_s  # (..., K) full teacher correction
    u = phi_pos - phi_neg  # (..., K) counterfactual visual-evidence direction (signed proxy)
    dot = (r * u).sum(dim=-1, keepdim=True)  # (..., 1)
    beta = dot.clamp(min=0.0) / (u.pow(2).sum(dim=-1, keepdim=True) + zeta)  # (..., 1); 0 when <r, u> <= 0
    r_vis = beta * u  # intervention-aligned component
    r_res = r - r_vis  # proxy-unexplained residual (not claimed to be "pure language")
    return r, u, r_vis, r_res


def projection_coefficient(r: Tensor, u: Tensor, *, zeta: float = 1e-3) -> Tensor:
    """beta_t of Eq. 4 alone (for logging): relu(<r, u>) / (|u|^2 + zeta). Shapes (..., K) -> (...)."""
    return (r * u).sum(dim=-1).clamp(min=0.0) / (u.pow(2).sum(dim=-1) + zeta)


def _unit(x: Tensor, eps: float) -> Tensor:
    """x / (|x| + eps) over the last dimension, exactly 0 where x = 0 (an empty branch contributes nothing)."""
    norm = x.norm(dim=-1, keepdim=True)
    return torch.where(norm > 0, x / (norm + eps).clamp(min=torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def branch_reconstruction(
    r: Tensor, u: Tensor, r_vis: Tensor, *, tau_plus: float, eps: float = 1e-8, weights: str = "capped"
) -> Tensor:
    """Budgeted branch-aware reconstruction r_t^VAD (Eq. 7), detached.

    u is split into a support branch u+ = max(u, 0) and a refute branch u- = min(u, 0); the budget is B = |r_vis|.
    Branch agreements a+- = relu(<r, u+- / |u+-|>) give the shares (UNCERTAIN: the paper states only that the support share is capped and the cut budget not redistributed):
    w+ = min(tau_plus, a+ / (a+ + a-)) and, for `weights="capped"` (default), w- = a- / (a+ + a-), so the budget cut
    off by the cap is not redistributed; `weights="redistribute"` (ablation) uses w- = 1 - w+. When a+ + a- = 0,
    r_VAD = 0. Because u+ and u- have disjoint supports, |r_VAD| = B * sqrt(w+^2 + w-^2) <= B when w+ + w- <= 1.

    Args:
        r, u, r_vis (`Tensor`): outputs of [`visual_correction`], each (..., K).
        tau_plus (`float`): cap on the support share (paper: 0.8 for 4B, 0.7 for 9B).
        eps (`float`, *optional*, defaults to `1e-8`): norm-denominator guard (UNCERTAIN; unspecified in the paper).
        weights (`str`, *optional*, defaults to `"capped"`): `capped` or `redistribute`.

    Returns:
        `Tensor`: r_VAD, shape (..., K), detached.
    """
    if weights not in BRANCH_WEIGHTS:
        raise ValueError(f"Unknown branch weights {weights!r}; valid: {', '.join(BRANCH_WEIGHTS)}.")
    r, u, r_vis = r.detach(), u.detach(), r_vis.detach()
    budget = r_vis.norm(dim=-1, keepdim=True)  # (..., 1) B_t = |r_vis|
    u_pos, u_neg = u.clamp(min=0.0), u.clamp(max=0.0)  # (..., K) support / refute branches
    e_pos, e_neg = _unit(u_pos, eps), _unit(u_neg, eps)  # u+- / (|u+-| + eps); 0 when the branch is empty
    a_pos = (r * e_pos).sum(dim=-1, keepdim=True).clamp(min=0.0)  # (..., 1) agreement of each branch with r
    a_neg = (r * e_neg).sum(dim=-1, keepdim=True).clamp(min=0.0)
    total = a_pos + a_neg
    safe_total = torch.where(total > 0, total, torch.ones_like(total))
    w_pos = torch.clamp(a_pos / safe_total, max=tau_plus)  # only the support share is capped
    w_neg = a_neg / safe_total if weights == "capped" else 1.0 - w_pos
    w_pos, w_neg = torch.where(total > 0, w_pos, 0.0), torch.where(total > 0, w_neg, 0.0)  # no agreement: r_VAD = 0
    return budget * (w_pos * e_pos + w_neg * e_neg)  # (..., K)


def add_tail_bucket(logp: Tensor) -> Tensor:
    """Append log(1 - sum exp(logp)) as one more coordinate: (..., K) -> (..., K + 1) (VisionOPD/Vision-OPD @ c2e345f, `verl/trainer/ppo/core_algos.py::compute_self_distillation_loss` `add_tail`)."""
    log_mass = torch.logsumexp(logp, dim=-1, keepdim=True).clamp(max=-1e-7)  # keep the tail strictly positive
    return torch.cat([logp, torch.log(-torch.expm1(log_mass))], dim=-1)


def student_anchored_target(
    student_logp: Tensor, shift: Tensor, *, clip: float = 20.0, tail: str | None = "student_mass", log_eps: float = 0.0
) -> Tensor:
    """q_t = softmax(phi(p_S) + clip(shift, -c, c)) (Eq. 8), with the tail bucket (Sec. 4.1), detached.

    Args:
        student_logp (`Tensor`): log p_S^0 on the support, (..., K); detached here (sg on the target side).
        shift (`Tensor`): r_VAD (or r_vis / s * r for the ablations), (..., K).
        clip (`float`, *optional*, defaults to `20.0`): c, the paper's clip of the shift.
        tail (`str` or `None`, *optional*, defaults to `"student_mass"`): `student_mass` (UNCERTAIN default (a): q's K
            coordinates are scaled by the student's top-K mass and the tail gets the student's tail mass), `zero`
            (alternative (b): q lives on K and the tail bucket gets zero mass), or `None` (no tail: (..., K)).
        log_eps (`float`, *optional*, defaults to `0.0`): epsilon inside phi's log (see [`smoothed_logp`]); the tail
            mass always comes from the exact `student_logp`.

    Returns:
        `Tensor`: log q, (..., K + 1) with a tail, else (..., K).
    """
    student_logp = student_logp.detach()
    phi_s = center(smoothed_logp(student_logp, eps=log_eps))
    log_q = torch.log_softmax(phi_s + shift.detach().clamp(-clip, clip), dim=-1)  # (..., K)
    if tail is None:
        return log_q
    if tail == "student_mass":
        with_tail = add_tail_bucket(student_logp)  # (..., K + 1)
        log_mass = torch.logsumexp(with_tail[..., :-1], dim=-1, keepdim=True)
        return torch.cat([log_q + log_mass, with_tail[..., -1:]], dim=-1)
    if tail == "zero":
        return torch.cat([log_q, torch.full_like(log_q[..., :1], -math.inf)], dim=-1)
    raise ValueError(f"Unknown q tail {tail!r}; valid: {', '.join(Q_TAILS)} or None.")


def regulariser_weight(r: Tensor, shift: Tensor, *, eps: float = 1e-8) -> Tensor:
    """a_t = sg(clip(1 - |r_VAD| / (|r| + eps), 0, 1)) (Eq. 10). Shapes (..., K) -> (...).

    Grows when little of the correction is visually attributable; |r| = 0 gives rho = 0 and a = 1.
    """
    rho = shift.detach().norm(dim=-1) / (r.detach().norm(dim=-1) + eps)
    return (1.0 - rho).clamp(0.0, 1.0)


def _kl(log_p: Tensor, log_q: Tensor) -> Tensor:
    """KL(p || q) over the last dimension, with 0 * log 0 = 0 for zero-mass coordinates of p."""
    p = log_p.exp()
    terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))
    return terms.sum(dim=-1)


def js_divergence(log_p: Tensor, log_q: Tensor) -> Tensor:
    """D_JS(p, q) = 0.5 KL(p || m) + 0.5 KL(q || m), m = (p + q) / 2, over the last dimension (Eq. 9).

    Args:
        log_p, log_q (`Tensor`): log-probabilities, (..., K') each (-inf allowed for zero mass).

    Returns:
        `Tensor`: (...), in [0, ln 2].
    """
    log_m = torch.logaddexp(log_p, log_q) - math.log(2.0)  # (..., K')
    return 0.5 * _kl(log_p, log_m) + 0.5 * _kl(log_q, log_m)


def divergence(log_target: Tensor, log_student: Tensor, *, kind: str = "jsd") -> Tensor:
    """D(sg(target), student) over the last dimension (Eq. 9 and the Tab. 4 ablation): `jsd`, `fkl`, `rkl`.

    `fkl` is KL(target || student) (mode covering), `rkl` is KL(student || target) (mode seeking). (...,K') -> (...).
    """
    log_target = log_target.detach()
    if kind == "jsd":
        return js_divergence(log_target, log_student)
    if kind == "fkl":
        return _kl(log_target, log_student)
    if kind == "rkl":
        return _kl(log_student, log_target)
    raise ValueError(f"Unknown divergence {kind!r}; valid: {', '.join(DIVERGENCES)}.")


def support_logps(logits: Tensor, indices: Tensor) -> Tensor:
    """Exact log-probabilities of `indices` under softmax(logits): (..., V), (..., K) -> (..., K)."""
    return torch.gather(logits, -1, indices) - torch.logsumexp(logits, dim=-1, keepdim=True)


def _chunk_logps(logits: Tensor, indices: Tensor, temperature: float) -> Tensor:
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # bf16 -> fp32, fp64 stays
    return torch.gather(logits, -1, indices) - torch.logsumexp(logits, dim=-1, keepdim=True)


def chunked_support_logps(
    logits: Tensor, indices: Tensor | None = None, *, k: int = 100, temperature: float = 1.0, chunk_size: int = 256
) -> tuple[Tensor, Tensor]:
    """log softmax(logits / temperature) at `indices` (or at the top-`k` tokens), chunk by chunk over the completion.

    Only one (B, chunk, V) fp32 slice exists at a time; with gradient, each chunk's softmax is recomputed in the
    backward pass (activation checkpointing), so what stays alive is the model's own (B, C, V) logits and the
    (B, C, K) result. Equal to the unchunked computation (tests/test_vad_losses.py).

    Args:
        logits (`Tensor`): (B, C, V), any float dtype, with or without gradient.
        indices (`Tensor` or `None`): (B, C, K) token ids; None takes the top-`k` ids of `logits`.

    Returns:
        `(logps, indices)`, each (B, C, K).
    """
    from torch.utils.checkpoint import checkpoint

    outs, ids = [], []
    for start in range(0, logits.size(1), chunk_size):
        part = logits[:, start : start + chunk_size]
        idx = indices[:, start : start + chunk_size] if indices is not None else None
        if idx is None:
            idx = torch.topk(part.detach(), min(k, part.size(-1)), dim=-1).indices
        if part.requires_grad:
            outs.append(checkpoint(_chunk_logps, part, idx, temperature, use_reentrant=False))
        else:
            outs.append(_chunk_logps(part, idx, temperature))
        ids.append(idx)
    return torch.cat(outs, dim=1), torch.cat(ids, dim=1)


def vad_token_losses(
    student_logp: Tensor,
    teacher_pos_logp: Tensor,
    teacher_neg_logp: Tensor | None,
    *,
    target: str = "vad",
    divergence_kind: str = "jsd",
    zeta: float = 1e-3,
    tau_plus: float = 0.8,
    target_clip: float = 20.0,
    eps: float = 1e-8,
    log_eps: float = 1e-10,
    tail_bucket: bool = True,
    q_tail: str = "student_mass",
    branch_weights: str = "capped",
    scalar_scale: float | None = None,
) -> dict[str, Tensor]:
    """Per-position VAD losses on the student's top-K support (Sec. 3.2-3.3).

    Args:
        student_logp (`Tensor`): log p_S^0 at the top-K ids, (..., K), **with** gradient (only path for gradients).
        teacher_pos_logp (`Tensor`): log p_T^+ at the same ids, (..., K).
        teacher_neg_logp (`Tensor` or `None`): log p_T^- at the same ids, (..., K); unused (may be None) for
            `target="direct"`.
        target (`str`): `vad` (Eq. 8), `one_sided` (softmax(phi_S + r_vis)), `scalar` (softmax(phi_S + s r)),
            `direct` (q = p_T^+, Vision-OPD-style matching).
        scalar_scale (`float` or `None`): s for `target="scalar"`; None uses s = |r_vis| / |r| (UNCERTAIN, Tab. 2 does not say).
        Other arguments: see [`visual_correction`], [`branch_reconstruction`], [`student_anchored_target`].

    Returns:
        `dict` of (...) tensors: `vis` (the main D(q, p_S) term), `reg` (D(p_T^+, p_S)), `reg_weight` (a_t),
        and detached diagnostics `beta`, `rho`, `misaligned` (1 where <r, u> <= 0).
    """
    if target not in TARGETS:
        raise ValueError(f"Unknown target {target!r}; valid: {', '.join(TARGETS)}.")
    tail = q_tail if tail_bucket else None
    student_tail = add_tail_bucket(student_logp) if tail_bucket else torch.log_softmax(student_logp, dim=-1)
    pos = teacher_pos_logp.detach()
    teacher_tail = add_tail_bucket(pos) if tail_bucket else torch.log_softmax(pos, dim=-1)  # sg(p_T^+) (+ own tail)
    s_phi = smoothed_logp(student_logp.detach(), eps=log_eps)
    p_phi = smoothed_logp(pos, eps=log_eps)
    if target == "direct":
        zeros = torch.zeros_like(student_logp[..., 0])
        r = center(p_phi) - center(s_phi)  # Eq. 2, for the logged rho only
        log_q, shift, beta, misaligned = teacher_tail, r, zeros, zeros
    else:
        m_phi = smoothed_logp(teacher_neg_logp.detach(), eps=log_eps)
        r, u, r_vis, _ = visual_correction(s_phi, p_phi, m_phi, zeta=zeta)
        beta = projection_coefficient(r, u, zeta=zeta)
        misaligned = ((r * u).sum(dim=-1) <= 0).to(r.dtype)
        if target == "vad":
            shift = branch_reconstruction(r, u, r_vis, tau_plus=tau_plus, eps=eps, weights=branch_weights)
        elif target == "one_sided":
            shift = r_vis
        else:  # scalar
            if scalar_scale is None:
                s = r_vis.norm(dim=-1, keepdim=True) / (r.norm(dim=-1, keepdim=True) + eps)
            else:
                s = torch.full_like(r[..., :1], scalar_scale)
            shift = s * r
        log_q = student_anchored_target(student_logp, shift, clip=target_clip, tail=tail, log_eps=log_eps)
    rho = shift.detach().norm(dim=-1) / (r.detach().norm(dim=-1) + eps)
    return {
        "vis": divergence(log_q, student_tail, kind=divergence_kind),
        "reg": divergence(teacher_tail, student_tail, kind=divergence_kind),
        "reg_weight": regulariser_weight(r, shift, eps=eps),
        "beta": beta.detach(),
        "rho": rho,
        "misaligned": misaligned,
    }


def token_mean_normalizer(
    num_items_in_batch: Tensor, num_processes: int, grad_accum_steps: int, steps_per_generation: int, training: bool
) -> Tensor:
    """Denominator of one micro-batch's summed per-token loss: TRL 1.16 `GRPOTrainer._compute_loss`, loss types
    `dapo`/`cispo`, verbatim. `num_items_in_batch` counts the real tokens of the whole generation batch over every
    rank; the gradient all-reduce averages ranks, and training rescales to one accumulation window (a generation
    batch spans `steps_per_generation` micro-batches per rank, an optimizer step `grad_accum_steps`), so each step is
    a token mean over its own tokens (exactly when `steps_per_generation == grad_accum_steps`; with the generation
    batch's average tokens per micro-batch otherwise). The loss is already scaled for gradient accumulation
    (TRL's `loss_is_scaled_for_ga`)."""
    normalizer = num_items_in_batch.clamp(min=1.0) / num_processes
    if training:  # in eval the batch is neither split across steps nor accumulated
        normalizer = normalizer * grad_accum_steps / steps_per_generation
    return normalizer
