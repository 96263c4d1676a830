"""TRL's vLLM colocate path, the one every paper config generates with, run on CPU with vLLM's CPU build (`make
test-vllm`: marker `vllm`, environment `.venv-vllm`). EnvACE trains 2 rollouts of generated tool-use tasks (caller
and rehearsal generations) on a tiny fp32 Qwen3 with `use_vllm=True, vllm_mode="colocate"`; after each weight sync
the engine's log-probs of its sampled tokens equal the trainer's (the `sampling/logp_gap_*` metrics every rollout
logs; `agentrl_shared.smoke.check_vllm_smoke`). sdar/tests/test_sdar_vllm_cpu.py checks the shared trainer's vLLM
path in depth (prompt order, sampling settings, a skipped weight sync, 2 ranks)."""

import os

import pytest


pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for the tiny model

from agentrl_shared.models import tiny_qwen3  # noqa: E402
from agentrl_shared.smoke import check_vllm_smoke  # noqa: E402
from envace.cli import main  # noqa: E402


pytestmark = pytest.mark.vllm


def test_trains_with_vllm_colocate_and_logs_the_logprob_gap(tmp_path):
    # vLLM's CPU attention needs head_dim >= 32
    check_vllm_smoke(
        main, tmp_path / "run", str(tiny_qwen3(hidden_size=128)), max_completion_length=24, max_model_len=4096
    )
