"""`agentrl_shared.schema`: the portable field file a package's CLI checks a config against before torch loads."""

import enum
import json
import typing
from dataclasses import dataclass, field

import pytest

from agentrl_shared.config import ConfigError, load_config
from agentrl_shared.schema import annotation, describe, portable, precheck, stand_in


class Strategy(enum.Enum):
    STEPS = "steps"
    NO = "no"


@dataclass
class Inner:
    r: int = 0


@dataclass
class Train:
    learning_rate: float = 1e-6
    num_generations: int = 8
    bf16: bool | None = None
    save_strategy: Strategy | str = "steps"
    dtype: typing.Literal["float32", "bfloat16"] = "float32"
    seeds: list[int] = field(default_factory=lambda: [0])
    kwargs: dict | str | None = None
    other: object = None
    inner: Inner = field(default_factory=Inner)


SECTIONS = {"trainer": Train}


@pytest.mark.parametrize(
    ("hint", "text"),
    [
        (float, "float"),
        (bool | None, "bool | None"),
        (Strategy | str, "Literal['steps', 'no'] | str"),
        (typing.Literal["float32", "bfloat16"], "Literal['float32', 'bfloat16']"),
        (list[int], "list[int]"),
        (tuple[str, ...], "list[str]"),
        (dict | str | None, "dict | str | None"),
        (object, "Any"),
    ],
)
def test_annotations_round_trip(hint, text):
    assert portable(hint) == text
    assert portable(annotation(text)) == text


@pytest.mark.parametrize(
    "overrides",
    [
        ["learning_rate=abc"],
        ["trainer.bf16=maybe"],
        ["num_generations=1"],
        ["trainer.lerning_rate=1e-6"],
        ["trainer.seeds=0,1"],
        ["trainer.dtype=float33"],
        ["trainer.inner.r=2.5"],
        ["trainer.inner.q=1"],
        ["trainr.seed=1"],
    ],
)
def test_stand_ins_report_what_the_real_classes_report(tmp_path, overrides):
    """The same `ConfigError` line from the field file's stand-ins as from the dataclasses themselves."""
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  learning_rate: 1e-5\n")
    stand_ins = {name: stand_in(entry) for name, entry in describe(SECTIONS)["sections"].items()}
    with pytest.raises(ConfigError) as real:
        load_config(str(path), overrides, SECTIONS, "agentrl_shared")
    with pytest.raises(ConfigError) as fast:
        load_config(str(path), overrides, stand_ins, "agentrl_shared")
    assert str(fast.value) == str(real.value)


def test_good_values_pass_and_a_missing_or_stale_file_checks_nothing(tmp_path, monkeypatch):
    import agentrl_shared.schema as schema

    path = tmp_path / "c.yaml"
    path.write_text('trainer:\n  learning_rate: 1e-5\n  save_strategy: "no"\n')
    stand_ins = {name: stand_in(entry) for name, entry in describe(SECTIONS)["sections"].items()}
    cfg = load_config(str(path), ["trainer.inner.r=4", "seeds=[1, 2]", "kwargs={a: 1}"], stand_ins, "agentrl_shared")
    assert (cfg["trainer"].learning_rate, cfg["trainer"].inner.r, cfg["trainer"].seeds) == (1e-5, 4, [1, 2])
    fields = tmp_path / "fields.json"
    monkeypatch.setattr(schema, "fields_path", lambda package: fields)
    assert precheck("agentrl_shared", str(path), ["learning_rate=abc"]) is False  # no file
    entry = describe(SECTIONS)
    fields.write_text(json.dumps(entry))
    with pytest.raises(ConfigError, match="is not a number"):
        precheck("agentrl_shared", str(path), ["learning_rate=abc"])
    entry["fingerprint"]["versions"]["trl"] = "0.0.1"  # another TRL than the file was written for
    fields.write_text(json.dumps(entry))
    assert precheck("agentrl_shared", str(path), ["learning_rate=abc"]) is False
