"""Every shipped YAML loads; the official defaults are pinned one by one; bad keys and values are rejected."""

from importlib.resources import files

import pytest

from agentopsd.cli import BASELINES, load
from agentopsd.config import AgentOPSDConfig, EnvConfig
from agentrl_shared.config import ConfigError


@pytest.fixture(autouse=True)
def data_locations(monkeypatch, tmp_path):
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA", "SEARCH_QA_DATA"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))


CONFIGS = sorted(
    p.name.removesuffix(".yaml") for p in (files("agentopsd") / "configs").iterdir() if p.name.endswith(".yaml")
)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_loads(name):
    # paper configs ask for bf16 on GPUs; `use_cpu` lets GRPOConfig validate them on this CPU-only machine
    cfg = load(name, ["trainer.use_cpu=true"] if name.endswith("_paper") else [])
    assert isinstance(cfg["trainer"], AgentOPSDConfig) and isinstance(cfg["env"], EnvConfig)
    t = cfg["trainer"]
    assert (t.per_device_train_batch_size * t.steps_per_generation) % t.num_generations == 0


def test_official_defaults_pinned():
    args = AgentOPSDConfig(output_dir="/tmp/x", use_cpu=True)
    # run_alfworld_7b.sh: the full method
    assert args.credit == "agentopsd"
    assert args.granularity == "turn"
    assert args.belief_mult is True and args.signed is True
    assert args.mult_lambda == 0.5
    # opsd_ray_trainer.py defaults the scripts do not override
    assert args.mult_band == 0.2
    assert args.belief_gate is True and args.mult_signed is True
    assert args.warmdown_steps == -1
    assert args.belief_decay_gamma == 1.0
    assert (args.use_anchoring, args.use_group_norm, args.center_delta) == (False, False, False)
    assert args.v0_prior is None and args.v0_reward_scale == 1.0  # group-mean V_0 on the raw reward scale
    assert args.skill_position == "legacy"
    # baselines (SDAR repo scripts) are off
    assert (args.rlsd_lambda, args.rlsd_warmdown_steps, args.rlsd_clip) == (0.5, 100, 0.2)
    assert args.sdl_coef == 0.0 and args.skills_in_student_prompt is False
    # verl-agent values shared with SDAR
    assert args.invalid_action_penalty_coef == 0.1
    assert args.learning_rate == 1e-6 and args.lr_scheduler_type == "constant"
    assert args.weight_decay == 0.01 and args.max_grad_norm == 1.0
    assert args.beta == 0.01 and args.use_bias_correction_kl is False
    assert args.epsilon == 0.2 and args.epsilon_high == 0.2 and args.delta == 3.0
    assert args.loss_type == "dapo" and args.entropy_coef == 0.001
    assert args.num_generations == 8 and args.max_completion_length == 512 and args.temperature == 1.0
    assert args.num_iterations == 1
    env = EnvConfig()
    assert (env.history_length, env.max_turns, env.max_prompt_length, env.reward_scale) == (2, 50, 2048, 10.0)


def test_paper_configs_match_the_official_scripts():
    for model in ("3b", "7b"):
        alf = load(f"alfworld_qwen2.5-{model}_paper", ["trainer.use_cpu=true"])
        assert alf["trainer"].granularity == "turn" and alf["env"].max_turns == 50
        webshop = load(f"webshop_qwen2.5-{model}_paper", ["trainer.use_cpu=true"])
        assert webshop["trainer"].granularity == "token" and webshop["env"].max_turns == 15
        search = load(f"search_qwen2.5-{model}_paper", ["trainer.use_cpu=true"])
        assert search["trainer"].granularity == "token"
        assert search["trainer"].beta == 0.001 and search["trainer"].invalid_action_penalty_coef == 0.01
        assert (search["env"].history_length, search["env"].max_turns, search["env"].reward_scale) == (4, 4, 1.0)
        assert not search["env"].eval_before_train and alf["env"].eval_before_train  # official val_before_train
        for cfg in (alf, webshop, search):
            assert cfg["trainer"].mult_lambda == 0.5 and cfg["trainer"].credit == "agentopsd"
            # launch.num_processes: the paper's GPU count, on which the per-rank sizes give its episodes per rollout
            t, n = cfg["trainer"], cfg["launch"].num_processes
            episodes = t.per_device_train_batch_size * t.steps_per_generation * n
            expected = {"alfworld": (8, 128), "webshop": (2, 128), "search_qa": (4, 1024)}[cfg["env"].name]
            assert (n, episodes) == expected, cfg["_source"]


