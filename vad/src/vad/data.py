"""VAD's image views, training data and evaluation benchmarks (paper Sec. 3.1 views, Sec. 4.1 data; spec vad.md 2.1, 6).

- Views: x0 (full image, the student's input), x+ (evidence crop) and x- (the evidence region pixelated: downsampled
  to 0.1x with bilinear interpolation, upsampled back with nearest neighbour), built from an image and a box.
- Data: a Vision-OPD-6K loader, a procedural generator of fine-grained multiple-choice questions (small details in
  large images, known boxes) for CPU runs and tests, loaders for the evaluation benchmarks in their public formats,
  and scoring by exact option matching with an optional OpenAI-compatible judge (paper: gpt-oss-120b).
"""

import base64
import io
import json
import random
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw


LETTERS = "ABCDEFGH"
MINUS_FRAMINGS = ("crop", "full")
ANSWER_INSTRUCTION = "Answer with the option's letter from the given choices directly."

# ----------------------------------------------------------------------------------------------------------- views


Box = tuple[float, float, float, float]  # (x1, y1, x2, y2) in pixels of the full image


def clamp_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """Integer box inside the image, at least one pixel wide and high."""
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    x1, y1 = min(max(x1, 0), width - 1), min(max(y1, 0), height - 1)
    x2, y2 = min(max(x2, x1 + 1), width), min(max(y2, y1 + 1), height)
    return x1, y1, x2, y2


def crop_window(box: Box, width: int, height: int, *, context: float = 2.0) -> tuple[int, int, int, int]:
    """The evidence-centred window: the box scaled by `context` about its centre, shifted inside the image.

    UNCERTAIN (spec 2.1): the paper's x+ is Vision-OPD's "2x2 crop view that keeps fine-grained evidence"; we read
    it as a window `context` times the box's side (2.0 = twice the width and height) around the evidence.
    """
    x1, y1, x2, y2 = clamp_box(box, width, height)
    cw, ch = min(width, max(1, round((x2 - x1) * context))), min(height, max(1, round((y2 - y1) * context)))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    left = int(min(max(round(cx - cw / 2), 0), width - cw))
    top = int(min(max(round(cy - ch / 2), 0), height - ch))
    return left, top, left + cw, top + ch


def degrade_region(image: Image.Image, box: Box, *, scale: float = 0.1) -> Image.Image:
    """x- (spec 2.1): the region downsampled to `scale` with bilinear interpolation, upsampled back with nearest."""
    out = image.copy()
    x1, y1, x2, y2 = clamp_box(box, image.width, image.height)
    region = out.crop((x1, y1, x2, y2))
    small = region.resize((max(1, round(region.width * scale)), max(1, round(region.height * scale))), Image.BILINEAR)
    out.paste(small.resize(region.size, Image.NEAREST), (x1, y1))
    return out


@dataclass
class Views:
    """The three views of one sample (spec 2.1): `full` = x0, `plus` = x+, `minus` = x-."""

    full: Image.Image
    plus: Image.Image
    minus: Image.Image


