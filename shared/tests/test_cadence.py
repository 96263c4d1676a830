"""`RolloutCadence`: saves fall only between rollouts, a save due inside a rollout is deferred (never dropped), the
last rollout is always saved, and training stops after `num_rollouts`."""

from types import SimpleNamespace

from transformers import TrainerControl

from agentrl_shared.cadence import RolloutCadence, SignalStop


def drive(rollout_lengths: list[int], save_steps: int, save_strategy: str = "steps") -> tuple[list[int], int]:
    """Run the callback over optimizer steps (HF marks a save due every `save_steps` steps); returns the steps
    at which a save happened and the step at which training stopped."""
    trainer = SimpleNamespace(
        rollouts_done=0,
        rollout_finished=False,
        log_rollout_line=lambda: None,
        accelerator=SimpleNamespace(num_processes=1),
    )
    cadence = RolloutCadence(trainer)
    args = SimpleNamespace(num_rollouts=len(rollout_lengths), save_strategy=save_strategy)
    saved, step = [], 0
    for length in rollout_lengths:
        trainer.rollouts_done += 1
        for k in range(length):
            step += 1
            trainer.rollout_finished = k == length - 1
            control = TrainerControl()
            control.should_save = save_strategy == "steps" and step % save_steps == 0  # HF's own decision
            cadence.on_step_end(args, None, control)
            if control.should_save:
                saved.append(step)
            if control.should_training_stop:
                return saved, step
    raise AssertionError("training never stopped")


def test_a_save_due_inside_a_rollout_happens_at_its_end_and_the_last_rollout_is_saved():
    # rollouts end at steps 3, 5, 9, 10; saves fall due at 4 and 8 (inside rollouts 2 and 3)
    saved, stopped = drive([3, 2, 4, 1], save_steps=4)
    assert saved == [5, 9, 10] and stopped == 10


def test_a_save_due_at_a_rollout_end_is_taken_there_once():
    saved, _ = drive([2, 2, 2], save_steps=2)
    assert saved == [2, 4, 6]


def test_no_checkpoint_when_the_run_never_saves():
    saved, stopped = drive([3, 2], save_steps=4, save_strategy="no")
    assert saved == [] and stopped == 5


def test_a_signal_stops_at_the_end_of_the_rollout_in_progress_with_a_checkpoint():
    trainer = SimpleNamespace(rollouts_done=1, rollout_finished=False, log_rollout_line=lambda: None,
                              accelerator=SimpleNamespace(num_processes=1), stopped_by_signal=False)  # fmt: skip
    cadence = RolloutCadence(trainer)
    args = SimpleNamespace(num_rollouts=5, save_strategy="no")
    cadence.signalled = "SIGTERM"  # arrives during rollout 1
    control = TrainerControl()
    cadence.on_step_end(args, None, control)  # mid-rollout: nothing yet
    assert not control.should_training_stop and not control.should_save
    trainer.rollout_finished = True
    cadence.on_step_end(args, None, control)  # the rollout's last step: saved and stopped, though saving is off
    assert control.should_training_stop and control.should_save and trainer.stopped_by_signal


def test_signal_stop_saves_and_stops_at_the_step_in_progress():
    """`SignalStop` alone (a trainer counted in optimizer steps): nothing before the signal, then that step saves
    and stops."""
    trainer = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1), stopped_by_signal=False)
    stop = SignalStop(trainer)
    control = TrainerControl()
    stop.on_step_end(None, None, control)
    assert not control.should_training_stop and not control.should_save and not trainer.stopped_by_signal
    stop.signalled = "SIGTERM"
    stop.on_step_end(None, None, control)
    assert control.should_training_stop and control.should_save and trainer.stopped_by_signal


def test_the_warm_up_is_verls_first_update_at_zero():
    """verl `get_constant_schedule_with_warmup`, stepped after each update: rollout r at r / warmup of the LR."""
    from agentrl_shared.cadence import rollout_lr_factor

    factors = [rollout_lr_factor("constant_with_warmup", r, num_rollouts=150, warmup_rollouts=15) for r in range(17)]
    assert factors == [r / 15 for r in range(15)] + [1.0, 1.0]
    assert rollout_lr_factor("linear", 0, num_rollouts=10, warmup_rollouts=0) == 1.0
