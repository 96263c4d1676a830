"""Small synthetic data in the official file formats, for tests, benchmarks and CPU-scale runs (no download).

- `write_synthetic_games`: ALFWorld trials in the `json_2.1.1/<split>/<task>/<trial>/` layout, played by the real
  TextWorld engine;
- `write_synthetic_catalog`: a WebShop catalogue in the official file formats (`items_shuffle_1000.json`,
  `items_ins_v2_1000.json`, `items_human_ins.json`);
- `write_synthetic_qa`: a Search-R1 corpus (`{"id", "contents"}`) and a QA file with several data sources.
"""

import json
import os
from pathlib import Path

from .envs.alfworld import _engine, build_game_file
from .envs.webshop import HUMAN_INS_FILE, SMALL_FILES


# ----------------------------------------------------------------------------------------------------------------
# ALFWorld: synthetic games in the official layout; no download, the real engine plays them.
# ----------------------------------------------------------------------------------------------------------------

_RECEPTACLES = {  # receptacle type -> (openable, location)
    "CounterTop": (False, "loc_bar_4_bar_1_bar_1_bar_45"),
    "Fridge": (True, "loc_bar_2_bar_3_bar_0_bar_30"),
    "Cabinet": (True, "loc_bar__minus_1_bar_2_bar_3_bar_15"),
    "DiningTable": (False, "loc_bar_0_bar__minus_2_bar_2_bar_60"),
}
_OBJECTS = ("Apple", "Mug", "Potato")
_SYNTHETIC_TYPES = ("pick_and_place_simple", "pick_cool_then_place_in_recep")


def _mangle(name: str, i: int) -> str:
    return f"{name}_bar__plus_0{i}_dot_00_bar__plus_00_dot_90_bar__minus_00_dot_5{i}"


