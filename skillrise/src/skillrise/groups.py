"""Task groups: K related tasks of one family, ordered by increasing difficulty, served cyclically (SkillRise 2.1).

Two sources (README "Task grouping"):

- **The official group files** (`env.groups=official`, the default, when the file is there): `data/groups/
  skillrise_{alfworld,sciworld,webshop}_K3.jsonl` of lyq1119/SkillRise-reproduction-and-refinement@79bbd91 (imported
  from Within-yao/SkillRise), fetched by `make data ENV=skillrise-groups` into `$SKILLRISE_GROUPS`
  (`agentrl_shared.envs.data.skillrise_groups_dir`), or any file of that layout (`env.groups=<path>`). One JSON object
  per line, `{group_id, task_type, K, tasks: [...]}`, the tasks in the file's order; a task entry names an ALFWorld
  game (`task_dir`, `trial`), a ScienceWorld variation (`task_id` = index in the engine's task list, `variation`,
  `task_type` = task name) or a WebShop goal (`session_idx`, with `instruction_text`, `n_attr`, `n_opt`,
  `difficulty`); `padded` marks a repeated task that fills a short group (left out of cross-mode rates).
- **The rules** (`env.groups=rules`, and environments without a file: TextRooms, or a file not fetched):
  1. family: ALFWorld task type, WebShop product category (of the goal, fixed per task, below), ScienceWorld task
     (its variations are the members), TextRooms task type and target room;
  2. inside a family, tasks are shuffled with `seed` and cut into consecutive groups of K; a short last group is
     filled with tasks from the start of the family, flagged `padded`;
  3. each group is sorted by increasing difficulty, stable: ALFWorld length of the expert PDDL plan, WebShop
     `n_attr + n_opt` (the official files' `difficulty`), ScienceWorld the variation id (the official groups are in
     variation order); TextRooms has none.

Either way the pool is shuffled once with `seed` (official `group_loader.py`: `random.Random(seed).shuffle`, seed 0)
and served in that order, cycling (the trainer turns TRL's per-epoch shuffle off).

**WebShop goals are fixed per task.** A WebShop `goal_idx` means nothing without the seed that shuffled the goal list
(each server shuffles its goals with its own seed), so `pin_webshop_goals` resolves every task once, with one goal
seed, and stores the goal and that seed (`env_seed`) in the task: every rollout of every group then plays the same
goal with the prices it was drawn with (official `skillrise_webshop/envs.py`: every worker has the same seed, 0 in
training, as the group file's `session_idx` were drawn with seed 0; validation workers seed + 1000).
"""

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path


logger = logging.getLogger("skillrise")
GROUP_FILES = {
    "alfworld": "skillrise_alfworld_K3.jsonl",
    "scienceworld": "skillrise_sciworld_K3.jsonl",
    "webshop": "skillrise_webshop_K3.jsonl",
}


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


def webshop_difficulty(task: dict) -> float:
    """`n_attr + n_opt`: goal attributes plus goal options a purchase must match (official group files'
    `difficulty`)."""
    goal = task["goal"]
    return float(len(goal.get("attributes") or []) + len(goal.get("goal_options") or []))


def scienceworld_variation(task: dict) -> float:
    """The variation id (the official ScienceWorld groups list their variations in increasing order)."""
    return float(task["variation"])


def difficulty_fn(env_name: str) -> Callable[[dict], float | None]:
    """The in-group order of `env_name` (None where the environment has none)."""
    if env_name == "alfworld":
        return alfworld_plan_length
    if env_name == "webshop":
        return webshop_difficulty
    if env_name == "scienceworld":
        return scienceworld_variation
    return lambda t: None


def pin_webshop_goals(tasks: list[dict], seed: int, data_dir: str, full: bool = False,
                      human_goals: bool = False) -> list[dict]:  # fmt: skip
    """WebShop tasks with their goal fixed: the goal of `goal_idx` in the goal list a server seeded with `seed` draws
    (`Catalog.goal_set`), the product category as `task_type`, and `env_seed = seed` so that the episode plays that
    goal's prices whatever seed the trial has. Tasks that already carry a goal (`load_fixed_goals`) keep it."""
    from agentrl_shared.envs.webshop import load_catalog

    goals = None
    out = []
    for t in tasks:
        if "goal" not in t:
            if goals is None:
                goals = load_catalog(str(data_dir), full).goal_set(seed, human_goals)[1]
            t = {**t, "goal": goals[t["goal_idx"]]}
        out.append({**t, "task_type": t["goal"].get("category") or "webshop", "env_seed": seed})
    return out


