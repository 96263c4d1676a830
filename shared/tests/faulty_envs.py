"""Environments that misbehave on purpose, importable by spawned pool workers (tests only)."""

import os
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


class SlowStepEnv(TextRoomsEnv):
    """TextRooms whose every step takes `step_s` seconds (an engine slower than a pipe round trip)."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        super().__init__()

    def step(self, action: str) -> Step:
        time.sleep(self.step_s)
        return super().step(action)


def make_slow_step_env(step_s: float = 0.05) -> SlowStepEnv:
    return SlowStepEnv(step_s)