def make_views(
    image: Image.Image, box: Box, *, crop_context: float = 2.0, degrade_scale: float = 0.1, minus_framing: str = "crop"
) -> Views:
    """Build x0, x+ and x- from an image and its evidence box.

    Args:
        image (`PIL.Image.Image`): the full image x0.
        box (`tuple`): the evidence box (x1, y1, x2, y2) in pixels.
        crop_context (`float`, *optional*, defaults to `2.0`): see [`crop_window`].
        degrade_scale (`float`, *optional*, defaults to `0.1`): the paper's 0.1x downsampling.
        minus_framing (`str`, *optional*, defaults to `"crop"`): UNCERTAIN (spec 2.1): `crop` = x+'s framing with the
            evidence pixelated (default), `full` = the full image with the evidence pixelated.
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


# ----------------------------------------------------------------------------------------------- prompts and rows


def format_question(question: str, options: list[str]) -> str:
    """The multiple-choice prompt text (Vision-OPD perception style): question, lettered options, answer rule."""
    lines = [question.strip(), "Options:"] + [f"{LETTERS[i]}. {opt}" for i, opt in enumerate(options)]
    return "\n".join(lines + [ANSWER_INSTRUCTION])


def training_row(
    question: str, options: list[str], answer: str, image: Image.Image, box: Box, **view_kwargs
) -> dict[str, object]:
    """One GRPOTrainer row: conversational `prompt`, `image` = x0, `image_plus` = x+, `image_minus` = x-, `answer`."""
    views = make_views(image, box, **view_kwargs)
    return {
        "prompt": [{"role": "user", "content": format_question(question, options)}],
        "image": views.full,
        "image_plus": views.plus,
        "image_minus": views.minus,
        "answer": answer,
        "num_options": len(options),
    }


# -------------------------------------------------------------------------------------- procedural generator


COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (30, 60, 220),
    "yellow": (235, 210, 20),
    "purple": (140, 40, 170),
    "orange": (245, 130, 20),
    "cyan": (20, 200, 210),
    "black": (15, 15, 15),
}
SHAPES = ("square", "circle", "triangle")


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: Box, colour: tuple[int, int, int]) -> None:
    x1, y1, x2, y2 = box
    if shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([((x1 + x2) / 2, y1), (x2, y2), (x1, y2)], fill=colour)
    else:
        raise ValueError(f"Unknown shape {shape!r}; valid: {', '.join(SHAPES)}.")


@dataclass
class ProceduralSample:
    """A generated fine-grained question with its known evidence box."""

    image: Image.Image
    box: Box
    question: str
    options: list[str]
    answer: str  # letter
    kind: str  # "colour" or "shape"


def procedural_sample(rng: random.Random, *, image_size: int = 448, detail_size: int = 20) -> ProceduralSample:
    """One image of `image_size`^2 with textured noise, large pale distractors and one small target shape.

    The question asks for the colour (or the shape) of the single small object; the answer lives in a region about
    `detail_size` pixels wide, so it is visible in the evidence crop but blurred once the full image is downscaled.
    """
    img = Image.new("RGB", (image_size, image_size), tuple(rng.randint(170, 230) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    for _ in range(40):  # texture
        x, y, s = rng.randrange(image_size), rng.randrange(image_size), rng.randint(8, 40)
        draw.rectangle((x, y, x + s, y + s), fill=tuple(rng.randint(150, 240) for _ in range(3)))
    for _ in range(3):  # large pale distractors
        s = rng.randint(image_size // 6, image_size // 4)
        x, y = rng.randrange(image_size - s), rng.randrange(image_size - s)
        pale = tuple(min(255, c // 3 + 160) for c in COLOURS[rng.choice(list(COLOURS))])
        _draw_shape(draw, rng.choice(SHAPES), (x, y, x + s, y + s), pale)
    colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    x, y = rng.randrange(8, image_size - detail_size - 8), rng.randrange(8, image_size - detail_size - 8)
    box = (x, y, x + detail_size, y + detail_size)
    _draw_shape(draw, shape, box, COLOURS[colour])
    kind = rng.choice(("colour", "shape"))
    if kind == "colour":
        correct, pool = colour, [c for c in COLOURS if c != colour]
        question = f"What colour is the small {shape} in the image?"
        options = rng.sample(pool, 3) + [correct]
    else:
        correct, pool = shape, [s for s in SHAPES if s != shape] + ["star"]
        question = f"What is the shape of the small {colour} object in the image?"
        options = rng.sample(pool, 3) + [correct]
    rng.shuffle(options)
    return ProceduralSample(img, box, question, options, LETTERS[options.index(correct)], kind)


def procedural_rows(n: int, *, seed: int = 0, image_size: int = 448, detail_size: int = 20, **view_kwargs) -> list:
    """`n` training rows from [`procedural_sample`], deterministic in `seed`."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        s = procedural_sample(rng, image_size=image_size, detail_size=detail_size)
        rows.append(training_row(s.question, s.options, s.answer, s.image, s.box, **view_kwargs))
    return rows


