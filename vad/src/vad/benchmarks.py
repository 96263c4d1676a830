"""The ten evaluation benchmarks: public layouts, reference prompts, answer extraction and metrics.

Everything here follows the evaluation pipeline the paper uses (Vision-OPD's, paper Sec. 4.1), VisionOPD/Vision-OPD
@ c2e345f: `eval/prepare_data.py` (files, columns and the query each model sees), `eval/judge_qwenlm.py` (rule-based
answer extraction per benchmark, then an LLM judge for the rest), `eval/cal_acc.py` (metrics: accuracy; CV-Bench =
mean of the 2D and 3D accuracies; POPE accuracy/F1). Items are streamed: files are read in small record batches and
images stay encoded until an item is generated, so memory does not grow with the benchmark size.

Each benchmark lives at `<root>/<folder>` as the Hugging Face snapshot of its dataset (`huggingface-cli download
--repo-type dataset <id> --local-dir <root>/<folder>`); `FILES` names the split files read inside it.
"""

import base64
import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from .views import DataError


MAIN = ("vstar", "zoombench", "hrbench_4k", "hrbench_8k", "mme_realworld_en", "mme_realworld_cn")  # Avg6 (Tab. 1)
HELD_OUT = ("mmvp", "cvbench", "mmstar", "pope")  # Avg4 (Tab. 3)
BENCHMARKS = MAIN + HELD_OUT
# benchmark -> (HF dataset id, folder under the data root, split files inside it (glob patterns), one per split)
SOURCES = {
    "vstar": ("lmms-lab/vstar-bench", "vstar", ["data/test-*.parquet"]),
    "zoombench": ("inclusionAI/ZoomBench", "zoombench", ["data/test.parquet"]),
    "hrbench_4k": ("DreamMr/HR-Bench", "hrbench", ["hr_bench_4k.parquet"]),
    "hrbench_8k": ("DreamMr/HR-Bench", "hrbench", ["hr_bench_8k.parquet"]),
    "mme_realworld_en": ("yifanzhang114/MME-RealWorld-Lmms-eval", "mme_realworld_en", ["data/*.parquet"]),
    "mme_realworld_cn": ("yifanzhang114/MME-RealWorld-CN-Lmms-eval", "mme_realworld_cn", ["data/*.parquet"]),
    "mmvp": ("MMVP/MMVP", "mmvp", ["Questions.csv"]),
    "cvbench": ("nyu-visionx/CV-Bench", "cvbench", ["test_2d.parquet", "test_3d.parquet"]),
    "mmstar": ("Lin-Chen/MMStar", "mmstar", ["mmstar.parquet"]),
    "pope": ("lmms-lab/POPE", "pope", ["data/test-*.parquet"]),
}
# Columns each official preparation step reads (eval/prepare_data.py); a file lacking one fails with its name.
COLUMNS = {
    "vstar": ["image", "text", "label", "question_id", "category"],
    "zoombench": ["id", "query", "response", "image", "crop_image"],
    "hrbench_4k": ["index", "question", "answer", "A", "B", "C", "D", "category", "image"],
    "hrbench_8k": ["index", "question", "answer", "A", "B", "C", "D", "category", "image"],
    "mme_realworld_en": ["bytes", "index", "question", "multi-choice options", "answer"],
    "mme_realworld_cn": ["bytes", "index", "question", "multi-choice options", "answer"],
    "mmvp": ["Index", "Question", "Options", "Correct Answer"],
    "cvbench": ["idx", "type", "task", "image", "prompt", "answer", "source"],
    "mmstar": ["index", "question", "answer", "category", "l2_category", "image"],
    "pope": ["id", "question_id", "question", "answer", "image", "category", "image_source"],
}
MCQ = {"vstar", "hrbench_4k", "hrbench_8k", "mme_realworld_en", "mme_realworld_cn", "mmstar", "cvbench"}

# Reference query suffixes (eval/prepare_data.py; the lmms-eval prompts of V*, MME-RealWorld EN/CN and POPE)
VSTAR_POST = "\nAnswer with the option's letter from the given choices directly."
HRBENCH_MID = " Select from the following choices.\n"
MME_EN = (
    " The choices are listed below:\n",
    "\nSelect the best answer to the above multiple-choice question based on the image. "
    "Respond with only the letter (A, B, C, D, or E) of the correct option.\nThe best answer is: ",
)
MME_CN = (
    " 选项如下所示:\n",
    "\n根据图像选择上述多项选择题的最佳答案。只需回答正确选项的字母（A, B, C, D 或 E）。\n最佳答案为： ",
)
POPE_POST = "\nAnswer the question using a single word or phrase."


