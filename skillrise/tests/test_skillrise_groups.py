"""Task groups: the official group-file layout (on lines written here in that layout), the fallback rules (WebShop by
product category with a goal fixed per task, ScienceWorld in variation order), the WebShop paper config's groups, and
a group's goals staying the same in every rollout."""

import json
from pathlib import Path

import pytest

from agentrl_shared.envs.webshop import WebShopEnv, load_fixed_goals
from agentrl_shared.testing import write_synthetic_catalog
from skillrise.cli import load, panel_drawer, train_groups
from skillrise.groups import (
    build_groups,
    difficulty_fn,
    group_file,
    load_group_file,
    pin_webshop_goals,
    webshop_difficulty,
)


REAL_WEBSHOP = Path(__file__).resolve().parents[2] / "shared" / "data" / "webshop"
if not REAL_WEBSHOP.is_dir():
    REAL_WEBSHOP = Path("/work/shared/data/webshop")


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    return str(write_synthetic_catalog(tmp_path_factory.mktemp("webshop")))


def write_lines(path: Path, groups: list[dict]) -> Path:
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def sw_task(name, v):
    return {"task_id": f"{name}:{v}", "task_type": name, "task_name": name, "variation": v}


# --- the official layout -----------------------------------------------------------------------------------------
def test_scienceworld_group_file_layout(tmp_path):
    tasks = [sw_task("boil", v) for v in range(6)] + [sw_task("melt", v) for v in range(3)]
    path = write_lines(tmp_path / "sw.jsonl", [
        {"group_id": "boil_K3_0", "task_type": "boil", "K": 3, "tasks": [
            {"task_id": 0, "variation": 1, "task_type": "boil", "padded": False},
            {"task_id": 0, "variation": 4, "task_type": "boil", "padded": False},
            {"task_id": 0, "variation": 5, "task_type": "boil", "padded": False}]},
        {"group_id": "boil_K3_1", "task_type": "boil", "K": 3, "tasks": [
            {"task_id": 0, "variation": 0, "task_type": "boil", "padded": False},
            {"task_id": 0, "variation": 4, "task_type": "boil", "padded": True},
            {"task_id": 0, "variation": 2, "task_type": "boil", "padded": False}]},
        {"group_id": "melt_K3_0", "task_type": "melt", "K": 3, "tasks": [
            {"task_id": 1, "variation": 0, "task_type": "melt", "padded": False},
            {"task_id": 1, "variation": 1, "task_type": "melt", "padded": False},
            {"task_id": 1, "variation": 2, "task_type": "melt", "padded": False}]},
    ])  # fmt: skip
    groups = load_group_file(path, "scienceworld", tasks, 3, "train", seed=0)
    by_first = {g[0]["task_id"]: g for g in groups}
    assert set(by_first) == {"boil:1", "boil:0", "melt:0"}
    # the file's in-group order is kept (not re-sorted), padded and family come from the file
    assert [t["task_id"] for t in by_first["boil:0"]] == ["boil:0", "boil:4", "boil:2"]
    assert [t["padded"] for t in by_first["boil:0"]] == [False, True, False]
    assert {t["family"] for t in by_first["melt:0"]} == {"melt"}
    assert by_first["boil:1"][1] == {**sw_task("boil", 4), "padded": False, "family": "boil"}
    assert groups == load_group_file(path, "scienceworld", tasks, 3, "train", seed=0)  # one seeded shuffle
    with pytest.raises(ValueError, match="group_size_k = 2"):
        load_group_file(path, "scienceworld", tasks, 2, "train")
    with pytest.raises(ValueError, match="boil:5 of group boil_K3_0 is not among"):
        load_group_file(path, "scienceworld", tasks[:5] + tasks[6:], 3, "train")


