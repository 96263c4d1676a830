"""The SkillRise trial: Solve(x_0) -> Curate(0) -> Solve(x_1) -> ... -> Solve(x_{K-1}), one policy (SkillRise 2.2-2.3).

A trial carries one in-context skill document S, empty at the start of every trial and never persisted across trials.
Solve turns are per-turn rows played by the shared `RolloutCollector`; the solve prompt is the environment family's
prompt with a "Current Skill Document" section after its role line. After task p (p < K-1) one curate generation
rewrites S from the old S, the last attempt (up to `curate_history` steps) and its outcome; the last
`<skill>...</skill>` block, stripped and cut to 4000 characters, replaces S, and on a parse failure S is kept and the
row is flagged invalid (penalised by the trainer). Structure and parsing follow the official
`agent_system/environments/skillrise_sciworld/{prompt,projection,env_manager}.py` and
`agent_system/multi_turn_rollout/skillrise_rollout_loop.py` (lyq1119/SkillRise-reproduction-and-refinement@79bbd91,
imported from Within-yao/SkillRise); the wording is ours.

Carry modes (official `carry_mode`): `skill` (SkillRise), `none` (K tasks back to back, empty document, no curate
phase: the GRPO/no-carry baselines), `reflect` (the LaMer baseline, a validation carry only: the trials that did not
solve a task reflect on it in `<remark>` tags, and every reflection so far is carried). Task modes: `cross` (K different tasks of a family) and `repeat` (the same task K times; a trial that already
won skips its later attempts, as the official loop keeps `is_done = is_won`).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrl_shared.envs.base import EnvFailure, Step
from agentrl_shared.prompts import Turn
from agentrl_shared.rollout import Episode, GenerateFn, RolloutCollector, Row


CARRY_MODES = ("skill", "none", "reflect")
DOC_SLOT = "<<skillrise-document>>"  # placeholder the solve prompt renders and `insert_document` fills per trial
EMPTY_DOCUMENT = "(The skill document is empty: no skills have been distilled yet.)"
SKILL_HEADER = (
    "## Current Skill Document\n"
    "These skills were distilled from earlier tasks of the SAME family. Apply one only when you are confident it fits "
    "the current situation; ignore any that does not."
)
REFLECTION_HEADER = (
    "## Experience From Earlier Tasks\n"
    "Earlier you attempted other tasks of the SAME family. This is what you learned from them. Apply it where it "
    "helps; ignore whatever does not fit the current task."
)
EMPTY_REFLECTION = "(No earlier experience yet.)"
CURATE_PROMPT = """You maintain a SKILL DOCUMENT for an agent that solves a family of related {family}. You have \
just watched one attempt. Revise the document so that the agent solves the LATER tasks of this family more reliably.

## Old Skill Document
{document}

## Most Recent Attempt ({attempt})
{trajectory}
Outcome of this attempt: {outcome}

## What to do
Rewrite the skill document, starting from the old one and refining it with what this attempt showed. Rules:
- Abstract, do not memorise: {abstract}
- Ground every statement in what actually happened above; never invent steps you did not see.
- If the attempt failed, turn the point of failure into a concrete pitfall.
- Be concise: a short, precise document beats a long one. If the attempt taught little, keep the old document \
nearly unchanged.
- Do not copy the trajectory; distil a reusable procedure, not a history.
{procedure}
Headers that often fit (optional): ## When to use, ## Workflow, ## Pitfalls.

