"""Test-time private rehearsal at the chat boundary, for the benchmarks whose harness drives the policy step by step:
tau2-bench (`tau2_bench.run_policy`, through `rehearsal_chat`) and BFCL (bfcl-eval's Qwen3 FC handler, at its
`_query_prompting`: `envace/bfcl/rehearse.py`). Project page of https://arxiv.org/abs/2608.06197, "test-time
scaling": N imagined trajectories, condensed into a rehearsal memory, then one committed execution.

Before the policy acts on a new user message it rehearses N imagined continuations privately: the caller makes its
calls and the policy's own rehearsal role (the training prompt, `parsing.rehearsal_messages`, with no ground-truth
few-shot: `<unavailable>`) writes each call's result, until the caller answers without a call, a call or a rehearsed
result is malformed or an error, or `max_steps` caller steps. `parallel`: N independent attempts; `sequential`:
attempt k sees the memory of attempts 1..k-1 in its system prompt. The memory of the N attempts
(`rehearsal_memory`) is appended to the system prompt of every committed call of that user turn (its cache key is
the conversation up to the user message). No real tool and no user simulator is queried while rehearsing; the
harness's tools, user and scorer see only the committed calls.

Sampling: the rehearsals sample at the official evaluation sampling T 0.6, top-p 0.95 (Within-yao/EnvACE@173e941
`examples/drmas_trainer/run_checklist_share.sh`: `actor_rollout_ref.rollout.val_kwargs`), so the N attempts
differ; the committed calls keep the harness's own sampling. N, the memory's form and where it goes are not
public (README deviation 5).

Stdlib only (plus `parsing`), so the isolated BFCL environment can import it from `envace/src`.
"""

import hashlib
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .parsing import parse_execution_result, parse_tool_calls, rehearsal_messages, visible_reply


MODES = ("parallel", "sequential")
TEMPERATURE, TOP_P = 0.6, 0.95  # official val_kwargs (run_checklist_share.sh)
MAX_STEPS = 20  # caller steps per imagined attempt; bfcl-eval's per-turn cap (`MAXIMUM_STEP_LIMIT`); ours for tau2


@dataclass
class Attempt:
    """One imagined continuation: assistant messages (OpenAI `tool_calls`) and the rehearsed `tool` messages."""

    messages: list[dict]
    stop_reason: str  # done | malformed_tool_call | tool_error | step_limit


def rehearsal_memory(attempts) -> str:
    """Condense imagined trajectories (anything with `messages` and `stop_reason`: `Attempt`, `rehearsal.Trajectory`):
    per attempt, each tool call and its rehearsed response (or error) in order."""
    lines = ["# Rehearsal memory (imagined, not real results; use them to plan, then act for real)"]
    for k, t in enumerate(attempts):
        lines.append(f"## Rehearsal {k + 1} (ended: {t.stop_reason})")
        calls = [m for m in t.messages if m["role"] == "assistant" and m.get("tool_calls")]
        if not calls:
            lines.append("No tool call was made.")
        pending = []
        for m in t.messages:
            if m["role"] == "assistant":
                pending = list(m.get("tool_calls") or [])
            elif m["role"] == "tool" and pending:
                fn = pending.pop(0)["function"]
                args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                lines.append(f"- {fn['name']}({args}) -> {m['content'][:300]}")
    return "\n".join(lines)


def with_memory(messages: list[dict], memory: str) -> list[dict]:
    """The messages with `memory` appended to the system prompt (a system message first when there is none)."""
    if not memory:
        return messages
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0].get('content') or ''}\n\n{memory}"}, *messages[1:]]
    return [{"role": "system", "content": memory}, *messages]


def raw_text(reply: dict) -> str:
    """An OpenAI assistant message as the Qwen3 text the caller parser reads (content, then one block per call)."""
    text = reply.get("content") or ""
    for call in reply.get("tool_calls") or []:
        fn = call["function"]
        try:
            args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        except json.JSONDecodeError:
            args = fn["arguments"]  # kept as the string: the strict parser rejects it (NO_ARGUMENTS)
        text += "\n<tool_call>\n" + json.dumps({"name": fn["name"], "arguments": args}) + "\n</tool_call>"
    return text


