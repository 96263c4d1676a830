"""The pool measures every side before it keeps an environment in the trainer's process: a cheap step moves in and
stays, an IO-bound step (cheap on the CPU, slow on the wall) tries in-process one after another and in threads, and
stays where it was fastest; one whose waits serialise in a process goes back to new workers; a CPU-bound step never
tries; and a slot's episode never changes process mid-way."""

import functools
import os
import threading

from faulty_envs import (
    make_busy_step_env,
    make_faulty_env,
    make_locked_slow_step_env,
    make_pid_env,
    make_slow_step_env,
)

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.base import EnvFailure
from agentrl_shared.envs.pool import PROBE_CALLS, TRIAL_BELOW, EnvPool


TASKS = load_tasks("textrooms", "train", num_tasks=2)


def _play(pool: EnvPool, seed: int) -> list:
    """Reset both slots, then step `PROBE_CALLS` times with each slot's first admissible action."""
    states = pool.reset([0, 1], TASKS, [seed, seed])
    seen = list(states)
    for _ in range(PROBE_CALLS):
        states = pool.step([0, 1], [s.info["admissible_actions"][0] if not s.done else "look" for s in states])
        seen += states
    return seen


def test_cheap_environment_moves_in_at_the_next_reset_and_stays_with_the_same_episodes():
    with EnvPool(make_faulty_env, num_slots=2, num_workers=0) as local:
        expected = [[s.observation for s in _play(local, seed)] for seed in range(3)]
    with EnvPool(make_faulty_env, num_slots=2, timeout=30.0, num_workers=2) as pool:
        played = [_play(pool, 0)]  # the probe: served by the workers
        cost = dict(pool.step_cost)
        assert cost["pooled_calls"] == PROBE_CALLS and cost["in_process"] is None, cost
        assert cost["worker_cpu_s"] < TRIAL_BELOW * cost["pooled_s"], cost  # the estimate calls for a trial
        procs = list(pool._procs)
        assert not any(pool._local) and all(p.is_alive() for p in procs)  # no episode moves mid-way
        played.append(_play(pool, 1))  # the first trial: in this process, one slot after another
        assert pool.step_cost["in_process_calls"] == PROBE_CALLS and pool.step_cost["in_process"] is None
        assert all(pool._local) and not any(p.is_alive() for p in procs)
        played.append(_play(pool, 2))  # the second: in this process, each slot in a thread
        cost = dict(pool.step_cost)
        assert cost["threaded_calls"] == PROBE_CALLS and cost["in_process"] is True, cost
        assert min(cost["in_process_s"], cost["threaded_s"]) < cost["pooled_s"]
        assert cost["threaded"] == (cost["threaded_s"] < cost["in_process_s"]), cost
        played.append(_play(pool, 0))
        assert all(pool._local) and pool.step_cost == cost  # decided for good: nothing more is measured
        assert [[s.observation for s in p] for p in played] == [*expected, expected[0]]
        # in this process a raised error still ends only its own episode
        pool.reset([0, 1], TASKS, [0, 0])
        out = pool.step([0, 1], ["raise", "look"])
        assert isinstance(out[0], EnvFailure) and not isinstance(out[1], EnvFailure)


def test_io_bound_environment_overlaps_its_waits_in_threads():
    """A sleeping step costs no CPU, so the workers' estimate calls for a trial; one after another in this process the
    two slots' sleeps add up, in threads they overlap (as in the workers, without the round trips), and the pool
    keeps the fastest of the three; the episodes are those of one process."""
    slow = functools.partial(make_slow_step_env, 0.02)
    with EnvPool(slow, num_slots=2, num_workers=0) as local:
        expected = [[s.observation for s in _play(local, seed)] for seed in range(3)]
    with EnvPool(slow, num_slots=2, timeout=30.0, num_workers=2) as pool:
        played = [_play(pool, seed) for seed in range(3)]  # probe, trial one after another, trial in threads
        cost = dict(pool.step_cost)
        assert cost["threaded_calls"] == PROBE_CALLS and cost["in_process"] is not None, cost
        assert cost["threaded_s"] < 0.75 * cost["in_process_s"], cost  # 2 x 20 ms one after another, 20 ms at once
        assert cost["in_process"] == (cost["threaded_s"] < cost["pooled_s"]) and cost["threaded"] == cost["in_process"]
        assert {s.info["pid"] for s in played[2]} == {os.getpid()}  # the threads trial's episode ran here
        main = threading.current_thread().name  # its resets one after another here, its steps in the pool's threads
        assert {s.info["thread"] for s in played[2][:2]} == {main}
        assert all(s.info["thread"] != main for s in played[2][2:]) and {s.info["thread"] for s in played[1]} == {main}
        assert [[s.observation for s in p] for p in played] == expected


