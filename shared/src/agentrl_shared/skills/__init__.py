"""Privileged skills: the documents, their selection, and the prompts that carry them (SDAR section 3.2; AgentOPSD).

Environment knowledge shared by every method that conditions a self-teacher (or a Skill-GRPO student) on skills.
The documents (`<env>/<name>.md`, package data) are ours and the offline default; they cover what the official ones
cover (ZJU-REAL/SDAR@8b85c23 `skills/<env>/*.md`), which `skills_dir` (`trainer.skills_dir`, `make data ENV=skills`)
selects instead. Selection follows the official `SkillProvider`
(`verl/trainer/ppo/rlsd_utils.py`, driven by `skills/<env>/skill_mapping.json`) exactly:

- teacher (SDAR, AgentOPSD: `build_teacher_batch` in `verl/trainer/ppo/rlsd_ray_trainer.py`):
  - ALFWorld: the general skills plus the skill of the first `task_to_skill` key found as a substring of the game
    file path (post-fix behaviour of SDAR PR #36); without a game file, the prompt keyword rule below;
  - Search-QA, by `data_source`: popqa -> entity_attribute_lookup; nq, triviaqa -> direct_retrieval; hotpotqa ->
    multi_hop_reasoning; otherwise `compare` when the lower-cased decoded prompt contains the SUBSTRINGS "which" and
    "or" and not "for" (substrings, so the template's own "for" means it is never picked, as in the official
    code), else multi_hop_reasoning for 2wikimultihopqa, musique, bamboogle; any other source: general skills only;
  - WebShop (`data_source="text"` in the official data): the compare test above, then every category whose keyword
    list has any hit in the lower-cased prompt (`other` has no keywords, so it is never picked);
  - TextRooms (our CPU environment; no official counterpart): general + the task type's file + the file of the
    target's room (`textrooms_skills`), chosen from the task as ALFWorld's is from its game file.
- Skill-GRPO / Skill-Prompt* student (`SkillTrajectoryCollector` in `verl/trainer/main_skill_grpo.py`): the prompt
  keyword rule on the environment's user message (`get_privileged_info_from_prompt`), for every environment; the
  skill block is put at the start of that user message.
- Teacher prompt: `"[Privileged Skill Information]\\n" + skills + "\\n\\n"` before the whole templated prompt
  (`legacy`, SDAR) or at the start of the first user message (`user`, AgentOPSD's `skill_position`).
"""

import importlib.resources
import json
import os
from functools import cache
from pathlib import Path

from ..config import ConfigError


SKILL_HEADER = "[Privileged Skill Information]\n"
SKILL_POSITIONS = ("legacy", "user")
SKILL_ENVS = ("alfworld", "webshop", "search_qa", "textrooms")
USER_HEADER = "<|im_start|>user\n"

# skills/alfworld/skill_mapping.json `task_to_skill`, in file order (the first substring hit wins)
ALFWORLD_TASK_TO_SKILL = {
    "pick_and_place": "pick_and_place",
    "pick_two_obj_and_place": "pick_and_place",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_clean_then_place_in_recep": "clean",
}
# skills/alfworld/skill_mapping.json `task_keywords` (any keyword hit selects the task type; all hits are used)
ALFWORLD_KEYWORDS = {
    "look_at_obj_in_light": ("look at", "light"),
    "pick_heat_then_place_in_recep": ("heat",),
    "pick_cool_then_place_in_recep": ("cool",),
    "pick_clean_then_place_in_recep": ("clean",),
    "pick_two_obj_and_place": ("put two",),
    "pick_and_place": ("put",),
}
# skills/webshop/skill_mapping.json `task_keywords`; `task_to_skill` is the identity
WEBSHOP_KEYWORDS = {
    "apparel": ("shirt", "dress", "pants", "jacket", "sweater", "blouse", "skirt", "coat", "jeans", "shorts"),
    "footwear": ("shoe", "boot", "sneaker", "sandal", "slipper", "loafer", "heel"),
    "home_decor": ("pillow", "rug", "curtain", "lamp", "vase", "frame", "candle", "decor"),
    "electronics": ("phone", "charger", "cable", "speaker", "headphone", "battery", "adapter", "usb"),
    "accessories": ("bag", "wallet", "belt", "watch", "sunglasses", "hat", "scarf", "glove"),
    "beauty_health": ("shampoo", "cream", "lotion", "makeup", "brush", "serum", "moisturizer", "soap"),
    "other": (),
}


OFFICIAL = "official"  # `skills_dir: official`: the fetched official documents (`official_skills_dir`)


def official_skills_dir() -> Path:
    """Where `make data ENV=skills` puts the official documents: `$SKILLS_DATA`, else `~/.cache/agentrl/skills`."""
    return Path(os.environ.get("SKILLS_DATA") or Path.home() / ".cache" / "agentrl" / "skills").expanduser()


