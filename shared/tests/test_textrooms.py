"""TextRooms: fixed task panels, deterministic resets, rewards, `won`, invalid actions and the step limit."""

import pytest

from agentrl_shared.envs import load_tasks, make_env
from agentrl_shared.envs.textrooms import ROOM_OBJECTS, UNSEEN_PER_ROOM, first_wrong_step


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


def chain_task(length: int, split: str = "train") -> dict:
    return next(t for t in load_tasks("textrooms", split, num_tasks=16, num_rooms=3, task_types=("chain",))
                if t["task_type"] == f"chain{length}")  # fmt: skip


def test_chain_panels_share_objects_and_lengths_cycle():
    train = load_tasks("textrooms", "train", num_tasks=256, num_rooms=3, task_types=("chain",))
    panel = load_tasks("textrooms", "valid_seen", num_tasks=64, num_rooms=3, task_types=("chain",))
    assert [t["task_type"] for t in panel[:8]] == ["chain1", "chain2", "chain3", "chain4"] * 2
    assert {o for t in panel for o in t["objects"]} <= {o for t in train for o in t["objects"]}
    for t in train:
        assert len(t["objects"]) == len(t["path"]) == len(t["doors"])
        assert all(o in ROOM_OBJECTS[r] for o, r in zip(t["objects"], t["path"], strict=True))
        assert all(a != b for a, b in zip(t["path"], t["path"][1:]))  # never the same room twice in a row
        assert all(r in d and len(d) == 3 for r, d in zip(t["path"], t["doors"], strict=True))
    with pytest.raises(ValueError, match="cannot be mixed"):
        load_tasks("textrooms", "train", task_types=("chain", "find"))


def test_chain_is_won_only_by_every_door_in_order():
    task = chain_task(3)
    env = make_env("textrooms")
    step = env.reset(task, seed=1)
    assert f"Now find the {task['objects'][0]}" in step.observation
    for k, room in enumerate(task["path"]):
        assert f"go to {room}" in step.info["admissible_actions"]
        step = env.step(f"go to {room}")
        assert step.done == (k == 2) and step.info["first_wrong_step"] is None
    assert (step.reward, step.info["won"]) == (1.0, True)


# hand-made episodes of a 4-step chain: the actions played and the turn of their first wrong move
def hand_made(task: dict) -> list[tuple[list[str], int | None]]:
    right = [f"go to {r}" for r in task["path"]]
    wrong = [f"go to {next(d for d in doors if d != r)}" for r, doors in zip(task["path"], task["doors"], strict=True)]
    return [
        (right, None),
        ([wrong[0], right[1], right[2], right[3]], 0),  # wrong first door, the rest "right" but too late
        ([right[0], right[1], wrong[2], right[3]], 2),
        ([right[0], right[1], right[2], wrong[3]], 3),
        ([right[0], "look around", right[2], right[3]], 1),  # an invalid action is a wasted move
        (["GO TO " + right[0][6:].upper(), wrong[1], wrong[2], wrong[3]], 1),  # case-insensitive, as the game
    ]


def test_first_wrong_step_labels_on_hand_made_episodes():
    task = chain_task(4)
    for actions, first_wrong in hand_made(task):
        assert first_wrong_step(task, actions) == first_wrong, actions
        env = make_env("textrooms")
        env.reset(task, seed=0)
        steps = [env.step(a) for a in actions]
        # the game's own label agrees; the episode is won only without a wrong move, and always takes 4 moves
        assert steps[-1].info["first_wrong_step"] == first_wrong
        assert steps[-1].info["won"] == (first_wrong is None) and [s.done for s in steps] == [False] * 3 + [True]
    assert first_wrong_step(task, [f"go to {task['path'][0]}"]) == 1  # stopped early: the missing move is wrong
    with pytest.raises(ValueError, match="chain task"):
        first_wrong_step(load_tasks("textrooms", "train", num_tasks=1)[0], ["go to kitchen"])
