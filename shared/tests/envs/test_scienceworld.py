"""ScienceWorld adapter tests on the real engine (Java 17, offline). One JVM shared per module; skipped without the
`scienceworld` extra or Java.
"""

import shutil

import pytest


pytest.importorskip("scienceworld")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs a Java runtime", allow_module_level=True)

from agentrl_shared.envs import scienceworld as SW  # noqa: E402


@pytest.fixture(scope="module")
def env():
    env = SW.ScienceWorldAdapter(simplifications="easy", max_steps=30)
    yield env
    env.close()


def test_official_variation_splits():
    splits = {s: SW.load_tasks(s, task_names=["boil"]) for s in SW.SPLITS}
    assert [len(splits[s]) for s in SW.SPLITS] == [
        14,
        7,
        9,
    ]  # boil: 14 / 7 / 9 variations (scienceworld 1.2.3 `get_variations_train/dev/test`)
    ids = [t["task_id"] for s in SW.SPLITS for t in splits[s]]
    assert len(set(ids)) == len(ids) and splits["train"][0] == {
        "task_id": "boil:0",
        "task_type": "boil",
        "task_name": "boil",
        "variation": 0,
    }
    with pytest.raises(ValueError, match="valid splits"):
        SW.load_tasks("valid")


def test_gold_path_wins_and_reset_is_deterministic(env):
    task = {
        "task_id": "find-living-thing:0",
        "task_type": "find-living-thing",
        "task_name": "find-living-thing",
        "variation": 0,
    }  # noqa: E501
    gold = env.gold_actions(task)
    first = env.reset(task, seed=0)
    assert first.observation == env.reset(task, seed=7).observation
    assert "look around" in first.info["admissible_actions"] and first.info["task_description"]
    step = first
    for action in gold:
        step = env.step(action)
        if step.done:
            break
    assert step.done and step.info["won"] and step.info["score"] == 100 and step.reward == 10.0


def test_invalid_action_and_step_limit():
    env = SW.ScienceWorldAdapter(max_steps=2)
    task = {"task_id": "boil:0", "task_type": "boil", "task_name": "boil", "variation": 0}
    env.reset(task, seed=0)
    step = env.step("fly to the moon")
    assert step.reward == 0.0 and not step.done and not step.info["won"]
    assert env.step("look around").done
    env.close()
