"""Checklist reward of EnvACE (official code Within-yao/EnvACE@173e941, from CM2).

A judge scores every checklist item of a user turn at every assistant step of that turn
(`agent_system/environments/env_package/checklist/checklist_reward.py`); an item counts when it passed at ANY step;
s_turn = sum_checklists sum_items w_item * 1[passed at any step], and 0 when a tool failure happened earlier in the
episode (sticky flag, `envs.py::_aggregate_turn_score`). The episode reward R = sum_turns s_turn /
(num_checklists * num_turns), num_turns = the sample's reference user turns, is the same scalar on every row of both
roles (`reward_manager/checklist.py`). Two judges: `EndpointJudge` (an OpenAI-compatible server, Qwen3-30B-A3B in the
paper, JSON-schema verdict) and `RuleJudge` (deterministic, for generated tasks and tests). Judge failures are retried
(5 tries), then count as failed items with the reason logged; the episode ends after that turn (official
`interaction.py::generate_response`: any API failure or malformed verdict sets `should_terminate_sequence`).
"""

import json
import logging
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .parsing import visible_reply


logger = logging.getLogger(__name__)

# focus_on values whose items are false at a step followed by a tool error (official special rule)
TOOL_FOCUS = ("assistant.tool_calls", "tool.content")


@dataclass
class Verdict:
    passed: bool
    ok: bool = True  # False: the judge failed (API error or malformed verdict) after its retries
    reason: str = ""


# --- messages as the judge reads them ---------------------------------------------------------------------------------
THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def serialize_for_judge(messages: list[dict]) -> str:
    """`# Turn: k` / `## Step: s` blocks as the official `checklist_reward.py::get_messages_str_v2`@173e941: turns
    counted from 0 within the list given (the current turn is always turn 0, as there), an assistant step split into
    `content.thinking` (the `<think>` text; the whole content when there is none), `content.user_visible_reply`
    (after `</think>`; `None` without a think block) and `tool_call` (the message's `tool_calls` as JSON; call tags
    left in the reply become the tool_call text)."""
    out, turn, step = [], -1, 0
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "system":
            out.append(f"Role: system\ncontent: {content}\n")
            step = 0
        elif m["role"] == "user":
            turn, step = turn + 1, 0
            out.append(f"# Turn: {turn}\nRole: user\ncontent: {content}\n")
        elif m["role"] == "assistant":
            match = THINK.search(content)
            thinking = match.group(1) if match else content
            reply = (content.split(thinking + "</think>", 1)[1].strip() or "None") if match else "None"
            if m.get("tool_calls") is not None:
                calls = json.dumps(m["tool_calls"])
            elif "<tool_call>" in reply or "</tool_call>" in reply:
                calls = reply.replace("<tool_call>", "<|tool_call_start|>").replace(
                    "</tool_call>", "<|tool_call_end|>"
                )
                reply = "None"
            else:
                calls = "None"
            out.append(f"## Step: {step}\nRole: assistant\ncontent.thinking: {thinking}\n"
                       f"content.user_visible_reply: {reply}\ntool_call: {calls}\n")  # fmt: skip
            step += 1
        else:
            out.append(f"Role: tool\ncontent: {content}\n")
    return "".join(out)


