"""The CLI trains two optimizer steps on CPU with a tiny model, plain and under DeepSpeed ZeRO-3; every parameter moves
and the belief statistics are logged.

The tiny random Qwen3 emits malformed text on every turn (invalid actions, penalised, still stepped), so these runs
also show that malformed output never stops training.
"""

import json
import socket
from importlib.resources import files

import pytest
import torch
from safetensors.torch import load_file

from agentopsd.cli import main
from agentrl_shared.models import tiny_qwen3


def changed_parameters(out_dir) -> tuple[int, list[str]]:
    # read the safetensors directly: under a live ZeRO-3 config `from_pretrained` would partition the weights
    before = load_file(tiny_qwen3() / "model.safetensors")
    after = load_file(out_dir / "final" / "model.safetensors")
    assert before.keys() == after.keys()
    same = [k for k in before if torch.equal(before[k], after[k])]
    return len(before), same


def test_cli_trains_two_steps_and_moves_every_parameter(tmp_path):
    out = tmp_path / "run"
    # the final evaluation plays 4 tasks x 2 seeds in one pass, a larger batch than a rollout's 4 episodes
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", "env.eval_seeds=[0, 1]", "env.eval_batch_size=8"])
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2 and results["rollouts"] == 2
    assert results["final"]["num_episodes"] == 8 and results["final"]["failed_episodes"] == 0
    logs = [h for h in results["log_history"] if "loss" in h]
    assert len(logs) == 2
    for key in ("agentopsd/v0_mean", "agentopsd/teacher_student_gap_mean", "agentopsd/lambda",
                "agentopsd/mean_turns_per_episode", "env/success_rate", "env/invalid_action_ratio", "kl"):  # fmt: skip
        assert key in logs[0], key
    for h in logs:  # the multiplier A_hat / A stays in [1 - lam * band, 1 + lam * band] = [0.9, 1.1]
        if "agentopsd/multiplier_min" in h:
            assert 0.9 - 1e-5 <= h["agentopsd/multiplier_min"] <= h["agentopsd/multiplier_max"] <= 1.1 + 1e-5
    n, same = changed_parameters(out)
    assert n > 0 and same == [], f"unchanged parameters: {same}"


def test_chain_tasks_log_the_credit_accuracy(tmp_path):
    """On TextRooms chains (the environment labels each failed episode's first wrong step) the belief's most blamed
    turn is scored against it, with the run's prior and a 0.5 prior, beside a uniformly drawn turn's rate."""
    out = tmp_path / "run"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", "trainer.num_rollouts=1", "env.max_turns=4",
          "env.task_kwargs={num_tasks: 16, num_rooms: 3, task_types: [chain]}", "env.history_length=0"])  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    logged = next(h for h in results["log_history"] if "agentopsd/credit_accuracy" in h)
    assert logged["agentopsd/credit_episodes"] >= 1
    for key in ("agentopsd/credit_accuracy", "agentopsd/credit_accuracy_prior_0.5"):
        assert 0.0 <= logged[key] <= 1.0
    assert 0.25 <= logged["agentopsd/credit_chance"] <= 0.5  # 1 / turns of failed episodes of 2-4 turns


@pytest.mark.slow  # two more CPU trainings; the default suite keeps the method's turn and token paths and ZeRO-3
@pytest.mark.parametrize("method", ["rlsd", "skill_sd", "gigpo"])
def test_cli_trains_the_baselines(tmp_path, method):
    out = tmp_path / method
    # token granularity through RLSD; Skill-SD adds its loss term (one step is enough to see it logged); GiGPO's
    # advantages go through the same loss as GRPO's, and it logs its step groups
    main(["train", "--config", "smoke", "--method", method, f"trainer.output_dir={out}", "trainer.num_rollouts=1"])
    results = json.loads((out / "results.json").read_text())
    logs = [h for h in results["log_history"] if "loss" in h]
    logged = {"rlsd": "rlsd/lambda", "skill_sd": "skillsd/loss", "gigpo": "gigpo/step_group_size_mean"}
    assert logged[method] in logs[0]
    assert results["config"]["trainer"]["advantage_mode"] == ("gigpo" if method == "gigpo" else "grpo")


