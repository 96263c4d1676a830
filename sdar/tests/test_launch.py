"""Paper-scale launch: the vLLM extra is synced, a machine without GPUs is refused at once, configs carry their
process count, training length counts rollouts, and the GPU check stops without CUDA."""

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from sdar.cli import PAPER_CONFIGS, load


ROOT = Path(__file__).resolve().parents[2]
needs_make = pytest.mark.skipif(shutil.which("make") is None or not (ROOT / "Makefile").exists(), reason="no make")


@needs_make
def test_make_reproduce_paper_syncs_with_vllm_and_never_without():
    dry = subprocess.run(["make", "-n", "reproduce", "PAPER=sdar", "SCALE=paper"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    syncs = [line for line in dry.splitlines() if " sync --locked" in line]
    assert syncs and all("--extra vllm" in line for line in syncs)
    runs = [line for line in dry.splitlines() if " run --locked" in line]
    assert runs and all("--extra vllm" in line for line in runs)


@needs_make
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has NVIDIA GPUs")
def test_make_reproduce_paper_stops_at_once_without_gpus():
    proc = subprocess.run(["make", "reproduce", "PAPER=sdar", "SCALE=paper"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode != 0 and "SCALE=paper needs NVIDIA GPUs" in proc.stdout + proc.stderr
    assert " sync " not in proc.stdout  # stopped before syncing anything


def test_paper_configs_carry_their_gpu_count_and_the_paper_global_batch(monkeypatch):
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA", "SEARCH_QA_DATA"):
        monkeypatch.setenv(var, "/data")
    expected = {"alfworld": (8, 128, 256), "webshop": (2, 128, 64), "search_qa": (4, 1024, 256)}
    for name in PAPER_CONFIGS:
        cfg = load(name, ["trainer.use_cpu=true"])
        t, n = cfg["trainer"], cfg["launch"].num_processes
        episodes = t.per_device_train_batch_size * t.steps_per_generation * n
        mini_batch = n * t.gradient_accumulation_steps * t.micro_batch_rows
        assert (n, episodes, mini_batch) == expected[cfg["env"].name], name
        assert t.num_rollouts == 150


def test_max_steps_is_refused_in_favour_of_num_rollouts():
    from agentrl_shared.config import ConfigError

    with pytest.raises(ConfigError, match="num_rollouts"):
        load("smoke", ["trainer.max_steps=10"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_check_stops_without_cuda():
    from sdar.gpu_check import main

    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        main([])
