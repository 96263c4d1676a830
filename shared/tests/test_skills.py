"""Skill selection by the official `SkillProvider` rules and the prompts that carry the skills (SDAR, AgentOPSD;
ZJU-REAL/SDAR@8b85c23 `verl/trainer/ppo/rlsd_utils.py`, `rlsd_ray_trainer.py`, `main_skill_grpo.py`)."""

import json

import pytest

from agentrl_shared.config import ConfigError
from agentrl_shared.models import qwen_tokenizer
from agentrl_shared.prompts import chat_messages, make_prompt
from agentrl_shared.skills import (
    SKILL_HEADER,
    WEBSHOP_KEYWORDS,
    keyword_skills,
    search_skill,
    skill_text,
    student_prompt,
    student_skills,
    teacher_prompt,
    teacher_skills,
)


def general(env: str) -> str:
    return skill_text(env, "general")


def test_alfworld_teacher_from_gamefile_then_keywords():
    path = "/d/json_2.1.1/valid_seen/{}-Apple-None-Fridge-1/trial_1/game.tw-pddl"
    for game_type, skill in [
        ("pick_heat_then_place_in_recep", "heat"),
        ("pick_two_obj_and_place", "pick_and_place"),
        ("pick_and_place_simple", "pick_and_place"),
        ("look_at_obj_in_light", "look_at_obj_in_light"),
    ]:
        text = teacher_skills("alfworld", {"gamefile": path.format(game_type)}, "put two apples in the fridge")
        assert text == general("alfworld") + "\n\n" + skill_text("alfworld", skill)
    # no game file: every keyword hit (any keyword of a type), e.g. "cool" and "put"
    text = teacher_skills("alfworld", {}, "Your task is to: cool some apple and put it in fridge.")
    assert text == "\n\n".join(
        [general("alfworld"), skill_text("alfworld", "cool"), skill_text("alfworld", "pick_and_place")]
    )


def test_search_rules_as_the_official_substring_test_behaves():
    assert search_skill("nq", "which x or y") == "direct_retrieval"
    assert search_skill("popqa", "") == "entity_attribute_lookup"
    assert search_skill("hotpotqa", "which is older, a or b") == "multi_hop_reasoning"
    # substrings, not words: "for" inside "before"/"information" blocks compare, "or" inside "world" allows it
    assert search_skill("2wikimultihopqa", "which film came out first, x or y") == "compare"
    assert search_skill("2wikimultihopqa", "which came before, x or y") == "multi_hop_reasoning"
    assert search_skill("bamboogle", "which world cup") == "compare"
    assert search_skill("unknown_source", "who wrote it") is None
    # with our template (as with the official one) the prompt always holds "for": compare is never picked
    prompt = make_prompt("search").render("which film came out first, x or y", [], "", [])
    assert "for" in prompt.lower()
    assert teacher_skills("search_qa", {"data_source": "musique"}, prompt).endswith(
        skill_text("search", "multi_hop_reasoning")
    )
    assert teacher_skills("search_qa", {"data_source": "somewhere"}, prompt) == general("search")


def test_webshop_keyword_map_other_never_picked():
    assert WEBSHOP_KEYWORDS["other"] == ()
    assert keyword_skills("webshop", "i need a bluetooth SPEAKER and a leather wallet") == [
        "electronics",
        "accessories",
    ]
    assert keyword_skills("webshop", "i want organic green tea, a toy and a book") == []
    prompt = make_prompt("webshop").render("i need a usb cable", [], "'Search'", ["search[<your query>]"])
    text = teacher_skills("webshop", {}, prompt)
    assert text == general("webshop") + "\n\n" + skill_text("webshop", "electronics")
    assert skill_text("webshop", "other") not in teacher_skills("webshop", {}, prompt + " snack food gift")


def test_unknown_environment_and_textrooms():
    with pytest.raises(ValueError, match="valid: alfworld, webshop, search_qa, textrooms"):
        teacher_skills("sokoban", {}, "")
    text = teacher_skills("textrooms", {"task_type": "fetch", "room": "garage"}, "")
    assert "wrench" in text and "take exactly" in text and "apple" not in text
    assert text.startswith(general("textrooms"))


def test_textrooms_skill_names_every_tasks_target_and_its_room_only():
    """The skill carries the solution rule: every task (all splits, unseen targets included) gets the document of its
    target's room, which names the target, and no other room's document."""
    from agentrl_shared.envs.textrooms import ROOM_OBJECTS, load_tasks

    for split in ("train", "valid_seen", "valid_unseen"):
        for task in load_tasks(split, num_tasks=32, num_rooms=3):
            text = teacher_skills("textrooms", task, "")
            assert task["object"] in text and f"go to the {task['room']}" in text
            assert all(f"go to the {r}" not in text for r in ROOM_OBJECTS if r != task["room"])
            assert student_skills("textrooms", "", task) == text


