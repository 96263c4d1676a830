"""Curation warm start for a model that cannot curate yet (CPU scale only; not part of the paper's method).

The paper starts from Qwen3-4B, which already writes a `<skill>` document when the curate prompt asks for one and
reads the document its solve prompt shows. SmolLM2-135M-Instruct does neither: asked to curate, it copies the prompt
and never closes the `<skill>` block within the CPU scale's 32 tokens, so every curate row is invalid, the document
stays empty and SkillRise on CPU is the no-carry baseline (skillrise README, "Deviations"). This module teaches the
two formats, and nothing about the real task:

- the tasks are TextRooms tasks on made-up objects (`agentrl_shared.skill_reader.synthetic_tasks`, the room of each
  made-up object drawn per seed), so no object-to-room fact of the training split or the panel is learned here;
- `gold_trials` plays trials of K tasks through the RL `TrialRunner` (the same solve and curate prompts, token for
  token) with `ScriptedCurator`, a policy that only reads the prompt text: it solves by the room its document names
  (else it tries a door it has no note against), and curates by writing what the attempt showed, in the
  abstracted form the curate prompt asks for (`document_lines`: the room where the target object was seen, or the
  rooms it was not in);
- `warmup_rows` keeps every curate row (writing) and the solve rows of every won episode: those shown a document
  (reading it) and those shown none (acting on the admissible list alone, so that a first attempt still goes to a
  door: without them the model answered "go to <the task's object>" there and never won at position 1);
  `agentrl_shared.sft` fits them.

Every method of the CPU plan starts from the warm-started model, the untrained row included.
"""

import hashlib
import random
import re
from functools import partial

from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.envs.textrooms import TextRoomsEnv
from agentrl_shared.rollout import Row
from agentrl_shared.skill_reader import synthetic_tasks

from .groups import build_groups, repeat_groups
from .trial import Trial, TrialRunner


FOUND = "- The target object is in the {room}: go there first."
NOT_HERE = "- The target object is not in the {room}."
_FOUND = re.compile(r"The target object is in the ([a-z ]+?): go there")
_NOT_HERE = re.compile(r"The target object is not in the ([a-z ]+?)\.")
_TASK = re.compile(r"Task: (find|fetch) the (.+?)\.\n")
_ADMISSIBLE = re.compile(r"Admissible actions: (.*)\.\nAnswer with one admissible action\.")
_SEEN = re.compile(r"You are in the ([a-z ]+?)\. You see: (.+?)\.(?:\n|$)")


def document_lines(old: str, rooms: list[tuple[str, list[str]]], target: str) -> str:
    """The revised document after one attempt that entered `rooms` (each with the objects seen there): where the
    target object was seen, if anywhere (that line alone: the notes against other rooms are then moot), else the old
    lines plus a note against each room entered without seeing it."""
    for room, seen in rooms:
        if target in seen:
            return FOUND.format(room=room)
    lines = [line for line in old.splitlines() if line.strip()]
    for room, _ in rooms:
        if NOT_HERE.format(room=room) not in lines:
            lines.append(NOT_HERE.format(room=room))
    return "\n".join(lines)


