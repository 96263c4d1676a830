"""Orchestrator: runs each user's subtasks in temporal order with a memory, a user simulator and the judge; writes
one JSON line per finished subtask and resumes an interrupted run without redoing finished subtasks.

Paper spec sec. 3 (`run.py::_run_personalization_task`, `personalization_orchestrator.py`), sec. 2.3 (agent policy,
system prompt assembly), sec. 2.4 (termination: `###STOP###`, max steps, max errors, invalid agent message; premature
termination scores 0).
"""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from .backends import ChatBackend
from .judge import SlidingWindowJudge
from .memory import BaseMemory, create_memory
from .metrics import compute_metrics
from .tasks import PersonalizationTask, SubTask, load_tasks, sample_tasks_path, select
from .tools import Environment, ToolError
from .user import STOP_TOKEN, UserSimulator


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


class Termination(StrEnum):
    """Why a subtask's conversation ended (sec. 2.4)."""

    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"  # premature: reward 0
    TOO_MANY_ERRORS = "too_many_errors"  # premature: reward 0
    INVALID_AGENT_MESSAGE = "invalid_agent_message"  # premature: reward 0


PREMATURE = (Termination.MAX_STEPS, Termination.TOO_MANY_ERRORS, Termination.INVALID_AGENT_MESSAGE)