# ------------------------------------------------------------------------------------------ Vision-OPD-6K loader


def _open_image(value: object, root: Path) -> Image.Image:
    """An image from a path (relative to `root`), raw bytes, a base64 string or a `{"bytes": ...}` parquet cell."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, bytes):
        return Image.open(io.BytesIO(value)).convert("RGB")
    if isinstance(value, str) and len(value) < 1024 and _is_file(root / value):
        return Image.open(root / value).convert("RGB")
    if isinstance(value, str):
        return Image.open(io.BytesIO(base64.b64decode(value))).convert("RGB")
    raise ValueError(f"Cannot read an image from a value of type {type(value).__name__}.")


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False for names the OS rejects (a long base64 string is not a file name)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _read_records(path: Path) -> list[dict]:
    """Records of a `.jsonl`, `.json`, `.parquet`, `.tsv` or `.csv` file (the formats the public datasets ship in)."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix in (".parquet", ".tsv", ".csv"):
        import pandas as pd

        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",")
        frame = frame.astype(object).where(frame.notna(), None)  # empty cells (e.g. HR-Bench's unused options) -> None
        return frame.to_dict(orient="records")
    raise ValueError(f"Unsupported file {path.name}; valid suffixes: .jsonl, .json, .parquet, .tsv, .csv.")


def _files(root: Path) -> list[Path]:
    suffixes = (".jsonl", ".json", ".parquet", ".tsv", ".csv")
    return sorted(p for p in root.rglob("*") if p.suffix in suffixes) if root.is_dir() else [root]


def load_vision_opd(root: str | Path, *, limit: int | None = None, **view_kwargs) -> list[dict]:
    """Vision-OPD-6K (HF `yuanqianhao/Vision-OPD-6K`, 6,241 samples) as training rows.

    UNCERTAIN (spec 6.1; the dataset could not be inspected): each record is read for `image` (x0), `question` (or
    `problem`), `options` (list, optional: otherwise the question already lists them), `answer` and `bbox`
    ([x1, y1, x2, y2] pixels); a record that ships `bbox_image` (x+) uses it as x+, and x- is then the full image
    with the box pixelated. Fields missing from a record raise a `KeyError` naming the record index.
    """
    root = Path(root)
    rows = []
    for path in _files(root):
        for i, rec in enumerate(_read_records(path)):
            if limit is not None and len(rows) >= limit:
                return rows
            try:
                image = _open_image(rec["image"], path.parent)
                question = rec["question"] if "question" in rec else rec["problem"]
                box = tuple(float(v) for v in rec["bbox"])
                answer = str(rec["answer"]).strip()
            except KeyError as err:
                raise KeyError(f"{path.name} record {i} lacks {err}; fields present: {sorted(rec)}") from err
            options = list(rec["options"]) if rec.get("options") is not None else []
            row = training_row(question, options, answer, image, box, **view_kwargs)
            if not options:
                row["prompt"] = [{"role": "user", "content": f"{question.strip()}\n{ANSWER_INSTRUCTION}"}]
            if rec.get("bbox_image") is not None:
                row["image_plus"] = _open_image(rec["bbox_image"], path.parent)
                row["image_minus"] = degrade_region(image, box)
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------- evaluation benchmarks


