"""The user simulator and the agent policy follow the task's VitaBench version; the hidden information follows the
proactive skill; the user never sees the agent's text from a tool-call message."""

import json

from conftest import STOP, judge_all
from vitabench2.backends import ScriptedBackend
from vitabench2.runner import V1_POLICY, RunConfig, Runner, read_records
from vitabench2.tasks import load_tasks
from vitabench2.user import UserSimulator


V1_TASK = {
    "id": "v1_task",
    "domain": "delivery",
    "environment": {"time": "2025-06-10 11:30:00", "user_id": "U_V1", "stores": {}},
    "user_scenario": {"user_profile": {"name": "Li"}},
    "instructions": "Order a spicy noodle soup to the office before noon; you hate coriander.",
    "evaluation_criteria": {"expected_states": [], "overall_rubrics": ["ordered soup"]},
}


def v2_task(skill_tested):
    return {
        "id": "v2_task",
        "user_id": "U_V2",
        "user_profile": {"name": "Wang"},
        "subtasks": [
            {
                "subtask_id": "v2_s1",
                "domain": "delivery",
                "instruction": "Get me lunch.",
                "environment": {"time": "2025-06-10 11:30:00", "user_id": "U_V2", "stores": {}},
                "evaluation_criteria": {"expected_states": [], "overall_rubrics": ["lunch"]},
                "skill_tested": skill_tested,
                "user_intention": "Deliver to Building 7, not home.",
            }
        ],
    }


def run(tmp_path, tasks: list[dict]):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    seen = {"user": [], "agent": []}

    def agent(messages, tools):
        seen["agent"].append(messages)
        if messages[-1]["role"] == "tool":
            return "Which noodles would you like?"
        if sum(m["role"] == "user" for m in messages) == 1:
            return 'SECRET-TOOL-TEXT <tool_call>{"name": "get_user_all_orders", "arguments": {}}</tool_call>'
        return f"Bye. {STOP}"

    def user(messages, tools):
        seen["user"].append(messages)
        return "I want noodles."

    config = RunConfig(output=str(tmp_path / "run"), tasks=str(path), memory_type="full_context")
    runner = Runner(config, ScriptedBackend(agent), ScriptedBackend(user), ScriptedBackend(judge_all()))
    runner.run()
    return read_records(runner.results_path), seen


def test_v1_task_gets_the_v1_user_prompt_and_policy(tmp_path):
    (record,), seen = run(tmp_path, [V1_TASK])
    user_system = seen["user"][0][0]["content"]
    assert "Every detail of <instructions> must come up" in user_system and V1_TASK["instructions"] in user_system
    assert "Never reveal your preferences" not in user_system and "Hidden information" not in user_system
    agent_system = record["messages"][0]["content"]
    assert agent_system == V1_POLICY.format(time="2025-06-10 11:30:00 (Tuesday)", stop=STOP)
    assert "User Preference Memory" not in agent_system


def test_v2_task_gets_the_v2_user_prompt_and_policy(tmp_path):
    (record,), seen = run(tmp_path, [v2_task(["proactive"])])
    user_system = seen["user"][0][0]["content"]
    assert "Never reveal your preferences" in user_system and "Every detail of <instructions>" not in user_system
    assert "Deliver to Building 7" in user_system  # proactive: the hidden information is there
    assert "## User Preference Memory" in record["messages"][0]["content"]
    assert record["messages"][2] == {"role": "user", "content": "Get me lunch."}


def test_hidden_information_follows_the_proactive_skill(tmp_path):
    task = load_tasks_from(tmp_path, v2_task(["personalization"]))
    sim = UserSimulator(ScriptedBackend(lambda m, t: "ok"), task.subtasks[0], persona="{}", user_id="U_V2")
    assert "Deliver to Building 7" not in sim.system_prompt and "Hidden information" not in sim.system_prompt
    task = load_tasks_from(tmp_path, v2_task(["proactive"]))
    sim = UserSimulator(ScriptedBackend(lambda m, t: "ok"), task.subtasks[0], persona="{}", user_id="U_V2")
    assert "Deliver to Building 7" in sim.system_prompt


def test_user_never_sees_text_of_tool_call_messages(tmp_path):
    _, seen = run(tmp_path, [v2_task([])])
    for messages in seen["user"]:
        assert "SECRET-TOOL-TEXT" not in json.dumps(messages)
    assert any("SECRET-TOOL-TEXT" in json.dumps(m) for m in seen["agent"])


def load_tasks_from(tmp_path, raw: dict):
    path = tmp_path / "one.json"
    path.write_text(json.dumps([raw]))
    (task,) = load_tasks(path)
    return task
