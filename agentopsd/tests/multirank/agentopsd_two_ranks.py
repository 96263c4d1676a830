"""Launched by test_agentopsd_multirank.py on 2 CPU processes: one AgentOPSD rollout + optimizer step + end-of-run
evaluation under DeepSpeed ZeRO-3 with a scripted environment whose episodes end at different turns on each rank
(`agentrl_shared.smoke.ScriptedEnv`), hosted as a paper config hosts its environments: in worker processes, here 4
slots in 2 workers per rank (fewer step calls than the pool's probe, so they stay there).

Each rank saves the rollout's rows (as gathered from every rank), its micro-batches of the first rollout and its
pool's worker processes; rank 0 also writes `results.json` (through the CLI); every rank saves its gathered final
weights. The test compares them with a naive single-process loop. The workers are spawned and run this file as
`__mp_main__`: everything but the light imports is in `main`.
"""

import sys
from pathlib import Path

from agentrl_shared.smoke import save_first_batches, save_rank_outputs, scripted_env


def main(out: Path, ds: Path, extra: list[str]) -> None:
    import torch

    import agentopsd.trainer
    import agentrl_shared.trainer
    from agentopsd.cli import load, train

    class RecordingTrainer(agentopsd.trainer.AgentOPSDTrainer):
        """Saves the first rollout's rows and this rank's micro-batches (the reference recomputes everything from
        them)."""

        instance = None

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            RecordingTrainer.instance = self

        def _extra_forwards(self, micro_batches, indices, rows, plan, old):
            if self.rollouts_done == 1:  # every rank's rows after the gather, with their GRPO advantages
                m = ("group_id", "episode_id", "turn_idx", "reward", "return")
                table = [(r.prompt_ids, r.completion_ids, r.carries_loss, r.advantage, r.teacher_prompt_ids,
                          tuple(r.meta[k] for k in m)) for r in rows]  # fmt: skip
                torch.save(table, out / f"rank{self.accelerator.process_index}_rows.pt")
            super()._extra_forwards(micro_batches, indices, rows, plan, old)

        def _rollout_micro_batches(self, inputs):
            batches = super()._rollout_micro_batches(inputs)
            save_first_batches(self, batches, out)
            return batches

    agentrl_shared.trainer.make_env = scripted_env
    agentopsd.trainer.AgentOPSDTrainer = RecordingTrainer
    overrides = [
        f"trainer.output_dir={out}",
        f"trainer.deepspeed={ds}",
        *extra,
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
        "env.num_workers=2",  # the smoke config's 4 slots in 2 worker processes per rank
        "env.eval_episodes=3",
        "env.eval_every=1",  # the evaluation falls on the last rollout (every paper config ends on one)
        "env.eval_before_train=false",
    ]
    train(load("smoke", overrides), "two_ranks")
    save_rank_outputs(RecordingTrainer.instance, out)  # its pool's service and its gathered weights


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