BENCHMARKS = (
    "vstar",
    "hrbench_4k",
    "hrbench_8k",
    "mme_realworld_en",
    "mme_realworld_cn",
    "zoombench",
    "mmvp",
    "cvbench",
    "mmstar",
    "pope",
)
MAIN_BENCHMARKS = BENCHMARKS[:6]  # Avg6 (paper Tab. 1)
HELD_OUT_BENCHMARKS = BENCHMARKS[6:]  # Avg4 (paper Tab. 3)
# Folder under $AGENTRL_DATA for each benchmark (Vision-OPD eval/prepare_data.py HF ids, spec 6.2).
BENCHMARK_DIRS = {
    "vstar": "vstar-bench",  # lmms-lab/vstar-bench
    "hrbench_4k": "HR-Bench",  # DreamMr/HR-Bench, hr_bench_4k*.tsv / parquet
    "hrbench_8k": "HR-Bench",
    "mme_realworld_en": "MME-RealWorld-Lmms-eval",  # yifanzhang114/MME-RealWorld-Lmms-eval
    "mme_realworld_cn": "MME-RealWorld-CN-Lmms-eval",  # yifanzhang114/MME-RealWorld-CN-Lmms-eval
    "zoombench": "ZoomBench",  # inclusionAI/ZoomBench
    "mmvp": "MMVP",  # MMVP/MMVP
    "cvbench": "CV-Bench",  # nyu-visionx/CV-Bench
    "mmstar": "MMStar",  # Lin-Chen/MMStar
    "pope": "POPE",  # lmms-lab/POPE
}


@dataclass
class EvalItem:
    """One evaluation question: the answer is an option letter (or `yes`/`no` for POPE)."""

    id: str
    image: Image.Image
    prompt: str
    answer: str
    options: list[str] = field(default_factory=list)
    category: str = ""


_OPTION_RE = re.compile(r"^\s*\(?([A-H])[\).:]\s*(.+?)\s*$")


def _split_options(text: str) -> tuple[str, list[str]]:
    """Split a question whose options are embedded as lines `A. ...` / `(A) ...` into (stem, options)."""
    stem, options = [], []
    for line in str(text).splitlines():
        m = _OPTION_RE.match(line)
        if m and m.group(1) == LETTERS[len(options)]:
            options.append(m.group(2))
        elif not options:
            stem.append(line)
    return "\n".join(stem).strip(), options


def _letter(value: object) -> str:
    """'(B)', 'B', 'B. text' -> 'B'."""
    m = re.search(r"[A-H]", str(value).strip().upper())
    if m is None:
        raise ValueError(f"No option letter in answer {value!r}.")
    return m.group(0)


_MMSTAR_OPTION_RE = re.compile(r"(?:^|,\s*|\n)([A-H])[:.]\s*(.*?)(?=,\s*[A-H][:.]\s|\n[A-H][:.]\s|$)", re.S)


def _mmstar_options(question: str) -> tuple[str, list[str]]:
    """MMStar embeds its options in the question (`...?\nOptions: A: x, B: y, C: z, D: w`): (stem, options)."""
    head, sep, tail = question.rpartition("Options:")
    if not sep:
        return _split_options(question)
    options = []
    for letter, text in _MMSTAR_OPTION_RE.findall(tail.strip()):
        if letter != LETTERS[len(options)]:
            break
        options.append(text.strip())
    return head.strip(), options


def _first(rec: dict, *keys: str) -> object:
    """The first present, non-empty field among `keys`; a `KeyError` naming them all when none is."""
    for key in keys:
        if rec.get(key) is not None and not (isinstance(rec[key], str) and not rec[key].strip()):
            return rec[key]
    raise KeyError(" / ".join(keys))


