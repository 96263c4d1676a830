"""Slim the wheels `make gpu-carry` downloads so that they travel with the tree (a bare GPU node takes 64 MiB in all).

pyarrow's wheel (55 MB of the 73 MB carried) holds components that `datasets` and TRL never load: Arrow Flight (RPC),
the S3 filesystem, C++ headers and the test extension. Each is loaded only by its own module (`pyarrow.flight`,
`pyarrow._s3fs`, which `pyarrow.fs` imports inside `try/except ImportError`), never by `pyarrow.lib` (checked with
`readelf -d` on pyarrow 26.0.1: no other library lists libarrow_flight or libarrow_s3 as NEEDED). The unversioned and
fully versioned copies of libarrow_python*.so are only for building C++ extensions against pyarrow; the loader needs
the `.so.2600` names. pandas' wheel carries its own test suite. Dropping these leaves the wheels importable and keeps
each wheel's RECORD true to its files.

    python -m agentrl_shared.carry .gpu-carry     # rewrite the carried wheels in place, print the sizes
"""

import fnmatch
import sys
import zipfile
from pathlib import Path


# wheel-name prefix -> member patterns to drop (fnmatch on the path inside the wheel)
DROP = {
    "pyarrow-": (
        "pyarrow/*flight*",
        "pyarrow/libarrow_s3.so*",
        "pyarrow/_s3fs.*",
        "pyarrow/include/*",
        "pyarrow/src/*",
        "pyarrow/tests/*",
        "pyarrow/_pyarrow_cpp_tests*",
        "pyarrow/*.pxd",
        "pyarrow/*.pyx",
        "pyarrow/libarrow_python*.so",
        "pyarrow/libarrow_python*.so.*.*.*",
    ),
    "pandas-": ("pandas/tests/*",),
}


def slim_wheel(path: Path, patterns: tuple[str, ...]) -> int:
    """Rewrite the wheel at `path` without the members matching `patterns` (and their RECORD lines); return the
    number of members dropped."""
    with zipfile.ZipFile(path) as src:
        infos = src.infolist()
        drop = {i.filename for i in infos if any(fnmatch.fnmatch(i.filename, p) for p in patterns)}
        if not drop:
            return 0
        tmp = path.with_suffix(".slim")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in infos:
                if info.filename in drop:
                    continue
                data = src.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines()
                    data = "".join(f"{x}\n" for x in lines if x.split(",", 1)[0] not in drop).encode()
                dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(path)
    return len(drop)


def main(argv: list[str] | None = None) -> None:
    folder = Path((argv or sys.argv[1:] or [".gpu-carry"])[0])
    for wheel in sorted(folder.glob("*.whl")):
        for prefix, patterns in DROP.items():
            if wheel.name.startswith(prefix):
                before = wheel.stat().st_size
                n = slim_wheel(wheel, patterns)
                print(
                    f"{wheel.name}: dropped {n} members, {before / 2**20:.1f} -> {wheel.stat().st_size / 2**20:.1f} MiB"
                )
    total = sum(w.stat().st_size for w in folder.glob("*.whl"))
    print(f"{folder}: {total / 2**20:.1f} MiB of wheels")


if __name__ == "__main__":
    main()
