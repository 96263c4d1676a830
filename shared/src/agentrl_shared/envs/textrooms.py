"""TextRooms: a small offline household text game for CPU-scale runs (no paper uses it; it is our test bed).

The agent starts in a hallway and must find (`find`) or pick up (`fetch`) an everyday object. Objects live in the room
where a person would expect them (an apple in the kitchen, a wrench in the garage), so a pretrained model starts above
chance and a written skill ("tools are kept in the garage") is genuinely useful privileged context for a teacher.
Difficulty knobs: the number of rooms to choose from, the task types, and the step limit. Reset is deterministic per
(task, seed); the order of the admissible actions is shuffled by the seed, as ALFWorld's lists vary between games.
"""

import random

from .base import Step


# Each room's objects; the first two are scenery, the rest are task targets. Held-out targets form `valid_unseen`.
ROOM_OBJECTS: dict[str, list[str]] = {
    "kitchen": ["fridge", "stove", "apple", "bread", "frying pan", "kettle", "butter knife", "mug"],
    "bathroom": ["sink", "bathtub", "towel", "toothbrush", "soap", "shampoo", "razor", "hair dryer"],
    "bedroom": ["bed", "wardrobe", "pillow", "blanket", "pajamas", "alarm clock", "slippers", "night cream"],
    "garage": ["car", "workbench", "hammer", "wrench", "screwdriver", "motor oil", "tire pump", "toolbox"],
    "office": ["desk", "bookshelf", "stapler", "laptop", "printer paper", "notebook", "pen", "desk lamp"],
    "garden": ["fence", "bench", "shovel", "watering can", "flower pot", "garden hose", "rake", "seeds"],
    "living room": ["sofa", "television", "remote control", "cushion", "board game", "magazine", "vase", "rug"],
    "laundry room": ["washing machine", "dryer", "detergent", "ironing board", "laundry basket", "clothespins",
                     "lint roller", "fabric softener"],
}  # fmt: skip
UNSEEN_PER_ROOM = 2  # the last two targets of every room are never trained on
TASK_TYPES = ("find", "fetch")
SPLITS = ("train", "valid_seen", "valid_unseen")
SPLIT_SEEDS = {"train": 0, "valid_seen": 1, "valid_unseen": 2}


def _targets(room: str, split: str) -> list[str]:
    targets = ROOM_OBJECTS[room][2:]
    return targets[-UNSEEN_PER_ROOM:] if split == "valid_unseen" else targets[:-UNSEEN_PER_ROOM]


def load_tasks(split: str, num_tasks: int = 64, num_rooms: int = 4, task_types: tuple[str, ...] = TASK_TYPES):
    """A fixed, seeded list of `num_tasks` tasks for `split` (`train`, `valid_seen`, `valid_unseen`).

    Each task names the target object, its room, the `num_rooms` rooms on offer (the target room plus distractors)
    and the task type; the same arguments always give the same list.
    """
    if split not in SPLITS:
        raise ValueError(f"Unknown textrooms split {split!r}; valid splits: {', '.join(SPLITS)}.")
    if not 2 <= num_rooms <= len(ROOM_OBJECTS):
        raise ValueError(f"num_rooms must be between 2 and {len(ROOM_OBJECTS)}, got {num_rooms}.")
    for t in task_types:
        if t not in TASK_TYPES:
            raise ValueError(f"Unknown textrooms task type {t!r}; valid types: {', '.join(TASK_TYPES)}.")
    rng = random.Random(SPLIT_SEEDS[split])
    rooms = sorted(ROOM_OBJECTS)
    tasks = []
    for i in range(num_tasks):
        room = rooms[i % len(rooms)]
        target = rng.choice(_targets(room, split))
        distractors = rng.sample([r for r in rooms if r != room], num_rooms - 1)
        task_type = task_types[(i // len(rooms)) % len(task_types)]
        tasks.append(
            {
                "task_id": f"textrooms/{split}/{i}",
                "task_type": task_type,
                "object": target,
                "room": room,
                "rooms": sorted([room, *distractors]),
                "instruction": f"{task_type} the {target}",
            }
        )
    return tasks


def solution_actions(task: dict) -> list[str]:
    """The task's solution, one action per turn: go to the object's room, then (fetch) take the object."""
    go = f"go to {task['room']}"
    return [go] if task["task_type"] == "find" else [go, f"take {task['object']}"]


class TextRoomsEnv:
    """The TextRooms game behind the `TextEnv` protocol; reward 1 when the task is solved, else 0.

    Args:
        max_steps (`int`, *optional*, defaults to `50`): the episode ends (not won) after this many steps, like
            ALFWorld's 50-step limit; the rollout's own turn limit is usually smaller.
        room_objects (`dict`, *optional*): each room's objects (two scenery objects, then the targets); defaults to
            `ROOM_OBJECTS`. The skill-reading warm start (`agentrl_shared.models`) plays made-up objects through it.
    """

    def __init__(self, max_steps: int = 50, room_objects: dict[str, list[str]] | None = None):
        self.max_steps = max_steps
        self.room_objects = ROOM_OBJECTS if room_objects is None else room_objects

    def reset(self, task: dict, seed: int) -> Step:
        self.task, self.rng = task, random.Random(f"{task['task_id']}|{seed}")
        self.location, self.steps, self.holding = "hallway", 0, None
        self.doors = list(task["rooms"])
        self.rng.shuffle(self.doors)
        return Step(self._describe(), 0.0, False, self._info(won=False))

    def _takeables(self, room: str) -> list[str]:
        # the target (if it is here) and one more of the room's own objects, so `fetch` has a wrong choice
        targets = self.room_objects[room][2:]
        items = [o for o in targets if o == self.task["object"]]
        items.append(next(o for o in targets if o != self.task["object"]))
        return sorted(items)

    def _admissible(self) -> list[str]:
        actions = [f"go to {r}" for r in self.doors if r != self.location]
        if self.task["task_type"] == "fetch" and self.location != "hallway":
            actions += [f"take {o}" for o in self._takeables(self.location)]
        return actions

    def _describe(self) -> str:
        if self.location == "hallway":
            return "You are in the hallway. Doors lead to: " + ", ".join(self.doors) + "."
        items = sorted(self.room_objects[self.location][:2] + self._takeables(self.location))
        return f"You are in the {self.location}. You see: " + ", ".join(items) + "."

    def _info(self, won: bool) -> dict:
        return {
            "won": won,
            "admissible_actions": self._admissible(),
            "task_type": self.task["task_type"],
            "instruction": self.task["instruction"],
        }

    def step(self, action: str) -> Step:
        self.steps += 1
        action = action.strip().lower()
        won, feedback = False, None
        if action.startswith("go to ") and action[6:] in self.doors and action[6:] != self.location:
            self.location = action[6:]
            won = self.task["task_type"] == "find" and self.location == self.task["room"]
        elif action.startswith("take ") and action in self._admissible():
            self.holding = action[5:]
            won = self.holding == self.task["object"]
            feedback = f"You take the {self.holding}." + ("" if won else f" It is not the {self.task['object']}.")
        else:
            feedback = "Nothing happens."
        observation = self._describe() if feedback is None else f"{feedback} {self._describe()}"
        done = won or self.steps >= self.max_steps
        return Step(observation, 1.0 if won else 0.0, done, self._info(won))

    def close(self) -> None:
        pass