def test_textrooms_chain_skill_names_every_room_on_the_path_once():
    from agentrl_shared.envs.textrooms import ROOM_OBJECTS, load_tasks

    for task in load_tasks("valid_seen", num_tasks=16, num_rooms=3, task_types=("chain",)):
        text = teacher_skills("textrooms", task, "")
        assert text.startswith(general("textrooms")) and "one move per object" in text
        assert all(o in text for o in task["objects"])
        rooms = [r for r in ROOM_OBJECTS if f"go to the {r}." in text]
        assert sorted(rooms) == sorted(set(task["path"]))
        assert [text.index(f"# The {r}\n") for r in dict.fromkeys(task["path"])] == sorted(
            text.index(f"# The {r}\n") for r in set(task["path"])
        )  # in path order


def test_textrooms_room_documents_are_the_template_of_their_real_targets():
    # the skill-reading warm start writes its made-up rooms with the same template (`room_document`)
    from agentrl_shared.envs.textrooms import ROOM_OBJECTS
    from agentrl_shared.skills import room_document

    for room, objects in ROOM_OBJECTS.items():
        assert skill_text("textrooms", room.replace(" ", "_")) == room_document(room, objects[2:])


def test_skill_documents_comparable_to_the_official_ones():
    """Like the official documents: 5 or more numbered strategies with a "when to apply" clause, about 1-4 KB."""
    names = {
        "alfworld": ["general", "pick_and_place", "look_at_obj_in_light", "clean", "heat", "cool"],
        "webshop": ["general", *WEBSHOP_KEYWORDS],
        "search": ["general", "direct_retrieval", "multi_hop_reasoning", "entity_attribute_lookup", "compare"],
    }
    for env, docs in names.items():
        for name in docs:
            text = skill_text(env, name)
            assert 800 <= len(text) <= 4500, (env, name, len(text))
            assert sum(line[:2].rstrip(".").isdigit() for line in text.splitlines()) >= 5, (env, name)


def test_teacher_and_student_prompt_positions():
    tok = qwen_tokenizer()
    prompt = make_prompt("alfworld")
    user = prompt.render("", [], "You are in a room. Your task is to: put a clean mug in cabinet.", ["look"])
    text = tok.apply_chat_template(chat_messages(prompt, user), tokenize=False, add_generation_prompt=True)
    legacy = teacher_prompt(text, "SKILL")
    assert legacy == SKILL_HEADER + "SKILL\n\n" + text  # before the whole templated prompt, outside any turn
    in_user = teacher_prompt(text, "SKILL", "user")
    assert in_user.replace(SKILL_HEADER + "SKILL\n\n", "") == text
    assert in_user.index("<|im_start|>user\n" + SKILL_HEADER) == text.index("<|im_start|>user\n")
    # the first user message, as the official `find`, in a prompt with two; no user header: before the whole prompt
    two = text + "ok<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n"
    assert teacher_prompt(two, "SKILL", "user").index(SKILL_HEADER) == text.index("<|im_start|>user\n") + len(
        "<|im_start|>user\n"
    )
    assert teacher_prompt("plain", "SKILL", "user") == SKILL_HEADER + "SKILL\n\nplain"
    with pytest.raises(ValueError, match="valid: legacy, user"):
        teacher_prompt(text, "SKILL", "system")
    # Skill-GRPO: skills chosen from the user message ("clean", "put"), inside it, after the system header
    student = student_prompt("alfworld", text, {"gamefile": "unused"})
    block = SKILL_HEADER + "\n\n".join(
        [general("alfworld"), skill_text("alfworld", "clean"), skill_text("alfworld", "pick_and_place")]
    )
    assert "<|im_start|>user\n" + block + "\n\n\nYou are an expert agent" in student


def official_layout(root, env: str = "alfworld") -> None:
    """A small folder in the official layout (ZJU-REAL/SDAR@8b85c23 `skills/<env>/`): skill_mapping.json names the
    files; the general document sits under `general_skills`."""
    folder = root / env
    folder.mkdir(parents=True)
    files = {"general_skills": "general_skills.md", "heat": "heat.md", "pick_and_place": "pick_and_place.md"}
    (folder / "skill_mapping.json").write_text(json.dumps({"skill_files": files, "task_to_skill": {}}))
    for name, filename in files.items():
        (folder / filename).write_text(f"\n  OFFICIAL {name} text  \n")


def test_official_documents_are_read_from_their_layout(tmp_path, monkeypatch):
    official_layout(tmp_path / "skills")
    monkeypatch.setenv("SKILLS_DATA", str(tmp_path / "skills"))
    gamefile = "/d/json_2.1.1/train/pick_heat_then_place_in_recep-Apple-None-Fridge-1/trial_1/game.tw-pddl"
    for skills_dir in ("official", str(tmp_path / "skills")):
        text = teacher_skills("alfworld", {"gamefile": gamefile}, "", skills_dir)
        assert text == "OFFICIAL general_skills text\n\nOFFICIAL heat text"  # stripped, general first
    assert teacher_skills("alfworld", {"gamefile": gamefile}, "") == general("alfworld") + "\n\n" + skill_text(
        "alfworld", "heat"
    )  # no skills_dir: ours


def test_absent_official_documents_fail_with_one_line_naming_make_data(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLS_DATA", str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match=r"webshop/skill_mapping.json; run `make data ENV=skills`"):
        teacher_skills("webshop", {}, "a red shirt", "official")
