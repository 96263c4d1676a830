"""WebShop tests: a catalogue the tests generate in the official file formats, the official reward, and `realdata`
fixed goals from `$AGENTRL_DATA/webshop` (plus the official product files when they are there too).
"""

import json
import os
from pathlib import Path

import pytest

from agentrl_shared.envs import load_tasks, make_env
from agentrl_shared.envs import webshop as W
from agentrl_shared.testing import write_synthetic_catalog


REPO_ROOT = Path(__file__).resolve().parents[3]
REAL = Path(os.environ.get("AGENTRL_DATA", REPO_ROOT.parent / "shared" / "data")) / "webshop"


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    return write_synthetic_catalog(tmp_path_factory.mktemp("webshop"))


def buy(env, task, options=None, asin=None):
    goal = task["goal"]
    env.reset(task, seed=0)
    env.step(f"search[{goal['instruction_text']}]")
    env.step(f"click[{(asin or goal['asin']).lower()}]")
    for opt in goal["goal_options"] if options is None else options:
        env.step(f"click[{opt}]")
    return env.step("click[buy now]")


def test_pages_and_actions_golden(catalog_dir):
    env = make_env("webshop", data_dir=catalog_dir)
    task = next(t for t in load_tasks("webshop", "all", data_dir=catalog_dir) if t["goal"]["asin"] == "B0SYN00002")
    instr = task["goal"]["instruction_text"]
    step = env.reset(task, seed=0)
    assert step.observation == f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"
    assert step.info["admissible_actions"] == ["search[<your query>]", "click[search]"]
    step = env.step("search[wireless headphones]")
    assert step.observation.startswith(
        f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] Page 1 (Total results: 2) [SEP] Next > [SEP] B0SYN00002 [SEP] Wireless Bluetooth Headphones Noise Cancelling Over Ear [SEP] $59.0 to $89.0"
    )  # noqa: E501
    assert step.info["admissible_actions"] == [
        "click[back to search]",
        "click[next >]",
        "click[b0syn00002]",
        "click[b0syn01002]",
    ]  # noqa: E501
    step = env.step("click[b0syn00002]")
    assert step.observation == (
        f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] black [SEP] white [SEP] "
        "Wireless Bluetooth Headphones Noise Cancelling Over Ear [SEP] Price: $59.0 to $89.0 [SEP] Rating: N.A. [SEP] "
        "Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    assert step.info["available_actions"]["clickables"] == [
        "back to search",
        "< prev",
        "description",
        "features",
        "reviews",
        "buy now",
        "black",
        "white",
    ]
    step = env.step("click[features]")
    assert step.observation.endswith("< Prev [SEP] Noise cancelling design [SEP] Wireless design")
    assert env.step("click[< prev]").observation.endswith("Buy Now")
    assert "Page 1" in env.step("click[< prev]").observation
    assert env.step("click[back to search]").observation.startswith("WebShop [SEP]")


def test_buy_target_scores_one_and_wins(catalog_dir):
    env = W.WebShopEnv(catalog_dir)
    for task in W.load_tasks("all", catalog_dir):
        step = buy(env, task)
        assert step.done and step.info["task_score"] == 1.0 and step.info["won"] and step.reward == 10.0


def test_partial_purchases_score_less(catalog_dir):
    env = W.WebShopEnv(catalog_dir)
    task = next(t for t in W.load_tasks("all", catalog_dir) if len(t["goal"]["goal_options"]) == 2)
    no_options = buy(env, task, options=[])
    assert 0 < no_options.info["task_score"] < 1 and not no_options.info["won"] and no_options.reward == 0.0
    # (n_attr + 0 options + price) / (n_attr + n_opt + 1), type reward 1
    goal = task["goal"]
    expected = (len(goal["attributes"]) + 1) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
    assert no_options.info["task_score"] == pytest.approx(expected)
    other = next(t for t in W.load_tasks("all", catalog_dir) if t["goal"]["asin"] != goal["asin"])
    wrong = buy(env, task, options=[], asin=other["goal"]["asin"])
    assert wrong.info["task_score"] < no_options.info["task_score"]


def test_invalid_actions_and_step_limit(catalog_dir):
    env = W.WebShopEnv(catalog_dir, max_steps=3)
    task = W.load_tasks("all", catalog_dir)[0]
    first = env.reset(task, seed=0)
    for action in ("click[buy now]", "jump", "click[search]"):  # not clickable here / unparsable / disallowed
        step = env.step(action)
        assert step.observation == first.observation and step.reward == 0.0
    assert step.done and not step.info["won"]
    with pytest.raises(RuntimeError):
        env.step("search[x]")


