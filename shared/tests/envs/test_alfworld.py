"""ALFWorld adapter tests: synthetic games in the official layout (real engine, no download) and `realdata` games.

Needs the `alfworld` extra; skipped without it. Real games are read from `$AGENTRL_DATA/alfworld`
(default `../shared/data/alfworld` next to the repository).
"""

import json
import os
import random
from pathlib import Path

import pytest


pytest.importorskip("alfworld")

from agentrl_shared.envs import alfworld as A  # noqa: E402
from agentrl_shared.envs import load_tasks, make_env  # noqa: E402


REPO_ROOT = Path(__file__).resolve().parents[3]
REAL = Path(os.environ.get("AGENTRL_DATA", REPO_ROOT.parent / "shared" / "data")) / "alfworld"


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    root = tmp_path_factory.mktemp("alfworld")
    A.write_synthetic_games(root, "train", n_games=4)
    A.write_synthetic_games(root, "valid_seen", n_games=2, with_game_files=False)
    return root


@pytest.fixture(scope="module")
def env():
    env = A.AlfworldEnv()
    yield env
    env.close()


def play_expert(env, task, limit=200):
    random.seed(0)  # alfworld's hand-coded expert explores with the global `random`
    step = env.reset(task, seed=0)
    while not step.done:
        step = env.step(step.info["expert_plan"][0])
    return step


def test_load_tasks_official_layout(games):
    tasks = load_tasks("alfworld", "train", data_dir=games)
    assert [t["task_type"] for t in tasks] == ["pick", "pick", "cool", "cool"]
    assert all(t["task_id"].startswith("train/") and Path(t["gamefile"]).is_file() for t in tasks)
    assert load_tasks("alfworld", "eval_in_distribution", data_dir=games) == load_tasks(
        "alfworld", "valid_seen", data_dir=games
    )


def test_builds_missing_game_file_outside_data_dir(games, tmp_path):
    tasks = A.load_tasks("valid_seen", games, build_dir=tmp_path)
    assert len(tasks) == 2
    for t in tasks:
        assert Path(t["gamefile"]).is_relative_to(tmp_path)
        game = json.loads(Path(t["gamefile"]).read_text())
        assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable"}
        assert "UNKNOWN GOAL" not in game["grammar"]
    assert not list((games / "json_2.1.1" / "valid_seen").glob("*/*/game.tw-pddl"))


def test_expert_wins_with_engine_commands(games, env):
    for task in A.load_tasks("train", games):
        first = env.reset(task, seed=0)
        assert "Your task is to:" in first.observation
        assert first.info["task_type"] == task["task_type"] and first.info["gamefile"] == task["gamefile"]
        assert "look" in first.info["admissible_actions"] and first.reward == 0.0
        last = play_expert(env, task)
        assert last.info["won"] and last.done and last.reward == 10.0
        assert last.observation.startswith("You move the")  # alfworld 0.4: "move X to Y"


def test_reset_is_deterministic(games, env):
    task = A.load_tasks("train", games)[2]
    a, b = env.reset(task, seed=1), env.reset(task, seed=2)
    assert a.observation == b.observation and a.info["admissible_actions"] == b.info["admissible_actions"]


def test_invalid_action_and_step_limit(games):
    env = make_env("alfworld", max_steps=3, expert_type="none")
    task = A.load_tasks("train", games)[0]
    env.reset(task, seed=0)
    step = env.step("fly to the moon")
    assert step.observation == "Nothing happens." and step.reward == 0.0 and not step.done
    env.step("look")
    step = env.step("inventory")
    assert step.done and not step.info["won"] and step.info["expert_plan"] == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    env.close()


def test_errors_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="ALFWORLD_DATA"):
        A.load_tasks("train")
    with pytest.raises(ValueError, match="valid splits"):
        A.load_tasks("test")
    with pytest.raises(ValueError, match="valid"):
        A.AlfworldEnv(expert_type="oracle")
    assert A.task_type_of("json_2.1.1/train/pick_two_obj_and_place-Book-None-Desk-313/trial_1/game.tw-pddl") == "pick2"


def _real_tasks():
    if not (REAL / "json_2.1.1").is_dir():
        pytest.skip(f"no ALFWorld data at {REAL}")
    return {
        s: A.load_tasks(s, REAL) for s in ("valid_seen", "valid_unseen", "train") if (REAL / "json_2.1.1" / s).is_dir()
    }


@pytest.mark.realdata
def test_alfworld_realdata_tasks_types_and_admissible_actions():
    by_split = _real_tasks()
    assert any(by_split.values())
    env = A.AlfworldEnv(expert_type="none")  # one game per task type is reset and stepped; all are type-checked
    seen_types = set()
    for tasks in by_split.values():
        for t in tasks:
            assert t["task_type"] == A.TASK_TYPES[Path(t["gamefile"]).parent.parent.name.split("-")[0]]
            if t["task_type"] in seen_types:
                continue
            seen_types.add(t["task_type"])
            step = env.reset(t, seed=0)
            acts = step.info["admissible_actions"]
            assert "Your task is to:" in step.observation
            assert any(a.startswith("go to ") for a in acts) and "inventory" in acts and "look" in acts
            step = env.step(next(a for a in acts if a.startswith("go to ")))
            assert step.observation.startswith(("You arrive at", "Nothing happens")) or "arrive" in step.observation
    env.close()


@pytest.mark.realdata
@pytest.mark.slow
def test_alfworld_realdata_expert_plays_every_game():
    """Every game, alfworld's hand-coded expert, 50 steps: its actions are always admissible and a win pays 10.
    The hand-coded expert is not a perfect solver (it explores and can stall): on the shared 60 games it won about
    half within 50 steps, so only a floor is asserted."""
    env = A.AlfworldEnv(max_steps=50)
    results = []
    for tasks in _real_tasks().values():
        for t in tasks:
            random.seed(0)
            step = env.reset(t, seed=0)
            while not step.done:
                action = step.info["expert_plan"][0]
                assert action in step.info["admissible_actions"]
                step = env.step(action)
            results.append(step.info["won"])
            if step.info["won"]:
                assert step.reward == 10.0
    env.close()
    assert sum(results) >= 0.25 * len(results), f"expert won {sum(results)}/{len(results)}"
