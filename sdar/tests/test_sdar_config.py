"""Every shipped YAML loads; paper defaults are pinned one by one; unknown keys are rejected with the valid names."""

from importlib.resources import files

import pytest

from agentrl_shared.config import ConfigError
from sdar.cli import load
from sdar.config import EnvConfig, SDARConfig


@pytest.fixture(autouse=True)
def data_locations(monkeypatch, tmp_path):
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA", "SEARCH_QA_DATA"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))


CONFIGS = sorted(
    p.name.removesuffix(".yaml") for p in (files("sdar") / "configs").iterdir() if p.name.endswith(".yaml")
)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_loads(name):
    # paper configs ask for bf16 on GPUs; `use_cpu` lets GRPOConfig validate them on this CPU-only machine
    cfg = load(name, ["trainer.use_cpu=true"] if name.endswith("_paper") else [])
    assert isinstance(cfg["trainer"], SDARConfig) and isinstance(cfg["env"], EnvConfig)
    # the row budget must hold every group on one rank
    t = cfg["trainer"]
    assert (t.per_device_train_batch_size * t.steps_per_generation) % t.num_generations == 0


def test_paper_defaults_pinned():
    args = SDARConfig(output_dir="/tmp/x", use_cpu=True)
    assert args.sdar_coef == 0.01  # every official script
    assert args.gate_beta == 5.0
    assert args.pg_loss_coef == 1.0
    assert args.invalid_action_penalty_coef == 0.1
    assert args.learning_rate == 1e-6
    assert args.lr_scheduler_type == "constant"
    assert args.weight_decay == 0.01
    assert args.max_grad_norm == 1.0
    assert args.beta == 0.01
    assert args.use_bias_correction_kl is False
    assert args.epsilon == 0.2 and args.epsilon_high == 0.2
    assert args.delta == 3.0
    assert args.loss_type == "dapo"  # token-mean over the step's global tokens (the only loss); others rejected
    assert args.entropy_coef == 0.001
    assert args.num_generations == 8
    assert args.max_completion_length == 512
    assert args.temperature == 1.0
    assert args.num_iterations == 1
    assert args.skill_position == "legacy"
    env = EnvConfig()
    assert (env.history_length, env.max_turns, env.max_prompt_length, env.reward_scale) == (2, 50, 2048, 10.0)
    assert (env.eval_temperature, env.eval_every, env.seed_offset_eval) == (0.4, 5, 1000)


def test_paper_configs_match_the_official_scripts():
    search = load("search_qwen2.5-3b_paper", ["trainer.use_cpu=true"])
    assert search["trainer"].beta == 0.001 and search["trainer"].invalid_action_penalty_coef == 0.01
    assert (search["env"].history_length, search["env"].max_turns, search["env"].eval_temperature) == (4, 4, 0.0)
    assert not search["env"].eval_before_train  # val_before_train=False on Search only (the whole test set)
    webshop = load("webshop_qwen2.5-3b_paper", ["trainer.use_cpu=true"])
    assert webshop["env"].max_turns == 15 and webshop["env"].max_prompt_length == 4096


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError, match=r"Unknown SDARConfig key 'sdar_cof'.*Did you mean sdar_coef"):
        load("smoke", ["trainer.sdar_cof=0.1"])
    with pytest.raises(ConfigError, match="Unknown section 'trainr'"):
        load("smoke", ["trainr.sdar_coef=0.1"])
    with pytest.raises(ConfigError, match="Unknown key 'nonsense'"):
        load("smoke", ["nonsense=1"])
    with pytest.raises(ValueError, match="Unknown trainer.advantage_mode 'gipgo'; valid: grpo, gigpo"):
        load("smoke", ["trainer.advantage_mode=gipgo"])


def test_override_precedence_and_bare_keys():
    cfg = load("smoke", ["sdar_coef=0.5", "env.max_turns=7"])
    assert cfg["trainer"].sdar_coef == 0.5 and cfg["env"].max_turns == 7
    assert cfg["trainer"].learning_rate == 0.01  # from smoke.yaml, over the paper default


