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
