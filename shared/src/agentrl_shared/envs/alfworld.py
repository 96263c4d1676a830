"""ALFWorld text adapter over the real `alfworld` engine (TextWorld + PDDL), as verl-agent and the papers use it.

Games are read from the official layout `$ALFWORLD_DATA/json_2.1.1/<split>/<task>-<obj>-<mrecep>-<recep>-<scene>/
<trial>/` (alfworld `AlfredTWEnv.collect_game_files`); each game is played with alfworld's own wrappers
(`AlfredDemangler`, `AlfredInfos`, and `AlfredExpert` for the hand-coded expert), so observations and admissible
actions come from the engine and the game's own grammar (alfworld 0.4 logic says "move X to Y"; the shared real games
were built with older logic that says "put X in/on Y"). `info["expert_plan"]` is, by default, a plan computed from the
game's PDDL state and goal that wins every game (`expert_plan`). Reward is `success_reward * won` (verl-agent `alfworld/envs.py` `compute_reward`: 10),
episodes stop after `max_steps` (50, verl-agent `env.max_steps`). The task type comes from the game path
(SDAR section 6.1: per-type success). `agentrl_shared.testing.write_synthetic_games` makes small games in the same layout.
"""

import json
import os
import random
from pathlib import Path

from .alfworld_plan import TEMPLATES, command_templates, expert_plan, parse_goal
from .base import Step


# Task-type prefix of the game directory -> short name used for per-type success (pick, look, clean, heat, cool, pick2).
TASK_TYPES = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
# Split names: the official folders, plus verl-agent's `train_eval` names for the two validation folders.
SPLITS = {
    "train": "train",
    "valid_seen": "valid_seen",
    "valid_unseen": "valid_unseen",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
EXPERT_TYPES = ("plan", "handcoded", "none")
EXTRA_HINT = (
    "ALFWorld needs the `alfworld` extra: `uv sync --extra alfworld` (or `pip install 'agentrl-shared[alfworld]'`)."
)


def _engine():
    """Import textworld and alfworld lazily; fail with the extra to install."""
    try:
        import textworld
        from alfworld.agents.environment import alfred_tw_env
        from alfworld.agents.utils import misc
    except ImportError as exc:
        raise ImportError(f"{EXTRA_HINT} ({exc})") from exc
    return textworld, alfred_tw_env, misc


def resolve_data_dir(path: str | os.PathLike | None = None) -> Path:
    """The ALFWorld data root (the folder holding `json_2.1.1/`): `path`, else `$ALFWORLD_DATA`, else alfworld's default
    `~/.cache/alfworld`. Raises `FileNotFoundError` naming the fix when there are no games there."""
    root = Path(path or os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld").expanduser()
    if not (root / "json_2.1.1").is_dir():
        raise FileNotFoundError(
            f"No ALFWorld games at {root / 'json_2.1.1'}: fetch them with `make data ENV=alfworld`, or set "
            "ALFWORLD_DATA to the folder that holds json_2.1.1/."
        )
    return root


def task_type_of(path: str | os.PathLike) -> str:
    """Short task type (pick, look, clean, heat, cool, pick2) parsed from a game or trial path."""
    for part in reversed(Path(path).parts):
        for prefix, short in TASK_TYPES.items():
            if part.startswith(prefix + "-") or part == prefix:
                return short
    raise ValueError(
        f"No ALFWorld task type in {str(path)!r}; expected a folder starting with one of {list(TASK_TYPES)}."
    )


def logic_files(root: Path | None = None) -> tuple[str, str]:
    """The PDDL domain and TextWorld grammar: `<root>/logic/alfred.{pddl,twl2}` when present (the copies
    `alfworld-download` places there), else the ones shipped in the alfworld package."""
    if root is not None and (root / "logic" / "alfred.pddl").is_file() and (root / "logic" / "alfred.twl2").is_file():
        return (root / "logic" / "alfred.pddl").read_text(), (root / "logic" / "alfred.twl2").read_text()
    _engine()
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return Path(ALFRED_PDDL_PATH).read_text(), Path(ALFRED_TWL2_PATH).read_text()


def build_game_file(trial_dir: str | os.PathLike, out_path: str | os.PathLike, root: Path | None = None) -> Path:
    """Write `game.tw-pddl` for a trial from its `initial_state.pddl` and `traj_data.json` (alfworld-generate step 1:
    the domain, the grammar with the templated task sentence, and the problem). Solvability is not checked
    (`"solvable": null`); the templated sentence is chosen with a seed derived from the trial name.
    """
    _, _, misc = _engine()
    trial_dir = Path(trial_dir)
    traj = json.loads((trial_dir / "traj_data.json").read_text())
    domain, grammar = logic_files(root)
    # alfworld picks the task sentence with the global `random`; seed it from the trial so builds are reproducible.
    state = random.getstate()
    random.seed(trial_dir.name)
    try:
        grammar = misc.add_task_to_grammar(grammar, traj)
    finally:
        random.setstate(state)
    game = {
        "pddl_domain": domain,
        "grammar": grammar,
        "pddl_problem": (trial_dir / "initial_state.pddl").read_text(),
        "solvable": None,
    }
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.parent != trial_dir:  # alfworld's hand-coded expert reads traj_data.json next to the game file
        (out_path.parent / "traj_data.json").write_text(json.dumps(traj))
    tmp = out_path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(game))
    tmp.replace(out_path)
    return out_path


OFFICIAL_GAME_COUNTS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}  # collect_game_files on json_2.1.1