def skills_folder(env: str, skills_dir: str) -> Path:
    """The folder of `env`'s official documents for a `skills_dir` setting (`official` or a path); a one-line error
    naming the fix when they are absent (checked before any model loads)."""
    root = official_skills_dir() if skills_dir == OFFICIAL else Path(skills_dir)
    folder = root / _folder(env)
    if not (folder / "skill_mapping.json").is_file():
        raise ConfigError(
            f"trainer.skills_dir={skills_dir}: no {folder}/skill_mapping.json; run `make data ENV=skills` (or "
            "trainer.skills_dir=null: this package's own)."
        )
    return folder


@cache
def skill_text(env: str, name: str, skills_dir: str | None = None) -> str:
    """The text of skill document `name` of folder `env` (alfworld, webshop, search, textrooms).

    `skills_dir=None`: ours (package data, `<env>/<name>.md`). Otherwise `official` or a folder in the official
    layout (ZJU-REAL/SDAR@8b85c23 `skills/`, which ZethWang/AgentOPSD@0c478b2 ships unchanged): `<env>/
    skill_mapping.json` names each document's file in `skill_files` (the general one under `general_skills`), read
    and stripped as `rlsd_utils.load_skill_content` does."""
    if skills_dir is None:
        return (importlib.resources.files(__package__) / env / f"{name}.md").read_text().strip()
    folder = skills_folder("search_qa" if env == "search" else env, skills_dir)
    files = json.loads((folder / "skill_mapping.json").read_text())["skill_files"]
    return (folder / files["general_skills" if name == "general" else name]).read_text().strip()


def _folder(env: str) -> str:
    if env not in SKILL_ENVS:
        raise ValueError(f"No skills for environment {env!r}; valid: {', '.join(SKILL_ENVS)}.")
    return "search" if env == "search_qa" else env


def _join(env: str, names: list[str], skills_dir: str | None = None) -> str:
    """`SkillProvider._get_skill_text`: the general skills, then each selected document, blank-line separated."""
    folder = _folder(env)
    return "\n\n".join(skill_text(folder, n, skills_dir) for n in ["general", *names])


def keyword_skills(env: str, text: str) -> list[str]:
    """`SkillProvider.get_privileged_info_from_prompt`: every task type with any keyword in the lower-cased text
    (ALFWorld and WebShop keyword maps; Search-QA has none, so it gets the general skills only)."""
    lowered = text.lower()
    if env == "alfworld":
        hits = [t for t, kws in ALFWORLD_KEYWORDS.items() if any(k in lowered for k in kws)]
        return list(dict.fromkeys(ALFWORLD_TASK_TO_SKILL[t] for t in hits))
    if env == "webshop":
        return [c for c, kws in WEBSHOP_KEYWORDS.items() if kws and any(k in lowered for k in kws)]
    return []


def _compare_rule(prompt_text: str) -> bool:
    """The official compare test: substrings (not words) of the lower-cased decoded prompt."""
    lowered = prompt_text.lower()
    return "which" in lowered and "or" in lowered and "for" not in lowered


def search_skill(data_source: str, prompt_text: str) -> str | None:
    """`SkillProvider.get_privileged_info_from_data_source` for a Search-QA row: the task skill, or None."""
    if data_source == "popqa":
        return "entity_attribute_lookup"
    if data_source in ("nq", "triviaqa"):
        return "direct_retrieval"
    if data_source == "hotpotqa":
        return "multi_hop_reasoning"
    if _compare_rule(prompt_text):
        return "compare"
    if data_source in ("2wikimultihopqa", "musique", "bamboogle"):
        return "multi_hop_reasoning"
    return None


def teacher_skills(env: str, task: dict, prompt_text: str, skills_dir: str | None = None) -> str:
    """The privileged skill text of one row for the self-teacher (SDAR, AgentOPSD), by the official rules.

    Args:
        env (`str`): `alfworld`, `webshop`, `search_qa` or `textrooms`.
        task (`dict`): the row's task (`gamefile` for ALFWorld, `data_source` for Search-QA, `task_type`).
        prompt_text (`str`): the decoded, chat-templated student prompt.
        skills_dir (`str`, *optional*): `official` or a folder of the official documents (`skill_text`); None: ours.
    """
    _folder(env)
    if env == "alfworld":
        gamefile = task.get("gamefile")
        if gamefile:
            hit = next((s for t, s in ALFWORLD_TASK_TO_SKILL.items() if t in str(gamefile)), None)
            return _join(env, [hit] if hit else [], skills_dir)
        return _join(env, keyword_skills(env, prompt_text), skills_dir)
    if env == "search_qa":
        name = search_skill(str(task.get("data_source", "")), prompt_text)
        return _join(env, [name] if name else [], skills_dir)
    if env == "webshop":  # data_source "text": a compare hit maps to no WebShop skill (general only), else keywords
        return _join(env, [] if _compare_rule(prompt_text) else keyword_skills(env, prompt_text), skills_dir)
    return textrooms_skills(task, skills_dir)


