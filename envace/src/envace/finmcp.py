"""FinMCP-Bench (Zhu et al., arXiv 2603.24943): loader, inference against an OpenAI-compatible endpoint, and the
official tool metrics.

Format and metrics follow the official code, aliyun/qwen-dianjin @ fd9b511, `DianJin-TIR/`:
- a benchmark file (`Benchmark/benchmark_final.json`, `benchmark_stss.json`, `benchmark_stms.json`,
  `benchmark_multi_turn.json`) is a JSON list of samples with `scenery` ("level1-level2-..."), `diff_level`
  (`turns`, `tool_number`, `para_tool_call_number`, `level`), `tool_list`, `task` ("single step" | "multi step" |
  "multi turn"), and `messages`: the expert-checked ground-truth conversation in OpenAI format (assistant
  `tool_calls[].function.name/arguments`, `tool` results);
- predictions are stored per sample in `messages_pred` (`infer/inference_api.py`): for every user turn the model is
  called on the ground-truth history up to that user message, runs its tool loop (at most `max_tool_num` = 20 calls),
  and its messages are appended; a failed sample carries `error: true` and is dropped before scoring;
- `eval/evaluation.py`: only tool NAMES are compared. Per sample, TP/FP/FN are multiset intersections/differences of
  the predicted and ground-truth name lists; precision = TP/(TP+FP), recall = TP/(TP+FN), F1 their harmonic mean, with
  0 for an empty denominator (so a sample with no ground-truth and no predicted call scores 0); exact match
  (`consist`) = the two ordered name lists are equal. Macro = mean over samples, micro = from summed counts; the same
  per level-1 scenario, per difficulty level and per task.

Tool execution: the official inference calls the live Qieman MCP server (network; tool schemas from its MCP_SCHEMA
file). Offline we replay the ground-truth tool results instead (`replay_tool`): a call with the same name and
arguments as a ground-truth call of the sample gets that call's result, one with the same name the first result of
that name, any other an error message. This is a deviation (README "Deviations"); the metrics do not depend on tool
results except through the model's later calls.
"""

import json
from collections import Counter, defaultdict
from pathlib import Path


TASKS = ("single_step", "multi_step", "multi_turn")
MAX_TOOL_NUM = 20  # infer/infer_config.yaml `max_tool_num`
BENCHMARK_FILE = "benchmark_final.json"  # the three sample types together (official README)


class FinMCPError(ValueError):
    """A FinMCP-Bench file that does not follow the official layout; the message names the sample and the fix."""


def load_finmcp(path: str | Path) -> list[dict]:
    """Samples of one benchmark file, or of `benchmark_final.json` in a folder holding the official `Benchmark/`
    files. Checks the keys the evaluation needs (`scenery`, `diff_level.level`, `messages`)."""
    path = Path(path)
    if path.is_dir():
        path = path / BENCHMARK_FILE
    if not path.exists():
        raise FinMCPError(f"FinMCP-Bench file {path} not found; download the benchmark files (Benchmark/{BENCHMARK_FILE}, "
                          "benchmark_stss.json, ...) from https://huggingface.co/DianJin and pass the file or folder")  # fmt: skip
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FinMCPError(f"{path} is not valid JSON ({exc}); expected a JSON list of FinMCP-Bench samples") from None
    if not isinstance(data, list):
        raise FinMCPError(f"{path} holds a {type(data).__name__}; expected a JSON list of FinMCP-Bench samples")
    for i, sample in enumerate(data):
        missing = [k for k in ("scenery", "diff_level", "messages") if k not in sample]
        if "diff_level" in sample and "level" not in (sample["diff_level"] or {}):
            missing.append("diff_level.level")
        if missing:
            raise FinMCPError(f"{path}: sample {sample.get('id', i)} lacks {', '.join(missing)} "
                              "(official keys: scenery, diff_level.level, messages, task)")  # fmt: skip
    return data


def tool_names(messages: list[dict]) -> list[str]:
    """Tool names called by the assistant messages, in order (`extract_toolcall_from_meg`)."""
    return [str(c["function"]["name"]) for m in messages for c in (m.get("tool_calls") or [])]


