"""The verl-agent baseline prompt, history window and action projection, in our own words.

One class per environment family, after verl-agent `agent_system/environments/prompts/{alfworld,webshop,search}.py`,
`env_manager.py` and `env_package/*/projection.py` (commit 796ed310), which SDAR and AgentOPSD keep unchanged
(papers/sdar.md 2.1-2.2):
- the per-turn prompt is one user message: task, the last H (observation, action) pairs, the current observation and
  the admissible actions; the first turn uses a no-history variant;
- the model must reason in `<think>...</think>` and act in `<action>...</action>` (Search: `<search>` or `<answer>`);
- an invalid response is flagged, penalised by the paper package, and still sent to the environment (its tail).
`TextRoomsPrompt` is the CPU-scale family: a short prompt with a worked example and a prefilled `<action>` tag, so
that a 135M model can act at all (design/stack.md 7b). Golden strings pin every template (shared/tests).
"""

import re
from dataclasses import dataclass


CJK = re.compile(r"[\u4e00-\u9fff]")  # verl-agent marks responses with Chinese characters invalid


@dataclass
class Turn:
    """One past turn of an episode, as the history window shows it."""

    observation: str
    action: str


def _quote_actions(actions: list[str]) -> str:
    # verl-agent lists admissible actions quoted, one per line, without ALFWorld's `help`
    return ",\n ".join(f"'{a}'" for a in actions if a != "help")


def _history_lines(history: list[Turn], start: int) -> str:
    return "\n".join(
        f"[Observation {start + k}: '{t.observation}', Action {start + k}: '{t.action}']"
        for k, t in enumerate(history)
    )


def project_tagged_action(text: str, fallback_chars: int, require_think: bool = True) -> tuple[str, bool]:
    """verl-agent ALFWorld/WebShop projection: the lower-cased text inside the first `<action>...</action>`.

    Invalid when the action tags are missing, when `<think>...</think>` is missing (if `require_think`), or when the
    text contains CJK characters; an invalid response is still executed as its last `fallback_chars` characters.
    """
    start, end = text.find("<action>"), text.find("</action>")
    if start == -1 or end == -1 or end < start:
        return text[-fallback_chars:], False
    action = text[start + len("<action>") : end].strip().lower()
    valid = True
    if require_think and (text.find("<think>") == -1 or text.find("</think>") == -1):
        valid = False
    if CJK.search(text):
        valid = False
    return action, valid


class AlfworldPrompt:
    """ALFWorld (text) prompt, history length 2 (verl-agent `env.history_length`), 30-character invalid fallback."""

    name = "alfworld"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()

    def __init__(self, history_length: int = 2):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        actions = _quote_actions(admissible)
        if not history:
            return (
                "You are an expert agent acting in the ALFRED embodied household environment.\n"
                f"Your current observation is: {observation}\n"
                f"Your admissible actions in the current situation are: [{actions}].\n\n"
                "It is now your turn to act.\n"
                "First reason step by step about the current situation; this reasoning MUST be enclosed in "
                "<think> </think> tags.\n"
                "Then choose one admissible action for this step and give it inside <action> </action> tags."
            )
        window = history[-self.history_length :]
        n = len(history)
        return (
            "You are an expert agent acting in the ALFRED embodied household environment. "
            f"Your task is to: {task}\n"
            f"Before this step you have taken {n} step(s). Here are the most recent {len(window)} observations "
            f"and the actions you took in response: {_history_lines(window, n - len(window) + 1)}\n"
            f"You are now at step {n + 1} and your current observation is: {observation}\n"
            f"Your admissible actions in the current situation are: [{actions}].\n\n"
            "It is now your turn to act.\n"
            "First reason step by step about the current situation; this reasoning MUST be enclosed in "
            "<think> </think> tags.\n"
            "Then choose one admissible action for this step and give it inside <action> </action> tags."
        )

    def project(self, text: str) -> tuple[str, bool]:
        return project_tagged_action(text, fallback_chars=30)


