"""Rubric-based sliding-window LLM judge and the optional outcome check on write actions.

Paper spec sec. 2.5 (`evaluator_traj.py`, `sliding_window_eval_template.yaml`, `outcome_evaluator.py`): windows of
10 messages overlapping by 2, rubric states start false and are carried across windows, reward 1 only if every rubric
is met. Malformed judge output is retried; after `max_retries` the subtask gets reward 0 and the reason is recorded.
"""

import json
import re
from dataclasses import dataclass, field

from .backends import ChatBackend
from .tasks import SubTask
from .tools import OUTCOME_WRITE_TOOLS, Environment, sanitize


JUDGE_PROMPT = """# System information
{env_info}

# User complete instruction
{user_instruction}

# Background
- A user talks with an assistant that can call tools; tool results start with "tool".
- The user's instruction is split into rubrics; judge whether each rubric is satisfied.
- Sliding-window evaluation: each window shows {window} messages, consecutive windows overlap by {overlap} messages,
  and rubric states are carried across windows. You are evaluating window {window_idx} of {total_windows}.
- <current_rubrics> holds the current states (all start false).

# Task
- Set a rubric from false to true only if the assistant achieved it in this window.
- Set it from true back to false only if the assistant overturned an earlier correct conclusion in this window (not
  when the user changed their own request).
- Rubrics about orders need an actual successful order tool call. Quantities and times are strict; addresses and notes
  are judged by functional equivalence. Tool results are visible only to the assistant; judge the assistant's replies
  and tool calls, and note that the assistant must not fabricate tool results.
- Keep the state of rubrics not touched by this window.

<window_content>
{window_content}
</window_content>
<current_rubrics>
{current_rubrics}
</current_rubrics>

# Output
Reply with a JSON list, one object per rubric:
```json
[{{"rubric_idx": "rubric_0", "rubric": "<rubric text>", "justification": "<short reason>", "meetExpectation": true}}]
```"""

OUTCOME_PROMPT = """# Rubrics of the user's request
{rubrics}

# The assistant's write action
Tool: {tool}
Arguments: {arguments}

# The chosen entity (as in the environment)
{entity}

Does the chosen entity and order satisfy every rubric that concerns it (item attributes, price, time, context)?
Reply with a JSON object: {{"justification": "<short reason>", "meetExpectation": true or false}}"""


class MalformedJudgeOutput(ValueError):
    """The judge reply could not be parsed into the expected JSON."""


@dataclass
class JudgeResult:
    """Outcome of judging one subtask. `reward_breakdown` is the fraction of rubrics met."""

    reward: float
    rubric_states: list[bool] = field(default_factory=list)
    justifications: list[str] = field(default_factory=list)
    reward_breakdown: float = 0.0
    outcome_reward: float | None = None
    failed: bool = False
    failure_reason: str = ""
    judge_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def _extract_json(text: str):
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    candidates = [fenced.group(1)] if fenced else []
    for open_c, close_c in (("[", "]"), ("{", "}")):
        start, end = text.find(open_c), text.rfind(close_c)
        if start != -1 and end > start:
            candidates.append(text[start : end + 1])
    for c in candidates:
        try:
            return json.loads(c)
        except json.JSONDecodeError:
            continue
    raise MalformedJudgeOutput(f"no parseable JSON in judge output: {text[:200]!r}")


def parse_window_output(text: str, num_rubrics: int) -> dict[int, tuple[bool, str]]:
    """Parse one window's reply into {rubric index: (meetExpectation, justification)}; raises on malformed output."""
    data = _extract_json(text)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise MalformedJudgeOutput("judge output is not a non-empty JSON list")
    out = {}
    for item in data:
        if not isinstance(item, dict) or "rubric_idx" not in item or "meetExpectation" not in item:
            raise MalformedJudgeOutput(f"entry lacks rubric_idx/meetExpectation: {str(item)[:120]}")
        match = re.search(r"\d+", str(item["rubric_idx"]))
        if match is None or not 0 <= int(match.group()) < num_rubrics:
            raise MalformedJudgeOutput(f"unknown rubric_idx {item['rubric_idx']!r} (have {num_rubrics} rubrics)")
        meet = item["meetExpectation"]
        if isinstance(meet, str) and meet.lower() in ("true", "false"):
            meet = meet.lower() == "true"
        if not isinstance(meet, bool):
            raise MalformedJudgeOutput(f"meetExpectation must be true/false, got {meet!r}")
        out[int(match.group())] = (meet, str(item.get("justification", "")))
    return out


def parse_outcome_output(text: str) -> tuple[bool, str]:
    """Parse the outcome check reply `{"justification", "meetExpectation"}`; raises on malformed output."""
    data = _extract_json(text)
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict) or not isinstance(data.get("meetExpectation"), bool):
        raise MalformedJudgeOutput(f"outcome reply needs a boolean meetExpectation: {text[:160]!r}")
    return data["meetExpectation"], str(data.get("justification", ""))


def format_message(i: int, m: dict) -> str:
    role, content = m["role"], (m.get("content") or "").strip()
    if role == "assistant" and m.get("tool_calls"):
        calls = "; ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in m["tool_calls"])
        return f"[{i}] assistant: {content} [tool calls: {calls}]".replace(":  [", ": [")
    if role == "tool":
        return f"[{i}] tool ({m.get('name', '')}): {content}"
    return f"[{i}] {role}: {content}"


