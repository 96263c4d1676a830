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


def buy(env, task, options=None, asin=None, seed=0):
    env.reset(task, seed=seed)
    goal = env.goal
    env.step(f"search[{goal['instruction_text']}]")
    env.step(f"click[{(asin or goal['asin']).lower()}]")
    wanted = goal["goal_options"]  # a list (human goals) or {option name: value} (synthetic goals)
    for opt in (list(wanted.values()) if isinstance(wanted, dict) else wanted) if options is None else options:
        env.step(f"click[{opt}]")
    return env.step("click[buy now]")


def test_pages_and_actions_golden(catalog_dir):
    env = make_env("webshop", data_dir=catalog_dir, human_goals=True)
    tasks = load_tasks("webshop", "all", data_dir=catalog_dir, human_goals=True)
    task = next(t for t in tasks if env.reset(t, seed=0) and env.goal["asin"] == "B0SYN00002")
    instr = env.goal["instruction_text"]
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


@pytest.mark.parametrize("human_goals", [False, True])
def test_buy_target_scores_one_and_wins(catalog_dir, human_goals):
    env = W.WebShopEnv(catalog_dir, human_goals=human_goals)
    for task in W.load_tasks("all", catalog_dir, human_goals=human_goals):
        step = buy(env, task, seed=task["goal_idx"])
        assert step.done and step.info["task_score"] == 1.0 and step.info["won"] and step.reward == 10.0


def test_partial_purchases_score_less(catalog_dir):
    env = W.WebShopEnv(catalog_dir, human_goals=True, service="local")
    goals = env.catalog.goal_set(0, True)[1]
    task = next(
        t for t in W.load_tasks("all", catalog_dir, human_goals=True) if len(goals[t["goal_idx"]]["goal_options"]) == 2
    )
    no_options = buy(env, task, options=[])
    assert 0 < no_options.info["task_score"] < 1 and not no_options.info["won"] and no_options.reward == 0.0
    # (n_attr + 0 options + price) / (n_attr + n_opt + 1), type reward 1
    goal = env.goal
    expected = (len(goal["attributes"]) + 1) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
    assert no_options.info["task_score"] == pytest.approx(expected)
    other = next(g for g in goals if g["asin"] != goal["asin"])
    wrong = buy(env, task, options=[], asin=other["asin"])
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
        assert tasks  # a human instruction may have no price limit (price_upper 1000000), as in goal.py
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
            wrong = dict(target, name=other["name"], Title=other["name"], query=other["query"] + " (other)")
            wrong_score, info = W.get_reward(wrong, goal, price=goal["price_upper"] - 0.01, options={})
            assert wrong_score <= score and info["r_type"] <= 1.0  # never better than the target itself
            assert W.get_reward(target, goal, price=goal["price_upper"] + 1, options=opts)[0] < 1.0


@pytest.mark.realdata
def test_webshop_realdata_with_official_products():
    if not (REAL / W.SMALL_FILES[0]).is_file():
        pytest.skip(f"official WebShop product files not in {REAL}")
    env = W.WebShopEnv(REAL, service="local")
    for path in _fixed_goal_files():
        for task in W.load_fixed_goals(path):
            goal = task["goal"]
            if goal["asin"] not in env.catalog.by_asin:
                continue
            step = buy(env, task)
            price_ok = env.catalog.price(0, False, goal["asin"]) <= goal["price_upper"]
            assert step.info["task_score"] == 1.0 or not price_ok
            other = next(
                a for a in env.catalog.by_asin if a != goal["asin"] and env.catalog.by_asin[a]["name"] != goal["name"]
            )
            assert W.get_reward(env.catalog.by_asin[other], goal, env.catalog.price(0, False, other), {})[0] < 1.0


def test_goals_seeded_like_verl_agent_workers(catalog_dir):
    """`WebAgentTextEnv(seed=s)`: prices and goal price limits drawn after `random.seed(s)`, then the goals shuffled
    with `random.seed(s)`; group members (same seed) see the same goal, other seeds another order; synthetic goals
    (the SDAR default) are one per option combination of each product with an instruction."""
    import itertools
    import random

    catalog = W.load_catalog(str(catalog_dir))
    prices, goals = catalog.goal_set(5)
    rng = random.Random(5)  # the official draw order, written out
    expected_prices = {}
    for p in catalog.products:
        lo_hi = p["pricing"]
        expected_prices[p["asin"]] = lo_hi[0] if len(lo_hi) == 1 else rng.uniform(*lo_hi[:2])
    assert prices == expected_prices
    combos = sum(
        len(list(itertools.product(*p["options"].values()))) for p in catalog.products if p["instruction_text"]
    )
    assert len(goals) == combos and all(" with " in g["instruction_text"] or not g["goal_options"] for g in goals)
    env = W.WebShopEnv(catalog_dir)
    task = W.load_tasks("all", catalog_dir)[3]
    a = env.reset(task, seed=7).observation
    assert env.reset(task, seed=7).observation == a
    assert any(env.reset(task, seed=s).observation != a for s in range(8, 20))
    assert len(W.load_tasks("all", catalog_dir, human_goals=True)) == 6  # one human instruction per product type


