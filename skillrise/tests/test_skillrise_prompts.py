"""Golden structure of the SkillRise solve prompts rendered from real engines (ALFWorld games, the WebShop engine on a
synthetic catalogue, ScienceWorld): the role line, then directly the `## Current Skill Document` section, then the
first observation intact; later turns keep the initial observation and show the last `history_length` steps;
ScienceWorld lists action templates and objects; validity is the `<action>` tags only; overflow raises or is cut."""

import os
from pathlib import Path

import pytest

from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.models import qwen_tokenizer
from skillrise.prompts import ROLES, SkillRisePrompt, SkillRiseScienceWorld, project_action
from skillrise.trial import DOC_SLOT, SKILL_HEADER, TrialRunner


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


def play(tok, factory, task, env_name, history, actions, max_prompt_length=100_000, overflow="raise"):
    """Play `actions` on `task` with a SkillRise prompt; returns (user messages seen per turn, the episode, the
    observation each turn acted on)."""
    seen = []

    def generate(prompt_ids):
        out = []
        for ids in prompt_ids:
            text = tok.decode(ids)
            seen.append(text.split("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0])
            out.append(tok(f"Some reasoning. <action>{actions[len(seen) - 1]}</action>",
                           add_special_tokens=False).input_ids)  # fmt: skip
        return out, None

    with EnvPool(factory, num_slots=1, num_workers=0) as pool:
        runner = TrialRunner(pool, SkillRisePrompt(env_name, history, DOC_SLOT), tok, env_name, len(actions),
                             max_prompt_length, prompt_overflow=overflow)  # fmt: skip
        (t,) = runner.run([[{**task, "padded": False}]], [0], [0], generate, K=1)
    return seen, t.episodes[0], [r.anchor for r in t.episodes[0].rows]


def alfworld_data() -> Path | None:
    """$ALFWORLD_DATA, else the monorepo's shared/data/alfworld (or /work/shared/data/alfworld), if it has games."""
    here = Path(__file__).resolve().parents[2]
    for d in (os.environ.get("ALFWORLD_DATA"), here / "shared" / "data" / "alfworld", "/work/shared/data/alfworld"):
        if d and (Path(d) / "json_2.1.1" / "valid_seen").is_dir():
            return Path(d)
    return None


def assert_head(user: str, env_name: str) -> str:
    """The role line, a blank line, the skill-document section; returns what follows the section."""
    role = ROLES[env_name]
    assert user.startswith(f"{role}\n\n{SKILL_HEADER}\n")
    rest = user[len(role) + 2 + len(SKILL_HEADER) + 1 :]
    document, sep, body = rest.partition("\n\n")
    assert sep and "skill document is empty" in document
    return body


def test_alfworld_prompt_structure_real_game(tok):
    pytest.importorskip("alfworld")
    from agentrl_shared.envs import load_tasks, make_env

    data = alfworld_data()
    if data is None:
        pytest.skip("ALFWorld games not found ($ALFWORLD_DATA, ../shared/data/alfworld)")
    task = load_tasks("alfworld", "valid_seen", data_dir=str(data))[0]
    seen, ep, obs = play(tok, lambda: make_env("alfworld"), task, "alfworld", 15, ["look", "inventory", "look"])
    initial = obs[0]
    assert initial.startswith("-= Welcome to TextWorld, ALFRED! =-") and "Your task is to:" in initial
    for k, user in enumerate(seen):
        body = assert_head(user, "alfworld")
        assert body.startswith(initial)  # the whole first observation, after the document, on every turn
        assert ("Action 1: look\nObservation 1: " in body) == (k > 0)
        assert "Your admissible actions in the current situation are:\n['" in body
        assert user.rstrip().endswith("<action> </action> tags.")
    assert "Action 2: inventory" in seen[2] and all(r.is_action_valid for r in ep.rows)


def test_webshop_prompt_structure_synthetic_catalogue(tok, tmp_path):
    from agentrl_shared.envs.webshop import WebShopEnv
    from agentrl_shared.testing import write_synthetic_catalog
    from skillrise.groups import pin_webshop_goals

    data = str(write_synthetic_catalog(tmp_path))
    (task,) = pin_webshop_goals([{"task_id": "webshop_0", "task_type": "webshop", "goal_idx": 0}], 0, data)
    actions = ["search[towel]", "click[back to search]", "search[a]", "search[b]", "search[c]", "search[d]",
               "search[e]"]  # fmt: skip
    seen, _, _ = play(tok, lambda: WebShopEnv(data_dir=data, service="local"), task, "webshop", 5, actions)
    goal = task["goal"]["instruction_text"]
    for user in seen:
        assert assert_head(user, "webshop").startswith(f"Your task is to: {goal}")
    assert "Action 1: search[towel]" in seen[5] and "Action 1:" not in seen[6]  # a 5-step window
    assert "Action 6: search[d]" in seen[6] and "Action 2: click[back to search]" in seen[6]


def test_scienceworld_prompt_structure_real_engine(tok):
    pytest.importorskip("scienceworld")
    task = {"task_id": "boil:0", "task_type": "boil", "task_name": "boil", "variation": 0}
    seen, ep, obs = play(tok, SkillRiseScienceWorld, task, "scienceworld", 2, ["look around", "inventory", "wait1",
                                                                              "look around"])  # fmt: skip
    for user in seen:
        body = assert_head(user, "scienceworld")
        assert body.startswith("Your task is to: ") and f"\nYour initial observation is: {obs[0]}" in body
        block = body.split("Your admissible actions in the current situation are:\n[\n", 1)[1].split("\n]", 1)[0]
        templates, objects = block.split("\n")
        assert templates.startswith("Action templates: ") and "open OBJ" in templates
        assert objects.startswith("OBJ stands for one of these objects: ") and len(block) < 6000
    assert "Action 1: look around" not in seen[3] and "Action 3: wait1" in seen[3]  # a 2-step window
    assert ep.rows[0].action == "look around" and ep.rows[0].is_action_valid


def test_action_only_validity():
    # no <think> needed and CJK text is fine: only the <action> tags count (official skillrise projection)
    assert project_action("Go <action>Go To Desk 1</action>", lower=True) == ("go to desk 1", True)
    assert project_action("好的 <action>look</action>", lower=True) == ("look", True)
    assert project_action("pour OBJ into Cup", lower=False) == ("pour OBJ into Cup", False)
    assert project_action("x <action>Focus on Red Box</action>", lower=False) == ("Focus on Red Box", True)


def test_overflow_raises_or_is_counted(tok):
    from agentrl_shared.envs import make_env

    task = {"task_id": "t", "task_type": "find", "object": "apple", "room": "kitchen", "instruction": "find the apple",
            "rooms": ["garage", "kitchen"]}  # fmt: skip
    with pytest.raises(ValueError, match="env.max_prompt_length=40"):
        play(tok, lambda: make_env("textrooms"), task, "alfworld", 15, ["go to kitchen"], max_prompt_length=40)
    _, ep, _ = play(tok, lambda: make_env("textrooms"), task, "alfworld", 15, ["go to kitchen"], max_prompt_length=40,
                    overflow="truncate")  # fmt: skip
    assert ep.rows[0].prompt_truncated and len(ep.rows[0].prompt_ids) == 40


@pytest.mark.parametrize("env_name", ["alfworld", "webshop", "scienceworld", "textrooms"])
def test_curate_prompt_structure_per_family(tok, env_name):
    """Official `skillrise_{alfworld,webshop,sciworld}/prompt.py` curate prompts: the same sections and rules in every
    family, the family and its abstraction examples its own; WebShop's attempt shows the goal, and its prompt lists
    the shopping steps worth distilling."""
    from agentrl_shared.envs import make_env
    from agentrl_shared.prompts import make_prompt
    from skillrise.trial import CURATE_TEXT, SolvePrompt

    with EnvPool(lambda: make_env("textrooms"), num_slots=1, num_workers=0) as pool:
        solve = SolvePrompt(make_prompt("textrooms"))  # the curate prompt does not depend on the solve prompt
        runner = TrialRunner(pool, solve, tok, env_name, 2, 4096)
        text = runner.carry_prompt("", ["start here", "you see a door"], ["go to door 1"], won=False)
    user = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    family = CURATE_TEXT[env_name]
    assert user.startswith(
        f"You maintain a SKILL DOCUMENT for an agent that solves a family of related {family.family}."
    )
    sections = ["## Old Skill Document\n(The skill document is empty", f"## Most Recent Attempt ({family.attempt})\n"
                "Initial observation: start here\nAction 1: go to door 1\nObservation 1: you see a door\n"
                "Outcome of this attempt: FAILURE", "## What to do\n", "- Abstract, do not memorise: ",
                "Headers that often fit", "inside <skill> </skill> tags."]  # fmt: skip
    at = [user.find(s) for s in sections]
    assert -1 not in at and at == sorted(at), list(zip(sections, at, strict=True))
    examples = {"alfworld": "receptacle ids", "textrooms": "receptacle ids", "scienceworld": "substance names",
                "webshop": "price limits"}  # fmt: skip
    assert examples[env_name] in user
    shopping = "click[buy now]" in user
    assert shopping == (env_name == "webshop")
    if shopping:
        assert "the shopping goal" in user and family.procedure in user and family.procedure.count("\n- ") == 5
    with pytest.raises(ValueError, match="No curate prompt for environment 'cooking'"):
        TrialRunner(pool, solve, tok, "cooking", 2, 4096)
