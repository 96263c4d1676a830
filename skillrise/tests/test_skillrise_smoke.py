"""The CLI trains two rollouts (one optimizer step each) on CPU with a tiny model, plain and under DeepSpeed ZeRO-3;
every parameter moves.

The tiny random Qwen3 emits malformed text (invalid actions and curate answers without `<skill>`, penalised, the old
document kept), so these runs also show that malformed output never stops training.
"""

import json
from importlib.resources import files

import pytest

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import changed_parameters, zero3_single_process
from skillrise.cli import main


def test_cli_trains_two_steps_and_moves_every_parameter(tmp_path):
    out = tmp_path / "run"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}"])
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 2 and results["rollouts"] == 2
    logs = [h for h in results["log_history"] if "loss" in h]
    assert len(logs) == 2
    for key in ("skillrise/success_pos0", "skillrise/success_pos1", "skillrise/curate_parse_ratio",
                "skillrise/generated_tokens", "env/invalid_action_ratio", "rollout/rows"):  # fmt: skip
        assert key in logs[0], key
    assert "kl" not in logs[0]  # beta = 0: no KL term (official use_kl_loss=False)
    final = results["final"]
    assert set(final) == {"repeat", "cross"} and "pass@2" in final["repeat"] and "success_pos1" in final["cross"]
    # the results file names the trials of the last validation: mode and task ids per group, with its seed
    assert {name.split(":")[0] for name, _ in results["panel"]} == {"repeat", "cross"}
    assert {seed for _, seed in results["panel"]} == set(results["eval_seeds"])
    # every validation's trial records, tagged with the rollouts done and the mode: the last ones are the panel's
    records = [json.loads(line) for line in (out / "eval_trials.jsonl").read_text().splitlines()]
    last = [r for r in records if r["rollouts"] == 2]
    assert sorted((f"{r['mode']}:{','.join(r['task_ids'])}", r["seed"]) for r in last) == sorted(
        (name, seed) for name, seed in results["panel"]
    )
    n, same = changed_parameters(tiny_qwen3(), out / "final")
    assert n > 0 and same == [], f"unchanged parameters: {same}"


def test_cli_trains_the_gigpo_baseline_and_logs_its_step_groups(tmp_path):
    out = tmp_path / "gigpo"
    main(["train", "--config", "smoke", "--method", "gigpo", f"trainer.output_dir={out}", "trainer.num_rollouts=1"])
    results = json.loads((out / "results.json").read_text())
    log = next(h for h in results["log_history"] if "loss" in h)
    assert log["gigpo/step_group_size_mean"] >= 1.0 and 0.0 <= log["gigpo/step_grouped_row_ratio"] <= 1.0
    assert results["config"]["trainer"]["advantage_mode"] == "gigpo"


def test_cli_rejects_bad_values_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="carry_mode"):
        main(["train", "--config", "smoke", "trainer.carry_mode=memory", f"trainer.output_dir={tmp_path}"])
    with pytest.raises(SystemExit, match="Unknown"):
        main(["train", "--config", "smoke", "trainer.no_such_key=1"])


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
