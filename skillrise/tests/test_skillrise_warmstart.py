"""The curation warm start (`skillrise.warmstart`): the scripted curator's documents, the gold rows on the CPU
config's prompts, and the CPU plan starting every method from the warm-started model."""

import os
import re

import pytest


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agentrl_shared.envs.textrooms import ROOM_OBJECTS
from agentrl_shared.models import model_path
from skillrise import cli
from skillrise.cli import CPU_CONFIG, load
from skillrise.trial import format_attempt
from skillrise.warmstart import FOUND, NOT_HERE, document_lines, gold_rows, warmup_rows


def test_document_lines_found_replaces_notes_else_appends_once():
    old = NOT_HERE.format(room="kitchen")
    assert document_lines(old, [("bedroom", ["bed", "zorblet"])], "zorblet") == FOUND.format(room="bedroom")
    doc = document_lines(old, [("kitchen", ["sink"]), ("bathroom", ["tub"])], "zorblet")
    assert doc.splitlines() == [NOT_HERE.format(room="kitchen"), NOT_HERE.format(room="bathroom")]
    assert document_lines("", [], "zorblet") == ""


def test_textrooms_attempt_keeps_its_task_when_steps_are_omitted():
    text = format_attempt(["start", "o1", "o2", "o3"], ["a1", "a2", "a3"], 1, "find the zorblet")
    assert text.splitlines()[:2] == ["Task: find the zorblet.", "(the first 2 step(s) are omitted)"]
    assert format_attempt(["start"], [], 3).startswith("Initial observation: start")


def test_gold_rows_on_the_cpu_config_teach_the_formats_not_the_tasks():
    cfg = load(CPU_CONFIG, ["warmstart.num_tasks=8"])
    args, env = cfg["trainer"], cfg["env"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path(cfg["model"].name_or_path))
    rows, trials = gold_rows(args, env, tok, 8, seed=0)
    curate = [r for r in rows if r.role == "curate"]
    play = [r for r in rows if r.role == "play"]
    assert curate and play and len(trials) > 0
    real_targets = {o for objs in ROOM_OBJECTS.values() for o in objs[2:]}
    for r in rows:
        completion = tok.decode(r.completion_ids, skip_special_tokens=True)
        assert len(r.completion_ids) <= args.max_completion_length
        assert not any(f" {o}" in completion for o in real_targets), completion
    for r in curate:
        text = env.curate_prefix + tok.decode(r.completion_ids, skip_special_tokens=True)
        assert text.startswith("<skill>") and text.rstrip().endswith("</skill>"), text
        assert "Task: " in tok.decode(r.prompt_ids)  # TextRooms' attempt names its target
    shown = ["The target object is" in tok.decode(r.prompt_ids) for r in play]
    assert any(shown) and not all(shown)  # reading rows (a document shown) and first attempts (none)
    admissible = re.compile(r"Admissible actions: (.*)\.\nAnswer with one admissible action\.")
    for r in play:  # every gold action is one of its prompt's admissible actions
        action = tok.decode(r.completion_ids, skip_special_tokens=True).removesuffix("</action>")
        assert action in admissible.findall(tok.decode(r.prompt_ids))[-1].split(", "), action
    with pytest.raises(ValueError, match="over trainer.max_completion_length"):
        warmup_rows(trials, 8)