def test_environment_that_waits_serially_in_one_process_goes_back_to_new_workers():
    """A step that waits holding a process-wide lock costs no CPU, so the workers' estimate calls for a trial; in this
    process the two slots' waits add up whether stepped one after another or in threads, both trials lose and the
    slots go back at their next reset."""
    slow = functools.partial(make_locked_slow_step_env, 0.02)
    with EnvPool(slow, num_slots=2, timeout=30.0, num_workers=2) as pool:
        _play(pool, 0)
        assert pool.step_cost["worker_cpu_s"] < TRIAL_BELOW * pool.step_cost["pooled_s"], pool.step_cost
        _play(pool, 1)
        trial = _play(pool, 2)
        cost = dict(pool.step_cost)
        assert cost["threaded_calls"] == PROBE_CALLS and cost["in_process"] is False and not cost["threaded"], cost
        assert min(cost["in_process_s"], cost["threaded_s"]) > cost["pooled_s"]
        assert {s.info["pid"] for s in trial} == {os.getpid()} and all(pool._local)  # the trial's episodes end here
        back = _play(pool, 2)
        assert not any(pool._local) and all(p.is_alive() for p in pool._procs)
        assert {s.info["pid"] for s in back} == {p.pid for p in pool._procs}
        again = _play(pool, 3)  # for good: the same workers, nothing more measured
        assert {s.info["pid"] for s in again} == {p.pid for p in pool._procs} and pool.step_cost == cost


def test_cpu_bound_environment_never_tries_in_process():
    """Pinned to one core, a pooled call of two 10 ms CPU steps costs about their sum: in-process could save only
    the round trip, which does not pay for a trial."""
    busy = functools.partial(make_busy_step_env, 0.01)
    with EnvPool(busy, num_slots=2, timeout=30.0, num_workers=2) as pool:
        _play(pool, 0)
        procs = list(pool._procs)
        cost = dict(pool.step_cost)
        assert cost["in_process"] is False and cost["worker_cpu_s"] >= TRIAL_BELOW * cost["pooled_s"], cost
        played = _play(pool, 1)
        assert pool.step_cost["in_process_calls"] == 0 and not any(pool._local) and pool._procs == procs
        assert os.getpid() not in {s.info["pid"] for s in played}


def test_a_slot_moves_only_at_its_own_reset():
    """Slot 0 starts a new episode while slot 1 is mid-episode: slot 0 moves in, slot 1 stays in its worker until its
    own reset; calls that mix the two sides count towards neither measurement."""
    with EnvPool(make_pid_env, num_slots=2, timeout=30.0, num_workers=1) as pool:  # one worker hosts both slots
        episodes: dict[tuple[int, int], set[int]] = {}  # (slot, episode) -> pids its reset and steps ran in

        def record(slots, states, episode):
            for i, s in zip(slots, states, strict=True):
                episodes.setdefault((i, episode[i]), set()).add(s.info["pid"])

        episode = [0, 0]
        record([0, 1], pool.reset([0, 1], TASKS, [0, 0]), episode)
        for _ in range(PROBE_CALLS):
            record([0, 1], pool.step([0, 1], ["look", "look"]), episode)
        episode[0] += 1
        record([0], pool.reset([0], TASKS[:1], [1]), episode)
        assert pool._local == [True, False] and pool._procs[0].is_alive()  # slot 1's worker still serves it
        for _ in range(PROBE_CALLS):
            record([0, 1], pool.step([0, 1], ["look", "look"]), episode)
        assert pool.step_cost["in_process_calls"] == 0
        episode[1] += 1
        record([1], pool.reset([1], TASKS[1:], [1]), episode)
        for _ in range(PROBE_CALLS):
            record([0, 1], pool.step([0, 1], ["look", "look"]), episode)
        assert pool._local == [True, True] and pool.step_cost["in_process_calls"] == PROBE_CALLS
        assert all(len(pids) == 1 for pids in episodes.values()), episodes
        assert episodes[(1, 0)] != {os.getpid()} and episodes[(1, 1)] == episodes[(0, 1)] == {os.getpid()}


def test_moving_in_can_be_switched_off():
    with EnvPool(make_faulty_env, num_slots=2, timeout=30.0, num_workers=2, move_cheap_in=False) as pool:
        _play(pool, 0)
        _play(pool, 1)
        assert pool.step_cost["pooled_calls"] == 0 and pool.step_cost["in_process"] is None
        assert not any(pool._local)