@dataclass
class EvalItem:
    """One benchmark question: `query` is the exact text the model sees, `answer` the reference `response`.

    The image stays in its stored form (`image_ref`: bytes, base64 text or a path under `root`) until [`image`] is
    called, so iterating a benchmark holds one small batch of encoded records at a time.
    """

    benchmark: str
    uid: str
    query: str
    answer: str
    image_ref: object
    root: Path
    info: dict = field(default_factory=dict)  # category / CV-Bench `type` (2D or 3D)

    def image(self) -> Image.Image:
        return open_image(self.image_ref, self.root)


def open_image(value: object, root: Path) -> Image.Image:
    """An image from raw bytes, a `{"bytes": ...}` parquet cell, a base64 string or a path relative to `root`."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return Image.open(io.BytesIO(value)).convert("RGB")
    if isinstance(value, str) and len(value) < 1024 and (root / value).is_file():
        return Image.open(root / value).convert("RGB")
    if isinstance(value, str):
        return Image.open(io.BytesIO(base64.b64decode(value))).convert("RGB")
    raise DataError(f"Cannot read an image from a value of type {type(value).__name__}.")


def folder(name: str, data_root: str | Path) -> Path:
    return Path(data_root) / SOURCES[name][1]


def split_files(name: str, root: Path) -> list[Path]:
    """The split files of `name` under its folder `root` (one or more per split, in a fixed order)."""
    if name not in SOURCES:
        raise DataError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")
    repo, _, patterns = SOURCES[name]
    files = [f for pattern in patterns for f in sorted(root.glob(pattern))]
    if not files:
        raise DataError(
            f"No {name} data at {root} (expected {', '.join(patterns)}). Download it with `huggingface-cli download "
            f"--repo-type dataset {repo} --local-dir {root}`."
        )
    return files


def _records(path: Path, columns: list[str], batch_size: int) -> Iterator[dict]:
    """Records of a parquet or csv file, `batch_size` at a time (never the whole file in memory)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        missing = [c for c in columns if c not in pf.schema_arrow.names]
        if missing:
            raise DataError(f"{path} lacks columns {missing}; columns present: {pf.schema_arrow.names}.")
        for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
            yield from batch.to_pylist()
    elif path.suffix == ".csv":
        import csv

        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path} lacks columns {missing}; columns present: {reader.fieldnames}.")
            yield from reader
    else:
        raise DataError(f"Unsupported benchmark file {path.name}: expected .parquet or .csv.")


def _text(value: object) -> str:
    return "" if value is None else str(value).strip()


def _item(name: str, i: int, rec: dict, path: Path, root: Path) -> EvalItem:
    """One record in the public layout -> the item the official preparation step builds from it."""
    if name == "vstar":
        query = _text(rec["text"])
        query = query if query.endswith(VSTAR_POST.strip()) else query + VSTAR_POST
        uid = rec["question_id"] if _text(rec["question_id"]) else i
        return EvalItem(name, str(uid), query, _text(rec["label"]).upper(), rec["image"], root,
                        {"category": rec["category"] or "unknown"})  # fmt: skip
    if name == "zoombench":
        return EvalItem(name, _text(rec["id"]) or str(i), _text(rec["query"]), _text(rec["response"]), rec["image"],
                        root)  # fmt: skip
    if name in ("hrbench_4k", "hrbench_8k"):
        options = [f"({c}) {_text(rec[c])}" for c in "ABCD" if _text(rec[c])]
        question = _text(rec["question"])
        query = question + HRBENCH_MID + "\n".join(options) if options else question
        return EvalItem(name, str(int(rec["index"])), query, _text(rec["answer"]), rec["image"], root,
                        {"category": _text(rec["category"])})  # fmt: skip
    if name in ("mme_realworld_en", "mme_realworld_cn"):
        lines = [_text(o) for o in (rec["multi-choice options"] or []) if _text(o)]
        head, tail = MME_EN if name.endswith("_en") else MME_CN
        question = _text(rec["question"])
        query = question + head + "\n".join(lines) + tail if lines else question
        return EvalItem(name, str(int(rec["index"])), query, _text(rec["answer"]), rec["bytes"], root)
    if name == "mmvp":
        index = int(rec["Index"])
        image = root / "MMVP Images" / f"{index}.jpg"
        if not image.is_file():
            raise DataError(f"MMVP image not found: {image} (the MMVP/MMVP snapshot ships `MMVP Images/<Index>.jpg`).")
        query = f"{_text(rec['Question'])} {_text(rec['Options'])}"
        return EvalItem(name, str(index), query, _text(rec["Correct Answer"]), str(image.relative_to(root)), root)
    if name == "cvbench":
        return EvalItem(name, f"{_text(rec['type'])}:{int(rec['idx'])}", _text(rec["prompt"]), _text(rec["answer"]),
                        rec["image"], root, {"type": _text(rec["type"]) or path.stem[-2:].upper(),
                                             "task": _text(rec["task"])})  # fmt: skip
    if name == "mmstar":
        return EvalItem(name, str(int(rec["index"])), _text(rec["question"]), _text(rec["answer"]).upper(),
                        rec["image"], root, {"category": _text(rec["category"])})  # fmt: skip
    if name == "pope":
        question = _text(rec["question"])
        query = question if question.endswith(POPE_POST.strip()) else question + POPE_POST
        return EvalItem(name, _text(rec["question_id"]) or str(i), query, _text(rec["answer"]).lower(), rec["image"],
                        root, {"category": _text(rec["category"])})  # fmt: skip
    raise DataError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")