def _benchmark_item(name: str, i: int, rec: dict, root: Path) -> EvalItem:
    """Map one record of a benchmark's public format to an [`EvalItem`] (exact-name dispatch).

    Open questions (ZoomBench's OQ split) keep their free-form reference answer and empty `options`; they are scored
    by normalised exact match in [`score_answer`].
    """
    ids = [rec[k] for k in ("index", "question_id", "idx", "id", "Index") if rec.get(k) is not None]
    item_id = str(ids[0] if ids else i)
    if name == "vstar":  # lmms-lab/vstar-bench: `text` holds the "(A) ..." options; `label` is the letter
        stem, options = _split_options(_first(rec, "text", "question"))
        answer, image, cat = _letter(rec["label"]), rec["image"], str(rec.get("category") or "")
    elif name in ("hrbench_4k", "hrbench_8k", "mme_realworld_en", "mme_realworld_cn"):
        # HR-Bench TSV/parquet: question, A-D, answer letter, base64 `image`; MME-RealWorld lmms-eval parquet:
        # question, `multi-choice options` list ("(A) ..."), answer letter, base64 image in `bytes` (lmms-eval's
        # `mme_realworld_doc_to_visual` reads `doc["bytes"]`)
        if rec.get("multi-choice options") is not None:
            stem, options = str(rec["question"]), [_OPTION_RE.sub(r"\2", str(o)) for o in rec["multi-choice options"]]
        elif rec.get("A") is not None:
            stem, options = str(rec["question"]), [str(rec[c]) for c in LETTERS if rec.get(c) is not None]
        else:
            stem, options = _split_options(rec["question"])
        answer, image, cat = _letter(rec["answer"]), _first(rec, "image", "bytes"), str(rec.get("category") or "")
    elif name == "zoombench":
        # inclusionAI/ZoomBench parquet: `prompt` (question; MCQ options as "A. ..." / "(A) ..." lines), `answer`
        # (letter for MCQ, free text for open questions), `image` (x0) and `crop_image` (evidence region, unused).
        # UNCERTAIN: the option layout inside `prompt` could not be inspected; open questions keep their raw answer.
        stem, options = _split_options(_first(rec, "prompt", "question"))
        raw = str(rec["answer"]).strip()
        answer = _letter(raw) if options and re.fullmatch(r"\(?[A-H]\)?\.?", raw.upper()) else raw
        image, cat = rec["image"], str(rec.get("category") or "")
        prompt = format_question(stem, options) if options else stem
        return EvalItem(item_id, _open_image(image, root), prompt, answer, options, cat)
    elif name == "cvbench":  # nyu-visionx/CV-Bench: choices list, answer "(B)"
        stem, options = str(rec["question"]), [str(c) for c in rec["choices"]]
        answer, image, cat = _letter(rec["answer"]), rec["image"], str(rec.get("task") or "")
    elif name == "mmvp":
        # MMVP/MMVP: Questions.csv (Index, Question, Options "(a) x (b) y", Correct Answer "(a)") with the images in
        # `MMVP Images/<Index>.jpg`; the lmms-lab/MMVP parquet has the same columns plus `image`
        stem = str(_first(rec, "Question", "question"))
        options = [o.strip() for o in re.split(r"\([a-h]\)", str(_first(rec, "Options", "options"))) if o.strip()]
        answer = _letter(str(_first(rec, "Correct Answer", "answer")).upper())
        if rec.get("image") is not None:
            image = rec["image"]
        else:
            stem_path = root / "MMVP Images" / str(_first(rec, "Index", "index"))
            found = [stem_path.with_suffix(s) for s in (".jpg", ".png", ".jpeg") if stem_path.with_suffix(s).exists()]
            if not found:
                raise FileNotFoundError(f"MMVP record {i} has no `image` field and no image at {stem_path}.jpg.")
            image = str(found[0].relative_to(root))
        cat = ""
    elif name == "mmstar":  # Lin-Chen/MMStar: question embeds "Options: A: ..., B: ..."; answer letter
        stem, options = _mmstar_options(str(rec["question"]))
        answer, image, cat = _letter(rec["answer"]), rec["image"], str(rec.get("category") or "")
        if not options:
            raise ValueError(f"MMStar record {i}: no `Options: A: ..., B: ...` in the question {rec['question']!r}.")
    elif name == "pope":  # lmms-lab/POPE: question, answer yes/no, image
        prompt = f"{rec['question']}\nAnswer the question using a single word: yes or no."
        answer = str(rec["answer"]).strip().lower()
        if answer not in ("yes", "no"):
            raise ValueError(f"POPE record {i}: answer {rec['answer']!r} is not yes/no.")
        cat = str(rec.get("category") or "")
        return EvalItem(item_id, _open_image(rec["image"], root), prompt, answer, [], cat)
    else:
        raise ValueError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")
    return EvalItem(item_id, _open_image(image, root), format_question(stem, options), answer, options, cat)


