"""Launched by test_skillrise_multirank.py on 2 CPU processes: one SkillRise rollout (trials of K = 2 tasks with a
curate step) + optimizer step + the evaluation on the last rollout, under DeepSpeed ZeRO-3, with a scripted
environment whose episodes end at different turns on each rank (`agentrl_shared.smoke.ScriptedEnv`, hosted as a
paper config hosts its environments: in worker processes, here 4 slots in 2 workers per rank) and an evaluation panel
of one trial (rank 1's chunk is empty). The method (`skillrise`, or the GiGPO baseline `gigpo`) is the third argument.

Each rank saves its micro-batches of the first rollout, the rows it collected (with the step group each is scored
in: ((group, position), anchor)), every `_prompt_count` call and its pool's worker processes; rank 0 also writes
`results.json` (through the CLI); every rank saves its final weights, which the test compares with a naive
single-process loop. The workers are spawned and run this file as
`__mp_main__`: everything but the light imports is in `main`.
"""

import json
import sys
from pathlib import Path

from agentrl_shared.smoke import ScriptedEnv, save_first_batches, save_rank_outputs


def main(out: Path, ds: Path, method: str) -> None:
    import skillrise.trainer
    from skillrise.cli import method_config, train

    class RecordingTrainer(skillrise.trainer.SkillRiseTrainer):
        """Saves this rank's rows and micro-batches of the first rollout and every prompt count it asked for."""

        instance = None

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            RecordingTrainer.instance = self
            self.prompt_counts: list[tuple[int, int]] = []  # (this rank's own prompts, prompts sent)
            self.collected_rows = 0
            self.step_groups: list[list] = []  # per scored row: [group, position, anchor]

        def _prompt_count(self, n_active):
            n = super()._prompt_count(n_active)
            self.prompt_counts.append((n_active, n))
            return n

        def _score(self, trials):
            rows, advantages = super()._score(trials)
            self.collected_rows += len(rows)
            self.step_groups += [[r.group_id, p, r.anchor] for t in trials for r, p in t.rows() if not r.failed]
            return rows, advantages

        def _rollout_micro_batches(self, inputs):
            batches = super()._rollout_micro_batches(inputs)
            save_first_batches(self, batches, out)
            return batches

    skillrise.trainer.make_env_factory = lambda env_config: ScriptedEnv  # the pool builds one per slot
    skillrise.trainer.SkillRiseTrainer = RecordingTrainer
    overrides = [
        f"trainer.output_dir={out}",
        f"trainer.deepspeed={ds}",
        "trainer.num_rollouts=1",
        "trainer.optim=sgd",  # the update is lr * gradient: comparable to the reference to 1e-5
        "trainer.learning_rate=1.0",
        "trainer.weight_decay=0.0",
        "trainer.max_grad_norm=0.0",
        "trainer.micro_batch_rows=4",
        "trainer.gradient_accumulation_steps=4",  # 16 rows per rank per step: the rollout (32 rows) is one step
        "trainer.max_completion_length=4",
        "env.max_turns=3",
        "env.num_workers=2",  # the smoke config's 4 slots in 2 worker processes per rank
        "env.max_prompt_length=256",  # left-truncated prompts: cheaper forwards
        "env.prompt_overflow=truncate",
        "env.eval_tasks=1",  # one evaluation trial per mode: rank 1 plays an empty chunk
        "env.eval_every=1",  # the evaluation falls on the last rollout (every paper config ends on one)
        "env.eval_before_train=false",
    ]
    train(method_config("smoke", method, overrides), "two_ranks")
    trainer = RecordingTrainer.instance
    rank = save_rank_outputs(trainer, out)  # its pool's service and its gathered weights
    counts = {"prompt_counts": trainer.prompt_counts, "collected_rows": trainer.collected_rows,
              "step_groups": trainer.step_groups}  # fmt: skip
    (out / f"rank{rank}_counts.json").write_text(json.dumps(counts))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
