"""Streaming, resumable, rank-sharded benchmark evaluation (the paper's protocol, Sec. 4.1).

Protocol (VisionOPD/Vision-OPD @ c2e345f, `eval/infer.py` and `eval/run_eval.sh`): one user turn with the image then
the benchmark's reference query, greedy decoding (temperature 0), seed 42, thinking off for Qwen3.5
(`chat_template_kwargs={"enable_thinking": False}`), answers graded by `benchmarks.rule_correct` and, when a judge
endpoint is given, the LLM judge for the rest (3 attempts, then "No"). Each rank takes every `world`-th item,
generates in small batches and appends one JSON line per item to `<out>/<benchmark>/rank<r>.jsonl` as soon as it is
graded; a rerun skips the items already written. Rank 0 then reads the lines back and writes `<out>/scores.json`.

Generators (`generate(items) -> texts`): [`HFGenerator`] (transformers `generate`, the CPU path), [`OpenAIGenerator`]
(an OpenAI-compatible server such as `vllm serve`, as the official pipeline does) and [`VLLMGenerator`] (a `vllm.LLM`,
e.g. the engine TRL's colocated vLLM path already holds: `trainer.vllm_generation.llm`).
"""

import base64
import io
import json
import logging
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .benchmarks import (
    BENCHMARKS,
    EvalItem,
    averages,
    benchmark_score,
    iter_benchmark,
    judge_correct,
    judge_reply,
    rule_correct,
)


logger = logging.getLogger(__name__)
NO_THINKING = {"enable_thinking": False}  # eval/run_eval.sh ENABLE_THINKING=False for the Qwen3.5 models


def messages(item: EvalItem, image) -> list[dict]:
    """One user turn: the image, then the reference query (eval/infer.py `run_one`)."""
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": item.query}]}]


class HFGenerator:
    """Greedy batched `generate` of a transformers VLM (CPU path; tests and `--scale cpu`)."""

    def __init__(self, model, processor, max_new_tokens: int):
        self.model, self.processor, self.max_new_tokens = model, processor, max_new_tokens

    def prompt(self, item: EvalItem) -> str:
        """The rendered prompt text of one item (thinking off), before the processor expands the image tokens."""
        return self.processor.apply_chat_template(
            messages(item, None), add_generation_prompt=True, tokenize=False, **NO_THINKING
        )

    def __call__(self, items: list[EvalItem]) -> list[str]:
        import torch

        images = [it.image() for it in items]
        texts = [self.prompt(it) for it in items]
        enc = self.processor(images=[[im] for im in images], text=texts, padding=True, return_tensors="pt")
        enc = enc.to(self.model.device)
        with torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False)
        return self.processor.batch_decode(out[:, enc["input_ids"].size(1) :], skip_special_tokens=True)


def data_uri(image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def chat_completion(
    base_url: str, model: str, msgs: list[dict], *, max_tokens: int, api_key: str = "EMPTY", extra: dict | None = None
) -> str:
    """One `POST /chat/completions` at temperature 0; returns the message text."""
    body = {"model": model, "messages": msgs, "max_tokens": max_tokens, "temperature": 0.0, **(extra or {})}
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    with urllib.request.urlopen(request, timeout=3600) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"] or ""


def served_models(base_url: str, api_key: str = "EMPTY") -> list[str]:
    """The model names an OpenAI-compatible server lists (`GET /models`)."""
    request = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


class OpenAIGenerator:
    """An OpenAI-compatible server (`vllm serve <checkpoint>`), requests in parallel threads (eval/infer.py)."""

    def __init__(self, base_url: str, model: str, max_tokens: int, *, seed: int = 42, workers: int = 32,
                 api_key: str = "EMPTY", retries: int = 3):  # fmt: skip
        self.base_url, self.model, self.max_tokens, self.seed = base_url, model, max_tokens, seed
        self.workers, self.api_key, self.retries = workers, api_key, retries

    def _one(self, item: EvalItem) -> str:
        msgs = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_uri(item.image())}},
            {"type": "text", "text": item.query},
        ]}]  # fmt: skip
        extra = {"seed": self.seed, "chat_template_kwargs": NO_THINKING}
        for attempt in range(self.retries):
            try:
                return chat_completion(
                    self.base_url, self.model, msgs, max_tokens=self.max_tokens, api_key=self.api_key, extra=extra
                ).strip()
            except OSError as err:  # connection errors and HTTP errors: retry, then record the failure
                if attempt == self.retries - 1:
                    logger.warning("request for %s/%s failed: %s", item.benchmark, item.uid, err)
                    return f"[API_ERROR] {err}"
        return ""

    def __call__(self, items: list[EvalItem]) -> list[str]:
        with ThreadPoolExecutor(max_workers=min(self.workers, len(items))) as pool:
            return list(pool.map(self._one, items))


