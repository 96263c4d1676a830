"""LoRA (`model.lora.r=8`) under ZeRO-3 on 2 processes: only the adapters train, the ranks agree, the base weights are
bit-identical. Slow: the LoRA path of the trainer base class this trainer shares (`MultiTurnGRPOTrainer`) is run by
sdar's test of the same name in `make test`."""

import pytest

from agentrl_shared.smoke import check_lora_two_ranks


@pytest.mark.slow
def test_lora_under_zero3_on_two_ranks_trains_only_the_adapters(tmp_path):
    out = tmp_path / "run"
    # the smoke run's rewards are all 0 (random tiny model, generated tool tasks): zero advantages, zero gradient
    # (results grad_norm 0.0), so B stays 0 (full fine-tuning moves only by weight decay there)
    check_lora_two_ranks("envace", out, [f"trainer.output_dir={out}"], adapters_move=False)