def test_baseline_switches_load():
    for method, overrides in BASELINES.items():
        t = load("smoke", overrides)["trainer"]
        assert t.credit == {"rlsd": "rlsd", "tether_seq": "rlsd", "agentopsd": "agentopsd"}.get(method, "grpo")
    assert load("smoke", BASELINES["skill_sd"])["trainer"].sdl_coef == 0.001
    gigpo = load("smoke", BASELINES["gigpo"])["trainer"]  # verl-agent GiGPO scripts: gamma 0.95, w 1.0
    assert (gigpo.advantage_mode, gigpo.step_gamma, gigpo.step_advantage_w) == ("gigpo", 0.95, 1.0)
    assert {load("smoke", o)["trainer"].advantage_mode for m, o in BASELINES.items() if m != "gigpo"} == {"grpo"}


def test_unknown_key_and_bad_values_are_rejected():
    with pytest.raises(ConfigError, match=r"Unknown AgentOPSDConfig key 'mult_lamda'.*Did you mean mult_lambda"):
        load("smoke", ["trainer.mult_lamda=0.1"])
    with pytest.raises(ValueError, match="Unknown trainer.granularity 'turns'; valid: turn, token"):
        load("smoke", ["trainer.granularity=turns"])
    with pytest.raises(ValueError, match="Unknown trainer.credit 'opsd'; valid: agentopsd, grpo, rlsd"):
        load("smoke", ["trainer.credit=opsd"])
    with pytest.raises(ValueError, match="mult_lambda must be in"):
        load("smoke", ["trainer.mult_lambda=1.5"])
    with pytest.raises(ValueError, match="Unknown trainer.advantage_mode 'gipgo'; valid: grpo, gigpo"):
        load("smoke", ["trainer.advantage_mode=gipgo"])
    with pytest.raises(ValueError, match="advantage_mode=gigpo with credit='agentopsd'.*set trainer.credit=grpo"):
        load("smoke", ["trainer.advantage_mode=gigpo"])


def test_the_tether_seq_method_is_rlsd_credit_with_a_constant_lambda():
    """AgentOPSD's `tether_seq` (opsd_utils.py: tether_lambda 0.5, tether_band 0.2, no decay) at the config's
    granularity: the ALFWorld config stays turn-level."""
    from agentopsd.cli import BASELINES
    from agentopsd.credit import linear_warmdown
    from agentrl_shared.cli import method_switches

    t = load("alfworld_qwen2.5-7b_paper", [*method_switches(BASELINES, "tether_seq"), "trainer.use_cpu=true"])[
        "trainer"
    ]
    assert (t.credit, t.granularity, t.rlsd_lambda, t.rlsd_clip) == ("rlsd", "turn", 0.5, 0.2)
    assert [linear_warmdown(t.rlsd_lambda, step, t.rlsd_warmdown_steps) for step in (0, 100, 150)] == [0.5] * 3


def test_fields_file_is_current():
    """`configs/fields.json` (the field types `agentopsd train` checks before torch loads) matches the config classes."""
    from agentrl_shared.schema import stale

    assert (why := stale("agentopsd")) is None, why


@pytest.mark.parametrize("switch", ["shared_prefix_teacher", "shared_prefix_policy"])
def test_shared_prefix_forwards_refuse_gradient_checkpointing(tmp_path, switch):
    # a checkpointed layer in training mode drops the key/value cache the suffix forward reads (as in sdar)
    with pytest.raises(ValueError, match="gradient checkpointing drops"):
        AgentOPSDConfig(output_dir=str(tmp_path), use_cpu=True, gradient_checkpointing=True, **{switch: True})
    assert AgentOPSDConfig(output_dir=str(tmp_path), use_cpu=True, gradient_checkpointing=False, **{switch: True})