def judge_prompt(item: dict, previous: str, current: str) -> str:
    """The judge's user prompt with the sections of the official `checklist_reward.py::get_input_prompt_v2`@173e941,
    in our words: Role, Objective, Criteria (question, focus, pass condition, failure examples, reference snippets of
    the item's evidence), Previous Messages (the turns before this one), Current Messages to Evaluate (this turn up to
    the judged step and its tool responses), the special rule of tool calls, the evaluation process mapped onto the
    verdict's JSON fields, and the output format."""
    snippets = [e.get("snippet", "") for e in item.get("evidence") or []]
    return (
        "# Role\nYou are an exact checklist grader. Your only job is to decide whether the messages exchanged between "
        "the user, the assistant and the tools meet the criteria below.\n\n"
        "# Objective\nGive a strict JSON verdict, following the instructions below, with no other text.\n\n"
        f"# Criteria\n**Question:** {item['question']}\n**Focus on:** {item['focus_on']}\n"
        f"**Pass condition:** {item['pass_condition']}\n"
        f"**Failure examples:** {json.dumps(item.get('failure_examples') or [], ensure_ascii=True, indent=2)}\n"
        f"**Reference snippet:** {json.dumps(snippets, ensure_ascii=True, indent=2)}\n\n"
        f"# Previous Messages\n{previous}"
        f"# Current Messages to Evaluate\n{current}\n"
        "# Special rule of tool call\nTool calls that appear only in content.thinking while the tool_call part is "
        "empty are malformed: none of those calls is valid. If a tool response reports an error, the tool calls of "
        "the latest assistant step (that step only) are not valid.\n\n"
        "# Evaluation Process (each step fills one JSON field)\n"
        "1. high_level_understanding_of_the_question:\n   - Say briefly what is checked: the intent of the question "
        "and what meeting it means here.\n"
        "2. analysis_of_if_focus_on:\n   - Say whether the part named in Focus on is present in the Current "
        "Messages.\n"
        "3. analysis_of_pass_condition:\n   - Decide whether the Pass condition is met in full.\n"
        "4. analysis_of_failure_examples:\n   - For every failure example, say 'triggered' or 'not triggered' with a "
        "short reason.\n"
        "5. answer:\n   - true only when the focused part is present, the Pass condition is fully met and no failure "
        "example is triggered.\n   - false otherwise.\n\n"
        "# Output Format\nReturn only one JSON object with exactly these keys:\n"
        '{\n  "high_level_understanding_of_the_question": str,\n  "analysis_of_if_focus_on": str,\n'
        '  "analysis_of_pass_condition": str,\n  "analysis_of_failure_examples": str,\n  "answer": bool\n}'
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


class JudgeUnavailable(RuntimeError):
    """The judge endpoint does not answer a verdict (start-up check)."""


class EndpointJudge:
    """An OpenAI-compatible chat endpoint as judge (paper: Qwen3-30B-A3B served by sglang, T 0.6, top-p 0.8,
    max_tokens 6000, `response_format` = the verdict JSON schema; `run_checklist_share.sh`@173e941). A request is
    tried `retries` times (official `JUDGE_RETRY=5`) with exponential back-off (1, 2, 4 ... s, capped at 30 s,
    `checklist_reward.py::_post_with_retries`); `api_key` is sent as a bearer token (the launch script's
    `JUDGE_API_KEY`). The requests of one call (all the turns a rollout round ended, on all its trajectories) run
    `concurrency` at a time (official semaphore: 500 for sglang, 8 for OpenAI)."""

    def __init__(self, base_url: str, model: str, temperature: float = 0.6, top_p: float = 0.8,
                 max_tokens: int = 6000, retries: int = 5, timeout: float = 120.0, concurrency: int = 64,
                 backoff_s: float = 1.0, api_key: str | None = None):  # fmt: skip
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)
        self.model, self.temperature, self.top_p, self.max_tokens = model, temperature, top_p, max_tokens
        self.retries, self.concurrency, self.backoff_s = retries, concurrency, backoff_s

    def _post(self, prompt: str) -> bool:
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "evaluation_verdict", "strict": True, "schema": VERDICT_SCHEMA}},
        }  # fmt: skip
        resp = self.client.post("/chat/completions", json=payload)
        resp.raise_for_status()
        return parse_verdict(resp.json()["choices"][0]["message"]["content"])

    def _one(self, req: JudgeRequest) -> Verdict:
        prompt = judge_prompt(req.item, serialize_for_judge(req.previous), serialize_for_judge(req.current))
        reason = ""
        for attempt in range(max(1, self.retries)):
            try:
                return Verdict(self._post(prompt))
            except Exception as exc:  # API error, timeout or malformed verdict: retry, then a failed item
                reason = f"{type(exc).__name__}: {exc}"
                if attempt + 1 < self.retries:
                    time.sleep(min(self.backoff_s * 2**attempt, 30.0))
        logger.warning("judge failed on item %s after %d tries: %s", req.item.get("id"), self.retries, reason)
        return Verdict(False, ok=False, reason=reason)

    def __call__(self, requests: list[JudgeRequest]) -> list[Verdict]:
        if not requests:
            return []
        with ThreadPoolExecutor(min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))

    def check(self) -> None:
        """Start-up check: one verdict on a trivial criterion, one try; raises `JudgeUnavailable` (one line: the
        endpoint, the model and the error) instead of training every episode on failed judgements."""
        item = {"question": "Did the assistant greet the user?", "focus_on": "assistant.content.user_visible_reply",
                "pass_condition": "The reply greets the user.", "failure_examples": ["No greeting"]}  # fmt: skip
        messages = [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "<think>\n\n</think>\n\nHello!"},
        ]
        try:
            self._post(judge_prompt(item, "", serialize_for_judge(messages)))
        except Exception as exc:
            raise JudgeUnavailable(
                f"the judge at {self.base_url} (model {self.model!r}) gives no verdict: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''} (check trainer.judge_url / judge_model and "
                f"{JUDGE_API_KEY_ENV} for an authenticated endpoint)"
            ) from None


