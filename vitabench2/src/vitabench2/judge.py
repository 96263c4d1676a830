"""Rubric-based sliding-window LLM judge and the optional outcome check on write actions.

VitaBench 2.0 (arXiv 2605.27141), rubric-based evaluation. Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/evaluator/evaluator_traj.py` (windows of 10 messages overlapping by 2 over the whole trajectory, numbered
from 1; rubric states start false and are carried across windows; the judge sees the system time and the subtask
instruction only), `src/vita/prompts/sliding_window_eval_template.yaml` (the rules, paraphrased below),
`src/vita/evaluator/evaluator.py` (the four evaluation types: with rubrics, sliding or whole-trajectory; without
rubrics, where the judge decides whether the whole instruction was completed, sliding with a running memory or
whole-trajectory: `*_no_rubrics_eval_template.yaml`) and `src/vita/evaluator/outcome_evaluator.py` (outcome check).
Reward 1 only if every rubric is met. Judge replies are parsed as JSON after the official `repair_json` pass
(`src/vita/utils/utils.py::evaluator_extracter`); a reply that is still not the expected JSON is retried; after
`max_retries` the subtask gets reward 0 and the reason is recorded (the official judge keeps the previous states
instead; README "Deviations").
"""

import json
import re
from dataclasses import dataclass, field

from .backends import ChatBackend
from .tasks import SubTask, agent_clock
from .tools import OUTCOME_WRITE_TOOLS, sanitize
from .tools.models import CONTAINER_MODELS, declared, product_model


# Official evaluation types (`--evaluation-type`, `src/vita/evaluator/evaluator.py`).
EVALUATION_TYPES = (
    "trajectory",
    "trajectory_full_traj_rubric",
    "trajectory_sliding_wo_rubric",
    "trajectory_full_traj_wo_rubric",
)
SLIDING_TYPES = ("trajectory", "trajectory_sliding_wo_rubric")


JUDGE_PROMPT = """# System information
{env_info}

# User complete instruction
{user_instruction}

# Background
- A user talks with an assistant that can call tools; tool results start with "tool".
- The user's instruction is split into rubrics; judge whether each rubric is satisfied.
- Sliding-window evaluation: each window shows up to {window} messages, consecutive windows overlap by {overlap}
  messages, and rubric states are carried across windows. You are evaluating window {window_idx} of {total_windows}.
- <current_rubrics> holds the current states (all start false).

# Task
- Set a rubric from false to true only if the assistant achieved it in this window.
- Set it from true back to false only if the assistant overturned an earlier correct conclusion in this window. If
  the user's own needs changed (for example the user cancels after ordering), do not overturn the earlier verdict.
- Use the user's complete instruction to follow where the conversation stands and avoid needless changes.

# Rules
- Judge only what the assistant says and the tool calls it makes, against the rubric text. What the user says only
  guides the assistant; it does not change the standard.
- Tool results are seen by the assistant alone; they are not recommendations to the user. The assistant must not
  invent tool results.
- A rubric about an order is met only if the assistant really placed the order with a tool call that succeeded. If
  the call failed, or the assistant wrongly believes it ordered, or the user says they will order it themselves,
  the rubric is not met.
- Quantities and delivery times are strict: no fewer or more items, no later delivery. A user who compromises
  ("fewer is fine", "later is okay", "no objection to the order") does not make the rubric met.
- Addresses and order notes are judged by function: close enough to find the place or carry the main request counts.
- If this window does not touch a rubric, keep its state. If it touches a rubric but cannot settle it, note the key
  facts in the justification for later windows.
- Justifications accumulate: append the key facts with their message numbers [x]; when you change a state, say why
  in a few words; when you keep it, repeat the earlier reason.

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

# Without rubrics (official `sliding_window_eval_no_rubrics_eval_template.yaml` and
# `full_trajectory_no_rubrics_eval_template.yaml`, in our words): one verdict on the whole instruction; the sliding
# variant carries a memory of earlier windows and the previous verdict.
NO_RUBRIC_PROMPT = """# System information
{env_info}

# User complete instruction
{user_instruction}

# Background
- A user talks with an assistant that can call tools; tool results start with "tool".
- Decide whether the user's complete instruction has been fulfilled. There are no rubrics: split the instruction into
  its requirements yourself and check each of them.
{scope}

# Task
{task}

# Rules
- Judge only what the assistant says and the tool calls it makes, against the instruction. What the user says only
  guides the assistant; it does not change the standard.
