"""The verl-agent baseline prompts, history windows and action projections, in our own words.

One class per environment family. The structure (sections, their order, separators, what information each holds) is
that of verl-agent as SDAR and AgentOPSD ship it (ZJU-REAL/SDAR@8b85c23, a copy of langfengQ/verl-agent@796ed310):
`agent_system/environments/prompts/{alfworld,webshop,search}.py` (templates), `agent_system/environments/
env_manager.py` (`build_text_obs`, WebShop `format_obs`), `agent_system/memory/memory.py` (`SimpleMemory.fetch`,
`SearchMemory.fetch`) and `agent_system/environments/env_package/*/projection.py`. The wording is ours.
- ALFWorld / WebShop: one user message: task, the last H (observation, action) pairs, the current observation and the
  admissible actions; the first turn uses a no-history variant (ALFWorld's has no task line: the task is in the
  first observation). Reason in `<think>...</think>`, act in `<action>...</action>`.
- Search: the question and the last H (search, information) pairs as `Step k:` lines; no current observation (the
  result of the last search is the last history line). Search in `<search>`, answer in `<answer>`.
- An invalid response is flagged, penalised by the paper package, and still sent to the environment.
`TextRoomsPrompt` is the CPU-scale family: a short prompt with a worked example and a prefilled `<action>` tag, so
that a 135M model can act at all. Golden strings and structure tests pin every template (shared/tests).
"""

import re
from dataclasses import dataclass


CJK = re.compile(r"[\u4e00-\u9fff]")  # verl-agent marks responses with Chinese characters invalid


@dataclass
class Turn:
    """One past turn of an episode: the observation the action was taken on, the action, and what it returned.

    ALFWorld and WebShop show (`observation`, `action`) pairs (verl-agent stores `pre_text_obs` with the action);
    Search shows (`action`, `result`) pairs (verl-agent `SearchMemory` stores the action with the next observation).
    """

    observation: str
    action: str
    result: str = ""


# ----------------------------------------------------------------------------------------------------------------
# Shared pieces (verl-agent memory.py / env_manager.py)
# ----------------------------------------------------------------------------------------------------------------


def _history_lines(history: list[Turn], start: int) -> str:
    """`SimpleMemory.fetch`: one `[Observation k: '...', Action k: '...']` line per remembered step."""
    return "\n".join(
        f"[Observation {start + k}: '{t.observation}', Action {start + k}: '{t.action}']"
        for k, t in enumerate(history)
    )


def project_tagged_action(text: str, fallback_chars: int, require_think: bool = True) -> tuple[str, bool]:
    """verl-agent ALFWorld/WebShop projection (`alfworld_projection`, `webshop_projection`).

    The text is lower-cased, so the tags match in any case. Without both `<action>` and `</action>` the response is
    invalid and executed as its last `fallback_chars` lower-cased characters. Otherwise the action is what lies
    between the first `<action>` and the first `</action>`, stripped (empty when the closing tag comes first, as
    verl-agent's slice gives). It is invalid when `<think>` or `</think>` is missing from the original text (if
    `require_think`) or when the text contains CJK characters.
    """
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start == -1 or end == -1:
        return lowered[-fallback_chars:], False
    action = lowered[start + len("<action>") : end].strip()
    valid = True
    if require_think and (text.find("<think>") == -1 or text.find("</think>") == -1):
        valid = False
    if CJK.search(text):
        valid = False
    return action, valid


# ----------------------------------------------------------------------------------------------------------------
# ALFWorld (verl-agent prompts/alfworld.py, AlfWorldEnvironmentManager.build_text_obs)
# ----------------------------------------------------------------------------------------------------------------

_ALFWORLD_ACT = (
    "It is now your turn to act.\n"
    "First reason step by step about the current situation; this reasoning MUST be enclosed in <think> </think> tags.\n"
    "Then choose one admissible action for this step and give it inside <action> </action> tags.\n"
)


class AlfworldPrompt:
    """ALFWorld (text) prompt, history length 2 (verl-agent `env.history_length`), 30-character invalid fallback.

    Admissible actions: quoted, one per line (`"\\n "` between them), without `help`, inside `[...]`.
    """

    name = "alfworld"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()

    def __init__(self, history_length: int = 2):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        actions = "\n ".join(f"'{a}'" for a in admissible if a != "help")
        if not history or self.history_length <= 0:
            return (
                "\nYou are an expert agent acting in the ALFRED embodied household environment.\n"
                f"Your current observation is: {observation}\n"
                f"Your admissible actions in the current situation are: [{actions}].\n\n" + _ALFWORLD_ACT
            )
        window = history[-self.history_length :]
        n = len(history)
        return (
            f"\nYou are an expert agent acting in the ALFRED embodied household environment. Your task is to: {task}\n"
            f"Before this step you have taken {n} step(s). Here are the most recent {len(window)} observations "
            f"and the actions you took in response: {_history_lines(window, n - len(window) + 1)}\n"
            f"You are now at step {n + 1} and your current observation is: {observation}\n"
            f"Your admissible actions in the current situation are: [{actions}].\n\n" + _ALFWORLD_ACT
        )

    def project(self, text: str) -> tuple[str, bool]:
        return project_tagged_action(text, fallback_chars=30)


# ----------------------------------------------------------------------------------------------------------------
# WebShop (verl-agent prompts/webshop.py, WebshopEnvironmentManager.format_obs / build_text_obs)
# ----------------------------------------------------------------------------------------------------------------

_WEBSHOP_ACT = (
    "It is now your turn to take one action for this step.\n"
    "First reason step by step about the current situation and about which available action moves you closest to "
    "the shopping goal; this reasoning MUST be enclosed in <think> </think> tags.\n"
    "Then choose one available action for this step and give it inside <action> </action> tags.\n"
)


