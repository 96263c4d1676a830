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


def git_commit(where: Path | str | None = None) -> str:
    """Short commit of the checkout holding `where` (default: this package), with `+dirty` when tracked files have
    uncommitted changes; `unknown` outside a git checkout (an installed or copied package)."""
    cwd = Path(where) if where is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


__all__ = ["git_commit", "redact"]
