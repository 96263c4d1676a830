"""The trial runner with a scripted policy on TextRooms (and the real ScienceWorld engine): the solve prompts carry the
current document, a curate parse failure keeps the old one, and rows get the right roles, positions and returns."""

import shutil

import pytest

from agentrl_shared.envs import make_env
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.envs.textrooms import ROOM_OBJECTS
from agentrl_shared.models import qwen_tokenizer
from agentrl_shared.prompts import make_prompt
from skillrise.trainer import trial_row_returns
from skillrise.trial import (
    EMPTY_DOCUMENT,
    SKILL_HEADER,
    SolvePrompt,
    TrialRunner,
    parse_tagged,
    summarize_trials,
    trial_record,
)


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


def room_of(obj: str) -> str:
    return next(room for room, objs in ROOM_OBJECTS.items() if obj in objs)


class ScriptedPolicy:
    """Solve: with an empty document, answer without action tags (invalid, the task fails); with a document, go to the
    target's room (wins `find` at once). Curate: the first curate writes `<skill>doc-A</skill>`; later ones write no tags
    (a parse failure). Records every prompt it sees."""

    def __init__(self, tok):
        self.tok, self.prompts = tok, []

    def __call__(self, prompt_ids):
        out = []
        for ids in prompt_ids:
            text = self.tok.decode(ids)
            self.prompts.append(text)
            if "SKILL DOCUMENT" in text:
                old = text.split("## Old Skill Document", 1)[1].split("## Most Recent Attempt", 1)[0]
                answer = "Reasoning. <skill>doc-A</skill>" if EMPTY_DOCUMENT in old else "I forgot the tags."
            elif EMPTY_DOCUMENT in text:
                answer = "no idea"  # prefilled `<action>` + this: no closing tag, invalid
            else:
                target = text.rsplit("Task: find the ", 1)[1].split(".", 1)[0]
                answer = f"go to {room_of(target)}</action>"
            out.append(self.tok(answer, add_special_tokens=False).input_ids)
        return out, None


def kitchen_group(tasks_per_group=3):
    objs = ["apple", "bread", "mug"][:tasks_per_group]
    return [
        {"task_id": f"k{i}", "task_type": "find", "object": o, "room": "kitchen", "instruction": f"find the {o}",
         "rooms": ["garage", "kitchen", "office"]}
        for i, o in enumerate(objs)
    ]  # fmt: skip


def runner(tok, pool, carry_mode="skill"):
    return TrialRunner(pool, SolvePrompt(make_prompt("textrooms")), tok, "textrooms", max_turns=2, max_prompt_length=2048,
                       carry_mode=carry_mode)  # fmt: skip


def test_trial_documents_roles_positions_and_returns(tok):
    policy = ScriptedPolicy(tok)
    with EnvPool(lambda: make_env("textrooms"), num_slots=2, num_workers=0) as pool:
        trials = runner(tok, pool).run([kitchen_group(), kitchen_group()], [7, 7], [0, 0], policy, K=3)
    t = trials[0]
    # documents shown to the solve prompts: empty, then doc-A, then doc-A again (the failed curate kept it)
    assert t.documents == ["", "doc-A", "doc-A"]
    assert [t.won(p) for p in range(3)] == [False, True, True]
    solve_prompts = [p for p in policy.prompts if "SKILL DOCUMENT" not in p and "Task: find" in p]
    assert all(SKILL_HEADER.splitlines()[0] in p for p in solve_prompts)
    assert sum(EMPTY_DOCUMENT in p for p in solve_prompts) == 4  # 2 trials x 2 turns of task 0
    assert sum("doc-A" in p for p in solve_prompts) == 4  # 2 trials x 1 turn of tasks 1 and 2
    assert t.carry_rows[0].is_action_valid and not t.carry_rows[1].is_action_valid
    assert "doc-A" in t.carry_rows[1].prompt_text  # the second curate saw the old document
    # each solve row's anchor (GiGPO's step state) is the observation it acted on: its actions replayed in a fresh env
    env = make_env("textrooms")
    for task, ep in zip(kitchen_group(), t.episodes, strict=True):
        step = env.reset(task, t.seed)
        for row in ep.rows:
            assert row.anchor == step.observation
            step = env.step(row.action)

    rows, returns, positions, roles, trial_ids = trial_row_returns(trials[:1], reward_scale=10.0, gamma=0.6)
    assert roles == ["play", "play", "curate", "play", "curate", "play"]
    assert positions == [0, 0, 0, 1, 1, 2]
    # r = [0, 10, 10]: solve r_p; curate_0 = 0.6*10 + 0.36*10 = 9.6, curate_1 = 0.6*10 = 6
    assert returns == pytest.approx([0.0, 0.0, 9.6, 10.0, 6.0, 10.0])
    assert [r.is_action_valid for r in rows] == [False, False, True, True, False, True]
    assert set(trial_ids) == {t.trial_id} and all(r.group_id == 7 for r in rows)


