"""SkillRise's own solve prompts for ALFWorld, WebShop and ScienceWorld, and the ScienceWorld action block.

Structure as the official solve prompts (lyq1119/SkillRise-reproduction-and-refinement@79bbd91, imported from
Within-yao/SkillRise: `agent_system/environments/skillrise_{alfworld,webshop,sciworld}/prompt.py` and their
`env_manager.py::build_text_obs`); the wording is ours:

1. the role line;
2. the `## Current Skill Document` section (`trial.DOC_SLOT`, filled per trial), directly after it;
3. ALFWorld: the initial observation (it holds the task), then, after the first turn, the last `history_length`
   (action, resulting observation) steps (official 15); WebShop: the task, then the last steps (official 5);
   ScienceWorld: the task, the *initial* observation, then the last steps (official 2);
4. the admissible actions (ScienceWorld: the action templates and the object list, `SkillRiseScienceWorld`);
5. the instruction to reason step by step and give one action inside `<action> </action>`.

Only the `<action>` tags decide validity (official `skillrise_*/projection.py`): no `<think>` requirement and no CJK
check, unlike the verl-agent projection the shared families use (SDAR, AgentOPSD, and our plain-prompt baselines).
ALFWorld/WebShop actions are lower-cased, ScienceWorld actions keep their case (object names are case-sensitive); a
response without both tags is invalid and sent as its last 30 characters.
"""

from functools import partial

from agentrl_shared.envs.scienceworld import ScienceWorldAdapter
from agentrl_shared.prompts import Turn


HISTORY = {"alfworld": 15, "webshop": 5, "scienceworld": 2}  # official play history windows (see the configs)
ROLES = {
    "alfworld": "You are an expert agent acting in the ALFRED embodied household environment.",
    "webshop": "You are an expert autonomous agent shopping in the WebShop e-commerce environment.",
    "scienceworld": (
        "You are an expert autonomous agent in ScienceWorld, a text-based virtual world in which you carry out tasks "
        "from the elementary-school science curriculum."
    ),
}
TRAJECTORY_HEADER = {
    "alfworld": "These are the actions you took so far and what you observed after each:",
    "webshop": "These are your most recent actions and the pages they led to:",
    "scienceworld": "Before this step, you took these actions and observed:",
}
ACT = (
    "It is now your turn to take one action for the current step.\n"
    "First reason step by step about the current situation and which admissible action best advances the task.\n"
    "Then give one admissible action for this step inside <action> </action> tags."
)


def project_action(text: str, lower: bool) -> tuple[str, bool]:
    """The action inside the first `<action>...</action>` and whether both tags are there (official
    `skillrise_projection`, play phase); without them the last 30 characters, invalid."""
    text = text.lower() if lower else text
    start, end = text.find("<action>"), text.find("</action>")
    if start == -1 or end == -1:
        return text[-30:], False
    return text[start + len("<action>") : end].strip(), True


def trajectory_lines(history: list[Turn], window: int) -> str:
    """The last `window` steps as `Action k: ... / Observation k: ...` (official memory: each action with the
    observation it returned), numbered from the start of the episode."""
    steps = history[-window:] if window > 0 else []
    first = len(history) - len(steps) + 1
    return "\n".join(
        f"Action {first + k}: {t.action}\nObservation {first + k}: {t.result}" for k, t in enumerate(steps)
    )


class SkillRisePrompt:
    """One environment's SkillRise solve prompt. `render(task, history, observation, admissible)` as the shared
    families; the document slot stays a placeholder that `TrialRunner.insert_document` fills."""

    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()

    def __init__(self, env_name: str, history_length: int, doc_slot: str):
        if env_name not in ROLES:
            raise ValueError(f"No SkillRise solve prompt for env {env_name!r}; valid: {', '.join(ROLES)}.")
        self.env_name, self.history_length, self.doc_slot = env_name, history_length, doc_slot
        self.name = f"skillrise-{env_name}"

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        env = self.env_name
        initial = history[0].observation if history else observation  # the episode's first observation
        past = ""
        if history and self.history_length > 0:
            past = f"\n\n{TRAJECTORY_HEADER[env]}\n{trajectory_lines(history, self.history_length)}"
        if env == "alfworld":
            body = f"{initial}{past}"
            actions = "[" + ",\n ".join(f"'{a}'" for a in admissible if a != "help") + "]"
        elif env == "webshop":
            body = f"Your task is to: {task}{past}"
            actions = "[\n" + ",\n".join(admissible) + "\n]"
        else:
            body = f"Your task is to: {task}\nYour initial observation is: {initial}{past}"
            actions = "[\n" + "\n".join(admissible) + "\n]"
        return (
            f"{ROLES[env]}\n\n{self.doc_slot}\n\n{body}\n\n"
            f"Your admissible actions in the current situation are:\n{actions}\n\n{ACT}"
        )

    def project(self, text: str) -> tuple[str, bool]:
        return project_action(text, lower=self.env_name != "scienceworld")


class SkillRiseScienceWorld(ScienceWorldAdapter):
    """The shared ScienceWorld adapter whose `admissible_actions` is the official SkillRise action block
    (`skillrise_sciworld/envs.py::_build_available_actions`): the engine's action templates and the objects that
    replace `OBJ` in them, two lines, instead of every valid action-object combination (976 in the kitchen)."""

    def _out(self, obs: str, info: dict, reward: float, done: bool):
        step = super()._out(obs, info, reward, done)
        templates, objects = self.env.get_possible_actions(), self.env.get_possible_objects()
        step.info["valid_combinations"] = step.info["admissible_actions"]
        step.info["admissible_actions"] = [
            f"Action templates: {', '.join(templates)}",
            f"OBJ stands for one of these objects: {', '.join(objects)}",
        ]
        return step


def env_factory(env_name: str, env_kwargs: dict, action_block: bool = True):
    """The environment constructor of a SkillRise pool: ScienceWorld with the action block (SkillRise prompts), any
    other environment (or the plain-prompt baselines) as `agentrl_shared.envs.make_env` builds it."""
    from agentrl_shared.envs import make_env

    if env_name == "scienceworld" and action_block:
        return partial(SkillRiseScienceWorld, **env_kwargs)
    return partial(make_env, env_name, **env_kwargs)