def iter_benchmark(
    name: str, root: str | Path, *, limit: int | None = None, batch_size: int = 16
) -> Iterator[EvalItem]:
    """Stream the items of `name` from its folder `root` (see `SOURCES`), in file order, at most `limit`."""
    root = Path(root)
    count = 0
    for path in split_files(name, root):
        for rec in _records(path, COLUMNS[name], batch_size):
            if limit is not None and count >= limit:
                return
            try:
                yield _item(name, count, rec, path, root)
            except (KeyError, TypeError, ValueError) as err:
                raise DataError(f"{name}: {path.name} record {count}: cannot read it ({err!r}).") from err
            count += 1


# ---------------------------------------------------------------------------------- answer extraction (rules)


def final_answer(text: str) -> str:
    """The part of a response that is graded: after the last `</think>`, inside `<answer>...</answer>`, or from
    `Answer:` on (eval/infer.py `normalize_model_answer` and eval/judge_qwenlm.py `extract_answer`)."""
    if "</think>" in text:
        text = text[text.rfind("</think>") + len("</think>") :]
    m = re.search(r"<answer>(.*?)</answer>", text, re.S)
    if m:
        return m.group(1).strip()
    if "Answer:" in text:
        return text[text.find("Answer:") :].strip()
    return text.strip()


def reference_option(answer: str) -> str:
    """The option letter of a reference answer (`B`, `(B)`, `B.`, `B: text`), or '' (judge_qwenlm `extract_mcq_option`)."""
    m = re.match(r"^[ (\[]*([A-F])(?:$|[.)\]]|[:\-]\s+)", answer.strip())
    return m.group(1) if m else ""


def predicted_option(text: str) -> str:
    """The option a response picks: the first `(X)`, else the first capital followed by `.`, `)` or a space, else
    the first capital letter (judge_qwenlm `extract_first_option`)."""
    for pattern in (r"\(([A-Z])\)", r"([A-Z])[.)\s]", r"([A-Z])"):
        m = re.search(pattern, text)
        if m:
            return m.group(1)
    return ""


def pope_answer(text: str) -> str:
    """yes / no from a POPE response: a leading yes/no (after an optional `Answer:`), else the last word."""
    t = text.lstrip("*").strip()
    if t.lower().startswith("answer"):
        t = t[len("answer") :].lstrip(":").lstrip("*").strip()
    if t.lower().startswith("yes"):
        return "yes"
    if t.lower().startswith("no"):
        return "no"
    words = t.rstrip(".").rstrip("*").strip().split()
    last = words[-1].strip("*").lower() if words else ""
    return last if last in ("yes", "no") else text.strip()


def mmvp_answer(text: str) -> str:
    """`(a)` / `(b)` from an MMVP response: the first `(a)`/`(b)`, else a standalone a/b."""
    t = text.strip().lower()
    m = re.search(r"\(([ab])\)", t) or re.search(r"\b([ab])\b", t)
    return f"({m.group(1)})" if m else ""


def _normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+(?:\.\d+)?", text.lower()))