def counts(pred: list[str], gold: list[str]) -> tuple[int, int, int]:
    """(TP, FP, FN) of two name lists as multisets (`calc_tp_fp_fn`)."""
    p, g = Counter(pred), Counter(gold)
    return sum((p & g).values()), sum((p - g).values()), sum((g - p).values())


def _div(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p, r = _div(tp, tp + fp), _div(tp, tp + fn)
    return p, r, _div(2 * p * r, p + r)


def sample_record(sample: dict, pred_key: str = "messages_pred") -> dict:
    """Per-sample counts and its groups (`get_instance_result`)."""
    if pred_key not in sample:
        raise FinMCPError(f"sample {sample.get('id')} has no `{pred_key}`; run the model first (`envace eval "
                          "--benchmark finmcp`) or name the key that holds the predicted messages")  # fmt: skip
    gold, pred = tool_names(sample["messages"]), tool_names(sample[pred_key])
    tp, fp, fn = counts(pred, gold)
    return {"id": sample.get("id"), "level1": sample["scenery"].split("-")[0].strip(),
            "difficulty": sample["diff_level"]["level"], "task": sample.get("task", "any").replace(" ", "_"),
            "TP": tp, "FP": fp, "FN": fn, "exact_match": int(pred == gold)}  # fmt: skip


def aggregate(records: list[dict]) -> dict:
    """Macro (mean of per-sample P/R/F1) and micro (summed counts) precision/recall/F1, exact-match rate, N."""
    per = [_prf(r["TP"], r["FP"], r["FN"]) for r in records]
    n = len(records)
    micro = _prf(*(sum(r[k] for r in records) for k in ("TP", "FP", "FN")))
    return {"macro_precision": _div(sum(p for p, _, _ in per), n), "macro_recall": _div(sum(r for _, r, _ in per), n),
            "macro_f1": _div(sum(f for _, _, f in per), n), "micro_precision": micro[0], "micro_recall": micro[1],
            "micro_f1": micro[2], "exact_match": _div(sum(r["exact_match"] for r in records), n), "n": n}  # fmt: skip


def score(samples: list[dict], pred_key: str = "messages_pred", drop_errors: bool = True) -> dict:
    """The official report: overall, per level-1 scenario, per difficulty level and per task."""
    kept = [s for s in samples if not (drop_errors and s.get("error", False))]
    records = [sample_record(s, pred_key) for s in kept]
    out = {"overall": aggregate(records), "dropped_errors": len(samples) - len(kept)}
    for key, name in (("level1", "by_scenario"), ("difficulty", "by_difficulty"), ("task", "by_task")):
        groups = defaultdict(list)
        for r in records:
            groups[r[key]].append(r)
        out[name] = {k: aggregate(v) for k, v in groups.items()}
    return out


def replay_tool(sample: dict, name: str, arguments: dict) -> str:
    """The ground-truth result of a call (offline stand-in for the live MCP server, see the module docstring)."""
    results = {m.get("tool_call_id"): m.get("content", "") for m in sample["messages"] if m.get("role") == "tool"}
    by_name = None
    for m in sample["messages"]:
        for c in m.get("tool_calls") or []:
            if c["function"]["name"] != name or c.get("id") not in results:
                continue
            try:
                gold_args = json.loads(c["function"].get("arguments") or "{}")
            except json.JSONDecodeError:
                gold_args = None
            if gold_args == arguments:
                return results[c["id"]]
            by_name = results[c["id"]] if by_name is None else by_name
    if by_name is not None:
        return by_name
    return json.dumps({"success": False, "error": f"tool {name} is not available"}, ensure_ascii=False)


def derived_schemas(samples: list[dict]) -> list[dict]:
    """OpenAI tool schemas built from the ground-truth calls (names and the argument keys seen, typed from the
    values), for runs without the Qieman MCP_SCHEMA file. A deviation: the official schemas carry descriptions."""
    props: dict[str, dict] = {}
    types = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
    for s in samples:
        for m in s["messages"]:
            for c in m.get("tool_calls") or []:
                fields = props.setdefault(c["function"]["name"], {})
                try:
                    args = json.loads(c["function"].get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {}
                for k, v in (args if isinstance(args, dict) else {}).items():
                    fields.setdefault(k, {"type": types.get(type(v), "string")})
    return [{"type": "function", "function": {"name": name, "description": name,
             "parameters": {"type": "object", "properties": fields}}} for name, fields in sorted(props.items())]  # fmt: skip


def predict_sample(sample: dict, chat, tools: list[dict], max_tool_num: int = MAX_TOOL_NUM) -> dict:
    """`messages_pred` for one sample (`process_one_sample` / `call_with_messages`): for each user turn, the model
    answers the ground-truth history up to that turn and runs its tool loop. `chat(messages, tools)` returns an
    OpenAI assistant message dict."""
    gold = sample["messages"]
    pred: list[dict] = []
    for i, turn in enumerate(gold):
        if turn["role"] in ("system", "user"):
            pred.append(dict(turn))
        if turn["role"] != "user":
            continue
        history = [dict(m) for m in gold[: i + 1]]
        start = len(history)
        reply = chat(history, tools)
        history.append(reply)
        calls, used = reply.get("tool_calls") or [], 0
        while calls and used <= max_tool_num:
            used += len(calls)
            for c in calls:
                # malformed arguments raise: the sample is an error and is dropped before scoring (official
                # `infer/inference_api.py::call_with_messages` json.loads's them unguarded, `main_OpenAI_API` records
                # the exception as `error: true`)
                args = json.loads(c["function"].get("arguments") or "{}")
                result = replay_tool(sample, c["function"]["name"], args if isinstance(args, dict) else {})
                history.append({"role": "tool", "tool_call_id": c.get("id"), "content": result})
            reply = chat(history, tools)
            history.append(reply)
            calls = reply.get("tool_calls") or []
        pred.extend(history[start:])
    return {**sample, "messages_pred": pred}


def openai_chat(base_url: str, model: str, max_tokens: int = 4096, temperature: float = 0.0, timeout: float = 600.0,
                enable_thinking: bool | None = None, top_p: float | None = None):  # fmt: skip
    """`chat(messages, tools) -> assistant message` over an OpenAI-compatible endpoint (vLLM, `agentrl_shared.serve`)."""
    import httpx

    client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def chat(messages: list[dict], tools: list[dict]) -> dict:
        body = {"model": model, "messages": messages, "tools": tools, "max_tokens": max_tokens,
                "temperature": temperature}  # fmt: skip
        if top_p is not None:
            body["top_p"] = top_p
        if enable_thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
        resp = client.post("/chat/completions", json=body)
        resp.raise_for_status()
        msg = resp.json()["choices"][0]["message"]
        out = {"role": "assistant", "content": msg.get("content"), "tool_calls": msg.get("tool_calls") or None}
        if msg.get("reasoning_content"):
            out["reasoning_content"] = msg["reasoning_content"]
        return out

    return chat


def run(samples: list[dict], chat, tools: list[dict], out: Path, max_tool_num: int = MAX_TOOL_NUM) -> dict:
    """Predict every sample (results appended to `out/predictions.jsonl` as they come; a rerun resumes), then write
    `out/predictions.json` (official layout, with `messages_pred`) and `out/results.json` (the scores)."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "predictions.jsonl"
    done = {}
    if log.exists():
        done = {r["_index"]: r for r in map(json.loads, log.read_text(encoding="utf-8").splitlines())}
    for i, sample in enumerate(samples):
        if i in done:
            continue
        try:
            result = predict_sample(sample, chat, tools, max_tool_num)
        except Exception as exc:  # noqa: BLE001 - a failed sample is recorded as the official harness does
            result = {**sample, "error": True, "error_message": f"{type(exc).__name__}: {exc}", "messages_pred": []}
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"_index": i, **result}, ensure_ascii=False) + "\n")
        done[i] = result
    preds = [{k: v for k, v in done[i].items() if k != "_index"} for i in range(len(samples))]
    (out / "predictions.json").write_text(json.dumps(preds, ensure_ascii=False, indent=1), encoding="utf-8")
    scores = score(preds)
    (out / "results.json").write_text(json.dumps(scores, indent=2) + "\n")
    return scores