def test_reward_pieces_match_official_definitions():
    assert W.token_set_ratio("navy blue", "blue") == 100
    assert W.token_set_ratio("fuzzy was a bear", "fuzzy fuzzy was a bear") == 100
    assert W.token_set_ratio("set of 6", "set of 4") == 88  # > 85: counts as a match, as in thefuzz
    assert W.token_set_ratio("small", "x-large") < 50
    assert W.normalize_color("dark navy") == "dark" and W.normalize_color("XL") == "XL"
    product = {
        "name": "Red Cotton T-Shirt",
        "query": "t-shirts",
        "product_category": "A › B › C",
        "Attributes": ["cotton"],
        "Title": "Red Cotton T-Shirt",
        "BulletPoints": ["machine wash"],
        "Description": "",
    }  # noqa: E128
    goal = {
        "name": "Red Cotton T-Shirt",
        "query": "t-shirts",
        "product_category": "A › B › C",
        "attributes": ["cotton", "machine wash", "slim fit"],
        "goal_options": ["red", "large"],
        "price_upper": 30.0,
    }  # noqa: E128
    score, info = W.get_reward(product, goal, price=20.0, options={"color": "red", "size": "small"})
    assert score == pytest.approx((2 + 1 + 1) / (3 + 2 + 1)) and info["r_type"] == 1.0
    score, _ = W.get_reward(product, goal, price=40.0, options={"color": "red", "size": "large"})
    assert score == pytest.approx((2 + 2 + 0) / 6)


def test_goal_split_and_errors(catalog_dir, tmp_path):
    all_goals = W.load_tasks("all", catalog_dir)
    assert (
        W.load_tasks("test", catalog_dir) == all_goals[:500] and W.load_tasks("train", catalog_dir) == all_goals[500:]
    )
    assert W.load_tasks("all", catalog_dir) == all_goals  # deterministic shuffle (seed 233) and price draws
    with pytest.raises(ValueError, match="valid splits"):
        W.load_tasks("dev", catalog_dir)
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        W.WebShopEnv(tmp_path)


def _fixed_goal_files():
    files = sorted(REAL.glob("*.json")) if REAL.is_dir() else []
    files = [f for f in files if isinstance(json.loads(f.read_text()), list) and "key" in json.loads(f.read_text())[0]]
    if not files:
        pytest.skip(f"no WebShop fixed-goal files at {REAL}")
    return files


@pytest.mark.realdata
def test_webshop_realdata_fixed_goals_scored_against_target():
    for path in _fixed_goal_files():
        tasks = W.load_fixed_goals(path)
        assert tasks and all(t["goal"]["price_upper"] < 1000000 for t in tasks)
        for i, task in enumerate(tasks):
            goal = task["goal"]
            target = {
                "name": goal["name"],
                "Title": goal["name"],
                "query": goal["query"],
                "product_category": "",
                "Attributes": [],
                "BulletPoints": [""],
                "Description": "",
            }  # noqa: E128
            opts = {f"o{j}": o for j, o in enumerate(goal["goal_options"])}
            score, _ = W.get_reward(target, goal, price=goal["price_upper"] - 0.01, options=opts)
            assert score == 1.0
            other = tasks[(i + 1) % len(tasks)]["goal"]
            if W._nouns(other["name"]) != W._nouns(goal["name"]):
                wrong = dict(target, name=other["name"], Title=other["name"], query=other["query"] + " (other)")
                assert W.get_reward(wrong, goal, price=goal["price_upper"] - 0.01, options={})[0] < 1.0
            assert W.get_reward(target, goal, price=goal["price_upper"] + 1, options=opts)[0] < 1.0


@pytest.mark.realdata
def test_webshop_realdata_with_official_products():
    if not (REAL / W.SMALL_FILES[0]).is_file():
        pytest.skip(f"official WebShop product files not in {REAL}")
    env = W.WebShopEnv(REAL)
    for path in _fixed_goal_files():
        for task in W.load_fixed_goals(path):
            goal = task["goal"]
            if goal["asin"] not in env.catalog.by_asin:
                continue
            env.reset(task, seed=0)
            page = env.step(f"search[{goal['instruction_text']}]")
            assert goal["asin"].lower() in page.info["available_actions"]["clickables"]
            step = buy(env, task)
            price_ok = env.catalog.prices[goal["asin"]] <= goal["price_upper"]
            assert step.info["task_score"] == 1.0 or not price_ok
            other = next(
                a for a in env.catalog.by_asin if a != goal["asin"] and env.catalog.by_asin[a]["name"] != goal["name"]
            )
            assert W.get_reward(env.catalog.by_asin[other], goal, env.catalog.prices[other], {})[0] < 1.0