Reason first, then give the FULL revised skill document inside <skill> </skill> tags."""


@dataclass(frozen=True)
class CurateText:
    """What the curate prompt says of one environment family: the family, what the attempt shows, the instances to
    abstract away, and a family's own procedure list. Official `skillrise_{alfworld,webshop,sciworld}/prompt.py`
    (`*_CURATE_PROMPT`): the same rules in every family, the family and the abstraction examples its own, and for
    WebShop the attempt shows the shopping goal and a list of shopping steps worth distilling."""

    family: str
    attempt: str
    abstract: str
    procedure: str = ""


HOUSEHOLD = (
    'replace concrete object names, receptacle ids and location numbers (e.g. "mug 2", "cabinet 4") with general '
    'ones ("the target object", "a receptacle").'
)
CURATE_TEXT = {
    "alfworld": CurateText("ALFRED household tasks", "observations and the agent's actions", HOUSEHOLD),
    "textrooms": CurateText("TextRooms household tasks", "observations and the agent's actions", HOUSEHOLD),
    "scienceworld": CurateText(
        "ScienceWorld tasks",
        "observations and the agent's actions",
        'replace concrete substance names, container colours, room names and numeric thresholds (e.g. "salt water", '
        '"the green box", "the workshop") with general ones ("the target substance", "the designated container").',
    ),
    "webshop": CurateText(
        "WebShop online-shopping tasks (one product category)",
        "the shopping goal, the observations and the agent's actions",
        'replace concrete product names, brands, exact attribute values and price limits (e.g. "navy blue", '
        '"12 pack", "under 40.00 dollars") with general ones ("the required colour or size option", "the price '
        'limit").',
        "\nWhere it helps, the document should say how, in WebShop:\n"
        "- to write a search query that carries the goal's constraints;\n"
        "- to pick a search result by its category and attributes, not by its rank;\n"
        "- in which order to set the product's options (colour, size, count, ...) before buying;\n"
        "- to check the product's attributes AND the price limit BEFORE click[buy now];\n"
        "- to navigate: when to go back, when to open the description or features, when to turn the page.\n",
    ),
}
REFLECT_PROMPT = """You have just finished one task of a family of related {env} tasks. Reflect on the attempt and \
draw TRANSFERABLE experience from it for the LATER, DIFFERENT tasks of this family.

## Most Recent Attempt (observations and your actions)
{trajectory}
Outcome of this attempt: {outcome}