class VLLMGenerator:
    """Greedy `vllm.LLM.chat` on PIL images (e.g. TRL's colocated engine after `sync_weights()`)."""

    def __init__(self, llm, max_tokens: int, *, seed: int = 42):
        from vllm import SamplingParams

        self.llm = llm
        self.params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=seed)

    def __call__(self, items: list[EvalItem]) -> list[str]:
        convs = [
            [{"role": "user", "content": [{"type": "image_pil", "image_pil": it.image()},
                                          {"type": "text", "text": it.query}]}]
            for it in items
        ]  # fmt: skip
        outs = self.llm.chat(convs, self.params, use_tqdm=False, chat_template_kwargs=NO_THINKING)
        return [o.outputs[0].text for o in outs]


def _done(path: Path) -> set[str]:
    """uids already written (a torn last line from an interrupted run is ignored and redone)."""
    done = set()
    if path.exists():
        for line in path.open(encoding="utf-8"):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not rec["response"].startswith("[API_ERROR]"):
                done.add(rec["uid"])
    return done


def batches(items: Iterable[EvalItem], size: int) -> Iterable[list[EvalItem]]:
    batch = []
    for it in items:
        batch.append(it)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_benchmark(
    name: str,
    root: Path,
    generate: Callable[[list[EvalItem]], list[str]],
    out: Path,
    *,
    rank: int = 0,
    world: int = 1,
    limit: int | None = None,
    batch_size: int = 8,
    judge: dict | None = None,
) -> int:
    """Generate and grade this rank's share of `name`, appending each graded item to `out/<name>/rank<r>.jsonl`.

    Returns the number of items generated in this call.
    """
    path = out / name / f"rank{rank}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _done(path)
    mine = (
        it
        for i, it in enumerate(iter_benchmark(name, root, limit=limit, batch_size=batch_size))
        if i % world == rank and it.uid not in done
    )
    count = 0
    with path.open("a", encoding="utf-8") as f:
        for batch in batches(mine, batch_size):
            for it, response in zip(batch, generate(batch), strict=True):
                rec = {"uid": it.uid, "answer": it.answer, "response": response,
                       "correct": rule_correct(name, response, it.answer), "source": "rule"}  # fmt: skip
                if not rec["correct"] and judge is not None:
                    reply, error = judge_reply(it, response, **judge)
                    rec.update(correct=judge_correct(reply), source="judge", judge=reply, judge_error=error)
                rec["info"] = it.info
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                f.flush()
            count += len(batch)
            logger.info("%s rank %d: %d items graded in this run", name, rank, count)
    return count


def grading(records: list[dict]) -> dict[str, int]:
    """How the items of one benchmark were graded: accepted by the rules, sent to the judge (and of those, scored "No"
    after every judge request failed), or rejected by the rules with no judge asked (`rule (no judge)`)."""
    counts = {"rule": 0, "judge": 0, "judge_failed": 0, "rule (no judge)": 0}
    for rec in records:
        counts[rec["source"] if rec["source"] == "judge" or rec["correct"] else "rule (no judge)"] += 1
        counts["judge_failed"] += rec["judge_failed"]
    return counts


def collect_scores(out: Path, names: Iterable[str]) -> dict:
    """Read every rank's lines back (one small dict per item) and compute each benchmark's metric and the averages;
    each benchmark's details also list its items, uid -> graded correct (the exact panel a result was computed on,
    for pairing two models item by item)."""
    details, scores = {}, {}
    for name in names:
        seen, records, items = set(), [], {}
        for path in sorted((out / name).glob("rank*.jsonl")):
            for line in path.open(encoding="utf-8"):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec["uid"] not in seen:
                    seen.add(rec["uid"])
                    items[rec["uid"]] = bool(rec["correct"])
                    records.append({"correct": rec["correct"], "answer": rec["answer"], "info": rec["info"],
                                    "source": rec.get("source", "rule"), "judge_failed": bool(rec.get("judge_error"))})  # fmt: skip
        if records:
            details[name] = benchmark_score(name, records)
            details[name]["graded_by"] = grading(records)
            details[name]["items"] = dict(sorted(items.items()))
            scores[name] = details[name]["score"]
    return {"scores": {**scores, **averages(scores)}, "details": details}


def evaluate(
    generate: Callable[[list[EvalItem]], list[str]],
    roots: dict[str, Path],
    out: Path,
    *,
    rank: int = 0,
    world: int = 1,
    limit: int | None = None,
    batch_size: int = 8,
    judge: dict | None = None,
    barrier: Callable[[], None] = lambda: None,
) -> dict | None:
    """Run every benchmark in `roots` (name -> folder) on this rank's share; rank 0 writes and returns the scores."""
    for name in roots:
        if name not in BENCHMARKS:
            raise ValueError(f"Unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}.")
        run_benchmark(name, roots[name], generate, out, rank=rank, world=world, limit=limit,
                      batch_size=batch_size, judge=judge)  # fmt: skip
    barrier()
    if rank != 0:
        return None
    result = collect_scores(out, roots)
    (out / "scores.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
