"""The pool moves environments whose measured step costs less than its round trip into the trainer's process, at
an episode boundary, and keeps slower ones in their workers."""

import functools

from faulty_envs import make_faulty_env, make_slow_step_env

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.base import EnvFailure
from agentrl_shared.envs.pool import PROBE_CALLS, EnvPool


TASKS = load_tasks("textrooms", "train", num_tasks=2)


def _play(pool: EnvPool, seed: int) -> list[str]:
    """Reset both slots, then step `PROBE_CALLS` times with each slot's first admissible action."""
    states = pool.reset([0, 1], TASKS, [seed, seed])
    seen = [s.observation for s in states]
    for _ in range(PROBE_CALLS):
        states = pool.step([0, 1], [s.info["admissible_actions"][0] if not s.done else "look" for s in states])
        seen += [s.observation for s in states]
    return seen


def test_cheap_environment_moves_in_at_the_next_reset_with_the_same_episodes():
    with EnvPool(make_faulty_env, num_slots=2, num_workers=0) as local:
        expected = [_play(local, 0), _play(local, 1)]
    with EnvPool(make_faulty_env, num_slots=2, timeout=30.0, num_workers=1) as pool:
        first = _play(pool, 0)  # the probe: served by the workers
        cost = pool.step_cost
        assert cost["calls"] == PROBE_CALLS and cost["in_process"] is True, cost
        assert cost["serial_s"] < cost["pooled_s"]
        procs = list(pool._procs)
        assert not any(pool._local) and all(p.is_alive() for p in procs)  # no episode moves mid-way
        second = _play(pool, 1)
        assert all(pool._local) and not any(p.is_alive() for p in procs)
        assert [first, second] == expected
        # in this process a raised error still ends only its own episode
        pool.reset([0, 1], TASKS, [0, 0])
        out = pool.step([0, 1], ["raise", "look"])
        assert isinstance(out[0], EnvFailure) and not isinstance(out[1], EnvFailure)


def test_slow_environment_stays_in_its_workers():
    slow = functools.partial(make_slow_step_env, 0.05)
    with EnvPool(slow, num_slots=2, timeout=30.0, num_workers=1) as pool:
        _play(pool, 0)
        _play(pool, 1)
        assert pool.step_cost["in_process"] is False, pool.step_cost
        assert not any(pool._local) and all(p.is_alive() for p in pool._procs)


def test_moving_in_can_be_switched_off():
    with EnvPool(make_faulty_env, num_slots=2, timeout=30.0, num_workers=1, move_cheap_in=False) as pool:
        _play(pool, 0)
        _play(pool, 1)
        assert pool.step_cost["in_process"] is None and not any(pool._local)
