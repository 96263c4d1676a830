"""Launched by test_skillrise_multirank.py on 2 CPU processes: one SkillRise rollout (trials of K = 2 tasks with a
curate step) + optimizer step + the evaluation on the last rollout, under DeepSpeed ZeRO-3, with a scripted
environment whose episodes end at different turns on each rank and an evaluation panel of one trial (rank 1's chunk
is empty).

Each rank saves its micro-batches of the first rollout, the rows it collected and every `_prompt_count` call; rank 0
also writes `results.json` (through the CLI); every rank saves its final weights, which the test compares with a
naive single-process loop.
"""

import json
import os
import sys
from pathlib import Path

import torch

import skillrise.trainer
from agentrl_shared.envs.base import Step
from skillrise.cli import load, train


class ScriptedEnv:
    """Episodes end after 1 turn on rank 0 and after 1 + seed % 3 turns on rank 1; won depends on the sampled
    action, so trials of a group get different returns."""

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


class RecordingTrainer(skillrise.trainer.SkillRiseTrainer):
    """Saves this rank's rows and micro-batches of the first rollout and every prompt count it asked for."""

    instance = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingTrainer.instance = self
        self.prompt_counts: list[tuple[int, int]] = []  # (this rank's own prompts, prompts sent)
        self.collected_rows = 0

    def _prompt_count(self, n_active):
        n = super()._prompt_count(n_active)
        self.prompt_counts.append((n_active, n))
        return n

    def _score(self, trials):
        rows, advantages = super()._score(trials)
        self.collected_rows += len(rows)
        return rows, advantages

    def _rollout_micro_batches(self, inputs):
        batches = super()._rollout_micro_batches(inputs)
        if self.rollouts_done == 1:
            rank = self.accelerator.process_index
            torch.save([{k: v.cpu() for k, v in b.items()} for b in batches], OUT / f"rank{rank}_batches.pt")
        return batches


OUT = Path(sys.argv[1])
skillrise.trainer.make_env_factory = lambda env_config: ScriptedEnv  # the pool builds one per slot
skillrise.trainer.SkillRiseTrainer = RecordingTrainer
cfg = load(
    "smoke",
    [
        f"trainer.output_dir={OUT}",
        f"trainer.deepspeed={Path(sys.argv[2])}",
        "trainer.num_rollouts=1",
        "trainer.optim=sgd",  # the update is lr * gradient: comparable to the reference to 1e-5
        "trainer.learning_rate=1.0",
        "trainer.weight_decay=0.0",
        "trainer.max_grad_norm=0.0",
        "trainer.micro_batch_rows=4",
        "trainer.gradient_accumulation_steps=4",  # 16 rows per rank per step: the rollout (32 rows) is one step
        "trainer.max_completion_length=4",
        "env.max_turns=3",
        "env.max_prompt_length=256",  # left-truncated prompts: cheaper forwards
        "env.prompt_overflow=truncate",
        "env.eval_tasks=1",  # one evaluation trial per mode: rank 1 plays an empty chunk
        "env.eval_every=1",  # the evaluation falls on the last rollout (every paper config ends on one)
        "env.eval_before_train=false",
    ],
)
train(cfg, "two_ranks")
trainer = RecordingTrainer.instance
rank = trainer.accelerator.process_index
(OUT / f"rank{rank}_counts.json").write_text(
    json.dumps({"prompt_counts": trainer.prompt_counts, "collected_rows": trainer.collected_rows})
)
# every rank gathers the full ZeRO-3 parameters and saves them: the test checks that both ranks hold the same
model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
import deepspeed  # noqa: E402


params = list(model.named_parameters())
with deepspeed.zero.GatheredParameters([p for _, p in params]):
    state = {name: p.detach().clone().cpu() for name, p in params}
torch.save(state, OUT / f"rank{rank}_params.pt")
