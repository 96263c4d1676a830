"""Task groups: K related tasks of one family, ordered by increasing difficulty, served cyclically (SkillRise 2.1).

The official group files (`data/groups/skillrise_{alfworld,webshop,sciworld}_K3.jsonl`) are not public, so groups are
built here by one documented rule (README "Task grouping"):

1. family: ALFWorld task type, WebShop product category, ScienceWorld task (its variations are the members);
   TextRooms (our CPU test bed) task type and target room;
2. inside a family, tasks are shuffled with `seed` and cut into consecutive groups of K; a short last group is
   filled with tasks from the start of the family, flagged `padded` (as the official ALFWorld groups flag
   duplicates) and left out of cross-mode success rates;
3. each group is sorted by increasing difficulty where the environment measures it (ALFWorld: length of the expert
   high-level PDDL plan; WebShop: number of goal attributes and options; ScienceWorld: length of the engine's gold
   action sequence), stable, so ties keep the shuffled order; TextRooms has no measure;
4. the pool of groups is shuffled once with `seed` (official `group_loader.py`: `random.Random(seed).shuffle`, seed 0)
   and served in that order, cycling (the trainer turns TRL's per-epoch shuffle off).
"""

import json
import random
from collections.abc import Callable
from pathlib import Path


def family_of(env_name: str, task: dict) -> str:
    """The family key of a task: tasks of one family share a skill document within a trial."""
    if env_name == "textrooms":
        return f"{task['task_type']}/{task['room']}"
    if env_name in ("alfworld", "webshop", "scienceworld"):
        return str(task["task_type"])
    raise ValueError(f"SkillRise has no task families for env {env_name!r}; valid: alfworld, webshop, scienceworld, "
                     "textrooms.")  # fmt: skip


def alfworld_plan_length(task: dict) -> float | None:
    """Number of high-level PDDL steps of the game's expert plan (`traj_data.json` beside the game file)."""
    path = Path(task["gamefile"]).parent / "traj_data.json"
    if not path.is_file():
        return None
    return float(len(json.loads(path.read_text())["plan"]["high_pddl"]))


def webshop_constraints(task: dict) -> float:
    """Number of goal attributes plus goal options a purchase must match."""
    goal = task["goal"]
    return float(len(goal.get("attributes") or []) + len(goal.get("goal_options") or []))


def scienceworld_gold_lengths(tasks: list[dict], simplifications: str = "easy") -> dict[str, float]:
    """Length of the engine's gold action sequence per task id (one JVM for all of them)."""
    from agentrl_shared.envs.scienceworld import ScienceWorldAdapter

    env = ScienceWorldAdapter(simplifications=simplifications)
    try:
        return {t["task_id"]: float(len(env.gold_actions(t))) for t in tasks}
    finally:
        env.close()


def difficulty_fn(env_name: str, tasks: list[dict], env_kwargs: dict | None = None) -> Callable[[dict], float | None]:
    """The difficulty measure of `env_name` (None where the environment has none)."""
    if env_name == "alfworld":
        return alfworld_plan_length
    if env_name == "webshop":
        return webshop_constraints
    if env_name == "scienceworld":
        lengths = scienceworld_gold_lengths(tasks, (env_kwargs or {}).get("simplifications", "easy"))
        return lambda t: lengths[t["task_id"]]
    return lambda t: None


def build_groups(
    tasks: list[dict], env_name: str, K: int, seed: int = 0, difficulty: Callable[[dict], float | None] | None = None
) -> list[list[dict]]:
    """Groups of K same-family tasks by the module's rule; each task gets `padded` and `position` keys."""
    if K < 1:
        raise ValueError(f"group_size_k must be >= 1, got {K}.")
    rng = random.Random(seed)
    families: dict[str, list[dict]] = {}
    for t in tasks:
        families.setdefault(family_of(env_name, t), []).append(t)
    groups: list[list[dict]] = []
    for family in sorted(families):
        members = list(families[family])
        rng.shuffle(members)
        for start in range(0, len(members), K):
            chunk = [{**t, "padded": False} for t in members[start : start + K]]
            k = 0
            while len(chunk) < K:  # fill a short last group with the family's first tasks, flagged
                chunk.append({**members[k % len(members)], "padded": True})
                k += 1
            if difficulty is not None:
                scores = [difficulty(t) for t in chunk]
                if all(s is not None for s in scores):
                    chunk = [t for _, t in sorted(zip(scores, chunk, strict=True), key=lambda p: p[0])]
            groups.append([{**t, "family": family} for t in chunk])
    random.Random(seed).shuffle(groups)  # official group_loader: one shuffle with the seed, then cyclic order
    return groups


def repeat_groups(tasks: list[dict], K: int) -> list[list[dict]]:
    """Repeat mode (official `val_task_mode='repeat'`): the same task K times in one trial."""
    return [[{**t, "padded": False} for _ in range(K)] for t in tasks]
