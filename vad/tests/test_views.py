"""Views (paper Sec. 3.1), the procedural counterfactual and the Vision-OPD-6K loader (official layout)."""

import json
import random

import numpy as np
import pytest
from PIL import Image

from vad import views


def _checker(size=200):
    arr = (np.indices((size, size)).sum(0) % 2 * 255).astype(np.uint8)
    return Image.fromarray(np.stack([arr] * 3, -1))


def test_views_crop_and_pixelation():
    img = _checker()
    v = views.make_views(img, (100, 60, 140, 100), crop_context=2.0, degrade_scale=0.1)
    assert v.full.size == (200, 200) and v.plus.size == (80, 80)
    assert np.array_equal(np.asarray(v.plus), np.asarray(img.crop((80, 40, 160, 120))))
    minus = np.asarray(v.minus)
    region = minus[20:60, 20:60, 0]  # 4 x 4 blocks of 10 px, constant inside each block
    assert all(len(np.unique(region[i : i + 10, j : j + 10])) == 1 for i in range(0, 40, 10) for j in range(0, 40, 10))
    assert np.array_equal(minus[:20], np.asarray(v.plus)[:20])


def test_views_full_framing_and_edges():
    img = _checker()
    v = views.make_views(img, (0, 0, 30, 30), minus_framing="full")
    assert v.minus.size == img.size and v.plus.size == (60, 60)
    assert np.array_equal(np.asarray(v.minus)[100:], np.asarray(img)[100:])
    with pytest.raises(ValueError, match="crop, full"):
        views.make_views(img, (0, 0, 30, 30), minus_framing="other")


@pytest.mark.parametrize(
    "task",
    [
        {"image_size": 448, "detail_size": 10, "cell": 1, "degrade_scale": 0.1},  # 1 px texture (default)
        {"image_size": 224, "detail_size": 20, "cell": 10, "degrade_scale": 0.05},  # 10 px cells anywhere
        {
            "image_size": 112,
            "detail_size": 28,
            "cell": 14,
            "align": 28,
            "distractors": 6,
            "crop_context": 3.0,
            "degrade_scale": 0.036,
        },  # the CPU task
    ],
    ids=["fine", "coarse", "cpu"],
)
def test_procedural_counterfactual_removes_the_evidence(task):
    """No sample has x+ == x-, and x- is the same image whatever the answer (the answer cannot be read from it)."""
    scale, context = task["degrade_scale"], task.get("crop_context", 2.0)
    size = {k: v for k, v in task.items() if k not in ("degrade_scale", "crop_context")}
    for seed in range(200):
        sample = views.procedural_sample(random.Random(seed), **size)
        v = views.make_views(sample.image, sample.box, crop_context=context, degrade_scale=scale)
        assert not np.array_equal(np.asarray(v.plus), np.asarray(v.minus)), seed
        if seed >= 40:  # the answer-independence check on the first 40 samples (it renders each 3 more times)
            continue
        minus, plus = [], []
        for pattern in views.PATTERNS:
            alt = views.procedural_sample(random.Random(seed), pattern=pattern, **size)
            assert alt.box == sample.box and alt.question == sample.question
            w = views.make_views(alt.image, alt.box, crop_context=context, degrade_scale=scale)
            minus.append(np.asarray(w.minus).astype(int))
            plus.append(np.asarray(w.plus).astype(int))
        # x-: identical up to rounding (<= 2 levels) for every answer; x+: the answers differ by full colour steps
        assert max(np.abs(m - minus[0]).max() for m in minus) <= 2, seed
        assert min(np.abs(p - q).max() for i, p in enumerate(plus) for q in plus[i + 1 :]) > 50, seed


def test_procedural_fixed_options_and_bad_cell():
    for letter, pattern in zip("ABC", views.PATTERNS):
        s = views.procedural_sample(random.Random(0), shuffle_options=False, pattern=pattern)
        assert s.options == list(views.PATTERNS) and s.answer == letter
    with pytest.raises(ValueError, match="even number of cells"):
        views.procedural_sample(random.Random(0), detail_size=20, cell=3)


def test_procedural_aligned_patch_on_the_grid():
    corners = set()
    for seed in range(100):
        s = views.procedural_sample(random.Random(seed), image_size=224, detail_size=56, cell=28, align=56)
        x1, y1, x2, y2 = s.box
        assert x1 % 56 == 0 and y1 % 56 == 0 and x2 <= 224 and y2 <= 224 and x2 - x1 == 56, s.box
        corners.add((x1, y1))
    assert len(corners) == 16  # every cell of the 4 x 4 grid is used