- Tool results are seen by the assistant alone; they are not recommendations to the user. The assistant must not
  invent tool results.
- A purchase is done only if the assistant really placed the order with a tool call that succeeded. If the call
  failed, or the assistant wrongly believes it ordered, or the user says they will order it themselves, it is not.
- Quantities and delivery times are strict: no fewer or more items, no later delivery. A user who compromises
  ("fewer is fine", "later is okay", "no objection to the order") does not make the instruction fulfilled.
- Addresses and order notes are judged by function: close enough to find the place or carry the main request counts.
{notes}

{content}

# Output
Reply with a JSON object:
```json
{output}
```"""
NO_RUBRIC_SLIDING = {
    "scope": """- Sliding-window evaluation: each window shows up to {window} messages, consecutive windows overlap by {overlap}
  messages. You are evaluating window {window_idx} of {total_windows}. <memory> summarises the earlier windows and
  <current_evaluation> holds the verdict so far (it starts false).""",
    "task": """- Set the verdict from false to true only if, with this window and the earlier ones, the assistant has fulfilled
  the whole instruction.
- Set it from true back to false only if the assistant overturned an earlier correct conclusion in this window. If
  the user's own needs changed (for example the user cancels after ordering), do not overturn the earlier verdict.
- Merge this window with <memory> into a new memory: for each requirement, what was settled and the key facts with
  their message numbers [x]; note requirements this window does not touch, and facts that later windows must
  settle.""",
    "notes": "",
    "content": """<window_content>
{window_content}
</window_content>
<memory>
{memory}
</memory>
<current_evaluation>
{current_evaluation}
</current_evaluation>""",
    "output": '{{"memory": "<summary of the windows so far>", "justification": "<short reason>", "meetExpectation": '
    "true}}",
}
NO_RUBRIC_FULL = {
    "scope": "- <trajectory_content> holds the whole conversation.",
    "task": "- Decide whether every requirement of the user's complete instruction has been fully met.",
    "notes": "- In the justification, record the key facts for each requirement with their message numbers [x].",
    "content": """<trajectory_content>
{window_content}
</trajectory_content>""",
    "output": '{{"justification": "<short reason>", "meetExpectation": true}}',
}

OUTCOME_PROMPT = """You check whether an assistant's actual action satisfies the user's requirements.

# Requirements (rubrics)
{rubrics}

# The correct target entity in the environment
{target}

# The entity the assistant actually acted on
Action: {tool}
{entity}

