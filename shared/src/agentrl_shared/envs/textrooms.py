"""TextRooms: a small offline household text game for CPU-scale runs (no paper uses it; it is our test bed).

The agent starts in a hallway and must find (`find`) or pick up (`fetch`) an everyday object. Objects live in the room
where a person would expect them (an apple in the kitchen, a wrench in the garage), so a pretrained model starts above
chance and a written skill ("tools are kept in the garage") is genuinely useful privileged context for a teacher.
Difficulty knobs: the number of rooms to choose from, the task types, and the step limit. Reset is deterministic per
(task, seed); the order of the admissible actions is shuffled by the seed, as ALFWorld's lists vary between games.

The `chain` family (`task_types=("chain",)`) is the regime the self-distillation papers are about, long episodes with
an outcome reward only: "find the apple, then the towel, then the stapler", L = 1-4 objects found in order, one door
choice among `num_rooms` per object and exactly L moves, so one wrong door fails the episode. The untrained student
picks each door right only sometimes, L of those in a row rarely, so whole GRPO groups of long tasks fail; the skill
documents name every object's room, so a skill-conditioned teacher still knows each step; and the first wrong door of
a failed episode (`first_wrong_step`) is the pivotal turn that decides it. Training tasks and the `valid_seen` panel
share the objects, so which room holds what is learnable and transfers. `task_type` is `chain<L>`: every success
metric is also reported per length.
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
CHAIN = "chain"  # the chain family's task type in `load_tasks`; its tasks are typed `chain<L>`
CHAIN_LENGTHS = (1, 2, 3, 4)
# `tune`: the training objects in other tasks, for choosing hyperparameters on something other than the panel
SPLITS = ("train", "valid_seen", "valid_unseen", "tune")
SPLIT_SEEDS = {"train": 0, "valid_seen": 1, "valid_unseen": 2, "tune": 3}


def _targets(room: str, split: str) -> list[str]:
    targets = ROOM_OBJECTS[room][2:]
    return targets[-UNSEEN_PER_ROOM:] if split == "valid_unseen" else targets[:-UNSEEN_PER_ROOM]


def load_tasks(
    split: str,
    num_tasks: int = 64,
    num_rooms: int = 4,
    task_types: tuple[str, ...] = TASK_TYPES,
    chain_lengths: tuple[int, ...] = CHAIN_LENGTHS,
):
    """A fixed, seeded list of `num_tasks` tasks for `split` (`train`, `valid_seen`, `valid_unseen`, `tune`).

    Each task names the target object, its room, the `num_rooms` rooms on offer (the target room plus distractors)
    and the task type; the same arguments always give the same list. `task_types=("chain",)`: chain tasks instead
    (`chain_tasks`), their lengths cycling through `chain_lengths`.
    """
    if split not in SPLITS:
        raise ValueError(f"Unknown textrooms split {split!r}; valid splits: {', '.join(SPLITS)}.")
    if not 2 <= num_rooms <= len(ROOM_OBJECTS):
        raise ValueError(f"num_rooms must be between 2 and {len(ROOM_OBJECTS)}, got {num_rooms}.")
    if CHAIN in task_types:
        if tuple(task_types) != (CHAIN,):
            raise ValueError(f"textrooms task_types {list(task_types)}: `chain` cannot be mixed with other types.")
        return chain_tasks(split, num_tasks, num_rooms, tuple(chain_lengths))
    for t in task_types:
        if t not in TASK_TYPES:
            valid = ", ".join((*TASK_TYPES, CHAIN))
            raise ValueError(f"Unknown textrooms task type {t!r}; valid types: {valid}.")
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


def chain_tasks(split: str, num_tasks: int, num_rooms: int, lengths: tuple[int, ...]) -> list[dict]:
    """`num_tasks` chain tasks of `split`, lengths cycling through `lengths`: L objects of L rooms, no room twice in
    a row, each step offering its object's room and `num_rooms - 1` others that are not the room the step starts in
    (`doors[j]`, sorted; the game shuffles them by seed)."""
    if not lengths or any(not 1 <= n <= len(ROOM_OBJECTS) for n in lengths):
        raise ValueError(f"chain_lengths must be 1..{len(ROOM_OBJECTS)} each, got {list(lengths)}.")
    rng = random.Random(f"{CHAIN}|{SPLIT_SEEDS[split]}")
    rooms = sorted(ROOM_OBJECTS)
    tasks = []
    for i in range(num_tasks):
        length, path, doors = lengths[i % len(lengths)], [], []
        for _ in range(length):
            start = path[-1] if path else None
            room = rng.choice([r for r in rooms if r != start])
            others = rng.sample([r for r in rooms if r not in (room, start)], num_rooms - 1)
            path.append(room)
            doors.append(sorted([room, *others]))
        objects = [rng.choice(_targets(room, split)) for room in path]
        tasks.append(
            {
                "task_id": f"textrooms-{CHAIN}/{split}/{i}",
                "task_type": f"{CHAIN}{length}",
                "objects": objects,
                "path": path,
                "doors": doors,
                "instruction": "find the " + ", then the ".join(objects),
            }
        )
    return tasks


def is_chain(task: dict) -> bool:
    return task["task_type"].startswith(CHAIN)


def solution_actions(task: dict) -> list[str]:
    """The task's solution, one action per turn: go to the object's room, then (fetch) take the object; a chain
    task: go to each object's room in turn."""
    if is_chain(task):
        return [f"go to {room}" for room in task["path"]]
    go = f"go to {task['room']}"
    return [go] if task["task_type"] == "find" else [go, f"take {task['object']}"]


