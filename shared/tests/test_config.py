"""Config loading: sections, one level of precedence, unknown names rejected with the valid ones, ${VAR}."""

import enum
import typing
from dataclasses import dataclass, field

import pytest

from agentrl_shared.config import (
    ConfigError,
    ModelConfig,
    build_section,
    check_value,
    expand_env_vars,
    load_config,
    parse_overrides,
)


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
    with pytest.raises(ConfigError, match=r"Unknown Env key 'max_turn'.*Did you mean max_turns\?$"):
        build_section(Env, {"max_turn": 3}, "test.yaml")
    with pytest.raises(ConfigError, match=r"Unknown Env key 'zz'.*Valid Env keys: max_turns, name, seeds\.$"):
        build_section(Env, {"zz": 3}, "test.yaml")
    with pytest.raises(ConfigError, match="Unknown section 'enviro'"):
        parse_overrides(["enviro.max_turns=3"], SECTIONS)
    with pytest.raises(ConfigError, match="not of the form key=value"):
        parse_overrides(["max_turns"], SECTIONS)


def test_env_var_expansion(monkeypatch):
    monkeypatch.setenv("MY_DATA", "/data/x")
    assert expand_env_vars("path: ${MY_DATA}/games", "cfg") == "path: /data/x/games"
    monkeypatch.delenv("MY_DATA")
    with pytest.raises(ConfigError, match="needs the data location.*MY_DATA"):
        expand_env_vars("path: ${MY_DATA}", "cfg")


class Strategy(enum.Enum):
    STEPS = "steps"
    NO = "no"


@pytest.mark.parametrize(
    ("value", "hint", "out"),
    [
        (3, float, 3.0),  # an integer where a number is expected
        (1e-6, float, 1e-6),
        (True, bool, True),
        ([1, 2], list[int], [1, 2]),
        (None, int | None, None),
        ("steps", Strategy | str, "steps"),
        (2, int | str | None, 2),
        ("bfloat16", typing.Literal["float32", "bfloat16"], "bfloat16"),
        ({"a": 1}, dict | str | None, {"a": 1}),
        (["a"], str | list[str] | None, ["a"]),
    ],
)
def test_values_are_parsed_to_their_field_type(value, hint, out):
    got = check_value("s", "k", value, hint)
    assert got == out and type(got) is type(out)


@pytest.mark.parametrize(
    ("key", "value", "hint", "words"),
    [
        ("learning_rate", "abc", float, "s.learning_rate='abc' is not a number"),
        ("bf16", "maybe", bool | None, "is not true or false or null"),
        ("max_turns", 2.5, int, "is not an integer"),
        ("max_turns", True, int, "is not an integer"),  # a bool is no integer here
        ("seeds", "0,1", list[int], "is not a list, e.g. [0, 1]"),
        ("seeds", [0, "x"], list[int], "is not a list"),
        ("dtype", "float33", typing.Literal["float32", "bfloat16"], "one of 'float32', 'bfloat16'"),
        ("num_generations", 1, int, "s.num_generations=1 must be at least 2"),
        ("learning_rate", -1e-6, float, "must be at least 0"),
    ],
)
def test_a_value_of_the_wrong_type_or_range_is_one_line(key, value, hint, words):
    with pytest.raises(ConfigError) as exc:
        check_value("s", key, value, hint)
    assert words in str(exc.value) and "\n" not in str(exc.value) and len(str(exc.value)) < 200


def test_malformed_yaml_is_one_line_with_its_place(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  max_turns: [1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml is not valid YAML at line 3, column 1: expected ','"):
        load_config(str(bad), [], SECTIONS, "agentrl_shared")
