"""Golden strings and projection of the ScienceWorld prompt family (structure of the SkillRise ScienceWorld prompt)."""

from agentrl_shared.prompts import ScienceWorldPrompt, Turn


def test_scienceworld_prompt_first_turn_golden():
    text = ScienceWorldPrompt().render("boil water", [], "This room is called the kitchen.", ["look around", "wait"])
    assert text == (
        "You are an expert autonomous agent in ScienceWorld, a text-based virtual world in which you carry out "
        "tasks from the elementary-school science curriculum.\n\n"
        "Your task is to: boil water\n"
        "Your current observation is: This room is called the kitchen.\n"
        "Your admissible actions in the current situation are:\n[\nlook around\nwait\n].\n\n"
        "It is now your turn to take one action.\n"
        "First reason step by step about the current situation and which admissible action best advances the "
        "task.\n"
        "Then choose one admissible action for this step and give it inside <action> </action> tags."
    )


def test_scienceworld_prompt_history_window():
    history = [Turn(f"obs {k}", f"act {k}") for k in range(1, 18)]
    text = ScienceWorldPrompt(history_length=15).render("t", history, "now", ["wait"])
    assert "Before this step you have taken 17 step(s). Here are the most recent 15 observations" in text
    assert "[Observation 3: 'obs 3', Action 3: 'act 3']" in text and "Observation 2:" not in text


def test_scienceworld_projection_keeps_case_and_needs_no_think():
    prompt = ScienceWorldPrompt()
    assert prompt.project("reasoning <action> focus on Red Box </action>") == ("focus on Red Box", True)
    assert prompt.project("x" * 40 + "no tags") == (("x" * 40 + "no tags")[-30:], False)
    assert prompt.project("</action> <action>") == ("</action> <action>"[-30:], False)