Check every requirement against the entity the assistant acted on (for reservations and bookings: whether the shop
offers what the requirements ask, judged from its products; for orders: whether the ordered products satisfy them).
Judge only the action, not what was said in the conversation, and apply the requirements literally.
Reply with a JSON object:
{{"rubric_results": [{{"rubric": "<requirement>", "met": true, "justification": "<short reason>"}}],
 "all_met": true or false, "action_reward": 1.0 or 0.0}}"""
# Fields removed from the entities shown to the outcome judge (official `FIELDS_TO_STRIP`): the labels and stock.
OUTCOME_STRIP = ("shop_type", "store_type", "product_type", "distraction_reason", "quantity")


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
    """The JSON of a judge reply: a strict parse of the fenced block or of the whole text, else the official pass,
    `json.loads(repair_json(text))` (prose around the JSON, trailing commas, Python literals, a cut-off reply)."""
    from json_repair import repair_json

    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    for candidate in ([fenced.group(1)] if fenced else []) + [text.strip()]:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    repaired = repair_json(text)
    if repaired in ("", '""', "[]", "{}"):
        raise MalformedJudgeOutput(f"no parseable JSON in judge output: {text[:200]!r}")
    return json.loads(repaired)


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


def parse_no_rubric_output(text: str, sliding: bool) -> tuple[bool, str, str]:
    """Parse a no-rubric reply into (meetExpectation, justification, memory); raises on malformed output."""
    data = _extract_json(text)
    if isinstance(data, list) and data:  # official: a list counts by its first element
        data = data[0]
    if not isinstance(data, dict) or "meetExpectation" not in data:
        raise MalformedJudgeOutput(f"no-rubric reply needs a meetExpectation field: {text[:160]!r}")
    meet = data["meetExpectation"]
    if isinstance(meet, str) and meet.lower() in ("true", "false"):
        meet = meet.lower() == "true"
    if not isinstance(meet, bool):
        raise MalformedJudgeOutput(f"meetExpectation must be true/false, got {meet!r}")
    if sliding and "memory" not in data:
        raise MalformedJudgeOutput(f"sliding no-rubric reply needs a memory field: {text[:160]!r}")
    memory = data.get("memory", "")
    return meet, str(data.get("justification", "")), memory if isinstance(memory, str) else json.dumps(memory)


def parse_outcome_output(text: str) -> float:
    """Parse the outcome reply into its action reward (1.0 or 0.0); raises on malformed output."""
    data = _extract_json(text)
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if isinstance(data, dict) and isinstance(data.get("action_reward"), (int, float)):
        return 1.0 if float(data["action_reward"]) == 1.0 else 0.0
    if isinstance(data, dict) and isinstance(data.get("all_met"), bool):
        return 1.0 if data["all_met"] else 0.0
    raise MalformedJudgeOutput(f"outcome reply needs action_reward or all_met: {text[:160]!r}")


def _call_arguments(args) -> str:
    """`k='v', ...`; arguments that are not an object (the agent sent `null` or a number) as their JSON."""
    if isinstance(args, dict):
        return ", ".join(f"{k}={v!r}" for k, v in args.items())
    return json.dumps(args, ensure_ascii=False)


def format_message(index: int, m: dict) -> str:
    """One message as the official judge shows it: `[index] role: content` with tool calls as `name(k='v')`."""
    role, content = m["role"], (m.get("content") or "").strip()
    if role == "assistant" and m.get("tool_calls"):
        calls = ".".join(f"{c['name']}({_call_arguments(c['arguments'])})" for c in m["tool_calls"])
        content = f"{content} {calls}" if content else calls
    return f"[{index}] {role}: {content}" if content else ""


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
    """The trajectory judge, with the optional outcome check.

    Args:
        backend ([`ChatBackend`]): the judge model.
        window (`int`, *optional*, defaults to `10`) / overlap (`int`, *optional*, defaults to `2`): messages.
        max_retries (`int`, *optional*, defaults to `3`): attempts per judge call before recording a failure.
        outcome_reward (`bool`, *optional*, defaults to `False`): also judge the last resolved write action.
        evaluation_type (`str`, *optional*, defaults to `"trajectory"`): `trajectory` (sliding windows over the
            rubrics), `trajectory_full_traj_rubric` (the whole trajectory in one call), `trajectory_sliding_wo_rubric`
            / `trajectory_full_traj_wo_rubric` (one verdict on the whole instruction, no rubrics shown: the
            record's `rubric_states` then hold that one verdict).
    """

    def __init__(
        self,
        backend: ChatBackend,
        window: int = 10,
        overlap: int = 2,
        max_retries: int = 3,
        outcome_reward: bool = False,
        evaluation_type: str = "trajectory",
    ):
        if evaluation_type not in EVALUATION_TYPES:
            raise ValueError(f"Unknown evaluation type {evaluation_type!r}; valid: {list(EVALUATION_TYPES)}")
        self.backend, self.window, self.overlap = backend, window, overlap
        self.max_retries, self.outcome_reward, self.evaluation_type = max_retries, outcome_reward, evaluation_type

    def _ask(self, prompt: str, parse, result: JudgeResult):
        errors = []
        for _ in range(self.max_retries):
            result.judge_calls += 1
            chat = self.backend.chat([{"role": "user", "content": prompt}], role="judge")
            result.prompt_tokens += chat.prompt_tokens
            result.completion_tokens += chat.completion_tokens
            try:
                return parse(chat.content)
            except MalformedJudgeOutput as err:
                errors.append(str(err))
        raise MalformedJudgeOutput(f"{self.max_retries} malformed judge replies; last: {errors[-1]}")

    def evaluate(self, subtask: SubTask, messages: list[dict]) -> JudgeResult:
        """Judge a finished conversation (`messages` as the runner records them; system messages are skipped)."""
        rubrics = subtask.evaluation_criteria.rubrics()
        result = JudgeResult(reward=0.0, rubric_states=[False] * len(rubrics), justifications=[""] * len(rubrics))
        if not rubrics:  # official: no rubric (nor expected state) to evaluate -> reward 1, whatever the type
            result.reward = result.reward_breakdown = 1.0
            return result
        convo = [m for m in messages if m["role"] != "system"]
        if self.evaluation_type in SLIDING_TYPES:
            spans = sliding_windows(len(convo), self.window, self.overlap)
        else:
            spans = [(0, len(convo))]
        # Official env_info: the system time with its weekday and an empty database list.
        env_info = json.dumps({"system_time": agent_clock(subtask.environment), "database": []}, ensure_ascii=False)
        # Official: the judge gets the subtask instruction only (1.0 tasks: their `instructions`).
        instruction = subtask.instruction or subtask.user_intention
        judge = self._without_rubrics if self.evaluation_type.endswith("_wo_rubric") else self._with_rubrics
        try:
            judge(convo, spans, env_info, instruction, rubrics, result)
        except MalformedJudgeOutput as err:
            result.failed, result.failure_reason = True, str(err)
            return result
        states = result.rubric_states
        result.reward_breakdown = sum(states) / len(states)
        result.reward = 1.0 if all(states) else 0.0  # all-or-nothing (official evaluator_traj.py)
        if self.outcome_reward:
            try:
                result.outcome_reward = self.outcome_check(subtask, messages, result)
            except MalformedJudgeOutput as err:
                result.failed, result.failure_reason = True, f"outcome check: {err}"
                result.reward = 0.0
                return result
            if result.outcome_reward is not None:
                result.reward = min(result.reward, result.outcome_reward)
        return result

    def _window_text(self, convo: list[dict], start: int, end: int) -> str:
        lines = [format_message(start + i + 1, m) for i, m in enumerate(convo[start:end])]
        return "\n".join(line for line in lines if line)

    def _with_rubrics(self, convo, spans, env_info, instruction, rubrics, result: JudgeResult) -> None:
        """Official `calculate_reward` / `calculate_reward_full_traj_rubric`: rubric states carried across windows."""
        states, notes = result.rubric_states, result.justifications
        for w, (start, end) in enumerate(spans, start=1):
            current = [
                {"rubric_idx": f"rubric_{i}", "rubric": r, "justification": notes[i], "meetExpectation": states[i]}
                for i, r in enumerate(rubrics)
            ]
            prompt = JUDGE_PROMPT.format(
                env_info=env_info,
                user_instruction=instruction,
                window=self.window if self.evaluation_type in SLIDING_TYPES else len(convo),
                overlap=self.overlap,
                window_idx=w,
                total_windows=len(spans),
                window_content=self._window_text(convo, start, end),
                current_rubrics=json.dumps(current, ensure_ascii=False, indent=1),
            )
            try:
                update = self._ask(prompt, lambda text: parse_window_output(text, len(rubrics)), result)
            except MalformedJudgeOutput as err:
                raise MalformedJudgeOutput(f"window {w}/{len(spans)}: {err}") from None
            for i, (meet, why) in update.items():
                states[i], notes[i] = meet, why

    def _without_rubrics(self, convo, spans, env_info, instruction, rubrics, result: JudgeResult) -> None:
        """Official `calculate_reward_sliding_wo_rubric` / `calculate_reward_full_traj_wo_rubric`: one verdict on the
        whole instruction (the rubrics are not shown); the sliding variant carries the judge's memory and verdict."""
        sliding = self.evaluation_type in SLIDING_TYPES
        parts = NO_RUBRIC_SLIDING if sliding else NO_RUBRIC_FULL
        verdict, memory = {"justification": "Not evaluated yet", "meetExpectation": False}, ""
        for w, (start, end) in enumerate(spans, start=1):
            fields = {
                "window": self.window,
                "overlap": self.overlap,
                "window_idx": w,
                "total_windows": len(spans),
                "window_content": self._window_text(convo, start, end),
                "memory": memory,
                "current_evaluation": json.dumps(verdict, ensure_ascii=False, indent=1),
            }
            prompt = NO_RUBRIC_PROMPT.format(
                env_info=env_info,
                user_instruction=instruction,
                **{k: v.format(**fields) for k, v in parts.items()},
            )
            try:
                meet, why, memory = self._ask(prompt, lambda text: parse_no_rubric_output(text, sliding), result)
            except MalformedJudgeOutput as err:
                raise MalformedJudgeOutput(f"window {w}/{len(spans)}: {err}") from None
            verdict = {"justification": why, "meetExpectation": meet}
        result.rubric_states, result.justifications = [verdict["meetExpectation"]], [verdict["justification"]]

    def outcome_check(self, subtask: SubTask, messages: list[dict], result: JudgeResult) -> float | None:
        """Official `evaluate_outcome_for_subtask`: the last WRITE call whose entity resolves in the subtask's
        environment is judged against the overall rubrics, next to the target entity; 0.0 when WRITE calls exist but
        none resolves; None (no outcome) without WRITE calls."""
        writes = [
            c
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
            if c["name"] in OUTCOME_WRITE_TOOLS and isinstance(c["arguments"], dict)  # others never resolve
        ]
        if not writes:
            return None
        resolved = [r for r in (resolve_action(c["name"], c["arguments"], subtask.environment) for c in writes) if r]
        if not resolved:
            return 0.0
        last = resolved[-1]
        target = find_target(subtask.environment)
        prompt = OUTCOME_PROMPT.format(
            rubrics=json.dumps(subtask.evaluation_criteria.overall_rubrics, ensure_ascii=False, indent=1),
            target=json.dumps(target, ensure_ascii=False, indent=1) if target else "(no target entity found)",
            tool=last["action"],
            entity="\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in last.items() if k != "action"),
        )
        return self._ask(prompt, parse_outcome_output, result)


def _strip(model: str, entity: dict, drop: tuple = ()) -> dict:
    """A raw task entity as the outcome judge sees it: the fields its official model declares (no `target_reason`,
    `category`, ...), without the hidden labels."""
    kept = {k: v for k, v in declared(model, entity).items() if k not in OUTCOME_STRIP and k not in drop}
    return sanitize(kept)


def _container(environment: dict, key: str) -> dict:
    value = environment.get(key) or {}
    return value if isinstance(value, dict) else {str(i): v for i, v in enumerate(value)}


def _find(environment: dict, keys: tuple, entity_id: str) -> dict | None:
    wanted = str(entity_id).strip()
    for key in keys:
        for eid, e in _container(environment, key).items():
            ids = {eid.strip(), *(str(e.get(f, "")).strip() for f in ("store_id", "shop_id", f"{key[:-1]}_id"))}
            if wanted and wanted in ids:
                return e
    return None


def resolve_action(tool: str, args: dict, environment: dict) -> dict | None:
    """The entity (and products) a WRITE call acted on, without hidden labels; None if it is not in the environment
    (official `resolve_action`)."""
    out: dict = {"action": tool}
    if tool in ("create_delivery_order", "create_instore_product_order", "instore_reservation", "instore_book"):
        store = _find(environment, ("stores", "shops"), args.get("store_id", args.get("shop_id", "")))
        if store is None:
            return None
        model = "Shop" if "shop_id" in store else "Store"
        out["entity"] = _strip(model, store, ("products",))
        products, item = store.get("products", []), product_model(model)
        if tool == "create_delivery_order":
            wanted = [str(p).strip() for p in args.get("product_ids", [])]
            out["products"] = [_strip(item, p) for p in products if str(p.get("product_id", "")).strip() in wanted]
            out["extra"] = {k: args.get(k, "") for k in ("address", "dispatch_time", "attributes", "note")}
        elif tool == "create_instore_product_order":
            pid = str(args.get("product_id", "")).strip()
            out["products"] = [_strip(item, p) for p in products if str(p.get("product_id", "")).strip() == pid]
            out["extra"] = {"order_quantity": args.get("quantity", 1)}
        else:
            out["products"] = [_strip(item, p) for p in products]
            out["extra"] = {k: args.get(k, "") for k in ("time", "customer_count")}
        return out
    kind = {"create_hotel_order": "hotel", "create_flight_order": "flight", "create_train_order": "train"}.get(
        tool, "attraction" if tool == "create_attraction_order" else None
    )
    if kind is None:
        return None
    entity = _find(environment, (f"{kind}s",), args.get(f"{kind}_id", ""))
    if entity is None:
        return None
    pid = str(args.get({"hotel": "room_id", "attraction": "ticket_id"}.get(kind, "seat_id"), "")).strip()
    model = CONTAINER_MODELS[f"{kind}s"]
    out["entity"] = _strip(model, entity, ("products",))
    out["products"] = [
        _strip(product_model(model), p)
        for p in entity.get("products", [])
        if str(p.get("product_id", "")).strip() == pid
    ]
    if kind != "hotel":
        out["extra"] = {k: args.get(k, "") for k in ("date", "quantity")}
    return out


def find_target(environment: dict) -> dict | None:
    """The entity labelled target (`*_type == "target"`) with its target products, labels stripped (official
    `find_target_in_env`)."""
    for key in ("stores", "shops", "hotels", "flights", "trains", "attractions"):
        for e in _container(environment, key).values():
            if any(k.endswith("_type") and v == "target" for k, v in e.items()):
                model = CONTAINER_MODELS[key]
                out = _strip(model, e, ("products",))
                targets = [
                    _strip(product_model(model), p) for p in e.get("products", []) if p.get("product_type") == "target"
                ]
                if targets:
                    out["target_products"] = targets
                return out
    return None