def test_procedural_distractors_away_from_the_patch():
    """The CPU task: 6 flat one-colour look-alikes in x0, none in the patch's 3 x 3 neighbourhood of 28 px tokens, so
    the crop x+ (context 3, the patch in one whole token) holds fewer of them than x0 (none when the crop is not
    shifted by the image border)."""
    in_plus = []
    for seed in range(50):
        s = views.procedural_sample(random.Random(seed), image_size=112, detail_size=28, cell=14, align=28,
                                    distractors=6, colours=["black", "white"])  # fmt: skip
        flat = _flat_tokens(np.asarray(s.image), 4)
        assert len(flat) >= 6 and all(max(abs(i - s.box[1] // 28), abs(j - s.box[0] // 28)) > 1 for i, j in flat)
        window = views.crop_window(s.box, 112, 112, context=3.0)
        assert (s.box[0] - window[0]) % 28 == 0 and (s.box[1] - window[1]) % 28 == 0, (seed, s.box, window)
        in_plus.append(len(_flat_tokens(np.asarray(views.make_views(s.image, s.box, crop_context=3.0).plus), 3)))
        if window == (s.box[0] - 28, s.box[1] - 28, s.box[2] + 28, s.box[3] + 28):  # not shifted
            assert in_plus[-1] == 0, seed
    assert max(in_plus) < 6 and sum(in_plus) < 6 * 50 / 2, in_plus
    with pytest.raises(ValueError, match="free grid cells"):
        views.procedural_sample(random.Random(0), image_size=112, detail_size=28, cell=14, align=28, distractors=12)


def test_x0_contrast_lowers_x0_only():
    """`x0_contrast` pulls x0 toward mid-grey and leaves x+ and x- (cut from the unchanged image) as they were; the
    texture stays in x0 (its two colours remain distinct) and the same rows come out otherwise."""
    task = {"image_size": 112, "detail_size": 28, "cell": 14, "align": 28, "distractors": 6,
            "colours": ["black", "white"], "shuffle_options": False, "crop_context": 3.0, "degrade_scale": 0.036}  # fmt: skip
    clean, low = views.procedural_rows(20, seed=3, **task), views.procedural_rows(20, seed=3, x0_contrast=0.1, **task)
    for a, b in zip(clean, low, strict=True):
        assert a["answer"] == b["answer"] and a["prompt"] == b["prompt"]
        assert np.array_equal(np.asarray(a["image_plus"]), np.asarray(b["image_plus"]))
        assert np.array_equal(np.asarray(a["image_minus"]), np.asarray(b["image_minus"]))
        x0, x0_low = np.asarray(a["image"]).astype(int), np.asarray(b["image"]).astype(int)
        assert np.abs(x0_low - np.rint(128 + 0.1 * (x0 - 128))).max() == 0
        assert x0_low.min() >= 116 and x0_low.max() <= 140 and len(np.unique(x0_low)) > 2
    assert views.low_contrast(clean[0]["image"], 1.0) is clean[0]["image"]


def _flat_tokens(image: np.ndarray, n: int) -> list[tuple[int, int]]:
    """(row, column) of the 28 px tokens of an n x n-token image filled with the flat black or white of the patch."""
    tokens = image.reshape(n, 28, n, 28, 3)
    return [(i, j) for i in range(n) for j in range(n) if len(np.unique(tokens[i, :, j].reshape(-1, 3), axis=0)) == 1
            and tuple(tokens[i, 0, j, 0]) in (views.COLOURS["black"], views.COLOURS["white"])]  # fmt: skip


def test_procedural_rows_deterministic_and_well_formed():
    rows = views.procedural_rows(6, seed=3, image_size=224)
    again = views.procedural_rows(6, seed=3, image_size=224)
    for a, b in zip(rows, again):
        assert a["answer"] == b["answer"] and a["prompt"] == b["prompt"]
        assert np.array_equal(np.asarray(a["image"]), np.asarray(b["image"]))
    for row in rows:
        text = row["prompt"][0]["content"]
        assert row["answer"] in "ABC" and "(C) " in text and text.endswith("directly.")
        assert row["image"].size == (224, 224) and row["image_plus"].size == (20, 20)


def _vision_opd(tmp_path, n=3, teacher=True):
    (tmp_path / "images").mkdir()
    (tmp_path / "teacher_images").mkdir()
    with (tmp_path / "train.jsonl").open("w") as f:
        for i in range(n):
            Image.new("RGB", (120, 90), (i, 2, 3)).save(tmp_path / "images" / f"{i}.jpg")
            _checker(40).save(tmp_path / "teacher_images" / f"{i}.png")
            rec = {
                "images": [f"images/{i}.jpg"],
                "problem": "<image>\nWhat is on the sign?\nA. stop\nB. go",
                "answer": "B",
                "extra_info": {"id": i},
            }
            if teacher:
                rec["teacher_images"] = [f"teacher_images/{i}.png"]
            f.write(json.dumps(rec) + "\n")
    # a second file in the folder is not read: one file per split
    (tmp_path / "other.jsonl").write_text("not json\n")


def test_vision_opd_official_layout_lazy(tmp_path):
    _vision_opd(tmp_path)
    ds = views.load_vision_opd(tmp_path, limit=2)
    assert len(ds) == 2 and ds.column_names == ["problem", "image_path", "teacher_path", "bbox", "answer"]
    row = ds[1]  # decoded on access
    assert row["prompt"] == [{"role": "user", "content": "What is on the sign?\nA. stop\nB. go"}]
    assert row["image"].size == (120, 90) and row["image_plus"].size == (40, 40) and row["answer"] == "B"
    # x- keeps x+'s framing (the shipped crop) with the evidence pixelated: same size, 4 x 4 flat blocks
    minus = np.asarray(row["image_minus"])
    assert row["image_minus"].size == row["image_plus"].size
    assert not np.array_equal(minus, np.asarray(row["image_plus"])) and len(np.unique(minus[:10, :10])) == 1


def test_vision_opd_errors_are_one_line(tmp_path):
    _vision_opd(tmp_path, teacher=False)
    with pytest.raises(views.DataError, match="teacher_images or bbox"):
        views.load_vision_opd(tmp_path)
    with pytest.raises(views.DataError, match="huggingface-cli download"):
        views.load_vision_opd(tmp_path / "missing")


def test_vision_opd_minus_full_needs_box(tmp_path):
    _vision_opd(tmp_path)
    ds = views.load_vision_opd(tmp_path, minus_framing="full")
    with pytest.raises(views.DataError, match="minus_framing=crop"):
        ds[0]