def test_no_carry_has_no_curate_rows_and_empty_documents(tok):
    policy = ScriptedPolicy(tok)
    with EnvPool(lambda: make_env("textrooms"), num_slots=1, num_workers=0) as pool:
        (t,) = runner(tok, pool, carry_mode="none").run([kitchen_group()], [0], [0], policy, K=3)
    assert t.carry_rows == {} and t.documents == ["", "", ""]
    assert not any("SKILL DOCUMENT" in p for p in policy.prompts)
    assert [t.won(p) for p in range(3)] == [False, False, False]


def test_repeat_mode_skips_won_trials_and_reports_cumulative_pass(tok):
    policy = ScriptedPolicy(tok)
    task = kitchen_group(1)[0]
    with EnvPool(lambda: make_env("textrooms"), num_slots=1, num_workers=0) as pool:
        (t,) = runner(tok, pool).run([[task] * 3], [0], [0], policy, K=3, skip_won=True)
    # attempt 1 fails (empty document), attempt 2 wins with doc-A, attempt 3 is skipped
    assert [ep is not None for ep in t.episodes] == [True, True, False]
    summary = summarize_trials([trial_record(t)], "repeat", [0])
    assert (summary["pass@1"], summary["pass@2"], summary["pass@3"]) == (0.0, 1.0, 1.0)
    cross = summarize_trials([trial_record(t)], "cross", [0])
    assert (cross["success_pos0"], cross["success_pos1"]) == (0.0, 1.0)


def test_parse_tagged_takes_last_block_and_caps_length():
    assert parse_tagged("<skill>a</skill> then <skill> b </skill>", "skill", 4000) == "b"
    assert parse_tagged("<skill>" + "x" * 5000 + "</skill>", "skill", 4000) == "x" * 4000
    assert parse_tagged("<skill>unterminated", "skill", 4000) is None
    assert parse_tagged("</skill><skill>", "skill", 4000) is None


@pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs a Java runtime")
def test_scienceworld_trial_with_gold_policy(tok):
    """Real engine: a scripted policy replays the gold path; the trial wins, repeat mode skips the retry."""
    pytest.importorskip("scienceworld")
    from skillrise.prompts import SkillRisePrompt, SkillRiseScienceWorld
    from skillrise.trial import DOC_SLOT

    task = {"task_id": "find-living-thing:0", "task_type": "find-living-thing", "task_name": "find-living-thing",
            "variation": 0}  # fmt: skip
    engine = SkillRiseScienceWorld()  # one JVM: the gold path, then the trial in-process on the same engine
    gold = engine.gold_actions(task)
    step = {"k": 0}

    def gold_policy(prompt_ids):
        out = []
        for ids in prompt_ids:
            text = tok.decode(ids)
            if "SKILL DOCUMENT" in text:
                answer = "<skill>Look around, then focus on a living thing.</skill>"
            else:
                assert "## Current Skill Document" in text and "Your task is to:" in text
                answer = f"<action>{gold[step['k']]}</action>"
                step["k"] += 1
            out.append(tok(answer, add_special_tokens=False).input_ids)
        return out, None

    with EnvPool(lambda: engine, num_slots=1, num_workers=0) as pool:
        r = TrialRunner(pool, SkillRisePrompt("scienceworld", 2, DOC_SLOT), tok, "scienceworld", max_turns=30,
                        max_prompt_length=100_000)  # fmt: skip
        (t,) = r.run([[task, task]], [0], [0], gold_policy, K=2, skip_won=True)
    assert t.won(0) and t.episodes[1] is None
    assert t.documents == ["", "Look around, then focus on a living thing."]
    assert t.carry_rows[0].is_action_valid


