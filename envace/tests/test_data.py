"""Official checklist format loader (realdata: CM2's checklist_annotated.json) and the generated tool tasks."""

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envace.data import DataError, ToolWorld, generate_tasks, load_checklist_file, normalize_record, world_for
from envace.reward import RuleJudge, score_turn


DATA = Path(os.environ.get("AGENTRL_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))
CM2 = DATA / "cm2_checklist"


@pytest.mark.realdata
def test_cm2_checklist_file_loads_in_the_official_shape():
    files = sorted(CM2.glob("*.json")) if CM2.exists() else []
    if not files:
        pytest.skip(f"no CM2 checklist files under {CM2}")
    for path in files:
        tasks = load_checklist_file(path)
        assert tasks
        for task in tasks:
            assert len(task["checklists"]) == 1  # max_num_checklist = 1
            assert len(task["checklists"][0]) == len(task["user_turns"]) >= 1
            for turn in task["checklists"][0]:
                for item in turn:
                    assert {"id", "question", "focus_on", "pass_condition", "weight"} <= item.keys()
            names = {t["function"]["name"] for t in task["tools"]}
            assert set(task["tool_call_response_map"]) <= names
            n_calls = sum(
                len(m.get("tool_calls") or []) for m in task["reference_messages"] if m["role"] == "assistant"
            )
            n_tools = sum(m["role"] == "tool" for m in task["reference_messages"])
            assert sum(len(v) for v in task["tool_call_response_map"].values()) == min(n_calls, n_tools)


def to_verl_row(item: dict) -> dict:
    """A CM2 `checklist_annotated.json` item in the layout of the paper's `…_forverl_train.parquet`: what CM2's
    `pipeline/5_rl_training/convert_checklist_for_verl.py`@2758991 does, written here independently. The whole
    conversation moves to `extra_info.messages` and the top-level `messages` keeps everything up to the first user
    message; the tools, in OpenAI function form (a bare {name, description, parameters} is wrapped), become the JSON
    string `extra_info.tools` and leave the top level; the checklists are copied to
    `extra_info.interaction_kwargs.checklist_list` (the top-level `checklists` stays: the converter deletes a
    `checklist` key, which CM2 files do not have); `extra_info.original_index` is the uuid."""
    messages = item["messages"]
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    wrapped = [
        t if t.get("type") == "function" and "function" in t
        else {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                               "parameters": t.get("parameters", {})}}
        for t in item["tools"]
    ]  # fmt: skip
    row = {k: v for k, v in item.items() if k != "tools"}
    row["messages"] = messages[: first_user + 1]
    row["extra_info"] = {
        "messages": messages,
        "tools": json.dumps(wrapped),
        "interaction_kwargs": {"name": "checklist", "checklist_list": item["checklists"]},
        "need_tools_kwargs": True,
        "original_index": item["uuid"],
    }
    row["data_source"] = "nvidia_nemotron_checklist"  # convert_checklist_to_parquet.py's default
    return row


def three_turn_item() -> dict:
    """A CM2-style conversation: three user turns, a tool call (JSON-string arguments) in the first two, a checklist
    per turn; one tool in the bare {name, description, parameters} form the converter wraps."""

    def call(i, city):
        return {"id": f"c{i}", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}  # fmt: skip

    def item(i, w):
        return {"id": f"C{i}", "question": f"q{i}?", "focus_on": "assistant.content", "pass_condition": "p",
                "failure_examples": [], "evidence": [], "required_for_next_turn": False, "dependence": [], "weight": w}  # fmt: skip

    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "<think>x</think>", "tool_calls": [call(0, "Oslo")]},
        {"role": "tool", "content": '{"temp": 3}'},
        {"role": "assistant", "content": "3 degrees."},
        {"role": "user", "content": "And in Lima?"},
        {"role": "assistant", "content": "", "tool_calls": [call(1, "Lima")]},
        {"role": "tool", "content": '{"temp": 19}'},
        {"role": "assistant", "content": "19 degrees."},
        {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "content": "You are welcome."},
    ]
    tools = [{"name": "get_weather", "description": "Current weather of a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]  # fmt: skip
    checklists = [[[item(0, 0.5), item(1, 0.5)], [item(2, 1.0)], [item(3, 1.0)]]]
    return {"uuid": "u-3turns", "messages": messages, "tools": tools, "checklists": checklists}


def write_parquet(rows: list[dict], path: Path) -> Path:
    """As CM2's `convert_checklist_to_parquet.py` writes them (HF `datasets`, nested fields as Arrow structs)."""
    import datasets

    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def test_a_converted_three_turn_record_loads_from_the_verl_parquet_layout(tmp_path):
    item = three_turn_item()
    row = to_verl_row(item)
    assert [m["role"] for m in row["messages"]] == ["system", "user"]  # the top level is trimmed
    path = write_parquet([row], tmp_path / "checklist_forverl_train.parquet")
    (task,) = load_checklist_file(path)
    assert task["task_id"] == "u-3turns"
    assert task["user_turns"] == ["Weather in Oslo?", "And in Lima?", "Thanks!"]  # extra_info.messages, not trimmed
    assert [len(turn) for turn in task["checklists"][0]] == [2, 1, 1]  # extra_info.interaction_kwargs.checklist_list
    assert task["system"] == "You are helpful."
    (tool,) = task["tools"]
    assert tool["function"]["description"] == "Current weather of a city."  # from extra_info.tools, with description
    assert task["tool_call_response_map"] == {"get_weather": [[{"city": "Oslo"}, {"temp": 3}],
                                                              [{"city": "Lima"}, {"temp": 19}]]}  # fmt: skip
    # the same record as JSON (the `_forverl.json` the official MCPChecklistTool reads) and its CM2 original
    (tmp_path / "forverl.json").write_text(json.dumps([row]))
    (tmp_path / "cm2.json").write_text(json.dumps([item]))
    assert load_checklist_file(tmp_path / "forverl.json") == [task]
    assert load_checklist_file(tmp_path / "cm2.json") == [task]


@pytest.mark.parametrize(
    "break_it, field",
    [
        (lambda r: r["extra_info"]["interaction_kwargs"].pop("checklist_list") and r.pop("checklists"),
         "extra_info.interaction_kwargs.checklist_list"),
        (lambda r: r["extra_info"]["interaction_kwargs"].update(checklist_list=[[[], []]]),
         "extra_info.interaction_kwargs.checklist_list has 2 turns but extra_info.messages has 3 user turns"),
        (lambda r: r["extra_info"].update(tools="[]"), "extra_info.tools must be"),
        (lambda r: r["extra_info"]["messages"].__setitem__(1, "hi"), "extra_info.messages must be"),
        (lambda r: r["extra_info"]["interaction_kwargs"]["checklist_list"][0][0][0].pop("weight"),
         "extra_info.interaction_kwargs.checklist_list has an item without a numeric weight"),
    ],
)  # fmt: skip
def test_a_broken_verl_record_is_a_one_line_error_naming_the_field(tmp_path, break_it, field):
    row = to_verl_row(three_turn_item())
    break_it(row)
    with pytest.raises(DataError) as err:
        normalize_record(row)
    assert field in str(err.value) and "\n" not in str(err.value) and "u-3turns" in str(err.value)


@pytest.mark.realdata
def test_cm2_sample_converted_to_the_verl_parquet_layout_loads_like_the_original(tmp_path):
    files = sorted(CM2.glob("*.json")) if CM2.exists() else []
    if not files:
        pytest.skip(f"no CM2 checklist files under {CM2}")
    items = json.loads(files[0].read_text())
    path = write_parquet([to_verl_row(i) for i in items], tmp_path / "cm2_forverl_train.parquet")
    converted, original = load_checklist_file(path), load_checklist_file(files[0])
    assert [len(t["user_turns"]) for t in converted] == [len(t["user_turns"]) for t in original] == [3]
    for a, b in zip(converted, original, strict=True):
        assert a["checklists"] == b["checklists"] and a["tool_call_response_map"] == b["tool_call_response_map"]
        assert a["tools"] == b["tools"] and a["task_id"] == b["task_id"]


def test_parquet_and_jsonl_rows_with_official_keys(tmp_path):
    record = {
        "uuid": "u1",
        "extra_info": json.dumps({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
        "all_messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        "checklist_list": json.dumps(
            [
                [
                    [
                        {
                            "id": "C0",
                            "question": "?",
                            "focus_on": "assistant.content",
                            "pass_condition": "",
                            "weight": 1.0,
                        }
                    ]
                ],
                [[]],
            ]
        ),
        "tool_call_response_map": json.dumps({"f": [[{"x": 1}, {"y": 2}]]}),
    }
    pq.write_table(pa.Table.from_pylist([record]), tmp_path / "train.parquet")
    (tmp_path / "train.jsonl").write_text(json.dumps(record) + "\n")
    for name in ("train.parquet", "train.jsonl"):
        (task,) = load_checklist_file(tmp_path / name)
        assert task["task_id"] == "u1" and task["tool_call_response_map"] == {"f": [[{"x": 1}, {"y": 2}]]}
        assert len(task["checklists"]) == 1  # the second checklist is dropped (max_num_checklist=1)


def test_bad_files_and_records_give_clear_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_checklist_file(tmp_path / "missing.json")
    with pytest.raises(
        DataError, match="no extra_info.interaction_kwargs.checklist_list / checklist_list / checklists"
    ):
        normalize_record({"uuid": "x", "tools": [{"name": "f"}], "messages": [{"role": "user", "content": "q"}]})
    bad = {
        "uuid": "x",
        "tools": [{"name": "f"}],
        "messages": [{"role": "user", "content": "q"}],
        "checklists": [[[], []]],
    }
    with pytest.raises(DataError, match="one checklist turn per user turn"):
        normalize_record(bad)
    with pytest.raises(DataError, match="no tool back end"):
        world_for(normalize_record({**bad, "checklists": [[[]]]}))


def test_generated_tasks_are_deterministic_and_their_ground_truth_is_real():
    a, b = generate_tasks(12, seed=5), generate_tasks(12, seed=5)
    assert a == b and generate_tasks(12, seed=6) != a
    for task in a:
        world = world_for(task)
        for name, pairs in task["tool_call_response_map"].items():
            for args, response in pairs:
                assert world.execute(name, args) == response and "found" not in response
        weights = [sum(i["weight"] for i in turn) for turn in task["checklists"][0]]
        assert weights == pytest.approx([1.0] * len(task["user_turns"]))
        offered = {t["function"]["name"] for t in task["tools"]}
        assert set(task["tool_call_response_map"]) < offered  # a distractor tool is offered too
        for t in range(len(task["user_turns"])):
            turn = task["reference_messages"][4 * t : 4 * t + 4]
            assert score_turn(RuleJudge(), task, t, [], turn).score == pytest.approx(1.0)


def test_tool_world_validates_like_the_rehearsal_contract():
    world = ToolWorld(0)
    assert world.execute("nope", {})["error_tool_call"]["code"] == "TOOL_NOT_AVAILABLE"
    assert (
        world.execute("get_weather", {"city": "Oslo"}, whitelist=["get_stock_price"])["error_tool_call"]["code"]
        == "TOOL_NOT_AVAILABLE"
    )
    assert world.execute("get_weather", {})["error_tool_call"]["code"] == "INVALID_PARAMETERS"
    assert world.execute("get_weather", {"city": 3})["error_tool_call"]["code"] == "INVALID_PARAMETERS"
    assert world.execute("convert_currency", {"amount": "5", "from_currency": "USD", "to_currency": "EUR"})[
        "error_tool_call"
    ]
    assert world.execute("get_weather", {"city": "Atlantis"})["found"] is False  # a real answer, not an error
    r = world.execute("convert_currency", {"amount": 10, "from_currency": "USD", "to_currency": "USD"})
    assert r["converted"] == 10.0 and r["rate"] == 1.0


def test_tasks_whose_first_prompt_is_over_the_cap_are_dropped():
    """Official `filter_overlong_prompts`: the first prompt (system, first user message, tools, generation prompt)
    must fit in data.max_prompt_length - 500 = 3500 tokens."""
    from transformers import AutoTokenizer

    from agentrl_shared.models import tiny_qwen3
    from envace.data import filter_long_prompts

    tok = AutoTokenizer.from_pretrained(tiny_qwen3())
    short, long = generate_tasks(2, seed=4)
    long = {**long, "user_turns": ["weather " * 4000, *long["user_turns"][1:]]}
    kept, dropped = filter_long_prompts([short, long], tok, 3500, {"enable_thinking": True})
    assert kept == [short] and dropped == 1
    assert filter_long_prompts([short, long], tok, 0) == ([short, long], 0)  # the switch off
