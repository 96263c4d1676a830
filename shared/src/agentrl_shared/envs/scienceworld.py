"""ScienceWorld adapter over the real `scienceworld` package (Java 17, offline), as SkillRise uses it.

Tasks are (task name, variation) pairs with the package's official train / dev / test variation splits
(`get_variations_train|dev|test`); the simplification preset defaults to `easy` (SkillRise section 2). Each adapter
owns one JVM (py4j gateway started with `die_on_exit`, so it dies with its worker even on a crash; `close` shuts it
down). `won` is done with score 100; the reward is `success_reward` (10) on the winning step, else 0 (SkillRise's
binary reward); the engine's 0-100 score is `info["score"]`. Episodes stop after `max_steps` (SkillRise: 30).
"""

from .base import Step


SPLITS = ("train", "dev", "test")
EXTRA_HINT = (
    "ScienceWorld needs the `scienceworld` extra (`uv sync --extra scienceworld`) and a Java runtime (17 works)."
)


def _engine_class():
    try:
        from scienceworld import ScienceWorldEnv
    except ImportError as exc:
        raise ImportError(f"{EXTRA_HINT} ({exc})") from exc
    return ScienceWorldEnv


def load_tasks(split: str, task_names: list[str] | None = None) -> list[dict]:
    """(task, variation) tasks of `split` over `task_names` (default: all 30 tasks), in task then variation order.

    Starts one JVM for the lookup and closes it.
    """
    if split not in SPLITS:
        raise ValueError(f"Unknown ScienceWorld split {split!r}; valid splits: {', '.join(SPLITS)}.")
    env = _engine_class()(envStepLimit=100)
    try:
        names = env.get_task_names()
        if task_names is not None:
            unknown = [t for t in task_names if t not in names]
            if unknown:
                raise ValueError(f"Unknown ScienceWorld tasks {unknown}; valid: {', '.join(names)}.")
            names = list(task_names)
        tasks = []
        for name in names:
            env.load(name, 0, "")
            variations = {"train": env.get_variations_train, "dev": env.get_variations_dev}.get(
                split, env.get_variations_test
            )()
            tasks += [
                {"task_id": f"{name}:{v}", "task_type": name, "task_name": name, "variation": int(v)}
                for v in variations
            ]
        return tasks
    finally:
        env.close()


class ScienceWorldAdapter:
    """One ScienceWorld JVM; `reset` loads (task, variation) and returns the first "look around".

    Args:
        simplifications (`str`, *optional*, defaults to `"easy"`): simplification preset or comma list.
        max_steps (`int`, *optional*, defaults to `30`): episode length limit (SkillRise `env.max_turns`).
        success_reward (`float`, *optional*, defaults to `10.0`): reward on the winning step.
        env_step_limit (`int`, *optional*, defaults to `100`): the engine's own move limit.
    """

    def __init__(
        self,
        simplifications: str = "easy",
        max_steps: int = 30,
        success_reward: float = 10.0,
        env_step_limit: int = 100,
    ):
        self.simplifications, self.max_steps, self.success_reward = simplifications, max_steps, success_reward
        self.env = _engine_class()(envStepLimit=env_step_limit)
        self._task: dict = {}
        self._done = True

    def _out(self, obs: str, info: dict, reward: float, done: bool) -> Step:
        score = int(info["score"])
        out = {
            "won": bool(done and score >= 100),
            "admissible_actions": list(info["valid"]),
            "task_type": self._task["task_type"],
            "score": score,
            "task_description": info["taskDesc"],
            "instruction": info["taskDesc"],  # the collector's task text (base.py protocol key)
            "moves": info["moves"],
        }
        return Step(observation=obs, reward=reward, done=done, info=out)

    def reset(self, task: dict, seed: int) -> Step:
        """Load `task["task_name"]` variation `task["variation"]`; the variation fixes the world, so `seed` is unused."""
        self._task = {"task_type": task["task_name"], **task}
        self.env.load(task["task_name"], int(task["variation"]), self.simplifications)
        obs, info = self.env.reset()
        self._steps, self._done = 0, False
        return self._out(obs, info, 0.0, False)

    def step(self, action: str) -> Step:
        """One engine step; an unknown action gets the engine's own answer and costs a step."""
        if self._done:
            raise RuntimeError("ScienceWorld episode is over (or never started): call reset(task, seed) first.")
        obs, _, done, info = self.env.step(action)
        self._steps += 1
        won = bool(done and int(info["score"]) >= 100)
        self._done = bool(done) or self._steps >= self.max_steps
        return self._out(obs, info, self.success_reward if won else 0.0, self._done)

    def gold_actions(self, task: dict) -> list[str]:
        """The engine's gold action sequence for `task` (reloads the task with gold-path generation)."""
        self.env.load(task["task_name"], int(task["variation"]), self.simplifications, generateGoldPath=True)
        return self.env.get_gold_action_sequence()

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