class WebshopPrompt:
    """WebShop prompt, history length 2; falls back to the no-history variant above 13,000 characters."""

    name = "webshop"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()
    max_chars = 13000  # verl-agent WebShop env manager

    def __init__(self, history_length: int = 2):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        actions = _quote_actions(admissible)
        instruction = (
            "It is now your turn to act.\n"
            "First reason step by step about the current situation; this reasoning MUST be enclosed in "
            "<think> </think> tags.\n"
            "Then choose one available action for this step and give it inside <action> </action> tags."
        )
        no_history = (
            "You are an expert autonomous agent shopping in the WebShop e-commerce environment.\n"
            f"Your task is to: {task}\n"
            f"Your current observation is: {observation}\n"
            f"Your available actions are:\n[{actions}].\n\n{instruction}"
        )
        if not history:
            return no_history
        window = history[-self.history_length :]
        n = len(history)
        prompt = (
            "You are an expert autonomous agent shopping in the WebShop e-commerce environment.\n"
            f"Your task is to: {task}\n"
            f"Before this step you have taken {n} step(s). Here are the most recent {len(window)} observations "
            f"and the actions you took in response: {_history_lines(window, n - len(window) + 1)}\n"
            f"You are now at step {n + 1} and your current observation is: {observation}\n"
            f"Your available actions are:\n[{actions}].\n\n{instruction}"
        )
        return no_history if len(prompt) > self.max_chars else prompt

    def project(self, text: str) -> tuple[str, bool]:
        return project_tagged_action(text, fallback_chars=20)


class SearchPrompt:
    """Search-QA prompt (Search-R1 format), history length 4: past queries and the retrieved information."""

    name = "search"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()

    def __init__(self, history_length: int = 4):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        instruction = (
            "First reason step by step inside <think> </think> tags. "
            "If you need more knowledge, issue one search query inside <search> </search> tags; the top results will "
            "come back between <information> and </information>. You may search as often as you need. "
            "When you know the answer, give it inside <answer> </answer> tags with no explanation, "
            "for example <answer> Beijing </answer>."
        )
        head = f"You are an expert agent answering the given question step by step.\nYour question: {task}\n"
        if not history:
            return head + instruction
        window = history[-self.history_length :]
        n = len(history)
        # t.action is the projected `<search>query</search>`, t.observation the env's `<information>...</information>`
        past = "\n".join(f"Step {n - len(window) + 1 + k}: {t.action}\n{t.observation}" for k, t in enumerate(window))
        return (
            head + f"You have already taken {n} step(s). The most recent {len(window)} searches and their results:\n"
            f"{past}\n\nYou are now at step {n + 1}. " + instruction
        )

    def project(self, text: str) -> tuple[str, bool]:
        """Search-R1 projection: keep `<search>` else `<answer>`; invalid if neither, both, or either repeats."""
        searches = re.findall(r"<search>(.*?)</search>", text, re.S)
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.S)
        valid = (len(searches) == 1) != (len(answers) == 1) and len(searches) <= 1 and len(answers) <= 1
        if CJK.search(text):
            valid = False
        if searches:
            return f"<search>{searches[0].strip()}</search>", valid
        if answers:
            return f"<answer>{answers[0].strip()}</answer>", valid
        return text[-30:], False


