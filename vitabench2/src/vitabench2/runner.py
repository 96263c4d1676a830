"""Orchestrator: runs each user's subtasks in temporal order with a memory, a user simulator and the judge; writes
one JSON line per finished subtask and resumes an interrupted run without redoing finished subtasks.

VitaBench 2.0 (arXiv 2605.27141) evaluation protocol. Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/orchestrator/personalization_orchestrator.py` (per-user loop: memory update before each subtask, one
conversation per subtask, judge) and `src/vita/orchestrator/orchestrator.py` (conversation loop: the trajectory opens
with the agent's greeting; every user message, agent message and batch of tool results is one step; the default
limit is 300 steps (`config.py` DEFAULT_MAX_STEPS); an empty agent reply is retried 3 times, then the conversation
ends as an invalid agent message; the error counter is never incremented, so `max_errors` never ends a conversation;
premature terminations score 0).
"""

import json
import logging
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from .backends import BackendError, ChatBackend
from .judge import SlidingWindowJudge
from .memory import BaseMemory, RAGCacheMiss, create_memory, full_context_budget
from .metrics import compute_metrics
from .tasks import PersonalizationTask, SubTask, agent_clock, load_tasks, sample_tasks_path, select
from .tools import Environment
from .user import STOP_TOKEN, UserSimulator


logger = logging.getLogger(__name__)
# Official first trajectory message (`orchestrator.get_default_first_agent_message`, English wording ours).
GREETING = "Hello, how can I help you?"
# Attempts at a non-empty agent reply before INVALID_AGENT_MESSAGE (official `Orchestrator.step`, max_retries = 3).
AGENT_REPLY_ATTEMPTS = 3


PERSONALIZATION_POLICY = """# Role
You are a personal life-service assistant (food delivery, in-store services, travel) for one long-term user.
The current time is {time}.

# Policy
- Prefer the user's remembered preferences (memory below) over ratings or distance when choosing.
- When the request is vague, use the memory to decide; confirm your choice with the user but do not over-ask.
- Never fabricate information or tool results; use the tools to search, check details and place orders.
- Place orders only with real tool calls, and report failures honestly.
- When the user confirms there are no other needs, end your final message with '{stop}'."""
PROACTIVE_POLICY = """# Role
You are a personal life-service assistant (food delivery, in-store services, travel) for one long-term user.
The current time is {time}.

# Policy
- Some information needed to complete this request may be missing: notice it and ask the user, or explore the
  environment with the tools, before acting.
- Fulfil the user's genuine needs only; do not decide on the user's behalf or upsell.
- Prefer the user's remembered preferences (memory below) over ratings or distance.
- Never fabricate information or tool results; place orders only with real tool calls.
- When the user confirms there are no other needs, end your final message with '{stop}'."""
ADDENDUM = """- Confirm the user id before using it in a tool call; never use placeholder values."""
# VitaBench 1.0 agent policy (meituan-longcat/vitabench @ 96f3b85, `src/vita/prompts/agent_system_prompt.yaml`, the
# same in 2.0; `LLMAgent.system_prompt` formats it with the time and weekday and adds nothing else).
V1_POLICY = """# Environment
- Current time: {time}

# Using tools
- When a request needs a tool, first check whether every argument is known: take the known ones from the
  conversation and ask the user for the others.
- When the user cannot give some information, look it up with the tools first.
- Follow each tool's preconditions and postconditions.

# Conversation
- Answer only from information already in the conversation; never make information up.
- Work towards the user's request; do not steer the user to new requests.
- When the request is done, ask whether the user needs anything else; if not, reply with '{stop}' to end the
  conversation."""


class Termination(StrEnum):
    """Why a subtask's conversation ended (official `TerminationReason`, plus `backend_error`)."""

    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"  # premature: reward 0
    TOO_MANY_ERRORS = "too_many_errors"  # premature: reward 0
    INVALID_AGENT_MESSAGE = "invalid_agent_message"  # premature: reward 0
    BACKEND_ERROR = "backend_error"  # a model endpoint failed for good: recorded, reward 0, rerun with --retry-failed