def rule_correct(name: str, response: str, answer: str, *, multiple_choice: bool | None = None) -> bool:
    """The official rule-based grading of one response (judge_qwenlm, before the LLM judge).

    POPE: yes/no match; MMVP: (a)/(b) match; every benchmark: equal answers (the official code uses
    `mathruler.grader.grade_answer`; here: equal after lower-casing and dropping punctuation, see README Deviations);
    multiple-choice benchmarks: the first option letter of the response equals the reference letter.
    """
    text = final_answer(response)
    if name == "pope" and pope_answer(text) == answer.strip().lower():
        return True
    if name == "mmvp" and mmvp_answer(text) and mmvp_answer(text) == answer.strip().lower():
        return True
    if _normalise(text) and _normalise(text) == _normalise(answer):
        return True
    if (name in MCQ) if multiple_choice is None else multiple_choice:
        ref = reference_option(answer)
        return bool(ref) and predicted_option(text) == ref
    return False


# The official judge template's content (eval/judge_qwenlm.py `PROMPT_TEMPLATE`), in our words: the task (does the
# response mean the same as the question's answer), the question, the reference answer and the extracted response,
# compare before judging, reply Yes when correct and No otherwise, the reply alone.
JUDGE_PROMPT = (
    "You decide whether a response to a question means the same as the question's reference answer.\n"
    "Question: {question}\n"
    "Reference answer: {answer}\n"
    "Response: {response}\n"
    "Compare the response with the reference answer, then decide. Output Yes if the response is correct and No "
    "otherwise, and output nothing else."
)
JUDGE_ATTEMPTS = 3  # eval/judge_qwenlm.py `judge_via_api` `call_one`: 3 attempts 1 s apart, then "No"


def judge_reply(
    item: EvalItem, response: str, *, base_url: str, model: str, api_key: str = "EMPTY", pause_s: float = 1.0
) -> tuple[str, str | None]:
    """The LLM judge's reply on a response the rules do not accept (paper: openai/gpt-oss-120b at temperature 0,
    2048 tokens, eval/judge_qwenlm.py), and the last error when every attempt failed (the reply is then "No").

    Correct means the reply is "yes" after stripping and lower-casing (eval/cal_acc.py `is_correct`)."""
    from .evaluation import chat_completion

    prompt = JUDGE_PROMPT.format(question=item.query, answer=item.answer, response=final_answer(response))
    error = None
    for attempt in range(JUDGE_ATTEMPTS):
        try:
            reply = chat_completion(base_url, model, [{"role": "user", "content": prompt}], max_tokens=2048,
                                    api_key=api_key)  # fmt: skip
            return reply.strip(), None
        except (OSError, ValueError, KeyError, IndexError) as err:  # HTTP/connection errors, a malformed reply
            error = f"{type(err).__name__}: {err}"
            if attempt < JUDGE_ATTEMPTS - 1:
                time.sleep(pause_s)
    return "No", error


def judge_correct(reply: str) -> bool:
    return reply.strip().lower() == "yes"


# ------------------------------------------------------------------------------------------------------- metrics


def benchmark_score(name: str, records: list[dict]) -> dict[str, float]:
    """The paper's metric of one benchmark from per-item records (`correct`, `answer`, `info`), in percent.

    CV-Bench: mean of the 2D and 3D accuracies; POPE: accuracy (also precision, recall, F1 and yes-ratio as
    eval/cal_acc.py prints them); others: accuracy.
    """
    n = len(records)
    acc = 100.0 * sum(r["correct"] for r in records) / n if n else 0.0
    if name == "cvbench":
        by_type = {}
        for t in ("2D", "3D"):
            sub = [r for r in records if r["info"].get("type") == t]
            by_type[t] = 100.0 * sum(r["correct"] for r in sub) / len(sub) if sub else 0.0
        return {"score": (by_type["2D"] + by_type["3D"]) / 2, "acc_2d": by_type["2D"], "acc_3d": by_type["3D"], "n": n}
    if name == "pope":
        tp = sum(1 for r in records if r["answer"] == "yes" and r["correct"])
        fn = sum(1 for r in records if r["answer"] == "yes" and not r["correct"])
        fp = sum(1 for r in records if r["answer"] == "no" and not r["correct"])
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        yes = sum(1 for r in records if r["answer"] == "yes") / n if n else 0.0
        return {"score": acc, "f1": 100 * f1, "precision": 100 * precision, "recall": 100 * recall,
                "yes_ratio": 100 * yes, "n": n}  # fmt: skip
    return {"score": acc, "n": n}


def averages(scores: dict[str, float]) -> dict[str, float]:
    """Avg6 (Tab. 1) and Avg4 (Tab. 3): unweighted means, present only when every member was evaluated."""
    out = {}
    for avg, names in (("Avg6", MAIN), ("Avg4", HELD_OUT)):
        if all(n in scores for n in names):
            out[avg] = sum(scores[n] for n in names) / len(names)
    return out
