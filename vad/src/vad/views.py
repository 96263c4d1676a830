"""VAD's views and training rows (paper arXiv 2607.28590, Sec. 3.1 views, Sec. 4.1 data).

- Views of one sample: x0 (full image, the student's input), x+ (the evidence-centred crop) and x- (the same framing
  with the evidence pixelated: downsampled to 0.1x with bilinear interpolation, upsampled back with nearest).
- Training rows for TRL's GRPOTrainer: the Vision-OPD-6K release (`train.jsonl` of HF `yuanqianhao/Vision-OPD-6K`,
  read as the official preparation script does: VisionOPD/Vision-OPD @ c2e345f, `scripts/prepare_data.py`), decoded
  lazily, and a procedural generator of fine-grained questions for CPU runs whose x- provably removes the evidence.
"""

import json
import random
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from PIL import Image, ImageDraw


MINUS_FRAMINGS = ("crop", "full")
Box = tuple[float, float, float, float]  # (x1, y1, x2, y2) in pixels


class DataError(ValueError):
    """A data file or record the loaders cannot use; the message names the problem and the fix."""


# ----------------------------------------------------------------------------------------------------------- views


def clamp_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """Integer box inside the image, at least one pixel wide and high."""
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    x1, y1 = min(max(x1, 0), width - 1), min(max(y1, 0), height - 1)
    x2, y2 = min(max(x2, x1 + 1), width), min(max(y2, y1 + 1), height)
    return x1, y1, x2, y2


def crop_window(box: Box, width: int, height: int, *, context: float = 2.0) -> tuple[int, int, int, int]:
    """The evidence-centred window: the box scaled by `context` about its centre, shifted inside the image.

    UNCERTAIN (paper Sec. 3.1 "2x2 crop view that keeps fine-grained evidence"): read as a window `context` times the
    box's side around the evidence. Vision-OPD-6K ships its own crop (`teacher_images`), which is then used as is.
    """
    x1, y1, x2, y2 = clamp_box(box, width, height)
    cw, ch = min(width, max(1, round((x2 - x1) * context))), min(height, max(1, round((y2 - y1) * context)))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    left = int(min(max(round(cx - cw / 2), 0), width - cw))
    top = int(min(max(round(cy - ch / 2), 0), height - ch))
    return left, top, left + cw, top + ch


def degrade_region(image: Image.Image, box: Box, *, scale: float = 0.1) -> Image.Image:
    """x- (Sec. 3.1): the region downsampled to `scale` with bilinear interpolation, upsampled back with nearest."""
    out = image.copy()
    x1, y1, x2, y2 = clamp_box(box, image.width, image.height)
    region = out.crop((x1, y1, x2, y2))
    small = region.resize((max(1, round(region.width * scale)), max(1, round(region.height * scale))), Image.BILINEAR)
    out.paste(small.resize(region.size, Image.NEAREST), (x1, y1))
    return out


@dataclass
class Views:
    """The three views of one sample: `full` = x0, `plus` = x+, `minus` = x-."""

    full: Image.Image
    plus: Image.Image
    minus: Image.Image


def make_views(
    image: Image.Image, box: Box, *, crop_context: float = 2.0, degrade_scale: float = 0.1, minus_framing: str = "crop"
) -> Views:
    """Build x0, x+ and x- from an image and its evidence box (pixels).

    `minus_framing` (UNCERTAIN, Sec. 3.1): `crop` = x+'s framing with the evidence pixelated (default), `full` = the
    full image with the evidence pixelated.
    """
    image = image.convert("RGB")
    window = crop_window(box, image.width, image.height, context=crop_context)
    plus = image.crop(window)
    if minus_framing == "crop":
        local = (box[0] - window[0], box[1] - window[1], box[2] - window[0], box[3] - window[1])
        minus = degrade_region(plus, local, scale=degrade_scale)
    elif minus_framing == "full":
        minus = degrade_region(image, box, scale=degrade_scale)
    else:
        raise ValueError(f"Unknown minus framing {minus_framing!r}; valid: {', '.join(MINUS_FRAMINGS)}.")
    return Views(full=image, plus=plus, minus=minus)


