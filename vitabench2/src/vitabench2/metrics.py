"""Metrics at subtask level over trials: Avg@k, Pass@k, Pass^k, the proactive/personalization split, and the score
by temporal task index.

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/metrics/agent_metrics.py`: success = reward == 1.0; with n trials and c successes,
pass^k = C(c, k) / C(n, k) and pass@k = 1 - C(n - c, k) / C(n, k); each (user, subtask) is one unit; failed trials
count as 0. Leaderboard: k = 4 with 4 trials (official README).
"""

from collections import defaultdict
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k trials drawn from n (c successes) succeeds: 1 - C(n-c, k) / C(n, k)."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Probability that all k trials drawn from n (c successes) succeed (tau-bench pass^k): C(c, k) / C(n, k)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}; run at least k trials")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def subtask_units(records: list[dict], num_trials: int) -> dict[tuple[str, str], list[float]]:
    """Group records by (user_id, subtask_id) into per-trial rewards; a missing trial counts as 0."""
    units: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in records:
        units[(r["user_id"], r["subtask_id"])][int(r["trial"])] = float(r["reward"])
    return {key: [trials.get(t, 0.0) for t in range(num_trials)] for key, trials in units.items()}


def compute_metrics(records: list[dict], num_trials: int, k: int | None = None) -> dict:
    """Subtask-level metrics over `records` (one per (user, subtask, trial)).

    Returns `avg@k` (mean reward), `pass@j` and `pass^j` for every j <= n (means over units), the skill split (`avg_proactive`,
    `avg_personalization`), `avg_by_task_index` (mean reward by the subtask's position in the user's sequence) and
    `user_reward` (mean over users of the mean subtask reward).
    """
    k = num_trials if k is None else k
    units = subtask_units(records, num_trials)
    meta = {(r["user_id"], r["subtask_id"]): r for r in records}
    out: dict = {"num_units": len(units), "num_trials": num_trials, "k": k}
    if not units:
        return out
    success = {key: sum(1 for x in rewards if x == 1.0) for key, rewards in units.items()}
    out[f"avg@{k}"] = _mean([x for rewards in units.values() for x in rewards])
    for j in sorted({*range(1, num_trials + 1), k}):  # every k <= n (official `agent_metrics`), k included
        out[f"pass@{j}"] = _mean([pass_at_k(num_trials, c, j) for c in success.values()])
        out[f"pass^{j}"] = _mean([pass_hat_k(num_trials, c, j) for c in success.values()])
    split: dict[str, list[float]] = {"proactive": [], "personalization": []}
    by_index: dict[int, list[float]] = defaultdict(list)
    by_user: dict[str, list[float]] = defaultdict(list)
    for key, rewards in units.items():
        skill = "proactive" if "proactive" in meta[key].get("skill_tested", []) else "personalization"
        split[skill] += rewards
        by_index[int(meta[key].get("task_index", 0))] += rewards
        by_user[key[0]] += rewards
    out["avg_proactive"] = _mean(split["proactive"])
    out["avg_personalization"] = _mean(split["personalization"])
    out["avg_by_task_index"] = {i: _mean(v) for i, v in sorted(by_index.items())}
    out["user_reward"] = _mean([_mean(v) for v in by_user.values()])
    return out
