"""Evaluating a second checkpoint plays its own episodes: run folders are named after the checkpoint's run, and an
episode log that another model wrote is refused (`agentrl_shared.evaluation.check_log_identity`)."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl_shared.models import tiny_qwen3
from sdar.cli import main


def checkpoint(root, name, seed):
    """A copy of the tiny model under `<root>/<name>/final` with its own random weights."""
    out = root / name / "final"
    shutil.copytree(tiny_qwen3(), out)
    model = AutoModelForCausalLM.from_pretrained(out)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    model.save_pretrained(out)
    return out


def test_a_second_checkpoint_is_evaluated_not_resumed(tmp_path, capsys):
    a, b = checkpoint(tmp_path, "runA", 1), checkpoint(tmp_path, "runB", 2)
    runs = tmp_path / "runs"
    base = ["eval", "--config", "smoke", "--output", str(runs), "env.eval_episodes=2"]
    main([*base, f"model.name_or_path={a}"])
    main([*base, f"model.name_or_path={b}"])
    folders = sorted(p.name for p in runs.iterdir())
    assert folders == ["textrooms_runA-final_eval_seed0", "textrooms_runB-final_eval_seed0"]
    for folder, ck in zip(folders, (a, b)):
        identity = json.loads((runs / folder / "episodes.identity.json").read_text())
        assert identity["model"] == str(ck.resolve())
        assert len((runs / folder / "episodes.jsonl").read_text().splitlines()) == 2  # its own two episodes
    ids = [json.loads((runs / f / "episodes.identity.json").read_text())["fingerprint"] for f in folders]
    assert ids[0] != ids[1]
    # the same run folder for another model: one line naming the fix, no episode of the first model reused
    capsys.readouterr()
    out = runs / folders[0]
    with pytest.raises(SystemExit) as exc:
        main([*base, f"model.name_or_path={b}", f"trainer.output_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "holds episodes of" in err[0] and "another --output" in err[0]
