"""`python -m vad.gpu_check`: the divergence comparison and the time budget on CPU (the GPU figures come from a run on
a GPU node); the whole `--quick` run is `slow` (about a minute on one core)."""

import json

import pytest
import torch

from vad import gpu_check


def test_divergence_chunked_equals_unchunked_on_cpu():
    """Stage 1's loss path: chunked (4 chunks) and unchunked give the same loss and logit gradients."""
    pair = {}
    for chunk in (16, None):
        pair[chunk] = {}
        record = gpu_check.divergence_case((2, 64, 512), "cpu", chunk, pair[chunk])
        assert "oom" not in record and record["loss"] > 0
    assert torch.allclose(pair[16]["loss"], pair[None]["loss"], rtol=1e-6, atol=1e-9)
    assert pair[16]["grad"].abs().max() > 0
    assert torch.equal(pair[16]["grad"], pair[None]["grad"])


def test_divergence_loss_is_the_trainer_reduction():
    """Masked positions carry no loss: changing their logits changes neither the loss nor the others' gradients."""
    gen = torch.Generator().manual_seed(1)
    student, pos, neg = (torch.randn(1, 8, 300, generator=gen) * 3 for _ in range(3))
    mask = torch.ones(1, 8)
    mask[:, 6:] = 0
    loss = gpu_check.divergence_loss(student, pos, neg, mask, chunk_size=3, support_k=20)
    pos2 = pos.clone()
    pos2[:, 6:] += 5 * torch.randn(1, 2, 300, generator=gen)
    assert gpu_check.divergence_loss(student, pos2, neg, mask, chunk_size=3, support_k=20).item() == loss.item()
    pos2[:, 0] += 5 * torch.randn(300, generator=gen)
    assert gpu_check.divergence_loss(student, pos2, neg, mask, chunk_size=3, support_k=20).item() != loss.item()


def test_no_budget_skips_every_stage(tmp_path):
    """With the budget spent, both stages write `skipped: budget` records instead of running."""
    clock = gpu_check.Clock(0.0, 0.0)
    gpu_check.stage_divergence(tmp_path, "cpu", True, clock, share_s=0.0)
    gpu_check.stage_signal(tmp_path, "cpu", True, clock)
    memory = json.loads((tmp_path / "divergence_memory.json").read_text())
    assert memory["cases"] and all(c.get("skipped") == "budget" for c in memory["cases"])
    assert "chunked_vs_unchunked" not in memory
    for arm in ("base", "vad", "sft_x0", "direct"):
        assert json.loads((tmp_path / f"arm_{arm}.json").read_text())["skipped"] == "budget"


@pytest.mark.slow
def test_quick_run_writes_every_result(tmp_path):
    """`--quick` end to end on CPU: the memory record, every arm's panel on x0 / x+ / x-, the summary and the plot."""
    gpu_check.main(["--output", str(tmp_path), "--quick", "--budget-s", "400"])
    memory = json.loads((tmp_path / "divergence_memory.json").read_text())
    assert memory["chunked_vs_unchunked"]["max_abs_diff_loss"] < 1e-6
    assert {c["chunk_size"] for c in memory["cases"]} == {16, None}
    for arm in ("base", "vad", "sft_x0", "direct"):
        record = json.loads((tmp_path / f"arm_{arm}.json").read_text())
        assert set(record["panel"]) == {"x0", "x+", "x-"}, record
    vad = json.loads((tmp_path / "arm_vad.json").read_text())
    assert vad["steps"] == gpu_check.QUICK_PLAN["rl_steps"]
    summary = json.loads((tmp_path / "x0_signal.json").read_text())
    assert summary["parameters"] > summary["vision_parameters"] > 0
    assert (tmp_path / "x0_signal.png").stat().st_size > 1000
