"""Training counted in rollouts, for trainers that make a variable number of optimizer steps per rollout.

verl-agent (langfengQ/verl-agent@796ed31, `verl/trainer/ppo/ray_trainer.py`) makes one training step per rollout and
counts its schedules in those steps, while a rollout's rows make ceil(rows / mini-batch) optimizer updates
(`agentrl_shared.batch.plan_steps`). The HF loop underneath TRL counts optimizer steps, so a trainer driven this way
(its `_prepare_inputs` runs a rollout when the previous one's micro-batches are used up) takes from here:
`GroupedTaskSampler` (one long epoch of task groups, so gradient-accumulation boundaries never shift), the
learning-rate factor over rollouts (`rollout_lr_factor`) and the callback that stops after `num_rollouts` and keeps
the rollout count in checkpoints (`RolloutCadence`). The trainer sets `rollout_finished` on the optimizer step that
uses a rollout's last micro-batch, counts `rollouts_done` and writes its console line in `log_rollout_line()`. `agentrl_shared.trainer.MultiTurnGRPOTrainer` is the trainer that uses
them.
"""

import json
import logging
import math
import signal
import threading
from pathlib import Path

import torch
from torch.utils.data import Sampler
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState


logger = logging.getLogger(__name__)


class GroupedTaskSampler(Sampler):
    """Task indices, each repeated G times consecutively (one group), through fresh seeded permutations.

    TRL's `RepeatSampler` repeats a generation batch `steps_per_generation` times and ends an epoch after one pass;
    here a rollout makes a variable number of optimizer steps, so the stream is long enough for the whole run (one
    epoch for the HF loop, whose gradient-accumulation boundaries then never shift) and every batch is new.
    """

    def __init__(self, num_tasks: int, group_size: int, seed: int, num_samples: int):
        self.num_tasks, self.group_size, self.seed, self.num_samples = num_tasks, group_size, seed, num_samples

    def __iter__(self):
        generator, n = torch.Generator().manual_seed(self.seed), 0
        while True:
            for i in torch.randperm(self.num_tasks, generator=generator).tolist():
                for _ in range(self.group_size):
                    if n == self.num_samples:
                        return
                    yield i
                    n += 1

    def __len__(self) -> int:
        return self.num_samples


def rollout_lr_factor(schedule: str, rollout: int, num_rollouts: int, warmup_rollouts: int) -> float:
    """Learning-rate factor while training on rollout `rollout` (0-based); schedules count rollouts, as verl counts
    training steps (one per rollout; `actor.optim.lr_warmup_steps_ratio`). The warm-up is verl's
    (`verl/utils/torch_functional.py` `get_constant_schedule_with_warmup`, stepped after each update in
    `fsdp_workers.py` `update_actor`): rollout r trains at r / warmup of the LR, so the first update runs at 0."""
    if rollout < warmup_rollouts:
        return rollout / warmup_rollouts
    if schedule in ("constant", "constant_with_warmup"):
        return 1.0
    progress = (rollout - warmup_rollouts) / max(num_rollouts - warmup_rollouts, 1)
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))  # cosine


class SignalStop(TrainerCallback):
    """SIGTERM (a cluster's pre-emption) or SIGINT stops a run cleanly: the optimizer step in progress finishes, is
    saved (even when `save_strategy="no"`) and training ends with `trainer.stopped_by_signal` set, which the
    package's `train` turns into `agentrl_shared.cli.Stopped` (exit 143; the same command resumes). The ranks agree
    at every step end (one all-reduce), so a signal that reached one rank stops all of them at the same step. A
    second SIGINT interrupts at once. For trainers counted in optimizer steps (VAD); `RolloutCadence` stops at a
    rollout's end instead."""

    unit = "step"  # what finishes before the stop (the console line)

    def __init__(self, trainer):
        self.trainer = trainer
        self.signalled: str | None = None
        self._previous_handlers: dict = {}

    def _on_signal(self, signum, frame) -> None:
        if self.signalled == "SIGINT" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signalled = signal.Signals(signum).name
        logger.warning(f"{self.signalled}: stopping after this {self.unit}, with a checkpoint (SIGINT again: at once)")

    def signalled_on_any_rank(self) -> bool:
        """Whether a signal reached any rank (every rank gets the same answer: one all-reduce)."""
        flag = float(self.signalled is not None)
        accelerator = self.trainer.accelerator
        if accelerator.num_processes == 1:
            return flag > 0
        total = accelerator.reduce(torch.tensor([flag], device=accelerator.device), reduction="sum")
        return total.item() > 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer.stopped_by_signal = False
        if threading.current_thread() is threading.main_thread():  # (signal handlers live in the main thread)
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)

    def on_train_end(self, args, state, control, **kwargs):
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    def on_step_end(self, args, state, control, **kwargs):
        if self.signalled_on_any_rank():
            self.trainer.stopped_by_signal = True
            control.should_training_stop = control.should_save = True


class RolloutCadence(SignalStop, ExportableState):
    """Ends training after `num_rollouts` rollouts (at the optimizer step that finishes the last one); one console
    line per rollout, every logged metric to `<output_dir>/metrics.jsonl` (and to `report_to`, by TRL).

    A save that HF's `save_steps` makes due inside a rollout happens at that rollout's end; the last rollout is always
    saved (unless `save_strategy="no"`). The rollout count is saved in every checkpoint's `trainer_state.json` and
    restored on resume, so a resumed run continues the rollout-counted LR schedule and group ids and stops after
    `num_rollouts` rollouts in all (the HF loop skips the data batches of the optimizer steps already taken, so the
    sampler resumes at the same task group; HF restores each rank's RNG states).

    A signal stops the run as `SignalStop` says, at the end of the rollout in progress: the ranks agree at every
    rollout end (one all-reduce), so a signal that reached one rank stops all of them at the same step."""

    unit = "rollout"

    def __init__(self, trainer):
        super().__init__(trainer)
        self.save_pending = False

    def state(self) -> dict:
        return {"args": {}, "attributes": {"rollouts_done": self.trainer.rollouts_done}}

    def on_train_begin(self, args, state, control, **kwargs):
        # a fresh state holds this callback's state at construction (0); a resumed one the checkpoint's
        self.trainer.rollouts_done = state.stateful_callbacks[type(self).__name__]["attributes"]["rollouts_done"]
        super().on_train_begin(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            path = Path(args.output_dir) / "metrics.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(json.dumps({"step": state.global_step, **logs}) + "\n")

    def on_step_end(self, args, state, control, **kwargs):
        t = self.trainer
        if not t.rollout_finished:
            # checkpoints only between rollouts (the rest of a rollout's micro-batches is in no checkpoint): a save
            # that falls due inside a rollout is deferred to that rollout's end, never dropped
            self.save_pending |= control.should_save
            control.should_save = False
            return
        t.log_rollout_line()
        if self.save_pending:
            control.should_save, self.save_pending = True, False
        super().on_step_end(args, state, control)  # a signal: saved and stopped here, on every rank
        if t.rollouts_done >= args.num_rollouts:
            control.should_training_stop = True
            # the last finished rollout is always in a checkpoint when the run saves at all
            control.should_save = control.should_save or args.save_strategy != "no"


__all__ = ["GroupedTaskSampler", "RolloutCadence", "SignalStop", "rollout_lr_factor"]
