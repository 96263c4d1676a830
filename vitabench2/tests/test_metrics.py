"""pass@k, pass^k and Avg@k against hand-computed values (official `agent_metrics.py`; n = 4, c = 2 worked by hand)."""

import pytest

from vitabench2.metrics import compute_metrics, pass_at_k, pass_hat_k


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)


def test_pass_hat_k_hand_values():
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 3, 4) == 0.0
    assert pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)
    assert pass_hat_k(5, 3, 2) == pytest.approx(3 / 10)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="c <= n"):
        pass_hat_k(2, 3, 1)


def _rec(user, sub, trial, reward, index=0, skills=()):
    return {
        "user_id": user,
        "subtask_id": sub,
        "trial": trial,
        "reward": reward,
        "task_index": index,
        "skill_tested": list(skills),
    }


def test_compute_metrics_subtask_level():
    # unit A: 2/4 successes, unit B: 4/4, unit C (proactive, index 1): 0/4 with one trial missing (counts 0)
    recs = [_rec("u", "A", t, r) for t, r in enumerate([1, 0, 1, 0])]
    recs += [_rec("u", "B", t, 1.0, index=1) for t in range(4)]
    recs += [_rec("v", "C", t, 0.0, index=1, skills=["proactive"]) for t in range(3)]
    m = compute_metrics(recs, num_trials=4)
    assert m["num_units"] == 3
    assert m["avg@4"] == pytest.approx((2 + 4 + 0) / 12)
    assert m["pass@4"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["pass^4"] == pytest.approx((0 + 1 + 0) / 3)
    # every k <= n is reported (official agent_metrics): pass@1 = mean success rate, pass@2 by hand
    assert m["pass@1"] == pytest.approx((0.5 + 1 + 0) / 3) and m["pass@2"] == pytest.approx((5 / 6 + 1 + 0) / 3)
    m2 = compute_metrics(recs, num_trials=4, k=2)
    assert m2["pass@2"] == pytest.approx((5 / 6 + 1 + 0) / 3)
    assert m2["pass^2"] == pytest.approx((1 / 6 + 1 + 0) / 3)
    assert m["avg_proactive"] == 0.0
    assert m["avg_personalization"] == pytest.approx(6 / 8)
    assert m["avg_by_task_index"] == {0: pytest.approx(0.5), 1: pytest.approx(0.5)}
