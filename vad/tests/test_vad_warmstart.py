"""The warm start of the CPU learning check (`vad.warmstart`): it reads the texture from x+, the counterfactual
x- takes that away, and it does not read the low-contrast x0, which supervision on x0 can learn. Built once into the offline cache with the CPU config's task; the first run trains it (200
steps, minutes on 2 cores), hence `slow`."""

import pytest

from vad import cli
from vad.warmstart import letter_accuracy, task_samples


CPU = cli.SCALE_CONFIGS["cpu"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def warm():
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    cfg = cli.load(CPU, [])
    path = cli.resolve_model(cfg)
    data = cfg["data"]
    task = {"image_size": data.image_size, "detail_size": data.detail_size, "cell": data.cell,
            "colours": data.colours, "degrade_scale": data.degrade_scale, "align": data.align,
            "distractors": data.distractors, "crop_context": data.crop_context}  # fmt: skip
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path).eval()
    processor = AutoProcessor.from_pretrained(path, padding_side="left")
    return model, processor, task_samples(60, 31_337, x0_contrast=data.x0_contrast, **task), task


def test_warm_start_answers_from_the_evidence_crop_not_from_its_counterfactual(warm):
    model, processor, panel, _ = warm
    plus = letter_accuracy(model, processor, panel, "plus")
    minus = letter_accuracy(model, processor, panel, "minus")
    full = letter_accuracy(model, processor, panel, "full")
    # three balanced options: chance is 1/3
    assert plus >= 0.7, (plus, minus, full)
    assert minus <= 0.5 and plus - minus >= 0.3, (plus, minus, full)
    # the CPU task's x0 (low contrast) is not read by a model taught on x+ only: the teacher has something to give
    assert full <= plus - 0.3, (plus, minus, full)


def test_warm_start_prediction_on_x_minus_does_not_depend_on_the_answer(warm):
    """The same question rendered with each texture: the x- images agree to rounding, so the prediction on x- must
    be the same letter (the evidence is gone), while on x+ the predictions follow the texture."""
    import random

    import torch

    from vad.views import LETTERS, PATTERNS, format_question, make_views, procedural_sample
    from vad.warmstart import encode

    model, processor, _, task = warm
    letters = [processor.tokenizer.convert_tokens_to_ids(c) for c in LETTERS[: len(PATTERNS)]]
    follows = 0
    for seed in range(8):
        variants = []
        for pattern in PATTERNS:
            s = procedural_sample(random.Random(seed), image_size=task["image_size"], detail_size=task["detail_size"],
                                  cell=task["cell"], colours=task["colours"], shuffle_options=False,
                                  pattern=pattern, align=task["align"],
                                  distractors=task["distractors"])  # fmt: skip
            views = make_views(s.image, s.box, crop_context=task["crop_context"], degrade_scale=task["degrade_scale"])
            variants.append((views, s.question, s.options))
        preds = {}
        for view in ("plus", "minus"):
            enc = encode(processor, [getattr(v, view) for v, _, _ in variants],
                         [format_question(q, o) for _, q, o in variants])  # fmt: skip
            with torch.no_grad():
                preds[view] = model(**enc).logits[:, -1, letters].argmax(-1).tolist()
        assert len(set(preds["minus"])) == 1, (seed, preds)
        follows += preds["plus"] == [0, 1, 2]
    assert follows >= 4, follows


def test_x0_carries_a_learnable_signal(warm):
    """The student's view is learnable by this model: supervised training on the low-contrast x0 from the warm start
    (60 steps x 16 questions, lr 1e-3) answers the held-out panel from x0 clearly above chance. Without this, no
    distillation could move x0."""
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from vad.warmstart import supervised

    model, _, panel, task = warm
    path = model.name_or_path
    student = Qwen2_5_VLForConditionalGeneration.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path, padding_side="left")
    torch.manual_seed(0)
    x0_contrast = cli.load(CPU, [])["data"].x0_contrast
    supervised(student, processor, task_samples(60 * 16, 0, x0_contrast=x0_contrast, **task), view="full", steps=60,
               batch_size=16, learning_rate=1e-3)  # fmt: skip
    full = letter_accuracy(student, processor, panel, "full")
    assert full >= 0.5, full  # chance is 1/3
