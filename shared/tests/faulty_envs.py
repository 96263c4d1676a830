"""Environments that misbehave on purpose, importable by spawned pool workers (tests only)."""

import os
import threading
import time

from agentrl_shared.envs.base import Step
from agentrl_shared.envs.textrooms import TextRoomsEnv


class FaultyEnv(TextRoomsEnv):
    """TextRooms that raises, hangs or kills its process when the action is `raise`, `hang` or `die`."""

    def step(self, action: str) -> Step:
        if action == "raise":
            raise RuntimeError("simulated environment bug")
        if action == "hang":
            time.sleep(3600)
        if action == "die":
            os._exit(3)
        return super().step(action)


def make_faulty_env() -> FaultyEnv:
    return FaultyEnv()


class SlowBuildEnv(TextRoomsEnv):
    """TextRooms whose construction takes `build_s` seconds (a game engine or a catalogue loading)."""

    def __init__(self, build_s: float):
        time.sleep(build_s)
        super().__init__()


def make_slow_build_env(build_s: float = 3.0) -> SlowBuildEnv:
    return SlowBuildEnv(build_s)


class PidEnv(TextRoomsEnv):
    """TextRooms that names in `info["pid"]` and `info["thread"]` the process and thread each reset and step ran in
    (a pool slot's side)."""

    def reset(self, task: dict, seed: int) -> Step:
        out = super().reset(task, seed)
        out.info["pid"], out.info["thread"] = os.getpid(), threading.current_thread().name
        return out

    def step(self, action: str) -> Step:
        out = super().step(action)
        out.info["pid"], out.info["thread"] = os.getpid(), threading.current_thread().name
        return out


def make_pid_env() -> PidEnv:
    return PidEnv()


class SlowStepEnv(PidEnv):
    """TextRooms whose every step waits `step_s` seconds without using the CPU (HTTP retrieval, an engine in another
    process)."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        super().__init__()

    def step(self, action: str) -> Step:
        time.sleep(self.step_s)
        return super().step(action)


def make_slow_step_env(step_s: float = 0.05) -> SlowStepEnv:
    return SlowStepEnv(step_s)


_ENGINE_LOCK = threading.Lock()  # one per process, as a library that serialises its callers in a process


class LockedSlowStepEnv(SlowStepEnv):
    """`SlowStepEnv` whose wait holds a lock shared by every instance in the process (an engine that serialises its
    callers, or a C extension that holds the GIL while it waits): in one process the slots' waits add up, threads or
    not; in workers they overlap."""

    def step(self, action: str) -> Step:
        with _ENGINE_LOCK:
            return super().step(action)


def make_locked_slow_step_env(step_s: float = 0.05) -> LockedSlowStepEnv:
    return LockedSlowStepEnv(step_s)


class BusyStepEnv(PidEnv):
    """TextRooms whose every step computes for `step_s` CPU seconds (a game engine in this process)."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        super().__init__()

    def step(self, action: str) -> Step:
        end = time.process_time() + self.step_s
        while time.process_time() < end:
            pass
        return super().step(action)


def make_busy_step_env(step_s: float = 0.01) -> BusyStepEnv:
    return BusyStepEnv(step_s)
