"""EnvACE's two-role rollout: the caller acts, the rehearsal role writes the tool responses (official code
Within-yao/EnvACE@173e941: `agent_system/environments/env_package/checklist/envs.py` state machine,
`agent/orchestra/checklist/checklist_orchestra.py` routing, `agent/agents/checklist/tool_*_agent.py`).

Episode state machine: AWAIT_CALLER -> (tool calls) AWAIT_SIMULATOR, one pending call per rehearsal generation,
through a cursor -> AWAIT_CALLER; a caller response without tool calls ends the user turn: the checklist judge scores
it and the next reference user message is replayed (no user simulator in training). Every generation is a row
(verl-agent style): caller rows have the caller's accumulated context as prompt (token-in token-out: the context grows
by the completion ids and the template's tokens of the appended messages, never re-tokenised), rehearsal rows have the
rehearsal prompt. A rehearsed response that later sits in the caller's context is prompt there, never loss: it is
trained only through the rehearsal row that generated it. Same lock-step pattern as `agentrl_shared.rollout`: each
phase (caller, rehearsal) makes one batched generation call on every rank while any rank has work in it, with as many
prompts as `prompt_count` says (`MultiTurnGRPOTrainer._prompt_count`: the rank's own count, one dummy on a rank
without work, or the maximum over ranks where TRL's vLLM server / tensor-parallel path hands results back by rank
offset); the dummies' completions are dropped.
"""

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrl_shared.rollout import GenerateFn, Row

from .data import world_for
from .parsing import (
    ToolCall,
    few_shot_lines,
    is_error_result,
    parse_execution_result,
    parse_tool_calls,
    rehearsal_messages,
)
from .reward import TurnJob, TurnResult, episode_reward, score_turns


logger = logging.getLogger(__name__)
SENTINEL = "\x00ENVACE_SENTINEL\x00"
# why an episode ended; logged as `envace/stop/<reason>`
STOP_REASONS = ("done", "malformed_tool_call", "tool_error", "required_item_failed", "judge_error",
                "length_exceeded", "turn_limit", "step_limit")  # fmt: skip


@dataclass
class Trajectory:
    """One episode: the conversation, the caller's token context, the rows and how it ended."""

    task: dict
    group_id: int
    episode_id: int
    messages: list[dict] = field(default_factory=list)
    caller_ids: list[int] = field(default_factory=list)
    user_turn: int = 0
    turn_start: int = 0  # index in `messages` of the current turn's user message
    pending: list[ToolCall] = field(default_factory=list)
    cursor: int = 0
    caller_completion: list[int] = field(default_factory=list)  # the completion whose calls are pending
    caller_text: str = ""
    turn_end: list[int] | None = None  # the final answer's completion ids while its turn awaits the judge
    assistant_turns: int = 0
    micro_steps: int = 0
    turn_scores: list[float] = field(default_factory=list)
    tool_failure: bool = False
    dropped_calls: int = 0
    judge_failures: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    stop_reason: str = "running"
    reward: float = 0.0

    @property
    def state(self) -> str:
        if self.stop_reason != "running":
            return "TERMINATED"
        return "AWAIT_SIMULATOR" if self.cursor < len(self.pending) else "AWAIT_CALLER"

    @property
    def success(self) -> bool:
        return self.reward >= 1.0 - 1e-9


