"""Loaders: the packaged sample, generated official-format files (2.0 and 1.0), validation errors, real files."""

import json

import pytest

from vitabench2.tasks import load_tasks, normalize_domain, sample_tasks_path, select


def _v2_task(**over):
    sub = {
        "subtask_id": "s1",
        "domain": "delivery",
        "instruction": "order food",
        "environment": {"time": "2025-01-01 12:00:00"},
        "evaluation_criteria": {
            "expected_states": [{"required_orders": [], "state_rubrics": ["a", "b"]}],
            "overall_rubrics": ["b", "c"],
        },
        "interactions": [{"type": "order", "timestamp": "t", "content": "x"}],
        "skill_tested": ["proactive"],
        "user_intention": "at noon",
        "user_scenario": {"user_profile": {}, "personalized_preference_memory": {"current": {"food": ["spicy"]}}},
    }
    sub.update(over)
    return {"id": "task1", "user_id": "U1", "user_profile": {"name": "x"}, "subtasks": [sub]}


def test_sample_loads():
    tasks = load_tasks(sample_tasks_path())
    assert [t.user_id for t in tasks] == ["U_SAMPLE_01", "U_SAMPLE_02"]
    assert {d for t in tasks for s in t.subtasks for d in s.domains} == {"delivery", "instore", "ota"}
    assert any(s.is_proactive for t in tasks for s in t.subtasks)


def test_generated_v2_file(tmp_path):
    (tmp_path / "personalization").mkdir()
    (tmp_path / "personalization" / "tasks_en.json").write_text(json.dumps([_v2_task()]))
    (tmp_path / "personalization" / "tasks.json").write_text(json.dumps([_v2_task(), _v2_task()]))
    en = load_tasks(tmp_path, "english")
    zh = load_tasks(tmp_path, "chinese")
    assert len(en) == 1 and len(zh) == 2
    st = en[0].subtasks[0]
    assert st.evaluation_criteria.rubrics() == ["a", "b", "c"]  # de-duplicated union
    assert st.is_proactive and st.user_intention == "at noon"


def test_generated_v1_file_and_domain_aliases(tmp_path):
    raw = {
        "id": "10001",
        "domain": "in-store consumption",
        "environment": {"user_id": "U9", "time": "2025-01-01 10:00:00"},
        "user_scenario": {"user_profile": {"user id": "U9"}},
        "instructions": "You want a massage",
        "evaluation_criteria": {"expected_states": [], "overall_rubrics": ["r"]},
        "message_history": [],
    }
    path = tmp_path / "tasks_en.json"
    path.write_text(json.dumps([raw]))
    (task,) = load_tasks(path)
    assert task.source == "vitabench1" and task.user_id == "U9"
    assert task.subtasks[0].domain == "instore" and task.subtasks[0].instruction == ""
    assert task.subtasks[0].user_intention == "You want a massage"
    assert normalize_domain("delivery,in-store,ota") == "delivery,instore,ota"


def test_validation_error_names_task_and_field(tmp_path):
    bad = _v2_task()
    del bad["subtasks"][0]["evaluation_criteria"]
    path = tmp_path / "tasks_en.json"
    path.write_text(json.dumps([bad]))
    with pytest.raises(ValueError, match=r"task1.*subtasks\.0\.evaluation_criteria"):
        load_tasks(path)
    path.write_text(json.dumps([_v2_task(domain="pizza")]))
    with pytest.raises(ValueError, match=r"task1.*subtasks\.0\.domain.*pizza"):
        load_tasks(path)
    path.write_text(json.dumps([{"id": "odd"}]))
    with pytest.raises(ValueError, match="odd.*neither"):
        load_tasks(path)


def test_select_subsets():
    tasks = load_tasks(sample_tasks_path())
    assert [t.user_id for t in select(tasks, user_ids=["U_SAMPLE_02"])] == ["U_SAMPLE_02"]
    sub = select(tasks, subtask_ids=["U_SAMPLE_01_T3", "U_SAMPLE_01_T1"])
    assert [s.subtask_id for s in sub[0].subtasks] == ["U_SAMPLE_01_T1", "U_SAMPLE_01_T3"]  # temporal order kept
    with pytest.raises(ValueError, match="Unknown user ids"):
        select(tasks, user_ids=["nobody"])


@pytest.mark.realdata
def test_vitabench_real_files_load(vitabench_root):
    for language in ("english", "chinese"):
        files = sorted(vitabench_root.rglob("tasks_en.json" if language == "english" else "tasks.json"))
        for f in files:
            raw = json.loads(f.read_text())
            tasks = load_tasks(f, language)
            assert len(tasks) == len(raw) > 0
            for t in tasks:
                assert t.subtasks and t.subtasks[0].evaluation_criteria.rubrics(), t.id
                assert set(t.subtasks[0].domains) <= {"delivery", "instore", "ota"}
                assert t.subtasks[0].user_intention


@pytest.mark.realdata
def test_vitabench_real_languages_share_ids(vitabench_root):
    for zh in vitabench_root.rglob("tasks.json"):
        en = zh.with_name("tasks_en.json")
        if en.exists():
            assert {t.id for t in load_tasks(zh, "chinese")} == {t.id for t in load_tasks(en, "english")}
