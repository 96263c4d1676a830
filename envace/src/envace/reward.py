"""Checklist reward of EnvACE (official code Within-yao/EnvACE@173e941, from CM2).

A judge scores every checklist item of a user turn at every assistant step of that turn
(`agent_system/environments/env_package/checklist/checklist_reward.py`); an item counts when it passed at ANY step;
s_turn = sum_checklists sum_items w_item * 1[passed at any step], and 0 when a tool failure happened earlier in the
episode (sticky flag, `envs.py::_aggregate_turn_score`). The episode reward R = sum_turns s_turn /
(num_checklists * num_turns), num_turns = the sample's reference user turns, is the same scalar on every row of both
roles (`reward_manager/checklist.py`). Two judges: `EndpointJudge` (an OpenAI-compatible server, Qwen3-30B-A3B in the
paper, JSON-schema verdict) and `RuleJudge` (deterministic, for generated tasks and tests). Judge failures are retried,
then count as failed items with the reason logged; the episode then ends (official behaviour).
"""

import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .parsing import split_thinking, visible_reply


logger = logging.getLogger(__name__)

# focus_on values whose items are false at a step followed by a tool error (official special rule)
TOOL_FOCUS = ("assistant.tool_calls", "tool.content")


@dataclass
class Verdict:
    passed: bool
    ok: bool = True  # False: the judge failed (API error or malformed verdict) after its retries
    reason: str = ""


# --- messages as the judge reads them ---------------------------------------------------------------------------------
def serialize_for_judge(messages: list[dict], first_turn: int = 0) -> str:
    """`# Turn: k` / `## Step: s` blocks with the assistant's thinking, visible reply and tool calls separated."""
    out, turn, step = [], first_turn - 1, 0
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "system":
            out.append(f"Role: system\ncontent: {content}\n")
        elif m["role"] == "user":
            turn, step = turn + 1, 0
            out.append(f"# Turn: {turn}\nRole: user\ncontent: {content}\n")
        elif m["role"] == "assistant":
            thinking, _ = split_thinking(content)
            calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else "None"
            reply = visible_reply(content) or "None"
            out.append(f"## Step: {step}\nRole: assistant\ncontent.thinking: {thinking or 'None'}\n"
                       f"content.user_visible_reply: {reply}\ntool_call: {calls}\n")  # fmt: skip
            step += 1
        else:
            out.append(f"Role: tool\ncontent: {content}\n")
    return "".join(out)


def judge_prompt(item: dict, previous: str, current: str) -> str:
    """The judge's user prompt: role, criteria (question, focus, pass condition, failure examples, reference
    snippets), previous and current messages, the tool-call special rule, the five-step process mapped to the JSON
    fields, the output format (structure of the official `get_input_prompt_v2`; our wording)."""
    snippets = [e.get("snippet", "") for e in item.get("evidence", [])]
    return (
        "# Role\nYou grade a conversation between a user, an assistant and tools against one checklist criterion.\n\n"
        "# Objective\nReturn a strict JSON verdict and nothing else.\n\n"
        f"# Criterion\n**Question:** {item['question']}\n**Focus on:** {item['focus_on']}\n"
        f"**Pass condition:** {item['pass_condition']}\n"
        f"**Failure examples:** {json.dumps(item.get('failure_examples', []), ensure_ascii=True, indent=2)}\n"
        f"**Reference snippet:** {json.dumps(snippets, ensure_ascii=True, indent=2)}\n\n"
        f"# Previous Messages\n{previous}# Current Messages to Evaluate\n{current}\n"
        "# Special rule for tool calls\nTool calls written only inside the thinking, not in tool_call, are malformed "
        "and count as no call. If a tool response is an error, the tool calls of the latest assistant step are "
        "invalid.\n"
        "# Evaluation process (one JSON field per step)\n"
        "1. high_level_understanding_of_the_question: restate what is checked and what compliance means.\n"
        "2. analysis_of_if_focus_on: is the focused part present in the Current Messages?\n"
        "3. analysis_of_pass_condition: is the pass condition fully met?\n"
        "4. analysis_of_failure_examples: for each failure example, 'triggered' or 'not triggered' and why.\n"
        "5. answer: true only if the focused part is present, the pass condition is fully met and no failure "
        "example is triggered; otherwise false.\n\n"
        "# Output format\nOnly one JSON object with exactly these keys:\n"
        '{"high_level_understanding_of_the_question": str, "analysis_of_if_focus_on": str, '
        '"analysis_of_pass_condition": str, "analysis_of_failure_examples": str, "answer": bool}'
    )


VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "high_level_understanding_of_the_question": {"type": "string"},
        "analysis_of_if_focus_on": {"type": "string"},
        "analysis_of_pass_condition": {"type": "string"},
        "analysis_of_failure_examples": {"type": "string"},
        "answer": {"type": "boolean"},
    },
    "required": ["high_level_understanding_of_the_question", "analysis_of_if_focus_on", "analysis_of_pass_condition",
                 "analysis_of_failure_examples", "answer"],
    "additionalProperties": False,
}  # fmt: skip


def parse_verdict(text: str) -> bool:
    """The `answer` of a judge reply; raises `ValueError` on anything but a JSON object with a boolean answer."""
    parsed = json.loads(text)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("answer"), bool):
        raise ValueError(f"judge verdict has no boolean 'answer': {text[:200]!r}")
    return parsed["answer"]


@dataclass
class JudgeRequest:
    item: dict
    previous: list[dict]  # messages of the earlier turns
    current: list[dict]  # this turn's messages up to and including the judged step (its tool responses too)
    first_turn: int = 0


class EndpointJudge:
    """An OpenAI-compatible chat endpoint as judge (paper: Qwen3-30B-A3B served by sglang, T 0.6, top-p 0.8,
    max_tokens 6000, `response_format` = the verdict JSON schema). Each request is retried `retries` times with
    exponential back-off (1, 2, 4 ... s, capped at 30 s, `checklist_reward.py::_post_with_retries`)."""

    def __init__(self, base_url: str, model: str, temperature: float = 0.6, top_p: float = 0.8,
                 max_tokens: int = 6000, retries: int = 3, timeout: float = 600.0, concurrency: int = 16,
                 backoff_s: float = 1.0, api_key: str | None = None):  # fmt: skip
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, headers=headers)
        self.model, self.temperature, self.top_p, self.max_tokens = model, temperature, top_p, max_tokens
        self.retries, self.concurrency, self.backoff_s = retries, concurrency, backoff_s

    def _one(self, req: JudgeRequest) -> Verdict:
        prompt = judge_prompt(
            req.item, serialize_for_judge(req.previous), serialize_for_judge(req.current, req.first_turn)
        )
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "evaluation_verdict", "strict": True, "schema": VERDICT_SCHEMA}},
        }  # fmt: skip
        reason = ""
        for attempt in range(max(1, self.retries)):
            try:
                resp = self.client.post("/chat/completions", json=payload)
                resp.raise_for_status()
                return Verdict(parse_verdict(resp.json()["choices"][0]["message"]["content"]))
            except Exception as exc:  # API error, timeout or malformed verdict: retry, then a failed item
                reason = f"{type(exc).__name__}: {exc}"
                if attempt + 1 < self.retries:
                    time.sleep(min(self.backoff_s * 2**attempt, 30.0))
        logger.warning("judge failed on item %s after %d tries: %s", req.item.get("id"), self.retries, reason)
        return Verdict(False, ok=False, reason=reason)

    def __call__(self, requests: list[JudgeRequest]) -> list[Verdict]:
        if not requests:
            return []
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._one, requests))


