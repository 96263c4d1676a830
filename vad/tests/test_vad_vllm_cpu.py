"""TRL's vLLM colocate path, the one the paper configs generate with, run on CPU with vLLM's CPU build
(`make test-vllm`: marker `vllm`, environment `.venv-vllm`). VAD trains 2 steps of the smoke config on a tiny fp32
Qwen2.5-VL with `use_vllm=True, vllm_mode="colocate"` and Vision-OPD's token-level rollout correction (the paper
configs' `vllm_importance_sampling_mode=token_truncate`, clip 2.0); TRL logs the engine-vs-trainer log-prob gap of the
sampled tokens (`sampling/sampling_logp_difference/{mean,max}`, TRL 1.16 `GRPOTrainer._generate_and_score_completions`),
which must be ~0 at every step: the engine holds the trainer's weights after each sync.

This needs `VADTrainer._generate_single_turn`'s prompt for the engine, one image token per image: with TRL's
processor-expanded ids vLLM 0.31 expands the image again (huggingface/trl#6294), samples from a prompt 15 tokens longer
than the trainer's (16 image tokens here), and the gap was ~7e-2 nats from the first step."""

import math
import os

import pytest


pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for the tiny model

from agentrl_shared.smoke import VLLM_GAP_MAX_TOL, VLLM_GAP_MEAN_TOL, vllm_cpu_overrides  # noqa: E402
from agentrl_shared.vlm import tiny_qwen25_vl  # noqa: E402
from vad.cli import run  # noqa: E402


pytestmark = pytest.mark.vllm


def test_trains_with_vllm_colocate_and_logs_the_logprob_gap(tmp_path):
    overrides = [
        *vllm_cpu_overrides(str(tiny_qwen25_vl(hidden_size=128))),  # vLLM's CPU attention: head_dim >= 32
        "trainer.vllm_importance_sampling_correction=true",  # TRL logs the gap only with its correction on
        "trainer.vllm_importance_sampling_mode=token_truncate",
        "trainer.vllm_importance_sampling_clip_max=2.0",
    ]
    record = run(["train", "--config", "smoke", "--output", str(tmp_path / "runs"), *overrides])
    steps = [h for h in record["log_history"] if "sampling/sampling_logp_difference/mean" in h]
    assert len(steps) == 2, record["log_history"]
    for i, h in enumerate(steps):
        mean, top = h["sampling/sampling_logp_difference/mean"], h["sampling/sampling_logp_difference/max"]
        print(f"\nstep {i + 1}: mean |logp_vllm - logp_trainer| {mean:.2e}, max {top:.2e}")
        assert math.isfinite(mean) and math.isfinite(top), h
        assert mean < VLLM_GAP_MEAN_TOL and top < VLLM_GAP_MAX_TOL, h
