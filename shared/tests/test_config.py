"""Config loading: sections, one level of precedence, unknown names rejected with the valid ones, ${VAR}."""

from dataclasses import dataclass, field

import pytest

from agentrl_shared.config import ConfigError, ModelConfig, build_section, expand_env_vars, parse_overrides


@dataclass
class Env:
    name: str = "textrooms"
    max_turns: int = 50
    seeds: list[int] = field(default_factory=lambda: [0])


SECTIONS = {"env": Env, "model": ModelConfig}


def test_overrides_parse_yaml_values_and_bare_keys():
    out = parse_overrides(["env.max_turns=3", "seeds=[1, 2]", "name_or_path=smollm2-135m"], SECTIONS)
    assert out == {"env": {"max_turns": 3, "seeds": [1, 2]}, "model": {"name_or_path": "smollm2-135m"}}


def test_exponent_floats_are_numbers_not_strings():
    # PyYAML's YAML 1.1 resolver reads `1e-4` as a string; configs and overrides read it as YAML 1.2 does
    out = parse_overrides(["env.max_turns=1e-4", "env.seeds=[2E+3, -1.5e-2, .5e1]", "model.name_or_path=e5"], SECTIONS)
    assert out["env"] == {"max_turns": 1e-4, "seeds": [2000.0, -0.015, 5.0]}
    assert out["model"] == {"name_or_path": "e5"}  # not a number: stays a string


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"Unknown Env key 'max_turn'.*Did you mean max_turns\?.*Valid Env keys"):
        build_section(Env, {"max_turn": 3}, "test.yaml")
    with pytest.raises(ConfigError, match="Unknown section 'enviro'"):
        parse_overrides(["enviro.max_turns=3"], SECTIONS)
    with pytest.raises(ConfigError, match="not of the form key=value"):
        parse_overrides(["max_turns"], SECTIONS)


def test_env_var_expansion(monkeypatch):
    monkeypatch.setenv("MY_DATA", "/data/x")
    assert expand_env_vars("path: ${MY_DATA}/games", "cfg") == "path: /data/x/games"
    monkeypatch.delenv("MY_DATA")
    with pytest.raises(ConfigError, match="needs the environment variable.*MY_DATA"):
        expand_env_vars("path: ${MY_DATA}", "cfg")