def _same_value(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    return a == b


class RuleJudge:
    """Deterministic judge of items that carry a `rule` (the generated tasks):
    - `{"kind": "tool_call", "name", "arguments"}`: the judged step calls `name` with equal arguments (numbers
      compared as floats, strings case- and space-insensitive);
    - `{"kind": "reply_contains", "text"}`: the judged step is a final reply whose visible text contains `text`;
    - `{"kind": "tool_content_contains", "text"}`: a tool response of the judged step contains `text`.
    An item without a rule is a judge failure (use `EndpointJudge` for official data)."""

    def _one(self, req: JudgeRequest) -> Verdict:
        rule = req.item.get("rule")
        if rule is None:
            return Verdict(False, ok=False, reason=f"item {req.item.get('id')} has no rule for the rule judge")
        last = max(i for i, m in enumerate(req.current) if m["role"] == "assistant")
        step, tools = req.current[last], req.current[last + 1 :]
        if rule["kind"] == "tool_call":
            calls = [c["function"] for c in step.get("tool_calls") or []]
            return Verdict(any(c["name"] == rule["name"] and _same_value(c["arguments"], rule["arguments"])
                               for c in calls))  # fmt: skip
        if rule["kind"] == "reply_contains":
            reply = visible_reply(step.get("content") or "")
            return Verdict(not step.get("tool_calls") and rule["text"].lower() in reply.lower())
        if rule["kind"] == "tool_content_contains":
            return Verdict(any(rule["text"].lower() in (m.get("content") or "").lower() for m in tools))
        return Verdict(False, ok=False, reason=f"unknown rule kind {rule['kind']!r}")

    def __call__(self, requests: list[JudgeRequest]) -> list[Verdict]:
        return [self._one(r) for r in requests]


# --- turn score and episode reward ------------------------------------------------------------------------------------
def turn_score(passed: list[list[list[bool]]], weights: list[list[float]], tool_failure_before: bool) -> float:
    """s_turn = sum_c sum_i w_ci * 1[item i of checklist c passed at any step]; 0 after a tool failure (sticky).

    passed[c][s][i]: item i of checklist c at assistant step s of the turn; weights[c][i].
    """
    if tool_failure_before:
        return 0.0
    total = 0.0
    for c, steps in enumerate(passed):
        for i, w in enumerate(weights[c]):
            total += w * any(step[i] for step in steps)
    return total


def episode_reward(turn_scores: list[float], num_checklists: int, num_turns: int) -> float:
    """R = sum_turns s_turn / (num_checklists * num_turns); turns never reached add 0 (`reward_manager/checklist.py`;
    num_turns = the sample's reference user turns, the reading that keeps R in [0, 1])."""
    return sum(turn_scores) / (num_checklists * num_turns)


@dataclass
class TurnResult:
    score: float
    passed_any: list[list[bool]]  # [checklist][item]
    required_failed: bool
    judge_failures: list[str] = field(default_factory=list)


def _steps(turn_messages: list[dict]) -> list[tuple[int, int]]:
    """(start, end) of each assistant step: its message and the tool responses after it."""
    starts = [i for i, m in enumerate(turn_messages) if m["role"] == "assistant"]
    return list(zip(starts, [*starts[1:], len(turn_messages)], strict=True))


def _tool_error_after(messages: list[dict]) -> bool:
    from .parsing import is_error_result

    for m in messages:
        if m["role"] == "tool":
            try:
                if is_error_result(json.loads(m.get("content") or "")):
                    return True
            except json.JSONDecodeError:
                continue
    return False


def score_turn(judge, task: dict, turn_idx: int, previous: list[dict], turn_messages: list[dict],
               tool_failure_before: bool = False) -> TurnResult:  # fmt: skip
    """Judge every item of turn `turn_idx` at every assistant step of `turn_messages` (which starts with the user
    message), aggregate with `turn_score`, and say whether a required item failed in a majority of checklists."""
    checklists = [c[turn_idx] for c in task["checklists"]]
    steps = _steps(turn_messages)
    requests, slots = [], []
    for s, (start, end) in enumerate(steps):
        error_after = _tool_error_after(turn_messages[start + 1 : end])
        for c, items in enumerate(checklists):
            for i, item in enumerate(items):
                if error_after and item["focus_on"] in TOOL_FOCUS:
                    slots.append((c, s, i, Verdict(False)))  # official special rule: no judge call
                else:
                    slots.append((c, s, i, None))
                    requests.append(JudgeRequest(item, previous, turn_messages[:end], first_turn=turn_idx))
    verdicts = iter(judge(requests))
    passed = [[[False] * len(items) for _ in steps] for items in checklists]
    failures = []
    for c, s, i, v in slots:
        v = v if v is not None else next(verdicts)
        passed[c][s][i] = v.passed
        if not v.ok:
            failures.append(f"{checklists[c][i].get('id')}@step{s}: {v.reason}")
    weights = [[float(item["weight"]) for item in items] for items in checklists]
    score = turn_score(passed, weights, tool_failure_before)
    passed_any = [[any(step[i] for step in per_step) for i in range(len(items))]
                  for per_step, items in zip(passed, checklists, strict=True)]  # fmt: skip
    flags = [any(item.get("required_for_next_turn") and not ok for item, ok in zip(items, row, strict=True))
             for items, row in zip(checklists, passed_any, strict=True)]  # fmt: skip
    return TurnResult(score, passed_any, 2 * sum(flags) > len(flags), failures)
