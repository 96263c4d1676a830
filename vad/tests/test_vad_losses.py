"""Unit tests of `vad.losses` against hand-computed values, naive loops and the projection identities of Sec. 3.2.

Each case names the paper quantity it checks: r, u, beta, r_vis, r_res (Eqs. 2-4), r_VAD (Eq. 7), q (Eq. 8), a_t
(Eq. 10) and the JSD (Sec. 3.3).
"""

import math

import pytest
import torch

from vad import losses


ZETA = 1e-3


def t(*xs):
    return torch.tensor(xs, dtype=torch.float64)


# ---------------------------------------------------------------- visual_correction (Eqs. 2-4)


def test_visual_correction_aligned_hand_computed():
    # phi(S) = [-1, 0, 1], phi(T+) = [1, 0, -1], phi(T-) = [-1, 0, 1] -> r = u = [2, 0, -2]
    r, u, r_vis, r_res = losses.visual_correction(t(1, 2, 3), t(3, 2, 1), t(1, 2, 3), zeta=ZETA)
    torch.testing.assert_close(r, t(2, 0, -2))
    torch.testing.assert_close(u, t(2, 0, -2))
    beta = 8.0 / (8.0 + ZETA)  # <r, u> = 8, |u|^2 = 8
    torch.testing.assert_close(r_vis, beta * t(2, 0, -2))
    torch.testing.assert_close(r_res, (1 - beta) * t(2, 0, -2))


def test_visual_correction_centres_each_input():
    # adding a constant to any input (a log-normaliser) changes nothing: phi removes it
    base = losses.visual_correction(t(1, 2, 3), t(3, 2, 1), t(0, 5, 1), zeta=ZETA)
    shifted = losses.visual_correction(t(1, 2, 3) - 7, t(3, 2, 1) + 2, t(0, 5, 1) - 0.5, zeta=ZETA)
    for a, b in zip(base, shifted):
        torch.testing.assert_close(a, b)


def test_visual_correction_u_zero():
    # T- = T+: the views agree, u = 0, beta = 0 by the ridge zeta; all of r is residual
    r, u, r_vis, r_res = losses.visual_correction(t(0, 0, 0), t(1, -1, 0), t(1, -1, 0), zeta=ZETA)
    torch.testing.assert_close(u, t(0, 0, 0))
    torch.testing.assert_close(r_vis, t(0, 0, 0))
    torch.testing.assert_close(r_res, r)
    torch.testing.assert_close(r, t(1, -1, 0))


def test_visual_correction_r_orthogonal_to_u():
    # r = [1, -1, 0]; phi(T-) = [0, -2, 2] makes u = [1, 1, -2], <r, u> = 0 -> no visual shift
    r, u, r_vis, r_res = losses.visual_correction(t(0, 0, 0), t(1, -1, 0), t(0, -2, 2), zeta=ZETA)
    torch.testing.assert_close(u, t(1, 1, -2))
    assert float((r * u).sum()) == 0.0
    torch.testing.assert_close(r_vis, t(0, 0, 0))
    torch.testing.assert_close(r_res, r)


def test_visual_correction_opposed_is_one_sided():
    # u = -r: <r, u> < 0 -> beta = relu(.) = 0 (one-sided projection)
    r, u, r_vis, _ = losses.visual_correction(t(0, 0, 0), t(1, -1, 0), t(2, -2, 0), zeta=ZETA)
    torch.testing.assert_close(u, -r)
    torch.testing.assert_close(r_vis, t(0, 0, 0))


def test_visual_correction_partial_alignment_hand_computed():
    # r = [1, 0, -1], u = [1, -1, 0]: <r, u> = 1, |u|^2 = 2
    r, u, r_vis, r_res = losses.visual_correction(t(0, 0, 0), t(1, 0, -1), t(0, 1, -1), zeta=ZETA)
    torch.testing.assert_close(u, t(1, -1, 0))
    beta = 1.0 / (2.0 + ZETA)
    torch.testing.assert_close(r_vis, beta * t(1, -1, 0))
    torch.testing.assert_close(r_res, t(1, 0, -1) - beta * t(1, -1, 0))


