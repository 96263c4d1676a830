"""Golden strings pin the verl-agent style prompts; projection rules follow verl-agent `projection.py`."""

import pytest

from agentrl_shared.prompts import (
    AlfworldPrompt,
    ScienceWorldPrompt,
    SearchPrompt,
    TextRoomsPrompt,
    Turn,
    WebshopPrompt,
    chat_messages,
    make_prompt,
    webshop_format_obs,
)


HISTORY = [
    Turn("You arrive at countertop 1. On the countertop 1, you see a apple 1.", "go to countertop 1"),
    Turn("You pick up the apple 1 from the countertop 1.", "take apple 1 from countertop 1"),
    Turn("You arrive at fridge 1.", "go to fridge 1"),
]
ALFWORLD_ACT = (
    "It is now your turn to act.\nFirst reason step by step about the current situation; this reasoning MUST be "
    "enclosed in <think> </think> tags.\nThen choose one admissible action for this step and give it inside <action> "
    "</action> tags.\n"
)
WEBSHOP_ACT = (
    "It is now your turn to take one action for this step.\nFirst reason step by step about the current situation "
    "and about which available action moves you closest to the shopping goal; this reasoning MUST be enclosed in "
    "<think> </think> tags.\nThen choose one available action for this step and give it inside <action> </action> "
    "tags.\n"
)
SEARCH_ACT = (
    "It is now your turn to respond for this step.\nFirst reason step by step; this reasoning MUST be enclosed in "
    "<think> </think> tags.\nThen do exactly one of the following (never both):\n(1) if you are missing knowledge, "
    "query a search engine for more information with <search> your query </search>;\n(2) if you can answer the "
    "question with confidence, give the final answer inside <answer> </answer> tags, without explanation, for "
    "example <answer>Beijing</answer>.\n"
)


def test_alfworld_golden():
    """verl-agent ALFWORLD_TEMPLATE_NO_HIS / ALFWORLD_TEMPLATE: no task line on the first turn, actions joined by
    a newline and a space, history as `[Observation k: '...', Action k: '...']` lines."""
    p = make_prompt("alfworld")
    assert p.history_length == 2
    first = p.render(
        "put a cool apple in fridge", [], "You are in the middle of a room.", ["go to fridge 1", "help", "look"]
    )
    assert first == (
        "\nYou are an expert agent acting in the ALFRED embodied household environment.\n"
        "Your current observation is: You are in the middle of a room.\n"
        "Your admissible actions in the current situation are: ['go to fridge 1'\n 'look'].\n\n" + ALFWORLD_ACT
    )
    later = p.render("put a cool apple in fridge", HISTORY, "The fridge 1 is closed.", ["open fridge 1", "look"])
    assert later == (
        "\nYou are an expert agent acting in the ALFRED embodied household environment. Your task is to: put a cool "
        "apple in fridge\nBefore this step you have taken 3 step(s). Here are the most recent 2 observations and the "
        "actions you took in response: [Observation 2: 'You pick up the apple 1 from the countertop 1.', Action 2: "
        "'take apple 1 from countertop 1']\n[Observation 3: 'You arrive at fridge 1.', Action 3: 'go to fridge 1']\n"
        "You are now at step 4 and your current observation is: The fridge 1 is closed.\n"
        "Your admissible actions in the current situation are: ['open fridge 1'\n 'look'].\n\n" + ALFWORLD_ACT
    )


def test_webshop_golden_format_obs_and_length_fallback():
    """verl-agent WEBSHOP_TEMPLATE(_NO_HIS): `format_obs` (page parts after the instruction, quoted), actions quoted
    with a comma one per line between `[` and `]` lines, the no-history form above 13,000 characters."""
    p = make_prompt("webshop")
    page = (
        "Instruction: [SEP] buy a red mug [SEP] Back to Search [SEP] Page 1 (Total results: 1) [SEP] B0001 [SEP] Mug"
    )
    hist = [Turn("WebShop [SEP] Instruction: [SEP] buy a red mug [SEP] Search", "search[red mug]")]
    later = p.render("buy a red mug", hist, page, ["click[back to search]", "click[b0001]"])
    assert later == (
        "\nYou are an expert autonomous agent shopping in the WebShop e-commerce environment.\n"
        "Your task is to: buy a red mug.\nBefore this step you have taken 1 step(s). Here are the most recent 1 "
        "observations and the actions you took in response: [Observation 1: ''Search'', Action 1: 'search[red mug]']\n"
        "You are now at step 2 and your current observation is: 'Back to Search' [SEP] 'Page 1 (Total results: 1)' "
        "[SEP] 'B0001' [SEP] 'Mug'.\nYour available actions in the current situation are:\n[\n'click[back to search]',"
        "\n'click[b0001]',\n].\n\n" + WEBSHOP_ACT
    )
    assert webshop_format_obs("Thank you for shopping with us! [SEP] 1.0", "buy a red mug") == (
        "Thank you for shopping with us! [SEP] 1.0"
    )
    long_history = [Turn("x" * 7000, "click[item]")] * 2
    assert p.render("t", long_history, "obs", ["click[a]"]) == p.render("t", [], "obs", ["click[a]"])


