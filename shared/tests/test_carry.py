"""The wheels `make gpu-carry` takes to a bare GPU node: the locked versions, every dependency the node lacks, and the
slimmed wheels still true to their RECORD."""

import re
import tomllib
import zipfile
from pathlib import Path

from agentrl_shared.carry import DROP, slim_wheel


ROOT = Path(__file__).resolve().parents[2]
NODE_HAS = ("torch", "transformers", "accelerate")  # a bare GPU node's own packages (Makefile GPU_NEEDS)
CARRIED_FOR = ("trl", "datasets", "deepspeed", "omegaconf")  # what the packages import beyond the node's


def gpu_wheels() -> dict[str, str]:
    text = ROOT.joinpath("Makefile").read_text()
    block = re.search(r"^GPU_WHEELS := (.*?)(?<!\\)\n", text, re.S | re.M).group(1)
    pins = dict(re.findall(r"([A-Za-z0-9_.-]+)==([^\s\\]+)", block))
    return {name.lower().replace("_", "-"): version for name, version in pins.items()}


def locked() -> dict[str, dict]:
    packages: dict[str, dict] = {}
    for p in tomllib.loads(ROOT.joinpath("uv.lock").read_text())["package"]:
        packages.setdefault(p["name"], p)
    return packages


def closure(packages: dict[str, dict], roots) -> set[str]:
    """The Linux dependency closure of `roots` in uv.lock (markers for other platforms left out)."""
    seen, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack += [d["name"] for d in packages[name].get("dependencies", [])
                      if not re.search(r"win32|darwin", d.get("marker", ""))]  # fmt: skip
    return seen


def test_carried_wheels_are_the_locked_versions_and_cover_what_the_node_lacks():
    packages, pins = locked(), gpu_wheels()
    assert pins, "no pinned GPU_WHEELS in the Makefile"
    wrong = {n: (v, packages[n]["version"]) for n, v in pins.items() if packages[n]["version"] != v}
    assert wrong == {}, f"GPU_WHEELS pins that differ from uv.lock (pinned, locked): {wrong}"
    missing = closure(packages, CARRIED_FOR) - closure(packages, NODE_HAS) - set(pins) - {"deepspeed"}
    assert missing == set(), f"a bare node would lack {sorted(missing)}: add them to GPU_WHEELS"
    assert "deepspeed==" + packages["deepspeed"]["version"] in ROOT.joinpath("Makefile").read_text()


def test_slim_wheel_drops_the_unused_members_and_their_record_lines(tmp_path):
    wheel = tmp_path / "pyarrow-26.0.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    names = ["pyarrow/__init__.py", "pyarrow/lib.cpython-312-x86_64-linux-gnu.so", "pyarrow/libarrow.so.2600",
             "pyarrow/libarrow_python.so.2600", "pyarrow/libarrow_python.so", "pyarrow/libarrow_python.so.2600.1.0",
             "pyarrow/libarrow_flight.so.2600", "pyarrow/_flight.cpython-312-x86_64-linux-gnu.so", "pyarrow/flight.py",
             "pyarrow/libarrow_s3.so.2600", "pyarrow/_s3fs.cpython-312-x86_64-linux-gnu.so", "pyarrow/include/arrow/api.h",
             "pyarrow/tests/test_table.py", "pyarrow/lib.pyx", "pyarrow-26.0.1.dist-info/METADATA"]  # fmt: skip
    record = "pyarrow-26.0.1.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w") as z:
        for n in names:
            z.writestr(n, b"x")
        z.writestr(record, "".join(f"{n},sha256=abc,1\n" for n in [*names, record]))
    dropped = slim_wheel(wheel, DROP["pyarrow-"])
    kept = {"pyarrow/__init__.py", "pyarrow/lib.cpython-312-x86_64-linux-gnu.so", "pyarrow/libarrow.so.2600",
            "pyarrow/libarrow_python.so.2600", "pyarrow-26.0.1.dist-info/METADATA", record}  # fmt: skip
    with zipfile.ZipFile(wheel) as z:
        assert set(z.namelist()) == kept
        assert {line.split(",")[0] for line in z.read(record).decode().splitlines()} == kept
    assert dropped == len(names) + 1 - len(kept)
    assert slim_wheel(wheel, DROP["pyarrow-"]) == 0  # idempotent: a second `make gpu-carry` changes nothing