def views_from_crop(
    image: Image.Image,
    crop: Image.Image,
    *,
    crop_box: Box | None = None,
    full_box: Box | None = None,
    degrade_scale: float = 0.1,
    minus_framing: str = "crop",
) -> Views:
    """Views when the data ships the teacher crop x+ (Vision-OPD-6K `teacher_images`).

    x- keeps x+'s framing (`minus_framing=crop`): the evidence box inside the crop (`crop_box`, crop pixels) is
    pixelated, or the whole crop when the data gives no box (the crop is the evidence). `minus_framing=full` pixelates
    `full_box` (full-image pixels) in x0 and fails when the record has no box.
    """
    image, crop = image.convert("RGB"), crop.convert("RGB")
    if minus_framing == "crop":
        minus = degrade_region(crop, crop_box or (0, 0, crop.width, crop.height), scale=degrade_scale)
    elif minus_framing == "full":
        if full_box is None:
            raise DataError("minus_framing=full needs an evidence box in the record (`bbox`); use minus_framing=crop.")
        minus = degrade_region(image, full_box, scale=degrade_scale)
    else:
        raise ValueError(f"Unknown minus framing {minus_framing!r}; valid: {', '.join(MINUS_FRAMINGS)}.")
    return Views(full=image, plus=crop, minus=minus)


def user_prompt(text: str) -> list[dict]:
    """A conversational prompt; TRL inserts the image in front of the text (single-image VLM path)."""
    return [{"role": "user", "content": text}]


# ------------------------------------------------------------------------------------------ Vision-OPD-6K loader


def _bbox(rec: dict) -> Box | None:
    """An evidence box `[x1, y1, x2, y2]` from `bbox` or `extra_info.bbox`, when the record carries one."""
    box = rec.get("bbox")
    if box is None and isinstance(rec.get("extra_info"), dict):
        box = rec["extra_info"].get("bbox")
    return None if box is None else tuple(float(v) for v in box)


def _vision_opd_transform(batch: dict, *, root: Path, degrade_scale: float, minus_framing: str, crop_context: float):
    """Decode one batch of Vision-OPD-6K records into GRPOTrainer rows (runs on access: images load lazily)."""
    out = {k: [] for k in ("prompt", "image", "image_plus", "image_minus", "answer")}
    for problem, image_path, teacher_path, box, answer in zip(
        batch["problem"], batch["image_path"], batch["teacher_path"], batch["bbox"], batch["answer"], strict=True
    ):
        image = Image.open(root / image_path).convert("RGB")
        box = None if box is None else tuple(box)
        if teacher_path:
            views = views_from_crop(
                image, Image.open(root / teacher_path), full_box=box, degrade_scale=degrade_scale,
                minus_framing=minus_framing,
            )  # fmt: skip
        else:
            views = make_views(
                image, box, crop_context=crop_context, degrade_scale=degrade_scale, minus_framing=minus_framing
            )
        out["prompt"].append(user_prompt(problem))
        out["image"].append(views.full)
        out["image_plus"].append(views.plus)
        out["image_minus"].append(views.minus)
        out["answer"].append(answer)
    return out


def vision_opd_file(path: str | Path) -> Path:
    """The one training file: `path` itself, or `train.jsonl` inside the dataset folder (the official release)."""
    path = Path(path)
    file = path / "train.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise DataError(
            f"Vision-OPD-6K not found at {file}. Download it with `huggingface-cli download --repo-type dataset "
            "yuanqianhao/Vision-OPD-6K --local-dir <dir>`, extract images/ and teacher_images/, and pass "
            "data.path=<dir> (or put it at $AGENTRL_DATA/vad/vision_opd)."
        )
    return file