def test_alfworld_group_file_layout(tmp_path):
    tasks = [{"task_id": f"train/pick_x-{i}/trial_{i}", "task_type": "pick", "gamefile": f"/g/{i}"} for i in range(3)]
    path = write_lines(tmp_path / "alf.jsonl", [{"group_id": "pick_K3_0", "task_type": "pick_and_place_simple", "K": 3,
        "tasks": [{"task_dir": f"pick_x-{i}", "trial": f"trial_{i}", "padded": False} for i in (2, 0, 1)]}])  # fmt: skip
    (g,) = load_group_file(path, "alfworld", tasks, 3, "train")
    assert [t["gamefile"] for t in g] == ["/g/2", "/g/0", "/g/1"]
    assert {t["family"] for t in g} == {"pick_and_place_simple"}


def test_webshop_group_file_layout(tmp_path, catalog_dir):
    tasks = pin_webshop_goals([{"task_id": f"webshop_{i}", "task_type": "webshop", "goal_idx": i} for i in range(21)],
                              0, catalog_dir)  # fmt: skip
    beauty = [t for t in tasks if t["task_type"] == "beauty"][:3]
    entries = [{"session_idx": t["goal_idx"], "asin": t["goal"]["asin"], "category": "beauty",
                "query": t["goal"]["query"], "product_category": t["goal"]["product_category"],
                "instruction_text": t["goal"]["instruction_text"], "n_attr": len(t["goal"]["attributes"]),
                "n_opt": len(t["goal"]["goal_options"]), "difficulty": webshop_difficulty(t), "padded": False}
               for t in beauty]  # fmt: skip
    path = write_lines(tmp_path / "ws.jsonl", [{"group_id": "beauty_K3_0", "task_type": "beauty", "K": 3,
                                                 "tasks": entries}])  # fmt: skip
    (g,) = load_group_file(path, "webshop", tasks, 3, "train")
    assert [t["goal_idx"] for t in g] == [e["session_idx"] for e in entries]
    assert all(t["env_seed"] == 0 and t["goal"]["instruction_text"] == e["instruction_text"]
               for t, e in zip(g, entries, strict=True))  # fmt: skip
    # a goal list drawn with another seed (or other product files) does not match the file: named, not trained on
    other = pin_webshop_goals([{k: t[k] for k in ("task_id", "task_type", "goal_idx")} for t in tasks], 7, catalog_dir)
    if any(o["goal"]["instruction_text"] != t["goal"]["instruction_text"] for o, t in zip(other, tasks, strict=True)
           if t in beauty):  # fmt: skip
        with pytest.raises(ValueError, match="the goal lists differ"):
            load_group_file(path, "webshop", other, 3, "train")


