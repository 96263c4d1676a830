"""A run stopped after its first rollout and resumed from that checkpoint ends where the uninterrupted run ends."""

import json
import os
import signal

import pytest
import torch
from safetensors.torch import load_file

from agentrl_shared.trainer import MultiTurnGRPOTrainer
from sdar.cli import main


def checkpoints(out) -> dict[int, str]:
    """rollouts done -> checkpoint folder (as recorded in each checkpoint's trainer_state.json)."""
    found = {}
    for ckpt in sorted(out.glob("checkpoint-*")):
        state = json.loads((ckpt / "trainer_state.json").read_text())
        found[state["stateful_callbacks"]["RolloutCadence"]["attributes"]["rollouts_done"]] = ckpt
    return found


def test_resume_restores_the_rollout_count_and_matches_the_uninterrupted_run(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    common = ["train", "--config", "smoke", "trainer.num_rollouts=2", "trainer.save_strategy=steps",
              "trainer.save_steps=1", "trainer.learning_rate=0.001"]  # fmt: skip
    main([*common, f"trainer.output_dir={full}"])
    saved = checkpoints(full)
    assert sorted(saved) == [1, 2]  # one checkpoint per rollout: none in the middle of a rollout
    # resume a copy of the run from the checkpoint after the first rollout
    main([*common, f"trainer.output_dir={resumed}", f"trainer.resume_from_checkpoint={saved[1]}"])
    a, b = (json.loads((d / "results.json").read_text()) for d in (full, resumed))
    assert a["rollouts"] == b["rollouts"] == 2 and a["steps"] == b["steps"]
    # the resumed run trained the steps after the checkpoint only (rollout 2), on the full run's learning rates
    step1 = json.loads((saved[1] / "trainer_state.json").read_text())["global_step"]
    new_logs = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in new_logs if "loss" in h] == list(range(step1 + 1, a["steps"] + 1))
    lr = lambda r: [h["learning_rate"] for h in r["log_history"] if "learning_rate" in h]  # noqa: E731
    assert lr(b) == lr(a)
    wa, wb = (load_file(d / "final" / "model.safetensors") for d in (full, resumed))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)


def rollout_ends(out) -> list[int]:
    """The global step that ends each rollout (a rollout's metrics are logged on its first optimizer step)."""
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    starts = [h["step"] for h in logs if "rollout/rows" in h]
    final = json.loads((out / "results.json").read_text())["steps"]
    return [s - 1 for s in starts[1:]] + [final]


def test_saves_due_inside_a_rollout_happen_at_its_end_and_the_last_rollout_is_saved(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    # 1-row micro-batches, 2 per step: a rollout of 4-8 rows makes 2-4 optimizer steps, so save_steps=3 falls inside
    # rollouts (HF alone would save only when the step count hits a multiple of 3 at a rollout's end)
    common = ["train", "--config", "smoke", "trainer.num_rollouts=3", "trainer.micro_batch_rows=1",
              "trainer.save_strategy=steps", "trainer.save_steps=3", "trainer.learning_rate=0.001"]  # fmt: skip
    main([*common, f"trainer.output_dir={full}"])
    ends = rollout_ends(full)
    saved = checkpoints(full)
    steps = {r: json.loads((c / "trainer_state.json").read_text())["global_step"] for r, c in saved.items()}
    starts = [0, *ends[:-1]]
    due = [
        r + 1
        for r, (s, e) in enumerate(zip(starts, ends, strict=True))
        if any(k % 3 == 0 for k in range(s + 1, e + 1))
    ]
    assert sorted(saved) == sorted({*due, len(ends)})  # every rollout where a save fell due, and the last one
    assert all(steps[r] == ends[r - 1] for r in saved)  # each at its rollout's end, none in the middle
    assert any(ends[r - 1] % 3 for r in due)  # the test really has a save that fell inside a rollout
    first = min(saved)
    main([*common, f"trainer.output_dir={resumed}", f"trainer.resume_from_checkpoint={saved[first]}"])
    wa, wb = (load_file(d / "final" / "model.safetensors") for d in (full, resumed))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)


def test_sigterm_stops_after_the_rollout_with_a_checkpoint_that_resumes_to_the_same_weights(tmp_path, monkeypatch):
    full, stopped = tmp_path / "full", tmp_path / "stopped"
    common = ["train", "--config", "smoke", "trainer.num_rollouts=2", "trainer.learning_rate=0.001"]  # no saves
    main([*common, f"trainer.output_dir={full}"])
    collect = MultiTurnGRPOTrainer._collect

    def collect_then_sigterm(self, *args):  # the signal arrives while the first rollout is being played
        episodes = collect(self, *args)
        if self.rollouts_done == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return episodes

    monkeypatch.setattr(MultiTurnGRPOTrainer, "_collect", collect_then_sigterm)
    with pytest.raises(SystemExit) as exc:  # the command ends as unfinished: 128 + SIGTERM
        main([*common, f"trainer.output_dir={stopped}"])
    assert exc.value.code == 143
    assert not (stopped / "results.json").exists()  # unfinished: `reproduce` would resume it
    saved = checkpoints(stopped)
    assert sorted(saved) == [1]  # the rollout in progress finished and was saved
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is removed after training
    monkeypatch.undo()
    main([*common, f"trainer.output_dir={stopped}", f"trainer.resume_from_checkpoint={saved[1]}"])
    wa, wb = (load_file(d / "final" / "model.safetensors") for d in (full, stopped))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)
