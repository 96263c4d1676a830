"""`skillrise mechanisms` end to end on the smoke config (tiny Qwen3, scripted generation, seconds): the results file's
provenance and panels, the per-position counts against the trials played, the document withheld from every solve
prompt of the play without it (and only there), the report block, and the untrained row alone when no checkpoint
exists.

Generation is scripted: a random tiny model never writes a `<skill>` block, so it would never carry a document. The
scripted policy solves a task only when its solve prompt shows a document other than the empty one, so the document
decides every outcome: success at position 2 is 100 % with it and 0 % without it, and position 1 (the empty document
in both plays) is 0 % in both.
"""

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

import agentrl_shared.trainer
from agentrl_shared.envs.textrooms import ROOM_OBJECTS
from agentrl_shared.models import model_path
from skillrise.cli import main
from skillrise.mechanisms import table
from skillrise.report import report
from skillrise.trial import EMPTY_DOCUMENT, SKILL_HEADER


DOCUMENT = "Go straight to the room where such objects are kept."  # what the scripted curate phase writes


class DocumentReader:
    """Curate: `<skill>DOCUMENT</skill>`. Solve: with the empty document, an answer without the closing tag (invalid:
    the task fails); with any other document, the solution's next action. Records every prompt it is sent."""

    def __init__(self, tok):
        self.tok, self.prompts = tok, []

    def __call__(self, prompt_ids):
        out = []
        for ids in prompt_ids:
            text = self.tok.decode(ids)
            self.prompts.append(text)
            if "SKILL DOCUMENT" in text:  # the curate prompt
                answer = f"Reasoning. <skill>{DOCUMENT}</skill>"
            elif EMPTY_DOCUMENT in text or "Task: " not in text:  # the empty document, or a dummy prompt
                answer = "no idea"
            else:
                last = text.rsplit("Task: ", 1)[1]  # the current task (the worked example comes first)
                obj = re.match(r"(?:find|fetch) the (.+?)\.\n", last).group(1)
                room = next(r for r, objs in ROOM_OBJECTS.items() if obj in objs)
                answer = f"take {obj}</action>" if f"You are in the {room}." in last else f"go to {room}</action>"
            out.append(self.tok(answer, add_special_tokens=False).input_ids)
        return out, None


@pytest.fixture
def policy(monkeypatch):
    readers = []

    def fake(trainer):  # called per generation: one reader per trainer, its prompts kept
        if not readers or readers[-1].tok is not trainer.processing_class:
            readers.append(DocumentReader(trainer.processing_class))
        return readers[-1]

    monkeypatch.setattr(agentrl_shared.trainer, "trainer_generate_fn", fake)
    return readers


def run(tmp_path: Path, checkpoints: tuple[str, ...]) -> tuple[dict, list[str], Path]:
    runs = tmp_path / "runs"
    runs.mkdir()
    for method in checkpoints:  # the tiny model stands in for the trained ones
        (runs / "cpu" / method / "seed0").mkdir(parents=True)
        (runs / "cpu" / method / "seed0" / "final").symlink_to(Path(model_path("tiny-qwen3")))
    argv = ["mechanisms", "--config", "smoke", "--runs", str(runs), "--seed", "0", "--output",
            str(runs / "cpu" / "mechanisms")]  # fmt: skip
    main(argv)
    return json.loads((runs / "cpu" / "mechanisms" / "mechanisms.json").read_text()), argv, runs


def solve_prompts(reader: DocumentReader) -> list[str]:
    return [p for p in reader.prompts if SKILL_HEADER.splitlines()[0] in p]


