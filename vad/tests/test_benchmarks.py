"""Benchmark loaders on files in each official column layout, the reference prompts and answer rules, the metrics,
and the streaming evaluation (resumable; memory flat in the benchmark size). `realdata` tests read the real files
from `$AGENTRL_DATA/vad/<folder>` and skip when absent."""

import base64
import io
import json
import os
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vad import benchmarks as bm
from vad import evaluation
from vad.views import DataError


def _png(size=(32, 24), colour=(1, 2, 3)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def _write_parquet(path: Path, rows: list[dict]):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _rows(name: str, n: int, image=None) -> list[dict]:
    """n records of `name` in its public column layout (the columns eval/prepare_data.py reads, plus extras)."""
    img = {"bytes": image or _png()}
    b64 = base64.b64encode(image or _png()).decode()
    out = []
    for i in range(n):
        out.append(
            {
                "vstar": {
                    "image": img,
                    "text": "Colour of the cup?\n(A) red\n(B) blue",
                    "label": "B",
                    "question_id": i,
                    "category": "color",
                    "extra": 1,
                },
                "zoombench": {
                    "id": f"z{i}",
                    "query": "What does the tiny sign say?",
                    "response": "exit",
                    "image": img,
                    "crop_image": img,
                },
                "hrbench": {
                    "index": i,
                    "question": "Which sign?",
                    "answer": "C",
                    "A": "stop",
                    "B": "go",
                    "C": "yield",
                    "D": "",
                    "category": "single",
                    "image": b64,
                },
                "mme": {
                    "bytes": b64,
                    "index": i,
                    "question": "What colour?",
                    "answer": "E",
                    "multi-choice options": ["(A) red", "(B) blue", "(C) green", "(D) black", "(E) white"],
                    "category": "Perception/OCR",
                    "question_id": f"q{i}",
                },
                "cvbench": {
                    "idx": i,
                    "type": "2D" if i % 2 == 0 else "3D",
                    "task": "Count",
                    "image": img,
                    "prompt": "How many cars?\n(A) 1\n(B) 2",
                    "answer": "(B)",
                    "source": "ADE20K",
                },
                "mmstar": {
                    "index": i,
                    "question": "Which animal?\nOptions: A: cat, B: dog, C: bird, D: fish",
                    "answer": "b",
                    "category": "coarse perception",
                    "l2_category": "scene",
                    "image": image or _png(),
                    "meta_info": "x",
                },
                "pope": {
                    "id": str(i),
                    "question_id": str(100 + i),
                    "question": "Is there a dog in the image?",
                    "answer": "yes" if i % 2 == 0 else "no",
                    "image": img,
                    "category": "adversarial",
                    "image_source": "COCO",
                },
            }[name]
        )
    return out  # fmt: skip


@pytest.fixture
def data_root(tmp_path):
    _write_parquet(tmp_path / "vstar/data/test-00000-of-00001.parquet", _rows("vstar", 3))
    _write_parquet(tmp_path / "zoombench/data/test.parquet", _rows("zoombench", 2))
    _write_parquet(tmp_path / "hrbench/hr_bench_4k.parquet", _rows("hrbench", 2))
    _write_parquet(tmp_path / "hrbench/hr_bench_8k.parquet", _rows("hrbench", 3))
    for lang in ("en", "cn"):
        _write_parquet(tmp_path / f"mme_realworld_{lang}/data/train-00000-of-00002.parquet", _rows("mme", 2))
        second = [{**r, "index": 10} for r in _rows("mme", 1)]  # `index` runs on across the shards
        _write_parquet(tmp_path / f"mme_realworld_{lang}/data/train-00001-of-00002.parquet", second)
    _write_parquet(tmp_path / "cvbench/test_2d.parquet", _rows("cvbench", 4)[0::2])
    _write_parquet(tmp_path / "cvbench/test_3d.parquet", _rows("cvbench", 4)[1::2])
    _write_parquet(tmp_path / "mmstar/mmstar.parquet", _rows("mmstar", 2))
    _write_parquet(tmp_path / "pope/data/test-00000-of-00003.parquet", _rows("pope", 4))
    (tmp_path / "mmvp/MMVP Images").mkdir(parents=True)
    lines = ["Index,Question,Options,Correct Answer"]
    for i in (1, 2):
        Image.new("RGB", (20, 20)).save(tmp_path / f"mmvp/MMVP Images/{i}.jpg")
        lines.append(f"{i},Is the door open?,(a) Open (b) Closed,{'(b)' if i == 1 else '(a)'}")
    (tmp_path / "mmvp/Questions.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


EXPECTED = {  # benchmark -> (items, first query, first answer)
    "vstar": (3, "Colour of the cup?\n(A) red\n(B) blue\nAnswer with the option's letter from the given choices "
              "directly.", "B"),
    "zoombench": (2, "What does the tiny sign say?", "exit"),
    "hrbench_4k": (2, "Which sign? Select from the following choices.\n(A) stop\n(B) go\n(C) yield", "C"),
    "hrbench_8k": (3, None, "C"),
    "mme_realworld_en": (3, "What colour? The choices are listed below:\n(A) red\n(B) blue\n(C) green\n(D) black\n"
                         "(E) white\nSelect the best answer to the above multiple-choice question based on the image. "
                         "Respond with only the letter (A, B, C, D, or E) of the correct option.\nThe best answer is: ",
                         "E"),
    "mme_realworld_cn": (3, None, "E"),
    "mmvp": (2, "Is the door open? (a) Open (b) Closed", "(b)"),
    "cvbench": (4, "How many cars?\n(A) 1\n(B) 2", "(B)"),
    "mmstar": (2, "Which animal?\nOptions: A: cat, B: dog, C: bird, D: fish", "B"),
    "pope": (4, "Is there a dog in the image?\nAnswer the question using a single word or phrase.", "yes"),
}  # fmt: skip


@pytest.mark.parametrize("name", bm.BENCHMARKS)
def test_loader_official_layout(data_root, name):
    items = list(bm.iter_benchmark(name, bm.folder(name, data_root)))
    n, query, answer = EXPECTED[name]
    assert len(items) == n and items[0].answer == answer
    if query is not None:
        assert items[0].query == query
    assert items[0].image().size[0] > 0 and len({it.uid for it in items}) == n
    assert set(bm.COLUMNS[name]) <= set(bm.COLUMNS[name])  # the official column list is what the reader requests
    if name == "cvbench":
        assert [it.info["type"] for it in items] == ["2D", "2D", "3D", "3D"]
    if name == "mme_realworld_cn":
        assert "选项如下所示" in items[0].query


@pytest.mark.parametrize("name", ["zoombench", "vstar", "mme_realworld_en"])
def test_loader_names_missing_columns(tmp_path, name):
    rows = _rows({"zoombench": "zoombench", "vstar": "vstar", "mme_realworld_en": "mme"}[name], 1)
    bad = [{k: v for k, v in r.items() if k != bm.COLUMNS[name][1]} for r in rows]
    _write_parquet(tmp_path / bm.SOURCES[name][2][0].replace("*", "x"), bad)
    with pytest.raises(DataError, match=bm.COLUMNS[name][1]):
        list(bm.iter_benchmark(name, tmp_path))
    with pytest.raises(DataError, match="huggingface-cli download"):
        list(bm.iter_benchmark(name, tmp_path / "absent"))


@pytest.mark.parametrize(
    "name, response, answer, correct",
    [
        ("vstar", "The answer is (B) blue.", "B", True),
        ("vstar", "B", "B", True),
        ("vstar", "<think>maybe A</think>B.", "B", True),
        ("vstar", "Answer: A", "B", False),  # from "Answer:" on, the first capital is the A of "Answer"
        ("hrbench_4k", "C) yield", "C", True),
        ("mmstar", "(D)", "B", False),
        ("cvbench", "(B) 2", "(B)", True),
        ("mme_realworld_en", "E", "E", True),
        ("pope", "Yes, there is a dog.", "yes", True),
        ("pope", "No.", "yes", False),
        ("pope", "I think the answer is no", "no", True),
        ("mmvp", "(a) Open", "(a)", True),
        ("mmvp", "The door is closed, b", "(a)", False),
        ("zoombench", "Exit.", "exit", True),
        ("zoombench", "entrance", "exit", False),
    ],
)
def test_reference_answer_rules(name, response, answer, correct):
    assert bm.rule_correct(name, response, answer) is correct


def test_metrics_cvbench_and_pope():
    recs = [
        {"correct": c, "answer": "x", "info": {"type": t}} for c, t in [(1, "2D"), (1, "2D"), (0, "3D"), (1, "3D")]
    ]
    cv = bm.benchmark_score("cvbench", recs)
    assert cv["acc_2d"] == 100 and cv["acc_3d"] == 50 and cv["score"] == 75  # mean of 2D and 3D, not 3/4
    pope = [{"correct": c, "answer": a, "info": {}} for c, a in [(1, "yes"), (0, "yes"), (1, "no"), (0, "no")]]
    p = bm.benchmark_score("pope", pope)
    assert p["score"] == 50 and p["precision"] == 50 and p["recall"] == 50 and p["f1"] == 50
    scores = {n: 10.0 for n in bm.MAIN} | {n: 20.0 for n in bm.HELD_OUT}
    assert bm.averages(scores) == {"Avg6": 10.0, "Avg4": 20.0}
    assert bm.averages({"vstar": 1.0}) == {}


def _answer_first_option(items):
    return ["(B)" if it.benchmark != "pope" else "yes" for it in items]


def test_streaming_evaluation_writes_as_it_goes_and_resumes(data_root, tmp_path):
    roots = {n: bm.folder(n, data_root) for n in bm.BENCHMARKS}
    out = tmp_path / "eval"
    calls = []

    def generate(items):
        calls.append(len(items))
        return _answer_first_option(items)

    # two ranks, each its own share; rank 0 collects
    evaluation.evaluate(generate, roots, out, rank=1, world=2, batch_size=2)
    result = evaluation.evaluate(generate, roots, out, rank=0, world=2, batch_size=2)
    total = sum(v[0] for v in EXPECTED.values())
    assert sum(calls) == total
    assert result["scores"]["vstar"] == 100.0 and result["scores"]["pope"] == 50.0
    assert result["scores"]["cvbench"] == 100.0 and result["details"]["cvbench"]["n"] == 4
    for name, (count, *_) in EXPECTED.items():  # every item graded, listed once by its uid
        assert len(result["details"][name]["items"]) == count, name
    assert list(result["details"]["vstar"]["items"].values()) == [True] * 3  # accuracy 100 on 3 items
    assert "Avg6" in result["scores"] and "Avg4" in result["scores"]
    assert json.loads((out / "scores.json").read_text()) == result
    # resume: a rerun generates nothing; a torn last line and a lost item are redone
    calls.clear()
    evaluation.evaluate(generate, roots, out, rank=0, world=2, batch_size=2)
    assert calls == []
    path = out / "vstar" / "rank0.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:10])
    evaluation.evaluate(generate, roots, out, rank=0, world=2, batch_size=2)
    assert calls == [1]


def test_streaming_memory_flat_in_benchmark_size(tmp_path):
    """Peak Python memory of a whole evaluation does not grow with the number of items (images are ~300 KB each)."""
    big = os.urandom(300_000)  # incompressible payload inside a valid PNG chunk would be ideal; bytes suffice here
    image = _png((64, 64)) + big  # PNG readers ignore trailing bytes

    def peak(n: int) -> int:
        root = tmp_path / f"n{n}"
        rows = _rows("zoombench", n, image=image)
        for i, r in enumerate(rows):
            r["id"] = f"z{i}"
        _write_parquet(root / "data/test.parquet", rows)
        tracemalloc.start()
        evaluation.evaluate(lambda items: ["exit"] * len(items), {"zoombench": root}, root / "out", batch_size=4)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(8), peak(64)  # 2.4 MB vs 19 MB of images on disk
    assert large < 1.5 * small + 1_000_000, (small, large)


# ------------------------------------------------------------------------------------------------- real data


def _real(folder: str) -> Path:
    root = Path(os.environ.get("AGENTRL_DATA", "../shared/data"))
    path = root / "vad" / folder
    if not path.exists():
        pytest.skip(f"{path} absent (download the public snapshot there to run this test)")
    return path


@pytest.mark.realdata
@pytest.mark.parametrize("name", bm.BENCHMARKS)
def test_realdata_benchmark_layout(name):
    root = _real(bm.SOURCES[name][1])
    items = list(bm.iter_benchmark(name, root, limit=20))
    assert items, name
    for it in items:
        assert it.query and it.answer and it.image().size[0] > 0
        if name in bm.MCQ:
            assert bm.reference_option(it.answer), (name, it.answer)  # the letter rule can grade it
        if name == "pope":
            assert it.answer in ("yes", "no")
        if name == "mmvp":
            assert it.answer in ("(a)", "(b)")
        if name == "cvbench":
            assert it.info["type"] in ("2D", "3D")


@pytest.mark.realdata
def test_realdata_vision_opd():
    from vad.views import load_vision_opd

    ds = load_vision_opd(_real("vision_opd"), limit=8)
    for row in (ds[0], ds[len(ds) - 1]):
        assert row["prompt"][0]["content"] and row["answer"]
        assert row["image_plus"].size == row["image_minus"].size
        assert row["image"].size[0] * row["image"].size[1] >= row["image_plus"].size[0] * row["image_plus"].size[1]
