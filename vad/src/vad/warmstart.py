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

import itertools
import logging
import random
from pathlib import Path

from agentrl_shared.models import _build_once
from agentrl_shared.offline import cache_dir
from agentrl_shared.vlm import tiny_qwen25_vl

from .views import LETTERS, PATTERNS, Views, format_question, low_contrast, make_views, procedural_sample


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


def iter_task_samples(
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
    x0_contrast: float = 1.0,
):
    """Endless procedural questions (fixed option order) with their three views, deterministic in `stream`."""
    rng = random.Random(stream)
    while True:
        s = procedural_sample(rng, image_size=image_size, detail_size=detail_size, cell=cell, shuffle_options=False,
                              colours=colours, align=align, distractors=distractors)  # fmt: skip
        views = make_views(s.image, s.box, crop_context=crop_context, degrade_scale=degrade_scale)
        views.full = low_contrast(views.full, x0_contrast)
        yield views, format_question(s.question, s.options), s.answer


def task_samples(n: int, stream: int, **task) -> list[tuple[Views, str, str]]:
    """The first `n` of [`iter_task_samples`]`(stream, **task)`."""
    return list(itertools.islice(iter_task_samples(stream, **task), n))


class LazySamples:
    """[`task_samples`] generated as far as a slice reaches (a time-capped training never draws the rest)."""

    def __init__(self, stream: int, **task):
        self._it, self._items = iter_task_samples(stream, **task), []

    def __getitem__(self, key: slice) -> list[tuple[Views, str, str]]:
        while len(self._items) < key.stop:
            self._items.append(next(self._it))
        return self._items[key]


def letter_accuracy(model, processor, samples: list[tuple[Views, str, str]], view: str, batch_size: int = 16) -> float:
    """Fraction of `samples` whose most likely first answer token on `view` (`full`, `plus`, `minus`) is the right
    option letter (argmax over the option letters, so it measures what the image tells the model)."""
    import torch

    letters = [processor.tokenizer.convert_tokens_to_ids(c) for c in LETTERS[: len(PATTERNS)]]
    correct = 0
    for i in range(0, len(samples), batch_size):
        batch = samples[i : i + batch_size]
        enc = encode(processor, [getattr(v, view) for v, _, _ in batch], [q for _, q, _ in batch]).to(model.device)
        with torch.no_grad():
            logits = model(**enc, logits_to_keep=1).logits[:, -1, letters]  # (B, n_options)
        correct += sum(LETTERS[p] == a for p, (_, _, a) in zip(logits.argmax(-1).tolist(), batch, strict=True))
    return correct / len(samples)


def tiny_vlm(
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_image_tokens: int = 16,
    vision_depth: int = 1,
    vision_width: int = 32,
) -> Path:
    """`agentrl_shared.vlm.tiny_qwen25_vl` with a deeper / wider vision tower (`vision_depth` blocks of width
    `vision_width`, full attention in every block), seeded random weights, built once into the offline cache.
    The default sizes return `tiny_qwen25_vl` itself."""
    import torch
    from transformers import AutoConfig, AutoProcessor, Qwen2_5_VLForConditionalGeneration

    small = tiny_qwen25_vl(
        seed=seed, hidden_size=hidden_size, num_layers=num_layers, max_image_tokens=max_image_tokens
    )
    if (vision_depth, vision_width) == (1, 32):
        return small

    def build(out: Path) -> None:
        config = AutoConfig.from_pretrained(small)
        vision = config.vision_config
        vision.depth, vision.hidden_size, vision.intermediate_size = vision_depth, vision_width, 2 * vision_width
        vision.num_heads = max(2, vision_width // 32)
        vision.fullatt_block_indexes = list(range(vision_depth))
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
        model.generation_config = Qwen2_5_VLForConditionalGeneration.from_pretrained(small).generation_config
        model.save_pretrained(out)
        AutoProcessor.from_pretrained(small).save_pretrained(out)

    name = f"{small.name}-vd{vision_depth}-vw{vision_width}"
    return _build_once(cache_dir() / name, build)


def supervised(
    model,
    processor,
    samples: list[tuple[Views, str, str]],
    *,
    view: str,
    steps: int,
    batch_size: int,
    learning_rate: float,
    deadline: float | None = None,
) -> int:
    """`steps` AdamW steps of cross-entropy on the option letter and <|im_end|> of `samples` shown on `view`
    (consecutive batches of `batch_size`), on the model's device; stops early once `time.monotonic()` passes
    `deadline`. Returns the steps done; leaves the model in eval mode."""
    import time

    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    done = 0
    for step in range(steps):
        if deadline is not None and time.monotonic() > deadline:
            logger.info("supervised training stopped at step %d/%d (time budget)", step, steps)
            break
        batch = samples[step * batch_size : (step + 1) * batch_size]
        enc = encode(
            processor, [getattr(v, view) for v, _, _ in batch], [q for _, q, _ in batch], [a for *_, a in batch]
        ).to(model.device)
        # targets: the letter and <|im_end|>, the last 2 tokens (left padding); only the 2 positions before them
        # reach the (large-vocabulary) LM head
        logits = model(**enc, logits_to_keep=3).logits[:, :-1]  # (B, 2, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), enc["input_ids"][:, -2:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done = step + 1
        if done % 50 == 0:
            logger.info("supervised (%s) step %d/%d: loss %.3f", view, done, steps, loss.item())
    model.eval()
    return done


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
    vlm: dict | None = None,
) -> Path:
    """The tiny Qwen2.5-VL (`agentrl_shared.vlm.tiny_qwen25_vl(seed)`) after `steps` AdamW steps of supervised
    pre-training on x+ views of the procedural task; built once into the offline cache, then reused. `view="full"`
    trains on x0 instead: not a warm start, the check that the student's view carries a learnable signal. `vlm`:
    keyword arguments of [`tiny_vlm`] (a larger tiny VLM; default: `tiny_qwen25_vl`'s sizes).

    Returns:
        `Path`: a directory loadable with `from_pretrained` (model and processor), usable as a `GRPOTrainer` model id.
    """
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    base = tiny_vlm(seed=seed, **(vlm or {}))
    task = {"image_size": image_size, "detail_size": detail_size, "cell": cell, "colours": colours,
            "degrade_scale": degrade_scale, "align": align,
            "distractors": distractors, "crop_context": crop_context}  # fmt: skip

    def build(out: Path) -> None:
        torch.manual_seed(seed)
        processor = AutoProcessor.from_pretrained(base, padding_side="left")
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(base)
        samples = task_samples(steps * batch_size, WARM_START_STREAM + seed, **task)
        supervised(model, processor, samples, view=view, steps=steps, batch_size=batch_size,
                   learning_rate=learning_rate)  # fmt: skip
        model.save_pretrained(out)
        processor.save_pretrained(out)

    name = (
        f"vad-warm-start-i{image_size}-d{detail_size}-c{cell}-{'-'.join(colours or ['any'])}-x{degrade_scale:g}"
        f"{f'-a{align}' if align > 1 else ''}{f'-k{distractors}' if distractors else ''}"
        f"{f'-w{crop_context:g}' if crop_context != 2 else ''}-s{seed}-n{steps}x{batch_size}-lr{learning_rate:g}"
        f"{'' if view == 'plus' else f'-{view}'}{''.join(f'-{k}{v}' for k, v in sorted((vlm or {}).items()))}"
    )
    return _build_once(cache_dir() / name, build)


__all__ = [
    "WARM_START",
    "LazySamples",
    "encode",
    "iter_task_samples",
    "letter_accuracy",
    "supervised",
    "task_samples",
    "tiny_vlm",
    "warm_start",
]
