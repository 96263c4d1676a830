"""Training goes on when environments crash and the model's output is malformed (episodes masked, penalised)."""

import itertools
import json

import agentrl_shared.trainer
from agentrl_shared.envs.textrooms import TextRoomsEnv
from sdar.cli import main


class CrashingEnv(TextRoomsEnv):
    """Every other instance raises on its first step: its episodes must end as failed, never the run."""

    counter = itertools.count()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.crash = next(self.counter) % 2 == 0

    def step(self, action):
        if self.crash:
            raise RuntimeError("simulated engine crash")
        return super().step(action)


def test_training_survives_env_crashes_and_malformed_output(tmp_path, monkeypatch):
    monkeypatch.setattr(agentrl_shared.trainer, "make_env", lambda name, **kw: CrashingEnv(**kw))
    out = tmp_path / "run"
    main(["train", "--config", "smoke", f"trainer.output_dir={out}"])
    logs = [h for h in json.loads((out / "results.json").read_text())["log_history"] if "loss" in h]
    assert len(logs) == 2  # both optimizer steps ran
    assert all(h["env/failed_ratio"] > 0 for h in logs)  # crashed episodes were counted
    assert all(h["env/invalid_action_ratio"] > 0.5 for h in logs)  # the random model's text is malformed
    assert all(h["rollout/loss_rows_ratio"] < 1.0 for h in logs)  # failed episodes' rows carry no loss
