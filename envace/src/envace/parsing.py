"""Strict parsers and the rehearsal prompt of EnvACE's two roles (official code Within-yao/EnvACE@173e941).

- Caller: Qwen3 tool-call blocks, newline + `<tool_call>` + newline + JSON + newline + `</tool_call>`
  (`agent_system/environments/env_package/checklist/tool_parser.py`). A malformed block yields an `error_tool_call`
  payload and ends the episode; one bad block invalidates the whole response.
- Rehearsal role: a system instruction (validate format, whitelist, argument schema, then simulate; output only an
  `<execution_result>` block) and a user prompt with the whitelist, the ground-truth few-shot calls, the history, the
  caller's raw response and the current tool, schema and arguments (`simulate_core/_builders.py`), `/think` appended.
  Its output is parsed strictly (`agent_system/agent/agents/checklist/tool_simulator_agent.py::_parse_sim_response`).
The wording of the prompts is ours; the structure and the information are the official ones.
"""

import json
import re
from dataclasses import dataclass


TOOL_CALL_BLOCK = re.compile(r"\n<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)
EXECUTION_RESULT_BLOCK = re.compile(r"\n<execution_result>\n(.*?)\n</execution_result>", re.DOTALL)
THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict


# --- caller ---------------------------------------------------------------------------------------------------------
def parse_tool_calls(text: str) -> tuple[list[ToolCall], dict | None]:
    """The caller's tool calls, or `([], error)` with an `error_tool_call` payload.

    No `<tool_call>` at all: `([], None)`, a final answer (end of the user turn). Error codes as the official
    parser: NO_TOOL_CALL_FOUND (tag without the exact newline-delimited block), JSON_DECODE_ERROR, NO_ARGUMENTS,
    INVALID_TOOL_NAME. A block may hold one call object or a list of them; `parameters` is accepted for `arguments`.
    """
    if "<tool_call>" not in text:
        return [], None
    blocks = TOOL_CALL_BLOCK.findall(text)
    if not blocks:
        return [], {
            "code": "NO_TOOL_CALL_FOUND",
            "error_tool_call": 'No tool call found; the format is <tool_call>\\n{"name": ..., "arguments": {...}}'
            "\\n</tool_call>.",
        }
    calls = []
    for block in blocks:
        try:
            parsed = json.loads(block.strip())
        except json.JSONDecodeError:
            return [], {
                "code": "JSON_DECODE_ERROR",
                "error_tool_call": f"A tool call is not valid JSON: {block[:200]}",
            }
        for act in parsed if isinstance(parsed, list) else [parsed]:
            arguments = act.get("arguments", act.get("parameters")) if isinstance(act, dict) else None
            if isinstance(arguments, str):  # arguments serialised as a JSON string
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = None
            if not isinstance(arguments, dict):
                return [], {"code": "NO_ARGUMENTS", "error_tool_call": "A tool call has no arguments object; use {}."}
            name = act.get("name")
            if not isinstance(name, str) or not name.strip():
                return [], {"code": "INVALID_TOOL_NAME", "error_tool_call": f"Invalid tool name {name!r}."}
            calls.append(ToolCall(name.strip(), arguments))
    return calls, None


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, user-visible text) of an assistant response (Qwen3 `<think>...</think>` prefix)."""
    match = re.search(r"<think>(.*?)</think>", text, re.DOTALL)
    if match is None:
        return "", text.strip()
    return match.group(1).strip(), text[match.end() :].strip()


def visible_reply(text: str) -> str:
    """The user-visible reply: the text after the thinking, without tool-call blocks."""
    return re.sub(r"<tool_call>.*?</tool_call>", "", split_thinking(text)[1], flags=re.DOTALL).strip()


# --- rehearsal role -------------------------------------------------------------------------------------------------
# The rehearsal role's system prompt: the information and rules of the official validation-mode simulator instruction
# (EnvACE `simulate_core/prompts/simulator/validation_system_instruction.txt`@173e941), in our words.
REHEARSAL_SYSTEM = """You act as an exact tool simulator. You check the tool call an RL model made against the whitelist \
of candidate tools and the tool's JSON schema, and then you write the result that executing the tool would return.