PREMATURE = (
    Termination.MAX_STEPS,
    Termination.TOO_MANY_ERRORS,
    Termination.INVALID_AGENT_MESSAGE,
    Termination.BACKEND_ERROR,
)


def trial_seeds(seed: int, num_trials: int) -> list[int]:
    """One seed per trial drawn from the run seed (official `run.py`: `random.seed(seed)`, then
    `random.randint(0, 1000000)` per trial)."""
    rng = random.Random(seed)
    return [rng.randint(0, 1000000) for _ in range(num_trials)]


class TrialBackend:
    """A back end as one trial sees it: every call carries the trial's seed (official: `set_seed` on the agent and
    the user of each trial; the judge gets no seed). The agent's memory updates go through it too.

    Args:
        backend ([`ChatBackend`]): the shared back end.
        seed (`int`): the trial's seed.
    """

    def __init__(self, backend: ChatBackend, seed: int):
        self.backend, self.seed = backend, seed

    def chat(self, messages: list[dict], tools: list[dict] | None = None, role: str = "agent"):
        return self.backend.chat(messages, tools, role, seed=self.seed)


class Interrupted(Exception):
    """The run was asked to stop (Ctrl-C); the subtask in progress is dropped and reruns on resume."""


@dataclass
class RunConfig:
    """Settings of one run (official defaults: `src/vita/config.py`, `src/vita/cli.py`).

    Args:
        output (`str`): run folder (results, config, run history).
        agent / user / judge (`str`): back end specs (`transformers:PATH`, `openai:MODEL@URL`).
        memory_type (`str`, *optional*, defaults to `"null"`): built-in memory; or `memory_class` (dotted path).
        num_trials (`int`, *optional*, defaults to `1`): independent runs of every user (leaderboard: 4).
        max_steps (`int`, *optional*, defaults to `300`): agent, user and tool-result steps per subtask (official).
        max_errors (`int`, *optional*): end a subtask after this many failed tool calls. Default `None`: never, as the
            official orchestrator (its error counter is never incremented).
        max_concurrency (`int`, *optional*, defaults to `4`): (user, trial) sequences run in parallel.
        evaluation_type (`str`, *optional*, defaults to `"trajectory"`): see [`SlidingWindowJudge`].
        max_tokens (`int`, *optional*, defaults to `4096`): completion cap of OpenAI-compatible agent and user back ends.
        judge_max_tokens (`int`, *optional*, defaults to `8192`): completion cap of an OpenAI-compatible judge (the
            official models.yaml entry of gpt-4.1).
        max_new_tokens / max_input_tokens (`int`): completion and prompt caps of in-process back ends.
        enable_thinking (`bool`, *optional*): sent as `chat_template_kwargs.enable_thinking` (vLLM); None: not sent.
        thinking_roles (`list[str]`, *optional*, defaults to `["agent"]`): the roles `enable_thinking` is sent to.
        holidays (`str`, *optional*, defaults to `"official"`): `get_holiday_date`'s table (`official`: 2023-2025;
            `computed`: any year).
        shuffle_search (`bool`, *optional*, defaults to `False`): the search-shuffle ablation (official
            `VITA_SHUFFLE_SEARCH`): search results in random order, seeded by trial and subtask.
        context_length (`int`, *optional*): the agent model's context window; caps the Full Context budget.
        seed (`int`, *optional*, defaults to `300`): the run seed; each trial's agent and user calls carry a seed drawn
            from it ([`trial_seeds`], official); the judge gets none.
        prices (`dict`, *optional*): USD per million tokens by model name, `{"MODEL": {"prompt_price": p,
            "completion_price": c}}` (official models.yaml `cost_1m_token_dollar`), over [`OFFICIAL_PRICES`]; only
            the cost figures of `summary.json` depend on it.
    """

    output: str
    agent: str = "transformers:smollm2-135m"
    user: str = "transformers:smollm2-135m"
    judge: str = "transformers:smollm2-135m"
    tasks: str | None = None  # None: the packaged English sample
    language: str = "english"
    memory_type: str | None = "null"
    memory_class: str | None = None
    memory_kwargs: dict = field(default_factory=dict)
    num_trials: int = 1
    users: list[str] | None = None
    subtasks: list[str] | None = None
    num_users: int | None = None
    max_steps: int = 300
    max_errors: int | None = None
    max_concurrency: int = 4
    outcome_reward: bool = False
    evaluation_type: str = "trajectory"
    judge_window: int = 10
    judge_overlap: int = 2
    judge_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 4096
    judge_max_tokens: int = 8192
    max_new_tokens: int = 256
    max_input_tokens: int = 4096
    enable_thinking: bool | None = None
    thinking_roles: list[str] = field(default_factory=lambda: ["agent"])
    holidays: str = "official"
    shuffle_search: bool = False
    context_length: int | None = None
    seed: int = 300
    prices: dict = field(default_factory=dict)

    @property
    def memory_name(self) -> str:
        return self.memory_class or str(self.memory_type)


