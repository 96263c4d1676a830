"""Launched by test_envace_multirank.py on 2 CPU processes (DDP over gloo): one EnvACE rollout and optimizer step
through `envace.cli.train` with scripted generation (`scripted.ScriptedPolicy`) on single-turn tasks
(`env.max_task_turns=1`, at most 3 rows per episode, 4 episodes per rank). Garbage answers (rank 0: 40%, rank 1: 70%)
end episodes early: the ranks collect different numbers of rows (10 and 6 with these seeds) and rewards vary within
groups, so the advantages and the gradient are non-zero. Each rank saves the rows it collected, its micro-batches and
its parameters after the step; rank 0 also writes `results.json`.
"""

import os
import sys
from pathlib import Path

import torch


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # envace/tests: scripted.py
from scripted import ScriptedPolicy  # noqa: E402

import envace.trainer  # noqa: E402
from envace.cli import load, train  # noqa: E402
from envace.data import generate_tasks  # noqa: E402


OUT, RANK = Path(sys.argv[1]), int(os.environ["RANK"])
GARBAGE = [0.4, 0.7]  # per rank
# smoke.yaml's train and eval tasks, single-turn (env.max_task_turns=1 below)
TASKS = generate_tasks(8, seed=0, max_turns=1) + generate_tasks(4, seed=1_000_000, max_turns=1)


class RecordingTrainer(envace.trainer.EnvACETrainer):
    instance = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingTrainer.instance = self
        collect = self.collector.collect

        def spy(*a, **k):
            self.collected = collect(*a, **k)
            return self.collected

        self.collector.collect = spy

    def _rollout_micro_batches(self, inputs):
        batches = super()._rollout_micro_batches(inputs)
        rows = [(r.prompt_ids, r.completion_ids, r.role, r.failed) for t in self.collected for r in t.rows]
        torch.save({"rows": rows, "batches": [{k: v.cpu() for k, v in b.items() if torch.is_tensor(v)} for b in batches]},
                   OUT / f"rank{RANK}_rollout.pt")  # fmt: skip
        return batches


envace.trainer.EnvACETrainer = RecordingTrainer
envace.trainer.trainer_generate_fn = lambda trainer: ScriptedPolicy(
    trainer.processing_class, TASKS, garbage=GARBAGE[RANK], seed=RANK
)
cfg = load(
    "smoke", [f"trainer.output_dir={OUT}", "trainer.max_steps=1", "env.eval_episodes=2", "env.max_task_turns=1"]
)
train(cfg, "two_ranks")
model = RecordingTrainer.instance.accelerator.unwrap_model(RecordingTrainer.instance.model)
torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, OUT / f"rank{RANK}_params.pt")