class ScriptedCurator:
    """A `GenerateFn` that answers TextRooms solve and curate prompts from their text alone (`<|im_end|>` ends each
    completion, as the template ends an assistant turn).

    Solve: take the task's object when it is admissible, else go to the room the document names, else to a door
    the document has no note against (one chosen by a hash of the prompt: deterministic, and wrong as often as a
    guess is). Curate: the revised document (`document_lines`) of the attempt the prompt shows (its task line names the target), in `<skill>` tags
    after the prompt's prefilled `curate_prefix`."""

    def __init__(self, tok, curate_prefix: str, seed: int):
        self.tok, self.prefix, self.seed = tok, curate_prefix, seed
        self.end_id = tok.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, prompt_ids: list[list[int]]):
        texts = [self.tok.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
        return [self.tok(self.answer(t), add_special_tokens=False).input_ids + [self.end_id] for t in texts], None

    def answer(self, text: str) -> str:
        if "## Old Skill Document" in text:
            return self.curate(text)
        return self.solve(text)

    def solve(self, text: str) -> str:
        task, admissible = _TASK.findall(text), _ADMISSIBLE.findall(text)
        if not task or not admissible:
            return "look</action>"  # a dummy prompt (another rank's padding): any answer
        obj, actions = task[-1][1], admissible[-1].split(", ")
        found, not_here = _FOUND.findall(text), set(_NOT_HERE.findall(text))
        if f"take {obj}" in actions:
            return f"take {obj}</action>"
        if found and f"go to {found[0]}" in actions:
            return f"go to {found[0]}</action>"
        doors = [a for a in actions if a.startswith("go to ") and a[6:] not in not_here] or actions
        rng = random.Random(hashlib.sha256(f"{self.seed}|{text}".encode()).hexdigest())
        return f"{rng.choice(doors)}</action>"

    def curate(self, text: str) -> str:
        old = text.split("## Old Skill Document\n", 1)[1].split("\n\n## Most Recent Attempt", 1)[0]
        attempt = text.split("## Most Recent Attempt", 1)[1].split("\n\n## What to do", 1)[0]
        [(_, target)] = _TASK.findall(attempt)
        rooms = [(room, seen.split(", ")) for room, seen in _SEEN.findall(attempt)]
        old = "" if old.startswith("(The skill document is empty") else old
        gold = f"<skill>\n{document_lines(old, rooms, target)}\n</skill>"
        if not gold.startswith(self.prefix):
            raise ValueError(f"the curate prompt ends with {self.prefix!r}, which a <skill> answer cannot follow")
        return gold[len(self.prefix) :]


def gold_trials(runner: TrialRunner, tasks: list[dict], K: int, curator: ScriptedCurator, seed: int) -> list[Trial]:
    """One trial per cross group (K different made-up tasks of a family, `groups.build_groups`) and per task in
    repeat mode (the same task K times, stopped at its first win as the evaluation plays it)."""
    cross = build_groups(tasks, "textrooms", K, seed=seed)
    repeat = repeat_groups(tasks[: len(cross)], K)
    out = []
    for groups, skip_won in ((cross, False), (repeat, True)):
        out += runner.run(groups, list(range(len(groups))), [seed] * len(groups), curator, K=K,
                          trial_offset=len(out), skip_won=skip_won)  # fmt: skip
    return out


def warmup_rows(trials: list[Trial], max_completion_length: int) -> list[Row]:
    """Every curate row (writing the document) and each solve row of a won episode, with or without a document
    shown (reading it; acting from the admissible actions when it is empty). Raises when a gold completion is longer
    than `max_completion_length` (the RL rollout would cut it, and a cut document has no closing tag)."""
    rows = []
    for t in trials:
        for p, ep in enumerate(t.episodes):
            if ep is not None and ep.won:
                rows += ep.rows
            if p in t.carry_rows:
                rows.append(t.carry_rows[p])
    longest = max(len(r.completion_ids) for r in rows)
    if longest > max_completion_length:
        raise ValueError(f"a gold warm-start completion has {longest} tokens, over trainer.max_completion_length="
                         f"{max_completion_length}: raise it (the RL rollout would cut the document)")  # fmt: skip
    return rows


def make_runner(args, env, tok, room_objects: dict[str, list[str]], slots: int) -> TrialRunner:
    """A `TrialRunner` on TextRooms with the made-up objects and the config's solve prompt and curate settings (the
    RL rollout's prompts)."""
    from .config import make_solve_prompt

    if env.name != "textrooms":
        raise ValueError(f"the curation warm start plays TextRooms tasks; env.name is {env.name!r}: set "
                         "warmstart.num_tasks=0 (the paper's Qwen3-4B curates without one)")  # fmt: skip
    pool = EnvPool(partial(TextRoomsEnv, room_objects=room_objects), num_slots=slots, num_workers=0)
    return TrialRunner(pool, make_solve_prompt(env), tok, env.name, env.max_turns, env.max_prompt_length, "skill",
                       args.skill_max_chars, env.curate_history, env.curate_prefix, args.chat_template_kwargs,
                       env.prompt_overflow)  # fmt: skip


def gold_rows(args, env, tok, num_tasks: int, seed: int) -> tuple[list[Row], list[Trial]]:
    """The warm start's rows (`warmup_rows`) and the trials they come from: `num_tasks` made-up TextRooms tasks
    (`skill_reader.synthetic_tasks` with `seed`) played by `ScriptedCurator` through the RL prompts."""
    tasks, room_objects = synthetic_tasks(num_tasks, seed)
    runner = make_runner(args, env, tok, room_objects, slots=len(tasks))
    try:
        trials = gold_trials(runner, tasks, args.group_size_k, ScriptedCurator(tok, env.curate_prefix, seed), seed)
    finally:
        runner.pool.close()
    return warmup_rows(trials, args.max_completion_length), trials