def tools_system_prompt(tools: list[dict]) -> str:
    """Tool schemas and the `<tool_call>` format in a system message (Qwen3's template text), for chat templates
    that do not render `tools=` themselves."""
    lines = "\n".join(json.dumps(t) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        f"function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each function "
        "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


# The caller-only baseline's simulator instruction: the information and rules of the official httpx-mode system prompt
# (EnvACE `simulate_core/prompts/simulator/fallback_system_instruction.txt`@173e941), in our words.
EXTERNAL_SYSTEM = """You execute tools precisely, learning from examples.
You receive:
- the JSON schema of the tool call;
- few-shot examples of tool calls with their execution results (they may be <unavailable> when there are no \
earlier calls; then rely on the JSON schema);
- a new tool call with its arguments.

What to do:
1) Take the OUTPUT FORMAT from the examples: the same structure, data types and patterns of response.
2) Keep the facts CONSISTENT with what the examples show.
3) For the new call: apply that format to its arguments and keep to the facts of the examples; for arguments close \
to an example, adapt that example's result; for clearly different arguments, write a new result in the learned \
format and factual patterns; you may correct wrong types or mistakes found in the examples.
4) Treat errors plainly: for invalid or missing arguments, return an error message shaped like the examples.

Hard limits:
- behave as a silent function: no explanations, suggestions or hints;
- no advice on fixing errors or improving the call;
- never mention the examples or compare with them;
- return only the raw execution result as valid JSON;
- an error carries minimal information and no instructions.

Output: first a short analysis of how to mock the result, then the result itself as a valid JSON object or array, \
without explanations, markdown or code fences, in the structure learned from the examples and consistent with \
their facts. Format:
{
  "analysis": str,
  "execution_result": JSON array or object,
}"""

# the official httpx request's response_format (`mcp_tool.py` `_single_attempt`)
EXTERNAL_RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "tool_execution_response",
        "schema": {
            "type": "object",
            "required": ["analysis", "execution_result"],
            "additionalProperties": False,
            "properties": {
                "analysis": {"type": "string"},
                "execution_result": {
                    "anyOf": [
                        {"type": "object", "minProperties": 1, "additionalProperties": True},
                        {"type": "array", "items": {}},
                    ]
                },  # fmt: skip
            },
        },
    },
}
TOOL_API_KEY_ENV = "TOOL_API_KEY"  # the caller-only launch script's variable


def external_messages(task: dict, call: ToolCall) -> list[dict]:
    """System + user messages of one httpx-mode simulation (official `simulate_core/_builders.py`
    `build_single_call_user_prompt`@173e941): the sample's ground-truth few-shot, the tool's name, its whole schema
    and the arguments (JSON with `indent=0`); no history, no caller text, no whitelist."""
    schemas = {t["function"]["name"]: t for t in task["tools"]}
    schema = json.dumps(schemas.get(call.name, {}), ensure_ascii=True, indent=0)
    user = ("\n".join(few_shot_lines(task["tool_call_response_map"])) + "\n\n"
            f"Current tool name: {call.name}\nCurrent tool input schema (JSON Schema):\n{schema}\n"
            f"Current arguments (JSON):\n{json.dumps(call.arguments, ensure_ascii=True, indent=0)}\n"
            "Generate tool execution result in JSON format.")  # fmt: skip
    return [{"role": "system", "content": EXTERNAL_SYSTEM}, {"role": "user", "content": user}]


class ExternalSimulator:
    """Tool responses from an OpenAI-compatible model: the caller-only baseline ("Simulator-8B"), official httpx
    mode (`mcp_tool.py::MCPChecklistTool.execute`@173e941 with `run_checklist_caller_only.sh`: T 0.6, top-p 0.8,
    max_tokens 8000, `TOOL_RETRY=5`, `response_format` = {analysis, execution_result}, the key of `TOOL_API_KEY`).
    The tool message is the `execution_result` as JSON. A try that fails (API error: back-off 1, 2, 4 ... s up to
    30 s; unparseable reply: 0.5 s) is retried; after the last the message is `{"error": <last error>}` and the call
    counts as a failure, which ends the episode (official `envs.py`: `success=False` -> `tool_failed_any`)."""

    def __init__(self, base_url: str, model: str, retries: int = 5, timeout: float = 120.0, temperature: float = 0.6,
                 top_p: float = 0.8, max_tokens: int = 8000, api_key: str | None = None, backoff_s: float = 1.0):  # fmt: skip
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, headers=headers)
        self.model, self.retries, self.backoff_s = model, retries, backoff_s
        self.sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}

    def __call__(self, task: dict, call: ToolCall) -> tuple[str, bool]:
        import httpx

        payload = {"model": self.model, "messages": external_messages(task, call), **self.sampling,
                   "response_format": EXTERNAL_RESPONSE_FORMAT}  # fmt: skip
        error = "unknown"
        for attempt in range(max(1, self.retries)):
            try:
                resp = self.client.post("/chat/completions", json=payload)
                resp.raise_for_status()
                result = json.loads(resp.json()["choices"][0]["message"]["content"])["execution_result"]
                return json.dumps(result, ensure_ascii=True), is_error_result(result)
            except httpx.HTTPError as exc:  # API failure
                error, wait = f"{type(exc).__name__}: {exc}", min(self.backoff_s * 2**attempt, 30.0)
            except (ValueError, KeyError, TypeError, IndexError) as exc:  # unparseable reply
                error, wait = f"{type(exc).__name__}: {exc}", 0.5 * self.backoff_s
            if attempt + 1 < self.retries:
                time.sleep(wait)
        logger.warning("external simulator failed on %s after %d tries: %s", call.name, self.retries, error)
        return json.dumps({"error": error}, ensure_ascii=True), True