def sliding_windows(n: int, window: int = 10, overlap: int = 2) -> list[tuple[int, int]]:
    """[start, end) index ranges covering n messages; consecutive windows share `overlap` messages."""
    if window <= overlap:
        raise ValueError(f"window ({window}) must be larger than overlap ({overlap})")
    spans, start = [], 0
    while start < n:
        spans.append((start, min(start + window, n)))
        if start + window >= n:
            break
        start += window - overlap
    return spans


class SlidingWindowJudge:
    """The trajectory judge (`evaluation_type="trajectory"`), with the optional outcome check.

    Args:
        backend ([`ChatBackend`]): the judge model.
        window (`int`, *optional*, defaults to `10`) / overlap (`int`, *optional*, defaults to `2`): messages.
        max_retries (`int`, *optional*, defaults to `3`): attempts per judge call before recording a failure.
        outcome_reward (`bool`, *optional*, defaults to `False`): also check each successful write action.
    """

    def __init__(
        self,
        backend: ChatBackend,
        window: int = 10,
        overlap: int = 2,
        max_retries: int = 3,
        outcome_reward: bool = False,
    ):
        self.backend, self.window, self.overlap = backend, window, overlap
        self.max_retries, self.outcome_reward = max_retries, outcome_reward

    def _ask(self, prompt: str, parse, result: JudgeResult):
        errors = []
        for _ in range(self.max_retries):
            result.judge_calls += 1
            chat = self.backend.chat([{"role": "user", "content": prompt}], role="judge")
            result.prompt_tokens += chat.prompt_tokens
            result.completion_tokens += chat.completion_tokens
            reply = chat.content
            try:
                return parse(reply)
            except MalformedJudgeOutput as err:
                errors.append(str(err))
        raise MalformedJudgeOutput(f"{self.max_retries} malformed judge replies; last: {errors[-1]}")

    def evaluate(self, subtask: SubTask, messages: list[dict], env: Environment | None = None) -> JudgeResult:
        rubrics = subtask.evaluation_criteria.rubrics()
        states, notes = [False] * len(rubrics), [""] * len(rubrics)
        result = JudgeResult(reward=0.0, rubric_states=states, justifications=notes)
        if not rubrics:
            result.failed, result.failure_reason = True, "subtask has no rubrics"
            return result
        convo = [m for m in messages if m["role"] != "system"]
        spans = sliding_windows(len(convo), self.window, self.overlap)
        env_info = json.dumps(
            sanitize({k: subtask.environment.get(k) for k in ("time", "user_id", "location", "weather")}),
            ensure_ascii=False,
        )
        instruction = "\n".join(x for x in (subtask.instruction, subtask.user_intention) if x)
        for w, (start, end) in enumerate(spans, start=1):
            current = [
                {"rubric_idx": f"rubric_{i}", "rubric": r, "justification": notes[i], "meetExpectation": states[i]}
                for i, r in enumerate(rubrics)
            ]
            prompt = JUDGE_PROMPT.format(
                env_info=env_info,
                user_instruction=instruction,
                window=self.window,
                overlap=self.overlap,
                window_idx=w,
                total_windows=len(spans),
                window_content="\n".join(format_message(start + i, m) for i, m in enumerate(convo[start:end])),
                current_rubrics=json.dumps(current, ensure_ascii=False, indent=1),
            )
            try:
                update = self._ask(prompt, lambda text: parse_window_output(text, len(rubrics)), result)
            except MalformedJudgeOutput as err:
                result.failed, result.failure_reason = True, f"window {w}/{len(spans)}: {err}"
                return result
            for i, (meet, why) in update.items():
                states[i], notes[i] = meet, why
        result.reward_breakdown = sum(states) / len(states)
        result.reward = 1.0 if all(states) else 0.0  # all-or-nothing (sec. 2.5)
        if self.outcome_reward and env is not None:
            try:
                result.outcome_reward = self.outcome_check(rubrics, messages, env, result)
            except MalformedJudgeOutput as err:
                result.failed, result.failure_reason = True, f"outcome check: {err}"
                result.reward = 0.0
                return result
            if result.outcome_reward is not None:
                result.reward = min(result.reward, result.outcome_reward)
        return result

    def outcome_check(
        self, rubrics: list[str], messages: list[dict], env: Environment, result: JudgeResult
    ) -> float | None:
        """1.0 if every successful write call's chosen entity satisfies the rubrics; None when there was no write."""
        ok_ids = {m.get("tool_call_id") for m in messages if m["role"] == "tool" and not m.get("error")}
        writes = [
            c
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
            if c["name"] in OUTCOME_WRITE_TOOLS and c["id"] in ok_ids
        ]
        if not writes:
            return None
        for call in writes:
            entity_id = next(
                (
                    str(call["arguments"][k])
                    for k in ("store_id", "shop_id", "hotel_id", "flight_id", "train_id", "attraction_id")
                    if k in call["arguments"]
                ),
                "",
            )
            entity = env.find_entity(entity_id)
            prompt = OUTCOME_PROMPT.format(
                rubrics="\n".join(f"- {r}" for r in rubrics),
                tool=call["name"],
                arguments=json.dumps(call["arguments"], ensure_ascii=False),
                entity=json.dumps(sanitize(entity), ensure_ascii=False) if entity else "(not found)",
            )
            meet, _ = self._ask(prompt, parse_outcome_output, result)
            if not meet:
                return 0.0
        return 1.0
