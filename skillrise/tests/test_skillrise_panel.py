"""The validation panel: official random draws (without replacement, seed + 1000, a new one at every validation) over
the whole eval split, and the fixed panel (every family in turn); task-type histograms on the real ScienceWorld test
split and ALFWorld valid_seen; the CPU config's panel is the first 48 valid_seen tasks, as before."""

import os
from collections import Counter
from pathlib import Path

import pytest

from agentrl_shared.envs import load_tasks
from skillrise.cli import load, panel_drawer


def types(groups):
    return Counter(g[0]["task_type"] for g in groups)


def test_scienceworld_panel_task_type_histogram(monkeypatch):
    pytest.importorskip("scienceworld")
    import agentrl_shared.envs

    tasks = load_tasks("scienceworld", "test")  # one JVM start for the whole test
    monkeypatch.setattr(agentrl_shared.envs, "load_tasks", lambda name, split, **kw: list(tasks))
    cfg = load("scienceworld_qwen3-4b_paper", ["trainer.use_cpu=true"])
    draw = panel_drawer(cfg)
    split = Counter(t["task_type"] for t in tasks)
    assert len(split) == 30 and sum(split.values()) == 1819
    panels = [draw()["repeat"] for _ in range(8)]
    for p in panels:
        ids = [g[0]["task_id"] for g in p]
        assert len(ids) == 128 == len(set(ids))  # without replacement
        assert all(len(g) == 3 and len({t["task_id"] for t in g}) == 1 for g in p)  # repeat: one task K times
        hist = types(p)
        # a draw follows the split's proportions: the largest task (348 / 1819 variations) near 24 of 128, not 66 %
        # find-* tasks as the first 128 in task order gave (7 task types)
        assert 10 <= hist[max(split, key=split.get)] <= 40 and len(hist) >= 15
    assert len({tuple(g[0]["task_id"] for g in p) for p in panels}) == 8  # redrawn at every validation
    assert set().union(*(types(p) for p in panels)) == set(split)  # every task type is drawn
    assert [g[0]["task_id"] for g in panel_drawer(cfg)()["repeat"]] == [g[0]["task_id"] for g in panels[0]]  # seeded
    fixed = panel_drawer(load("scienceworld_qwen3-4b_paper", ["trainer.use_cpu=true", "env.eval_panel=fixed"]))
    first, second = fixed()["repeat"], fixed()["repeat"]
    assert first == second and len(first) == 128
    hist = types(first)
    assert set(hist) == set(split) and min(hist.values()) >= 4  # every task type, 4 or 5 each


@pytest.mark.realdata
def test_alfworld_panel_covers_every_task_type(monkeypatch):
    here = Path(__file__).resolve().parents[2]
    found = [
        Path(d)
        for d in (os.environ.get("ALFWORLD_DATA"), here / "shared" / "data" / "alfworld", "/work/shared/data/alfworld")
        if d and (Path(d) / "json_2.1.1" / "valid_seen").is_dir()
    ]
    data = found[0] if found else None  # fmt: skip
    if data is None:
        pytest.skip("ALFWorld games not found ($ALFWORLD_DATA, ../shared/data/alfworld)")
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    cfg = load("alfworld_qwen3-4b_paper", ["trainer.use_cpu=true", "env.eval_panel=fixed", "env.eval_tasks=30"])
    hist = types(panel_drawer(cfg)()["repeat"])
    assert len(hist) == 6 and min(hist.values()) == 5


def test_cpu_config_panel_is_unchanged():
    cfg = load("textrooms_smollm2-135m_cpu", [])
    panel = panel_drawer(cfg)()
    first48 = load_tasks("textrooms", "valid_seen", num_tasks=256, num_rooms=3)[:48]
    assert [g[0]["task_id"] for g in panel["repeat"]] == [t["task_id"] for t in first48]
    assert len(panel["cross"]) == 16


def test_unknown_panel_is_refused():
    from agentrl_shared.config import ConfigError

    with pytest.raises(ConfigError, match="random, fixed"):
        load("smoke", ["env.eval_panel=first"])