# Settings that do not change results, so a resume may change them.
RESUMABLE_KEYS = ("output", "max_concurrency", "users", "subtasks", "num_users", "num_trials", "prices")
# USD per million prompt / completion tokens: the official `src/vita/models.yaml.example` entries
# (`cost_1m_token_dollar`); `--prices` adds or replaces models. A model without both prices costs 0, as official.
OFFICIAL_PRICES = {
    "gpt-4.1": {"prompt_price": 2.00, "completion_price": 8.00},
    "gpt-4o-mini": {"prompt_price": 0.15, "completion_price": 0.60},
    "o4-mini": {"prompt_price": 1.10, "completion_price": 4.40},
}


def model_name(spec: str) -> str:
    """The model of a back end spec: `openai:MODEL@URL` -> MODEL, `transformers:PATH` -> PATH."""
    return spec.partition(":")[2].partition("@")[0]


def run_cost(records: list[dict], specs: dict[str, str], prices: dict | None = None) -> dict:
    """Dollar cost of the recorded conversations and judgements per role (official `get_response_cost` per call,
    summed per simulation by `get_cost` and over the run by `csv_utils.create_run_summary`: `total_agent_cost`,
    `total_user_cost`, and `avg_agent_cost` per simulation from `agent_metrics`), from each record's token counts;
    `specs` maps agent / user / judge to back end specs. Memory-model calls are not in the records (nor in the
    official cost)."""
    table = {**OFFICIAL_PRICES, **(prices or {})}
    out: dict = {}
    for role in ("agent", "user", "judge"):
        price = table.get(model_name(specs[role]), {})
        p, c = price.get("prompt_price", 0), price.get("completion_price", 0)
        if not (p and c):
            p = c = 0
        tokens = [r.get("tokens", {}) for r in records]
        prompt = sum(t.get(f"{role}_prompt", 0) for t in tokens)
        completion = sum(t.get(f"{role}_completion", 0) for t in tokens)
        out[f"{role}_prompt_tokens"], out[f"{role}_completion_tokens"] = prompt, completion
        out[f"total_{role}_cost"] = round((p * prompt + c * completion) / 1_000_000, 6)
    out["avg_agent_cost"] = round(out["total_agent_cost"] / len(records), 6) if records else 0.0
    out["priced"] = {role: model_name(specs[role]) in table for role in ("agent", "user", "judge")}
    return out


