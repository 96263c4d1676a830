"""Data tests: the three views (spec vad.md 2.1), the procedural generator, benchmark loaders and option scoring."""

import io
import json
import random

import numpy as np
import pytest
from PIL import Image

from vad import data


def _checker(size=200):
    arr = (np.indices((size, size)).sum(0) % 2 * 255).astype(np.uint8)
    return Image.fromarray(np.stack([arr] * 3, -1))


def test_views_crop_and_pixelation():
    img = _checker()
    box = (100, 60, 140, 100)  # 40 x 40 evidence
    views = data.make_views(img, box, crop_context=2.0, degrade_scale=0.1)
    assert views.full.size == (200, 200)
    assert views.plus.size == (80, 80)  # 2x the box, centred (80..160, 40..120)
    assert np.array_equal(np.asarray(views.plus), np.asarray(img.crop((80, 40, 160, 120))))
    minus = np.asarray(views.minus)
    assert views.minus.size == views.plus.size
    # evidence region (20..60 in crop coordinates) is pixelated: 4 x 4 blocks of 10 px, constant inside each block
    region = minus[20:60, 20:60, 0]
    assert all(len(np.unique(region[i : i + 10, j : j + 10])) == 1 for i in range(0, 40, 10) for j in range(0, 40, 10))
    # outside the region x- equals x+
    assert np.array_equal(minus[:20], np.asarray(views.plus)[:20])


def test_views_full_framing_and_edges():
    img = _checker()
    views = data.make_views(img, (0, 0, 30, 30), minus_framing="full")
    assert views.minus.size == img.size and views.plus.size == (60, 60)  # window shifted inside the image
    assert np.array_equal(np.asarray(views.minus)[100:], np.asarray(img)[100:])
    assert not np.array_equal(np.asarray(views.minus)[:30, :30], np.asarray(img)[:30, :30])
    with pytest.raises(ValueError, match="crop, full"):
        data.make_views(img, (0, 0, 30, 30), minus_framing="other")


def test_procedural_rows_deterministic_and_well_formed():
    rows = data.procedural_rows(6, seed=3, image_size=224, detail_size=12)
    again = data.procedural_rows(6, seed=3, image_size=224, detail_size=12)
    for a, b in zip(rows, again):
        assert a["answer"] == b["answer"] and a["prompt"] == b["prompt"]
        assert np.array_equal(np.asarray(a["image"]), np.asarray(b["image"]))
    for row in rows:
        text = row["prompt"][0]["content"]
        assert row["answer"] in "ABCD" and "D. " in text and data.ANSWER_INSTRUCTION in text
        assert row["image"].size == (224, 224) and row["image_plus"].size == (24, 24)


