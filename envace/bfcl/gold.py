"""Write BFCL result files holding the shipped GOLD answers (or perturbed ones) of chosen categories, in the layout
`bfcl evaluate` reads (`$BFCL_PROJECT_ROOT/result/<model>/.../BFCL_v4_<category>_result.json`), for the Qwen3 FC
handler (`Qwen/Qwen3-8B-FC`: one `<tool_call>` JSON block per call in the raw text).

Runs INSIDE the isolated bfcl environment (`uv run --project envace/bfcl python envace/bfcl/gold.py ...`), where
reading bfcl-eval's data files is allowed; envace itself never imports bfcl_eval. Used by envace's BFCL adapter test.

Gold: each ground-truth call with the first acceptable value other than "" of every parameter, recursively inside
nested dicts; a top-level parameter that may be left out ("" acceptable) is left out unless the schema requires it;
Java / JavaScript entries are not covered (their values must be rendered as Java / JS source text); irrelevance: a plain-text answer; relevance: a call; multi-turn:
every turn's ground-truth calls as one step, positional arguments named from the simulated API's signature.
Entries that no answer can pass (shipped data where a required parameter has no acceptable value or is missing from
the possible answer, or where the possible answer demands a parameter the schema lacks) are listed in
`$BFCL_PROJECT_ROOT/unsatisfiable.json`.
Perturbed: the first value of the first call changed (or its name), no call for relevance, a call for irrelevance,
the last non-empty turn of a multi-turn entry left out.
"""

import argparse
import ast
import importlib
import inspect
import json
from pathlib import Path

from bfcl_eval.constants.eval_config import RESULT_PATH
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry


def block(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


UNSATISFIABLE: set = set()  # functions of the current entry with a required parameter that has no acceptable value


def resolve(value):
    """A concrete value from a possible-answer value: nested dicts hold lists of acceptable values again (or, in a
    few entries, a bare value)."""
    if isinstance(value, dict):
        value = {k: v if isinstance(v, list) else [v] for k, v in value.items()}
        return {k: pick(v) for k, v in value.items() if any(x != "" for x in v)}
    if isinstance(value, list):
        return [resolve(x) if isinstance(x, dict) else x for x in value]
    return value


def pick(acceptable: list):
    """The first acceptable value that is not "" (BFCL's mark that a parameter may be left out)."""
    return resolve(next(x for x in acceptable if x != ""))


def single_turn_calls(ground_truth: list[dict], functions: list[dict]) -> list[tuple[str, dict]]:
    """A required parameter is always given (its first acceptable value other than "", else ""); an optional one
    that may be left out ("" acceptable) or that the schema does not list is left out."""
    schemas = {f["name"]: f.get("parameters", {}) for f in functions}
    calls = []
    for call in ground_truth:
        ((name, params),) = call.items()
        schema = schemas.get(name, {})
        required, known = set(schema.get("required", [])), set(schema.get("properties", {}))
        args = {}
        # no answer can pass the entry when a required parameter has no acceptable value or is missing from the
        # possible answer, or when the possible answer demands a parameter the schema does not list
        if required - set(params) or any(
            (k in required and not v) or (k not in known and "" not in v) for k, v in params.items()
        ):
            UNSATISFIABLE.add(name)
        for key, acceptable in params.items():
            values = [x for x in acceptable if x != ""]
            if key in required:
                args[key] = resolve(values[0]) if values else ""
            elif values and "" not in acceptable and key in known:
                args[key] = resolve(values[0])
        calls.append((name, args))
    return calls


def perturb(calls: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    name, args = calls[0]
    if args:
        key = next(iter(args))
        value = args[key]
        wrong = value + 12345 if isinstance(value, (int, float)) and not isinstance(value, bool) else "__perturbed__"
        return [(name, {**args, key: wrong}), *calls[1:]]
    return [(name + "_perturbed", args), *calls[1:]]


def signatures(involved_classes: list[str]) -> dict:
    """Method name -> signature of the simulated APIs of a multi-turn entry."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    out = {}
    for cls_name in involved_classes:
        module = importlib.import_module(CLASS_FILE_PATH_MAPPING[cls_name])
        for name, fn in inspect.getmembers(getattr(module, cls_name), inspect.isfunction):
            if not name.startswith("_"):
                out[name] = inspect.signature(fn)
    return out


def parse_call(text: str, sigs: dict) -> tuple[str, dict]:
    node = ast.parse(text, mode="eval").body
    name = ast.unparse(node.func)
    args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    if node.args:
        params = [p for p in sigs[name].parameters if p != "self"]
        args.update({params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)})
    return name, args


def result_for(category: str, entry: dict, truth: dict | None, perturbed: bool):
    if category.startswith("multi_turn"):
        sigs = signatures(entry["involved_classes"])
        turns = [[parse_call(c, sigs) for c in turn] for turn in truth["ground_truth"]]
        if perturbed:
            last = max(i for i, t in enumerate(turns) if t)
            turns[last] = []
        return [["\n".join(block(n, a) for n, a in turn)] if turn else ["I have nothing to call."] for turn in turns]
    if "irrelevance" in category:
        functions = entry["function"]
        return block(functions[0]["name"], {}) if perturbed else "None of the functions can answer this."
    if "relevance" in category:
        return "No call." if perturbed else block(entry["function"][0]["name"], {})
    calls = single_turn_calls(truth["ground_truth"], entry["function"])
    return "\n".join(block(n, a) for n, a in (perturb(calls) if perturbed else calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", required=True, help="comma-separated BFCL test categories")
    parser.add_argument("--model", default="Qwen/Qwen3-8B-FC")
    parser.add_argument("--perturbed", action="store_true")
    args = parser.parse_args()
    folder = Path(RESULT_PATH) / args.model.replace("/", "_")
    folder.mkdir(parents=True, exist_ok=True)
    unsatisfiable = {}
    for category in args.categories.split(","):
        entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
        relevance = "relevance" in category  # irrelevance / relevance entries ship no possible answers
        truths = [None] * len(entries) if relevance else load_ground_truth_entry(category)
        lines, unsatisfiable[category] = [], []
        for entry, truth in zip(entries, truths):
            UNSATISFIABLE.clear()
            result = result_for(category, entry, truth, args.perturbed)
            if UNSATISFIABLE:
                unsatisfiable[category].append(entry["id"])
            lines.append(json.dumps({"id": entry["id"], "result": result, "input_token_count": 0,
                                     "output_token_count": 0, "latency": 0.0}))  # fmt: skip
        (folder / f"BFCL_v4_{category}_result.json").write_text("\n".join(lines) + "\n")
        print(f"{category}: {len(lines)} {'perturbed' if args.perturbed else 'gold'} results, "
              f"{len(unsatisfiable[category])} unsatisfiable")  # fmt: skip
    # entries whose possible answers leave a required parameter without any acceptable value (data quirks)
    (Path(RESULT_PATH).parent / "unsatisfiable.json").write_text(json.dumps(unsatisfiable, indent=1) + "\n")


if __name__ == "__main__":
    main()