def load_vision_opd(
    path: str | Path,
    *,
    limit: int | None = None,
    crop_context: float = 2.0,
    degrade_scale: float = 0.1,
    minus_framing: str = "crop",
):
    """Vision-OPD-6K (6,241 rows) as a lazily decoded `datasets.Dataset` of GRPOTrainer rows.

    Each `train.jsonl` record has `images` ([x0 path]), `teacher_images` ([x+ crop path]), `problem` (the user text
    with an `<image>` placeholder) and `answer` (VisionOPD/Vision-OPD @ c2e345f, `scripts/prepare_data.py`: the
    student prompt is `problem`, the teacher sees the same text with its image swapped, `verl/trainer/ppo/
    ray_trainer.py::_swap_images_in_messages`). Paths are relative to the file's folder. Only the text is read here;
    images are opened when a row is accessed. A record without `teacher_images` needs a `bbox` to build x+.

    Returns:
        `datasets.Dataset` with columns `prompt`, `image` (x0), `image_plus` (x+), `image_minus` (x-), `answer`.
    """
    from datasets import Dataset

    file = vision_opd_file(path)
    records = []
    with file.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if limit is not None and len(records) >= limit:
                break
            if not line.strip():
                continue
            rec = json.loads(line)
            missing = [k for k in ("images", "problem", "answer") if not rec.get(k)]
            teacher = (rec.get("teacher_images") or [None])[0]
            if teacher is None and _bbox(rec) is None:
                missing.append("teacher_images or bbox")
            if missing:
                raise DataError(
                    f"{file.name} line {i + 1} lacks {', '.join(missing)} (fields present: {sorted(rec)}); expected the "
                    "Vision-OPD-6K layout: images[], teacher_images[], problem, answer."
                )
            records.append(
                {
                    "problem": re.sub(r"\s*<image>\s*", "\n", rec["problem"]).strip(),
                    "image_path": rec["images"][0],
                    "teacher_path": teacher,
                    "bbox": None if _bbox(rec) is None else list(_bbox(rec)),
                    "answer": str(rec["answer"]).strip(),
                }
            )
    if not records:
        raise DataError(f"{file} has no records.")
    dataset = Dataset.from_list(records)
    dataset.set_transform(
        partial(
            _vision_opd_transform, root=file.parent, degrade_scale=degrade_scale, minus_framing=minus_framing,
            crop_context=crop_context,
        )
    )  # fmt: skip
    return dataset


# -------------------------------------------------------------------------------------- procedural generator


