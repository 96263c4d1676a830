"""`make data ENV=webshop|search_qa` (`agentrl_shared.envs.data`): the official files land in the layout the paper
configs read, written whole or not at all; without network the command says where to put them and exits 1. The
downloads themselves are replaced by local files (this machine has no network)."""

import gzip
import json

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