def test_projection_identities_random():
    g = torch.Generator().manual_seed(0)
    s, p, m = (torch.randn(4, 6, 10, generator=g, dtype=torch.float64) for _ in range(3))
    r, u, r_vis, r_res = losses.visual_correction(s, p, m, zeta=ZETA)
    dot = (r * u).sum(-1)
    uu = (u * u).sum(-1)
    # r_vis is parallel to u: r_vis = beta * u with beta >= 0
    beta = losses.projection_coefficient(r, u, zeta=ZETA)
    assert (beta >= 0).all()
    torch.testing.assert_close(r_vis, beta.unsqueeze(-1) * u)
    # <r_res, u> = <r, u> * zeta / (|u|^2 + zeta) where <r, u> > 0, else <r, u>
    expected = torch.where(dot > 0, dot * ZETA / (uu + ZETA), dot)
    torch.testing.assert_close((r_res * u).sum(-1), expected)
    torch.testing.assert_close(r_vis + r_res, r)


def test_visual_correction_matches_naive_loop():
    g = torch.Generator().manual_seed(1)
    s, p, m = (torch.randn(3, 5, generator=g, dtype=torch.float64) for _ in range(3))
    _, _, r_vis, _ = losses.visual_correction(s, p, m, zeta=ZETA)
    for i in range(3):
        ps = [x - sum(s[i].tolist()) / 5 for x in s[i].tolist()]
        pp = [x - sum(p[i].tolist()) / 5 for x in p[i].tolist()]
        pm = [x - sum(m[i].tolist()) / 5 for x in m[i].tolist()]
        r = [a - b for a, b in zip(pp, ps)]
        u = [a - b for a, b in zip(pp, pm)]
        beta = max(sum(a * b for a, b in zip(r, u)), 0.0) / (sum(b * b for b in u) + ZETA)
        torch.testing.assert_close(r_vis[i], torch.tensor([beta * b for b in u], dtype=torch.float64))


# ---------------------------------------------------------------- branch_reconstruction (Eq. 7)


def test_branch_balanced_hand_computed():
    r = u = t(2, 0, -2)
    r_vis = 8.0 / (8.0 + ZETA) * u
    r_vad = losses.branch_reconstruction(r, u, r_vis, tau_plus=0.8, eps=0.0)
    # u+ = [2,0,0], u- = [0,0,-2]; a+ = a- = 2 -> shares 0.5 / 0.5 (below the cap); budget B = |r_vis|
    budget = float(r_vis.norm())
    torch.testing.assert_close(r_vad, budget * t(0.5, 0, -0.5))


def test_branch_support_share_capped_not_redistributed():
    # r = [3, 0, -1], u = [2, 0, -2]: a+ = 3, a- = 1 -> raw support share 0.75 > tau_plus = 0.5
    r, u = t(3, 0, -1), t(2, 0, -2)
    r_vis = (8.0 / (8.0 + ZETA)) * u
    budget = float(r_vis.norm())
    capped = losses.branch_reconstruction(r, u, r_vis, tau_plus=0.5, eps=0.0)
    torch.testing.assert_close(capped, budget * t(0.5, 0, -0.25))  # w+ = 0.5 (cap), w- = 0.25 (not redistributed)
    assert float(capped.norm()) < budget
    redistributed = losses.branch_reconstruction(r, u, r_vis, tau_plus=0.5, eps=0.0, weights="redistribute")
    torch.testing.assert_close(redistributed, budget * t(0.5, 0, -0.5))  # ablation: w- = 1 - w+
    uncapped = losses.branch_reconstruction(r, u, r_vis, tau_plus=1.0, eps=0.0)
    torch.testing.assert_close(uncapped, budget * t(0.75, 0, -0.25))