class TextRoomsPrompt:
    """CPU-scale prompt for `textrooms`: a worked example turn and a prefilled `<action>` (design/stack.md 7b).

    A 135M model almost never follows the verl-agent instruction zero-shot; a one-shot example and the prefilled tag
    make it emit admissible actions often enough to give GRPO reward variance. `<think>` is not required.
    """

    name = "textrooms"
    assistant_prefix = "<action>"
    example_messages: tuple[dict, ...] = (
        {
            "role": "user",
            "content": "Task: find the towel.\nYou are in the hallway.\n"
            "Admissible actions: go to garage, go to bathroom, go to office.\nAnswer with one admissible action.",
        },
        {"role": "assistant", "content": "<action>go to bathroom</action>"},
    )

    def __init__(self, history_length: int = 2):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        past = ""
        if history:
            window = history[-self.history_length :]
            past = "Previously: " + " ".join(f"{t.action} -> {t.observation}" for t in window) + "\n"
        return (
            f"Task: {task}.\n{past}{observation}\n"
            f"Admissible actions: {', '.join(admissible)}.\nAnswer with one admissible action."
        )

    def project(self, text: str) -> tuple[str, bool]:
        return project_tagged_action(self.assistant_prefix + text, fallback_chars=30, require_think=False)


PROMPT_NAMES = ("alfworld", "webshop", "search", "textrooms")


def make_prompt(name: str, history_length: int | None = None):
    """The prompt family `name` (`alfworld`, `webshop`, `search`, `textrooms`) with an optional history window."""
    if name == "alfworld":
        cls = AlfworldPrompt
    elif name == "webshop":
        cls = WebshopPrompt
    elif name == "search":
        cls = SearchPrompt
    elif name == "textrooms":
        cls = TextRoomsPrompt
    else:
        raise ValueError(f"Unknown prompt family {name!r}; valid names: {', '.join(PROMPT_NAMES)}.")
    return cls() if history_length is None else cls(history_length=history_length)


def chat_messages(prompt, user_text: str) -> list[dict]:
    """The chat messages of one turn: the family's worked example turns (if any), then the turn's user message."""
    return [*prompt.example_messages, {"role": "user", "content": user_text}]


# --- ScienceWorld (appended block) -----------------------------------------------------------------------------------
# verl-agent has no ScienceWorld prompt. This family follows the structure of the SkillRise ScienceWorld solve prompt
# (lyq1119/SkillRise-reproduction-and-refinement@79bbd91, `agent_system/environments/skillrise_sciworld/prompt.py`
# and `projection.py`, imported from Within-yao/SkillRise), in our own words: a one-paragraph role line, the task, the
# current observation, the recent (observation, action) pairs, the admissible actions one per line, and the
# instruction to reason and then give one action inside `<action> </action>`. Only the `<action>` tags are checked
# (no `<think>` requirement) and the action keeps its case (ScienceWorld object names are case-sensitive).


class ScienceWorldPrompt:
    """ScienceWorld prompt; history length 15 (SkillRise `env.history_length` default); 30-character invalid fallback.

    The first paragraph (up to the first blank line) is the role line, so that a paper package can insert its own
    section after it (SkillRise's skill document).
    """

    name = "scienceworld"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()

    def __init__(self, history_length: int = 15):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        actions = "\n".join(admissible)
        past = ""
        if history:
            window = history[-self.history_length :]
            n = len(history)
            past = (
                f"\nBefore this step you have taken {n} step(s). Here are the most recent {len(window)} observations "
                f"and the actions you took in response:\n{_history_lines(window, n - len(window) + 1)}"
            )
        return (
            "You are an expert autonomous agent in ScienceWorld, a text-based virtual world in which you carry out "
            "tasks from the elementary-school science curriculum.\n\n"
            f"Your task is to: {task}\n"
            f"Your current observation is: {observation}{past}\n"
            f"Your admissible actions in the current situation are:\n[\n{actions}\n].\n\n"
            "It is now your turn to take one action.\n"
            "First reason step by step about the current situation and which admissible action best advances the "
            "task.\n"
            "Then choose one admissible action for this step and give it inside <action> </action> tags."
        )

    def project(self, text: str) -> tuple[str, bool]:
        """The text inside the first `<action>...</action>`, case kept; invalid (tail of 30 characters) without it."""
        start, end = text.find("<action>"), text.find("</action>")
        if start == -1 or end == -1 or end < start:
            return text[-30:], False
        return text[start + len("<action>") : end].strip(), True