- First reason step by step about what worked, what went wrong, and what carries over to other tasks of this \
family (abstract away the concrete objects and places).
- Then write concise guidance for the next task.
- End with your reflection inside <remark> </remark> tags."""
TASK_IN_ATTEMPT = ("textrooms",)  # environments whose observations never state the task (ours: TextRooms)
ENV_LABELS = {"alfworld": "ALFRED household", "webshop": "WebShop shopping", "scienceworld": "ScienceWorld",
              "textrooms": "TextRooms household"}  # fmt: skip


def parse_tagged(text: str, tag: str, max_chars: int) -> str | None:
    """The LAST `<tag>...</tag>` block, stripped and cut to `max_chars`; None when there is none (official
    `skillrise_sciworld/projection.py`, curate phase: `rfind` of both tags, `[:4000]`)."""
    start, end = text.rfind(f"<{tag}>"), text.rfind(f"</{tag}>")
    if start == -1 or end == -1 or end <= start:
        return None
    return text[start + len(tag) + 2 : end].strip()[:max_chars]


def format_reflections(reflections: dict[int, str], task_type: str) -> str:
    """All reflections of a trial so far, one entry per earlier position (official `_format_reflections`: each with
    the task type and its outcome; only unsolved tasks reflect, so the outcome is a failure)."""
    return "\n".join(f"- After an earlier task ({task_type}, outcome: FAILURE), you noted:\n{text.strip()}"
                     for _, text in sorted(reflections.items()))  # fmt: skip


def document_section(document: str, carry_mode: str) -> str:
    """The section the solve prompt carries: the skill document (or reflection), with a placeholder when empty."""
    if carry_mode == "reflect":
        return f"{REFLECTION_HEADER}\n{document.strip() or EMPTY_REFLECTION}"
    return f"{SKILL_HEADER}\n{document.strip() or EMPTY_DOCUMENT}"


class SolvePrompt:
    """An environment prompt family with SkillRise's document section after its role line (first paragraph).

    Families without a blank line after the role line (TextRooms) get the section first. Projection is the family's.
    """

    def __init__(self, base):
        self.base = base
        self.name = f"skillrise-{base.name}"
        self.assistant_prefix = base.assistant_prefix
        self.example_messages = base.example_messages

    def render(self, task: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        text = self.base.render(task, history, observation, admissible)
        head, sep, tail = text.partition("\n\n")
        if not sep:
            return f"{DOC_SLOT}\n\n{text}"
        return f"{head}\n\n{DOC_SLOT}\n\n{tail}"

    def project(self, text: str) -> tuple[str, bool]:
        return self.base.project(text)


def format_attempt(observations: list[str], actions: list[str], max_steps: int, task: str = "") -> str:
    """The last `max_steps` steps of an attempt: the task when the observations do not state it (`task`), the
    initial observation, then action / observation pairs."""
    lines = [f"Task: {task}."] if task else []
    lines += [f"Initial observation: {observations[0]}"] if observations else []
    steps = list(zip(actions, observations[1:], strict=False))
    first = max(len(steps) - max_steps, 0)
    if first:
        lines = lines[:1] if task else []
        lines.append(f"(the first {first} step(s) are omitted)")
    for k, (action, obs) in enumerate(steps[first:], start=first + 1):
        lines.append(f"Action {k}: {action}\nObservation {k}: {obs}")
    return "\n".join(lines)


class RecordingPool:
    """Wraps an `EnvPool` and keeps each slot's observations since its last reset (the curate prompt's attempt)."""

    def __init__(self, pool):
        self.pool, self.num_slots = pool, pool.num_slots
        self.observations: dict[int, list[str]] = {}

    def reset(self, slots: list[int], tasks: list[dict], seeds: list[int]) -> list[Step | EnvFailure]:
        out = self.pool.reset(slots, tasks, seeds)
        for slot, step in zip(slots, out, strict=True):
            self.observations[slot] = [] if isinstance(step, EnvFailure) else [step.observation]
        return out

    def step(self, slots: list[int], actions: list[str]) -> list[Step | EnvFailure]:
        out = self.pool.step(slots, actions)
        for slot, step in zip(slots, out, strict=True):
            if not isinstance(step, EnvFailure):
                self.observations[slot].append(step.observation)
        return out

    def close(self) -> None:
        self.pool.close()


@dataclass
class Trial:
    """One trial: K task positions, the episodes played, the carry rows, and the document before each position."""

    trial_id: int
    group_id: int
    tasks: list[dict]
    seed: int
    episodes: list[Episode | None] = field(default_factory=list)  # None: skipped (repeat mode, already won)
    carry_rows: dict[int, Row] = field(default_factory=dict)  # position p -> the curate/reflect row after task p
    documents: list[str] = field(default_factory=list)  # the document the solve prompt showed at each position
    reflections: dict[int, str] = field(default_factory=dict)  # reflect carry: position -> its reflection

    @property
    def K(self) -> int:
        return len(self.tasks)

    def won(self, p: int) -> bool:
        ep = self.episodes[p]
        return ep is not None and ep.won

    @property
    def failed(self) -> bool:
        return any(ep is not None and ep.failed for ep in self.episodes)

    def outcomes(self, reward_scale: float) -> list[float]:
        """r_p = reward_scale * won_p (the official r_p, the sum of play rewards, is 10 on a win and 0 otherwise)."""
        return [reward_scale * self.won(p) for p in range(self.K)]

    def rows(self) -> list[tuple[Row, int]]:
        """Every row of the trial in play order with its task position: solve turns of task p, then its carry row."""
        out = []
        for p, ep in enumerate(self.episodes):
            if ep is not None:
                out += [(r, p) for r in ep.rows]
            if p in self.carry_rows:
                out.append((self.carry_rows[p], p))
        return out


class TrialRunner:
    """Plays trials of K positions for all trials of a rank together (one batched generation per turn / carry phase).

    Args:
        pool (`EnvPool`): one slot per concurrent trial.
        prompt: the solve prompt (`config.make_solve_prompt`: `prompts.SkillRisePrompt`, `SolvePrompt`, or a plain
            shared family); `DOC_SLOT` in its text is filled with the trial's document.
        tokenizer: the policy's tokenizer.
        env_name (`str`): names the task family in the curate prompt.
        max_turns (`int`): turn cap per task (SkillRise `env.max_turns`: 10 ALFWorld, 12 WebShop, 30 ScienceWorld).
        max_prompt_length (`int`): the prompt budget in tokens.
        carry_mode (`str`): `skill`, `none` or `reflect`.
        skill_max_chars (`int`): cap of the parsed document (4000).
        curate_history (`int`): attempt steps shown to the curate prompt.
        curate_prefix (`str`): text prefilled after the assistant header of curate turns (`""` in the paper; the CPU
            scale prefills `<skill>` so that a 135M model writes a document at all).
        chat_template_kwargs (`dict`, *optional*): e.g. `{"enable_thinking": False}` for Qwen3.
        prompt_overflow (`str`, *optional*, defaults to `"truncate"`): a longer prompt is left-truncated and counted
            (`truncate`), or ends the run with a message naming `max_prompt_length` (`raise`, official ALFWorld and
            ScienceWorld `data.truncation=error`).
    """

    def __init__(
        self,
        pool,
        prompt,
        tokenizer,
        env_name: str,
        max_turns: int,
        max_prompt_length: int,
        carry_mode: str = "skill",
        skill_max_chars: int = 4000,
        curate_history: int = 30,
        curate_prefix: str = "",
        chat_template_kwargs: dict | None = None,
        prompt_overflow: str = "truncate",
    ):
        if carry_mode not in CARRY_MODES:
            raise ValueError(f"Unknown carry_mode {carry_mode!r}; valid: {', '.join(CARRY_MODES)}.")
        if env_name not in CURATE_TEXT:
            raise ValueError(f"No curate prompt for environment {env_name!r}; known: {', '.join(CURATE_TEXT)}.")
        self.pool = RecordingPool(pool)
        self.tokenizer, self.env_name, self.carry_mode = tokenizer, env_name, carry_mode
        self.max_prompt_length, self.skill_max_chars = max_prompt_length, skill_max_chars
        self.curate_history, self.curate_prefix = curate_history, curate_prefix
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.prompt, self.prompt_overflow = prompt, prompt_overflow
        self.collector = RolloutCollector(
            self.pool, self.prompt, tokenizer, max_turns, max_prompt_length, self.insert_document,
            self.chat_template_kwargs,
        )  # fmt: skip
        self.timings = self.collector.timings

    def insert_document(self, text: str, task: dict) -> str:
        """`RolloutCollector` prompt transform: fill the document slot with the trial's current document."""
        return text.replace(DOC_SLOT, document_section(task["skill_document"], self.carry_mode))

    def carry_prompt(self, document: str, observations: list[str], actions: list[str], won: bool,
                     task: dict | None = None) -> str:  # fmt: skip
        """The chat-templated curate (or reflect) prompt, ending with `curate_prefix`. A TextRooms attempt starts
        with its task (`TASK_IN_ATTEMPT`): ALFWorld's initial observation states the task ("Your task is to: ..."),
        TextRooms' does not."""
        env = ENV_LABELS.get(self.env_name, self.env_name)
        line = task["instruction"] if task is not None and self.env_name in TASK_IN_ATTEMPT else ""
        trajectory = format_attempt(observations, actions, self.curate_history, line)
        outcome = "SUCCESS" if won else "FAILURE (the task was not completed)"
        if self.carry_mode == "reflect":
            user = REFLECT_PROMPT.format(env=env, trajectory=trajectory, outcome=outcome)
        else:
            text = CURATE_TEXT[self.env_name]
            user = CURATE_PROMPT.format(
                family=text.family, attempt=text.attempt, abstract=text.abstract, procedure=text.procedure,
                document=document.strip() or EMPTY_DOCUMENT, trajectory=trajectory, outcome=outcome,
            )  # fmt: skip
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True,
            **self.chat_template_kwargs,
        )  # fmt: skip
        return text + self.curate_prefix

    def run(
        self,
        groups: list[list[dict]],
        group_ids: list[int],
        seeds: list[int],
        generate: GenerateFn,
        *,
        K: int,
        prompt_count: Callable[[int], int] = lambda n: n,
        trial_offset: int = 0,
        skip_won: bool = False,
    ) -> list[Trial]:
        """Play one trial of K tasks per group (slot i plays group i); returns the trials in input order.

        `prompt_count(n)` is the number of prompts this rank sends for `n` prompts of its own (the trainer's
        `_prompt_count`: the maximum over ranks where TRL's vLLM server or TP > 1 hands results back by rank offset,
        otherwise `n`, or one dummy while another rank still works; 0 when no rank has work). Every solve turn
        (through the collector) and every carry phase asks it, so every rank makes the same generation calls, also a
        rank with no groups at all (an empty evaluation chunk): K is given, not read from the groups.
        """
        if any(len(g) != K for g in groups):
            raise ValueError(f"Every group of a trial batch must have K = {K} tasks.")
        trials = [
            Trial(trial_offset + i, g_id, g, s)
            for i, (g, g_id, s) in enumerate(zip(groups, group_ids, seeds, strict=True))
        ]
        documents = [""] * len(trials)  # the document starts empty in every trial (never persisted)
        for p in range(K):
            playing = [i for i, t in enumerate(trials) if not (skip_won and any(t.won(q) for q in range(p)))]
            for i, t in enumerate(trials):
                t.documents.append(documents[i])
            tasks = [{**trials[i].tasks[p], "skill_document": documents[i]} for i in playing]
            # a task with a fixed goal plays with the seed its goal was drawn with (WebShop, `groups.pin_webshop_goals`)
            env_seeds = [trials[i].tasks[p].get("env_seed", trials[i].seed) for i in playing]
            episodes = self.collector.collect(
                tasks, [trials[i].group_id for i in playing], env_seeds, generate,
                prompt_count, episode_offset=(trial_offset + len(trials) * p),
            )  # fmt: skip
            self._check_overflow([r for ep in episodes for r in ep.rows])
            by_trial = dict(zip(playing, episodes, strict=True))
            observations = {i: self.pool.observations.get(k, []) for k, i in enumerate(playing)}
            for i, t in enumerate(trials):
                ep = by_trial.get(i)
                if ep is not None:
                    for row in ep.rows:
                        row.role, row.episode_id = "play", t.trial_id
                t.episodes.append(ep)
            if p == K - 1 or self.carry_mode == "none":
                continue
            self._carry(trials, playing, by_trial, observations, documents, p, generate, prompt_count)
        return trials

    def _check_overflow(self, rows: list[Row]) -> None:
        if self.prompt_overflow == "raise" and any(r.prompt_truncated for r in rows):
            longest = max(len(r.prompt_ids) for r in rows if r.prompt_truncated)
            raise ValueError(
                f"A {self.env_name} prompt is longer than env.max_prompt_length={self.max_prompt_length} tokens "
                f"(cut to {longest}); the official run stops here too (data.truncation=error): raise "
                "env.max_prompt_length, shorten env.history_length, or set env.prompt_overflow=truncate."
            )

    def _carry(self, trials, playing, by_trial, observations, documents, p, generate, prompt_count) -> None:
        """One curate (or reflect) generation per trial after position p; updates `documents`. `skill`: every trial
        that played p curates. `reflect` (the LaMer baseline, official `carry_mode='reflect'`): only the trials that
        did not solve task p reflect (the loop's `is_done = is_won`), the reflection is the last `<remark>` block (the
        raw answer when there is none, flagged invalid) and all of a trial's reflections so far are carried
        (`_format_reflections`). The call carries `prompt_count(n)` prompts for the rank's n carrying trials
        (dummies after them), none when no rank carries."""
        reflect = self.carry_mode == "reflect"
        if reflect:
            playing = [i for i in playing if not by_trial[i].won]
        n_prompts = prompt_count(len(playing))
        if n_prompts == 0:
            return
        texts, ids, truncated = [], [], []
        for i in playing:
            ep = by_trial[i]
            text = self.carry_prompt(documents[i], observations[i], [r.action for r in ep.rows], ep.won,
                                     trials[i].tasks[p])  # fmt: skip
            tok = self.tokenizer(text, add_special_tokens=False).input_ids
            texts.append(text)
            ids.append(tok[-self.max_prompt_length :])
            truncated.append(len(tok) > self.max_prompt_length)
        t0 = time.perf_counter()
        dummies = [[self.tokenizer.pad_token_id]] * (n_prompts - len(ids))
        if self.prompt_overflow == "raise" and any(truncated):
            raise ValueError(f"A {self.env_name} curate prompt is longer than env.max_prompt_length="
                             f"{self.max_prompt_length} tokens: raise it, shorten env.curate_history, or set "
                             "env.prompt_overflow=truncate.")  # fmt: skip
        completions, logps = generate(ids + dummies)  # the dummies' completions are dropped below
        self.timings["generate_s"] += time.perf_counter() - t0
        for k, i in enumerate(playing):
            completion_text = self.tokenizer.decode(completions[k], skip_special_tokens=True)
            t = trials[i]
            if reflect:
                parsed = parse_tagged(self.curate_prefix + completion_text, "remark", self.skill_max_chars)
                t.reflections[p] = parsed if parsed is not None else (self.curate_prefix + completion_text).strip()
                documents[i] = format_reflections(t.reflections, str(t.tasks[p].get("task_type", "a task")))
            else:
                parsed = parse_tagged(self.curate_prefix + completion_text, "skill", self.skill_max_chars)
                if parsed is not None:  # on a parse failure the old document is kept (official env_manager)
                    documents[i] = parsed
            t.carry_rows[p] = Row(
                prompt_ids=ids[k],
                completion_ids=list(completions[k]),
                prompt_text=texts[k],
                completion_text=completion_text,
                action=documents[i],
                is_action_valid=parsed is not None,
                group_id=t.group_id,
                episode_id=t.trial_id,
                turn_idx=0,
                role="curate" if self.carry_mode == "skill" else "reflect",
                prompt_truncated=truncated[k],
                failed=by_trial[i].failed,
                sampling_logps=None if logps is None else list(logps[k]),  # the sampler/trainer gap metric
            )


