"""Tests of the offline tiny Qwen2.5-VL (agentrl_shared.vlm): processor, forward, generation."""

from agentrl_shared.offline import set_offline_env


set_offline_env()

import torch  # noqa: E402
from PIL import Image  # noqa: E402

from agentrl_shared.vlm import tiny_qwen25_vl  # noqa: E402


def test_tiny_qwen25_vl_builds_processes_and_backpropagates():
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    path = tiny_qwen25_vl()
    assert tiny_qwen25_vl() == path  # cached: built once
    processor = AutoProcessor.from_pretrained(path, padding_side="left")
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path)
    assert processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") == model.config.image_token_id == 151655
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|vision_start|><|image_pad|><|vision_end|>" in text
    images = [[Image.new("RGB", (448, 448), (200, 0, 0))], [Image.new("RGB", (40, 60), (0, 0, 200))]]
    enc = processor(images=images, text=[text, text], padding=True, return_tensors="pt")
    grid = enc["image_grid_thw"]
    assert grid.shape == (2, 3) and int(grid.prod(-1).max()) // 4 <= 16  # max_pixels caps image tokens at 16
    out = model(**enc)
    assert out.logits.shape[:2] == enc["input_ids"].shape and out.logits.shape[-1] == len(processor.tokenizer)
    out.logits.mean().backward()
    assert model.model.visual.patch_embed.proj.weight.grad.abs().sum() > 0  # the vision tower gets gradients
    generated = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert generated.shape == (2, enc["input_ids"].size(1) + 3)
    assert torch.equal(generated[:, : enc["input_ids"].size(1)], enc["input_ids"])
