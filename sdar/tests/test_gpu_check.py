"""`sdar.gpu_check`'s figures on CPU: the real matmul parameter count and the per-rollout summary (no GPU needed)."""

import pytest
from transformers import AutoConfig

from agentrl_shared.models import tiny_qwen3
from sdar.gpu_check import matmul_parameters, summarize_run


def test_matmul_parameters_count_every_linear_layer_and_the_lm_head_apart():
    config = AutoConfig.from_pretrained(tiny_qwen3())
    body, head = matmul_parameters(config)
    h, i, L, d = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.head_dim
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    assert body == L * (h * q + 2 * h * kv + q * h + 3 * h * i)  # q, k, v, o; gate, up, down
    assert head == config.vocab_size * h  # tied to the embedding, still one matmul per completion token


def test_summary_leaves_the_weight_sync_out_of_generation_and_prompts_out_of_the_lm_head():
    logs = [
        {"rollout/rows": 10.0, "completions/mean_length": 20.0, "rollout/tokens": 1200.0, "time/generation_s": 2.0,
         "time/weight_sync_s": 8.0, "time/forward_backward_s": 1.0},
        {"time/forward_backward_s": 1.0},
    ]  # fmt: skip
    out = summarize_run(logs, peak_flops=1e12, body_params=1000, head_params=100)
    assert out["generated_tokens_per_s"] == pytest.approx(200 / 2.0)  # not 200 / 10 s
    assert out["stage_s_per_rollout"]["forward_backward_s"] == 2.0
    # 6 x (1000 body parameters x 1200 tokens + 100 head parameters x 200 completion tokens) in 2 s
    assert out["train_mfu"] == pytest.approx(6 * (1000 * 1200 + 100 * 200) / 2.0 / 1e12)