def build_groups(
    tasks: list[dict], env_name: str, K: int, seed: int = 0, difficulty: Callable[[dict], float | None] | None = None
) -> list[list[dict]]:
    """Groups of K same-family tasks by the module's rules; each task gets `padded` and `family` keys."""
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


def official_task_id(env_name: str, entry: dict, split: str) -> str:
    """Our `task_id` of an official group-file task entry (ALFWorld `<split>/<task_dir>/<trial>`, ScienceWorld
    `<task name>:<variation>`, WebShop `webshop_<session_idx>`)."""
    if env_name == "alfworld":
        return f"{split}/{entry['task_dir']}/{entry['trial']}"
    if env_name == "scienceworld":
        return f"{entry['task_type']}:{int(entry['variation'])}"
    if env_name == "webshop":
        return f"webshop_{int(entry['session_idx'])}"
    raise ValueError(f"No official SkillRise group file for env {env_name!r}; valid: {', '.join(GROUP_FILES)}.")


def load_group_file(
    path: Path, env_name: str, tasks: list[dict], K: int, split: str, seed: int = 0
) -> list[list[dict]]:
    """The groups of an official-layout group file, as our task dicts (in the file's in-group order, `padded` and the
    group's `task_type` as `family` from the file), the pool shuffled once with `seed`. A group of another K, a task
    not in `tasks`, or (WebShop) a goal whose instruction differs from the file's raises `ValueError` naming it."""
    by_id = {t["task_id"]: t for t in tasks}
    groups = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        g = json.loads(line)
        if int(g["K"]) != K or len(g["tasks"]) != K:
            raise ValueError(f"{path}:{n}: group {g['group_id']} has K = {g['K']} ({len(g['tasks'])} tasks), but "
                             f"trainer.group_size_k = {K}; set group_size_k={g['K']} or env.groups=rules.")  # fmt: skip
        group = []
        for entry in g["tasks"]:
            task_id = official_task_id(env_name, entry, split)
            if task_id not in by_id:
                raise ValueError(f"{path}:{n}: task {task_id} of group {g['group_id']} is not among the {len(by_id)} "
                                 f"tasks of split {split!r}; check env.train_split / task_kwargs, or set "
                                 "env.groups=rules.")  # fmt: skip
            task = by_id[task_id]
            expected = entry.get("instruction_text")
            if env_name == "webshop" and expected is not None and task["goal"]["instruction_text"] != expected:
                raise ValueError(
                    f"{path}:{n}: WebShop session {entry['session_idx']} is {task['goal']['instruction_text']!r} "
                    f"here but {expected!r} in the group file: the goal lists differ (product files, human_goals or "
                    "goal seed); use the official WebShop files with env.task_kwargs.human_goals as the file was "
                    "built, or env.groups=rules."
                )
            group.append({**task, "padded": bool(entry.get("padded", False)), "family": str(g["task_type"])})
        groups.append(group)
    if not groups:
        raise ValueError(f"{path} holds no groups; fetch it again (make data ENV=skillrise-groups) or set "
                         "env.groups=rules.")  # fmt: skip
    random.Random(seed).shuffle(groups)  # official group_loader: one shuffle with the seed, then cyclic order
    return groups


def group_file(env_name: str, source: str) -> Path | None:
    """The group file `env.groups` names: `rules` -> None; `official` -> the official file of the environment in
    `skillrise_groups_dir()` when it exists (else None, logged: the rules are used); anything else is a path, which
    must exist."""
    if source == "rules":
        return None
    if source == "official":
        if env_name not in GROUP_FILES:
            return None
        from agentrl_shared.envs.data import skillrise_groups_dir

        path = skillrise_groups_dir() / GROUP_FILES[env_name]
        if path.is_file():
            return path
        logger.warning(f"official SkillRise groups {path} not found: groups are built by the rules (groups.py); "
                       "`make data ENV=skillrise-groups` fetches the official files.")  # fmt: skip
        return None
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"env.groups={source!r}: no such group file; give a file of the official layout, "
                                "`official` or `rules`.")  # fmt: skip
    return path


def repeat_groups(tasks: list[dict], K: int) -> list[list[dict]]:
    """Repeat mode (official `val_task_mode='repeat'`): the same task K times in one trial."""
    return [[{**t, "padded": False} for _ in range(K)] for t in tasks]