def build_system_prompt(subtask: SubTask, profile: dict, memory_text: str, version: str = "2.0") -> str:
    """2.0 (official `PersonalizationAgent.system_prompt`): policy(time) + addendum, the user's account details as
    `- key: value` lines (omitted when empty), then `## User Preference Memory` with `memory.read(instruction)`.
    1.0: the 1.0 policy(time) alone (official `LLMAgent`)."""
    if version == "1.0":
        return V1_POLICY.format(time=agent_clock(subtask.environment), stop=STOP_TOKEN)
    policy = PROACTIVE_POLICY if subtask.is_proactive else PERSONALIZATION_POLICY
    parts = [policy.format(time=agent_clock(subtask.environment), stop=STOP_TOKEN) + "\n" + ADDENDUM]
    if profile:
        lines = [f"- {k}: {'、'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in profile.items()]
        parts.append("## Current user basic info\nThe user's account details, ready to use:\n" + "\n".join(lines))
    parts.append(
        "## User Preference Memory\nWhat past interactions showed about this user's preferences; use it, above all "
        "when a request is vague or ambiguous:\n\n" + memory_text
    )
    return "\n\n".join(parts)


def run_subtask(
    subtask: SubTask,
    task: PersonalizationTask,
    memory: BaseMemory,
    agent: ChatBackend | TrialBackend,
    user: ChatBackend | TrialBackend,
    judge: SlidingWindowJudge,
    config: RunConfig,
    abort: threading.Event | None = None,
    memory_errors: list[str] | None = None,
    search_seed: int | None = None,
) -> dict:
    """One conversation plus its judgement; returns the result record (without user/trial keys).

    A back end that fails for good (see [`BackendError`]) ends the subtask as `backend_error` with its message;
    `abort` set (Ctrl-C) raises [`Interrupted`] at the next step. Every endpoint failure of the subtask (the memory
    update before it, `memory_errors`, the agent, the user, the judge) is listed in the record's `backend_error`
    (`"role: message"` strings). `search_seed` (the trial's) seeds the search-shuffle ablation.
    """
    start = time.perf_counter()
    shuffle = random.Random(f"{search_seed}:{subtask.subtask_id}") if config.shuffle_search else None
    env = Environment(subtask.environment, subtask.domains, holidays=config.holidays, shuffle_search=shuffle)
    profile = task.user_profile or subtask.user_scenario.user_profile
    agent_tokens, steps, errors, termination, failure = [0, 0], 0, 0, None, ""
    backend_errors = list(memory_errors or [])
    # 1.0 tasks run as the official 1.0 harness does: no memory in the prompt, no memory tools.
    try:
        memory_text = memory.read(query=subtask.instruction or None) if task.version == "2.0" else ""
    except RAGCacheMiss as err:  # official: a cache miss fails the subtask (no silent fallback)
        memory_text, termination, failure = "", Termination.BACKEND_ERROR, f"memory read: {err}"
        backend_errors.append(failure)
    memory_schemas = memory.tool_schemas() if task.version == "2.0" else []
    memory_tools = {t["function"]["name"] for t in memory_schemas}
    tools = env.tool_schemas() + memory_schemas
    prompt = build_system_prompt(subtask, profile, memory_text, task.version)
    messages: list[dict] = [{"role": "system", "content": prompt}]
    history = [
        {"role": m["role"], "content": m["content"]}
        for m in subtask.message_history or []
        if isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
    ]
    messages += history or [{"role": "assistant", "content": GREETING}]
    # official `run.py`: the persona is `str(profile)`
    sim = UserSimulator(user, subtask, persona=str(profile), user_id=task.user_id, version=task.version)
    next_role = "agent" if messages[-1]["role"] == "user" else "user"

    def check_abort():
        if abort is not None and abort.is_set():
            raise Interrupted

    try:
        while termination is None:
            check_abort()
            if next_role == "user":
                text = sim.first_message() if steps == 0 and not history else sim.respond(messages)
                messages.append({"role": "user", "content": text})
                next_role = "agent"
                if STOP_TOKEN in text:
                    termination = Termination.USER_STOP
            elif next_role == "agent":
                for _ in range(AGENT_REPLY_ATTEMPTS):
                    reply = agent.chat(messages, tools=tools, role="agent")
                    agent_tokens[0] += reply.prompt_tokens
                    agent_tokens[1] += reply.completion_tokens
                    if reply.tool_calls or reply.content.strip():
                        break
                    check_abort()
                else:
                    termination = Termination.INVALID_AGENT_MESSAGE
                    break  # official: the step is not counted
                messages.append({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
                next_role = "tool" if reply.tool_calls else "user"
                if STOP_TOKEN in reply.content:
                    termination = Termination.AGENT_STOP
            else:
                for call in messages[-1]["tool_calls"]:
                    failed = False
                    try:
                        if call["name"] in memory_tools:
                            content = memory.call_tool(call["name"], call["arguments"])
                        else:
                            content = env.call(call["name"], call["arguments"])
                    except Exception as err:  # noqa: BLE001
                        # Official `Environment.get_response`: any exception of a tool call (bad arguments, a bug)
                        # becomes that call's `Error: ...` observation; the conversation goes on.
                        content, failed = f"Error: {err}", True
                    errors += failed
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call["id"],
                            "name": call["name"],
                            "content": content,
                            "error": failed,
                        }
                    )
                next_role = "agent"
            steps += 1
            # Official order: the step limit is checked after every step and overrides a stop in the same step.
            if steps >= config.max_steps:
                termination = Termination.MAX_STEPS
            elif config.max_errors is not None and errors >= config.max_errors:
                termination = Termination.TOO_MANY_ERRORS
    except BackendError as err:
        termination, failure = Termination.BACKEND_ERROR, f"backend error: {err}"
        backend_errors.append(f"{next_role}: {err}")
        logger.warning("subtask %s of user %s: %s", subtask.subtask_id, task.user_id, failure)
    backend_errors += memory.update_errors  # reads that fell back (a failed query embedding), memory tools included
    memory.update_errors = []
    record = {
        "subtask_id": subtask.subtask_id,
        "domain": subtask.domain,
        "skill_tested": subtask.skill_tested,
        "termination": termination.value,
        "num_steps": steps,
        "num_errors": errors,
        "memory_read": memory_text,
    }
    judge_tokens = [0, 0]
    if termination in PREMATURE:
        record.update(
            reward=0.0,
            reward_breakdown=0.0,
            rubric_states=[],
            judge_failed=False,
            failure_reason=failure or f"premature termination: {termination.value}",
        )
    else:
        check_abort()
        record.update(judge_record(judge, subtask, messages))
        judge_tokens = record.pop("_judge_tokens")
        judge_error = record.pop("_judge_backend_error")
        backend_errors += [judge_error] if judge_error else []
    record["backend_error"] = backend_errors
    record["tokens"] = {
        "agent_prompt": agent_tokens[0],
        "agent_completion": agent_tokens[1],
        "user_prompt": sum(r.prompt_tokens for r in sim.results),
        "user_completion": sum(r.completion_tokens for r in sim.results),
        "judge_prompt": judge_tokens[0],
        "judge_completion": judge_tokens[1],
    }
    record["duration_s"] = round(time.perf_counter() - start, 3)
    record["final_state"] = env.public_state()
    record["messages"] = messages
    return record


def judge_record(judge: SlidingWindowJudge, subtask: SubTask, messages: list[dict]) -> dict:
    """The judge's fields of a record; an endpoint failure of the judge is a judge failure (retried on resume)."""
    try:
        verdict = judge.evaluate(subtask, messages)
    except BackendError as err:
        return {
            "reward": 0.0,
            "reward_breakdown": 0.0,
            "rubric_states": [],
            "judge_failed": True,
            "failure_reason": f"judge backend error: {err}",
            "_judge_tokens": [0, 0],
            "_judge_backend_error": f"judge: {err}",
        }
    return {
        "reward": verdict.reward,
        "reward_breakdown": verdict.reward_breakdown,
        "rubric_states": verdict.rubric_states,
        "justifications": verdict.justifications,
        "outcome_reward": verdict.outcome_reward,
        "judge_failed": verdict.failed,
        "failure_reason": verdict.failure_reason,
        "_judge_tokens": [verdict.prompt_tokens, verdict.completion_tokens],
        "_judge_backend_error": "",
    }


def read_records(path: Path) -> list[dict]:
    """Finished-subtask records; a truncated last line (crash while writing) is ignored."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def write_records(path: Path, records: list[dict]) -> None:
    """Replace `results.jsonl` atomically (a crash leaves the old or the new file, never half of one)."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def append_run_info(out: Path, entry: dict) -> None:
    """Add one invocation (command, commit, time, outcome) to `run_info.json`, which keeps the whole history."""
    path = out / "run_info.json"
    history = json.loads(path.read_text()).get("history", []) if path.exists() else []
    history.append(entry)
    path.write_text(json.dumps({**history[0], "history": history}, indent=1))


def rejudge_run(source: Path, output: Path, judge: SlidingWindowJudge, judge_spec: str, tasks=None) -> dict:
    """Judge a saved run's conversations again (another judge model or evaluation type) into a new run folder.

    The conversations, terminations and final states are kept; premature terminations stay 0 unjudged, as in a run.
    Resumable: records already in `output` are kept. Returns the metrics of the new folder, also in `summary.json`.
    `tasks` (default: loaded from the source run's task file or folder) must hold the judged subtasks.
    """
    source, output = Path(source), Path(output)
    config = json.loads((source / "config.json").read_text())
    config.update(
        output=str(output),
        judge=judge_spec,
        evaluation_type=judge.evaluation_type,
        outcome_reward=judge.outcome_reward,
        judge_window=judge.window,
        judge_overlap=judge.overlap,
        judge_retries=judge.max_retries,
    )
    if tasks is None:
        tasks = load_tasks(config["tasks"] or sample_tasks_path(), config["language"])
    subtasks = {(t.user_id, s.subtask_id): s for t in tasks for s in t.subtasks}
    output.mkdir(parents=True, exist_ok=True)
    (output / "config.json").write_text(json.dumps(config, indent=1))
    results = output / "results.jsonl"
    done = {(r["user_id"], r["trial"], r["subtask_id"]) for r in read_records(results)}
    for record in read_records(source / "results.jsonl"):
        if (record["user_id"], record["trial"], record["subtask_id"]) in done:
            continue
        subtask = subtasks.get((record["user_id"], record["subtask_id"]))
        if subtask is None:
            raise ValueError(f"subtask {record['subtask_id']} of user {record['user_id']} is not in the tasks")
        if record["termination"] not in {t.value for t in PREMATURE}:
            verdict = judge_record(judge, subtask, record["messages"])
            tokens = verdict.pop("_judge_tokens")
            judge_error = verdict.pop("_judge_backend_error")
            kept = [e for e in record.get("backend_error", []) if not e.startswith("judge: ")]
            record.update(verdict, backend_error=kept + ([judge_error] if judge_error else []))
            record["tokens"].update(judge_prompt=tokens[0], judge_completion=tokens[1])
        record["rejudged_from"] = str(source)
        with open(results, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    records = read_records(results)
    summary = {
        "judge": judge_spec,
        "rejudged_from": str(source),
        "num_records": len(records),
        "judge_failures": sum(1 for r in records if r.get("judge_failed")),
        "backend_errors": sum(1 for r in records if r.get("backend_error")),
        "metrics": compute_metrics(records, config["num_trials"]),
        "cost": run_cost(records, config, config.get("prices")),
    }
    (output / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


class Runner:
    """Runs a [`RunConfig`] with given back ends; results go to `<output>/results.jsonl`, one line per subtask.

    Resume: records already in `results.jsonl` are kept; for an unfinished (user, trial) the memory is rebuilt by
    replaying `update` over the finished subtasks' interactions, then the remaining subtasks run. Records whose judge
    failed are judged again; records of subtasks whose back end failed are rerun only with `retry_failed=True`.
    Ctrl-C stops the run at the next model call: finished subtasks stay on disk, the ones in progress rerun on resume.
    """

    def __init__(
        self,
        config: RunConfig,
        agent: ChatBackend,
        user: ChatBackend,
        judge: ChatBackend,
        tasks: list[PersonalizationTask] | None = None,
        retry_failed: bool = False,
    ):
        self.config, self.agent, self.user, self.retry_failed = config, agent, user, retry_failed
        self.judge = SlidingWindowJudge(
            judge,
            config.judge_window,
            config.judge_overlap,
            config.judge_retries,
            config.outcome_reward,
            config.evaluation_type,
        )
        if tasks is None:
            tasks = load_tasks(config.tasks or sample_tasks_path(), config.language)
        # `--subtasks` selects which subtasks run; every earlier subtask's interactions still reach the memory.
        self.tasks = select(tasks, config.users, None, config.num_users)
        self.selected = {
            (t.user_id, s.subtask_id) for t in select(self.tasks, None, config.subtasks, None) for s in t.subtasks
        }
        self.out = Path(config.output)
        self.results_path = self.out / "results.jsonl"
        self._lock = threading.Lock()
        self._abort = threading.Event()
        for backend in (agent, user, judge):
            backend.abort = self._abort
        self.memory_kwargs = dict(config.memory_kwargs)
        if config.memory_type == "full_context" and config.context_length and "max_tokens" not in self.memory_kwargs:
            self.memory_kwargs["max_tokens"] = full_context_budget(config.context_length, config.max_tokens)
        if self.tasks:
            self._memory(self.tasks[0])  # bad memory settings fail here, not in a worker thread

    def _check_config(self) -> None:
        path = self.out / "config.json"
        current = asdict(self.config)
        if path.exists():
            old = json.loads(path.read_text())
            diff = [k for k in current if k not in RESUMABLE_KEYS and old.get(k) != current[k]]
            if diff:
                raise ValueError(
                    f"{self.out} holds a run with different settings {diff}; use a new --output to start afresh"
                )
        path.write_text(json.dumps(current, indent=1))

    def _drop_partial_line(self) -> None:
        """Cut a half-written last line (a crash while writing) so that new records start on a fresh line."""
        if not self.results_path.exists():
            return
        data = self.results_path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.results_path.write_bytes(data[: data.rfind(b"\n") + 1])

    def _write(self, record: dict) -> None:
        with self._lock, open(self.results_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()

    def _memory(self, task: PersonalizationTask) -> BaseMemory:
        return create_memory(
            self.config.memory_type, self.config.memory_class, self.config.language, task.user_id, **self.memory_kwargs
        )

    def _run_sequence(self, task: PersonalizationTask, trial: int, done: set) -> None:
        seed = trial_seeds(self.config.seed, trial + 1)[trial]
        agent, user = TrialBackend(self.agent, seed), TrialBackend(self.user, seed)
        memory = self._memory(task)
        memory.reset()
        for index, subtask in enumerate(task.subtasks):
            if self._abort.is_set():
                return
            try:
                memory.set_groundtruth(subtask.user_scenario.personalized_preference_memory)
                memory.set_current_location(task.user_id, subtask.subtask_id)
                if subtask.interactions:
                    memory.update(subtask.interactions, llm=agent)  # the agent's own LLM (official orchestrator)
            except (BackendError, RAGCacheMiss) as err:  # recorded on the subtask; the memory keeps its last state
                memory.update_errors.append(f"memory update: {err}")
            memory_errors, memory.update_errors = memory.update_errors, []
            if (task.user_id, trial, subtask.subtask_id) in done or (
                task.user_id,
                subtask.subtask_id,
            ) not in self.selected:
                continue
            try:
                record = run_subtask(
                    subtask,
                    task,
                    memory,
                    agent,
                    user,
                    self.judge,
                    self.config,
                    abort=self._abort,
                    memory_errors=memory_errors,
                    search_seed=seed,
                )
            except Interrupted:
                return
            self._write(
                {
                    "user_id": task.user_id,
                    "task_id": task.id,
                    "trial": trial,
                    "task_index": index,
                    "seed": seed,
                    "memory": self.config.memory_name,
                    **record,
                }
            )

    def _rejudge_failed(self, records: list[dict]) -> list[dict]:
        """Judge again the records whose judge failed (stored conversation, same subtask)."""
        subtasks = {(t.user_id, s.subtask_id): s for t in self.tasks for s in t.subtasks}
        changed = False
        for r in records:
            subtask = subtasks.get((r["user_id"], r["subtask_id"]))
            if not r.get("judge_failed") or subtask is None or self._abort.is_set():
                continue
            verdict = judge_record(self.judge, subtask, r["messages"])
            tokens = verdict.pop("_judge_tokens")
            judge_error = verdict.pop("_judge_backend_error")
            kept = [e for e in r.get("backend_error", []) if not e.startswith("judge: ")]
            r["backend_error"] = kept + ([judge_error] if judge_error else [])
            r.update(verdict, rejudged=r.get("rejudged", 0) + 1)
            r["tokens"].update(judge_prompt=tokens[0], judge_completion=tokens[1])
            changed = True
        if changed:
            write_records(self.results_path, records)
        return records

    def run(self) -> dict:
        """Run every (user, trial) not yet finished; returns the metrics, also written to `summary.json`.

        Raises `KeyboardInterrupt` after a clean stop when interrupted (results and summary are on disk).
        """
        self.out.mkdir(parents=True, exist_ok=True)
        self._check_config()
        self._drop_partial_line()
        self._abort.clear()
        records = read_records(self.results_path)
        if self.retry_failed:
            kept = [r for r in records if r["termination"] != Termination.BACKEND_ERROR.value]
            if len(kept) != len(records):
                write_records(self.results_path, kept)
            records = kept
        interrupted, previous_handler = False, None
        try:
            records = self._rejudge_failed(records)
            done = {(r["user_id"], r["trial"], r["subtask_id"]) for r in records}
            units = [
                (task, trial)
                for trial in range(self.config.num_trials)
                for task in self.tasks
                if any(
                    (task.user_id, trial, s.subtask_id) not in done and (task.user_id, s.subtask_id) in self.selected
                    for s in task.subtasks
                )
            ]
            pool = ThreadPoolExecutor(max_workers=self.config.max_concurrency)
            futures = [pool.submit(self._run_sequence, task, trial, done) for task, trial in units]
            try:
                for future in as_completed(futures):
                    future.result()
            except BaseException as err:
                # Ctrl-C or a crash: queued sequences are cancelled, running ones stop at their next model call;
                # finished subtasks are already on disk, so a rerun resumes from there.
                if isinstance(err, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
                    previous_handler = signal.signal(signal.SIGINT, signal.SIG_IGN)  # further Ctrl-C: keep stopping
                self._abort.set()
                for other in futures:
                    other.cancel()
                raise
            finally:
                while True:  # a second Ctrl-C must not leave worker threads running into interpreter exit
                    try:
                        pool.shutdown(wait=True)
                        break
                    except KeyboardInterrupt:
                        self._abort.set()
        except KeyboardInterrupt:
            interrupted = True
        summary = self.summarize()
        if interrupted:
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
            raise KeyboardInterrupt
        return summary

    def summarize(self) -> dict:
        records = read_records(self.results_path)
        records = [r for r in records if (r["user_id"], r["subtask_id"]) in self.selected]
        metrics = compute_metrics(records, self.config.num_trials)
        usage, seen = {}, []
        for backend in (self.agent, self.user, self.judge.backend):
            if any(backend is b for b in seen):  # one in-process model may serve several roles
                continue
            seen.append(backend)
            for call in backend.calls:
                u = usage.setdefault(
                    call["role"], {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0}
                )
                u["calls"] += 1
                u["prompt_tokens"] += call["prompt_tokens"]
                u["completion_tokens"] += call["completion_tokens"]
                u["latency_s"] = round(u["latency_s"] + call["latency_s"], 3)
        summary = {
            "memory": self.config.memory_name,
            "agent": self.config.agent,
            "user": self.config.user,
            "judge": self.config.judge,
            "num_records": len(records),
            "judge_failures": sum(1 for r in records if r.get("judge_failed")),
            "backend_errors": sum(1 for r in records if r.get("backend_error")),
            "terminations": {t.value: sum(1 for r in records if r["termination"] == t.value) for t in Termination},
            "metrics": metrics,
            "cost": run_cost(records, asdict(self.config), self.config.prices),
            "usage_this_session": usage,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary
