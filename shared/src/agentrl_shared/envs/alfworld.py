"""ALFWorld text adapter over the real `alfworld` engine (TextWorld + PDDL), as verl-agent and the papers use it.

Games are read from the official layout `$ALFWORLD_DATA/json_2.1.1/<split>/<task>-<obj>-<mrecep>-<recep>-<scene>/
<trial>/` (alfworld `AlfredTWEnv.collect_game_files`); each game is played with alfworld's own wrappers
(`AlfredDemangler`, `AlfredInfos`, and `AlfredExpert` for the hand-coded expert), so observations and admissible
actions come from the engine and the game's own grammar (alfworld 0.4 logic says "move X to Y"; the shared real games
were built with older logic that says "put X in/on Y"). `info["expert_plan"]` is, by default, a plan computed from the
game's PDDL state and goal that wins every game (`expert_plan`). Reward is `success_reward * won` (verl-agent `alfworld/envs.py` `compute_reward`: 10),
episodes stop after `max_steps` (50, verl-agent `env.max_steps`). The task type comes from the game path
(SDAR section 6.1: per-type success). `write_synthetic_games` makes small games in the same layout (design/stack.md 4.2).
"""

import itertools
import json
import os
import random
import re
from pathlib import Path

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
            f"No ALFWorld games at {root / 'json_2.1.1'}. Set ALFWORLD_DATA (or pass data_dir=) to the folder that holds "
            "json_2.1.1/<split>/<task>/<trial>/, fetch the official data with `python -m agentrl_shared.envs.data "
            "alfworld`, or build small local games with `agentrl_shared.envs.alfworld.write_synthetic_games`."
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


