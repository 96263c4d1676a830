"""`python -m agentrl_shared.lora_check PACKAGE OUT [key=value ...]`: `<PACKAGE> train --config smoke` with LoRA,
run on each rank of a 2-process ZeRO-3 launch by `agentrl_shared.smoke.check_lora_two_ranks`.

Each rank saves the policy's parameters (gathered whole under ZeRO-3, PEFT names) right before and right after
`GRPOTrainer.train` to `OUT/rank{R}_before.pt` / `OUT/rank{R}_after.pt`, and the process ends there: the run's
evaluation is not part of the check (the one-process smoke tests cover it); the calling test compares the files.
"""

import importlib
import sys
from pathlib import Path

import torch
from trl import GRPOTrainer


def gathered_state(trainer) -> dict[str, torch.Tensor]:
    """Every parameter of the trainer's policy, whole (ZeRO-3 shards gathered), on the CPU."""
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    params = list(model.named_parameters())
    if trainer.is_deepspeed_enabled:
        import deepspeed

        with deepspeed.zero.GatheredParameters([p for _, p in params]):
            return {name: p.detach().clone().cpu() for name, p in params}
    return {name: p.detach().clone().cpu() for name, p in params}


def main() -> None:
    package, out, overrides = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    train = GRPOTrainer.train

    def recorded_train(self, *args, **kwargs):
        rank = self.accelerator.process_index
        torch.save(gathered_state(self), out / f"rank{rank}_before.pt")
        train(self, *args, **kwargs)
        torch.save(gathered_state(self), out / f"rank{rank}_after.pt")
        self.accelerator.wait_for_everyone()
        sys.exit(0)

    GRPOTrainer.train = recorded_train
    importlib.import_module(f"{package}.cli").main(["train", "--config", "smoke", *overrides])


if __name__ == "__main__":
    main()
