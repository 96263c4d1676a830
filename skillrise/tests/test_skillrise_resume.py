"""Checkpoints count rollouts: a `save_steps` that never falls on a rollout's end still leaves a checkpoint after every
rollout in which a save fell due and after the last one, and a run resumed from the first ends with the uninterrupted
run's weights."""

import json

import torch
from safetensors.torch import load_file

from skillrise.cli import main


SAVE_STEPS = 3


def checkpoints(out) -> dict[int, str]:
    """rollouts done -> checkpoint folder (as recorded in each checkpoint's trainer_state.json)."""
    found = {}
    for ckpt in sorted(out.glob("checkpoint-*")):
        state = json.loads((ckpt / "trainer_state.json").read_text())
        found[state["stateful_callbacks"]["RolloutCadence"]["attributes"]["rollouts_done"]] = ckpt
    return found


def test_saves_due_inside_rollouts_are_kept_and_resume_matches_the_uninterrupted_run(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    # 4-row optimizer steps: a rollout of 4 trials x (2 + 1 + 2) rows makes 5 steps; saves fall due at 3, 6 and 9
    common = ["train", "--config", "smoke", "trainer.num_rollouts=2", "trainer.micro_batch_rows=4",
              "trainer.gradient_accumulation_steps=1", "trainer.save_strategy=steps", f"trainer.save_steps={SAVE_STEPS}",
              "trainer.learning_rate=0.001", "env.max_prompt_length=256", "env.prompt_overflow=truncate", "env.eval_modes=[repeat]",
              "env.eval_tasks=1"]  # fmt: skip
    main([*common, f"trainer.output_dir={full}"])
    a = json.loads((full / "results.json").read_text())
    ends, step = [], 0
    for h in a["log_history"]:
        if "rollout/optimizer_steps" in h:
            step += int(h["rollout/optimizer_steps"])
            ends.append(step)
    assert len(ends) == 2 and ends[-1] == a["steps"]
    assert all(end % SAVE_STEPS != 0 for end in ends)  # no save falls on a rollout's end
    assert ends[0] > SAVE_STEPS  # a save fell due inside the first rollout (and one inside the second)
    saved = checkpoints(full)
    assert sorted(saved) == [1, 2]  # each taken at its rollout's end
    assert [json.loads((saved[r] / "trainer_state.json").read_text())["global_step"] for r in (1, 2)] == ends

    main([*common, f"trainer.output_dir={resumed}", f"trainer.resume_from_checkpoint={saved[1]}"])
    b = json.loads((resumed / "results.json").read_text())
    assert a["rollouts"] == b["rollouts"] == 2 and a["steps"] == b["steps"]
    # the resumed run trained the steps after the checkpoint only (rollout 2), on the full run's learning rates
    new_logs = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in new_logs if "loss" in h] == list(range(ends[0] + 1, a["steps"] + 1))
    lr = lambda r: [h["learning_rate"] for h in r["log_history"] if "learning_rate" in h]  # noqa: E731
    assert lr(b) == lr(a)
    wa, wb = (load_file(d / "final" / "model.safetensors") for d in (full, resumed))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)
