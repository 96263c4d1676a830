"""Provenance stamps for result and benchmark files: the git commit that produced them.

One helper for every package (results JSON, `bench-results.json`, README tables carry the commit).
"""

import re
import subprocess
from pathlib import Path


# a secret by its key's name, or inside a string (a command line, a URL): `--api-key X`, `api_key=X`, `Bearer X`,
# OpenAI-style `sk-...` keys, `hf_...` tokens
SECRET_KEY = re.compile(r"(?i)(api[_-]?key|token|secret|password|authorization)$")
SECRET_TEXT = re.compile(
    r"(?i)((?:--)?(?:api[_-]?key|token|secret|password)[= ]+|bearer\s+)(?!<redacted>)[^\s'\",&]+"
    r"|\b(?:sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{8,})"
)


def redact(value):
    """`value` (a results payload) with every secret replaced by `<redacted>`: values of keys named like a key, token,
    secret or password, and such values inside strings (so an API key passed on a command line never reaches a
    results file)."""
    if isinstance(value, dict):
        return {k: "<redacted>" if SECRET_KEY.search(str(k)) and isinstance(v, str) and v else redact(v)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return SECRET_TEXT.sub(lambda m: (m.group(1) or "") + "<redacted>", value)
    return value


def read_commit(where: Path | str) -> str:
    """Short commit of the checkout holding `where`, with `+dirty` when tracked files have uncommitted changes;
    `unknown` outside a git checkout (an installed or copied package)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=where, capture_output=True, text=True
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# the commit this process loaded its code from, read when the process first imports this module (every CLI does at
# start-up, through the evaluation and run-loop modules): a run that lasts an hour while the checkout moves on
# still files the commit it ran, not the one checked out when it writes its results
LOADED_COMMIT = read_commit(Path(__file__).resolve().parent)


def git_commit(where: Path | str | None = None) -> str:
    """The commit results are stamped with: the one this process started from (`LOADED_COMMIT`), or with `where`
    the current commit of the checkout holding `where`."""
    return LOADED_COMMIT if where is None else read_commit(where)


__all__ = ["LOADED_COMMIT", "git_commit", "read_commit", "redact"]
