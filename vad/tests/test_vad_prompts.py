"""Thinking off: the rendered rollout, teacher-view and evaluation prompts of Qwen3.5 close the think block.

Rendered with the exact Qwen tokenizer built offline (`agentrl_shared.models.qwen_tokenizer`) carrying Qwen3.5-4B/9B's
own chat template (TRL ships it as `qwen3_5_think_chat_template`: thinking on unless `enable_thinking` is false).
"""

import pytest
from trl.chat_template_utils import qwen3_5_think_chat_template
from trl.data_utils import apply_chat_template, prepare_multimodal_messages

from agentrl_shared.config import LaunchConfig, ModelConfig, load_config
from agentrl_shared.models import qwen_tokenizer
from vad.benchmarks import EvalItem
from vad.config import DataConfig, VADConfig
from vad.evaluation import HFGenerator
from vad.views import procedural_rows


SECTIONS = {"trainer": VADConfig, "data": DataConfig, "model": ModelConfig, "launch": LaunchConfig}
CLOSED = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # the generation prompt's end with thinking off


@pytest.fixture(scope="module")
def qwen35_tokenizer():
    tok = qwen_tokenizer("qwen3")
    tok.chat_template = qwen3_5_think_chat_template
    return tok


@pytest.mark.parametrize("name", ["visionopd_qwen3.5-4b_paper", "visionopd_qwen3.5-9b_paper"])
def test_rollout_prompt_has_no_open_think_block(qwen35_tokenizer, name):
    args = load_config(name, ["trainer.use_cpu=true", "trainer.bf16=false"], SECTIONS, "vad")["trainer"]
    row = procedural_rows(1, seed=0, image_size=64, detail_size=10)[0]
    # as TRL's generation (GRPOTrainer._generate_single_turn) and VADTrainer._view_inputs render it
    prompt = prepare_multimodal_messages(row["prompt"], images=[row["image"]])
    text = apply_chat_template({"prompt": prompt}, qwen35_tokenizer, **args.chat_template_kwargs)["prompt"]
    assert text.endswith(CLOSED) and text.count("<think>") == text.count("</think>") == 1
    assert "<|vision_start|><|image_pad|><|vision_end|>" in text and row["prompt"][0]["content"] in text
    # the template's own default opens a think block: the setting is what closes it
    assert apply_chat_template({"prompt": prompt}, qwen35_tokenizer)["prompt"].endswith(
        "<|im_start|>assistant\n<think>\n"
    )


def test_eval_prompt_has_no_open_think_block(qwen35_tokenizer, tmp_path):
    item = EvalItem("vstar", "0", "What colour is the cup?\n(A) red\n(B) blue", "(A)", b"", tmp_path)
    text = HFGenerator(None, qwen35_tokenizer, 8).prompt(item)
    assert text.endswith(CLOSED) and text.count("<think>") == 1


def test_engine_prompt_has_one_image_token_per_image():
    """The colocated engine's prompt (`collapse_image_tokens` of the processor's ids, which carry one image token per
    merged patch) is the chat text tokenized with one `<|image_pad|>` per image, the form vLLM expands itself."""
    from PIL import Image
    from transformers import AutoProcessor

    from vad import cli
    from vad.trainer import collapse_image_tokens

    processor = AutoProcessor.from_pretrained(cli.model_path(cli.TINY_VLM))
    images = [Image.new("RGB", (224, 224), "white"), Image.new("RGB", (56, 112), "black")]
    content = [
        {"type": "image"},
        {"type": "text", "text": "Compare"},
        {"type": "image"},
        {"type": "text", "text": "?"},
    ]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    expanded = processor(images=images, text=[text])["input_ids"][0]
    image_token = processor.image_token_id
    assert expanded.count(image_token) == 16 + 8  # 224 px -> 112 px (16 tokens at most); 56 x 112 px -> 2 x 4 tokens
    assert collapse_image_tokens(expanded, image_token) == processor.tokenizer(text)["input_ids"]
