"""Privileged skills: rule-based selection and the teacher prompt (papers/sdar.md 2.8-2.9).

Selection follows the official `SkillProvider` rules (ZJU-REAL/SDAR@8b85c23 `rlsd_utils.py`, `skill_mapping.json`),
with skill texts written by us (`skills/<env>/*.md`): ALFWorld general + the task type's file (from the gamefile path,
post-fix behaviour of SDAR PR #36); WebShop general + every category whose keywords hit the prompt; Search-QA general +
one file chosen by data source and question form; TextRooms (our CPU environment) general + the task type's file.
The teacher prompt prepends "[Privileged Skill Information]" + skills to the whole chat-templated student prompt.
"""

import importlib.resources
import re
from functools import cache


SKILL_HEADER = "[Privileged Skill Information]\n"
SKILL_POSITIONS = ("legacy", "user")
ALFWORLD_TYPE_TO_SKILL = {
    "pick_and_place_simple": "pick_and_place",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick_and_place",  # the official mapping sends pick_two to pick_and_place
}
ALFWORLD_KEYWORDS = {"clean": "clean", "heat": "heat", "cool": "cool", "look at": "look_at_obj_in_light"}
WEBSHOP_CATEGORIES = ("apparel", "footwear", "home_decor", "electronics", "accessories", "beauty_health", "other")
SEARCH_SOURCE_TO_SKILL = {
    "nq": "direct_retrieval",
    "triviaqa": "direct_retrieval",
    "popqa": "entity_attribute_lookup",
    "hotpotqa": "multi_hop_reasoning",
    "2wikimultihopqa": "multi_hop_reasoning",
    "musique": "multi_hop_reasoning",
    "bamboogle": "multi_hop_reasoning",
}


@cache
def skill_text(env: str, name: str) -> str:
    """The text of skill file `skills/<env>/<name>.md` (package data)."""
    return (importlib.resources.files("sdar") / "skills" / env / f"{name}.md").read_text().strip()


@cache
def _webshop_keywords(category: str) -> tuple[str, ...]:
    line = next(s for s in skill_text("webshop", category).splitlines() if s.startswith("Keywords:"))
    return tuple(k.strip() for k in line.removeprefix("Keywords:").split(","))


def alfworld_task_skill(task: dict, prompt_text: str) -> str:
    """ALFWorld task-type skill: from the task type / gamefile path, else from prompt keywords."""
    source = f"{task.get('task_type', '')} {task.get('gamefile', '')}"
    for prefix, skill in ALFWORLD_TYPE_TO_SKILL.items():
        if prefix in source:
            return skill
    text = prompt_text.lower()
    return next((skill for kw, skill in ALFWORLD_KEYWORDS.items() if kw in text), "pick_and_place")


def search_task_skill(task: dict) -> str:
    """Search-QA skill by data source; `compare` for "which ... or ..." questions outside nq/triviaqa/popqa/hotpotqa."""
    source = str(task.get("data_source", "")).lower()
    question = str(task.get("question", task.get("instruction", ""))).lower()
    words = set(re.findall(r"[a-z]+", question))
    if (
        source not in ("nq", "triviaqa", "popqa", "hotpotqa")
        and "which" in words
        and "or" in words
        and "for" not in words
    ):
        return "compare"
    return SEARCH_SOURCE_TO_SKILL.get(source, "direct_retrieval")


def select_skills(env: str, task: dict, prompt_text: str) -> str:
    """The privileged skill text for one row (general skills first), by the official selection rules."""
    names = ["general"]
    if env == "alfworld":
        names.append(alfworld_task_skill(task, prompt_text))
    elif env == "webshop":
        text = prompt_text.lower()  # includes history and available actions: spurious hits are possible (official)
        names += [c for c in WEBSHOP_CATEGORIES if any(k in text for k in _webshop_keywords(c))]
    elif env == "search_qa":
        names.append(search_task_skill(task))
    elif env == "textrooms":
        names.append(task["task_type"])
    else:
        raise ValueError(f"No skills for environment {env!r}; valid: alfworld, webshop, search_qa, textrooms.")
    folder = "search" if env == "search_qa" else env
    return "\n\n".join(skill_text(folder, n) for n in names)


def privileged_prompt(prompt_text: str, skills: str, position: str = "legacy") -> str:
    """The teacher prompt: the skill block before the whole templated prompt (`legacy`, SDAR's results) or right
    after the last user header (`user`, AgentOPSD's fork; sdar.md 2.8)."""
    block = SKILL_HEADER + skills + "\n\n"
    if position == "legacy":
        return block + prompt_text
    if position == "user":
        header = "<|im_start|>user\n"
        at = prompt_text.rfind(header)
        if at == -1:
            raise ValueError("skill_position='user' needs a ChatML prompt with an '<|im_start|>user' header.")
        at += len(header)
        return prompt_text[:at] + block + prompt_text[at:]
    raise ValueError(f"Unknown skill_position {position!r}; valid: {', '.join(SKILL_POSITIONS)}.")
