"""Config loading (OmegaConf): sections, one level of precedence, unknown names rejected with the valid ones,
${oc.env:VAR} data locations, values typed to their fields."""

import enum
import typing
from dataclasses import dataclass, field

import pytest
from omegaconf import OmegaConf

from agentrl_shared.config import (
    ConfigError,
    ModelConfig,
    build_section,
    check_value,
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
    out = parse_overrides(
        ["env.max_turns=3", "seeds=[1, 2]", "name_or_path=smollm2-135m", "attn_implementation="], SECTIONS
    )
    assert OmegaConf.to_container(out) == {
        "env": {"max_turns": 3, "seeds": [1, 2]},
        "model": {"name_or_path": "smollm2-135m", "attn_implementation": None},
    }


def test_exponent_floats_are_numbers_not_strings():
    # PyYAML's YAML 1.1 resolver reads `1e-4` as a string; configs and overrides read it as YAML 1.2 does
    out = OmegaConf.to_container(parse_overrides(["env.max_turns=1e-4", "model.name_or_path=e5"], SECTIONS))
    assert out["env"] == {"max_turns": 1e-4}
    assert out["model"] == {"name_or_path": "e5"}  # not a number: stays a string
    # OmegaConf's YAML reads `2E+3` and `-1.5e-2` as numbers and the signless `.5e1` as a string; a float field
    # takes all three as YAML 1.2 numbers
    values = OmegaConf.to_container(parse_overrides(["env.seeds=[2E+3, -1.5e-2, .5e1]"], SECTIONS))["env"]["seeds"]
    assert check_value("env", "seeds", values, list[float]) == [2000.0, -0.015, 5.0]


def _write(tmp_path, text: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return str(path)


def test_overrides_are_set_over_the_yaml_in_order(tmp_path):
    """YAML < command line (OmegaConf.update): a mapping replaces the file's, `section.key.sub=value` sets one entry."""

    @dataclass
    class Wide:
        max_turns: int = 50
        kwargs: dict = field(default_factory=dict)

    path = _write(tmp_path, "env:\n  max_turns: 7\n  kwargs: {a: 1, b: 2}\n")
    load = lambda overrides: load_config(path, overrides, {"env": Wide}, "agentrl_shared")["env"]  # noqa: E731
    assert (load([]).max_turns, load([]).kwargs) == (7, {"a": 1, "b": 2})
    assert load(["env.kwargs.b=3"]).kwargs == {"a": 1, "b": 3}
    assert load(["env.kwargs={c: 4}"]).kwargs == {"c": 4}
    assert load(["env.kwargs={c: 4}", "env.kwargs.b=3"]).kwargs == {"c": 4, "b": 3}
    assert load(["max_turns=9"]).max_turns == 9


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"Unknown Env key 'max_turn'.*Did you mean max_turns\?$"):
        build_section(Env, {"max_turn": 3}, "test.yaml")
    with pytest.raises(ConfigError, match=r"Unknown Env key 'zz'.*Valid Env keys: max_turns, name, seeds\.$"):
        build_section(Env, {"zz": 3}, "test.yaml")
    with pytest.raises(ConfigError, match="Unknown section 'enviro'"):
        parse_overrides(["enviro.max_turns=3"], SECTIONS)
    with pytest.raises(ConfigError, match="not of the form key=value"):
        parse_overrides(["max_turns"], SECTIONS)


def test_env_var_interpolation(monkeypatch, tmp_path):
    """`${oc.env:VAR}` (OmegaConf's resolver) for data locations, `${oc.env:VAR,default}`, `${section.key}`; an unset
    variable is one line naming what to export."""
    monkeypatch.setenv("MY_DATA", "/data/x")
    path = _write(
        tmp_path,
        "env:\n  name: ${oc.env:MY_DATA}/games\nmodel:\n  name_or_path: ${oc.env:NO_SUCH_VAR,m}-${env.name}\n",
    )
    cfg = load_config(path, [], SECTIONS, "agentrl_shared")
    assert (cfg["env"].name, cfg["model"].name_or_path) == ("/data/x/games", "m-/data/x/games")
    assert (
        load_config(path, ["env.name=${oc.env:MY_DATA}/other"], SECTIONS, "agentrl_shared")["env"].name
        == "/data/x/other"
    )
    monkeypatch.delenv("MY_DATA")
    with pytest.raises(ConfigError, match=r"cfg.yaml needs the data location\(s\) MY_DATA: `export MY_DATA=") as exc:
        load_config(path, [], SECTIONS, "agentrl_shared")
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 200
    old_style = _write(tmp_path, "env:\n  name: ${MY_DATA}/games\n")  # a key reference in OmegaConf, not a variable
    with pytest.raises(
        ConfigError, match=r"env.name: Interpolation key 'MY_DATA' not found \(an environment variable is"
    ):
        load_config(old_style, [], SECTIONS, "agentrl_shared")
    with pytest.raises(ConfigError, match=r"env.name: .*BRACE_CLOSE"):
        load_config(_write(tmp_path, "env:\n  name: ${oc.env:MY_DATA\n"), [], SECTIONS, "agentrl_shared")


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
    with pytest.raises(ConfigError, match=r"bad.yaml is not valid YAML at line 3, column 1: .*expected ','"):
        load_config(str(bad), [], SECTIONS, "agentrl_shared")


@pytest.mark.parametrize(
    ("text", "overrides", "words"),
    [
        ("- 1\n", [], "must be a mapping of sections"),
        ("3\n", [], "must be a mapping of sections"),
        ("env: 3\n", [], "section 'env' must be a mapping of keys"),
        ("env:\n  max_turns: 1\n  max_turns: 2\n", [], "found duplicate key"),
        ("env: {}\n", ["env.max_turns=[1"], "its value is not valid YAML"),
        ("env: {}\n", ["env.max_turns=abc"], "env.max_turns='abc' is not an integer"),
    ],
)
def test_bad_files_and_overrides_are_one_line(tmp_path, text, overrides, words):
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, text), overrides, SECTIONS, "agentrl_shared")
    assert words in str(exc.value) and "\n" not in str(exc.value) and len(str(exc.value)) < 200


