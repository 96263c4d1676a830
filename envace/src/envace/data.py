"""EnvACE training data: the official checklist format and a generator of tool tasks with real back ends.

Official rows (the paper's `…_forverl_train.parquet`, written by the CM2 pipeline namezhenzhang/CM2-RLCR-Tool-Agent@2758991
`pipeline/5_rl_training/convert_checklist_for_verl.py` and read by EnvACE `agent_system/dataset/checklist_dataset.py`
@173e941) carry the tool schemas, the reference conversation whose user turns are replayed, per-turn weighted
checklists (num_checklists x num_turns x items) and, derived from the conversation, the ground-truth tool
call/response pairs the rehearsal role sees as few-shot (`normalize_record` reads the verl layout, CM2's
`checklist_annotated.json` and env-side JSONL rows). The training files are not public, so `generate_tasks` builds
tasks of the same shape whose tools have deterministic Python back ends: the ground truth is real, a real-environment
baseline exists, and every checklist item carries a machine-checkable `rule` for the rule-based judge.
"""

import json
import random
from pathlib import Path


class DataError(ValueError):
    """A data file is missing or not in the checklist format."""


# --- the official format -------------------------------------------------------------------------------------------
def _as_json(value):
    """Parquet stores nested fields as JSON strings in some exports; decode those."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _tool_call_parts(call: dict) -> tuple[str, dict]:
    fn = call.get("function", call)
    args = _as_json(fn.get("arguments", {}))
    return fn["name"], args if isinstance(args, dict) else {}


def tool_call_response_map(messages: list[dict]) -> dict[str, list[list]]:
    """`{tool_name: [[arguments, response], ...]}` from a reference conversation: the k-th tool message after an
    assistant message answers its k-th tool call (CM2 tool messages carry no call id)."""
    out: dict[str, list[list]] = {}
    pending: list[tuple[str, dict]] = []
    for m in messages:
        if m["role"] == "assistant":
            pending = [_tool_call_parts(c) for c in (m.get("tool_calls") or [])]
        elif m["role"] in ("tool", "observation") and pending:
            name, args = pending.pop(0)
            out.setdefault(name, []).append([args, _as_json(m.get("content", ""))])
    return out


def _drop_none(item):
    return {k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item


def _field(record: dict, extra: dict, uid, *paths: str):
    """The first present value among `paths` (dotted; `extra_info.` ones read the decoded `extra_info`), decoded from
    JSON when stored as a string, with the path it came from."""
    for path in paths:
        head, *rest = path.split(".")
        value = extra if head == "extra_info" else record.get(head)
        for key in rest:
            value = _as_json(value)
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            return _as_json(value), path
    raise DataError(f"record {uid!r}: no {' / '.join(paths)}; not a checklist-annotated row (CM2 pipeline).")


def normalize_record(record: dict, max_num_checklist: int = 1) -> dict:
    """One official record -> the task dict every module of this package uses. Three layouts:

    - verl parquet/JSON (`…_forverl_train.parquet`, CM2 `pipeline/5_rl_training/convert_checklist_for_verl.py`@2758991,
      read by EnvACE `agent_system/dataset/checklist_dataset.py:392-430`@173e941): top-level `messages` is trimmed to
      the first user message; the whole conversation is `extra_info.messages`, the checklists
      `extra_info.interaction_kwargs.checklist_list`, the uuid `extra_info.original_index`, the tools
      `extra_info.tools` (a JSON string of OpenAI function schemas);
    - CM2 `checklist_annotated.json`: `uuid`, `messages`, `tools`, `checklists`;
    - env-side rows (JSONL): `all_messages`, `checklist_list`, `tool_call_response_map`.
    `tool_call_response_map` is derived from the conversation where absent (EnvACE `mcp_tool.py`
    `_get_called_tools_and_response_static`). `max_num_checklist` = 1 as in the official launch scripts. A missing or
    malformed field raises `DataError`, one line naming the field.
    """
    extra = _as_json(record.get("extra_info")) or {}
    if not isinstance(extra, dict):
        raise DataError(f"record {record.get('uuid')!r}: extra_info is a {type(extra).__name__}, expected an object.")
    uid, _ = _field(record, extra, None, "extra_info.original_index", "uuid", "task_id")
    tools, tools_key = _field(record, extra, uid, "extra_info.tools", "tools")
    checklists, cl_key = _field(record, extra, uid, "extra_info.interaction_kwargs.checklist_list", "checklist_list",
                                "checklists")  # fmt: skip
    reference, ref_key = _field(record, extra, uid, "extra_info.messages", "all_messages", "messages")
    if not isinstance(tools, list) or not tools or not all(isinstance(t, dict) for t in tools):
        raise DataError(f"record {uid!r}: {tools_key} must be a non-empty list of function schemas.")
    tools = [t if "function" in t else {"type": "function", "function": t} for t in tools]
    if not all(isinstance(t["function"], dict) and t["function"].get("name") for t in tools):
        raise DataError(f"record {uid!r}: {tools_key} has a schema without function.name.")
    if not isinstance(reference, list) or not all(isinstance(m, dict) and m.get("role") for m in reference):
        raise DataError(f"record {uid!r}: {ref_key} must be a list of messages with a role.")
    # Arrow structs give every message (and checklist item) every key of the column, None where it had none
    reference = [{k: v for k, v in m.items() if v is not None} for m in reference]
    user_turns = [m.get("content") or "" for m in reference if m["role"] == "user"]
    if not user_turns:
        raise DataError(f"record {uid!r}: {ref_key} has no user message.")
    if (
        not isinstance(checklists, list)
        or not checklists
        or not all(isinstance(c, list) and all(isinstance(turn, list) for turn in c) for c in checklists)
    ):
        raise DataError(f"record {uid!r}: {cl_key} must be a list of checklists, each a list of item lists per user "
                        "turn.")  # fmt: skip
    checklists = [[[_drop_none(i) for i in turn] for turn in c] for c in checklists[:max_num_checklist]]
    for c in checklists:
        if len(c) != len(user_turns):
            raise DataError(
                f"record {uid!r}: {cl_key} has {len(c)} turns but {ref_key} has {len(user_turns)} user turns; the "
                "format needs one checklist turn per user turn."
            )
        for turn in c:
            for item in turn:
                if not isinstance(item, dict) or not isinstance(item.get("weight"), (int, float)):
                    raise DataError(f"record {uid!r}: {cl_key} has an item without a numeric weight: {item!r:.80}.")
    gt_map = _as_json(record.get("tool_call_response_map")) or tool_call_response_map(reference)
    system = [m["content"] for m in reference[:1] if m["role"] == "system"]
    return {
        "task_id": str(uid),
        "task_type": record.get("task_type", "checklist"),
        "system": system[0] if system else None,
        "tools": tools,
        "reference_messages": reference,
        "user_turns": user_turns,
        "checklists": checklists,
        "tool_call_response_map": gt_map,
        "backend": record.get("backend"),
    }


def filter_long_prompts(tasks: list[dict], tokenizer, max_tokens: int, chat_template_kwargs: dict | None = None,
                        ) -> tuple[list[dict], int]:  # fmt: skip
    """(tasks whose first prompt has at most `max_tokens` tokens, how many were dropped). The prompt is what the
    official `ChecklistDataset.maybe_filter_out_long_prompts`@173e941 measures: the chat template of the messages up
    to the first user message with the tools and the generation prompt (`enable_thinking` as in training). 0 keeps
    all."""
    if max_tokens <= 0:
        return tasks, 0
    kept = []
    for task in tasks:
        messages = ([{"role": "system", "content": task["system"]}] if task.get("system") else []) + [
            {"role": "user", "content": task["user_turns"][0]}
        ]
        ids = tokenizer.apply_chat_template(messages, tools=task["tools"], add_generation_prompt=True, tokenize=True,
                                            **(chat_template_kwargs or {}))  # fmt: skip
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        if len(ids) <= max_tokens:
            kept.append(task)
    return kept, len(tasks) - len(kept)


def load_checklist_file(path: str | Path, max_num_checklist: int = 1) -> list[dict]:
    """Tasks from a `.json` list (CM2 `checklist_annotated.json`), `.jsonl` or `.parquet` (EnvACE `*_train.parquet`)."""
    path = Path(path)
    if not path.exists():
        raise DataError(
            f"{path} does not exist. The EnvACE/CM2 training files are not public (regenerate them with the CM2 "
            "pipeline); use `env.source=generated` for the generated tool tasks."
        )
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    elif path.suffix == ".json":
        records = json.loads(path.read_text())
        records = records if isinstance(records, list) else [records]
    else:
        raise DataError(f"{path}: unknown suffix {path.suffix!r}; expected .json, .jsonl or .parquet.")
    return [normalize_record(r, max_num_checklist) for r in records]


# --- tool back ends of the generated tasks -------------------------------------------------------------------------
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Denver", "Hanoi", "Quito", "Perth", "Riga", "Accra", "Bern"]
CONDITIONS = ["sunny", "cloudy", "rainy", "snowy", "windy", "foggy"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "CAD"]
TICKERS = ["ACME", "BOLT", "CRUX", "DYNA", "EPIC", "FLUX", "GRID", "HALO"]
ORDER_STATUS = ["shipped", "processing", "delivered", "cancelled"]

TOOL_SCHEMAS = {
    "get_weather": {
        "description": "Current weather of a city: temperature in Celsius and the sky condition.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. 'Paris'."}},
            "required": ["city"],
        },
    },
    "convert_currency": {
        "description": "Convert an amount between two currencies at today's rate.",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "description": "Amount in the source currency."},
                "from_currency": {"type": "string", "description": "ISO code of the source currency, e.g. 'USD'."},
                "to_currency": {"type": "string", "description": "ISO code of the target currency, e.g. 'EUR'."},
            },
            "required": ["amount", "from_currency", "to_currency"],
        },
    },
    "get_stock_price": {
        "description": "Latest price of a stock in USD.",
        "parameters": {
            "type": "object",
            "properties": {"ticker": {"type": "string", "description": "Ticker symbol, e.g. 'ACME'."}},
            "required": ["ticker"],
        },
    },
    "get_order_status": {
        "description": "Status and item count of an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "Order id, e.g. 'A1042'."}},
            "required": ["order_id"],
        },
    },
}
_JSON_TYPES = {"string": str, "number": (int, float), "integer": int, "object": dict, "array": list, "boolean": bool}


def tool_schema(name: str) -> dict:
    return {"type": "function", "function": {"name": name, **TOOL_SCHEMAS[name]}}


def tool_error(code: str, message: str) -> dict:
    """The `error_tool_call` object of the official simulator contract (EnvACE `simulate_core/_error.py`@173e941):
    codes INVALID_TOOL_CALL_FORMAT, TOOL_NOT_AVAILABLE, INVALID_PARAMETERS."""
    return {"error_tool_call": {"code": code, "message": message}}


class ToolWorld:
    """Deterministic back ends of the generated tools: a database drawn from `seed`, pure lookups and arithmetic.

    `execute` validates like the official simulator's validation order (tool whitelist, then argument schema) and
    returns an `error_tool_call` object on failure, else the result dict.
    """

    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.weather = {
            c: {"temperature_c": rng.randint(-10, 35), "condition": rng.choice(CONDITIONS)} for c in CITIES
        }
        self.rates = {c: 1.0 if c == "USD" else round(rng.uniform(0.005, 2.0), 4) for c in CURRENCIES}  # USD per unit
        self.prices = {t: round(rng.uniform(5, 500), 2) for t in TICKERS}
        self.orders = {
            f"A{1000 + i}": {"status": rng.choice(ORDER_STATUS), "items": rng.randint(1, 9)} for i in range(40)
        }

    def execute(self, name: str, arguments: dict, whitelist: list[str] | None = None) -> dict:
        if name not in TOOL_SCHEMAS or (whitelist is not None and name not in whitelist):
            return tool_error("TOOL_NOT_AVAILABLE", f"Tool {name!r} is not available.")
        schema = TOOL_SCHEMAS[name]["parameters"]
        if not isinstance(arguments, dict):
            return tool_error("INVALID_PARAMETERS", "Arguments must be a JSON object.")
        for key in schema["required"]:
            if key not in arguments:
                return tool_error("INVALID_PARAMETERS", f"Missing required argument {key!r}.")
        for key, value in arguments.items():
            prop = schema["properties"].get(key)
            if prop is None:
                return tool_error("INVALID_PARAMETERS", f"Unknown argument {key!r}.")
            if not isinstance(value, _JSON_TYPES[prop["type"]]) or isinstance(value, bool) != (
                prop["type"] == "boolean"
            ):
                return tool_error("INVALID_PARAMETERS", f"Argument {key!r} must be of type {prop['type']}.")
        if name == "get_weather":
            city = arguments["city"].strip().title()
            if city not in self.weather:
                return {"city": arguments["city"], "found": False, "message": "Unknown city."}
            return {"city": city, **self.weather[city]}
        if name == "convert_currency":
            src, dst = arguments["from_currency"].upper(), arguments["to_currency"].upper()
            unknown = [c for c in (src, dst) if c not in self.rates]
            if unknown:
                return {"found": False, "message": f"Unknown currency {unknown[0]}."}
            rate = round(self.rates[src] / self.rates[dst], 4)
            return {"amount": arguments["amount"], "from": src, "to": dst, "rate": rate,
                    "converted": round(arguments["amount"] * rate, 2)}  # fmt: skip
        if name == "get_stock_price":
            ticker = arguments["ticker"].strip().upper()
            if ticker not in self.prices:
                return {"ticker": ticker, "found": False, "message": "Unknown ticker."}
            return {"ticker": ticker, "price_usd": self.prices[ticker]}
        order = self.orders.get(arguments["order_id"].strip().upper())
        if order is None:
            return {"order_id": arguments["order_id"], "found": False, "message": "No such order."}
        return {"order_id": arguments["order_id"].strip().upper(), **order}


def world_for(task: dict) -> ToolWorld:
    """The back end of a generated task (`task["backend"]`); official tasks have none."""
    if not task.get("backend"):
        raise DataError(f"task {task['task_id']!r} has no tool back end (official data): use the rehearsal role "
                        "or an external simulator for its tool responses.")  # fmt: skip
    return ToolWorld(task["backend"]["seed"])


def _turn(world: ToolWorld, rng: random.Random) -> tuple[str, str, dict, str]:
    """(user request, tool, arguments, the response field the reply must state) of one turn."""
    name = rng.choice(sorted(TOOL_SCHEMAS))
    if name == "get_weather":
        city = rng.choice(CITIES)
        return f"What is the temperature in {city} right now?", name, {"city": city}, "temperature_c"
    if name == "convert_currency":
        amount = rng.choice([10, 25, 50, 100, 250])
        src, dst = rng.sample(CURRENCIES, 2)
        return (f"How much is {amount} {src} in {dst}?", name,
                {"amount": amount, "from_currency": src, "to_currency": dst}, "converted")  # fmt: skip
    if name == "get_stock_price":
        ticker = rng.choice(TICKERS)
        return f"What is the current price of {ticker} stock?", name, {"ticker": ticker}, "price_usd"
    order = rng.choice(sorted(world.orders))
    return f"What is the status of my order {order}?", name, {"order_id": order}, "status"


def _format_value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def generate_tasks(num_tasks: int, seed: int, max_turns: int = 2, num_distractor_tools: int = 1) -> list[dict]:
    """`num_tasks` generated tasks in the official task shape (1 to `max_turns` user turns, one tool call each).

    Turn checklist, derived from the ground truth (weights sum to 1 per turn, as the CM2 items do):
    - `call` (focus `assistant.tool_calls`, weight 0.5, required for the next turn): the gold call was made;
    - `reply` (focus `assistant.content.user_visible_reply`, weight 0.5, depends on `call`): the reply states the
      value of the gold tool response (e.g. the temperature).
    Each item carries a `rule` for `reward.RuleJudge`. Tools offered = the turn tools plus distractors.
    """
    rng = random.Random(seed)
    tasks = []
    for i in range(num_tasks):
        world_seed = rng.randrange(2**31)
        world = ToolWorld(world_seed)
        n_turns = rng.randint(1, max_turns)
        reference: list[dict] = []
        turns_checklist, gt_map, used = [], {}, []
        for t in range(n_turns):
            request, name, args, field = _turn(world, rng)
            response = world.execute(name, args)
            value = _format_value(response[field])
            call_id = f"call_{i}_{t}"
            reply = f"The {field.replace('_', ' ')} is {value}."
            reference += [
                {"role": "user", "content": request},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
                {"role": "tool", "name": name, "tool_call_id": call_id, "content": json.dumps(response)},
                {"role": "assistant", "content": reply},
            ]  # fmt: skip
            gt_map.setdefault(name, []).append([args, response])
            used.append(name)
            snippet = json.dumps({"name": name, "arguments": args})
            turns_checklist.append(
                [
                    {"id": f"T{t}C0", "focus_on": "assistant.tool_calls",
                     "question": f"Did the assistant call {name} with arguments {json.dumps(args)}?",
                     "pass_condition": f"An assistant tool call has name={name} and arguments equal to {json.dumps(args)}.",
                     "failure_examples": ["No tool call", "Wrong tool name", "Wrong or missing argument"],
                     "evidence": [{"turn": t, "step": 0, "from": "assistant.tool_calls", "snippet": snippet}],
                     "required_for_next_turn": True, "dependence": [], "weight": 0.5,
                     "rule": {"kind": "tool_call", "name": name, "arguments": args}},
                    {"id": f"T{t}C1", "focus_on": "assistant.content.user_visible_reply",
                     "question": f"Does the reply tell the user that the {field.replace('_', ' ')} is {value}?",
                     "pass_condition": f"The user-visible reply contains the value {value}.",
                     "failure_examples": ["No reply", "A different value", "A value not from the tool response"],
                     "evidence": [{"turn": t, "step": 1, "from": "assistant.content.user_visible_reply",
                                   "snippet": reply}],
                     "required_for_next_turn": False, "dependence": [f"T{t}C0"], "weight": 0.5,
                     "rule": {"kind": "reply_contains", "text": value}},
                ]
            )  # fmt: skip
        others = [n for n in sorted(TOOL_SCHEMAS) if n not in used]
        distractors = rng.sample(others, k=min(num_distractor_tools, len(others)))
        offered = sorted(set(used) | set(distractors))
        tasks.append(
            {
                "task_id": f"gen-{seed}-{i}",
                "task_type": "+".join(used),
                "system": None,
                "tools": [tool_schema(n) for n in offered],
                "reference_messages": reference,
                "user_turns": [m["content"] for m in reference if m["role"] == "user"],
                "checklists": [turns_checklist],
                "tool_call_response_map": gt_map,
                "backend": {"world": "generated", "seed": world_seed},
            }
        )
    return tasks


def load_tasks(source: str, split: str, num_tasks: int, seed: int, path: str | None = None, max_turns: int = 2,
               max_num_checklist: int = 1) -> list[dict]:  # fmt: skip
    """Tasks of one split: `generated` (train / eval / warmstart / val draw from disjoint seeds) or `file` (an
    official file)."""
    if source == "generated":
        offset = {"train": 0, "eval": 1_000_000, "warmstart": 2_000_000, "val": 3_000_000}[split]
        return generate_tasks(num_tasks, seed + offset, max_turns)
    if source == "file":
        if path is None:
            raise DataError("env.source=file needs env.train_path / env.eval_path (an official checklist file).")
        return load_checklist_file(path, max_num_checklist)[:num_tasks]
    raise DataError(f"Unknown env.source {source!r}; valid: generated, file.")