def test_reflect_carry_only_unsolved_trials_and_reflections_accumulate(tok):
    """LaMer reflect carry (validation): a solved task is not reflected on; every reflection so far is carried; an
    answer without `<remark>` is carried as it is and flagged invalid."""
    from skillrise.trial import REFLECTION_HEADER

    seen, reflections = [], []

    def policy(prompt_ids):
        out = []
        for ids in prompt_ids:
            text = tok.decode(ids)
            seen.append(text)
            if "TRANSFERABLE experience" in text:
                reflections.append(text)
                answer = "Think. <remark>note-A</remark>" if len(reflections) % 2 else "no tags here"
            elif "Task: find the apple" in text:
                answer = "go to kitchen</action>"  # wins the first task
            else:
                answer = "no idea"  # fails the others
            out.append(tok(answer, add_special_tokens=False).input_ids)
        return out, None

    with EnvPool(lambda: make_env("textrooms"), num_slots=1, num_workers=0) as pool:
        (t,) = runner(tok, pool, "reflect").run([kitchen_group()], [0], [0], policy, K=3)
    assert [t.won(p) for p in range(3)] == [True, False, False]
    assert sorted(t.carry_rows) == [1]  # task 0 was solved: no reflection after it; task 2 is the last
    assert t.reflections == {1: "note-A"} and t.carry_rows[1].role == "reflect" and t.carry_rows[1].is_action_valid
    assert t.documents[1] == "" and "note-A" in t.documents[2]
    solve_2 = [s for s in seen if "Task: find the mug" in s][0]
    assert REFLECTION_HEADER.split("\n")[0] in solve_2 and "outcome: FAILURE), you noted:\nnote-A" in solve_2
    # a second failure reflects again and both reflections are carried (K = 4)
    reflections.clear()
    with EnvPool(lambda: make_env("textrooms"), num_slots=1, num_workers=0) as pool:
        group = kitchen_group() + [
            {**kitchen_group()[2], "task_id": "k3", "object": "plate", "instruction": "find the plate"}
        ]
        (t,) = runner(tok, pool, "reflect").run([group], [0], [0], policy, K=4)
    assert sorted(t.carry_rows) == [1, 2] and not t.carry_rows[2].is_action_valid
    assert t.reflections == {1: "note-A", 2: "no tags here"}
    assert "note-A" in t.documents[3] and "no tags here" in t.documents[3]


def test_summaries_report_task_score_and_task_type_per_position():
    def rec(won, scores, types, padded=(False, False, False)):
        return {"won": won, "task_scores": scores, "task_types": types, "padded": list(padded), "seed": 0,
                "failed": False, "curate_valid": [], "family": types[0]}  # fmt: skip

    cross = [rec([True, False, True], [1.0, 0.5, 1.0], ["beauty"] * 3),
             rec([False, True, False], [0.25, 1.0, 0.0], ["food"] * 3, padded=(False, False, True))]  # fmt: skip
    s = summarize_trials(cross, "cross", [0])
    assert (s["success_pos0"], s["task_score_pos0"], s["task_score_pos1"]) == (0.5, 0.625, 0.75)
    assert s["success_pos2"] == 1.0 and s["task_score_pos2"] == 1.0  # the padded position is left out
    assert (s["type/beauty/success_pos1"], s["type/food/success_pos1"]) == (0.0, 1.0)
    assert "type/food/success_pos2" not in s
    repeat = [
        rec([False, True, False], [0.5, 1.0, 0.0], ["boil"] * 3),
        rec([False] * 3, [0.0, 0.25, 0.1], ["melt"] * 3),
    ]
    r = summarize_trials(repeat, "repeat", [0])
    assert (r["pass@1"], r["pass@2"], r["task_score@1"], r["task_score@2"]) == (0.0, 0.5, 0.25, 0.625)
    assert (r["type/boil/pass@2"], r["type/melt/pass@3"]) == (1.0, 0.0)
