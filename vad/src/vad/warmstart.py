"""A warm start for the CPU learning check: the tiny random Qwen2.5-VL after a short supervised pre-training on x+.

No PyPI package ships vision-language weights, and a random VLM answers neither from x+ nor from x0, so the frozen
teacher has nothing to give the student. `warm_start` builds, once and cached like the other offline models
(`agentrl_shared.offline.cache_dir()`), a seeded model that has been taught to answer the procedural texture question
from the evidence crop x+ only (cross-entropy on the option letter and the end of turn, never on x0). It reads the
detail in x+, and the counterfactual x- (the detail pixelated to one flat pixel) leaves it at chance. Whether it is
weak on the full image x0, so that on-policy distillation from the frozen teacher on x+ has something to teach, depends
on the task: on the CPU config's task it is not (package README, Deviation 11).

Deterministic in its arguments on one machine (seeded torch, one seeded Python random stream, a fixed sample stream
`WARM_START_STREAM + seed` that neither the training rows nor the held-out panel use).
"""

import logging
import random
from pathlib import Path

from agentrl_shared.models import _build_once
from agentrl_shared.offline import cache_dir
from agentrl_shared.vlm import tiny_qwen25_vl

from .views import LETTERS, PATTERNS, Views, format_question, make_views, procedural_sample


logger = logging.getLogger(__name__)

WARM_START = "vad-warm-start"  # `model.name_or_path` that resolves to `warm_start(...)` with the data config's task
WARM_START_STREAM = 20_000  # procedural sample stream of the pre-training (training rows: seed; eval panel: 10_000)


def encode(processor, images: list, questions: list[str], answers: list[str] | None = None) -> dict:
    """Chat-template the single-image questions as TRL renders them (image first), optionally with the answer turn."""
    texts = [
        processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for q in questions
    ]
    if answers is not None:
        texts = [t + a + "<|im_end|>" for t, a in zip(texts, answers, strict=True)]
    return processor(images=[[im] for im in images], text=texts, padding=True, return_tensors="pt")


def task_samples(
    n: int,
    stream: int,
    *,
    image_size: int,
    detail_size: int,
    cell: int,
    colours: list[str] | None,
    degrade_scale: float,
    align: int = 1,
    distractors: int = 0,
    crop_context: float = 2.0,
):
    """`n` procedural questions (fixed option order) with their three views, deterministic in `stream`."""
    rng = random.Random(stream)
    out = []
    for _ in range(n):
        s = procedural_sample(rng, image_size=image_size, detail_size=detail_size, cell=cell, shuffle_options=False,
                              colours=colours, align=align, distractors=distractors)  # fmt: skip
        views = make_views(s.image, s.box, crop_context=crop_context, degrade_scale=degrade_scale)
        out.append((views, format_question(s.question, s.options), s.answer))
    return out


def letter_accuracy(model, processor, samples: list[tuple[Views, str, str]], view: str, batch_size: int = 16) -> float:
    """Fraction of `samples` whose most likely first answer token on `view` (`full`, `plus`, `minus`) is the right
    option letter (argmax over the option letters, so it measures what the image tells the model)."""
    import torch

    letters = [processor.tokenizer.convert_tokens_to_ids(c) for c in LETTERS[: len(PATTERNS)]]
    correct = 0
    for i in range(0, len(samples), batch_size):
        batch = samples[i : i + batch_size]
        enc = encode(processor, [getattr(v, view) for v, _, _ in batch], [q for _, q, _ in batch])
        with torch.no_grad():
            logits = model(**enc, logits_to_keep=1).logits[:, -1, letters]  # (B, n_options)
        correct += sum(LETTERS[p] == a for p, (_, _, a) in zip(logits.argmax(-1).tolist(), batch, strict=True))
    return correct / len(samples)


def warm_start(
    *,
    image_size: int,
    detail_size: int,
    cell: int,
    colours: list[str] | None,
    degrade_scale: float,
    align: int = 1,
    distractors: int = 0,
    crop_context: float = 2.0,
    seed: int = 0,
    steps: int = 200,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    view: str = "plus",
) -> Path:
    """The tiny Qwen2.5-VL (`agentrl_shared.vlm.tiny_qwen25_vl(seed)`) after `steps` AdamW steps of supervised
    pre-training on x+ views of the procedural task; built once into the offline cache, then reused. `view="full"`
    trains on x0 instead: not a warm start, the check that the student's view carries a learnable signal.

    Returns:
        `Path`: a directory loadable with `from_pretrained` (model and processor), usable as a `GRPOTrainer` model id.
    """
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    base = tiny_qwen25_vl(seed=seed)
    task = {"image_size": image_size, "detail_size": detail_size, "cell": cell, "colours": colours,
            "degrade_scale": degrade_scale, "align": align,
            "distractors": distractors, "crop_context": crop_context}  # fmt: skip

    def build(out: Path) -> None:
        torch.manual_seed(seed)
        processor = AutoProcessor.from_pretrained(base, padding_side="left")
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(base)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        samples = task_samples(steps * batch_size, WARM_START_STREAM + seed, **task)
        for step in range(steps):
            batch = samples[step * batch_size : (step + 1) * batch_size]
            enc = encode(
                processor, [getattr(v, view) for v, _, _ in batch], [q for _, q, _ in batch], [a for *_, a in batch]
            )
            # targets: the letter and <|im_end|>, the last 2 tokens (left padding); only the 2 positions before them
            # reach the (large-vocabulary) LM head
            logits = model(**enc, logits_to_keep=3).logits[:, :-1]  # (B, 2, V)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), enc["input_ids"][:, -2:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (step + 1) % 50 == 0:
                logger.info("warm start step %d/%d: loss %.3f", step + 1, steps, loss.item())
        model.eval()
        model.save_pretrained(out)
        processor.save_pretrained(out)

    name = (
        f"vad-warm-start-i{image_size}-d{detail_size}-c{cell}-{'-'.join(colours or ['any'])}-x{degrade_scale:g}"
        f"{f'-a{align}' if align > 1 else ''}{f'-k{distractors}' if distractors else ''}"
        f"{f'-w{crop_context:g}' if crop_context != 2 else ''}-s{seed}-n{steps}x{batch_size}-lr{learning_rate:g}"
        f"{'' if view == 'plus' else f'-{view}'}"
    )
    return _build_once(cache_dir() / name, build)


__all__ = ["WARM_START", "encode", "letter_accuracy", "task_samples", "warm_start"]