def load_tasks(
    split: str,
    data_dir: str | os.PathLike | None = None,
    task_types: list[str] | None = None,
    build_dir: str | os.PathLike | None = None,
) -> list[dict]:
    """The sorted list of ALFWorld games of `split` (alfworld `collect_game_files` filters, in sorted order).

    Args:
        split (`str`): `train`, `valid_seen` (`eval_in_distribution`) or `valid_unseen` (`eval_out_of_distribution`).
        data_dir (`str`, *optional*): data root; defaults to `$ALFWORLD_DATA` (see `resolve_data_dir`).
        task_types (`list[str]`, *optional*): keep only these short types (pick, look, clean, heat, cool, pick2).
        build_dir (`str`, *optional*): where `game.tw-pddl` files are built for trials that lack one (never inside
            the data folder); defaults to `<agentrl cache>/alfworld_games`.

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
    if build_dir is None:
        from ..offline import cache_dir

        build_dir = cache_dir() / "alfworld_games"
    tasks = []
    for traj_path in sorted(split_dir.glob("*/*/traj_data.json")):
        trial = traj_path.parent
        rel = trial.relative_to(root / "json_2.1.1")
        if "movable" in str(rel) or "Sliced" in str(rel):  # alfworld skips these (not supported by the TW engine)
            continue
        game_type = trial.parent.name.split("-", 1)[0]
        if game_type not in TASK_TYPES:
            continue
        short = TASK_TYPES[game_type]
        if task_types is not None and short not in task_types:
            continue
        gamefile = trial / "game.tw-pddl"
        if gamefile.is_file():
            if json.loads(gamefile.read_text()).get("solvable") is False:  # alfworld drops known-unsolvable games
                continue
        elif (trial / "initial_state.pddl").is_file():
            gamefile = Path(build_dir) / rel / "game.tw-pddl"
            if not gamefile.is_file():
                build_game_file(trial, gamefile, root)
        else:
            continue
        tasks.append({"task_id": str(rel), "task_type": short, "game_type": game_type, "gamefile": str(gamefile)})
    return tasks


# ----------------------------------------------------------------------------------------------------------------
# Expert plan from the engine's PDDL state (`expert_type="plan"`).
# alfworld's two experts do not give a plan that always wins: the hand-coded one (`AlfredExpert`, HANDCODED) searches
# receptacles by heuristics (alfworld-generate lets it take up to 200 steps; on the 60 shared games about half are won
# within 50), and the PDDL planner one (PLANNER: fast-downward `replan` on every step) does not return within minutes
# on kitchen games (e.g. the clean tasks). The plan below is computed from the same privileged information those
# experts read (the game's PDDL facts and goal) with the domain's own action preconditions (alfred.pddl: GotoLocation,
# OpenObject, PickupObject, PutObject, Heat/Cool/CleanObject, ToggleObject) and the grammar's command templates.
# ----------------------------------------------------------------------------------------------------------------

_DEVICES = {"hot": ("microwavetype",), "cool": ("fridgetype",), "clean": ("sinkbasintype", "sinktype")}
_PROPS = {"ishot": "hot", "iscool": "cool", "isclean": "clean"}
# Command templates of the alfred domain's actions in alfworld 0.4's grammar; a game's own grammar overrides them
# (`command_templates`): games built with older alfworld logic, like the shared real games, say "put {o} in/on {r}".
TEMPLATES = {
    "OpenObject": "open {r}",
    "PickupObject": "take {o} from {r}",
    "PutObject": "move {o} to {r}",
    "HeatObject": "heat {o} with {r}",
    "CoolObject": "cool {o} with {r}",
    "CleanObject": "clean {o} with {r}",
    "ToggleObject": "use {o}",
}
_VERBS = {"hot": "HeatObject", "cool": "CoolObject", "clean": "CleanObject"}


def command_templates(grammar: str) -> dict[str, str]:
    """The command template of each action in a TextWorld grammar (`action PutObject { template :: "..."`), over
    `TEMPLATES`. Moving is always "go to {r}" (as textworld's PDDL planner writes it)."""
    found = dict(re.findall(r'action\s+(\w+)\s*\{\s*template\s*::\s*"([^"]*)"', grammar))
    return {name: found.get(name, default) for name, default in TEMPLATES.items()}


def parse_goal(pddl_problem: str) -> dict:
    """The goal of an ALFWorld PDDL problem (alfworld `goal_library` forms): `obj` and `recep` types (lower case,
    e.g. `appletype`), `toggle` (look tasks), `prop` (`hot`, `cool`, `clean` or None) and `count` (1, or 2 for pick2)."""
    goal = pddl_problem[pddl_problem.lower().index("(:goal") :]
    var_types = {v.lower(): t.lower() for v, t in re.findall(r"\(objectType\s+(\?\w+)\s+(\w+)\)", goal, re.I)}
    receps = [t.lower() for t in re.findall(r"\(receptacleType\s+\?\w+\s+(\w+)\)", goal, re.I)]
    toggled = re.findall(r"\(isToggled\s+(\?\w+)\)", goal, re.I)
    toggle = var_types.pop(toggled[0].lower()) if toggled else None
    props = [_PROPS[p.lower()] for p in re.findall(r"\((isHot|isCool|isClean)\s+\?\w+\)", goal, re.I)]
    objs = sorted(set(var_types.values()))
    if len(objs) != 1:
        raise ValueError(f"Unsupported ALFWorld goal (object types {objs}): {goal[:300]!r}")
    return {
        "obj": objs[0],
        "recep": receps[0] if receps and not toggle else None,
        "toggle": toggle,
        "prop": props[0] if props else None,
        "count": 2 if len(var_types) > 1 else 1,
    }


class _World:
    """The facts of a game state that the plan needs, with entity names as they appear in commands."""

    def __init__(self, facts):
        rel: dict[str, list[tuple[str, ...]]] = {}
        for fact in facts:
            rel.setdefault(fact.name.lower(), []).append(tuple(v.name.strip() for v in fact.arguments))
        one = lambda name: {a[0] for a in rel.get(name, [])}  # noqa: E731
        self.agent_loc = next(iter(a[1] for a in rel.get("atlocation", [])), None)
        self.recep_loc = {r: loc for r, loc in rel.get("receptacleatlocation", [])}
        self.in_recep = {o: r for o, r in rel.get("inreceptacle", [])}
        self.otype = {o: t.lower() for o, t in rel.get("objecttype", [])}
        self.rtype = {r: t.lower() for r, t in rel.get("receptacletype", [])}
        self.can_contain = {(rt.lower(), ot.lower()) for rt, ot in rel.get("cancontain", [])}
        self.openable, self.opened, self.pickupable, self.toggleable = (
            one(n) for n in ("openable", "opened", "pickupable", "toggleable")
        )
        self.able = {"hot": one("heatable"), "cool": one("coolable"), "clean": one("cleanable")}
        self.has = {"hot": one("ishot"), "cool": one("iscool"), "clean": one("isclean")}
        self.held = next(iter(a[1] for a in rel.get("holds", [])), None)

    def fits(self, o: str, r: str) -> bool:
        return (self.rtype.get(r), self.otype.get(o)) in self.can_contain


class _Plan:
    """A command list under construction, tracking where the agent is, what it holds and what is open."""

    def __init__(self, w: _World, templates: dict[str, str]):
        self.w, self.cmds, self.loc, self.held, self.opened = w, [], w.agent_loc, w.held, set(w.opened)
        self.in_recep, self.templates = dict(w.in_recep), templates

    def do(self, action: str, **names: str) -> None:
        self.cmds.append(self.templates[action].format(**names))

    def go(self, r: str) -> None:
        if self.loc != self.w.recep_loc[r]:
            self.cmds.append(f"go to {r}")
            self.loc = self.w.recep_loc[r]

    def reach(self, r: str) -> None:
        self.go(r)
        if r in self.w.openable and r not in self.opened:
            self.do("OpenObject", r=r)
            self.opened.add(r)

    def take(self, o: str) -> None:
        r = self.in_recep.pop(o)
        self.reach(r)
        self.do("PickupObject", o=o, r=r)
        self.held = o

    def put(self, r: str) -> None:
        self.reach(r)
        self.do("PutObject", o=self.held, r=r)
        self.in_recep[self.held], self.held = r, None

    def free_hands(self, keep: str | None = None) -> None:
        """Put down a held object that the goal does not use, in the nearest receptacle that can contain it."""
        if self.held is None or self.held == keep:
            return
        spots = [r for r in sorted(self.w.recep_loc) if self.w.fits(self.held, r)]
        spots.sort(key=lambda r: (self.w.recep_loc[r] != self.loc, r in self.w.openable and r not in self.opened))
        self.put(spots[0])

    def treat(self, o: str, prop: str | None) -> None:
        if prop is None or o in self.w.has[prop]:
            return
        types = _DEVICES[prop]
        devices = sorted(
            (r for r, t in self.w.rtype.items() if t in types and r in self.w.recep_loc),
            key=lambda r: (types.index(self.w.rtype[r]), self.w.recep_loc[r] != self.loc, r),
        )
        self.go(devices[0])
        self.do(_VERBS[prop], o=o, r=devices[0])


def expert_plan(facts, goal: dict, templates: dict[str, str] | None = None) -> list[str]:
    """The shortest plan (in commands) among the task's candidate objects, target receptacles and their orders,
    from the current game state to the goal; `[]` when the goal holds or no candidate can reach it."""
    w, templates = _World(facts), templates or TEMPLATES
    obj, prop = goal["obj"], goal["prop"]
    objs = sorted(o for o, t in w.otype.items() if t == obj and o in w.pickupable and (o in w.in_recep or o == w.held))
    if prop is not None:
        objs = [o for o in objs if o in w.able[prop]]
    plans = []
    if goal["toggle"] is not None:  # look: hold the object at the location of a (turned on) lamp
        lamps = sorted(o for o, t in w.otype.items() if t == goal["toggle"] and o in w.toggleable and o in w.in_recep)
        for o in objs:
            for lamp in lamps:
                p = _Plan(w, templates)
                if p.held != o:
                    p.free_hands()
                    p.take(o)
                p.go(p.in_recep[lamp])
                p.do("ToggleObject", o=lamp)
                plans.append(p.cmds)
    else:
        targets = sorted(r for r, t in w.rtype.items() if t == goal["recep"] and r in w.recep_loc)
        for r in targets:
            done = [o for o in objs if w.in_recep.get(o) == r and (prop is None or o in w.has[prop])]
            need = goal["count"] - len(done)
            if need <= 0:
                return []
            todo = [o for o in objs if o not in done and w.fits(o, r)]
            for order in itertools.permutations(todo, need):
                p = _Plan(w, templates)
                p.free_hands(keep=order[0])
                for o in order:
                    if p.held != o:
                        p.free_hands()
                        p.take(o)
                    p.treat(o, prop)
                    p.put(r)
                plans.append(p.cmds)
    return min(plans, key=len) if plans else []


class AlfworldEnv:
    """One ALFWorld game at a time, played by the real TextWorld PDDL engine with alfworld's wrappers.

    Args:
        max_steps (`int`, *optional*, defaults to `50`): episode length limit (verl-agent `env.max_steps`).
        success_reward (`float`, *optional*, defaults to `10.0`): reward on the step that wins (verl-agent 10·won).
        expert_type (`str`, *optional*, defaults to `"plan"`): what `info["expert_plan"]` holds. `plan`: the whole
            remaining plan to the goal, recomputed on every step from the engine's PDDL facts (`expert_plan`; it wins
            every game it is played on from its start state); `handcoded`: alfworld's `AlfredExpert(HANDCODED)`, the
            next action of its heuristic searcher (`["look"]` at reset, as in alfworld; not guaranteed to win);
            `none`: no expert (`[]`; fastest).
    """

    def __init__(self, max_steps: int = 50, success_reward: float = 10.0, expert_type: str = "plan"):
        if expert_type not in EXPERT_TYPES:
            raise ValueError(f"Unknown ALFWorld expert_type {expert_type!r}; valid: {', '.join(EXPERT_TYPES)}.")
        self.max_steps, self.success_reward, self.expert_type = max_steps, success_reward, expert_type
        self._env = None
        self._gamefile = None
        self._goal: dict = {}
        self._templates: dict[str, str] = dict(TEMPLATES)
        self._task: dict = {}
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
        self._last = self._step_from(self._env.reset(), 0.0, False)
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


# ----------------------------------------------------------------------------------------------------------------
# Synthetic games in the official layout (design/stack.md 4.2): no download, the real engine plays them.
# ----------------------------------------------------------------------------------------------------------------

_RECEPTACLES = {  # receptacle type -> (openable, location)
    "CounterTop": (False, "loc_bar_4_bar_1_bar_1_bar_45"),
    "Fridge": (True, "loc_bar_2_bar_3_bar_0_bar_30"),
    "Cabinet": (True, "loc_bar__minus_1_bar_2_bar_3_bar_15"),
    "DiningTable": (False, "loc_bar_0_bar__minus_2_bar_2_bar_60"),
}
_OBJECTS = ("Apple", "Mug", "Potato")
_SYNTHETIC_TYPES = ("pick_and_place_simple", "pick_cool_then_place_in_recep")


def _mangle(name: str, i: int) -> str:
    return f"{name}_bar__plus_0{i}_dot_00_bar__plus_00_dot_90_bar__minus_00_dot_5{i}"


def synthetic_problem(task_type: str, obj: str, recep: str, start: str = "CounterTop") -> str:
    """A PDDL problem in the `alfred` domain: four receptacles, the three objects on `start` (the target first),
    the goal from alfworld's goal library for `task_type`."""
    from alfworld.gen import goal_library

    objects = {name: _mangle(name, i + 1) for i, name in enumerate(_OBJECTS)}
    receps = {name: _mangle(name, 5 + i) for i, name in enumerate(_RECEPTACLES)}
    lines = ["(define (problem synthetic)", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{name}Type - otype" for name in _OBJECTS] + [f"{name}Type - rtype" for name in _RECEPTACLES]
    lines += [f"{m} - object" for m in objects.values()] + [f"{m} - receptacle" for m in receps.values()]
    lines += [f"{loc} - location" for _, loc in _RECEPTACLES.values()] + [
        "loc_bar_0_bar_0_bar_0_bar_0 - location",
        ")",
    ]
    init = ["(atLocation agent1 loc_bar_0_bar_0_bar_0_bar_0)"]
    for name, mangled in receps.items():
        openable, loc = _RECEPTACLES[name]
        init += [f"(receptacleType {mangled} {name}Type)", f"(receptacleAtLocation {mangled} {loc})"]
        init += [f"(canContain {name}Type {o}Type)" for o in _OBJECTS]
        init += [f"(openable {mangled})"] if openable else []
    for name, mangled in objects.items():
        init += [f"(objectType {mangled} {name}Type)", f"(pickupable {mangled})", f"(coolable {mangled})"]
        init += [f"(inReceptacle {mangled} {receps[start]})", f"(objectAtLocation {mangled} {_RECEPTACLES[start][1]})"]
    goal = goal_library.gdict[task_type]["pddl"].format(obj=obj, recep=recep, toggle="", mrecep="").replace("#", "-")
    return "\n".join(lines + ["(:init", *init, ")", goal.strip()]) + "\n"


def write_synthetic_games(
    root: str | os.PathLike, split: str = "train", n_games: int = 4, with_game_files: bool = True
) -> list[Path]:
    """Write `n_games` small games under `<root>/json_2.1.1/<split>/` in the official layout.

    Games alternate `pick_and_place_simple` and `pick_cool_then_place_in_recep` over (object, receptacle) pairs.
    Each trial has `initial_state.pddl` and `traj_data.json`; with `with_game_files`, also `game.tw-pddl` (built as
    `build_game_file` does, marked solvable). Returns the trial folders.
    """
    _engine()
    root = Path(root)
    targets = [("Apple", "Fridge"), ("Mug", "Cabinet"), ("Potato", "DiningTable"), ("Apple", "Cabinet")]
    trials = []
    for i in range(n_games):
        task_type = _SYNTHETIC_TYPES[i % 2]
        obj, recep = targets[(i // 2) % len(targets)]
        trial = root / "json_2.1.1" / split / f"{task_type}-{obj}-None-{recep}-{900 + i}" / f"trial_T0000_{i:06d}"
        trial.mkdir(parents=True, exist_ok=True)
        traj = {
            "task_type": task_type,
            "task_id": f"synthetic_{i}",
            "pddl_params": {
                "object_target": obj,
                "parent_target": recep,
                "toggle_target": "",
                "mrecep_target": "",
                "object_sliced": False,
            },
            "turk_annotations": {"anns": [{"task_desc": f"Put a {obj.lower()} in the {recep.lower()}."}]},
        }
        (trial / "traj_data.json").write_text(json.dumps(traj))
        (trial / "initial_state.pddl").write_text(synthetic_problem(task_type, obj, recep))
        if with_game_files:
            path = build_game_file(trial, trial / "game.tw-pddl", root)
            game = json.loads(path.read_text())
            game["solvable"] = True
            path.write_text(json.dumps(game))
        trials.append(trial)
    return trials
