"""Skill selection by the official rules and the teacher-prompt construction (papers/sdar.md 2.8-2.9)."""

import pytest

from sdar.skills import (
    SKILL_HEADER,
    alfworld_task_skill,
    privileged_prompt,
    search_task_skill,
    select_skills,
    skill_text,
)


def test_alfworld_skill_from_task_type_and_gamefile():
    assert alfworld_task_skill({"task_type": "pick_heat_then_place_in_recep"}, "") == "heat"
    assert (
        alfworld_task_skill({"gamefile": "/d/json_2.1.1/valid_seen/pick_two_obj_and_place-X/trial/game.tw-pddl"}, "")
        == "pick_and_place"
    )
    assert alfworld_task_skill({}, "Your task is to: cool some apple and put it in fridge.") == "cool"


def test_search_skill_rules():
    assert search_task_skill({"data_source": "nq", "question": "who wrote hamlet"}) == "direct_retrieval"
    assert (
        search_task_skill({"data_source": "popqa", "question": "what is x's occupation"}) == "entity_attribute_lookup"
    )
    assert (
        search_task_skill({"data_source": "hotpotqa", "question": "which is older, a or b"}) == "multi_hop_reasoning"
    )
    assert (
        search_task_skill({"data_source": "2wikimultihopqa", "question": "which film came out first, x or y"})
        == "compare"
    )
    assert search_task_skill({"data_source": "musique", "question": "which award for x or y"}) == "multi_hop_reasoning"


def test_webshop_selects_every_category_hit():
    text = select_skills("webshop", {}, "i need a bluetooth speaker and a leather wallet")
    assert skill_text("webshop", "electronics") in text and skill_text("webshop", "accessories") in text
    assert skill_text("webshop", "footwear") not in text
    assert text.startswith(skill_text("webshop", "general"))


def test_textrooms_skills():
    text = select_skills("textrooms", {"task_type": "fetch"}, "")
    assert "wrench" in text and text.startswith(skill_text("textrooms", "general"))


def test_privileged_prompt_positions():
    prompt = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    legacy = privileged_prompt(prompt, "SKILL")
    assert legacy == SKILL_HEADER + "SKILL\n\n" + prompt
    user = privileged_prompt(prompt, "SKILL", "user")
    assert (
        user
        == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n"
        + SKILL_HEADER
        + "SKILL\n\nQ<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match="valid: legacy, user"):
        privileged_prompt(prompt, "SKILL", "system")
