"""Worker pool: parallel steps, per-step timeouts; a raised error ends only its own episode, a killed or hung worker
those of the slots it hosts."""

import functools
import os

import pytest
from faulty_envs import make_faulty_env, make_pid_env, make_slow_build_env

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.base import EnvFailure, Step
from agentrl_shared.envs.pool import EnvPool, default_workers


TASKS = load_tasks("textrooms", "train", num_tasks=4)


@pytest.fixture(scope="module")
def pool():
    with EnvPool(make_faulty_env, num_slots=4, timeout=5.0, num_workers=4) as p:
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
    assert all(not pool._built[i] for i in (0, 1, 2))  # a raising environment is rebuilt at its next call
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


def test_workers_shared_by_several_slots_play_the_episodes_of_one_process():
    """Four slots on two workers (round robin): slots 0 and 2 share one process, 1 and 3 the other, and every episode
    is the one this process plays."""
    go = [f"go to {t['room']}" for t in TASKS]
    with EnvPool(make_pid_env, num_slots=4, num_workers=0) as local:
        expected = [s.observation for s in local.reset([0, 1, 2, 3], TASKS, [5] * 4) + local.step([0, 1, 2, 3], go)]
    with EnvPool(make_pid_env, num_slots=4, timeout=30.0, num_workers=2, move_cheap_in=False) as pool:
        played = pool.reset([0, 1, 2, 3], TASKS, [5] * 4) + pool.step([0, 1, 2, 3], go)
        pids = [s.info["pid"] for s in played[4:]]
        assert pids[0] == pids[2] != pids[1] == pids[3] and os.getpid() not in pids
        assert [s.observation for s in played] == expected


def test_a_shared_worker_that_hangs_loses_its_slots_episodes_and_a_raise_only_its_own():
    """Slot 1 hangs in the worker it shares with slot 3: slot 1 times out, slot 3 is not served, the worker restarts and
    slot 3's episode is lost (its next step fails; its next reset works). Slot 0 raises in the worker it shares with
    slot 2: only slot 0's episode fails, and slot 2 plays on in the same process."""
    with EnvPool(make_faulty_env, num_slots=4, timeout=3.0, num_workers=2, move_cheap_in=False) as pool:
        pool.reset([0, 1, 2, 3], TASKS, [0] * 4)
        first = pool._procs[0].pid
        out = pool.step([0, 1, 2, 3], ["raise", "hang", "look", "look"])
        assert isinstance(out[0], EnvFailure) and "simulated environment bug" in str(out[0])
        assert isinstance(out[1], EnvFailure) and "timed out" in str(out[1])
        assert isinstance(out[2], Step) and isinstance(out[3], EnvFailure) and "not run" in str(out[3])
        assert pool.failures == 3 and pool._procs[0].pid == first and pool._lost == [False, True, False, True]
        again = pool.step([2, 3], ["look", "look"])
        assert isinstance(again[0], Step) and isinstance(again[1], EnvFailure) and "lost" in str(again[1])
        fresh = pool.reset([0, 1, 2, 3], TASKS, [1] * 4)
        assert all(isinstance(s, Step) for s in fresh) and not any(pool._lost)
        assert all(isinstance(s, Step) for s in pool.step([0, 1, 2, 3], ["look"] * 4))


def test_default_workers_one_per_slot_up_to_this_ranks_cores(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_SIZE", raising=False)
    assert default_workers(1) == 1 and default_workers(4 * cores) == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(2 * cores))  # more ranks than cores: still one worker
    assert default_workers(8) == 1


def test_default_workers_reads_the_ranks_per_node_of_torchrun_and_of_the_deepspeed_launcher(monkeypatch):
    """16 cores, 4 ranks per node: 4 workers per rank, whether the launcher says `LOCAL_WORLD_SIZE` (torchrun,
    accelerate) or `LOCAL_SIZE` (DeepSpeed's launcher, also on every node of a pdsh/MPI multi-node run)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_SIZE", raising=False)
    assert default_workers(64) == 16  # no launcher: one rank
    monkeypatch.setenv("LOCAL_SIZE", "4")
    assert default_workers(64) == 4 and default_workers(2) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # torchrun's variable wins where both are set
    assert default_workers(64) == 2