def real_tool_response(task: dict, call: ToolCall) -> tuple[str, bool]:
    """The task's real back end (generated tasks): (content, is_error)."""
    whitelist = [t["function"]["name"] for t in task["tools"]]
    result = world_for(task).execute(call.name, call.arguments, whitelist)
    return json.dumps(result), "error_tool_call" in result


class RehearsalCollector:
    """Plays EnvACE episodes for a batch of tasks.

    Args:
        tokenizer: the policy's tokenizer (both roles).
        judge: a `reward.EndpointJudge` or `reward.RuleJudge`; `None` scores nothing (test-time rehearsal).
        tool_return_mode (`str`): `agent` (rehearsal role generates), `real` (task back ends) or `external`.
        external_simulator (`ExternalSimulator`, *optional*): for `tool_return_mode="external"`.
        max_prompt_length, max_completion_length, max_model_len, max_steps, max_assistant_turns, max_user_turns,
        max_parallel_calls: the caps of `EnvConfig`.
        chat_template_kwargs (`dict`): caller rendering (`enable_thinking=True` in the paper).
        tools_in_system_prompt (`bool`): see `EnvConfig`.
        simulator_think (`bool`): append `/think` to rehearsal prompts.
        terminate_on_judge_failure (`bool`): a judge failure ends the episode (official).
    """

    def __init__(self, tokenizer, judge, tool_return_mode: str = "agent", external_simulator=None,
                 max_prompt_length: int = 12000, max_completion_length: int = 8000, max_model_len: int = 20000,
                 max_steps: int = 200, max_assistant_turns: int = 30, max_user_turns: int = 30,
                 max_parallel_calls: int = 20, chat_template_kwargs: dict | None = None,
                 tools_in_system_prompt: bool = False, simulator_think: bool = True,
                 terminate_on_judge_failure: bool = True):  # fmt: skip
        if tool_return_mode == "external" and external_simulator is None:
            raise ValueError("tool_return_mode=external needs an ExternalSimulator.")
        self.tok, self.judge, self.mode, self.external = tokenizer, judge, tool_return_mode, external_simulator
        self.max_prompt_length, self.max_completion_length = max_prompt_length, max_completion_length
        self.max_model_len, self.max_steps = max_model_len, max_steps
        self.max_assistant_turns, self.max_user_turns = max_assistant_turns, max_user_turns
        self.max_parallel_calls = max_parallel_calls
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.tools_in_system_prompt, self.simulator_think = tools_in_system_prompt, simulator_think
        self.terminate_on_judge_failure = terminate_on_judge_failure
        self.timings: Counter = Counter()
        self.end_of_turn_id = self._end_of_turn_id()
        # generation stops at the template's end-of-turn token (the model's generation_config EOS), which is not the
        # tokenizer's EOS for every model (SmolLM2's GGUF tokenizer: EOS <|im_start|>, turns end with <|im_end|>)
        self.eos_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id, self.end_of_turn_id} - {None}

    # --- token bookkeeping ---
    def _end_of_turn_id(self) -> int:
        """The first token the chat template writes after an assistant message's content (`<|im_end|>` in ChatML)."""
        text = self.tok.apply_chat_template([{"role": "user", "content": "u"}, {"role": "assistant", "content": SENTINEL}],
                                            tokenize=False, **self.chat_template_kwargs)  # fmt: skip
        return self.tok(text[text.index(SENTINEL) + len(SENTINEL) :], add_special_tokens=False).input_ids[0]

    def _template(self, messages: list[dict], tools=None) -> str:
        return self.tok.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )

    def _initial_ids(self, task: dict) -> tuple[list[dict], list[int]]:
        messages = [{"role": "system", "content": task["system"]}] if task.get("system") else []
        tools = task["tools"]
        if self.tools_in_system_prompt:
            sys_text = tools_system_prompt(tools)
            messages = [
                {"role": "system", "content": (messages[0]["content"] + "\n\n" if messages else "") + sys_text}
            ]
            tools = None
        messages.append({"role": "user", "content": task["user_turns"][0]})
        return messages, self.tok(self._template(messages, tools), add_special_tokens=False).input_ids

    def _extension_ids(self, completion_ids: list[int], new_messages: list[dict]) -> list[int]:
        """Template tokens that follow an assistant completion when `new_messages` are appended: the text after the
        assistant content in a rendering of [user, assistant, *new] (end-of-turn, the new messages, the generation
        prompt), minus the end-of-turn token the completion already ends with."""
        text = self._template([{"role": "user", "content": "u"}, {"role": "assistant", "content": SENTINEL},
                               *new_messages])  # fmt: skip
        tail = text[text.index(SENTINEL) + len(SENTINEL) :]
        if completion_ids and completion_ids[-1] in self.eos_ids:
            eos_text = self.tok.decode([completion_ids[-1]])
            if tail.startswith(eos_text):
                tail = tail[len(eos_text) :]
        return self.tok(tail, add_special_tokens=False).input_ids

    def _decode(self, ids: list[int]) -> str:
        """Completion text with tool-call and think tags kept (the Qwen tokenizer marks them special), end tokens
        dropped."""
        while ids and ids[-1] in self.eos_ids:
            ids = ids[:-1]
        return self.tok.decode(ids, skip_special_tokens=False)

    def _row(self, t: Trajectory, prompt_ids, completion_ids, logps, text: str, role: str, valid: bool) -> Row:
        return Row(
            prompt_ids=prompt_ids[-self.max_prompt_length :],
            completion_ids=list(completion_ids),
            prompt_text="",
            completion_text=text,
            action=text,
            is_action_valid=valid,
            group_id=t.group_id,
            episode_id=t.episode_id,
            turn_idx=t.user_turn,
            role=role,
            prompt_truncated=len(prompt_ids) > self.max_prompt_length,
            sampling_logps=None if logps is None else list(logps),  # the sampler/trainer gap metric
        )

    # --- the loop ---
    def collect(self, tasks: list[dict], group_ids: list[int], generate: GenerateFn,
                generate_simulator: GenerateFn | None = None, prompt_count: Callable[[int], int] = lambda n: n,
                episode_offset: int = 0) -> list[Trajectory]:  # fmt: skip
        """Play one episode per task. `generate` serves the caller, `generate_simulator` the rehearsal role (default:
        the same policy). `prompt_count(n)` is how many prompts this rank sends in a phase where it has `n` (0: no
        rank has any, the phase is skipped on every rank); it is called twice per round on every rank (once in
        `real`/`external` mode, which has no rehearsal phase), and the loop ends on the round in which no rank had
        work in either phase, so every rank makes the same generation calls."""
        generate_simulator = generate_simulator or generate
        trajs = []
        for i, (task, g) in enumerate(zip(tasks, group_ids, strict=True)):
            messages, ids = self._initial_ids(task)
            trajs.append(Trajectory(task, g, episode_offset + i, messages=messages, caller_ids=ids,
                                    turn_start=len(messages) - 1))  # fmt: skip
        pad = self.tok.pad_token_id
        while True:
            for t in trajs:  # LENGTH_EXCEEDED: caller context + max response >= max_model_len
                if t.state == "AWAIT_CALLER" and len(t.caller_ids) + self.max_completion_length >= self.max_model_len:
                    t.stop_reason = "length_exceeded"
            callers = [t for t in trajs if t.state == "AWAIT_CALLER"]
            n_caller_prompts = prompt_count(len(callers))
            if n_caller_prompts > 0:
                prompts = [t.caller_ids[-self.max_prompt_length :] for t in callers]
                t0 = time.perf_counter()
                # dummies pad the list to the count; their completions (beyond len(callers)) are dropped
                out, logps = generate(prompts + [[pad]] * (n_caller_prompts - len(prompts)))
                self.timings["generate_caller_s"] += time.perf_counter() - t0
                for k, t in enumerate(callers):
                    self._caller_step(t, out[k], None if logps is None else logps[k])
                self._end_user_turns([t for t in callers if t.turn_end is not None])
            # an episode that is not terminated awaits the caller or the rehearsal role: when no rank had a caller
            # to serve (above) nor a rehearsal (below) in this round, every episode of every rank has ended
            n_sim_prompts = 0
            sims = [t for t in trajs if t.state == "AWAIT_SIMULATOR"]
            if self.mode == "agent":
                n_sim_prompts = prompt_count(len(sims))
            if n_sim_prompts > 0:
                prompts = []
                for t in sims:
                    history = t.messages[: max(i for i, m in enumerate(t.messages) if m["role"] == "assistant")]
                    msgs = rehearsal_messages(
                        t.task, history, t.caller_text, t.pending[t.cursor], self.simulator_think
                    )
                    prompts.append(self.tok(self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                                            add_special_tokens=False).input_ids)  # fmt: skip
                t0 = time.perf_counter()
                dummies = [[pad]] * (n_sim_prompts - len(prompts))
                out, logps = generate_simulator([p[-self.max_prompt_length :] for p in prompts] + dummies)
                self.timings["generate_simulator_s"] += time.perf_counter() - t0
                for k, t in enumerate(sims):
                    text = self._decode(out[k])
                    content, is_error = parse_execution_result(text)
                    t.rows.append(self._row(t, prompts[k], out[k], None if logps is None else logps[k], text,
                                            "simulator", not is_error))  # fmt: skip
                    self._tool_result(t, content, is_error)
            if n_caller_prompts == 0 and n_sim_prompts == 0:
                break
        for t in trajs:
            n_turns = len(t.task["user_turns"])
            t.reward = episode_reward(t.turn_scores, len(t.task["checklists"]), n_turns)
        return trajs

    def _caller_step(self, t: Trajectory, completion_ids: list[int], logps) -> None:
        text = self._decode(completion_ids)
        calls, error = parse_tool_calls(text)
        t.rows.append(self._row(t, t.caller_ids, completion_ids, logps, text, "caller", error is None))
        t.caller_ids = t.caller_ids + list(completion_ids)
        t.caller_text, t.assistant_turns, t.micro_steps = text, t.assistant_turns + 1, t.micro_steps + 1
        assistant = {"role": "assistant", "content": text}
        if calls:  # official envs.py: the message keeps the text before the first call block, the calls are fields
            cut = text.find("\n<tool_call>\n")
            assistant["content"] = text[:cut] if cut != -1 else text
            assistant["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                       for c in calls]  # fmt: skip
        t.messages.append(assistant)
        if error is not None:  # malformed tool call: structured error message, episode ends
            t.messages.append({"role": "tool", "content": json.dumps({"error_tool_call": error["error_tool_call"]})})
            t.tool_failure, t.stop_reason = True, "malformed_tool_call"
            return
        if not calls:  # the user turn ends: judged with the round's other ended turns (`_end_user_turns`)
            t.turn_end = list(completion_ids)
            return
        else:
            cap = self.max_parallel_calls or len(calls)  # 0: no cap (official: every parsed call is executed)
            t.dropped_calls += len(calls) - min(len(calls), cap)
            t.pending, t.cursor = calls[:cap], 0
            t.caller_completion = list(completion_ids)
            if self.mode == "real":
                for call in t.pending:
                    self._tool_result(t, *real_tool_response(t.task, call))
            elif self.mode == "external":
                for call in t.pending:
                    self._tool_result(t, *self.external(t.task, call))
        self._check_caps(t)

    def _tool_result(self, t: Trajectory, content: str, is_error: bool) -> None:
        """Append one tool response; after the last pending call, extend the caller context by the tool messages."""
        if t.stop_reason != "running":
            return
        call = t.pending[t.cursor]
        t.messages.append({"role": "tool", "name": call.name, "content": content})
        t.cursor += 1
        if self.mode == "agent":
            t.micro_steps += 1
        if is_error:  # any error_tool_call ends the episode (official envs.py)
            t.tool_failure, t.stop_reason = True, "tool_error"
            return
        if t.cursor == len(t.pending):
            new = t.messages[-len(t.pending) :]
            t.caller_ids = t.caller_ids + self._extension_ids(t.caller_completion, new)
            t.pending, t.cursor = [], 0
        self._check_caps(t)

    def _end_user_turns(self, trajs: list[Trajectory]) -> None:
        """INTERACTING for every trajectory whose caller ended its user turn in this round: one judge call for all
        their turns (`reward.score_turns`; official `interaction.py` gathers all checks of a step at once), then per
        trajectory the next reference user message or the end (official order `envs.py` INTERACTING@173e941: a judge
        failure or a required item failed, the last reference turn, the assistant-turn cap checked here at the turn's
        end, the user-turn cap)."""
        if not trajs:
            return
        if self.judge is None:  # private rehearsal at test time: nothing is scored
            results = [TurnResult(0.0, [], False) for _ in trajs]
        else:
            t0 = time.perf_counter()
            jobs = [TurnJob(t.task, t.user_turn, t.messages[: t.turn_start], t.messages[t.turn_start :],
                            t.tool_failure) for t in trajs]  # fmt: skip
            results = score_turns(self.judge, jobs)
            self.timings["judge_s"] += time.perf_counter() - t0
        for t, result in zip(trajs, results, strict=True):
            completion_ids, t.turn_end = t.turn_end, None
            self._next_turn(t, result, completion_ids)
            self._check_caps(t)

    def _next_turn(self, t: Trajectory, result: TurnResult, completion_ids: list[int]) -> None:
        t.turn_scores.append(result.score)
        if result.judge_failures:
            logger.warning("episode %d turn %d: judge failures %s", t.episode_id, t.user_turn, result.judge_failures)
            t.judge_failures += result.judge_failures
            if self.terminate_on_judge_failure:
                t.stop_reason = "judge_error"
                return
        if result.required_failed:
            t.stop_reason = "required_item_failed"
            return
        t.user_turn += 1
        if t.user_turn >= len(t.task["user_turns"]):
            t.stop_reason = "done"
            return
        if t.assistant_turns >= self.max_assistant_turns or t.user_turn >= self.max_user_turns:
            t.stop_reason = "turn_limit"
            return
        user = {"role": "user", "content": t.task["user_turns"][t.user_turn]}
        t.turn_start = len(t.messages)
        t.messages.append(user)
        t.caller_ids = t.caller_ids + self._extension_ids(completion_ids, [user])

    def _check_caps(self, t: Trajectory) -> None:
        """The micro-step cap (`env.max_steps`); the assistant-turn cap is checked at a turn's end (`_next_turn`)."""
        if t.stop_reason != "running":
            return
        if t.micro_steps >= self.max_steps:
            t.stop_reason = "step_limit"


def trajectory_metrics(trajs: list[Trajectory], prefix: str = "envace") -> dict[str, float]:
    """Reward, success (R = 1), rows per role, termination mix, judge failures, dropped parallel calls."""
    n = max(len(trajs), 1)
    rows = [r for t in trajs for r in t.rows]
    out = {
        f"{prefix}/reward_mean": sum(t.reward for t in trajs) / n,
        f"{prefix}/success_rate": sum(t.success for t in trajs) / n,
        f"{prefix}/user_turns_reached": sum(len(t.turn_scores) for t in trajs) / n,
        f"{prefix}/caller_rows": float(sum(r.role == "caller" for r in rows)),
        f"{prefix}/simulator_rows": float(sum(r.role == "simulator" for r in rows)),
        f"{prefix}/invalid_caller_ratio": sum(r.role == "caller" and not r.is_action_valid for r in rows)
        / max(sum(r.role == "caller" for r in rows), 1),
        f"{prefix}/invalid_simulator_ratio": sum(r.role == "simulator" and not r.is_action_valid for r in rows)
        / max(sum(r.role == "simulator" for r in rows), 1),
        f"{prefix}/judge_failures": float(sum(len(t.judge_failures) for t in trajs)),
        f"{prefix}/dropped_parallel_calls": float(sum(t.dropped_calls for t in trajs)),
    }
    for reason in STOP_REASONS:
        out[f"{prefix}/stop/{reason}"] = sum(t.stop_reason == reason for t in trajs) / n
    return out
