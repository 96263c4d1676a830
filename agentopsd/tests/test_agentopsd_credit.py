"""AgentOPSD's credit functions against hand-computed values, naive scalar loops and the official functions'
documented behaviour (ZethWang/AgentOPSD@0c478b2 `verl/trainer/ppo/opsd_utils.py`)."""

import math
import random

import pytest
import torch

from agentopsd.credit import (
    belief_increments,
    blamed_turns,
    episode_turn_credit,
    group_mean_v0,
    group_normalize,
    linear_warmdown,
    rlsd_token_advantages,
    row_token_credit,
    telescoping_credit,
    token_advantages,
    turn_advantages,
)


LN3 = math.log(3.0)


def t(values):
    return torch.tensor(values, dtype=torch.float64)


# --- naive scalar references (plain Python floats, one loop per step) ---
def naive_beliefs(evidence: list[float], v0: float) -> list[float]:
    v0 = min(max(v0, 1e-4), 1 - 1e-4)
    logit, prev, q = math.log(v0 / (1 - v0)), v0, []
    for e in evidence:
        logit += e
        v = min(max(1 / (1 + math.exp(-logit)), 1e-6), 1 - 1e-6)
        q.append(v - prev)
        prev = v
    return q


def naive_turn(A: float, evidence: list[float], v0: float, lam: float, band: float) -> list[float]:
    q = naive_beliefs(evidence, v0)
    mean = sum(q) / len(q)
    std = math.sqrt(sum((x - mean) ** 2 for x in q) / len(q))
    sign = (A > 0) - (A < 0)
    out = []
    for x in q:
        m = min(max(1 + band * sign * (x - mean) / (std + 1e-6), 1 - band), 1 + band)
        out.append(A * ((1 - lam) + lam * m))
    return out


def naive_token(A: float, evidence: list[float], mask: list[int], v0: float, lam: float, band: float) -> list[float]:
    q = naive_beliefs([e * m for e, m in zip(evidence, mask)], v0)
    q = [x * m for x, m in zip(q, mask)]
    n = max(sum(mask), 1)
    mean = sum(x for x, m in zip(q, mask) if m) / n
    var = sum((x - mean) ** 2 for x, m in zip(q, mask) if m) / n
    sign = (A > 0) - (A < 0)
    out = []
    for x, m_ in zip(q, mask):
        z = (x - mean) / (math.sqrt(var + 1e-6) + 1e-6)
        m = min(max(1 + band * sign * z, 1 - band), 1 + band)
        out.append(A * ((1 - lam) + lam * m) * m_)
    return out


# --- turn_advantages ---
def test_turn_advantages_hand_computed_clipped():
    # V_0 = 0.5; logit path 0, ln3, 0 -> V = 0.5, 0.75, 0.5; q = 0, +0.25, -0.25; z = 0, +1.2247, -1.2247
    e = t([0.0, LN3, -LN3])
    pos = turn_advantages(2.0, e, 0.5)
    assert pos.tolist() == pytest.approx([2.0, 2.2, 1.8], abs=1e-9)  # m = 1, 1.2 (clipped), 0.8 (clipped)
    neg = turn_advantages(-2.0, e, 0.5)
    assert neg.tolist() == pytest.approx([-2.0, -1.8, -2.2], abs=1e-9)  # sign(A) steers the other way