def synthetic_problem(task_type: str, obj: str, recep: str, start: str = "CounterTop") -> str:
    """A PDDL problem in the `alfred` domain: four receptacles, the three objects on `start` (the target first),
    the goal from alfworld's goal library for `task_type`."""
    from alfworld.gen import goal_library

    objects = {name: _mangle(name, i + 1) for i, name in enumerate(_OBJECTS)}
    receps = {name: _mangle(name, 5 + i) for i, name in enumerate(_RECEPTACLES)}
    lines = ["(define (problem synthetic)", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{name}Type - otype" for name in _OBJECTS] + [f"{name}Type - rtype" for name in _RECEPTACLES]
    lines += [f"{m} - object" for m in objects.values()] + [f"{m} - receptacle" for m in receps.values()]
    lines += [f"{loc} - location" for _, loc in _RECEPTACLES.values()] + [
        "loc_bar_0_bar_0_bar_0_bar_0 - location",
        ")",
    ]
    init = ["(atLocation agent1 loc_bar_0_bar_0_bar_0_bar_0)"]
    for name, mangled in receps.items():
        openable, loc = _RECEPTACLES[name]
        init += [f"(receptacleType {mangled} {name}Type)", f"(receptacleAtLocation {mangled} {loc})"]
        init += [f"(canContain {name}Type {o}Type)" for o in _OBJECTS]
        init += [f"(openable {mangled})"] if openable else []
    for name, mangled in objects.items():
        init += [f"(objectType {mangled} {name}Type)", f"(pickupable {mangled})", f"(coolable {mangled})"]
        init += [f"(inReceptacle {mangled} {receps[start]})", f"(objectAtLocation {mangled} {_RECEPTACLES[start][1]})"]
    goal = goal_library.gdict[task_type]["pddl"].format(obj=obj, recep=recep, toggle="", mrecep="").replace("#", "-")
    return "\n".join(lines + ["(:init", *init, ")", goal.strip()]) + "\n"


def write_synthetic_games(
    root: str | os.PathLike, split: str = "train", n_games: int = 4, with_game_files: bool = True
) -> list[Path]:
    """Write `n_games` small games under `<root>/json_2.1.1/<split>/` in the official layout.

    Games alternate `pick_and_place_simple` and `pick_cool_then_place_in_recep` over (object, receptacle) pairs.
    Each trial has `initial_state.pddl` and `traj_data.json`; with `with_game_files`, also `game.tw-pddl` (built as
    `build_game_file` does, marked solvable). Returns the trial folders.
    """
    _engine()
    root = Path(root)
    targets = [("Apple", "Fridge"), ("Mug", "Cabinet"), ("Potato", "DiningTable"), ("Apple", "Cabinet")]
    trials = []
    for i in range(n_games):
        task_type = _SYNTHETIC_TYPES[i % 2]
        obj, recep = targets[(i // 2) % len(targets)]
        trial = root / "json_2.1.1" / split / f"{task_type}-{obj}-None-{recep}-{900 + i}" / f"trial_T0000_{i:06d}"
        trial.mkdir(parents=True, exist_ok=True)
        traj = {
            "task_type": task_type,
            "task_id": f"synthetic_{i}",
            "pddl_params": {
                "object_target": obj,
                "parent_target": recep,
                "toggle_target": "",
                "mrecep_target": "",
                "object_sliced": False,
            },
            "turk_annotations": {"anns": [{"task_desc": f"Put a {obj.lower()} in the {recep.lower()}."}]},
        }
        (trial / "traj_data.json").write_text(json.dumps(traj))
        (trial / "initial_state.pddl").write_text(synthetic_problem(task_type, obj, recep))
        if with_game_files:
            path = build_game_file(trial, trial / "game.tw-pddl", root)
            game = json.loads(path.read_text())
            game["solvable"] = True
            path.write_text(json.dumps(game))
        trials.append(trial)
    return trials


# ----------------------------------------------------------------------------------------------------------------
# A small catalogue in the official file formats (tests and CPU-scale runs)
# ----------------------------------------------------------------------------------------------------------------

_SYNTH = [  # (name, category, query, product_category, price, options, attributes, instruction, goal options)
    (
        "Men's Running Shoes Lightweight Breathable Sneakers",
        "fashion",
        "men's running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
        "$45.99",
        {"color": ["black", "navy blue"], "size": ["9", "10", "11"]},
        ["lightweight", "breathable", "rubber sole"],
        "i need lightweight running shoes for men that are breathable",
        ["black", "10"],
    ),
    (
        "Organic Green Tea Bags Caffeine Free Herbal Tea 100 Count",
        "grocery",
        "green tea",
        "Grocery & Gourmet Food › Beverages › Tea › Green",
        "$12.50",
        {"size": ["50 count", "100 count"]},
        ["organic", "caffeine free"],
        "i want organic caffeine free green tea bags",
        ["100 count"],
    ),
    (
        "Wireless Bluetooth Headphones Noise Cancelling Over Ear",
        "electronics",
        "bluetooth headphones",
        "Electronics › Headphones › Over-Ear Headphones",
        "$59.00 $89.00",
        {"color": ["black", "white"]},
        ["noise cancelling", "wireless"],
        "i am looking for wireless noise cancelling headphones",
        ["white"],
    ),
    (
        "Soft Cotton Bath Towel Set Quick Dry Bathroom Towels",
        "beauty",
        "bath towels",
        "Home & Kitchen › Bath › Towels › Bath Towels",
        "$24.99",
        {"color": ["grey", "white"], "size": ["set of 4", "set of 6"]},
        ["quick dry", "cotton"],
        "i need a quick dry cotton bath towel set",
        ["grey", "set of 6"],
    ),
    (
        "Stainless Steel Water Bottle Insulated Leak Proof 32 oz",
        "home",
        "water bottle",
        "Sports & Outdoors › Accessories › Water Bottles",
        "$18.75",
        {},
        ["leak proof", "stainless steel"],
        "i want a leak proof stainless steel water bottle",
        [],
    ),
    (
        "Women's Yoga Pants High Waist Workout Leggings",
        "fashion",
        "yoga pants",
        "Clothing, Shoes & Jewelry › Women › Clothing › Active › Leggings",
        "$21.00",
        {"color": ["black", "purple"], "size": ["small", "medium", "large"]},
        ["high waist"],
        "i am looking for high waist yoga pants for women",
        ["purple", "medium"],
    ),
]


def write_synthetic_catalog(data_dir: str | Path, n_copies: int = 2) -> Path:
    """Write `items_shuffle_1000.json`, `items_ins_v2_1000.json` and `items_human_ins.json` with a few dozen
    products in the official raw formats (scraped fields, `customization_options`, `$`-prices), each product type
    repeated `n_copies` times with distinct ASINs; the first copy carries one human instruction. Returns the folder."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    items, attrs, human = [], {}, {}
    for copy in range(n_copies):
        for j, (name, cat, query, pcat, price, options, attributes, ins, goal_opts) in enumerate(_SYNTH):
            asin = f"B0SYN{copy:02d}{j:03d}"
            title = name if copy == 0 else f"{name} Value Pack {copy}"
            items.append(
                {
                    "asin": asin,
                    "name": title,
                    "category": cat,
                    "query": query,
                    "product_category": pcat,
                    "full_description": f"{title}. A {query} for everyday use.",
                    "small_description": [f"{a.capitalize()} design" for a in attributes],
                    "pricing": price if copy == 0 else f"${20 + 7 * j + copy}.00",
                    "images": [f"https://example.invalid/{asin}.jpg"],
                    "customization_options": {
                        k.capitalize(): [{"value": v.title(), "image": None} for v in vals]
                        for k, vals in options.items()
                    }
                    or None,
                }
            )
            attrs[asin] = {"attributes": attributes if copy == 0 else attributes[:1]}
            if copy == 0:  # items_ins_v2 carries the synthetic-goal instruction of the products that have one
                attrs[asin].update(instruction=ins, instruction_attributes=attributes)
            if copy == 0:
                human[asin] = [
                    {"instruction": ins, "instruction_attributes": attributes, "instruction_options": goal_opts}
                ]
    (data_dir / SMALL_FILES[0]).write_text(json.dumps(items))
    (data_dir / SMALL_FILES[1]).write_text(json.dumps(attrs))
    (data_dir / HUMAN_INS_FILE).write_text(json.dumps(human))
    return data_dir


# ----------------------------------------------------------------------------------------------------------------
# A small corpus and QA set (tests, CPU-scale runs)
# ----------------------------------------------------------------------------------------------------------------

_FACTS = [
    ("Paris", "Paris is the capital and largest city of France, on the Seine river.", "capital of france", "Paris"),
    (
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
        "highest mountain",
        "Mount Everest",
    ),  # noqa: E501
    (
        "Marie Curie",
        "Marie Curie was a physicist and chemist who discovered polonium and radium.",
        "discovered polonium",
        "Marie Curie",
    ),  # noqa: E501
    (
        "Pacific Ocean",
        "The Pacific Ocean is the largest and deepest of Earth's five oceanic divisions.",
        "largest ocean",
        "Pacific Ocean",
    ),  # noqa: E501
    (
        "Jupiter",
        "Jupiter is the fifth planet from the Sun and the largest planet in the Solar System.",
        "largest planet",
        "Jupiter",
    ),  # noqa: E501
    (
        "Amazon River",
        "The Amazon River in South America is the largest river by discharge volume of water.",
        "largest river by discharge",
        "Amazon River",
    ),  # noqa: E501
]


def write_synthetic_qa(data_dir: str | Path) -> Path:
    """Write `corpus.jsonl` (Search-R1 `{"id", "contents"}` with a quoted title line) and `test.jsonl` (questions
    from several data sources with `golden_answers`). Returns the folder."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with (data_dir / "corpus.jsonl").open("w") as f:
        for i, (title, text, _, _) in enumerate(_FACTS):
            f.write(json.dumps({"id": str(i), "contents": f'"{title}"\n{text}'}) + "\n")
    sources = ["nq", "triviaqa", "hotpotqa", "popqa", "musique", "bamboogle"]
    with (data_dir / "test.jsonl").open("w") as f:
        for i, (_, _, clue, answer) in enumerate(_FACTS):
            rec = {"id": f"test_{i}", "question": f"What is the {clue}?", "golden_answers": [answer, answer.lower()]}
            f.write(json.dumps({**rec, "data_source": sources[i % len(sources)]}) + "\n")
    return data_dir