def turn_prefix(messages: list[dict]) -> list[dict]:
    """The conversation up to and including its last user message (the start of the current user turn)."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    return messages[: users[-1] + 1] if users else messages


class PrivateRehearsal:
    """N private rehearsals per user turn, condensed into a memory for the committed calls.

    Args:
        sample (`Callable[[list[dict], list[dict]], str]`): one raw assistant completion (Qwen3 text) for
            (messages, tools) at the rehearsal sampling; called for the caller's steps and, with no tools, for the
            rehearsal role's prompts.
        budget (`int`): rehearsals N per user turn.
        mode (`str`): `parallel` or `sequential`.
        max_steps (`int`): caller steps per attempt.
        log (`Path`, *optional*): a JSONL file receiving each turn's attempts and memory.
    """

    def __init__(self, sample: Callable, budget: int, mode: str = "parallel", max_steps: int = MAX_STEPS,
                 log: Path | None = None):  # fmt: skip
        if mode not in MODES:
            raise ValueError(f"Unknown test-time rehearsal mode {mode!r}; valid: {', '.join(MODES)}.")
        if budget < 1:
            raise ValueError(f"test-time rehearsal budget must be >= 1, got {budget}")
        self.sample, self.budget, self.mode, self.max_steps, self.log = sample, budget, mode, max_steps, log
        self.memories: dict[str, str] = {}
        self.lock = threading.Lock()

    def memory(self, messages: list[dict], tools: list[dict]) -> str:
        """The current user turn's memory, rehearsed on the turn's first call and reused for its later calls."""
        prefix = turn_prefix(messages)
        key = hashlib.sha1(json.dumps([prefix, tools], sort_keys=True, default=str).encode()).hexdigest()
        with self.lock:
            if key in self.memories:
                return self.memories[key]
        attempts = self.rehearse(prefix, tools)
        memory = rehearsal_memory(attempts)
        with self.lock:
            self.memories[key] = memory
            if self.log is not None:
                with self.log.open("a", encoding="utf-8") as f:
                    record = {"key": key, "mode": self.mode, "budget": self.budget, "memory": memory,
                              "attempts": [{"stop_reason": a.stop_reason, "messages": a.messages} for a in attempts]}  # fmt: skip
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return memory

    def rehearse(self, messages: list[dict], tools: list[dict]) -> list[Attempt]:
        if self.mode == "parallel":  # independent attempts, concurrently (an endpoint batches them)
            with ThreadPoolExecutor(self.budget) as pool:
                return list(pool.map(lambda _: self.attempt(messages, tools), range(self.budget)))
        attempts: list[Attempt] = []
        for _ in range(self.budget):
            attempts.append(self.attempt(with_memory(messages, rehearsal_memory(attempts) if attempts else ""), tools))
        return attempts

    def attempt(self, messages: list[dict], tools: list[dict]) -> Attempt:
        """One imagined continuation of `messages`: caller steps, each call answered by the rehearsal role."""
        task = {"tools": [t if "function" in t else {"type": "function", "function": t} for t in tools],
                "tool_call_response_map": {}}  # fmt: skip
        context, imagined = list(messages), []
        for step in range(self.max_steps):
            text = self.sample(context, tools)
            calls, error = parse_tool_calls(text)
            if error or not calls:
                imagined.append({"role": "assistant", "content": visible_reply(text)})
                return Attempt(imagined, "malformed_tool_call" if error else "done")
            ids = [f"rehearsal_{step}_{i}" for i in range(len(calls))]
            assistant = {"role": "assistant", "content": visible_reply(text), "tool_calls": [
                {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in zip(ids, calls, strict=True)]}  # fmt: skip
            results = []
            for i, call in zip(ids, calls, strict=True):
                output = self.sample(rehearsal_messages(task, context, text, call), [])
                content, is_error = parse_execution_result(output)
                results.append({"role": "tool", "tool_call_id": i, "name": call.name, "content": content})
                if is_error:  # as in training (official envs.py): a rejected or broken rehearsal ends the attempt
                    imagined += [assistant, *results]
                    return Attempt(imagined, "tool_error")
            context += [assistant, *results]
            imagined += [assistant, *results]
        return Attempt(imagined, "step_limit")

    def wrap(self, chat: Callable[[list[dict], list[dict]], dict]) -> Callable[[list[dict], list[dict]], dict]:
        """`chat(messages, tools)` whose every call carries the current user turn's rehearsal memory."""
        return lambda messages, tools: chat(with_memory(messages, self.memory(messages, tools)), tools)


def query_with_memory(rehearsal: PrivateRehearsal, inference_data: dict, query: Callable[[dict], object]):
    """bfcl-eval's `_query_prompting(inference_data)` step (`OSSHandler`: `inference_data["message"]` the
    conversation in the handler's format, `["function"]` the function docs) with the turn's rehearsal memory in the
    prompt; the handler's own history (`inference_data["message"]`) stays without it. `query` is the handler's
    `_query_prompting`; its prompt log is copied back."""
    messages = inference_data["message"]
    data = {**inference_data, "message": with_memory(messages, rehearsal.memory(messages, inference_data["function"]))}
    out = query(data)
    inference_data.update({k: v for k, v in data.items() if k not in ("message", "function")})
    return out
