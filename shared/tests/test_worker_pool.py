"""Worker pool: parallel steps, per-call timeouts, raised errors and killed workers end only their own episode."""

import functools

import pytest
from faulty_envs import make_faulty_env, make_slow_build_env

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.base import EnvFailure, Step
from agentrl_shared.envs.pool import EnvPool


TASKS = load_tasks("textrooms", "train", num_tasks=4)


@pytest.fixture(scope="module")
def pool():
    with EnvPool(make_faulty_env, num_slots=4, timeout=5.0, num_workers=1) as p:
        yield p


def test_pool_resets_and_steps_in_parallel(pool):
    first = pool.reset([0, 1, 2, 3], TASKS, [0, 0, 0, 0])
    assert all(isinstance(s, Step) and "admissible_actions" in s.info for s in first)
    go = [f"go to {t['room']}" for t in TASKS]
    out = pool.step([0, 1, 2, 3], go)
    assert [s.info["won"] for s in out] == [t["task_type"] == "find" for t in TASKS]


def test_pool_isolates_raise_hang_and_death(pool):
    pool.reset([0, 1, 2, 3], TASKS, [0, 0, 0, 0])
    before = pool.failures
    out = pool.step([0, 1, 2, 3], ["raise", "hang", "die", f"go to {TASKS[3]['room']}"])
    assert isinstance(out[0], EnvFailure) and "simulated environment bug" in str(out[0])
    assert isinstance(out[1], EnvFailure) and "timed out" in str(out[1])
    assert isinstance(out[2], EnvFailure) and "crashed" in str(out[2])
    assert isinstance(out[3], Step)
    assert pool.failures == before + 3
    assert all(not pool._built[i] for i in (0, 1, 2))  # a raising environment is restarted like a crashed one
    # the restarted workers serve new episodes
    again = pool.reset([0, 1, 2, 3], TASKS, [1, 1, 1, 1])
    assert all(isinstance(s, Step) for s in again)


def test_in_process_pool_reports_errors():
    with EnvPool(make_faulty_env, num_slots=2, timeout=5.0, num_workers=0) as p:
        p.reset([0, 1], TASKS[:2], [0, 0])
        out = p.step([0, 1], ["raise", "look"])
        assert isinstance(out[0], EnvFailure) and isinstance(out[1], Step)


def test_reset_is_deterministic_per_task_and_seed(pool):
    a = pool.reset([0, 1], [TASKS[0], TASKS[0]], [7, 7])
    b = pool.reset([2], [TASKS[0]], [8])
    assert a[0].observation == a[1].observation
    assert a[0].info["admissible_actions"] == a[1].info["admissible_actions"]
    assert sorted(a[0].info["admissible_actions"]) == sorted(b[0].info["admissible_actions"])


def test_build_timeout_is_separate_from_step_timeout():
    """Building an environment may take longer than one step may; a build past `build_timeout` fails the episode."""
    slow = functools.partial(make_slow_build_env, 3.0)
    with EnvPool(slow, num_slots=1, timeout=1.0, num_workers=1, build_timeout=120.0) as p:
        assert isinstance(p.reset([0], TASKS[:1], [0])[0], Step)
        assert isinstance(p.step([0], ["look"])[0], Step)
    with EnvPool(slow, num_slots=1, timeout=60.0, num_workers=1, build_timeout=0.5) as p:
        out = p.reset([0], TASKS[:1], [0])
        assert isinstance(out[0], EnvFailure) and "build timed out" in str(out[0])