def test_cpu_plan_starts_every_method_from_the_warm_start(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cli, "warm_start", lambda cfg, method: calls.append((method, cfg)))
    monkeypatch.setattr(cli, "train", lambda cfg, method: calls.append((method, cfg)))
    monkeypatch.setattr(cli, "evaluate_model", lambda cfg, method: calls.append((method, cfg)))
    cli.reproduce("cpu", [0], ["warmstart.num_tasks=3"], tmp_path)
    methods = [m for m, _ in calls]
    assert methods == ["warmstart", "untrained", *cli.METHODS]
    model = {m: cfg["model"].name_or_path for m, cfg in calls}
    ws = str(tmp_path / "cpu" / "warmstart" / "seed0" / "final")
    assert model["warmstart"] != ws and all(model[m] == ws for m in methods[1:]), model
    calls.clear()
    cli.reproduce("cpu", [0], ["warmstart.num_tasks=0"], tmp_path / "nows")
    assert [m for m, _ in calls] == ["untrained", *cli.METHODS]
    assert ws not in {cfg["model"].name_or_path for _, cfg in calls}
    calls.clear()  # `--methods`: those, in the plan's order, after the warm start and the untrained evaluation
    cli.reproduce("cpu", [1], ["warmstart.num_tasks=3"], tmp_path, methods=["skillrise", "grpo"])
    assert [m for m, _ in calls] == ["warmstart", "untrained", "grpo", "skillrise"]


def test_warm_start_run_saves_a_model_and_its_figures(tmp_path):
    """`cli.warm_start` (as `reproduce` runs it) on the smoke config (tiny random Qwen3) with 4 made-up tasks: the model is saved where
    the plan's methods load it, and `results.json` counts the rows per role and one loss per step."""
    import json

    from transformers import AutoModelForCausalLM

    cfg = load("smoke", ["warmstart.num_tasks=4", "warmstart.batch_rows=2", "trainer.max_completion_length=64",
                         f"trainer.output_dir={tmp_path / 'ws'}"])  # fmt: skip
    payload = cli.warm_start(cfg, "warmstart", tmp_path)
    saved = json.loads((tmp_path / "ws" / "results.json").read_text())
    assert saved["rows"] == payload["rows"] and payload["rows"]["curate"] > 0 and payload["rows"]["play"] > 0
    assert len(saved["losses"]) == -(-sum(payload["rows"].values()) // 2) and saved["gold_trials"]
    AutoModelForCausalLM.from_pretrained(tmp_path / "ws" / "final")


def test_report_files_the_warm_start_line_beside_the_table(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from skillrise.report import report

    readme = tmp_path / "README.md"
    shutil.copy(Path(__file__).resolve().parents[1] / "README.md", readme)
    warm = {"commit": "abc1234", "seed": 0, "rows": {"play": 57, "curate": 56}, "tokens": 38353,
            "losses": [1.95, 0.3, 0.002], "train_seconds": 334.0}  # fmt: skip
    final = {"repeat": {"pass@1": 0.5}, "cross": {"success_pos0": 0.25}}
    untrained = {"commit": "abc1234", "final": final, "curve": [{"rollouts": 0, "repeat": {"pass@1": 0.5}}],
                 "eval_seconds": 300.0}  # fmt: skip
    grpo = [{"commit": "abc1234", "final": final, "curve": [], "train_seconds": t} for t in (600.0, 720.0)]
    for method, seed, payload in (("warmstart", 0, warm), ("untrained", 0, untrained), ("grpo", 0, grpo[0]),
                                  ("grpo", 1, grpo[1])):  # fmt: skip
        (tmp_path / "results" / "cpu" / method / f"seed{seed}").mkdir(parents=True)
        (tmp_path / "results" / "cpu" / method / f"seed{seed}" / "results.json").write_text(json.dumps(payload))
    report(readme)
    block = readme.read_text().split("<!-- results-cpu:start -->", 1)[1].split("<!-- results-cpu:end -->", 1)[0]
    assert "seed 0: 57 play + 56 curate rows, 38353 tokens, loss 1.950 -> 0.002 over 3 steps, 334 s" in block
    assert "| Untrained (skill carry) | repeat pass@1 % | n/a (figure only) | 50.0" in block
    assert (
        "Untrained (skill carry) 5.0 min (n = 1); GRPO (group 24 matched; 12 at CPU scale) 11.0 min (n = 2)." in block
    )
    assert (tmp_path / "results" / "cpu" / "learning_curves.png").exists()