def load_tasks(
    split: str,
    data_dir: str | os.PathLike | None = None,
    task_types: list[str] | None = None,
    build_missing: bool = False,
    build_dir: str | os.PathLike | None = None,
) -> list[dict]:
    """The sorted list of ALFWorld games of `split`, selected as alfworld's `AlfredTWEnv.collect_game_files` does
    (alfworld 0.4.2 `agents/environment/alfred_tw_env.py`): skip `movable` and `Sliced` trials, skip a trial without
    `game.tw-pddl`, skip a game whose `solvable` is missing or falsy; the task type is `traj_data.json`'s.

    Args:
        split (`str`): `train`, `valid_seen` (`eval_in_distribution`) or `valid_unseen` (`eval_out_of_distribution`).
        data_dir (`str`, *optional*): data root; defaults to `$ALFWORLD_DATA` (see `resolve_data_dir`).
        task_types (`list[str]`, *optional*): keep only these short types (pick, look, clean, heat, cool, pick2).
        build_missing (`bool`, *optional*, defaults to `False`): build `game.tw-pddl` for trials that have only
            `initial_state.pddl` (our addition, for data without game files; alfworld skips them) and keep them.
        build_dir (`str`, *optional*): where those files are built (never inside the data folder); defaults to
            `<agentrl cache>/alfworld_games`.

    Returns:
        `list[dict]`: tasks with `task_id` (`<split>/<task>/<trial>`), `task_type`, `game_type` and `gamefile`.
    """
    if split not in SPLITS:
        raise ValueError(f"Unknown ALFWorld split {split!r}; valid splits: {', '.join(SPLITS)}.")
    if task_types is not None:
        unknown = set(task_types) - set(TASK_TYPES.values())
        if unknown:
            raise ValueError(
                f"Unknown ALFWorld task types {sorted(unknown)}; valid: {', '.join(TASK_TYPES.values())}."
            )
    root = resolve_data_dir(data_dir)
    split_dir = root / "json_2.1.1" / SPLITS[split]
    if not split_dir.is_dir():
        raise FileNotFoundError(
            f"No ALFWorld split folder {split_dir}; expected json_2.1.1/{SPLITS[split]}/ under {root}."
        )
    if build_missing and build_dir is None:
        from ..offline import cache_dir

        build_dir = cache_dir() / "alfworld_games"
    tasks = []
    for traj_path in sorted(split_dir.rglob("traj_data.json")):
        trial = traj_path.parent
        rel = trial.relative_to(root / "json_2.1.1")
        if "movable" in str(trial) or "Sliced" in str(trial):  # not supported by the TextWorld engine
            continue
        game_type = json.loads(traj_path.read_text())["task_type"]
        if game_type not in TASK_TYPES or (task_types is not None and TASK_TYPES[game_type] not in task_types):
            continue
        gamefile = trial / "game.tw-pddl"
        if gamefile.is_file():
            if not json.loads(gamefile.read_text()).get("solvable"):  # missing or falsy: alfworld skips it
                continue
        elif build_missing and (trial / "initial_state.pddl").is_file():
            gamefile = Path(build_dir) / rel / "game.tw-pddl"
            if not gamefile.is_file():
                build_game_file(trial, gamefile, root)
        else:
            continue
        tasks.append(
            {
                "task_id": str(rel),
                "task_type": TASK_TYPES[game_type],
                "game_type": game_type,
                "gamefile": str(gamefile),
            }
        )
    return tasks


TASK_MARKER = "Your task is to: "


def task_sentence(first_observation: str) -> str:
    """The task of a game from its first observation, as verl-agent `AlfWorldEnvironmentManager.extract_task` reads
    it: the text after "Your task is to: ", stripped. Raises when the marker is missing (verl-agent does too)."""
    at = first_observation.find(TASK_MARKER)
    if at == -1:
        raise ValueError(
            f"No task sentence ({TASK_MARKER!r}) in the first ALFWorld observation: {first_observation!r}"
        )
    return first_observation[at + len(TASK_MARKER) :].strip()