def test_branch_zero_cases():
    u = t(2, 0, -2)
    # <r, u> <= 0 -> r_vis = 0 -> budget 0 -> r_VAD = 0
    zero = losses.branch_reconstruction(t(-1, 0, 1), u, t(0, 0, 0), tau_plus=0.8)
    torch.testing.assert_close(zero, t(0, 0, 0))
    # u = 0: both branches empty, no agreement -> r_VAD = 0 (no NaN)
    empty = losses.branch_reconstruction(t(1, 0, -1), t(0, 0, 0), t(0, 0, 0), tau_plus=0.8)
    torch.testing.assert_close(empty, t(0, 0, 0))
    # only a support branch (u >= 0): the refute branch contributes nothing
    one = losses.branch_reconstruction(t(1, 0, 0), t(1, 0, 0), t(1, 0, 0), tau_plus=0.8, eps=0.0)
    torch.testing.assert_close(one, t(0.8, 0, 0))


def test_branch_budget_bound_random_and_detached():
    g = torch.Generator().manual_seed(2)
    s, p, m = (torch.randn(8, 12, generator=g, dtype=torch.float64) for _ in range(3))
    p.requires_grad_(True)
    r, u, r_vis, _ = losses.visual_correction(s, p, m, zeta=ZETA)
    r_vad = losses.branch_reconstruction(r, u, r_vis, tau_plus=0.8)
    assert not r_vad.requires_grad
    assert (r_vad.norm(dim=-1) <= r_vis.norm(dim=-1) + 1e-9).all()
    with pytest.raises(ValueError, match="capped, redistribute"):
        losses.branch_reconstruction(r, u, r_vis, tau_plus=0.8, weights="other")


# ---------------------------------------------------------------- target q (Eq. 8) and tail bucket (Sec. 4.1)


def test_target_zero_shift_is_student():
    logp = torch.log(t(0.5, 0.25, 0.125))  # top-K mass 0.875, tail 0.125
    q = losses.student_anchored_target(logp, t(0, 0, 0), tail="student_mass")
    torch.testing.assert_close(q.exp(), t(0.5, 0.25, 0.125, 0.125))
    q_zero = losses.student_anchored_target(logp, t(0, 0, 0), tail="zero")
    torch.testing.assert_close(q_zero.exp(), t(4 / 7, 2 / 7, 1 / 7, 0))
    q_none = losses.student_anchored_target(logp, t(0, 0, 0), tail=None)
    torch.testing.assert_close(q_none.exp(), t(4 / 7, 2 / 7, 1 / 7))


def test_target_shift_and_clip_hand_computed():
    logp = torch.log(t(0.5, 0.25, 0.125))
    q = losses.student_anchored_target(logp, t(math.log(2), 0, 0), tail="student_mass")
    w = t(1.0, 0.25, 0.125)  # p * exp(shift), renormalised on K, scaled by the mass 0.875
    torch.testing.assert_close(q.exp(), torch.cat([0.875 * w / w.sum(), t(0.125)]))
    big = losses.student_anchored_target(logp, t(100, 0, 0), clip=20.0, tail=None)
    at_clip = losses.student_anchored_target(logp, t(20, 0, 0), clip=20.0, tail=None)
    torch.testing.assert_close(big, at_clip)
    neg = losses.student_anchored_target(logp, t(0, -100, 0), clip=20.0, tail=None)
    torch.testing.assert_close(neg, losses.student_anchored_target(logp, t(0, -20, 0), clip=20.0, tail=None))
    with pytest.raises(ValueError, match="student_mass, zero"):
        losses.student_anchored_target(logp, t(0, 0, 0), tail="bad")


def test_target_is_distribution_and_detached():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 50, generator=g, dtype=torch.float64, requires_grad=True)
    top = torch.topk(logits.detach(), 10, dim=-1).indices
    logp = losses.support_logps(logits, top)
    q = losses.student_anchored_target(logp, torch.randn(2, 3, 10, generator=g, dtype=torch.float64))
    assert not q.requires_grad
    torch.testing.assert_close(q.exp().sum(-1), torch.ones(2, 3, dtype=torch.float64))
    torch.testing.assert_close(losses.add_tail_bucket(logp).exp().sum(-1), torch.ones(2, 3, dtype=torch.float64))


def test_support_logps_exact():
    logits = t(1.0, 2.0, 3.0)
    lp = losses.support_logps(logits, torch.tensor([2, 0]))
    z = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    torch.testing.assert_close(lp, t(3 - z, 1 - z))


# ---------------------------------------------------------------- regulariser weight a_t (Eq. 10)


