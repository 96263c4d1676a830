"""A SmolLM2-135M that reads TextRooms skill documents: the CPU-scale start point of SDAR and AgentOPSD (no paper uses it).

SDAR's gate and AgentOPSD's belief act on the gap between the policy with the privileged skill block and without it.
The papers' Qwen2.5-3B/7B read a skill document; SmolLM2-135M-Instruct does not: given the document of the target's
room, or a one-line hint naming the room, in any placement (before the templated prompt, in the first or in the last
user message), it picks the right door no more often than without it, so the self-teacher is no better than the student
(sdar/README.md, "Mechanism check"). This module teaches it to read the block, and nothing about the real task:

- `synthetic_tasks`: TextRooms tasks whose targets are made-up words (`blikzor`), each room holding its own; no real
  object, so no object-to-room fact of the panel or the training split is learned here;
- `skill_rows`: each task played once through the RL rollout code (`RolloutCollector`, the CPU prompt family, the
  game) with the solution actions as completions, every prompt being the teacher prompt the trainer builds
  (`skills.teacher_prompt` with the task's skills: the general line, the task type's procedure and the document of the
  target's room, written by `skills.room_document` as the real room documents are);
- `sft`: plain supervised fine-tuning on those completions (cross-entropy on completion tokens, token mean per step).

`smollm2_135m_skills` (`agentrl_shared.models`) builds it once into the offline cache, deterministically.
"""

import random
import time
from functools import partial

import torch

from .envs.textrooms import ROOM_OBJECTS, TASK_TYPES, TextRoomsEnv, solution_actions
from .prompts import make_prompt
from .rollout import RolloutCollector, Row
from .skills import teacher_prompt, textrooms_skills


SYLLABLES = ("bli", "zor", "ket", "mup", "dra", "vex", "quo", "lun", "pim", "tas", "rob", "fen", "gal", "wib")
NUM_TASKS = 48  # 24 find + 24 fetch: 72 rows (a fetch has two), 9 steps of 8 rows; the loss is flat by the 7th step
LEARNING_RATE = 1e-4
ROWS_PER_STEP = 8
SEED = 0
HISTORY_LENGTH, MAX_TURNS, NUM_ROOMS = 2, 2, 3  # the CPU configs' env section (history_length, max_turns, num_rooms)


def synthetic_tasks(num_tasks: int = NUM_TASKS, seed: int = SEED) -> tuple[list[dict], dict[str, list[str]]]:
    """`num_tasks` TextRooms tasks on made-up objects (as `envs.textrooms.load_tasks` builds tasks) and the rooms'
    objects they live in: each room keeps its two real scenery objects and six made-up targets."""
    rng = random.Random(seed)
    rooms = sorted(ROOM_OBJECTS)
    words: set[str] = set()
    while len(words) < 6 * len(rooms):
        words.add(rng.choice(SYLLABLES) + rng.choice(SYLLABLES) + rng.choice(("", "let", "ix", "o")))
    pool = sorted(words)
    rng.shuffle(pool)
    room_objects = {r: ROOM_OBJECTS[r][:2] + pool[6 * i : 6 * i + 6] for i, r in enumerate(rooms)}
    tasks = []
    for i in range(num_tasks):
        room, task_type = rooms[i % len(rooms)], TASK_TYPES[i % 2]
        target = rng.choice(room_objects[room][2:])
        distractors = rng.sample([r for r in rooms if r != room], NUM_ROOMS - 1)
        tasks.append({"task_id": f"textrooms-skills/{i}", "task_type": task_type, "object": target, "room": room,
                      "rooms": sorted([room, *distractors]), "instruction": f"{task_type} the {target}"})  # fmt: skip
    return tasks, room_objects


def _scripted(tasks: list[dict], tok, end_id: int):
    """A `GenerateFn` that answers each episode's prompt with its next solution action (slot i plays task i)."""
    plans = [list(solution_actions(t)) for t in tasks]

    def generate(prompt_ids: list[list[int]]):
        active = [i for i, p in enumerate(plans) if p]
        completions = [tok(plans[i].pop(0) + "</action>", add_special_tokens=False).input_ids + [end_id]
                       for i in active]  # fmt: skip
        return completions + [[end_id]] * (len(prompt_ids) - len(completions)), None

    return generate


def skill_rows(
    tok, tasks: list[dict], room_objects: dict[str, list[str]], skill_position: str = "legacy"
) -> list[Row]:
    """The rows of one solved episode per task, played by the RL `RolloutCollector` on the game with the tasks'
    objects; each row's `teacher_prompt_ids` is the skill-conditioned prompt of that turn (the trainer's teacher
    prompt, `MultiTurnGRPOTrainer._teacher_prompt`, with the task's room document written from `room_objects`)."""
    from .envs.pool import EnvPool

    pool = EnvPool(partial(TextRoomsEnv, room_objects=room_objects), num_slots=len(tasks), num_workers=0)
    collector = RolloutCollector(
        pool, make_prompt("textrooms", HISTORY_LENGTH), tok, MAX_TURNS, max_prompt_length=1024,
        teacher_transform=lambda text, task: teacher_prompt(text, textrooms_skills(task, room_objects=room_objects),
                                                            skill_position),
    )  # fmt: skip
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    try:
        episodes = collector.collect(
            tasks, list(range(len(tasks))), [SEED] * len(tasks), _scripted(tasks, tok, end_id)
        )
    finally:
        pool.close()
    lost = [e.task["task_id"] for e in episodes if not e.won]
    if lost:
        raise RuntimeError(f"solution episodes not won: {lost}")
    return [r for e in episodes for r in e.rows]


def sft(
    model, rows: list[Row], pad_id: int, lr: float = LEARNING_RATE, rows_per_step: int = ROWS_PER_STEP
) -> list[float]:
    """One epoch of supervised fine-tuning of `model` on the rows' completions given their teacher prompts (AdamW,
    cross-entropy on completion tokens, token mean per step of `rows_per_step` rows); returns each step's loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for start in range(0, len(rows), rows_per_step):
        batch = rows[start : start + rows_per_step]
        seqs = [r.teacher_prompt_ids + r.completion_ids for r in batch]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), pad_id)  # (B, L), left-padded
        labels = torch.full((len(seqs), width), -100)  # (B, L): completion tokens only
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, (row, seq) in enumerate(zip(batch, seqs, strict=True)):
            ids[b, width - len(seq) :] = torch.tensor(seq)
            labels[b, width - len(row.completion_ids) :] = torch.tensor(row.completion_ids)
            mask[b, width - len(seq) :] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    return losses


def build(source, out) -> dict:
    """Fine-tune the model at `source` into `out` (model, tokenizer, `skill_reader.json` with the losses and time)."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(SEED)
    tok = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    tasks, room_objects = synthetic_tasks()
    rows = skill_rows(tok, tasks, room_objects)
    t0 = time.perf_counter()
    losses = sft(model, rows, tok.pad_token_id)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    record = {"source": "smollm2-135m", "tasks": len(tasks), "rows": len(rows), "learning_rate": LEARNING_RATE,
              "rows_per_step": ROWS_PER_STEP, "seed": SEED, "losses": losses,
              "seconds": time.perf_counter() - t0}  # fmt: skip
    (out / "skill_reader.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