The user message gives you:
- the candidate tools this sample may call (a whitelist of tool schemas);
- earlier tool calls with their results (ground-truth few-shot data; "<unavailable>" when there are none);
- the conversation so far;
- the RL model's latest response, with its calls inside <tool_call>...</tool_call> tags;
- the tool call to simulate: its name, its JSON schema and its parsed arguments.

Check the call in this order before writing any result:
1. Format. The latest response must put the call between <tool_call> and </tool_call>, holding valid JSON of the \
form {"name": ..., "arguments": {...}}. If the tags are missing or the JSON is broken, answer
<execution_result>
{"error_tool_call":{"code":"INVALID_TOOL_CALL_FORMAT","message":"<short reason>"}}
</execution_result>
2. Whitelist. The name of the tool to simulate must be one of the candidate tools (in the given list, or in the \
<tools> block of the caller's system prompt). If it is not, answer
<execution_result>
{"error_tool_call":{"code":"TOOL_NOT_AVAILABLE","message":"tool name '<name>' is not found. Please check your \
function call and use provided tools."}}
</execution_result>
3. Arguments. The arguments must be a JSON object that satisfies the input schema: every required field present, \
primitive types and enum values as the schema says. If not, answer
<execution_result>
{"error_tool_call":{"code":"INVALID_PARAMETERS","message":"<short reason>","details":{"errors":[...]}}}
</execution_result>
4. Result, only when checks 1 to 3 pass. If the few-shot data holds a related call (same name, similar arguments), \
reuse the content of its result. Otherwise write a plausible result that strictly follows the input schema and \
agrees with the facts of the few-shot data. You may correct wrong types or mistakes found in the examples.

Output, for results and errors alike:
- the result between <execution_result> and </execution_result> tags;
- inside them valid JSON only: a non-empty object or an array;
- nothing else: no comments, no markdown, no code fences;
- behave as a silent function: no explanations, suggestions or hints, and never mention the examples or compare \
with them.
Format:
<execution_result>
<JSON object or array>
</execution_result>"""


def few_shot_lines(gt_map: dict[str, list[list]]) -> list[str]:
    """The ground-truth call/response pairs of the sample (`tool_call_response_map`), or `<unavailable>`."""
    if not gt_map:
        return ["Previous tool calls and results (few-shot): <unavailable>"]
    lines = ["Previous tool calls and results (few-shot):"]
    for name, pairs in gt_map.items():
        for args, content in pairs:
            result = content if isinstance(content, str) else json.dumps(content, ensure_ascii=True, indent=0)
            lines.append(f"Tool name:\n{name}\nTool arguments:\n{json.dumps(args, ensure_ascii=True, indent=0)}\n"
                         f"Tool execution result:\n{result}\n")  # fmt: skip
    return lines


def serialize_history(messages: list[dict]) -> str:
    """`User:` / `Assistant:` / `Tool[name]:` lines (system messages skipped), tool calls rendered inline."""
    lines = []
    for m in messages:
        content = (m.get("content") or "").strip()
        if m["role"] == "user" and content:
            lines.append(f"User: {content}")
        elif m["role"] == "assistant":
            text = content
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                text += f'\n<tool_call>\n{{"name": "{fn["name"]}", "arguments": {args}}}\n</tool_call>'
            if text:
                lines.append(f"Assistant: {text}")
        elif m["role"] == "tool" and content:
            lines.append(f"Tool[{m.get('name', '')}]: {content}" if m.get("name") else f"Tool: {content}")
    return "\n\n".join(lines) if lines else "No conversation history"


def rehearsal_messages(task: dict, history: list[dict], caller_text: str, call: ToolCall, think: bool = True):
    """System + user messages of one rehearsal generation (one pending tool call), as the official Tool Simulator
    Agent's (`simulate_core/_builders.py::build_validation_user_prompt`, payload of `envs.py::_build_info`@173e941):
    the candidate tools, the sample's ground-truth few-shot, the conversation before the latest caller message (each
    earlier call once: the assistant messages keep the text before their call blocks, the calls come from
    `tool_calls`), the caller's raw latest response, and the current tool's whole schema (name, description,
    parameters: `_id_by_candidate_tools[uuid][name]`) with the parsed arguments; JSON with `indent=0` as there."""
    schemas = {t["function"]["name"]: t for t in task["tools"]}
    schema = (
        json.dumps(schemas[call.name], ensure_ascii=True, indent=0) if call.name in schemas else "<schema unavailable>"
    )
    parts = [
        "Candidate tools (whitelist for this sample):\n" + json.dumps(task["tools"], ensure_ascii=True, indent=0),
        "\n".join(few_shot_lines(task["tool_call_response_map"])),
        "Current conversation history:\n" + serialize_history(history),
        "RL model's latest response:\n" + caller_text,
        f"Current tool to simulate:\n- name: {call.name}\n- input schema (JSON Schema):\n{schema}\n"
        f"- arguments (JSON, parsed from caller's tool_call):\n{json.dumps(call.arguments, ensure_ascii=True, indent=0)}",
    ]
    user = "\n\n".join(parts) + ("\n\n/think" if think else "")  # SIM_APPEND_THINK_SWITCH, default on
    return [{"role": "system", "content": REHEARSAL_SYSTEM}, {"role": "user", "content": user}]


def format_error(code: str, message: str, **details) -> str:
    """An `error_tool_call` result string (nested object format of the official `format_tool_error`)."""
    return json.dumps({"error_tool_call": {"code": code, "message": message, **details}}, ensure_ascii=False)


def parse_execution_block(text: str) -> tuple[dict | list | None, str | None]:
    """(decoded JSON, None) of a rehearsal output's `<execution_result>` block, or (None, an `error_tool_call` string)
    when the strict parse fails: strip `<think>...</think>`; require the newline-delimited block; `json.loads`; a
    non-empty object or a list (official `tool_simulator_agent.py::_parse_sim_response`)."""
    text = THINK_BLOCK.sub("", text or "")
    if not text.strip():
        return None, format_error("EMPTY_SIMULATOR_OUTPUT", "Empty simulator output")
    if "<execution_result>" not in text:
        return None, format_error("NO_EXECUTION_RESULT_TAG_FOUND", "No <execution_result> tag", raw_preview=text[:200])
    blocks = EXECUTION_RESULT_BLOCK.findall(text)
    if not blocks:
        return None, format_error("EXECUTION_RESULT_TAG_MALFORMED", "Newline boundary or closing tag missing",
                                  raw_preview=text[:200])  # fmt: skip
    try:
        parsed = json.loads(blocks[0].strip())
    except json.JSONDecodeError as exc:
        return None, format_error("SIMULATOR_JSON_DECODE_ERROR", "Not JSON", raw_preview=blocks[0][:200],
                                  error=str(exc))  # fmt: skip
    if not (isinstance(parsed, list) or (isinstance(parsed, dict) and parsed)):
        return None, format_error("INVALID_EXECUTION_RESULT_TYPE", "Must be a non-empty object or an array")
    return parsed, None


def parse_execution_result(text: str) -> tuple[str, bool]:
    """(tool message content, is_error) of a rehearsal output.

    Strict (`parse_execution_block`): every parse failure is an `error_tool_call` string, as is a result that itself
    carries an `error_tool_call` (the rehearsal role rejected the call); either ends the episode.
    """
    parsed, error = parse_execution_block(text)
    if error is not None:
        return error, True
    return json.dumps(parsed, ensure_ascii=False), is_error_result(parsed)


def is_error_result(result) -> bool:
    """Whether a tool result carries an `error_tool_call` (official envs.py terminates the trajectory on it)."""
    return isinstance(result, dict) and "error_tool_call" in result
