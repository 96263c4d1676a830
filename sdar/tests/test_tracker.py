"""`trainer.report_to=tensorboard` works offline: the smoke run writes TensorBoard event files with the trainer's
metrics (rollout-level ones included)."""

from sdar.cli import main


def test_report_to_tensorboard_writes_event_files_offline(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    main(["train", "--config", "smoke", "trainer.report_to=tensorboard", f"trainer.output_dir={out}"])
    events = sorted(out.rglob("events.out.tfevents.*"))  # (transformers 5: under the output folder)
    assert events, sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert any(t.endswith("loss") for t in tags) and any("env/success_rate" in t for t in tags), tags