def test_procedural_answer_is_in_the_evidence():
    s = data.procedural_sample(random.Random(0), image_size=224, detail_size=16)
    x1, y1, x2, y2 = s.box
    centre = s.image.getpixel(((x1 + x2) // 2, (y1 + y2) // 2 + 2))
    if s.kind == "colour":
        assert centre == data.COLOURS[s.options["ABCD".index(s.answer)]]


@pytest.mark.parametrize(
    "text, n, expected",
    [("B", 4, "B"), ("(C) red", 4, "C"), ("The answer is D.", 4, "D"), ("I think so", 4, None), ("E", 4, None)],
)
def test_extract_choice(text, n, expected):
    assert data.extract_choice(text, n) == expected


def test_score_answer_and_reward():
    assert data.score_answer("A", "A", 4) == 1.0 and data.score_answer("B", "A", 4) == 0.0
    assert data.score_answer("Yes, there is", "yes", 1) == 1.0 and data.score_answer("no", "yes", 1) == 0.0
    completions = [[{"role": "assistant", "content": "C"}], [{"role": "assistant", "content": "A"}]]
    assert data.choice_accuracy_reward(completions, answer=["C", "B"], num_options=[4, 4]) == [1.0, 0.0]


def _png_bytes(size=(32, 32)):
    buf = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_load_benchmark_hrbench_tsv(tmp_path):
    import base64

    import pandas as pd

    img = base64.b64encode(_png_bytes()).decode()
    rows = [
        {"index": 7, "question": "Colour?", "A": "red", "B": "blue", "C": "x", "D": "y", "answer": "B", "image": img}
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "hr_bench_4k.tsv", sep="\t", index=False)
    items = data.load_benchmark("hrbench_4k", tmp_path)
    assert len(items) == 1 and items[0].answer == "B" and items[0].options == ["red", "blue", "x", "y"]
    assert "B. blue" in items[0].prompt and items[0].image.size == (32, 32)
    with pytest.raises(FileNotFoundError):
        data.load_benchmark("hrbench_8k", tmp_path)
    with pytest.raises(ValueError, match="vstar"):
        data.load_benchmark("nope", tmp_path)


def test_load_benchmark_vstar_and_cvbench_parquet(tmp_path):
    import pandas as pd

    vstar = [{"question_id": 1, "text": "What?\n(A) cat\n(B) dog", "label": "B", "image": {"bytes": _png_bytes()}}]
    pd.DataFrame(vstar).to_parquet(tmp_path / "vstar.parquet")
    item = data.load_benchmark("vstar", tmp_path / "vstar.parquet")[0]
    assert item.options == ["cat", "dog"] and item.answer == "B"
    cv = [
        {"idx": 3, "question": "Which?", "choices": ["a", "b", "c"], "answer": "(C)", "image": {"bytes": _png_bytes()}}
    ]
    pd.DataFrame(cv).to_parquet(tmp_path / "cv.parquet")
    item = data.load_benchmark("cvbench", tmp_path / "cv.parquet")[0]
    assert item.answer == "C" and item.options == ["a", "b", "c"]


def test_load_vision_opd_jsonl(tmp_path):
    Image.new("RGB", (100, 100), (9, 9, 9)).save(tmp_path / "a.png")
    rec = {
        "image": "a.png",
        "question": "What colour?",
        "options": ["red", "grey"],
        "answer": "B",
        "bbox": [10, 10, 30, 30],
    }
    (tmp_path / "train.jsonl").write_text(json.dumps(rec) + "\n")
    rows = data.load_vision_opd(tmp_path)
    assert len(rows) == 1 and rows[0]["answer"] == "B" and rows[0]["image_plus"].size == (40, 40)
    (tmp_path / "train.jsonl").write_text(json.dumps({"image": "a.png", "answer": "B"}) + "\n")
    with pytest.raises(KeyError, match="lacks"):
        data.load_vision_opd(tmp_path)


def _b64_png(size=(32, 32)):
    import base64

    return base64.b64encode(_png_bytes(size)).decode()


def _check_scoring(item):
    """A correct prediction scores 1 and a wrong one 0 by exact option matching (or yes/no, or open exact match)."""
    n = max(len(item.options), 1)
    if item.answer in ("yes", "no"):
        right, wrong = item.answer.capitalize() + ".", "no" if item.answer == "yes" else "yes"
    elif item.options:
        right, wrong = f"({item.answer})", "ABCDEFGH"[:n].replace(item.answer, "")[0]
    else:
        right, wrong = item.answer, item.answer + " 0"
    assert data.score_answer(right, item.answer, n) == 1.0
    assert data.score_answer(wrong, item.answer, n) == 0.0


def test_load_benchmark_hrbench_8k_parquet(tmp_path):
    import pandas as pd

    row = {"index": 1, "question": "Sign?", "A": "stop", "B": "go", "C": "yield", "D": "exit", "answer": "D"}
    pd.DataFrame([{**row, "image": _b64_png((48, 40))}]).to_parquet(tmp_path / "hr_bench_8k.parquet")
    pd.DataFrame([{**row, "answer": "A", "image": _b64_png()}]).to_parquet(tmp_path / "hr_bench_4k.parquet")
    items = data.load_benchmark("hrbench_8k", tmp_path)  # only the 8k file
    assert len(items) == 1 and items[0].answer == "D" and items[0].options == ["stop", "go", "yield", "exit"]
    assert items[0].image.size == (48, 40) and items[0].id == "1" and "D. exit" in items[0].prompt
    _check_scoring(items[0])
    # a real image's base64 string is longer than a file name may be: not a path, no OSError (ENAMETOOLONG)
    assert not data._is_file(tmp_path / ("A" * 300))


@pytest.mark.parametrize("name, question", [("mme_realworld_en", "What colour?"), ("mme_realworld_cn", "什么颜色?")])
def test_load_benchmark_mme_realworld_parquet(tmp_path, name, question):
    import pandas as pd

    # lmms-eval layout: base64 image in `bytes`, options "(A) ..." in `multi-choice options`, answer letter
    rec = {
        "index": 0,
        "question_id": "perception/ocr/1",
        "question": question,
        "multi-choice options": ["(A) red", "(B) blue", "(C) green", "(D) black", "(E) white"],
        "answer": "C",
        "category": "OCR",
        "l2-category": "text",
        "bytes": _b64_png((40, 30)),
    }
    pd.DataFrame([rec]).to_parquet(tmp_path / "test.parquet")
    (item,) = data.load_benchmark(name, tmp_path)
    assert item.options == ["red", "blue", "green", "black", "white"] and item.answer == "C"
    assert item.prompt.startswith(question) and "E. white" in item.prompt and item.category == "OCR"
    assert item.image.size == (40, 30)
    _check_scoring(item)
    pd.DataFrame([{k: v for k, v in rec.items() if k != "bytes"}]).to_parquet(tmp_path / "test.parquet")
    with pytest.raises(KeyError, match="image / bytes"):
        data.load_benchmark(name, tmp_path)


def test_load_benchmark_zoombench_parquet(tmp_path):
    import pandas as pd

    rows = [
        {
            "prompt": "What is written on the tiny sign?\nA. open\nB. closed\nC. sale\nD. exit",
            "answer": "B",
            "image": {"bytes": _png_bytes((64, 48))},
            "crop_image": {"bytes": _png_bytes((16, 16))},
        },
        {
            "prompt": "How many birds sit on the wire?",
            "answer": "4",
            "image": {"bytes": _png_bytes()},
            "crop_image": None,
        },
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "test.parquet")
    mcq, oq = data.load_benchmark("zoombench", tmp_path)
    assert mcq.options == ["open", "closed", "sale", "exit"] and mcq.answer == "B" and mcq.image.size == (64, 48)
    assert mcq.prompt.startswith("What is written on the tiny sign?") and "D. exit" in mcq.prompt
    assert oq.options == [] and oq.answer == "4" and oq.prompt == "How many birds sit on the wire?"
    _check_scoring(mcq)
    _check_scoring(oq)
    assert data.score_answer("4.", "4", 1) == 1.0 and data.score_answer("5", "4", 1) == 0.0


def test_load_benchmark_mmvp_csv_and_image_folder(tmp_path):
    import pandas as pd

    (tmp_path / "MMVP Images").mkdir()
    Image.new("RGB", (36, 24), (5, 5, 5)).save(tmp_path / "MMVP Images" / "1.jpg")
    Image.new("RGB", (36, 24), (5, 5, 5)).save(tmp_path / "MMVP Images" / "2.jpg")
    rows = [
        {"Index": 1, "Question": "Is the door open?", "Options": "(a) Open (b) Closed", "Correct Answer": "(b)"},
        {"Index": 2, "Question": "Which way?", "Options": "(a) Left (b) Right", "Correct Answer": "(a)"},
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "Questions.csv", index=False)
    first, second = data.load_benchmark("mmvp", tmp_path)
    assert first.options == ["Open", "Closed"] and first.answer == "B" and first.id == "1"
    assert second.answer == "A" and second.image.size == (36, 24) and "B. Right" in second.prompt
    _check_scoring(first)
    (tmp_path / "MMVP Images" / "2.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="MMVP Images"):
        data.load_benchmark("mmvp", tmp_path)


def test_load_benchmark_mmstar_parquet(tmp_path):
    import pandas as pd

    rec = {
        "index": 12,
        "question": "Which animal is shown?\nOptions: A: a cat, B: a dog, with a collar, C: a bird, D: a fish",
        "answer": "B",
        "category": "coarse perception",
        "l2_category": "image scene",
        "image": {"bytes": _png_bytes((20, 20))},
    }
    pd.DataFrame([rec]).to_parquet(tmp_path / "mmstar.parquet")
    (item,) = data.load_benchmark("mmstar", tmp_path)
    assert item.options == ["a cat", "a dog, with a collar", "a bird", "a fish"] and item.answer == "B"
    assert item.prompt.startswith("Which animal is shown?") and "D. a fish" in item.prompt and item.id == "12"
    assert item.image.size == (20, 20)
    _check_scoring(item)
    assert data.score_answer("D", item.answer, len(item.options)) == 0.0  # all four letters are valid choices


def test_load_benchmark_pope_parquet(tmp_path):
    import pandas as pd

    rows = [
        {
            "id": "0",
            "question_id": "41",
            "question": "Is there a dog in the image?",
            "answer": "yes",
            "image_source": "COCO_val2014_000000310196",
            "image": {"bytes": _png_bytes()},
            "category": "adversarial",
        },
        {
            "id": "1",
            "question_id": "42",
            "question": "Is there a cat?",
            "answer": "no",
            "image": {"bytes": _png_bytes()},
        },
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "pope.parquet")
    yes, no = data.load_benchmark("pope", tmp_path)
    assert yes.answer == "yes" and no.answer == "no" and yes.options == [] and yes.id == "41"
    assert "single word: yes or no" in yes.prompt and yes.category == "adversarial" and yes.image.size == (32, 32)
    _check_scoring(yes)
    _check_scoring(no)