def test_search_golden():
    """verl-agent SEARCH_TEMPLATE(_NO_HIS) with `SearchMemory.fetch`: `Step k:<action> <result>` lines, no current
    observation."""
    p = make_prompt("search")
    assert p.history_length == 4
    assert p.render("what is the capital of france?", [], "what is the capital of france?", []) == (
        "\nYou are an expert agent answering the given question step by step.\nYour question: what is the capital of "
        "france?\n\n" + SEARCH_ACT
    )
    info = '<information>{"result": "Doc 1: Paris is the capital of France.\\n"}</information>'
    hist = [Turn("what is the capital of france?", "<search>capital of france</search>", info)]
    assert p.render("what is the capital of france?", hist, info, []) == (
        "\nYou are an expert agent answering the given question step by step.\nYour question: what is the capital of "
        "france?\n\nBefore this step you have taken 1 step(s). Below is the interaction history: your past search "
        "queries are wrapped in <search> </search> and the results the search engine returned for each are wrapped in "
        "<information> </information>. History:\nStep 1:<search>capital of france</search> "
        + info
        + "\n\n"
        + SEARCH_ACT
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


@pytest.mark.parametrize("cls", [AlfworldPrompt, WebshopPrompt, SearchPrompt, TextRoomsPrompt, ScienceWorldPrompt])
def test_history_length_zero_renders_no_history(cls):
    """verl-agent's `history_length <= 0`: the no-history template on every turn (`history[-0:]` is the whole list)."""
    p = cls(history_length=0)
    args = ("find the towel", "You are in the hallway.", ["go to bathroom", "go to garage"])
    assert p.render(args[0], HISTORY, *args[1:]) == p.render(args[0], [], *args[1:])


@pytest.mark.parametrize(
    ("text", "action", "valid"),
    [
        ("<think>fridge is closed</think><action>Open Fridge 1</action>", "open fridge 1", True),
        ("<think>x</think><ACTION> Open Fridge 1 </Action>", "open fridge 1", True),  # tags in any case
        ("<action>open fridge 1</action>", "open fridge 1", False),  # no <think>
        ("<THINK>x</THINK><action>look</action>", "look", False),  # the think check is case-sensitive
        ("<think>x</think> Open Fridge 1", "<think>x</think> open fridge 1"[-30:], False),  # no action tags
        ("<think>x</think><action>open fridge 1", "<think>x</think><action>open fridge 1"[-30:], False),  # unclosed
        ("<think>x</think></action>look<action>", "", True),  # reversed: verl-agent's slice is empty, still valid
        ("<think>冰箱</think><action>open fridge 1</action>", "open fridge 1", False),  # CJK
    ],
)
def test_alfworld_projection(text, action, valid):
    assert make_prompt("alfworld").project(text) == (action, valid)


def test_webshop_projection_fallback_is_20_lowercased_chars():
    text = "I would like to Search for a Mug please"
    assert make_prompt("webshop").project(text) == (text.lower()[-20:], False)


@pytest.mark.parametrize(
    ("text", "action", "valid"),
    [
        ("<think>a</think><search>eiffel tower height</search>", "<search>eiffel tower height</search>", True),
        ("<think>a</think><answer> Paris </answer>", "<answer>Paris</answer>", True),
        ("<think>a</think><SEARCH>Eiffel</SEARCH>", "<search>Eiffel</search>", True),  # tags in any case
        ("<search>a</search><answer>b</answer>", "<search>a</search>", False),
        ("<search>a</search><search>b</search>", "<search>a</search>", False),
        ("<answer>b</answer> then <search>a</search>", "<search>a</search>", False),  # cut after </search>
        ("<search>unclosed query", "", False),
        ("</search>reversed<search>", "", False),
        ("no tags at all", "", False),
        ("<think>北京</think><answer>Beijing</answer>", "<answer>Beijing</answer>", True),  # no CJK rule for Search
    ],
)
def test_search_projection(text, action, valid):
    assert make_prompt("search").project(text) == (action, valid)


def test_textrooms_projection_uses_the_prefilled_tag():
    p = make_prompt("textrooms")
    assert p.project("go to bathroom</action>") == ("go to bathroom", True)
    assert p.project("I think the bathroom") == (("<action>i think the bathroom")[-30:], False)


def test_unknown_prompt_family():
    with pytest.raises(ValueError, match="valid names: alfworld, webshop, search, textrooms"):
        make_prompt("sokoban")
