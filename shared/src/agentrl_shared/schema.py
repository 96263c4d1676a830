"""A package's configuration fields as a JSON file, so that a bad config or override is one line before torch loads.

A trainer package's `trainer:` section is a subclass of TRL's `GRPOConfig`, and importing it imports transformers
and torch (tens of seconds on a loaded machine). `<package>/configs/fields.json` holds every section's field names
and their annotations in a portable spelling (`int`, `float | None`, `Literal['a', 'b']`, `list[int]`; an enum as
the `Literal` of its values, another class as `Any`), written by `python -m agentrl_shared.schema <package>` from
`<package>.cli.sections()`. `precheck` loads a config and its overrides with `agentrl_shared.config.load_config`
against stand-in dataclasses of these annotations (unknown keys, every value's type and range, data locations),
importing nothing of the package.

The file also records a fingerprint: the sha256 of the source of each of our section classes (read with `ast`, not
imported) and the installed versions of the libraries that define the others (trl, transformers, accelerate). When
one differs (a field was added, a library upgraded) `precheck` checks nothing and the full load, which builds the
real dataclasses, reports the same errors later; each package's `test_fields_file_is_current` keeps its file current.
"""

import ast
import dataclasses
import enum
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import sys
import types
import typing
from pathlib import Path

from .config import load_config


FIELDS_FILE = "fields.json"
LIBRARIES = ("trl", "transformers", "accelerate")  # define the sections' base classes (GRPOConfig, its enums)


def portable(hint) -> str:
    """`hint` in a spelling `annotation` reads back without importing the module that defines it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(portable(a) for a in args)
    if hint is type(None):
        return "None"
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"Literal[{', '.join(repr(m.value) for m in hint)}]"
    if origin in (list, tuple):
        return f"list[{portable(args[0])}]" if args else "list"
    if origin is dict or hint is dict:
        return "dict"
    if hint in (bool, int, float, str):
        return hint.__name__
    return "Any"  # another class (e.g. accelerate's ParallelismConfig): its own constructor checks it


NAMES = {"Literal": typing.Literal, "Any": typing.Any, "None": None, "list": list, "dict": dict, "bool": bool,
         "int": int, "float": float, "str": str}  # fmt: skip


def annotation(text: str):
    """The typing object `portable` spelled."""
    return eval(text, {"__builtins__": {}}, NAMES)  # noqa: S307 (our own file, names restricted to NAMES)


def _fields(cls: type, classes: list[type]) -> dict:
    """`{"class": name, "fields": {field: portable annotation or a nested dataclass's own entry}}` of dataclass
    `cls` (init fields); `classes` collects every dataclass in the MROs."""
    classes += [c for c in cls.__mro__ if dataclasses.is_dataclass(c) and c not in classes]
    hints = typing.get_type_hints(cls)
    fields = {f.name: _fields(hints[f.name], classes) if dataclasses.is_dataclass(hints[f.name])
              else portable(hints[f.name]) for f in dataclasses.fields(cls) if f.init}  # fmt: skip
    return {"class": cls.__name__, "fields": fields}


def _class_sha(module: str, name: str) -> str | None:
    """sha256 of the source of top-level class `name` in `module`, read without importing the module."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    text = Path(spec.origin).read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return hashlib.sha256(ast.get_source_segment(text, node).encode()).hexdigest()
    return None


def fingerprint(classes: list[tuple[str, str]]) -> dict:
    """The source hash of each of our `(module, class)` and the installed versions of `LIBRARIES` (which define the
    others)."""
    ours = sorted((m, c) for m, c in classes if m.split(".")[0] not in LIBRARIES)
    return {"classes": {f"{m}:{c}": _class_sha(m, c) for m, c in ours},
            "versions": {lib: importlib.metadata.version(lib) for lib in LIBRARIES}}  # fmt: skip


def describe(sections: dict[str, type]) -> dict:
    """The contents of `fields.json` for `sections` (`{section: dataclass}`)."""
    classes: list[type] = []
    fields = {name: _fields(cls, classes) for name, cls in sections.items()}
    return {"fingerprint": fingerprint([(c.__module__, c.__name__) for c in classes]), "sections": fields}


def fields_path(package: str) -> Path:
    return Path(str(importlib.resources.files(package) / "configs" / FIELDS_FILE))


def stand_in(entry: dict) -> type:
    """A dataclass with `entry`'s class name, fields and annotations, every default None: what `load_config` needs to
    check keys, types and ranges (the real class's own `__post_init__` checks come with the full load)."""
    fields = [(name, stand_in(spec) if isinstance(spec, dict) else annotation(spec), dataclasses.field(default=None))
              for name, spec in entry["fields"].items()]  # fmt: skip
    return dataclasses.make_dataclass(entry["class"], fields)


def precheck(package: str, config: str, overrides: list[str]) -> bool:
    """Load a config and its overrides with `load_config` against the stand-ins of `<package>/configs/fields.json`:
    unknown sections and keys, every value's type and range, unset data locations, each a `ConfigError` as the full
    load reports it. False (nothing checked) when the package or the file is missing, or its fingerprint is not this
    installation's."""
    if importlib.util.find_spec(package) is None or not (path := fields_path(package)).is_file():
        return False  # a package without the file (vitabench2's harness, a test's made-up package)
    schema = json.loads(path.read_text())
    recorded = schema["fingerprint"]
    if fingerprint([tuple(k.split(":")) for k in recorded["classes"]]) != recorded:
        return False
    load_config(config, overrides, {name: stand_in(entry) for name, entry in schema["sections"].items()}, package)
    return True


def stale(package: str) -> str | None:
    """Why `<package>/configs/fields.json` is not what `<package>.cli.sections()` describes now (None when it is)."""
    import importlib

    path = fields_path(package)
    now = describe(importlib.import_module(f"{package}.cli").sections())
    if path.is_file() and json.loads(path.read_text()) == now:
        return None
    return f"{path} is not current: run `python -m agentrl_shared.schema {package}` and commit it."


def main(argv: list[str]) -> None:
    """`python -m agentrl_shared.schema PACKAGE...`: write each package's `configs/fields.json` (from its
    `cli.sections()`)."""
    import importlib

    for package in argv:
        sections = importlib.import_module(f"{package}.cli").sections()
        fields_path(package).write_text(json.dumps(describe(sections), indent=1, sort_keys=True) + "\n")
        print(fields_path(package))


if __name__ == "__main__":
    main(sys.argv[1:])
