"""The format warm starts' SFT (`agentrl_shared.sft`, EnvACE's and SkillRise's CPU warm starts): the loss is the mean
cross-entropy of completion tokens only, and it fits them."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.rollout import Row
from agentrl_shared.sft import sft


def test_sft_fits_completion_tokens_only():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)
    rows = [Row(prompt_ids=[11, 12, 13, 14], completion_ids=[21, 22, 23], prompt_text="", completion_text="",
                action="", is_action_valid=True, group_id=0, episode_id=0, turn_idx=0, role="caller")]  # fmt: skip
    with torch.no_grad():  # the first step's loss is the mean completion-token cross-entropy, prompt not counted
        logits = model(torch.tensor([[11, 12, 13, 14, 21, 22, 23]])).logits[0]
        expected = torch.nn.functional.cross_entropy(logits[3:6], torch.tensor([21, 22, 23])).item()
    losses = sft(model, rows, learning_rate=1e-2, epochs=12, batch_rows=1)
    assert losses[0] == pytest.approx(expected, rel=1e-4)
    assert losses[-1] < 0.2 * losses[0]
