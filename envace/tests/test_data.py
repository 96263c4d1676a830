"""Official checklist format loader (realdata: CM2's checklist_annotated.json) and the generated tool tasks."""

import json
import os
from pathlib import Path

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
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([record]), tmp_path / "train.parquet")
    (tmp_path / "train.jsonl").write_text(json.dumps(record) + "\n")
    for name in ("train.parquet", "train.jsonl"):
        (task,) = load_checklist_file(tmp_path / name)
        assert task["task_id"] == "u1" and task["tool_call_response_map"] == {"f": [[{"x": 1}, {"y": 2}]]}
        assert len(task["checklists"]) == 1  # the second checklist is dropped (max_num_checklist=1)


def test_bad_files_and_records_give_clear_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_checklist_file(tmp_path / "missing.json")
    with pytest.raises(DataError, match="lacks checklists"):
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
