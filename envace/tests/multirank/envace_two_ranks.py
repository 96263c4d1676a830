"""Launched by test_envace_multirank.py on 2 CPU processes under DeepSpeed ZeRO-3 (gloo): one EnvACE rollout, its
optimizer step and the evaluation on the last rollout, through `envace.cli.train` with scripted generation
(`scripted.ScriptedPolicy`, one per rank) on single-turn tasks (`env.max_task_turns=1`: call, rehearsal, reply; 4
episodes per rank). Garbage answers (rank 0: 40%, rank 1: 70%) end episodes after 1, 2 or 3 generations: the ranks
collect different numbers of rows and rewards vary within groups, so the advantages and the gradient are non-zero.
Each rank saves the rows it collected and its micro-batches of the rollout, and its (gathered) parameters after
training; rank 0 also writes `results.json` (through the CLI), which the test compares with a naive loop.
"""

import os
import sys
from pathlib import Path

import torch


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # envace/tests: scripted.py
from scripted import ScriptedPolicy  # noqa: E402

import agentrl_shared.trainer  # noqa: E402
import envace.trainer  # noqa: E402
from envace.cli import load, train  # noqa: E402
from envace.data import generate_tasks  # noqa: E402


OUT, RANK = Path(sys.argv[1]), int(os.environ["RANK"])
GARBAGE = [0.4, 0.7]  # per rank
# smoke.yaml's train and eval tasks, single-turn (env.max_task_turns=1 below)
TASKS = generate_tasks(8, seed=0, max_turns=1) + generate_tasks(4, seed=1_000_000, max_turns=1)


class RecordingTrainer(envace.trainer.EnvACETrainer):
    """Saves this rank's collected rows and micro-batches of the (only) rollout."""

    instance = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingTrainer.instance = self

    def _collect(self, *args, **kwargs):
        self.collected = super()._collect(*args, **kwargs)
        return self.collected

    def _rollout_micro_batches(self, inputs):
        batches = super()._rollout_micro_batches(inputs)
        rows = [(r.prompt_ids, r.completion_ids, r.role, len(t.rows)) for t in self.collected for r in t.rows]
        torch.save({"rows": rows, "batches": [{k: v.cpu() for k, v in b.items()} for b in batches]},
                   OUT / f"rank{RANK}_rollout.pt")  # fmt: skip
        return batches


POLICY = None


def scripted(trainer):
    """The trainer's generation (`MultiTurnGRPOTrainer._generate`), scripted; one policy per rank, so that its
    random garbage stream runs through the whole run."""
    global POLICY
    POLICY = POLICY or ScriptedPolicy(trainer.processing_class, TASKS, garbage=GARBAGE[RANK], seed=RANK)
    return POLICY


envace.trainer.EnvACETrainer = RecordingTrainer
agentrl_shared.trainer.trainer_generate_fn = scripted
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
        "env.max_task_turns=1",
        "env.eval_episodes=3",  # an odd panel: the ranks' slices differ (2 and 1 episodes)
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
torch.save(state, OUT / f"rank{RANK}_params.pt")