def textrooms_skills(task: dict, skills_dir: str | None = None, room_objects: dict | None = None) -> str:
    """TextRooms' skill text of a task: the general line, the task type's procedure and the document of the target's
    room (which objects are kept there), so the skill carries the task's solution rule, as VAD's CPU skills do; a
    chain task: the chain procedure and the documents of the rooms on its path, in path order.
    `room_objects` (the skill-reading warm start's made-up objects, `agentrl_shared.skill_reader`): the room document
    written from them by `room_document` instead of read from `textrooms/<room>.md`."""
    if task["task_type"].startswith("chain"):  # the chain procedure and the document of every room on the path
        rooms = list(dict.fromkeys(task["path"]))
        return _join("textrooms", ["chain", *[r.replace(" ", "_") for r in rooms]], skills_dir)
    if room_objects is None:
        return _join("textrooms", [task["task_type"], task["room"].replace(" ", "_")], skills_dir)
    parts = [skill_text("textrooms", n, skills_dir) for n in ("general", task["task_type"])]
    return "\n\n".join([*parts, room_document(task["room"], room_objects[task["room"]][2:])])


def room_document(room: str, targets: list[str]) -> str:
    """The TextRooms document of one room (`textrooms/<room>.md` is this text for the room's real targets)."""
    return (f"# The {room}\nThe {', '.join(targets[:-1])} and {targets[-1]} are kept in the {room}: for any of them, "
            f"go to the {room}.")  # fmt: skip


def student_skills(env: str, user_text: str, task: dict | None = None, skills_dir: str | None = None) -> str:
    """The skill text a Skill-GRPO / Skill-Prompt* student sees: the keyword rule on its user message (official
    `main_skill_grpo.py`); TextRooms uses its task (`textrooms_skills`), as for the teacher."""
    if env == "textrooms":
        return textrooms_skills(task, skills_dir)
    return _join(env, keyword_skills(env, user_text), skills_dir)


def skill_block(skills: str) -> str:
    return SKILL_HEADER + skills + "\n\n"


def teacher_prompt(prompt_text: str, skills: str, position: str = "legacy") -> str:
    """The teacher prompt: the skill block before the whole templated prompt (`legacy`, SDAR's results) or right after
    the first user header (`user`, AgentOPSD's `skill_position`: `opsd_ray_trainer.py` `build_teacher_batch` finds the
    first `<|im_start|>user\n` and, in a prompt without one, falls back to `legacy`)."""
    if position == "legacy":
        return skill_block(skills) + prompt_text
    if position == "user":
        at = prompt_text.find(USER_HEADER)
        if at == -1:
            return skill_block(skills) + prompt_text
        at += len(USER_HEADER)
        return prompt_text[:at] + skill_block(skills) + prompt_text[at:]
    raise ValueError(f"Unknown skill_position {position!r}; valid: {', '.join(SKILL_POSITIONS)}.")


def last_user_message(prompt_text: str) -> str:
    """The content of the last ChatML user message of a templated prompt."""
    at = prompt_text.rfind(USER_HEADER)
    if at == -1:
        raise ValueError("Skills in the user message need a ChatML prompt with an '<|im_start|>user' header.")
    return prompt_text[at + len(USER_HEADER) :].split("<|im_end|>", 1)[0]


def in_user_message(prompt_text: str, skills: str) -> str:
    """The skill block at the start of the last user message of a templated prompt (Skill-GRPO, Skill-Prompt*:
    official `SkillTrajectoryCollector._inject_skills_into_obs` prepends it to the observation text)."""
    at = prompt_text.rfind(USER_HEADER)
    if at == -1:
        raise ValueError("Skills in the user message need a ChatML prompt with an '<|im_start|>user' header.")
    at += len(USER_HEADER)
    return prompt_text[:at] + skill_block(skills) + prompt_text[at:]


def student_prompt(env: str, prompt_text: str, task: dict, skills_dir: str | None = None) -> str:
    """A Skill-GRPO / Skill-Prompt* student prompt: skills chosen from the user message, placed at its start."""
    return in_user_message(prompt_text, student_skills(env, last_user_message(prompt_text), task, skills_dir))


__all__ = [
    "SKILL_HEADER",
    "SKILL_POSITIONS",
    "keyword_skills",
    "search_skill",
    "skill_text",
    "student_prompt",
    "student_skills",
    "teacher_prompt",
    "teacher_skills",
    "textrooms_skills",
]