def first_wrong_step(task: dict, actions: list[str]) -> int | None:
    """The 0-based turn of a chain episode's first wrong action (the pivotal turn that fails it), None when every
    action is the solution's (a won episode). Chain tasks only: their solution is unique and no move is spare."""
    if not is_chain(task):
        raise ValueError(f"first_wrong_step needs a chain task, got task type {task['task_type']!r}.")
    solution = solution_actions(task)
    for k, action in enumerate(actions):
        if k >= len(solution) or action.strip().lower() != solution[k]:
            return k
    return None if len(actions) == len(solution) else len(actions)


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
        self.chain = is_chain(task)
        if self.chain:  # each step's doors, shuffled by seed; `found`: objects found so far, in order
            self.found, self.first_wrong = 0, None
            self.door_lists = [self.rng.sample(d, len(d)) for d in task["doors"]]
            self.doors = self.door_lists[0]
            return Step(self._chain_describe(), 0.0, False, self._info(won=False))
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
        if self.chain:
            return actions
        if self.task["task_type"] == "fetch" and self.location != "hallway":
            actions += [f"take {o}" for o in self._takeables(self.location)]
        return actions

    def _describe(self) -> str:
        if self.location == "hallway":
            return "You are in the hallway. Doors lead to: " + ", ".join(self.doors) + "."
        items = sorted(self.room_objects[self.location][:2] + self._takeables(self.location))
        return f"You are in the {self.location}. You see: " + ", ".join(items) + "."

    def _info(self, won: bool) -> dict:
        info = {
            "won": won,
            "admissible_actions": self._admissible(),
            "task_type": self.task["task_type"],
            "instruction": self.task["instruction"],
        }
        if self.chain:  # the 0-based turn of the first wrong move so far (None: none yet), as `first_wrong_step`
            info["first_wrong_step"] = self.first_wrong
        return info

    def _chain_describe(self) -> str:
        where = "the hallway" if self.location == "hallway" else f"the {self.location}"
        return (f"Now find the {self.task['objects'][self.found]}. You are in {where}. Doors lead to: "
                f"{', '.join(r for r in self.doors if r != self.location)}.")  # fmt: skip

    def _chain_step(self, action: str) -> Step:
        """One move of a chain task: a door of this step's list; the episode ends after L moves (or when won)."""
        target, right, feedback = self.task["objects"][self.found], False, "Nothing happens."
        room = action[6:] if action.startswith("go to ") else None
        if room in self.doors and room != self.location:
            self.location = room
            right = room == self.task["path"][self.found]
            feedback = f"You find the {target} in the {room}." if right else f"The {target} is not in the {room}."
        if right:
            self.found += 1
            if self.found < len(self.task["path"]):
                self.doors = self.door_lists[self.found]
        elif self.first_wrong is None:
            self.first_wrong = self.steps - 1
        won = self.found == len(self.task["path"])
        observation = feedback if won else f"{feedback} {self._chain_describe()}"
        done = won or self.steps >= min(len(self.task["path"]), self.max_steps)
        return Step(observation, 1.0 if won else 0.0, done, self._info(won))

    def step(self, action: str) -> Step:
        self.steps += 1
        action = action.strip().lower()
        if self.chain:
            return self._chain_step(action)
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
