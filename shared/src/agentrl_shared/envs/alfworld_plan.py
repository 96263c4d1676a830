"""An oracle plan for ALFWorld games from the engine's PDDL state (`AlfworldEnv(expert_type="plan")`).

Used by tests (every game is winnable through the adapter) and by methods that ask for an oracle; verl-agent's
training runs without an expert.
"""

import itertools
import re


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
