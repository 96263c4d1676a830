"""The CLI trains two optimizer steps on CPU with a tiny model, plain and under DeepSpeed ZeRO-3; every parameter moves.

The tiny random Qwen3 emits malformed text on every turn (invalid actions, penalised, still stepped), so these runs
also show that malformed output never stops training.
"""

import json
from importlib.resources import files

import pytest

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import changed_parameters, zero3_single_process
from sdar.cli import main


def test_cli_trains_two_steps_and_moves_every_parameter(tmp_path):
    out = tmp_path / "run"
    # the final evaluation plays 4 tasks x 2 seeds in one pass, a larger batch than a rollout's 4 episodes
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", "env.eval_seeds=[0, 1]", "env.eval_batch_size=8"])
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2 and results["rollouts"] == 2
    assert results["final"]["num_episodes"] == 8 and results["final"]["failed_episodes"] == 0
    # the results file names its panel instances, those the final evaluation played
    played = [json.loads(line) for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert sorted(map(tuple, results["panel"])) == sorted((e["task_id"], e["seed"]) for e in played)
    assert len(results["panel"]) == 8 and len(results["panel_identity"]) == 16
    logs = [h for h in results["log_history"] if "loss" in h]
    assert len(logs) == 2
    for key in ("sdar/gate_mean", "sdar/teacher_gap_mean", "env/success_rate", "env/invalid_action_ratio", "kl",
                "sdar/update_share", "sdar/update_share_all_fail", "sdar/all_fail_token_ratio",
                "env/all_fail_group_ratio"):  # fmt: skip
        assert key in logs[0], key
    # the tiny random model loses every episode: every group fails whole, so all of SDAR's update is on them
    assert logs[0]["env/all_fail_group_ratio"] == 1.0 and logs[0]["sdar/all_fail_token_ratio"] == 1.0
    assert 0 < logs[0]["sdar/update_share_all_fail"] == pytest.approx(logs[0]["sdar/update_share"])
    n, same = changed_parameters(tiny_qwen3(), out / "final")
    assert n > 0 and same == [], f"unchanged parameters: {same}"


@pytest.fixture
def zero3_env():
    with zero3_single_process():
        yield


def test_cli_trains_under_deepspeed_zero3(tmp_path, zero3_env):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", f"trainer.deepspeed={ds}"])
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2
    n, same = changed_parameters(tiny_qwen3(), out / "final")
    assert n > 0 and same == [], f"unchanged parameters: {same}"