def load_benchmark(name: str, root: str | Path, *, limit: int | None = None) -> list[EvalItem]:
    """Evaluation items of `name` from `root` (a file or the dataset folder in its public layout).

    Args:
        name (`str`): one of [`BENCHMARKS`].
        root (`str` or `Path`): a `.parquet` / `.tsv` / `.csv` / `.jsonl` / `.json` file, or a folder searched for them.
            For HR-Bench the 4K/8K split is chosen by file name (`*4k*` / `*8k*`).
        limit (`int`, *optional*): keep the first `limit` items.

    Returns:
        `list[EvalItem]`. A record missing a field raises a `KeyError` naming the file, the record and the field.
    """
    if name not in BENCHMARKS:
        raise ValueError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")
    root = Path(root)
    files = _files(root)
    if name in ("hrbench_4k", "hrbench_8k"):
        files = [f for f in files if name.split("_")[1] in f.name.lower()]
    if not files:
        raise FileNotFoundError(f"No data files for {name} under {root} ({BENCHMARK_DIRS[name]}).")
    items: list[EvalItem] = []
    for path in files:
        for i, rec in enumerate(_read_records(path)):
            if limit is not None and len(items) >= limit:
                return items
            try:
                items.append(_benchmark_item(name, i, rec, path.parent))
            except KeyError as err:
                raise KeyError(f"{name}: {path.name} record {i} lacks {err}; fields present: {sorted(rec)}") from err
    return items


# ------------------------------------------------------------------------------------------------------ scoring


def extract_choice(text: str, num_options: int) -> str | None:
    """Exact option matching: the first standalone option letter in the answer (`B`, `(B)`, `B.`), else None."""
    valid = LETTERS[:num_options]
    m = re.search(rf"(?<![A-Za-z])\(?([{valid}])(?![A-Za-z])", text.strip())
    return m.group(1) if m else None


def _normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+(?:\.\d+)?", text.lower()))


def score_answer(text: str, answer: str, num_options: int) -> float:
    """1.0 when the extracted option (or yes/no for POPE) equals the reference, else 0.0.

    A reference that is neither an option letter nor yes/no (ZoomBench's open questions) is matched exactly after
    lower-casing and dropping punctuation (UNCERTAIN: the paper scores these with its judge).
    """
    if answer in ("yes", "no"):
        words = re.findall(r"[a-z]+", text.lower())
        return float(bool(words) and words[0] == answer)
    if len(answer) != 1 or answer not in LETTERS:
        return float(_normalise(text) == _normalise(answer))
    return float(extract_choice(text, num_options) == answer)


def judge_choice(
    text: str, item: EvalItem, *, base_url: str, model: str = "openai/gpt-oss-120b", api_key: str = "EMPTY"
) -> str | None:
    """Ask an OpenAI-compatible judge (paper: gpt-oss-120b via Vision-OPD's pipeline) which option `text` chose."""
    options = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(item.options))
    content = (
        "Which option does the response choose? Reply with the letter only, or NONE.\n"
        f"Question and options:\n{item.prompt}\n{options}\nResponse:\n{text}"
    )
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": content}], "temperature": 0.0})
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        reply = json.loads(response.read())["choices"][0]["message"]["content"]
    return extract_choice(reply, max(len(item.options), 1))


def choice_accuracy_reward(completions: list, answer: list[str], num_options: list[int], **kwargs) -> list[float]:
    """GRPO baseline reward (spec 5, UNCERTAIN): exact match of the chosen option letter. Unused by the VAD loss."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [score_answer(t, a, n) for t, a, n in zip(texts, answer, num_options, strict=True)]