JUDGE_API_KEY_ENV = "JUDGE_API_KEY"  # the official launch scripts' variable


def endpoint_judge_from_env(url: str, model: str, **kwargs) -> EndpointJudge:
    """`EndpointJudge` with the API key from `JUDGE_API_KEY` (unset or empty: no key, as for a local sglang)."""
    return EndpointJudge(url, model, api_key=os.environ.get(JUDGE_API_KEY_ENV) or None, **kwargs)


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


@dataclass
class TurnJob:
    """One ended user turn to score: `turn_messages` starts with the turn's user message."""

    task: dict
    turn_idx: int
    previous: list[dict]
    turn_messages: list[dict]
    tool_failure_before: bool = False


def score_turns(judge, jobs: list[TurnJob]) -> list[TurnResult]:
    """Judge every item of each job's turn at every assistant step of it (official `interaction.py`
    `generate_response_for_single_checklist`@173e941), all jobs' requests in ONE judge call (a rollout round's ended
    turns, across its trajectories), then aggregate each with `turn_score` and say whether a required item failed in
    a majority of checklists. A step followed by a tool error fails its tool-focused items without a judge call."""
    requests, plans = [], []
    for job in jobs:
        checklists = [c[job.turn_idx] for c in job.task["checklists"]]
        steps = _steps(job.turn_messages)
        slots = []
        for s, (start, end) in enumerate(steps):
            error_after = _tool_error_after(job.turn_messages[start + 1 : end])
            for c, items in enumerate(checklists):
                for i, item in enumerate(items):
                    if error_after and item["focus_on"] in TOOL_FOCUS:
                        slots.append((c, s, i, Verdict(False)))  # official special rule: no judge call
                    else:
                        slots.append((c, s, i, None))
                        requests.append(JudgeRequest(item, job.previous, job.turn_messages[:end]))
        plans.append((job, checklists, steps, slots))
    verdicts = iter(judge(requests))
    results = []
    for job, checklists, steps, slots in plans:
        passed = [[[False] * len(items) for _ in steps] for items in checklists]
        failures = []
        for c, s, i, v in slots:
            v = v if v is not None else next(verdicts)
            passed[c][s][i] = v.passed
            if not v.ok:
                failures.append(f"{checklists[c][i].get('id')}@step{s}: {v.reason}")
        weights = [[float(item["weight"]) for item in items] for items in checklists]
        score = turn_score(passed, weights, job.tool_failure_before)
        passed_any = [[any(step[i] for step in per_step) for i in range(len(items))]
                      for per_step, items in zip(passed, checklists, strict=True)]  # fmt: skip
        flags = [any(item.get("required_for_next_turn") and not ok for item, ok in zip(items, row, strict=True))
                 for items, row in zip(checklists, passed_any, strict=True)]  # fmt: skip
        results.append(TurnResult(score, passed_any, 2 * sum(flags) > len(flags), failures))
    return results


def score_turn(judge, task: dict, turn_idx: int, previous: list[dict], turn_messages: list[dict],
               tool_failure_before: bool = False) -> TurnResult:  # fmt: skip
    """`score_turns` of a single turn."""
    return score_turns(judge, [TurnJob(task, turn_idx, previous, turn_messages, tool_failure_before)])[0]
