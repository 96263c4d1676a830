"""Repository-wide rules that keep `uv run pytest` at the root working: one pytest session collects every package."""

from collections import Counter
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def test_test_file_names_are_unique_across_packages():
    # pytest's default rootdir-relative import mode imports test modules by basename: two packages with the same
    # test file name stop a root-level collection with "import file mismatch"
    names = Counter(p.name for p in ROOT.glob("*/tests/**/test_*.py") if ".venv" not in p.parts)
    assert len(names) > 20
    assert [n for n, k in names.items() if k > 1] == []


def test_results_files_never_hold_a_secret(tmp_path):
    import json

    from agentrl_shared.evaluation import write_results
    from agentrl_shared.provenance import redact

    payload = {
        "command": "envace eval --benchmark tau2 --harness-args '--api-key sk-abcdefghijklmnop --user-url http://x'",
        "env": {"judge_api_key": "s3cret", "hub_token": None, "url": "http://h/v1?token=abc123&x=1"},
        "headers": ["Authorization: Bearer eyJhbGciOi"],
        "hf": "hf_ABCDEFGHIJKLMNOP",
        "score": 0.5,
    }
    write_results(tmp_path / "results.json", payload)
    text = (tmp_path / "results.json").read_text()
    for secret in ("sk-abcdefghijklmnop", "s3cret", "abc123", "eyJhbGciOi", "hf_ABCDEFGHIJKLMNOP"):
        assert secret not in text
    out = json.loads(text)
    assert out["env"]["hub_token"] is None and out["score"] == 0.5 and "--user-url http://x" in out["command"]
    assert redact({"api_key": ""}) == {"api_key": ""}  # nothing to hide
