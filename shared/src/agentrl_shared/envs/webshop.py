"""WebShop text environment without Java, spaCy models, Lucene or downloads (WebShop: Yao et al. 2022).

Re-implements `web_agent_site` text mode as verl-agent runs it (`observation_mode="text"`, human goals, goals
shuffled with seed 233, test = goal index < 500, train = the rest): the pages (search, results, item, sub-pages),
`search[...]` / `click[...]` with the official clickables, and the official reward of
`web_agent_site/engine/goal.py` (type x (attributes + options + price) / (n_attr + n_opt + 1)). Search is BM25 over the
official document text (title, description, first bullet, options) with `rank_bm25`. Reward placement follows
verl-agent `webshop/envs.py`: `success_reward` (10) when the episode ends with score 1.0, else 0; the raw score is
`info["task_score"]`. `agentrl_shared.testing.write_synthetic_catalog` writes a small catalogue for tests.
"""

import json
import random
import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

from .base import Step


SEARCH_RETURN_N = 50  # engine.py: top 50 hits
PRODUCT_WINDOW = 10  # engine.py: 10 results per page
PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # goal.py
END_BUTTON, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "Buy Now", "Next >", "< Prev", "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews")  # `Attributes` only with show_attrs (off in verl-agent)
NUM_TEST_GOALS = 500  # verl-agent: goals 0-499 are test, 500+ train
SPLITS = ("train", "test", "all")
# Official file names: the 1,000-product set (verl-agent `use_small=True`) and the full set.
SMALL_FILES = ("items_shuffle_1000.json", "items_ins_v2_1000.json")
FULL_FILES = ("items_shuffle.json", "items_ins_v2.json")
HUMAN_INS_FILE = "items_human_ins.json"

# web_agent_site/engine/normalize.py
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy camel camo "
    "caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral cranberry cream "
    "crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green grey heather "
    "indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight mint mocha "
    "multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow red rose royal "
    "rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise "
    "violet walnut wheat white wine yellow"
).split()


# ----------------------------------------------------------------------------------------------------------------
# Reward (web_agent_site/engine/goal.py), with thefuzz's token_set_ratio re-implemented.
# ----------------------------------------------------------------------------------------------------------------


def _indel_ratio(a: str, b: str) -> float:
    """100 * (1 - indel distance / (len a + len b)), the normalized similarity of rapidfuzz/python-Levenshtein."""
    if not a and not b:
        return 100.0
    prev = [0] * (len(b) + 1)
    for ca in a:  # longest common subsequence, one row at a time
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return 100.0 * 2 * prev[-1] / (len(a) + len(b))


def _full_process(s: str) -> str:
    """thefuzz `full_process(force_ascii=True)`: ASCII only, non-alphanumerics to spaces, lowercase, strip."""
    s = s.encode("ascii", "ignore").decode()
    return re.sub(r"[^0-9a-zA-Z]", " ", s).lower().strip()


def token_set_ratio(s1: str, s2: str) -> int:
    """`thefuzz.fuzz.token_set_ratio` (rounded to an int, as thefuzz returns it)."""
    t1, t2 = set(_full_process(s1).split()), set(_full_process(s2).split())
    if not t1 or not t2:
        return 0
    sect = " ".join(sorted(t1 & t2))
    diff12 = " ".join(sorted(t1 - t2))
    diff21 = " ".join(sorted(t2 - t1))
    comb12 = (sect + " " + diff12).strip()
    comb21 = (sect + " " + diff21).strip()
    return int(round(max(_indel_ratio(sect, comb12), _indel_ratio(sect, comb21), _indel_ratio(comb12, comb21))))