LETTERS = "ABCDEFGH"
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (30, 60, 220),
    "yellow": (235, 210, 20),
    "purple": (140, 40, 170),
    "black": (15, 15, 15),
    "white": (245, 245, 245),
}
# Two-colour textures with equal colour shares whose alternating sums cancel under a filter symmetric about the
# patch centre: pixelating the patch to one pixel (0.1x of a 10 px patch) gives the same colour for each of them.
# `cell` = stripe / square width in pixels; an even number of cells per side keeps the cancellation exact.
PATTERNS = {
    "horizontal stripes": lambda x, y, cell: y // cell % 2,
    "vertical stripes": lambda x, y, cell: x // cell % 2,
    "checkerboard": lambda x, y, cell: (x // cell + y // cell) % 2,
}


@dataclass
class ProceduralSample:
    """A generated fine-grained question with its known evidence box."""

    image: Image.Image
    box: Box
    question: str
    options: list[str]
    answer: str  # letter


def procedural_sample(
    rng: random.Random,
    *,
    image_size: int = 448,
    detail_size: int = 10,
    cell: int = 1,
    shuffle_options: bool = True,
    colours: list[str] | None = None,
    pattern: str | None = None,
    align: int = 1,
    distractors: int = 0,
) -> ProceduralSample:
    """One cluttered image with a small two-colour patch; the question asks for the patch's texture.

    The texture (stripes or checkerboard of `cell`-pixel cells, an even number per side) is visible in the evidence
    crop x+; with 1-pixel cells it is lost in the downscaled full image. Every texture has the same two colours in
    equal shares and swaps them under a mirror about the patch centre, so x- (the patch pixelated to one pixel) is the
    same flat colour whatever the answer (`pattern` forces the texture without changing any other pixel).
    `align` > 1 puts the patch's corner on that pixel grid anywhere in the image (the ViT patch grid of the
    processed x0 when `align` is the patch size times the processor's downscale), else anywhere away from the border.
    `distractors` (needs `align` > 1) paints that many flat squares of the patch's size, each in one of its two colours,
    on grid cells outside the patch's 3 x 3 neighbourhood: look-alikes of one colour, never a texture, that an
    evidence crop of `crop_context` 3 leaves out unless the image border shifts it onto them.
    `shuffle_options=False` keeps the options in `PATTERNS` order, so the letter names the texture; `colours` fixes the
    two colours (names in `COLOURS`; default: a random pair per sample).
    """
    if colours is not None and (len(colours) != 2 or not set(colours) <= set(COLOURS)):
        raise ValueError(f"colours must be two of {', '.join(COLOURS)}; got {colours}.")
    if detail_size % (2 * cell):
        raise ValueError(f"detail_size {detail_size} must be an even number of cells of {cell} px.")
    img = Image.new("RGB", (image_size, image_size), tuple(rng.randint(170, 230) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    for _ in range(40):  # clutter
        x, y, s = rng.randrange(image_size), rng.randrange(image_size), rng.randint(8, 40)
        draw.rectangle((x, y, x + s, y + s), fill=tuple(rng.randint(150, 240) for _ in range(3)))
    c1, c2 = rng.sample(list(COLOURS), 2) if colours is None else colours
    drawn = rng.choice(list(PATTERNS))
    pattern = pattern or drawn
    if align == 1:
        x0 = rng.randrange(detail_size, image_size - 2 * detail_size)
        y0 = rng.randrange(detail_size, image_size - 2 * detail_size)
    else:  # the patch's corner on the `align`-pixel grid, anywhere inside the image
        x0 = align * rng.randrange((image_size - detail_size) // align + 1)
        y0 = align * rng.randrange((image_size - detail_size) // align + 1)
    if distractors:
        if align == 1:
            raise ValueError("distractors need the patch on a grid (align > 1).")
        grid = [(x, y) for y in range(0, image_size - detail_size + 1, align)
                for x in range(0, image_size - detail_size + 1, align)
                if max(abs(x - x0), abs(y - y0)) > align]  # fmt: skip
        if len(grid) < distractors:
            raise ValueError(f"{distractors} distractors do not fit the {len(grid)} free grid cells; use fewer.")
        for x, y in rng.sample(grid, distractors):
            draw.rectangle((x, y, x + detail_size - 1, y + detail_size - 1), fill=COLOURS[rng.choice((c1, c2))])
    fill = PATTERNS[pattern]  # constant on each cell: draw the patch cell by cell
    patch = Image.new("RGB", (detail_size, detail_size), COLOURS[c1])
    cells = ImageDraw.Draw(patch)
    for dy in range(0, detail_size, cell):
        for dx in range(0, detail_size, cell):
            if fill(dx, dy, cell):
                cells.rectangle((dx, dy, dx + cell - 1, dy + cell - 1), fill=COLOURS[c2])
    img.paste(patch, (x0, y0))
    options = list(PATTERNS)
    if shuffle_options:
        rng.shuffle(options)
    question = f"What texture fills the small {c1} and {c2} square in the image?"
    box = (x0, y0, x0 + detail_size, y0 + detail_size)
    return ProceduralSample(img, box, question, options, LETTERS[options.index(pattern)])


def low_contrast(image: Image.Image, contrast: float) -> Image.Image:
    """Pixels pulled toward mid-grey: 128 + contrast * (p - 128), rounded (the procedural x0's stand-in for the detail
    a large image loses when shrunk to the model's input; 1 returns the image itself)."""
    if contrast == 1.0:
        return image
    return image.point(lambda p: round(128 + contrast * (p - 128)))


def format_question(question: str, options: list[str]) -> str:
    """Multiple-choice text in the style of the V* reference prompt: lettered options, then the answer rule."""
    lines = [question.strip()] + [f"({LETTERS[i]}) {opt}" for i, opt in enumerate(options)]
    return "\n".join(lines + ["Answer with the option's letter from the given choices directly."])


def procedural_rows(
    n: int,
    *,
    seed: int = 0,
    image_size: int = 448,
    detail_size: int = 10,
    cell: int = 1,
    shuffle_options: bool = True,
    colours: list[str] | None = None,
    align: int = 1,
    distractors: int = 0,
    x0_contrast: float = 1.0,
    **view_kwargs,
) -> list:
    """`n` GRPOTrainer rows from [`procedural_sample`], deterministic in `seed`. `x0_contrast` < 1 lowers the contrast
    of x0 only ([`low_contrast`]); x+ and x- are cut from the unchanged image."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        s = procedural_sample(rng, image_size=image_size, detail_size=detail_size, cell=cell,
                              shuffle_options=shuffle_options, colours=colours, align=align,
                              distractors=distractors)  # fmt: skip
        views = make_views(s.image, s.box, **view_kwargs)
        rows.append(
            {
                "prompt": user_prompt(format_question(s.question, s.options)),
                "image": low_contrast(views.full, x0_contrast),
                "image_plus": views.plus,
                "image_minus": views.minus,
                "answer": s.answer,
            }
        )
    return rows
