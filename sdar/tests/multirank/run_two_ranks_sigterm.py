"""Launched by test_multirank.py on 2 CPU processes under DeepSpeed ZeRO-3: the smoke config for 2 rollouts, where
SIGTERM reaches rank 1 alone while it plays the first rollout (a pre-emption signal that one node got first).

Each rank writes `rank<r>_exit.json`: how `train` ended (the exit status of `agentrl_shared.cli.Stopped`, or 0), the
rollouts done and the optimizer steps taken. Arguments: the output folder, the DeepSpeed config, and optionally a
checkpoint to resume from (then no signal is sent).
"""

import json
import os
import signal
import sys
from pathlib import Path

from agentrl_shared.trainer import MultiTurnGRPOTrainer
from sdar.cli import load, train


OUT, DS = Path(sys.argv[1]), Path(sys.argv[2])
RESUME = sys.argv[3] if len(sys.argv) > 3 else None
RANK = int(os.environ["RANK"])
collect = MultiTurnGRPOTrainer._collect
trainers: list = []


def collect_then_sigterm_on_rank_1(self, *args):
    trainers.append(self)
    episodes = collect(self, *args)
    if RANK == 1 and self.rollouts_done == 0 and RESUME is None:
        os.kill(os.getpid(), signal.SIGTERM)
    return episodes


MultiTurnGRPOTrainer._collect = collect_then_sigterm_on_rank_1
overrides = [f"trainer.output_dir={OUT / 'run'}", f"trainer.deepspeed={DS}", "trainer.num_rollouts=2",
             "env.eval_episodes=2"]  # fmt: skip
if RESUME:
    overrides.append(f"trainer.resume_from_checkpoint={RESUME}")
status = 0
try:
    train(load("smoke", overrides), "sigterm")
except SystemExit as exc:  # `Stopped`: 128 + the signal
    status = exc.code
trainer = trainers[-1]
(OUT / f"rank{RANK}_exit.json").write_text(
    json.dumps({"status": status, "rollouts_done": trainer.rollouts_done, "global_step": trainer.state.global_step})
)
sys.exit(status)