def normalize_color(text: str) -> str:
    """normalize.py `normalize_color`: the first known colour contained in the string, else the string."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text


_STOP = set(
    "a an and are as at be but by for from has have if in into is it its no not of on or our s so such t than that "
    "the their then there these they this to was were will with you your i me my we us he she him her his them what "
    "which who whom when where why how all any both each few more most other some own same too very can just should "
    "now also up down out off over under again further once only do does did doing am been being having".split()
)
_ADJ_SUFFIXES = ("able", "ible", "ful", "less", "ous", "ive", "ish", "ic", "al", "ed", "ing", "ly", "est", "er")


@lru_cache(maxsize=1)
def _spacy_nlp():
    """spaCy `en_core_web_sm` when it is installed (exact official noun filter), else `None`."""
    try:
        import spacy

        return spacy.load("en_core_web_sm")
    except (ImportError, OSError):
        return None


def _nouns(text: str) -> list[str]:
    """Lower-cased nouns and proper nouns of `text` (goal.py uses spaCy POS tags NOUN/PROPN). Without the spaCy
    model, a lexical stand-in: alphabetic tokens that are not stop words and have no adjective/verb suffix."""
    nlp = _spacy_nlp()
    if nlp is not None:
        return [t.text.lower() for t in nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]
    words = re.findall(r"[a-zA-Z]+", text)
    return [
        w.lower() for w in words if w.lower() not in _STOP and not w.lower().endswith(_ADJ_SUFFIXES) and len(w) > 1
    ]


def get_type_reward(purchased: dict, goal: dict) -> dict:
    """goal.py `get_type_reward`: query match, >= 2 shared category levels, noun overlap of the names."""
    query_match = purchased["query"] == goal["query"]
    p_cat = {x.strip() for x in purchased.get("product_category", "").split("›")}
    g_cat = {x.strip() for x in goal.get("product_category", "").split("›")}
    category_match = len(p_cat & g_cat) >= 2
    p_type, d_type = _nouns(purchased["name"]), _nouns(goal["name"])
    title_score = 0.2 if not d_type else len(set(p_type) & set(d_type)) / len(d_type)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def get_attribute_reward(purchased: dict, goal: dict) -> tuple[float, int]:
    """goal.py `get_attribute_reward`: fuzzy match (> 85) against the product attributes, else substring of title,
    bullet points or description."""
    matches = 0
    for g_attr in goal["attributes"]:
        if any(token_set_ratio(p_attr, g_attr) > 85 for p_attr in purchased["Attributes"]):
            matches += 1
        elif (
            g_attr in purchased["Title"].lower()
            or g_attr in " ".join(purchased["BulletPoints"]).lower()
            or g_attr in purchased["Description"].lower()
        ):
            matches += 1
    return (matches / len(goal["attributes"]) if goal["attributes"] else 0.0), matches


def get_option_reward(purchased_options: list[str], goal_options: list[str]) -> tuple[float | None, int]:
    """goal.py `get_option_reward`: colour-normalised fuzzy match (> 85) of each goal option."""
    purchased = [normalize_color(o) for o in purchased_options]
    wanted = [normalize_color(o) for o in goal_options]
    matches = sum(1 for g in wanted if any(token_set_ratio(p, g) > 85 for p in purchased))
    return (matches / len(wanted) if wanted else None), matches


def get_reward(purchased: dict, goal: dict, price: float, options: dict) -> tuple[float, dict]:
    """goal.py `get_reward`: r_type * (attribute matches + option matches + price ok) / (n_attr + n_opt + 1)."""
    r_type = get_type_reward(purchased, goal)
    r_price = price <= goal["price_upper"]
    goal_options = goal["goal_options"]
    goal_options = list(goal_options.values()) if isinstance(goal_options, dict) else list(goal_options)
    r_att, n_att = get_attribute_reward(purchased, goal)
    r_option, n_opt = get_option_reward(list(options.values()), goal_options)
    denom = len(goal["attributes"]) + len(goal_options) + 1
    total = (n_att + n_opt + r_price) / denom * r_type["r_type"]
    info = {**r_type, "r_att": r_att, "r_option": r_option, "r_price": r_price}
    return total, info


# ----------------------------------------------------------------------------------------------------------------
# Catalogue: products, goals, search (engine.py load_products / get_human_goals / Lucene stand-in)
# ----------------------------------------------------------------------------------------------------------------

_LUCENE_STOP = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)


def _stem(token: str) -> str:
    """Lucene's EnglishMinimalStemmer (plural stripping)."""
    n = len(token)
    if n < 3 or token[-1] != "s" or token[-2] in "us":
        return token
    if token[-2] == "e":
        if n > 3 and token[-3] == "i" and token[-4] not in "ae":
            return token[:-3] + "y"
        if token[-3] in "iaoe":
            return token
    return token[:-1]


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without English stop words, plural-stripped (close to Lucene's English analyzer)."""
    return [_stem(t) for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _LUCENE_STOP]


def _clean_product(p: dict, attributes: dict) -> dict:
    """engine.py `load_products` for one raw product: Title, Description, BulletPoints, pricing, Price, options."""
    pricing = p.get("pricing")
    if not pricing:
        pricing, price_tag = [100.0], "$100.0"
    else:
        pricing = [float(Decimal(re.sub(r"[^\d.]", "", x))) for x in pricing.split("$")[1:]]
        price_tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
        pricing = pricing[:2]
    options = {}
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    bullets = p["small_description"] if isinstance(p["small_description"], list) else [p["small_description"]]
    attrs = attributes.get(p["asin"], {}).get("attributes") or ["DUMMY_ATTR"]
    return {
        "asin": p["asin"],
        "name": p["name"],
        "Title": p["name"],
        "Description": p.get("full_description") or "",
        "BulletPoints": bullets,
        "category": p.get("category", ""),
        "query": p.get("query", "").lower().strip(),
        "product_category": p.get("product_category", ""),
        "pricing": pricing,
        "Price": price_tag,
        "Rating": "N.A.",
        "Reviews": [],
        "options": options,
        "Attributes": attrs,
    }


class Catalog:
    """Products, prices, human goals and a BM25 index built from the official WebShop files in `data_dir`.

    Args:
        data_dir (`str`): folder holding `items_shuffle_1000.json`, `items_ins_v2_1000.json` and `items_human_ins.json`
            (or the full `items_shuffle.json` / `items_ins_v2.json` with `full=True`).
        full (`bool`, *optional*, defaults to `False`): use the full product set instead of the 1,000-product one.
        seed (`int`, *optional*, defaults to `0`): seeds the two draws that are unseeded in the official code (the
            price of products listed with a price range, and each goal's price limit).
    """

    def __init__(self, data_dir: str | Path, full: bool = False, seed: int = 0):
        data_dir = Path(data_dir)
        items_file, attr_file = FULL_FILES if full else SMALL_FILES
        missing = [f for f in (items_file, attr_file, HUMAN_INS_FILE) if not (data_dir / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"WebShop files {missing} not found in {data_dir}. Put the official product files there (WebShop "
                "`setup.sh -d small` downloads them from Google Drive), or build a small catalogue with "
                "`agentrl_shared.testing.write_synthetic_catalog`."
            )
        raw = json.loads((data_dir / items_file).read_text())
        attributes = json.loads((data_dir / attr_file).read_text())
        human = json.loads((data_dir / HUMAN_INS_FILE).read_text())
        rng = random.Random(seed)
        self.products, seen = [], set()
        for p in raw:
            if p["asin"] == "nan" or len(p["asin"]) > 10 or p["asin"] in seen:
                continue
            seen.add(p["asin"])
            self.products.append(_clean_product(p, attributes))
        self.by_asin = {p["asin"]: p for p in self.products}
        self.prices = {}
        for p in self.products:  # engine.py generate_product_prices
            lo_hi = p["pricing"]
            self.prices[p["asin"]] = lo_hi[0] if len(lo_hi) == 1 else rng.uniform(*lo_hi[:2])
        self.goals = self._human_goals(human, rng)
        random.Random(233).shuffle(self.goals)  # web_agent_text_env.py: random.seed(233); random.shuffle(goals)
        self._build_index()

    def _human_goals(self, human: dict, rng: random.Random) -> list[dict]:
        """goal.py `get_human_goals`: one goal per human instruction with attributes, with a price limit."""
        goals = []
        for p in self.products:
            for ins in human.get(p["asin"], []):
                if not ins["instruction_attributes"]:
                    continue
                above = [x for x in PRICE_RANGE if x > self.prices[p["asin"]]][:4]
                if len(above) >= 2:
                    _, upper = sorted(rng.sample(above, 2))
                    price_text = f", and price lower than {upper:.2f} dollars"
                else:
                    upper, price_text = 1000000, ""
                goals.append(
                    {
                        "asin": p["asin"],
                        "category": p["category"],
                        "query": p["query"],
                        "name": p["name"],
                        "product_category": p["product_category"],
                        "instruction_text": ins["instruction"].strip(".") + price_text,
                        "attributes": ins["instruction_attributes"],
                        "price_upper": upper,
                        "goal_options": ins["instruction_options"],
                    }
                )
        return goals

    def _build_index(self) -> None:
        from rank_bm25 import BM25Okapi

        docs = []
        for p in self.products:  # search_engine/convert_product_file_format.py document text
            option_text = ", and ".join(f"{k}: {', '.join(v)}" for k, v in p["options"].items())
            docs.append(tokenize(" ".join([p["Title"], p["Description"], p["BulletPoints"][0], option_text])))
        # Lucene BM25 defaults as pyserini uses them (k1 = 0.9, b = 0.4); postings keep scoring sparse.
        self.bm25 = BM25Okapi(docs, k1=0.9, b=0.4)
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, freqs in enumerate(self.bm25.doc_freqs):
            for term, tf in freqs.items():
                self._postings.setdefault(term, []).append((i, tf))

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[dict]:
        """Top-`k` products for `query` by BM25 (ties broken by catalogue order)."""
        bm, scores = self.bm25, {}
        for term in set(tokenize(query)):
            idf = bm.idf.get(term)
            if idf is None:
                continue
            for i, tf in self._postings[term]:
                norm = bm.k1 * (1 - bm.b + bm.b * bm.doc_len[i] / bm.avgdl)
                scores[i] = scores.get(i, 0.0) + idf * tf * (bm.k1 + 1) / (tf + norm)
        ranked = sorted(scores, key=lambda i: (-scores[i], i))[:k]
        return [self.products[i] for i in ranked]


@lru_cache(maxsize=4)
def load_catalog(data_dir: str, full: bool = False, seed: int = 0) -> Catalog:
    """A `Catalog`, built once per process and folder."""
    return Catalog(data_dir, full=full, seed=seed)


def _resolve_dir(data_dir: str | Path | None) -> str:
    if data_dir is None:
        raise ValueError(
            "WebShop needs data_dir=: the folder with the official product files (items_shuffle_1000.json, "
            "items_ins_v2_1000.json, items_human_ins.json) or one made by agentrl_shared.testing.write_synthetic_catalog."
        )
    return str(Path(data_dir).expanduser().resolve())


def goal_task(goal: dict, idx: int | str) -> dict:
    """Wrap a goal as a task dict (task_id, task_type = product category, the goal itself)."""
    return {"task_id": f"webshop_{idx}", "task_type": goal.get("category") or "webshop", "goal_idx": idx, "goal": goal}


def load_tasks(split: str, data_dir: str | Path | None = None, full: bool = False, seed: int = 0) -> list[dict]:
    """WebShop goals of `split` as tasks: `test` = shuffled goal indices 0-499, `train` = 500+ (verl-agent), `all`."""
    if split not in SPLITS:
        raise ValueError(f"Unknown WebShop split {split!r}; valid splits: {', '.join(SPLITS)}.")
    goals = load_catalog(_resolve_dir(data_dir), full, seed).goals
    idxs = {"test": range(min(NUM_TEST_GOALS, len(goals))), "train": range(NUM_TEST_GOALS, len(goals))}
    return [goal_task(goals[i], i) for i in idxs.get(split, range(len(goals)))]


_PRICE_LIMIT = re.compile(r"price lower than ([\d.]+) dollars")


def load_fixed_goals(path: str | Path) -> list[dict]:
    """Goals in the fixed-session format (`webshop.fixed100.json`: `task`, `session_idx`, `key` with `asin`, `query`,
    `name`, `goal_options`). Attributes and product category are not in that format (empty); the price limit is
    parsed from the instruction."""
    tasks = []
    for rec in json.loads(Path(path).read_text()):
        text = rec["task"].split("\n[Search]")[0].strip()
        limit = _PRICE_LIMIT.search(text)
        key = rec["key"]
        goal = {
            "asin": key["asin"],
            "category": key.get("category", ""),
            "query": key["query"].lower().strip(),
            "name": key["name"],
            "product_category": key.get("product_category", ""),
            "instruction_text": text,
            "attributes": key.get("attributes", []),
            "price_upper": float(limit.group(1)) if limit else 1000000,
            "goal_options": key["goal_options"],
        }
        tasks.append(goal_task(goal, rec["session_idx"]))
    return tasks


# ----------------------------------------------------------------------------------------------------------------
# The environment (web_agent_text_env.py WebAgentTextEnv + SimServer, text mode)
# ----------------------------------------------------------------------------------------------------------------


def parse_action(action: str) -> tuple[str, str | None]:
    """engine.py `parse_action`: `name[arg]` -> (name, arg); anything else -> (action, None)."""
    m = re.match(r"(.+)\[(.+)\]", action)
    return (action, None) if m is None else (m.group(1), m.group(2))


class WebShopEnv:
    """WebShop in text mode over a `Catalog`.

    Args:
        data_dir (`str`): catalogue folder (see `Catalog`).
        full (`bool`, *optional*, defaults to `False`): use the full product set.
        max_steps (`int`, *optional*, defaults to `15`): episode length limit (verl-agent `env.max_steps`).
        success_reward (`float`, *optional*, defaults to `10.0`): reward when the episode ends with score 1.0.
        seed (`int`, *optional*, defaults to `0`): catalogue seed (prices of ranged products, goal price limits).
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        full: bool = False,
        max_steps: int = 15,
        success_reward: float = 10.0,
        seed: int = 0,
    ):
        self.catalog = load_catalog(_resolve_dir(data_dir), full, seed)
        self.max_steps, self.success_reward = max_steps, success_reward
        self._done = True

    # --- pages: each returns the visible texts, in document order, and the clickables ---
    def _render(self) -> None:
        s = self._s
        head = ["Instruction:", self.goal["instruction_text"], BACK_TO_SEARCH]
        if s["page_kind"] == "index":
            texts = ["WebShop", "Instruction:", self.goal["instruction_text"], "Search"]
            clickables, search_bar = ["search"], True
        elif s["page_kind"] == "results":
            total = len(s["results"])
            products = s["results"][(s["page"] - 1) * PRODUCT_WINDOW : s["page"] * PRODUCT_WINDOW]
            nav = [PREV_PAGE, NEXT_PAGE] if s["page"] > 1 else [NEXT_PAGE]
            texts = head + [f"Page {s['page']} (Total results: {total})", *nav]
            for p in products:
                texts += [p["asin"], p["Title"], p["Price"]]
            clickables = [BACK_TO_SEARCH.lower(), *(b.lower() for b in nav), *(p["asin"].lower() for p in products)]
            search_bar = False
        elif s["page_kind"] == "item":
            p = self.catalog.by_asin[s["asin"]]
            texts = head + [PREV_PAGE]
            option_values = []
            for name, values in p["options"].items():
                texts += [name, *values]
                option_values += values
            texts += [p["Title"], f"Price: {p['Price']}", f"Rating: {p['Rating']}", *SUB_PAGES, END_BUTTON]
            buttons = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, END_BUTTON]
            clickables = list(dict.fromkeys([b.lower() for b in buttons] + option_values))
            search_bar = False
        elif s["page_kind"] == "sub":
            p = self.catalog.by_asin[s["asin"]]
            texts = head + [PREV_PAGE]
            if s["sub"] == "Description":
                texts.append(p["Description"])
            elif s["sub"] == "Features":
                texts += list(p["BulletPoints"])
            clickables, search_bar = [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()], False
        else:  # done page
            texts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(s["reward"])]
            clickables, search_bar = [], False
        self._obs = " [SEP] ".join(t.strip() for t in texts if t and t.strip())
        self._clickables, self._search_bar = clickables, search_bar

    def _step_out(self, reward: float, done: bool, score: float) -> Step:
        actions = (["search[<your query>]"] if self._search_bar else []) + [f"click[{c}]" for c in self._clickables]
        won = bool(done and score == 1.0)
        info = {
            "won": won,
            "task_score": score,
            "admissible_actions": actions,
            "available_actions": {"has_search_bar": self._search_bar, "clickables": list(self._clickables)},
            "task_type": self._task_type,
            "instruction": self.goal["instruction_text"],
            "asin": self._s.get("asin"),
        }
        return Step(observation=self._obs, reward=reward, done=done, info=info)

    def reset(self, task: dict, seed: int) -> Step:
        """Start a session on `task["goal"]` (a goal dict from `load_tasks` / `load_fixed_goals`): the search page.
        Nothing is random after the catalogue is built, so `seed` changes nothing."""
        self.goal = task["goal"]
        self._task_type = task.get("task_type", "webshop")
        self._s = {"page_kind": "index", "keywords": None, "page": None, "asin": None, "options": {}, "results": []}
        self._steps, self._done = 0, False
        self._render()
        return self._step_out(0.0, False, 0.0)

    def step(self, action: str) -> Step:
        """`search[keywords]` (from any page, as in the official env) or `click[clickable]`; anything else leaves
        the page unchanged with reward 0."""
        if self._done:
            raise RuntimeError("WebShop episode is over (or never started): call reset(task, seed) first.")
        s = self._s
        name, arg = parse_action(action)
        arg = arg.lower() if arg is not None else None
        score, done = 0.0, False
        if name == "search" and arg:
            self._search(arg.split(" "), page=1)
        elif name == "click" and arg in self._clickables and arg != "search":
            if arg == END_BUTTON.lower():
                product = self.catalog.by_asin[s["asin"]]
                score, self._reward_info = get_reward(product, self.goal, self.catalog.prices[s["asin"]], s["options"])
                s.update(page_kind="done", reward=score)
                done = True
            elif arg == BACK_TO_SEARCH.lower():
                s.update(page_kind="index", keywords=None, page=None, asin=None, options={}, results=[])
            elif arg == NEXT_PAGE.lower() and s["page_kind"] == "results":
                self._search(s["keywords"], page=s["page"] + 1)
            elif arg == PREV_PAGE.lower() and s["page_kind"] == "results":
                self._search(s["keywords"], page=s["page"] - 1)
            elif arg == PREV_PAGE.lower() and s["page_kind"] == "sub":
                s["page_kind"] = "item"
            elif arg == PREV_PAGE.lower() and s["page_kind"] == "item":
                self._search(s["keywords"], page=s["page"])
            elif arg in (p.lower() for p in SUB_PAGES):
                s.update(page_kind="sub", sub=arg.capitalize())
            elif s["page_kind"] == "results":  # a product link
                s.update(page_kind="item", asin=arg.upper(), options={})
            else:  # an option value on the item page: set it under its option name
                for opt_name, values in self.catalog.by_asin[s["asin"]]["options"].items():
                    if arg in values:
                        s["options"][opt_name] = arg
                        break
        self._steps += 1
        self._render()
        self._done = done or self._steps >= self.max_steps
        reward = self.success_reward if (done and score == 1.0) else 0.0
        return self._step_out(reward, self._done, score)

    def _search(self, keywords: list[str], page: int) -> None:
        s = self._s
        if s["keywords"] != keywords or not s["results"]:
            s["results"] = self.catalog.search(" ".join(keywords))
        s.update(page_kind="results", keywords=keywords, page=page, asin=None, options={})

    def close(self) -> None:
        self._done = True
