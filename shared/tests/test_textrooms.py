"""TextRooms: fixed task panels, deterministic resets, rewards, `won`, invalid actions and the step limit."""

import pytest

from agentrl_shared.envs import load_tasks, make_env
from agentrl_shared.envs.textrooms import ROOM_OBJECTS, UNSEEN_PER_ROOM


def test_panels_are_fixed_and_splits_disjoint():
    assert load_tasks("textrooms", "valid_seen", num_tasks=32) == load_tasks("textrooms", "valid_seen", num_tasks=32)
    unseen = {t["object"] for t in load_tasks("textrooms", "valid_unseen", num_tasks=64)}
    train = {t["object"] for t in load_tasks("textrooms", "train", num_tasks=256)}
    assert not unseen & train
    assert all(o in ROOM_OBJECTS[r][-UNSEEN_PER_ROOM:] for r in ROOM_OBJECTS for o in unseen if o in ROOM_OBJECTS[r])
    with pytest.raises(ValueError, match="valid splits"):
        load_tasks("textrooms", "test")


def test_find_is_won_on_entering_the_right_room():
    task = next(t for t in load_tasks("textrooms", "train", num_tasks=16) if t["task_type"] == "find")
    env = make_env("textrooms")
    first = env.reset(task, seed=0)
    assert first.info["admissible_actions"] == [f"go to {r}" for r in env.doors]
    wrong = next(r for r in task["rooms"] if r != task["room"])
    step = env.step(f"go to {wrong}")
    assert (step.reward, step.done, step.info["won"]) == (0.0, False, False)
    step = env.step(f"go to {task['room']}")
    assert (step.reward, step.done, step.info["won"]) == (1.0, True, True)


def test_fetch_needs_the_right_object():
    task = next(t for t in load_tasks("textrooms", "train", num_tasks=16) if t["task_type"] == "fetch")
    env = make_env("textrooms")
    env.reset(task, seed=3)
    step = env.step(f"go to {task['room']}")
    assert not step.done and f"take {task['object']}" in step.info["admissible_actions"]
    other = next(a for a in step.info["admissible_actions"] if a.startswith("take ") and task["object"] not in a)
    step = env.step(other)
    assert not step.info["won"] and "It is not the" in step.observation
    step = env.step(f"take {task['object']}")
    assert step.info["won"] and step.done and step.reward == 1.0


def test_invalid_action_and_step_limit():
    task = load_tasks("textrooms", "train", num_tasks=1)[0]
    env = make_env("textrooms", max_steps=2)
    env.reset(task, seed=0)
    step = env.step("dance wildly")
    assert step.observation.startswith("Nothing happens.") and not step.done
    assert env.step("dance again").done
