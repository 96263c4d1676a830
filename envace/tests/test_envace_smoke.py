"""The CLI trains two optimizer steps on CPU with a tiny model, plain and under DeepSpeed ZeRO-3; every parameter moves.

Generation is scripted (`scripted.ScriptedPolicy` in place of the shared trainer's generate, as TRL's own tests
patch `generate`): a random tiny model never emits a tool call, so every reward would be 0 and no gradient would
flow. Half of the scripted answers are garbage so that rewards vary within groups. Everything else is the real
trainer: the two-role rollout, the rule judge, role-wise advantages, TRL's loss and optimizer.
"""

import json
from importlib.resources import files

import pytest
from scripted import ScriptedPolicy

import agentrl_shared.trainer
from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import changed_parameters, zero3_single_process
from envace.cli import main
from envace.data import generate_tasks


@pytest.fixture
def scripted_generation(monkeypatch):
    policies = []

    def fake(trainer):
        tasks = generate_tasks(8, seed=0) + generate_tasks(4, seed=1_000_000)  # smoke.yaml: train and eval tasks
        policies.append(ScriptedPolicy(trainer.processing_class, tasks, garbage=0.5, seed=len(policies)))
        return policies[-1]

    monkeypatch.setattr(agentrl_shared.trainer, "trainer_generate_fn", fake)
    return policies


def test_cli_trains_two_steps_and_moves_every_parameter(tmp_path, scripted_generation):
    out = tmp_path / "run"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}"])
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2 and results["rollouts"] == 2
    logs = [h for h in results["log_history"] if "loss" in h]
    assert len(logs) == 2
    for key in ("envace/reward_mean", "envace/simulator_rows", "envace/caller_rows", "envace/stop/done"):
        assert key in logs[0], key
    assert sum(h["envace/simulator_rows"] for h in logs) > 0  # the rehearsal role was trained too
    assert 0.0 <= results["final"]["reward_mean"] <= 1.0
    assert results["panel"] and {seed for _, seed in results["panel"]} == set(results["eval_seeds"])
    # every panel evaluation's per-task records, tagged with the rollouts done: the last ones are the panel's
    records = [json.loads(line) for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert sorted((r["task_id"], r["seed"]) for r in records if r["rollouts"] == 2) == sorted(
        (task_id, seed) for task_id, seed in results["panel"]
    )
    assert sum(p.calls["simulator"] for p in scripted_generation) > 0
    n, same = changed_parameters(tiny_qwen3(), out / "final")
    assert n > 0 and same == [], f"unchanged parameters: {same}"


@pytest.fixture
def zero3_env():
    with zero3_single_process():
        yield


@pytest.mark.slow  # not yet timed on an idle machine (README, deviation 8)
def test_cli_trains_under_deepspeed_zero3(tmp_path, zero3_env, scripted_generation):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", f"trainer.deepspeed={ds}"])
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2
    n, same = changed_parameters(tiny_qwen3(), out / "final")
    assert n > 0 and same == [], f"unchanged parameters: {same}"
