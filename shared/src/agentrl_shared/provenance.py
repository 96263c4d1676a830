"""Provenance stamps for result and benchmark files: the git commit that produced them.

One helper for every package (results JSON, `bench-results.json`, README tables carry the commit).
"""

import subprocess
from pathlib import Path


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


__all__ = ["git_commit"]