def test_group_file_source(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLRISE_GROUPS", str(tmp_path))
    assert group_file("webshop", "rules") is None
    assert group_file("webshop", "official") is None  # not fetched: the rules, with a warning
    assert group_file("textrooms", "official") is None  # no official file for TextRooms
    (tmp_path / "skillrise_webshop_K3.jsonl").write_text("")
    assert group_file("webshop", "official") == tmp_path / "skillrise_webshop_K3.jsonl"
    with pytest.raises(FileNotFoundError, match="no such group file"):
        group_file("webshop", str(tmp_path / "missing.jsonl"))


# --- the fallback rules ------------------------------------------------------------------------------------------
def test_scienceworld_rule_orders_by_variation():
    tasks = [sw_task("boil", v) for v in (7, 3, 11, 0, 5, 2, 9)]
    groups = build_groups(tasks, "scienceworld", 3, seed=0, difficulty=difficulty_fn("scienceworld"))
    for g in groups:
        real = [t["variation"] for t in g]
        assert real == sorted(real)
    assert sorted(t["variation"] for g in groups for t in g if not t["padded"]) == [0, 2, 3, 5, 7, 9, 11]


def test_webshop_rule_category_families_fixed_goals(catalog_dir):
    raw = [{"task_id": f"webshop_{i}", "task_type": "webshop", "goal_idx": i} for i in range(21)]
    tasks = pin_webshop_goals(raw, 0, catalog_dir)
    groups = build_groups(tasks, "webshop", 3, seed=0, difficulty=difficulty_fn("webshop"))
    assert {g[0]["family"] for g in groups} == {"fashion", "beauty", "electronics", "grocery", "home"}
    for g in groups:
        assert {t["goal"]["category"] for t in g} == {g[0]["family"]}  # one product category per group
        d = [len(t["goal"]["attributes"]) + len(t["goal"]["goal_options"]) for t in g]
        assert d == sorted(d)  # n_attr + n_opt, increasing
    # the goal is the one of goal_idx in the seed-0 goal list, whatever the episode seed
    env = WebShopEnv(data_dir=catalog_dir, service="local")
    for t in tasks[:5]:
        instructions = {env.reset(t, seed=s).info["instruction"] for s in (0, 1, 1000)}
        assert instructions == {t["goal"]["instruction_text"]}


def test_webshop_paper_config_builds_groups(catalog_dir, monkeypatch):
    monkeypatch.setenv("WEBSHOP_DATA", catalog_dir)
    # the synthetic catalogue has 21 goals, all below the train split's 500: train on `all` of them here
    cfg = load("webshop_qwen3-4b_paper", ["trainer.use_cpu=true", "env.train_split=all", "env.groups=rules"])
    groups = train_groups(cfg)
    assert groups and all(len(g) == 3 and len({t["family"] for t in g}) == 1 for g in groups)
    assert all("goal" in t and t["env_seed"] == 0 for g in groups for t in g)
    assert train_groups(cfg) == groups  # the same groups (and goals) every time they are built
    panel = panel_drawer(load("webshop_qwen3-4b_paper", ["trainer.use_cpu=true", "env.eval_split=all",
                                                         "env.eval_tasks=6"]))()  # fmt: skip
    assert all(t["env_seed"] == 1000 for g in panel["repeat"] for t in g)  # validation goals: seed + 1000


def test_group_goals_same_in_every_rollout(catalog_dir):
    """Two rollouts of the same group with different trial seeds play the same goals, position by position."""
    from transformers import AutoTokenizer

    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.models import model_path
    from agentrl_shared.prompts import make_prompt
    from skillrise.trial import TrialRunner

    raw = [{"task_id": f"webshop_{i}", "task_type": "webshop", "goal_idx": i} for i in range(21)]
    (group,) = [g for g in build_groups(pin_webshop_goals(raw, 0, catalog_dir), "webshop", 3, seed=0,
                                        difficulty=difficulty_fn("webshop")) if g[0]["family"] == "beauty"][:1]  # fmt: skip
    tok = AutoTokenizer.from_pretrained(model_path("tiny-qwen3"), padding_side="left")
    action = tok("<action>click[back to search]</action>", add_special_tokens=False).input_ids

    def generate(prompts):
        return [action for _ in prompts], None

    seen = []
    with EnvPool(lambda: WebShopEnv(data_dir=catalog_dir, service="local"), 2, 30.0, 0) as pool:
        runner = TrialRunner(pool, make_prompt("webshop", 5), tok, "webshop", 1, 4096, "none")
        for seeds in ([3, 4], [11, 12]):
            trials = runner.run([group, group], [0, 0], seeds, generate, K=3)
            seen.append([[t.episodes[p].info["instruction"] for p in range(3)] for t in trials])
    expected = [t["goal"]["instruction_text"] for t in group]
    assert seen == [[expected, expected], [expected, expected]]


# --- real data ---------------------------------------------------------------------------------------------------
@pytest.mark.realdata
def test_webshop_groups_on_real_goals():
    path = REAL_WEBSHOP / "webshop.fixed100.subset.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    tasks = load_fixed_goals(path)
    groups = build_groups(tasks, "webshop", 3, seed=0, difficulty=difficulty_fn("webshop"))
    assert sum(not t["padded"] for g in groups for t in g) == len(tasks)
    for g in groups:
        d = [webshop_difficulty(t) for t in g]
        assert d == sorted(d) and len({t["family"] for t in g}) == 1
    assert all(t["goal"]["instruction_text"] for g in groups for t in g)
    if not (REAL_WEBSHOP / "items_shuffle_1000.json").is_file():
        return  # the product files are not shipped with the goals: category families need them
    pinned = pin_webshop_goals([{"task_id": "webshop_0", "task_type": "webshop", "goal_idx": 0}], 0, str(REAL_WEBSHOP))
    assert pinned[0]["task_type"] == pinned[0]["goal"]["category"]