def test_turn_advantages_hand_computed_inside_band():
    # V = 0.75, 0.75, 0.75 -> q = 0.25, 0, 0; mean 1/12, population std sqrt(1/72); z = 1.4142, -0.7071, -0.7071
    got = turn_advantages(1.0, t([LN3, 0.0, 0.0]), 0.5)
    z = -(1 / 12) / (math.sqrt(1 / 72) + 1e-6)
    assert got.tolist() == pytest.approx([1.1, 1 + 0.5 * 0.2 * z, 1 + 0.5 * 0.2 * z], abs=1e-12)
    assert got[1].item() == pytest.approx(0.929289, abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_turn_advantages_matches_naive_loop(seed):
    rng = random.Random(seed)
    K = rng.randint(1, 9)
    e = [rng.gauss(0, 2) for _ in range(K)]
    A, v0, lam, band = rng.gauss(0, 1.5), rng.random(), rng.random(), rng.uniform(0.05, 0.6)
    got = turn_advantages(A, t(e), v0, lam=lam, band=band)
    assert got.tolist() == pytest.approx(naive_turn(A, e, v0, lam, band), abs=1e-9)


def test_one_turn_episode_has_multiplier_one():
    for e in (5.0, -3.0, 0.0):
        assert turn_advantages(1.7, t([e]), 0.3).tolist() == pytest.approx([1.7])
        assert turn_advantages(-0.4, t([e]), 0.9).tolist() == pytest.approx([-0.4])


def test_zero_advantage_stays_zero():
    assert turn_advantages(0.0, t([1.0, -2.0, 0.5]), 0.4).tolist() == [0.0, 0.0, 0.0]
    got = token_advantages(0.0, t([1.0, -2.0, 0.5]), t([1, 1, 1]), 0.4)
    assert got.tolist() == [0.0, 0.0, 0.0]


def test_zero_evidence_gives_the_grpo_advantage():
    assert turn_advantages(1.3, t([0.0, 0.0, 0.0, 0.0]), 0.6).tolist() == pytest.approx([1.3] * 4)
    assert token_advantages(-0.7, t([0.0] * 5), t([1, 1, 1, 1, 0]), 0.6).tolist() == pytest.approx([-0.7] * 4 + [0])


def test_all_equal_evidence():
    # raw-evidence ablation: equal evidence has zero spread -> z = 0 -> m = 1
    e = t([0.8, 0.8, 0.8])
    assert turn_advantages(2.0, e, 0.5, belief_gate=False).tolist() == pytest.approx([2.0] * 3)
    # full method: equal log-odds steps still move V by different amounts (sigmoid), so the belief gate reweights:
    # V_0 = 0.5 and steps of ln3 give V = 3/4, 9/10, 27/28, q = 1/4, 3/20, 9/140 -- the early turn gets the most
    got = turn_advantages(2.0, t([LN3] * 3), 0.5)
    q = [1 / 4, 3 / 20, 9 / 140]
    assert naive_beliefs([LN3] * 3, 0.5) == pytest.approx(q)
    assert got[0] > got[1] > got[2]
    assert got.tolist() == pytest.approx(naive_turn(2.0, [LN3] * 3, 0.5, 0.5, 0.2), abs=1e-12)


def test_saturated_prior_is_finite_and_keeps_the_official_quirk():
    # V_0 from the 10-point reward scale: clamped to 1 - 1e-4. Positive evidence pins V at 1 - 1e-6 from turn 1,
    # so only the first revision is non-zero (~1e-4); the z-score still turns it into a full-band multiplier.
    got = turn_advantages(1.0, t([20.0, 20.0, 20.0]), 10.0)
    assert torch.isfinite(got).all()
    z = -(1 / 3) / math.sqrt(2 / 9)  # q = (c, 0, 0): z = 1.414, -0.707, -0.707 up to the 1e-6 epsilon
    assert got[0].item() == pytest.approx(1.1)
    assert got[1].item() == pytest.approx(1 + 0.1 * z, abs=1e-2)
    for v0 in (0.0, 1.0, -3.0, 10.0):
        assert torch.isfinite(turn_advantages(1.0, t([-50.0, 50.0]), v0)).all()
        assert torch.isfinite(token_advantages(1.0, t([-50.0, 50.0]), t([1, 1]), v0)).all()


@pytest.mark.parametrize("fn", ["turn", "token"])
def test_never_flips_sign_and_stays_in_band(fn):
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        K = int(torch.randint(1, 12, (1,), generator=gen))
        e = torch.randn(K, generator=gen, dtype=torch.float64) * 5
        A = float(torch.randn(1, generator=gen)) * 3
        v0 = float(torch.rand(1, generator=gen))
        lam, band = float(torch.rand(1, generator=gen)), float(torch.rand(1, generator=gen)) * 0.9
        if fn == "turn":
            out = turn_advantages(A, e, v0, lam=lam, band=band)
        else:
            mask = (torch.rand(K, generator=gen) > 0.2).double()
            out = token_advantages(A, e, mask, v0, lam=lam, band=band)[mask.bool()]
        assert torch.all(out * A >= 0)  # never flips the sign
        ratio = out / A if A != 0 else torch.ones_like(out)
        assert torch.all(ratio >= 1 - lam * band - 1e-12) and torch.all(ratio <= 1 + lam * band + 1e-12)


def test_defaults_bound_the_change_to_ten_percent():
    out = turn_advantages(1.0, t([4.0, -7.0, 0.3, 2.0]), 0.5)  # lam 0.5, band 0.2 -> factor in [0.9, 1.1]
    assert out.min() >= 0.9 - 1e-12 and out.max() <= 1.1 + 1e-12


def test_rows_keep_their_own_advantage():
    # rows of one episode differ by the invalid-action penalty: row k gets turn_advantages(A_k, e, v0)[k]
    e = t([0.5, -1.0, 2.0])
    A = t([1.2, 1.1, 1.2])
    got = turn_advantages(A, e, 0.3)
    for k in range(3):
        assert got[k].item() == pytest.approx(turn_advantages(A[k].item(), e, 0.3)[k].item())


def test_episode_turn_credit_orders_turns_and_groups_episodes():
    # two episodes interleaved and out of turn order
    episode_ids = torch.tensor([7, 3, 7, 3, 7])
    turn_idx = torch.tensor([2, 1, 0, 0, 1])
    evidence = t([0.9, -0.4, 0.1, 1.5, -2.0])
    adv = t([0.8, -0.5, 0.7, -0.5, 0.8])
    v0 = t([0.25, 0.6, 0.25, 0.6, 0.25])
    got = episode_turn_credit(adv, evidence, v0, episode_ids, turn_idx)
    ep7 = turn_advantages(t([0.7, 0.8, 0.8]), t([0.1, -2.0, 0.9]), 0.25)  # turns 0, 1, 2 -> rows 2, 4, 0
    ep3 = turn_advantages(t([-0.5, -0.5]), t([1.5, -0.4]), 0.6)  # turns 0, 1 -> rows 3, 1
    assert got.tolist() == pytest.approx([ep7[2].item(), ep3[1].item(), ep7[0].item(), ep3[0].item(), ep7[1].item()])


# --- token_advantages ---
def test_token_advantages_hand_computed():
    # V = 0.75, 0.5 on the two valid tokens; q = +0.25, -0.25; var 0.0625 -> z = +-0.25 / (sqrt(0.0625 + 1e-6) + 1e-6)
    got = token_advantages(1.0, t([LN3, -LN3, 9.0]), t([1, 1, 0]), 0.5)
    z = 0.25 / (math.sqrt(0.0625 + 1e-6) + 1e-6)
    assert got.tolist() == pytest.approx([1 + 0.1 * z, 1 - 0.1 * z, 0.0], abs=1e-12)
    assert got[0].item() == pytest.approx(1.0999988, abs=1e-7)  # 1 + 0.1 * 0.25 / 0.250003


@pytest.mark.parametrize("seed", range(5))
def test_token_advantages_matches_naive_loop(seed):
    rng = random.Random(100 + seed)
    T = rng.randint(1, 10)
    e = [rng.gauss(0, 1) for _ in range(T)]
    mask = [int(rng.random() > 0.25) for _ in range(T)]
    A, v0, lam, band = rng.gauss(0, 1), rng.random(), rng.random(), rng.uniform(0.05, 0.5)
    got = token_advantages(A, t(e), t(mask), v0, lam=lam, band=band)
    assert got.tolist() == pytest.approx(naive_token(A, e, mask, v0, lam, band), abs=1e-9)


def test_token_advantages_batched_rows_equal_single_rows():
    torch.manual_seed(1)
    e, mask = torch.randn(4, 6, dtype=torch.float64), (torch.rand(4, 6) > 0.3).double()
    A, v0 = torch.randn(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64)
    batched = token_advantages(A, e, mask, v0)
    for b in range(4):
        assert torch.allclose(batched[b], token_advantages(A[b], e[b], mask[b], v0[b]))


def test_token_z_score_only_over_valid_tokens_and_single_token_is_neutral():
    mask = t([1, 1, 1, 0, 0])
    a = token_advantages(1.0, t([0.3, -1.0, 2.0, 5.0, -5.0]), mask, 0.4)
    b = token_advantages(1.0, t([0.3, -1.0, 2.0, -9.0, 0.0]), mask, 0.4)
    assert torch.equal(a, b)
    assert token_advantages(-2.0, t([3.0, 1.0]), t([1, 0]), 0.4).tolist() == pytest.approx([-2.0, 0.0])


def test_token_recursion_starts_from_the_group_prior():
    e, mask = t([0.5, 0.5, -1.0]), t([1, 1, 1])
    assert not torch.allclose(token_advantages(1.0, e, mask, 0.05), token_advantages(1.0, e, mask, 0.5))


# --- V_0 ---
def test_group_mean_v0_first_seen_row_per_trajectory_and_saturation():
    # group 0: trajectory 0 won (rows 9.9 then 10: the first row was invalid), trajectory 1 lost; group 1 lost
    rewards = t([9.9, 10.0, 0.0, 0.0, -0.1, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    episodes = torch.tensor([0, 0, 1, 1, 2, 3])
    v0 = group_mean_v0(rewards, groups, episodes)
    # official scale: mean(9.9, 0) = 4.95 -> clamped to 1 - 1e-4; group 1 mean -0.05 -> 1e-4
    assert v0.tolist() == pytest.approx([1 - 1e-4] * 4 + [1e-4] * 2)
    scaled = group_mean_v0(rewards, groups, episodes, reward_scale=10.0)
    assert scaled.tolist() == pytest.approx([0.495] * 4 + [1e-4] * 2)


def test_group_mean_v0_success_rate_on_a_zero_one_scale():
    rewards = t([1.0, 0.0, 0.0, 1.0, 1.0])
    v0 = group_mean_v0(rewards, torch.tensor([5, 5, 5, 5, 5]), torch.tensor([0, 1, 2, 3, 3]))
    assert v0.tolist() == pytest.approx([0.5] * 5)  # four trajectories, two successes


# --- ablation paths ---
def test_telescoping_credit_sums_to_return_minus_prior():
    q = t([0.1, -0.05, 0.2])
    got = telescoping_credit(q, t([1.0, 1.0, 1.0]), 10.0, 0.9999)
    assert got.sum().item() == pytest.approx(10.0 - 0.9999)
    assert telescoping_credit(t([0.1, -0.1]), t([1.0, 1.0]), 1.0, 0.5).tolist() == [0.0, 0.0]  # zero-sum guard
    anchored = telescoping_credit(q, t([-1.0, -1.0, -1.0]), 0.0, 0.5, anchoring=True)
    # sign(A) * |q| = -0.1, -0.05, -0.2 (sum -0.35), rescaled to R - V_0 = -0.5
    assert anchored.tolist() == pytest.approx([-0.1 / 0.7, -0.05 / 0.7, -0.2 / 0.7])


def test_group_normalize_population_std_and_singletons():
    vals, groups = t([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1])
    assert group_normalize(vals, groups).tolist() == pytest.approx([-1.0, 1.0, 5.0], abs=1e-5)


def test_raw_path_group_norm_and_telescoping_through_the_rollout_helpers():
    episode_ids, turn_idx = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0])
    adv, e, v0 = t([1.0, 1.0, -1.0]), t([LN3, 0.0, -LN3]), t([0.5, 0.5, 0.5])
    returns, groups = t([10.0, 10.0, 0.0]), torch.tensor([0, 0, 0])
    tele = episode_turn_credit(adv, e, v0, episode_ids, turn_idx, belief_mult=False, returns=returns)
    # episode 0: q = 0.25, 0 -> all of R - V_0 = 9.5 on turn 0; episode 1: q = -0.25 -> R - V_0 = -0.5
    assert tele.tolist() == pytest.approx([9.5, 0.0, -0.5])
    normed = episode_turn_credit(
        adv, e, v0, episode_ids, turn_idx, belief_mult=False, group_ids=groups, group_norm=True, anchoring=True
    )
    raw = t([0.25, 0.0, -0.25])
    assert normed.tolist() == pytest.approx(((raw - raw.mean()) / (raw.std(unbiased=False) + 1e-6)).tolist())
    tok = row_token_credit(adv, t([[LN3, 0.0], [0.0, 0.0], [-LN3, 0.0]]), t([[1, 1], [1, 1], [1, 0]]), v0,
                           belief_mult=False, returns=returns)  # fmt: skip
    assert tok[0].sum().item() == pytest.approx(9.5) and tok[1].tolist() == [0.0, 0.0]


# --- RLSD baseline and schedules ---
def test_rlsd_token_advantages_hand_computed():
    delta, mask = t([[0.1, -0.5, 1.0], [0.1, -0.5, 1.0]]), t([[1, 1, 1], [1, 1, 0]])
    got = rlsd_token_advantages(t([2.0, -2.0]), delta, mask, lam=0.5, clip=0.2)
    w0 = [math.exp(0.1), 0.8, 1.2]  # exp(+delta) clipped to [0.8, 1.2]
    w1 = [math.exp(-0.1), 1.2, 0.8]  # exp(-delta)
    assert got[0].tolist() == pytest.approx([2 * (0.5 + 0.5 * w) for w in w0])
    assert got[1].tolist() == pytest.approx([-2 * (0.5 + 0.5 * w1[0]), -2 * (0.5 + 0.5 * w1[1]), 0.0])


def test_linear_warmdown():
    assert linear_warmdown(0.5, 1, 100) == pytest.approx(0.495)  # verl's first update is global_steps 1
    assert linear_warmdown(0.5, 100, 100) == 0.0 and linear_warmdown(0.5, 500, 100) == 0.0
    assert linear_warmdown(0.5, 10**6, -1) == 0.5


def test_blamed_turns_is_the_most_negative_belief_revision():
    """Episode 7: three turns, the second with the most negative evidence; episode 9: one turn; episode 4: no
    evidence, so every revision is 0 (a tie: no turn is blamed)."""
    evidence = torch.tensor([0.2, -3.0, -0.5, -1.0, 0.0, 0.0])
    episode_ids = torch.tensor([7, 7, 7, 9, 4, 4])
    turn_idx = torch.tensor([2, 1, 0, 0, 0, 1])  # any row order
    v0 = torch.tensor([0.5, 0.5, 0.5, 0.5, 1e-4, 1e-4])
    blamed = blamed_turns(evidence, v0, episode_ids, turn_idx)
    _, q = belief_increments(torch.tensor([-0.5, -3.0, 0.2]), 0.5)  # episode 7 in turn order
    assert q.argmin().item() == 1 and blamed[7] == 1
    assert blamed[9] == 0
    assert blamed[4] is None
    assert blamed_turns(evidence, 0.5, episode_ids, turn_idx)[7] == 1  # a scalar prior