def webshop_format_obs(observation: str, task: str) -> str:
    """verl-agent `WebshopEnvironmentManager.format_obs`: the page parts after the instruction, each quoted, joined by
    `" [SEP] "`; a page without the instruction (e.g. the final score page) is kept as it is."""
    parts = observation.split(" [SEP] ")
    if task not in parts:
        return observation
    return " [SEP] ".join(f"'{p}'" for p in parts[parts.index(task) + 1 :])


class WebshopPrompt:
    """WebShop prompt, history length 2; falls back to the no-history variant above 13,000 characters.

    Observations (current and remembered) go through `webshop_format_obs`; available actions are quoted with a comma,
    one per line, between a `[` line and a `]` line.
    """

    name = "webshop"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()
    max_chars = 13000  # verl-agent WebshopEnvironmentManager.build_text_obs

    def __init__(self, history_length: int = 2):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        actions = "\n".join(f"'{a}'," for a in admissible)
        current = webshop_format_obs(observation, task)
        tail = f"Your available actions in the current situation are:\n[\n{actions}\n].\n\n" + _WEBSHOP_ACT
        no_history = (
            "\nYou are an expert autonomous agent shopping in the WebShop e-commerce environment.\n"
            f"Your task is to: {task}.\n"
            f"Your current observation is: {current}.\n" + tail
        )
        if not history or self.history_length <= 0:
            return no_history
        window = [Turn(webshop_format_obs(t.observation, task), t.action) for t in history[-self.history_length :]]
        n = len(history)
        prompt = (
            "\nYou are an expert autonomous agent shopping in the WebShop e-commerce environment.\n"
            f"Your task is to: {task}.\n"
            f"Before this step you have taken {n} step(s). Here are the most recent {len(window)} observations "
            f"and the actions you took in response: {_history_lines(window, n - len(window) + 1)}\n"
            f"You are now at step {n + 1} and your current observation is: {current}.\n" + tail
        )
        return no_history if len(prompt) > self.max_chars else prompt

    def project(self, text: str) -> tuple[str, bool]:
        return project_tagged_action(text, fallback_chars=20)


# ----------------------------------------------------------------------------------------------------------------
# Search (verl-agent prompts/search.py, SearchEnvironmentManager.build_text_obs, SearchMemory, search/projection.py)
# ----------------------------------------------------------------------------------------------------------------

_SEARCH_ACT = (
    "It is now your turn to respond for this step.\n"
    "First reason step by step; this reasoning MUST be enclosed in <think> </think> tags.\n"
    "Then do exactly one of the following (never both):\n"
    "(1) if you are missing knowledge, query a search engine for more information with <search> your query </search>;\n"
    "(2) if you can answer the question with confidence, give the final answer inside <answer> </answer> tags, "
    "without explanation, for example <answer>Beijing</answer>.\n"
)
_SEARCH_BLOCK = re.compile(r"<search>(.*?)</search>", re.IGNORECASE | re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


class SearchPrompt:
    """Search-QA prompt, history length 4: the question, then `Step k:<search>...</search> <information>...` lines
    (verl-agent `SearchMemory.fetch`), each search followed by what that search returned."""

    name = "search"
    assistant_prefix = ""
    example_messages: tuple[dict, ...] = ()

    def __init__(self, history_length: int = 4):
        self.history_length = history_length

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        head = f"\nYou are an expert agent answering the given question step by step.\nYour question: {task}\n\n"
        if not history or self.history_length <= 0:
            return head + _SEARCH_ACT
        window = history[-self.history_length :]
        n = len(history)
        start = n - len(window) + 1
        memory = "\n".join(f"Step {start + k}:{t.action} {t.result}\n" for k, t in enumerate(window))
        return (
            head + f"Before this step you have taken {n} step(s). Below is the interaction history: your past search "
            "queries are wrapped in <search> </search> and the results the search engine returned for each are "
            f"wrapped in <information> </information>. History:\n{memory}\n" + _SEARCH_ACT
        )

    def project(self, text: str) -> tuple[str, bool]:
        """verl-agent `search_projection`: cut after the first `</search>` (else `</answer>`), keep the first
        `<search>` block, else the first `<answer>` block (tags in any case), else `""` (invalid). Invalid also when
        the whole text has both an opening `<search>` and `<answer>` tag, or either more than once."""
        if "</search>" in text:
            trimmed = text.split("</search>", 1)[0] + "</search>"
        elif "</answer>" in text:
            trimmed = text.split("</answer>", 1)[0] + "</answer>"
        else:
            trimmed = text
        valid = True
        if (m := _SEARCH_BLOCK.search(trimmed)) is not None:
            action = f"<search>{m.group(1).strip()}</search>"
        elif (m := _ANSWER_BLOCK.search(trimmed)) is not None:
            action = f"<answer>{m.group(1).strip()}</answer>"
        else:
            action, valid = "", False
        n_search = len(re.findall(r"<search>", text, re.IGNORECASE))
        n_answer = len(re.findall(r"<answer>", text, re.IGNORECASE))
        if (n_search and n_answer) or n_search > 1 or n_answer > 1:
            valid = False
        return action, valid


# ----------------------------------------------------------------------------------------------------------------
# TextRooms (CPU scale)
# ----------------------------------------------------------------------------------------------------------------


class TextRoomsPrompt:
    """CPU-scale prompt for `textrooms`: a worked example turn and a prefilled `<action>`.

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
        if history and self.history_length > 0:
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
        if history and self.history_length > 0:
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