class AlfworldEnv:
    """One ALFWorld game at a time, played by the real TextWorld PDDL engine with alfworld's wrappers.

    Args:
        max_steps (`int`, *optional*, defaults to `50`): episode length limit (verl-agent `env.max_steps`).
        success_reward (`float`, *optional*, defaults to `10.0`): reward on the step that wins (verl-agent 10·won).
        expert_type (`str`, *optional*, defaults to `"none"`): what `info["expert_plan"]` holds. `none`: no expert
            (`[]`), as verl-agent plays ALFWorld (its `config_tw.yaml` sets `expert_type` only for alfworld's own
            DAgger agents); `plan`: the whole remaining plan to the goal, recomputed on every step from the engine's
            PDDL facts (`alfworld_plan.expert_plan`; for tests and methods that ask for an oracle);
            `handcoded`: alfworld's `AlfredExpert(HANDCODED)`, the next action of its heuristic searcher (`["look"]`
            at reset, as in alfworld; not guaranteed to win).
    """

    def __init__(self, max_steps: int = 50, success_reward: float = 10.0, expert_type: str = "none"):
        if expert_type not in EXPERT_TYPES:
            raise ValueError(f"Unknown ALFWorld expert_type {expert_type!r}; valid: {', '.join(EXPERT_TYPES)}.")
        self.max_steps, self.success_reward, self.expert_type = max_steps, success_reward, expert_type
        self._env = None
        self._gamefile = None
        self._goal: dict = {}
        self._templates: dict[str, str] = dict(TEMPLATES)
        self._task: dict = {}
        self._instruction = ""
        self._steps = 0
        self._done = True
        self._last: Step | None = None

    def _load(self, gamefile: str) -> None:
        textworld, tw_env, _ = _engine()
        # alfworld `AlfredTWEnv.init_env`: these EnvInfos and wrappers, in this order (evaluation: no shuffling).
        infos = textworld.EnvInfos(won=True, admissible_commands=True, score=True, max_score=True, extras=["gamefile"])
        wrappers = [tw_env.AlfredDemangler(shuffle=False), tw_env.AlfredInfos]
        if self.expert_type == "handcoded":
            infos.extras.append("expert_plan")
            # keyword: `AlfredExpert(expert_type)` would pass the type as the wrapped env (alfworld's signature is
            # `AlfredExpert(env=None, expert_type=HANDCODED)`).
            wrappers.append(tw_env.AlfredExpert(expert_type=tw_env.AlfredExpertType.HANDCODED))
        elif self.expert_type == "plan":
            infos.facts = True  # the PDDL state, as AlfredExpert requests it for its hand-coded expert
        if self._env is not None:
            self._env.close()
        self._env = textworld.start(gamefile, infos, wrappers=wrappers)
        self._gamefile = gamefile
        game = json.loads(Path(gamefile).read_text())
        self._goal, self._templates = parse_goal(game["pddl_problem"]), command_templates(game["grammar"])

    def _step_from(self, state, reward: float, done: bool) -> Step:
        won = bool(state["won"])
        info = {
            "won": won,
            "admissible_actions": list(state["admissible_commands"]),
            "task_type": self._task["task_type"],
            "gamefile": self._gamefile,
            "instruction": self._instruction,
            "expert_plan": self._expert_plan(state, won),
            "steps": self._steps,
        }
        return Step(observation=state.feedback, reward=reward, done=done, info=info)

    def _expert_plan(self, state, won: bool) -> list[str]:
        if self.expert_type == "plan":
            return [] if won else expert_plan(state["facts"], self._goal, self._templates)
        return list(state.get("extra.expert_plan") or [])

    def reset(self, task: dict, seed: int) -> Step:
        """Start the game `task["gamefile"]`. The engine is deterministic (no name shuffling), so `seed` changes
        nothing: the same task always gives the same start state."""
        gamefile = task.get("gamefile")
        if not gamefile or not Path(gamefile).is_file():
            raise FileNotFoundError(f"ALFWorld task {task.get('task_id')!r} has no game file at {gamefile!r}.")
        if gamefile != self._gamefile or self._env is None:
            self._load(gamefile)
        self._task = {"task_type": task.get("task_type") or task_type_of(gamefile), **task}
        self._steps, self._done = 0, False
        state = self._env.reset()
        self._instruction = task_sentence(state.feedback)
        self._last = self._step_from(state, 0.0, False)
        return self._last

    def step(self, action: str) -> Step:
        """Execute one command; an inadmissible one answers "Nothing happens." and costs a step, as in alfworld."""
        if self._env is None or self._done:
            raise RuntimeError("ALFWorld episode is over (or never started): call reset(task, seed) first.")
        state, _, done = self._env.step(action)
        self._steps += 1
        won = bool(state["won"])
        done = bool(done) or won or self._steps >= self.max_steps
        self._done = done
        self._last = self._step_from(state, self.success_reward if won else 0.0, done)
        return self._last

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
            self._gamefile = None
