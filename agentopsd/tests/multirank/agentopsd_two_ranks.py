"""Launched by test_agentopsd_multirank.py on 2 CPU processes: one AgentOPSD rollout + optimizer step + end-of-run
evaluation under DeepSpeed ZeRO-3 with a scripted environment whose episodes end at different turns on each rank.

Each rank saves the rollout's rows (as gathered from every rank) and its micro-batches of the first rollout; rank 0
also writes `results.json` (through the CLI); every rank saves its gathered final weights. The test compares them with
a naive single-process loop.
"""

import os
import sys
from pathlib import Path

import torch

import agentopsd.trainer
import agentrl_shared.trainer
from agentopsd.cli import load, train
from agentrl_shared.envs.base import Step


class ScriptedEnv:
    """Episodes end after 1 turn on rank 0 and after 1 to 3 turns on rank 1 (by seed, i.e. by group); won depends on
    the sampled action, so group members get different rewards."""

    def __init__(self):
        self.rank = int(os.environ.get("RANK", "0"))

    def reset(self, task: dict, seed: int) -> Step:
        self.turn, self.length = 0, 1 if self.rank == 0 else 1 + seed % 3
        return Step(f"Room {task['task_id']}. Pick a door.", 0.0, False, self._info(False))

    def step(self, action: str) -> Step:
        self.turn += 1
        won = len(action) % 2 == 0 and self.turn == self.length
        return Step(f"Turn {self.turn}.", float(won), self.turn >= self.length, self._info(won))

    def _info(self, won: bool) -> dict:
        return {"won": won, "admissible_actions": ["go to door 1", "go to door 2"], "task_type": "scripted"}

    def close(self) -> None:
        pass


class RecordingTrainer(agentopsd.trainer.AgentOPSDTrainer):
    """Saves the first rollout's rows and this rank's micro-batches (the reference recomputes everything from them)."""

    instance = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingTrainer.instance = self

    def _extra_forwards(self, micro_batches, indices, rows, plan, old):
        if self.rollouts_done == 1:  # every rank's rows after the gather, with their GRPO advantages
            m = ("group_id", "episode_id", "turn_idx", "reward", "return")
            table = [(r.prompt_ids, r.completion_ids, r.carries_loss, r.advantage, r.teacher_prompt_ids,
                      tuple(r.meta[k] for k in m)) for r in rows]  # fmt: skip
            torch.save(table, OUT / f"rank{self.accelerator.process_index}_rows.pt")
        super()._extra_forwards(micro_batches, indices, rows, plan, old)

    def _rollout_micro_batches(self, inputs):
        batches = super()._rollout_micro_batches(inputs)
        if self.rollouts_done == 1:
            rank = self.accelerator.process_index
            torch.save([{k: v.cpu() for k, v in b.items()} for b in batches], OUT / f"rank{rank}_batches.pt")
        return batches


OUT = Path(sys.argv[1])
agentrl_shared.trainer.make_env = lambda name, **kwargs: ScriptedEnv()
agentopsd.trainer.AgentOPSDTrainer = RecordingTrainer
cfg = load(
    "smoke",
    [
        f"trainer.output_dir={OUT}",
        f"trainer.deepspeed={Path(sys.argv[2])}",
        *sys.argv[3:],
        "trainer.num_rollouts=1",
        "trainer.optim=sgd",  # the update is lr * gradient: comparable to the reference to 1e-5
        "trainer.learning_rate=1.0",
        "trainer.weight_decay=0.0",
        "trainer.max_grad_norm=0.0",
        "trainer.micro_batch_rows=2",
        "trainer.log_prob_micro_batch_rows=4",  # no-grad forwards in chunks that cut across micro-batches
        "trainer.gradient_accumulation_steps=8",  # 16 rows per rank per step: the rollout is one optimizer step
        "trainer.max_completion_length=4",
        "env.max_turns=3",
        "env.eval_episodes=3",
        "env.eval_every=1",  # the evaluation falls on the last rollout (every paper config ends on one)
        "env.eval_before_train=false",
    ],
)
train(cfg, "two_ranks")
# every rank gathers the full ZeRO-3 parameters and saves them: the test checks that both ranks hold the same
trainer = RecordingTrainer.instance
model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
import deepspeed  # noqa: E402


params = list(model.named_parameters())
with deepspeed.zero.GatheredParameters([p for _, p in params]):
    state = {name: p.detach().clone().cpu() for name, p in params}
torch.save(state, OUT / f"rank{trainer.accelerator.process_index}_params.pt")
