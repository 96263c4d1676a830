"""`make data ENV=webshop|search_qa` (`agentrl_shared.envs.data`): the official files land in the layout the paper
configs read, written whole or not at all; without network the command says where to put them and exits 1. The
downloads themselves are replaced by local files (this machine has no network)."""

import gzip
import json
import logging

import agentrl_shared.envs.data as data


def test_search_qa_joins_the_index_parts_and_unzips_the_corpus(tmp_path, monkeypatch):
    def hf_hub_download(repo_id, filename, repo_type, local_dir):
        assert repo_type == "dataset"
        path = local_dir / filename
        if filename.endswith(".gz"):
            with gzip.open(path, "wb") as f:
                f.write(b'{"id": "0", "contents": "Title\\ntext"}\n')
        else:
            path.write_bytes(f"{repo_id}/{filename};".encode())
        return str(path)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", hf_hub_download)
    monkeypatch.setenv("SEARCH_QA_DATA", str(tmp_path / "sqa"))
    assert data.main(["search_qa"]) == 0
    root = tmp_path / "sqa"
    assert (
        root / "e5_Flat.index"
    ).read_bytes() == b"PeterJinGo/wiki-18-e5-index/part_aa;PeterJinGo/wiki-18-e5-index/part_ab;"
    assert json.loads((root / "wiki-18.jsonl").read_text()) == {"id": "0", "contents": "Title\ntext"}
    assert (root / "train.parquet").exists() and (root / "test.parquet").exists()
    assert not list(root.glob("*.part"))


def test_webshop_downloads_the_setup_files_and_fails_in_one_message_offline(tmp_path, monkeypatch, caplog):
    source = tmp_path / "drive"
    source.mkdir()
    for name, drive_id in data.WEBSHOP_FILES.items():
        (source / drive_id).write_text(name)
    monkeypatch.setattr(data, "DRIVE_URL", source.as_uri() + "/{id}")
    assert data.main(["webshop", "--dest", str(tmp_path / "ws")]) == 0
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == sorted(data.WEBSHOP_FILES)
    monkeypatch.setattr(data, "DRIVE_URL", (tmp_path / "missing").as_uri() + "/{id}")
    assert data.main(["webshop", "--dest", str(tmp_path / "ws2")]) == 1
    assert "webshop download failed" in caplog.text and str(tmp_path / "ws2") in caplog.text
    assert not list((tmp_path / "ws2").glob("*"))  # nothing half-written


def test_vitabench_and_cm2_land_where_the_configs_read_them_or_say_what_to_copy(tmp_path, monkeypatch, caplog):
    """`make data ENV=vitabench|cm2`: the pinned GitHub files into $VITA_DATA / $ENVACE_DATA; offline, one message with
    the repository, commit, path and destination."""
    caplog.set_level(logging.INFO)
    source = tmp_path / "github"
    for domain in data.VITABENCH_DOMAINS:
        for name in ("tasks.json", "tasks_en.json"):
            path = source / data.VITABENCH_REPO / data.VITABENCH_COMMIT / "data/vita/domains" / domain / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"[{json.dumps(domain)}]")
    sample = source / data.CM2_REPO / data.CM2_COMMIT / data.CM2_SAMPLE
    sample.parent.mkdir(parents=True)
    sample.write_text("[]")
    monkeypatch.setattr(data, "github_file", lambda repo, commit, path: (source / repo / commit / path).as_uri())
    monkeypatch.setenv("VITA_DATA", str(tmp_path / "vita"))
    assert data.main(["vitabench"]) == 0
    assert json.loads((tmp_path / "vita/vita/domains/ota/tasks_en.json").read_text()) == ["ota"]
    assert data.main(["cm2", "--dest", str(tmp_path / "envace")]) == 0
    assert (tmp_path / "envace/checklist_annotated.json").read_text() == "[]"
    assert data.ENVACE_PARQUETS[0] in caplog.text and data.CM2_CONVERT[0] in caplog.text  # how to build the rest
    monkeypatch.setattr(data, "github_file", lambda repo, commit, path: (tmp_path / "offline" / path).as_uri())
    assert data.main(["cm2", "--dest", str(tmp_path / "none")]) == 1
    assert f"{data.CM2_SAMPLE} of {data.CM2_REPO}@{data.CM2_COMMIT} into {tmp_path / 'none'}" in caplog.text


def test_vitabench2_is_the_hub_dataset_in_the_paper_config_layout(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO)

    def snapshot_download(repo_id, repo_type, local_dir):
        assert (repo_id, repo_type) == (data.VITABENCH2_HUB, "dataset")
        local_dir.mkdir(parents=True)
        (local_dir / "tasks.json").write_text("[]")

    monkeypatch.setattr("huggingface_hub.snapshot_download", snapshot_download)
    monkeypatch.setenv("VITA_DATA", str(tmp_path / "vita"))
    assert data.main(["vitabench2"]) == 0  # paper_rewrite.yaml reads ${oc.env:VITA_DATA}/vita/domains/personalization
    assert (tmp_path / "vita/vita/domains/personalization/tasks.json").is_file()
    assert f"export VITA_DATA={tmp_path / 'vita'}" in caplog.text
