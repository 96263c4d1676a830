"""Search-QA tests: Search-R1 EM normalisation, the tool format, a corpus and QA set the tests build, and `realdata`
files from `$AGENTRL_DATA/search_qa` (Search-R1 parquet, HotpotQA jsonl, a passage corpus).
"""

import os
from pathlib import Path

import pytest

from agentrl_shared.envs import load_tasks, make_env
from agentrl_shared.envs import search_qa as S


REPO_ROOT = Path(__file__).resolve().parents[3]
REAL = Path(os.environ.get("AGENTRL_DATA", REPO_ROOT.parent / "shared" / "data")) / "search_qa"


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory):
    return S.write_synthetic_qa(tmp_path_factory.mktemp("search_qa"))


def test_normalize_and_em_golden():
    assert S.normalize_answer("  The Eiffel-Tower!! ") == "eiffeltower"
    assert S.normalize_answer("An apple a day") == "apple day"
    assert S.em_check("the Beatles", ["Beatles"]) == 1.0 and S.em_check("Beatle", "Beatles") == 0.0


def test_passages_format_golden():
    assert (
        S.passages_to_string(['"Paris"\nParis is big.', "T\nx"])
        == 'Doc 1(Title: "Paris") Paris is big.\nDoc 2(Title: T) x\n'
    )


def test_episode_search_then_answer(qa_dir):
    tasks = load_tasks("search_qa", "test", data_dir=qa_dir)
    assert {t["data_source"] for t in tasks} >= {"nq", "hotpotqa"}
    env = make_env("search_qa", corpus_path=qa_dir / "corpus.jsonl")
    task = tasks[0]
    first = env.reset(task, seed=0)
    assert first.observation == task["question"] and first.info["admissible_actions"] == []
    step = env.step("<think>look it up</think><search>capital of france</search>")
    assert step.observation.startswith('<information>Doc 1(Title: "Paris") Paris is the capital')
    assert step.observation.count("Doc ") == 3 and not step.done
    step = env.step("<answer> paris </answer>")
    assert step.done and step.reward == 1.0 and step.info["won"] and step.info["data_source"] == task["data_source"]
    env.reset(task, seed=0)
    wrong = env.step("<answer>Lyon</answer>")
    assert wrong.done and wrong.reward == 0.0 and not wrong.info["won"]


def test_invalid_actions_and_turn_limit(qa_dir):
    env = S.SearchQAEnv(qa_dir / "corpus.jsonl", max_turns=4)
    env.reset(S.load_qa(qa_dir / "test.jsonl")[1], seed=0)
    for _ in range(3):
        step = env.step("I think it is Everest")
        assert step.observation == S.INVALID_FEEDBACK and not step.done
    step = env.step("<search>mountain</search>")
    assert step.done and step.reward == 0.0
    with pytest.raises(RuntimeError):
        env.step("<answer>x</answer>")


def test_per_source_em_and_errors(qa_dir):
    table = S.exact_match_by_source([("nq", 1.0), ("nq", 0.0), ("hotpotqa", 1.0)])
    assert table == {"hotpotqa": 100.0, "nq": 50.0, "average": 75.0}
    with pytest.raises(ValueError, match="corpus_path"):
        S.SearchQAEnv()
    with pytest.raises(FileNotFoundError):
        S.load_tasks("dev", qa_dir)


@pytest.mark.realdata
def test_search_qa_realdata_load_em_and_retrieval():
    qa_files = sorted(p for p in REAL.glob("*") if p.suffix in (".parquet", ".jsonl") and "corpus" not in p.name)
    corpora = sorted(REAL.glob("*corpus*.jsonl"))
    if not qa_files or not corpora:
        pytest.skip(f"no Search-QA files at {REAL}")
    if any(p.suffix == ".parquet" for p in qa_files):
        pytest.importorskip("pyarrow")
    env = S.SearchQAEnv(corpora[0])
    for path in qa_files:
        tasks = S.load_qa(path)
        assert tasks and all(t["question"] and t["golden_answers"] for t in tasks)
        assert all(t["data_source"] in S.DATA_SOURCES for t in tasks)
        for t in tasks:
            env.reset(t, seed=0)
            info = env.step(f"<search>{t['question']}</search>").observation
            assert info.startswith("<information>Doc 1(Title: ") and info.count("\nDoc ") == 2
            assert env.step(f"<answer>{t['golden_answers'][0]}</answer>").reward == 1.0
            env.reset(t, seed=0)
            assert env.step("<answer>zzzz not an answer</answer>").reward == 0.0
