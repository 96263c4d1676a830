"""LoRA checkpoints and weight sync: what vLLM (or any plain model) receives from a LoRA policy is the merged model
under the base model's parameter names, and an adapter checkpoint loads and merges to the same model."""

from types import SimpleNamespace

import pytest
import torch
from peft import get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.distributed import DistributedBackend
from trl.generation.vllm_generation import VLLMGeneration

from agentrl_shared.lora import LoraSettings, is_adapter_checkpoint, load_model, merge_checkpoint, peft_config
from agentrl_shared.models import tiny_qwen3


@pytest.fixture(scope="module")
def trained_lora():
    """Tiny Qwen3 with rank-8 adapters on every linear layer, B drawn at random (as after training: B = 0 at init
    would make the merged model the base)."""
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_qwen3()), peft_config(LoraSettings(r=8)))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.2)
    return policy.eval()


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


IDS = torch.tensor([[1, 5, 9, 200, 31, 7]])


def test_vllm_weight_sync_yields_the_merged_weights_under_base_names(trained_lora):
    # TRL's parameter iterator, which both TRL's colocate sync and ours (vLLM's CPU build, `sync_vllm_weights`) load
    sync = object.__new__(VLLMGeneration)
    sync.model = trained_lora
    sync._dist = DistributedBackend(SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None)))
    before = _logits(trained_lora, IDS)
    pushed = {name: t.clone() for name, t in sync._iter_named_params()}
    plain = AutoModelForCausalLM.from_pretrained(tiny_qwen3()).eval()
    base = _logits(plain, IDS)
    assert set(pushed) == {name for name, _ in plain.named_parameters()}  # no base_model.model., .base_layer, lora_
    plain.load_state_dict(pushed, strict=False)
    torch.testing.assert_close(_logits(plain, IDS), before, rtol=1e-4, atol=1e-4)  # the engine's model = the policy
    assert (before - base).abs().max() > 1e-2  # (the adapters do change the model)
    # unmerged again after the sync, to float rounding only: TRL merges and unmerges in place (W + dW - dW), so each
    # sync moves the base weights by an ulp or so (fp32 here; more in bf16)
    torch.testing.assert_close(_logits(trained_lora, IDS), before, rtol=1e-5, atol=1e-5)
    # HF generation from the synced weights: the policy's own greedy tokens
    same = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(plain.generate(IDS, **same), trained_lora.generate(input_ids=IDS, **same))


def test_adapter_checkpoint_loads_merged_and_merges_to_a_plain_model(trained_lora, tmp_path):
    ckpt = tmp_path / "final"
    trained_lora.save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(tiny_qwen3()).save_pretrained(ckpt)
    assert is_adapter_checkpoint(ckpt) and not is_adapter_checkpoint(tiny_qwen3())
    expected = _logits(trained_lora, IDS)
    loaded = load_model(ckpt, AutoModelForCausalLM).eval()
    assert not hasattr(loaded, "peft_config")  # merged and unloaded: a plain transformers model
    torch.testing.assert_close(_logits(loaded, IDS), expected, rtol=1e-4, atol=1e-4)
    merged = merge_checkpoint(ckpt, tmp_path / "merged")
    assert (merged / "model.safetensors").is_file() and not is_adapter_checkpoint(merged)
    plain = AutoModelForCausalLM.from_pretrained(merged).eval()
    torch.testing.assert_close(_logits(plain, IDS), expected, rtol=1e-4, atol=1e-4)