def test_cli_token_granularity(tmp_path):
    out = tmp_path / "token"
    main(
        [
            "train",
            "--config",
            "smoke",
            "trainer.granularity=token",
            f"trainer.output_dir={out}",
            "trainer.num_rollouts=1",
        ]
    )
    logs = [h for h in json.loads((out / "results.json").read_text())["log_history"] if "loss" in h]
    # the token path ran (V_0 and gap logged; no per-episode turn count); the tiny random model never wins, so every
    # advantage is 0 here and there is no multiplier to log
    assert "agentopsd/v0_mean" in logs[0] and "agentopsd/teacher_student_gap_mean" in logs[0]
    assert "agentopsd/mean_turns_per_episode" not in logs[0]


@pytest.fixture
def zero3_env(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "ACCELERATE_USE_DEEPSPEED": "true"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)


def test_cli_trains_under_deepspeed_zero3(tmp_path, zero3_env):
    # with the CPU config's `student_logps=generation`: the log-probs are recorded from the module DeepSpeed wraps
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", f"trainer.deepspeed={ds}",
          "trainer.student_logps=generation"])  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2
    assert any("agentopsd/multiplier_mean" in h or "agentopsd/v0_mean" in h for h in results["log_history"])
    assert not any("time/old_logps_s" in h for h in results["log_history"])
    n, same = changed_parameters(out)
    assert n > 0 and same == [], f"unchanged parameters: {same}"


SAME_STEP = ("loss", "grad_norm", "agentopsd/teacher_student_gap_mean", "agentopsd/v0_mean", "entropy")


def first_step(tmp_path, override: str) -> dict:
    """The logged first optimizer step of a one-rollout smoke run with `override`."""
    out = tmp_path / override.replace("=", "_")
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", "trainer.num_rollouts=1", override])
    return [h for h in json.loads((out / "results.json").read_text())["log_history"] if "loss" in h][0]


def test_shared_prefix_policy_trains_as_the_plain_forwards(tmp_path):
    # `shared_prefix_policy` (on in the smoke and CPU configs) runs the student's gap forward and the loss forward
    # with the shared prompt prefix once; the same rollout then gives the same gap, loss and gradient to float rounding
    # (not the same weights: AdamW's first step moves every weight by about lr whatever its gradient's size, so a
    # gradient of ~0 that rounds to the other sign moves it the other way)
    shared, plain = (first_step(tmp_path, f"trainer.shared_prefix_policy={s}") for s in ("true", "false"))
    for key in SAME_STEP:
        assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key


def test_log_prob_chunks_train_as_the_micro_batch_forwards(tmp_path):
    # `log_prob_micro_batch_rows` (verl `log_prob_micro_batch_size_per_gpu`; 16 in the CPU config) runs the teacher
    # and the rollout-time student forwards over chunks that cut across the loss micro-batches; the same rollout then
    # gives the same gap, belief prior, loss and gradient to float rounding
    runs = {rows: first_step(tmp_path, f"trainer.log_prob_micro_batch_rows={rows}") for rows in ("null", "3", "16")}
    for rows in ("3", "16"):
        for key in SAME_STEP:
            assert runs[rows][key] == pytest.approx(runs["null"][key], rel=1e-4, abs=1e-6), (rows, key)


def test_generation_student_logps_train_as_the_recomputed_forward(tmp_path):
    # `student_logps=generation` (the CPU config) reads l^S from the logits HF generation sampled with instead of a
    # forward of every row; the same rollout then gives the same gap, belief prior, loss and gradient to float rounding
    recompute, generation = (first_step(tmp_path, f"trainer.student_logps={s}") for s in ("recompute", "generation"))
    assert "time/old_logps_s" in recompute and "time/old_logps_s" not in generation
    for key in (*SAME_STEP, "agentopsd/teacher_student_gap_std"):
        assert generation[key] == pytest.approx(recompute[key], rel=1e-4, abs=1e-6), key