# --- evaluation protocols (official `success_evaluator` of skillrise_sciworld/env_manager.py) ---
def task_score(ep: Episode) -> float:
    """An episode's task score in [0, 1] (official `info['task_score']`): WebShop's purchase score, ScienceWorld's
    engine score / 100, else 1 on a win and 0 otherwise."""
    if "task_score" in ep.info:
        return float(ep.info["task_score"])
    if "score" in ep.info:
        return max(float(ep.info["score"]), 0.0) / 100.0
    return float(ep.won)


def trial_record(trial: Trial) -> dict:
    """What an evaluation log keeps of a trial (no token ids)."""
    return {
        "task_ids": [t["task_id"] for t in trial.tasks],
        "family": trial.tasks[0].get("family", trial.tasks[0].get("task_type")),
        "padded": [bool(t.get("padded", False)) for t in trial.tasks],
        "seed": trial.seed,
        "won": [trial.won(p) for p in range(trial.K)],
        "played": [ep is not None for ep in trial.episodes],
        "failed": trial.failed,
        "turns": [0 if ep is None else len(ep.rows) for ep in trial.episodes],
        "task_types": [str(t.get("task_type", "")) for t in trial.tasks],
        "task_scores": [0.0 if ep is None else task_score(ep) for ep in trial.episodes],
        "curate_valid": [trial.carry_rows[p].is_action_valid for p in sorted(trial.carry_rows)],
        "documents": trial.documents,
        "actions": [[] if ep is None else [r.action for r in ep.rows] for ep in trial.episodes],
    }