def test_type_reward_nouns_from_spacy():
    """The suffix rule it replaces dropped table, cable, bed and charger and kept the adjective red; spaCy's tags (as
    goal.py uses them, on the raw product name) keep the nouns and drop a lower-case colour adjective."""
    assert {"coffee", "table"} <= set(W.nouns("Wooden Coffee Table"))
    assert "cable" in W.nouns("USB C Cable 6 ft") and "charger" in W.nouns("Fast Wall Charger for iPhone")
    assert "bed" in W.nouns("Memory Foam Dog Bed")
    assert W.nouns("red leather office chair") == ["leather", "office", "chair"]
    goal = {"name": "Memory Foam Dog Bed", "query": "q", "product_category": ""}
    bought = {"name": "Orthopedic Dog Bed, Large", "query": "other", "product_category": ""}
    assert W.get_type_reward(bought, goal)["title_score"] == pytest.approx(2 / 4)  # dog, bed of memory, foam, dog, bed


# Lucene's document-length encoding (org.apache.lucene.util.SmallFloat.intToByte4 / byte4ToInt): BM25 in Lucene 8+
# scores with the decoded length, so long documents are compared at a coarser length than their exact one.
def _int4(i: int) -> int:
    bits = i.bit_length()
    return i if bits < 4 else ((i >> (bits - 4)) & 0x07) | ((bits - 4 + 1) << 3)


def _long4(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE = 255 - _int4(2**31 - 1)


def _lucene_length(n: int) -> int:
    if n < _FREE:
        return n
    return _FREE + _long4(_int4(n - _FREE))


def lucene_bm25_ranking(docs: list[list[str]], query: list[str], k: int, k1: float = 0.9, b: float = 0.4):
    """Lucene 8+ `BM25Similarity` (pyserini's default searcher): idf = ln(1 + (N - df + 0.5) / (df + 0.5)), term
    weight idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)) with dl the encoded length and avgdl exact."""
    import math
    from collections import Counter

    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    scores = {}
    for i, d in enumerate(docs):
        tf, dl = Counter(d), _lucene_length(len(d))
        s = sum(
            math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] / (tf[t] + k1 * (1 - b + b * dl / avgdl))
            for t in set(query)
            if tf[t]
        )
        if s > 0:
            scores[i] = s
    return sorted(scores, key=lambda i: (-scores[i], i))[:k]


def _overlap(docs: list[str], queries: list[str]) -> float:
    from agentrl_shared.envs.retrieval import BM25Retriever, lucene_analyze

    bm25 = BM25Retriever(docs)
    tokens = [lucene_analyze(d) for d in docs]
    overlaps = []
    for q in queries:
        ref = lucene_bm25_ranking(tokens, lucene_analyze(q), 10)
        ours = [i for i, _ in bm25.rank(q, 10)]
        overlaps.append(len(set(ref) & set(ours)) / max(len(ref), 1))
    return sum(overlaps) / len(overlaps)


def test_lucene_analyzer_tokens():
    """pyserini's default analyzer: possessive dropped, Lucene stop words removed, Porter (not Porter2) stems."""
    from agentrl_shared.envs.retrieval import lucene_analyze

    assert lucene_analyze("The Women's Running Shoes, and 2 batteries!") == ["women", "run", "shoe", "2", "batteri"]
    assert lucene_analyze("generously") == ["gener"]  # Porter; the Snowball English stemmer gives "generous"


def test_search_parity_with_lucene_bm25_on_a_catalogue_sample(catalog_dir):
    catalog = W.load_catalog(str(catalog_dir))
    docs = [W.product_document(p) for p in catalog.products]
    queries = [p["query"] for p in catalog.products] + ["noise cancelling wireless", "quick dry towel set of 6"]
    overlap = _overlap(docs, queries)
    print(f"WebShop search: mean top-10 overlap with Lucene BM25 on {len(docs)} products = {overlap:.3f}")
    assert overlap >= 0.95


@pytest.mark.realdata
def test_webshop_realdata_search_parity_on_goal_products():
    """Top-10 overlap with the reference Lucene BM25 over the target products of the real goal files (names and
    queries as documents, the instructions as queries)."""
    recs = [r for path in _fixed_goal_files() for r in json.loads(path.read_text())]
    docs = [f"{r['key']['name']} {r['key']['query']}".lower() for r in recs]
    queries = [r["task"].split("\n")[0] for r in recs]
    overlap = _overlap(docs, queries)
    print(f"WebShop search: mean top-10 overlap with Lucene BM25 on {len(docs)} goal products = {overlap:.3f}")
    assert overlap >= 0.9


def test_workers_share_one_catalogue(catalog_dir):
    """Issue 9 point 6: the catalogue (products, index, goal sets) is built once per node, not once per worker."""
    import functools

    from agentrl_shared.envs import retrieval as R
    from agentrl_shared.envs.pool import EnvPool

    tasks = W.load_tasks("all", catalog_dir)[:3]
    factory = functools.partial(make_env, "webshop", data_dir=str(catalog_dir))
    with EnvPool(factory, num_slots=3, timeout=60, num_workers=3) as pool:
        firsts = pool.reset([0, 1, 2], tasks, [0, 0, 0])
        assert all("Instruction:" in f.observation for f in firsts)
        assert all("Page 1" in s.observation for s in pool.step([0, 1, 2], ["search[shoes]"] * 3))
        url = R.node_service({"service": "webshop", "data_dir": str(catalog_dir.resolve()), "full": False})
        stats = R.RemoteRetriever(url).stats()
        workers = {p.pid for p in pool._procs}
    assert stats["index_builds"] == 1 and stats["pid"] not in workers and workers <= set(stats["clients"])