def test_mechanisms_withhold_the_document_and_count_every_trial(tmp_path, policy):
    payload, argv, runs = run(tmp_path, ("grpo", "skillrise"))
    assert payload["commit"] != "unknown" and payload["command"] == shlex.join(["skillrise", *argv])
    # smoke.yaml: 2 repeat tasks and 1 cross group of K = 2 (eval_tasks 2, eval_k 2), evaluation seed 1000
    instances = payload["panel"]["instances"]
    assert payload["panel"]["K"] == 2 and payload["panel"]["seeds"] == [1000]
    assert [i[0].split(":")[0] for i in instances] == ["repeat", "repeat", "cross"] and {s for _, s in instances} == {
        1000
    }
    assert list(payload["models"]) == ["untrained", "grpo", "skillrise"] and len(policy) == 3
    for (label, entry), reader in zip(payload["models"].items(), policy, strict=True):
        assert {"model", "fingerprint", "commit", "command", "seconds"} <= set(entry), label
        for mode, n in (("repeat", 2), ("cross", 1)):
            with_doc, without_doc = entry["trials"]["with"][mode], entry["trials"]["without"][mode]
            # the two plays are the same trials of the panel, in the same order
            assert [f"{mode}:" + ",".join(r["task_ids"]) for r in with_doc] == [i[0] for i in instances
                                                                                 if i[0].startswith(mode)]  # fmt: skip
            assert [r["task_ids"] for r in without_doc] == [r["task_ids"] for r in with_doc]
            p1, p2 = entry["positions"][mode]
            for r in (p1, p2):  # every paired trial falls in exactly one cell
                assert r["both"] + r["with_only"] + r["without_only"] + r["neither"] == r["trials"] == n
                assert (
                    r["won_with"] == r["both"] + r["with_only"] and r["won_without"] == r["both"] + r["without_only"]
                )
            # position 1 shows the empty document in both plays; position 2 the curated one only with the document
            assert (p1["success_with"], p1["success_without"], p1["document_shown"]) == (0.0, 0.0, 0.0)
            assert (p2["success_with"], p2["success_without"], p2["difference"]) == (1.0, 0.0, 1.0)
            assert p2["with_only"] == n and p2["document_chars"] == len(DOCUMENT)
            assert all(r["documents"] == ["", DOCUMENT] for r in with_doc)
            assert all(r["documents"] == ["", ""] and r["curate_valid"] == [] for r in without_doc)
            # the per-position rates are the evaluation's own summary
            key = "pass@{}" if mode == "repeat" else "success_pos{}"
            summary = entry["summary"]["with"][mode]
            assert (
                summary[key.format(1 if mode == "repeat" else 0)],
                summary[key.format(2 if mode == "repeat" else 1)],
            ) == (0.0, 1.0)
        # the prompts the policy saw: the document in the solve prompts of positions >= 2 of the play with it, the
        # empty document in every other solve prompt (position 1, and every position of the play without it)
        turns = {play: [r["turns"] for mode in ("repeat", "cross") for r in entry["trials"][play][mode]]
                 for play in ("with", "without")}  # fmt: skip
        prompts = solve_prompts(reader)
        assert sum(DOCUMENT in p for p in prompts) == sum(t[1] for t in turns["with"]) > 0
        assert sum(EMPTY_DOCUMENT in p for p in prompts) == sum(t[0] for t in turns["with"]) + sum(
            map(sum, turns["without"])
        )
        assert len(prompts) == sum(map(sum, turns["with"])) + sum(map(sum, turns["without"]))

    readme = tmp_path / "README.md"
    shutil.copy(Path(__file__).resolve().parents[1] / "README.md", readme)
    report(readme, runs)  # files runs/cpu/mechanisms/mechanisms.json into results/, then rebuilds the block
    assert (tmp_path / "results" / "cpu" / "mechanisms" / "mechanisms.json").is_file()
    block = readme.read_text().split("<!-- mechanisms-cpu:start -->")[1].split("<!-- mechanisms-cpu:end -->")[0]
    commit = payload["commit"]
    for name in ("untrained", "GRPO-final", "SkillRise-final"):
        assert (
            f"| {name} | repeat (pass@p) | 2 | 2 | 100.0 | 0.0 | +100.0 | 2 / 0 | 100.0 ({len(DOCUMENT)}) | {commit} |"
            in block
        )
        assert f"| {name} | cross (won at p) | 1 | 1 | 0.0 | 0.0 | +0.0 | 0 / 0 | 0.0 (0) | {commit} |" in block
    assert "not run" not in block and shlex.join(["skillrise", *argv]) in block


def test_the_untrained_row_runs_alone(tmp_path, policy):
    payload, _, _ = run(tmp_path, ())
    assert list(payload["models"]) == ["untrained"]
    rows = table(payload)
    assert "| GRPO-final | not run |" in rows and "| SkillRise-final | not run |" in rows
    assert "| untrained | repeat (pass@p) | 2 |" in rows
    assert "| untrained | not run" in table(None)


def test_models_of_starts_from_the_warm_start_when_the_plan_made_one(tmp_path):
    from types import SimpleNamespace

    from skillrise.mechanisms import models_of

    cfg = {"model": SimpleNamespace(name_or_path="smollm2-135m")}
    assert models_of(cfg, tmp_path, 0) == {"untrained": "smollm2-135m"}
    for method in ("warmstart", "grpo"):
        (tmp_path / "cpu" / method / "seed0" / "final").mkdir(parents=True)
        (tmp_path / "cpu" / method / "seed0" / "final" / "config.json").write_text("{}")
    final = {m: str(tmp_path / "cpu" / m / "seed0" / "final") for m in ("warmstart", "grpo")}
    assert models_of(cfg, tmp_path, 0) == {"untrained": final["warmstart"], "grpo": final["grpo"]}
    assert models_of(cfg, tmp_path, 1) == {"untrained": "smollm2-135m"}  # another seed's plan: not made
