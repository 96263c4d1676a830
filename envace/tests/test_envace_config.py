"""Every YAML loads; the paper defaults are pinned; bad keys and values are rejected with a clear message."""

from importlib.resources import files

import pytest

from envace.cli import load, main
from envace.config import EnvACEConfig


def test_every_config_loads(monkeypatch):
    monkeypatch.setenv("ENVACE_DATA", "/data/envace")
    monkeypatch.setenv("ENVACE_JUDGE_URL", "http://judge:30000/v1")
    names = sorted(
        p.name.removesuffix(".yaml") for p in (files("envace") / "configs").iterdir() if p.name.endswith(".yaml")
    )
    assert {"smoke", "tooltasks_smollm2-135m_cpu", "checklist_qwen3-8b_paper"} <= set(names)
    for name in names:
        cfg = load(name, ["trainer.use_cpu=true", "trainer.bf16=false"])
        assert cfg["trainer"].num_iterations == 1


def test_paper_defaults():
    c = EnvACEConfig(output_dir="/tmp/x", use_cpu=True, bf16=False, judge="rule")
    assert c.learning_rate == 1e-6 and c.lr_scheduler_type == "constant" and c.weight_decay == 0.01
    assert c.beta == 0.0 and c.loss_type == "grpo" and c.epsilon == 0.2 and c.epsilon_high == 0.2 and c.delta == 3.0
    assert c.num_generations == 4 and c.max_completion_length == 8000 and c.temperature == 1.0 and c.top_p == 1.0
    assert c.entropy_coef == 0.0 and c.num_iterations == 1 and c.max_grad_norm == 1.0
    assert c.tool_return_mode == "agent" and c.model_sharing and c.chat_template_kwargs == {"enable_thinking": True}
    assert c.judge_temperature == 0.6 and c.judge_top_p == 0.8 and c.judge_max_tokens == 6000 and c.judge_retries == 5
    assert c.caller_mode == "train" and c.empty_output_penalty == 0.1
    assert c.num_rollouts == 470 and c.micro_batch_rows is None and c.max_steps == -1  # one epoch, derived sizes


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer.tool_return_mode=simulate"], "Unknown tool_return_mode"),
        (["trainer.judge=endpoint"], "judge_url"),
        (["trainer.tool_return_mode=external"], "external_simulator_url"),
        (["trainer.num_iterations=2"], "one optimizer step per rollout"),
        (["trainer.max_steps=3"], "set trainer.num_rollouts instead"),
        (["trainer.micro_batch_rows=2"], "sizes each rollout's forwards itself"),
        (["trainer.loss_type=bnpo"], "set loss_type=grpo or dapo"),
        (["trainer.caller_mode=frozen"], "set model_sharing=false"),
        (["trainer.caller_mode=bogus"], "Unknown caller_mode"),
        (["trainer.judge=endpoint", "trainer.judge_url=http://127.0.0.1:9/v1"], "gives no verdict"),
        (["trainer.no_such_key=1"], "Valid EnvACEConfig keys"),
        (["env.source=web"], "Unknown env.source"),
    ],
)
def test_bad_values_exit_with_one_line(overrides, message, capsys):
    with pytest.raises(SystemExit, match=message):
        main(["train", "--config", "smoke", *overrides])


def test_missing_official_data_names_the_fix(tmp_path):
    with pytest.raises(SystemExit, match="not public"):
        main(["eval", "--config", "smoke", "env.source=file", f"env.eval_path={tmp_path / 'val.parquet'}",
              f"trainer.output_dir={tmp_path}"])  # fmt: skip


def test_fields_file_is_current():
    """`configs/fields.json` (the field types `envace train` checks before torch loads) matches the config classes."""
    from agentrl_shared.schema import stale

    assert (why := stale("envace")) is None, why
