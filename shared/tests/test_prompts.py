"""Golden strings pin the verl-agent style prompts; projection rules follow verl-agent `projection.py`."""

import pytest

from agentrl_shared.prompts import Turn, chat_messages, make_prompt


HISTORY = [
    Turn("You arrive at countertop 1. On the countertop 1, you see a apple 1.", "go to countertop 1"),
    Turn("You pick up the apple 1 from the countertop 1.", "take apple 1 from countertop 1"),
    Turn("You arrive at fridge 1.", "go to fridge 1"),
]
INSTRUCTION = (
    "It is now your turn to act.\nFirst reason step by step about the current situation; this reasoning MUST be "
    "enclosed in <think> </think> tags.\nThen choose one {kind} action for this step and give it inside <action> "
    "</action> tags."
)


def test_alfworld_golden():
    p = make_prompt("alfworld")
    assert p.history_length == 2
    first = p.render(
        "put a cool apple in fridge", [], "You are in the middle of a room.", ["go to fridge 1", "help", "look"]
    )
    assert first == (
        "You are an expert agent acting in the ALFRED embodied household environment.\n"
        "Your current observation is: You are in the middle of a room.\n"
        "Your admissible actions in the current situation are: ['go to fridge 1',\n 'look'].\n\n"
        + INSTRUCTION.format(kind="admissible")
    )
    later = p.render("put a cool apple in fridge", HISTORY, "The fridge 1 is closed.", ["open fridge 1", "look"])
    assert later == (
        "You are an expert agent acting in the ALFRED embodied household environment. Your task is to: put a cool "
        "apple in fridge\nBefore this step you have taken 3 step(s). Here are the most recent 2 observations and the "
        "actions you took in response: [Observation 2: 'You pick up the apple 1 from the countertop 1.', Action 2: "
        "'take apple 1 from countertop 1']\n[Observation 3: 'You arrive at fridge 1.', Action 3: 'go to fridge 1']\n"
        "You are now at step 4 and your current observation is: The fridge 1 is closed.\n"
        "Your admissible actions in the current situation are: ['open fridge 1',\n 'look'].\n\n"
        + INSTRUCTION.format(kind="admissible")
    )


def test_webshop_golden_and_length_fallback():
    p = make_prompt("webshop")
    later = p.render("buy a red mug", HISTORY[:1], "Results page", ["click[b0001]", "click[next >]"])
    assert later == (
        "You are an expert autonomous agent shopping in the WebShop e-commerce environment.\n"
        "Your task is to: buy a red mug\nBefore this step you have taken 1 step(s). Here are the most recent 1 "
        "observations and the actions you took in response: [Observation 1: 'You arrive at countertop 1. On the "
        "countertop 1, you see a apple 1.', Action 1: 'go to countertop 1']\n"
        "You are now at step 2 and your current observation is: Results page\n"
        "Your available actions are:\n['click[b0001]',\n 'click[next >]'].\n\n" + INSTRUCTION.format(kind="available")
    )
    long_history = [Turn("x" * 7000, "click[item]")] * 2
    assert p.render("t", long_history, "obs", ["click[a]"]) == p.render("t", [], "obs", ["click[a]"])


def test_search_golden():
    p = make_prompt("search")
    assert p.history_length == 4
    hist = [
        Turn("<information>Doc 1: Paris is the capital of France.</information>", "<search>capital of france</search>")
    ]
    assert p.render("what is the capital of france?", hist, "", []) == (
        "You are an expert agent answering the given question step by step.\nYour question: what is the capital of "
        "france?\nYou have already taken 1 step(s). The most recent 1 searches and their results:\nStep 1: "
        "<search>capital of france</search>\n<information>Doc 1: Paris is the capital of France.</information>\n\n"
        "You are now at step 2. First reason step by step inside <think> </think> tags. If you need more knowledge, "
        "issue one search query inside <search> </search> tags; the top results will come back between "
        "<information> and </information>. You may search as often as you need. When you know the answer, give it "
        "inside <answer> </answer> tags with no explanation, for example <answer> Beijing </answer>."
    )


def test_textrooms_golden_and_messages():
    p = make_prompt("textrooms")
    text = p.render("find the towel", HISTORY[2:], "You are in the hallway.", ["go to bathroom", "go to garage"])
    assert text == (
        "Task: find the towel.\nPreviously: go to fridge 1 -> You arrive at fridge 1.\nYou are in the hallway.\n"
        "Admissible actions: go to bathroom, go to garage.\nAnswer with one admissible action."
    )
    messages = chat_messages(p, text)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert p.assistant_prefix == "<action>"


@pytest.mark.parametrize(
    ("text", "action", "valid"),
    [
        ("<think>fridge is closed</think><action>Open Fridge 1</action>", "open fridge 1", True),
        ("<action>open fridge 1</action>", "open fridge 1", False),  # no <think>
        ("<think>x</think> open fridge 1", "<think>x</think> open fridge 1"[-30:], False),  # no action tags
        ("<think>冰箱</think><action>open fridge 1</action>", "open fridge 1", False),  # CJK
    ],
)
def test_alfworld_projection(text, action, valid):
    assert make_prompt("alfworld").project(text) == (action, valid)


def test_webshop_projection_fallback_is_20_chars():
    text = "I would like to search for a mug please"
    assert make_prompt("webshop").project(text) == (text[-20:], False)


@pytest.mark.parametrize(
    ("text", "action", "valid"),
    [
        ("<think>a</think><search>eiffel tower height</search>", "<search>eiffel tower height</search>", True),
        ("<think>a</think><answer> Paris </answer>", "<answer>Paris</answer>", True),
        ("<search>a</search><answer>b</answer>", "<search>a</search>", False),
        ("<search>a</search><search>b</search>", "<search>a</search>", False),
        ("no tags at all", "no tags at all", False),
    ],
)
def test_search_projection(text, action, valid):
    assert make_prompt("search").project(text) == (action, valid)


def test_textrooms_projection_uses_the_prefilled_tag():
    p = make_prompt("textrooms")
    assert p.project("go to bathroom</action>") == ("go to bathroom", True)
    assert p.project("I think the bathroom") == (("<action>I think the bathroom")[-30:], False)


def test_unknown_prompt_family():
    with pytest.raises(ValueError, match="valid names: alfworld, webshop, search, textrooms"):
        make_prompt("sokoban")