def summarize_trials(records: list[dict], mode: str, seeds: list[int]) -> dict:
    """`repeat`: cumulative pass@k, k = 1..K (solved in any of the first k attempts of the same task) and
    `task_score@k` (the best task score of the first k attempts); `type/<task type>/pass@k` per task type.
    `cross`: per-position pass@1 `success_pos<p>` and `task_score_pos<p>` over non-padded positions, their mean
    `success_rate`, and `type/<task type>/success_pos<p>` (official `success_evaluator`: `success_rate[pos]`,
    `task_score[pos]`, `<task_type>|success_rate[pos]`). Means over seeds (a task type over the seeds that have it)."""
    import statistics

    if not records:
        return {}
    K = len(records[0]["won"])
    per_seed: dict[str, list[float]] = {}
    for s in seeds:
        mine = [r for r in records if r["seed"] == s and not r["failed"]]
        values: dict[str, float] = {}
        scores = [r.get("task_scores", [float(w) for w in r["won"]]) for r in mine]
        types = [r.get("task_types", [r["family"]] * K) for r in mine]
        if mode == "repeat":
            for k in range(K):
                values[f"pass@{k + 1}"] = sum(any(r["won"][: k + 1]) for r in mine) / max(len(mine), 1)
                values[f"task_score@{k + 1}"] = sum(max(s[: k + 1]) for s in scores) / max(len(mine), 1)
                for tt in sorted({ts[0] for ts in types}):
                    rs = [r for r, ts in zip(mine, types, strict=True) if ts[0] == tt]
                    values[f"type/{tt}/pass@{k + 1}"] = sum(any(r["won"][: k + 1]) for r in rs) / len(rs)
        else:
            all_won = []
            for p in range(K):
                kept = [j for j, r in enumerate(mine) if not r["padded"][p]]
                won = [mine[j]["won"][p] for j in kept]
                all_won += won
                values[f"success_pos{p}"] = sum(won) / max(len(won), 1)
                values[f"task_score_pos{p}"] = sum(scores[j][p] for j in kept) / max(len(kept), 1)
                for tt in sorted({types[j][p] for j in kept}):
                    of_type = [mine[j]["won"][p] for j in kept if types[j][p] == tt]
                    values[f"type/{tt}/success_pos{p}"] = sum(of_type) / len(of_type)
            values["success_rate"] = sum(all_won) / max(len(all_won), 1)
        curate = [v for r in mine for v in r["curate_valid"]]
        if curate:
            values["curate_parse_ratio"] = sum(curate) / len(curate)
        for key, value in values.items():
            per_seed.setdefault(key, []).append(value)
    out: dict = {"mode": mode, "K": K, "num_trials": len(records), "failed_trials": sum(r["failed"] for r in records)}
    for key, vals in per_seed.items():
        out[key] = statistics.fmean(vals)
        out[f"{key}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return out
