"""TRL's vLLM colocate path, the one every paper config generates with, run on CPU with vLLM's CPU build
(`make test-vllm`: marker `vllm`, environment `.venv-vllm`). SkillRise trains 2 rollouts of TextRooms (solve and curate generations) on a tiny fp32 Qwen3 with
`use_vllm=True, vllm_mode="colocate"`; after each weight sync the engine's log-probs of its sampled tokens equal the
trainer's (the `sampling/logp_gap_*` metrics every rollout logs). sdar/tests/test_sdar_vllm_cpu.py checks the shared
trainer's vLLM path in depth (prompt order, sampling settings, a skipped weight sync, 2 ranks)."""

import json
import os

import pytest


pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for the tiny model

from agentrl_shared.models import tiny_qwen3  # noqa: E402
from agentrl_shared.smoke import VLLM_GAP_MAX_TOL, VLLM_GAP_MEAN_TOL, rollout_gaps, vllm_cpu_overrides  # noqa: E402
from skillrise.cli import main  # noqa: E402


pytestmark = pytest.mark.vllm


def test_trains_with_vllm_colocate_and_logs_the_logprob_gap(tmp_path):
    out = tmp_path / "run"
    overrides = vllm_cpu_overrides(tiny_qwen3(hidden_size=128), max_completion_length=8)
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", *overrides, "trainer.vllm_max_model_length=2048"])
    results = json.loads((out / "results.json").read_text())
    rollouts = rollout_gaps(results)
    assert results["rollouts"] == 2 and len(rollouts) == 2
    for i, h in enumerate(rollouts):
        print(f"\nrollout {i + 1}: mean |logp_vllm - logp_trainer| {h['sampling/logp_gap_mean']:.2e}, max "
              f"{h['sampling/logp_gap_max']:.2e}, mismatch KL (k3) {h['sampling/mismatch_kl_k3']:.2e}")  # fmt: skip
        assert h["sampling/logp_gap_mean"] < VLLM_GAP_MEAN_TOL and h["sampling/logp_gap_max"] < VLLM_GAP_MAX_TOL, h