def test_regulariser_weight_hand_computed():
    r = t(3, 4)  # |r| = 5
    torch.testing.assert_close(losses.regulariser_weight(r, t(0.6, 0.8), eps=0.0), t(0.8).squeeze())
    torch.testing.assert_close(losses.regulariser_weight(r, 2 * r, eps=0.0), t(0.0).squeeze())  # clipped at 0
    torch.testing.assert_close(losses.regulariser_weight(r, 0 * r, eps=0.0), t(1.0).squeeze())
    # |r| = 0 -> rho = 0 -> a = 1, no NaN
    torch.testing.assert_close(losses.regulariser_weight(t(0, 0), t(0, 0), eps=1e-8), t(1.0).squeeze())
    a = losses.regulariser_weight(torch.randn(5, 7, requires_grad=True), torch.randn(5, 7))
    assert not a.requires_grad and ((a >= 0) & (a <= 1)).all()


# ---------------------------------------------------------------- divergences (Sec. 3.3, Tab. 4)


def test_js_divergence_hand_computed():
    # disjoint supports: ln 2
    log_p, log_q = torch.log(t(1, 0)), torch.log(t(0, 1))
    torch.testing.assert_close(losses.js_divergence(log_p, log_q), t(math.log(2)).squeeze())
    p, q = [0.5, 0.5], [0.9, 0.1]
    m = [0.7, 0.3]
    expected = 0.5 * sum(a * math.log(a / b) for a, b in zip(p, m)) + 0.5 * sum(
        a * math.log(a / b) for a, b in zip(q, m)
    )
    got = losses.js_divergence(torch.log(t(*p)), torch.log(t(*q)))
    torch.testing.assert_close(got, t(expected).squeeze())
    torch.testing.assert_close(losses.js_divergence(torch.log(t(*p)), torch.log(t(*p))), t(0.0).squeeze())


def test_js_divergence_symmetric_bounded():
    g = torch.Generator().manual_seed(4)
    a = torch.log_softmax(torch.randn(6, 9, generator=g, dtype=torch.float64) * 3, -1)
    b = torch.log_softmax(torch.randn(6, 9, generator=g, dtype=torch.float64) * 3, -1)
    jab, jba = losses.js_divergence(a, b), losses.js_divergence(b, a)
    torch.testing.assert_close(jab, jba)
    assert ((jab >= 0) & (jab <= math.log(2) + 1e-12)).all()


def test_divergence_kinds():
    lt, ls = torch.log(t(0.5, 0.5)), torch.log(t(0.9, 0.1))
    fkl = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    rkl = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    torch.testing.assert_close(losses.divergence(lt, ls, kind="fkl"), t(fkl).squeeze())
    torch.testing.assert_close(losses.divergence(lt, ls, kind="rkl"), t(rkl).squeeze())
    with pytest.raises(ValueError, match="jsd, fkl, rkl"):
        losses.divergence(lt, ls, kind="tv")


# ---------------------------------------------------------------- per-position losses