@dataclass
class RunConfig:
    """Settings of one run (paper spec sec. 4).

    Args:
        agent / user / judge (`str`): back end specs (`transformers:PATH`, `openai:MODEL@URL`).
        memory_type (`str`, *optional*, defaults to `"null"`): built-in memory; or `memory_class` (dotted path).
        num_trials (`int`, *optional*, defaults to `1`): independent runs of every user (leaderboard: 4).
        max_steps (`int`, *optional*, defaults to `50`): agent + user turns per subtask (README example; CLI 300).
        max_errors (`int`, *optional*, defaults to `10`): failed tool calls before the subtask is aborted.
        max_concurrency (`int`, *optional*, defaults to `4`): (user, trial) sequences run in parallel.
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
    max_steps: int = 50
    max_errors: int = 10
    max_concurrency: int = 4
    outcome_reward: bool = False
    judge_window: int = 10
    judge_overlap: int = 2
    judge_retries: int = 3
    max_new_tokens: int = 256
    seed: int = 300

    @property
    def memory_name(self) -> str:
        return self.memory_class or str(self.memory_type)


def agent_clock(environment: dict) -> str:
    """Subtask environment time plus weekday (sec. 2.3)."""
    raw = str(environment.get("time", ""))
    try:
        return f"{raw} ({datetime.strptime(raw, '%Y-%m-%d %H:%M:%S'):%A})"
    except ValueError:
        return raw


def build_system_prompt(subtask: SubTask, profile: dict, memory_text: str) -> str:
    """policy(time) + addendum + current user basic info + "## User Preference Memory" + memory.read(instruction)."""
    policy = PROACTIVE_POLICY if subtask.is_proactive else PERSONALIZATION_POLICY
    return "\n\n".join(
        [
            policy.format(time=agent_clock(subtask.environment), stop=STOP_TOKEN) + "\n" + ADDENDUM,
            "# Current user basic info\n" + json.dumps(profile, ensure_ascii=False),
            "## User Preference Memory\n" + (memory_text or "(no memory)"),
        ]
    )


def run_subtask(
    subtask: SubTask,
    task: PersonalizationTask,
    memory: BaseMemory,
    agent: ChatBackend,
    user: ChatBackend,
    judge: SlidingWindowJudge,
    config: RunConfig,
) -> dict:
    """One conversation plus its judgement; returns the result record (without user/trial keys)."""
    start = time.perf_counter()
    env = Environment(subtask.environment, subtask.domains)
    profile = task.user_profile or subtask.user_scenario.user_profile
    memory_text = memory.read(query=subtask.instruction or None)
    memory_tools = {t["function"]["name"] for t in memory.tool_schemas()}
    tools = env.tool_schemas() + memory.tool_schemas()
    messages: list[dict] = [{"role": "system", "content": build_system_prompt(subtask, profile, memory_text)}]
    for m in subtask.message_history or []:
        if isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str):
            messages.append({"role": m["role"], "content": m["content"]})
    sim = UserSimulator(user, subtask, persona=json.dumps(profile, ensure_ascii=False), user_id=task.user_id)
    agent_tokens = [0, 0]
    first = sim.first_message()
    messages.append({"role": "user", "content": first})
    steps, errors, termination = 1, 0, Termination.USER_STOP if STOP_TOKEN in first else None
    while termination is None:
        if steps >= config.max_steps:
            termination = Termination.MAX_STEPS
            break
        reply = agent.chat(messages, tools=tools, role="agent")
        agent_tokens[0] += reply.prompt_tokens
        agent_tokens[1] += reply.completion_tokens
        steps += 1
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls})
        if reply.tool_calls:
            for call in reply.tool_calls:
                failed = False
                try:
                    if call["name"] in memory_tools:
                        content = memory.call_tool(call["name"], call["arguments"])
                    else:
                        content = env.call(call["name"], call["arguments"])
                except (ToolError, ValueError) as err:
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
            if errors >= config.max_errors:
                termination = Termination.TOO_MANY_ERRORS
            continue
        if not reply.content.strip():
            termination = Termination.INVALID_AGENT_MESSAGE
            break
        if STOP_TOKEN in reply.content:
            termination = Termination.AGENT_STOP
            break
        if steps >= config.max_steps:
            termination = Termination.MAX_STEPS
            break
        text = sim.respond(messages)
        steps += 1
        messages.append({"role": "user", "content": text})
        if STOP_TOKEN in text:
            termination = Termination.USER_STOP
    record = {
        "subtask_id": subtask.subtask_id,
        "domain": subtask.domain,
        "skill_tested": subtask.skill_tested,
        "termination": termination.value,
        "num_steps": steps,
        "num_errors": errors,
        "memory_read": memory_text,
    }
    if termination in PREMATURE:
        record.update(
            reward=0.0,
            reward_breakdown=0.0,
            rubric_states=[],
            judge_failed=False,
            failure_reason=f"premature termination: {termination.value}",
        )
        judge_tokens = [0, 0]
    else:
        verdict = judge.evaluate(subtask, messages, env)
        record.update(
            reward=verdict.reward,
            reward_breakdown=verdict.reward_breakdown,
            rubric_states=verdict.rubric_states,
            justifications=verdict.justifications,
            outcome_reward=verdict.outcome_reward,
            judge_failed=verdict.failed,
            failure_reason=verdict.failure_reason,
        )
        judge_tokens = [verdict.prompt_tokens, verdict.completion_tokens]
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


class Runner:
    """Runs a [`RunConfig`] with given back ends; results go to `<output>/results.jsonl`, one line per subtask.

    Resume: records already in `results.jsonl` are kept; for an unfinished (user, trial) the memory is rebuilt by
    replaying `update` over the finished subtasks' interactions, then the remaining subtasks run.
    """

    def __init__(
        self,
        config: RunConfig,
        agent: ChatBackend,
        user: ChatBackend,
        judge: ChatBackend,
        tasks: list[PersonalizationTask] | None = None,
    ):
        self.config, self.agent, self.user = config, agent, user
        self.judge = SlidingWindowJudge(
            judge, config.judge_window, config.judge_overlap, config.judge_retries, config.outcome_reward
        )
        if tasks is None:
            tasks = load_tasks(config.tasks or sample_tasks_path(), config.language)
        self.tasks = select(tasks, config.users, config.subtasks, config.num_users)
        self.out = Path(config.output)
        self.results_path = self.out / "results.jsonl"
        self._lock = threading.Lock()
        self._abort = threading.Event()

    def _check_config(self) -> None:
        path = self.out / "config.json"
        current = asdict(self.config)
        if path.exists():
            old = json.loads(path.read_text())
            keys = (
                "agent",
                "user",
                "judge",
                "tasks",
                "language",
                "memory_type",
                "memory_class",
                "max_steps",
                "outcome_reward",
            )
            diff = [k for k in keys if old.get(k) != current.get(k)]
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

    def _run_sequence(self, task: PersonalizationTask, trial: int, done: set) -> None:
        memory = create_memory(
            self.config.memory_type,
            self.config.memory_class,
            self.config.language,
            task.user_id,
            **self.config.memory_kwargs,
        )
        memory.reset()
        for index, subtask in enumerate(task.subtasks):
            memory.set_groundtruth(subtask.user_scenario.personalized_preference_memory)
            if subtask.interactions:
                memory.update(subtask.interactions, llm=self.agent)  # the agent's own LLM (sec. 2.2)
            if (task.user_id, trial, subtask.subtask_id) in done:
                continue
            if self._abort.is_set():
                return  # finished before an interruption: memory replayed above, conversation kept
            record = run_subtask(subtask, task, memory, self.agent, self.user, self.judge, self.config)
            self._write(
                {
                    "user_id": task.user_id,
                    "task_id": task.id,
                    "trial": trial,
                    "task_index": index,
                    "memory": self.config.memory_name,
                    **record,
                }
            )

    def run(self) -> dict:
        """Run every (user, trial) not yet finished; returns the metrics, also written to `summary.json`."""
        self.out.mkdir(parents=True, exist_ok=True)
        self._check_config()
        self._drop_partial_line()
        done = {(r["user_id"], r["trial"], r["subtask_id"]) for r in read_records(self.results_path)}
        units = [
            (task, trial)
            for trial in range(self.config.num_trials)
            for task in self.tasks
            if any((task.user_id, trial, s.subtask_id) not in done for s in task.subtasks)
        ]
        self._abort.clear()
        with ThreadPoolExecutor(max_workers=self.config.max_concurrency) as pool:
            futures = [pool.submit(self._run_sequence, task, trial, done) for task, trial in units]
            for future in as_completed(futures):
                if future.exception() is not None:
                    # Fail fast: queued sequences are cancelled, running ones stop before their next subtask;
                    # finished subtasks are already on disk, so a rerun resumes from there.
                    self._abort.set()
                    for other in futures:
                        other.cancel()
                    raise future.exception()
        return self.summarize()

    def summarize(self) -> dict:
        records = read_records(self.results_path)
        wanted = {(t.user_id, s.subtask_id) for t in self.tasks for s in t.subtasks}
        records = [r for r in records if (r["user_id"], r["subtask_id"]) in wanted]
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
            "terminations": {t.value: sum(1 for r in records if r["termination"] == t.value) for t in Termination},
            "metrics": metrics,
            "usage_this_session": usage,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary
