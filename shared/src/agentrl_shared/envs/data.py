"""Fetch the official environment data where a machine has internet: `python -m agentrl_shared.envs.data alfworld`.

ALFWorld: the release zips that `alfworld-download` fetches (`json_2.1.1_json.zip`, `json_2.1.1_pddl.zip`,
`json_2.1.2_tw-pddl.zip`, alfworld GitHub releases) unpacked into `$ALFWORLD_DATA`, plus `logic/alfred.{pddl,twl2}`
copied from the installed package. On failure it says what failed and where to put the files by hand.
"""

import argparse
import logging
import os
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from ..cli import setup_logging


logger = logging.getLogger(__name__)
ALFWORLD_URLS = (
    "https://github.com/alfworld/alfworld/releases/download/0.2.2/json_2.1.1_json.zip",
    "https://github.com/alfworld/alfworld/releases/download/0.2.2/json_2.1.1_pddl.zip",
    "https://github.com/alfworld/alfworld/releases/download/0.4.0/json_2.1.2_tw-pddl.zip",
)
DATASETS = ("alfworld",)
MANUAL_ALFWORLD = """\
Put the ALFWorld games there by hand:
  1. on a machine with internet, download
     {urls}
  2. unzip all three into {dest} so that you get
     {dest}/json_2.1.1/{{train,valid_seen,valid_unseen}}/<task>-<obj>-<mrecep>-<recep>-<scene>/<trial>/
     with initial_state.pddl, traj_data.json and game.tw-pddl in each trial folder;
  3. export ALFWORLD_DATA={dest}
Trials without game.tw-pddl are built on first use from initial_state.pddl + traj_data.json."""


def fetch_alfworld(dest: Path, timeout: float = 60.0) -> None:
    """Download and unpack the three ALFWorld zips into `dest`, then copy the package's PDDL domain and grammar."""
    dest.mkdir(parents=True, exist_ok=True)
    for url in ALFWORLD_URLS:
        logger.info(f"downloading {url}")
        with tempfile.TemporaryDirectory() as tmp:
            zip_path = Path(tmp) / url.rsplit("/", 1)[1]
            with urllib.request.urlopen(url, timeout=timeout) as resp, zip_path.open("wb") as f:
                shutil.copyfileobj(resp, f)
            with zipfile.ZipFile(zip_path) as z:
                z.extractall(dest)
    try:
        from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH
    except ImportError:
        logger.warning(
            "alfworld is not installed: logic/ not copied (install the `alfworld` extra and run this again)."
        )
        return
    (dest / "logic").mkdir(exist_ok=True)
    shutil.copy(ALFRED_PDDL_PATH, dest / "logic" / "alfred.pddl")
    shutil.copy(ALFRED_TWL2_PATH, dest / "logic" / "alfred.twl2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fetch official environment data.")
    parser.add_argument("dataset", choices=DATASETS)
    parser.add_argument("--dest", default=None, help="target folder (default: $ALFWORLD_DATA or ~/.cache/alfworld)")
    args = parser.parse_args(argv)
    setup_logging()
    dest = Path(args.dest or os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld").expanduser()
    try:
        fetch_alfworld(dest)
    except (OSError, zipfile.BadZipFile) as exc:  # URLError is an OSError
        logger.error(f"ALFWorld download failed: {type(exc).__name__}: {exc}")
        logger.error(MANUAL_ALFWORLD.format(urls="\n     ".join(ALFWORLD_URLS), dest=dest))
        return 1
    logger.info(f"ALFWorld data in {dest}; export ALFWORLD_DATA={dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
