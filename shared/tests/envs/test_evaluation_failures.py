"""Evaluation counts a crashed or timed-out episode as a failure and reports how many there were."""

from agentrl_shared.evaluation import summarize


def record(task_id: str, seed: int, won: bool, failed: bool = False, task_type: str = "pick") -> dict:
    return {
        "task_id": task_id,
        "task_type": task_type,
        "seed": seed,
        "won": won,
        "failed": failed,
        "turns": 3,
        "invalid_actions": 0,
        "task_score": None,
    }


def test_failed_episodes_count_as_failures():
    records = [record("a", 0, True), record("b", 0, False, failed=True), record("c", 0, True, task_type="look")]
    records.append(record("d", 0, True, failed=True, task_type="look"))  # a failed episode never counts as a win
    out = summarize(records, [0])
    assert out["success_rate_per_seed"] == [0.5] and out["failed_episodes"] == 2
    assert out["pick_success_rate"] == 0.5 and out["pick_failed_episodes"] == 1
    assert out["look_success_rate"] == 0.5 and out["look_failed_episodes"] == 1