def test_model_lora_section_from_yaml_and_overrides(tmp_path):
    from agentrl_shared.lora import LoraSettings, peft_config

    path = tmp_path / "c.yaml"
    path.write_text("model:\n  lora: {r: 4, target_modules: [q_proj, v_proj]}\n")
    cfg = load_config(str(path), ["model.lora.alpha=32", "model.lora.r=8"], SECTIONS, "agentrl_shared")
    assert cfg["model"].lora == LoraSettings(r=8, alpha=32.0, target_modules=["q_proj", "v_proj"])
    lora = peft_config(cfg["model"].lora)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (8, 32.0, 0.0, {"q_proj", "v_proj"})
    assert peft_config(load_config(str(path), ["model.lora.r=0"], SECTIONS, "agentrl_shared")["model"].lora) is None


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("model.lora.r=-1", "model.lora.r=-1 must be at least 0"),
        ("model.lora.r=abc", "model.lora.r='abc' is not an integer"),
        ("model.lora.dropout=1.5", "model.lora.dropout=1.5 must be in [0, 1)"),
        ("model.lora.alpha=0", "model.lora.alpha=0.0 must be positive"),
        ("model.lora.rank=8", "Unknown LoraSettings key 'rank'"),
        ("model.lora=3", "model.lora=3 is not a mapping"),
    ],
)
def test_bad_lora_values_are_one_line(tmp_path, override, words):
    path = tmp_path / "c.yaml"
    path.write_text("model: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path), [override], SECTIONS, "agentrl_shared")
    assert words in str(err.value) and "\n" not in str(err.value)