def test_unknown_config_name_lists_shipped_configs():
    with pytest.raises(ConfigError, match="smoke"):
        load("no_such_config", [])


def test_unknown_env_name():
    with pytest.raises(ValueError, match="valid names: alfworld"):
        load("smoke", ["env.name=sokoban"])


def test_paper_config_without_data_location_names_the_variable(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA")
    with pytest.raises(ConfigError, match="needs the data location.*WEBSHOP_DATA"):
        load("webshop_qwen2.5-3b_paper", [])


def test_paper_scale_fails_fast_with_reasons_on_a_cpu_machine(monkeypatch):
    import torch

    from sdar.cli import main

    if torch.cuda.is_available():
        pytest.skip("this check is for machines without CUDA")
    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(SystemExit, match=r"(?s)no CUDA device.*ALFWORLD_DATA"):
        main(["reproduce", "--scale", "paper"])


def test_the_paper_pre_flight_names_missing_data_and_uncached_models(monkeypatch, tmp_path):
    """Data variables set to folders that do not exist and Hub models absent from the (empty) cache: every one is
    named with its fix before any process is launched."""
    from agentrl_shared.cli import missing_inputs

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    search = missing_inputs(load("search_qwen2.5-3b_paper", ["trainer.use_cpu=true"]))
    assert any("model.name_or_path: Qwen/Qwen2.5-3B-Instruct is not in the local Hugging Face cache" in p
               for p in search)  # fmt: skip
    assert any(p.startswith("env.env_kwargs.corpus_path: ") and "does not exist" in p for p in search)
    assert any("env.env_kwargs.model_path: intfloat/e5-base-v2 is not in the local" in p for p in search)
    (tmp_path / "search_qa_data").mkdir()  # the data variable's folder exists but holds no corpus
    assert any("wiki-18.jsonl does not exist" in p for p in search)
    assert missing_inputs(load("smoke", [])) == []  # offline models, built-in environment


def test_a_loss_type_the_loss_does_not_implement_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="loss_type='grpo'.*set trainer.loss_type=dapo"):
        SDARConfig(output_dir=str(tmp_path), loss_type="grpo")


@pytest.mark.parametrize("switch", ["shared_prefix_teacher", "shared_prefix_policy"])
def test_shared_prefix_forwards_refuse_gradient_checkpointing(tmp_path, switch):
    # a checkpointed layer in training mode drops the key/value cache the suffix forward reads
    with pytest.raises(ValueError, match="gradient checkpointing drops"):
        SDARConfig(output_dir=str(tmp_path), use_cpu=True, gradient_checkpointing=True, **{switch: True})
    assert SDARConfig(output_dir=str(tmp_path), use_cpu=True, gradient_checkpointing=False, **{switch: True})


def test_paper_configs_read_the_official_skill_documents_and_cpu_configs_ours():
    for name in CONFIGS:
        cfg = load(name, ["trainer.use_cpu=true"] if name.endswith("_paper") else [])
        assert cfg["trainer"].skills_dir == ("official" if name.endswith("_paper") else None), name


def test_paper_training_without_the_official_skills_stops_with_one_line_naming_make_data(tmp_path, monkeypatch):
    from agentrl_shared.smoke import error_line
    from sdar.cli import main

    monkeypatch.setenv("SKILLS_DATA", str(tmp_path / "absent"))
    line = error_line(main, ["train", "--config", "alfworld_qwen2.5-3b_paper", "trainer.use_cpu=true",
                             f"trainer.output_dir={tmp_path / 'run'}"])  # fmt: skip
    assert "alfworld/skill_mapping.json" in line and "make data ENV=skills" in line
    assert not (tmp_path / "run").exists()  # stopped before anything was written or loaded


def test_fields_file_is_current():
    """`configs/fields.json` (the field types `sdar train` checks before torch loads) matches the config classes."""
    from agentrl_shared.schema import stale

    assert (why := stale("sdar")) is None, why