def _support(seed, b=2, t_=4, v=40, k=8):
    g = torch.Generator().manual_seed(seed)
    student = torch.randn(b, t_, v, generator=g, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(b, t_, v, generator=g, dtype=torch.float64)
    neg = torch.randn(b, t_, v, generator=g, dtype=torch.float64)
    idx = torch.topk(student.detach(), k, dim=-1).indices
    return student, [losses.support_logps(x, idx) for x in (student, pos, neg)]


@pytest.mark.parametrize("target", losses.TARGETS)
@pytest.mark.parametrize("kind", losses.DIVERGENCES)
def test_token_losses_gradient_only_through_student(target, kind):
    student, (s, p, n) = _support(5)
    p.requires_grad_(True)
    out = losses.vad_token_losses(s, p, None if target == "direct" else n, target=target, divergence_kind=kind)
    assert out["vis"].shape == (2, 4) and torch.isfinite(out["vis"]).all()
    (out["vis"] + out["reg_weight"] * out["reg"]).sum().backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert p.grad is None  # the teacher side is sg(.)


def test_token_losses_student_equals_teacher_is_zero():
    _, (s, _, n) = _support(6)
    out = losses.vad_token_losses(s, s.detach().clone(), n)
    torch.testing.assert_close(out["vis"], torch.zeros(2, 4, dtype=torch.float64))
    torch.testing.assert_close(out["reg"], torch.zeros(2, 4, dtype=torch.float64), atol=1e-12, rtol=0)


def test_token_losses_vad_matches_manual_composition():
    _, (s, p, n) = _support(7)
    out = losses.vad_token_losses(s, p, n, tau_plus=0.7, log_eps=0.0)
    r, u, r_vis, _ = losses.visual_correction(s.detach(), p, n, zeta=ZETA)
    r_vad = losses.branch_reconstruction(r, u, r_vis, tau_plus=0.7)
    q = losses.student_anchored_target(s, r_vad, clip=20.0, tail="student_mass")
    torch.testing.assert_close(out["vis"], losses.js_divergence(q, losses.add_tail_bucket(s.detach())))
    torch.testing.assert_close(out["reg_weight"], losses.regulariser_weight(r, r_vad))
    torch.testing.assert_close(out["misaligned"], ((r * u).sum(-1) <= 0).double())
    with pytest.raises(ValueError, match="vad, one_sided, scalar, direct"):
        losses.vad_token_losses(s, p, n, target="other")


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunked_support_logps_equals_unchunked(chunk):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(2, 7, 50, generator=g, dtype=torch.float64)
    full_logits = base.clone().requires_grad_(True)
    idx = torch.topk(full_logits.detach(), 5, dim=-1).indices
    ref = losses.support_logps(full_logits / 0.7, idx)
    weights = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    (ref * weights).sum().backward()
    chunk_logits = base.clone().requires_grad_(True)
    out, out_idx = losses.chunked_support_logps(chunk_logits, k=5, temperature=0.7, chunk_size=chunk)
    assert torch.equal(out_idx, idx)
    torch.testing.assert_close(out, ref)
    (out * weights).sum().backward()
    torch.testing.assert_close(chunk_logits.grad, full_logits.grad)
    given, _ = losses.chunked_support_logps(base, idx, temperature=0.7, chunk_size=chunk)
    torch.testing.assert_close(given, ref.detach())


def _step_losses(tokens: list[list[int]], grad_accum: int, spg: int, training: bool = True) -> list[float]:
    """Loss of each optimizer step with per-token loss 1, as training applies it: every rank sums its micro-batches'
    losses over `grad_accum` micro-steps, and the gradient all-reduce averages the ranks. `tokens[rank][m]`: real
    tokens of micro-batch m of one generation batch (`spg` micro-batches per rank)."""
    ranks = len(tokens)
    n = torch.tensor(float(sum(map(sum, tokens))))  # num_items_in_batch: the generation batch over every rank
    norm = losses.token_mean_normalizer(n, ranks, grad_accum, spg, training)
    steps = spg // grad_accum
    return [
        sum(sum(tokens[r][s * grad_accum + m] for m in range(grad_accum)) / norm.item() for r in range(ranks)) / ranks
        for s in range(steps)
    ]


def test_token_mean_normalizer_steps_per_generation_factor():
    # steps_per_generation == gradient_accumulation_steps (the paper configs): one step = the generation batch, token
    # mean exact for unequal micro-batches
    assert _step_losses([[3, 5, 7, 9], [1, 2, 4, 8]], grad_accum=4, spg=4) == pytest.approx([1.0])
    # a generation batch over 2 optimizer steps: each step is its own token mean (equal micro-batches); without the
    # factor GA / spg each step would weigh 1/2
    assert _step_losses([[6, 6, 6, 6], [6, 6, 6, 6]], grad_accum=2, spg=4) == pytest.approx([1.0, 1.0])
    n = torch.tensor(48.0)
    assert losses.token_mean_normalizer(n, 2, 2, 4, training=True).item() == 48 / 2 * 2 / 4
    # eval: neither split nor accumulated
    assert losses.token_mean_normalizer(n, 2, 2, 4, training=False).item() == 24.0
    assert losses.token_mean_normalizer(torch.tensor(0.0), 1, 1, 1, training=True).item() == 1.0  # clamp
