"""Search-QA tests: Search-R1 EM normalisation, the tool format, a corpus and QA set the tests build, and `realdata`
files from `$AGENTRL_DATA/search_qa` (Search-R1 parquet, HotpotQA jsonl, a passage corpus).
"""

import json
import os
import re
from pathlib import Path

import pytest

from agentrl_shared.envs import load_tasks, make_env
from agentrl_shared.envs import search_qa as S
from agentrl_shared.testing import write_synthetic_qa


REPO_ROOT = Path(__file__).resolve().parents[3]
REAL = Path(os.environ.get("AGENTRL_DATA", REPO_ROOT.parent / "shared" / "data")) / "search_qa"


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory):
    return write_synthetic_qa(tmp_path_factory.mktemp("search_qa"))


def test_normalize_and_em_golden():
    assert S.normalize_answer("  The Eiffel-Tower!! ") == "eiffeltower"
    assert S.normalize_answer("An apple a day") == "apple day"
    assert S.em_check("the Beatles", ["Beatles"]) == 1.0 and S.em_check("Beatle", "Beatles") == 0.0


def test_passages_format_golden():
    """verl-agent `tools/search.py`: `Doc i: <contents>` lines inside the tool's JSON result, inside <information>."""
    assert S.passages_to_string(['"Paris"\nParis is big. ', "T\nx"]) == 'Doc 1: "Paris"\nParis is big.\nDoc 2: T\nx\n'
    assert S.information_block(["T\nx"]) == '<information>{"result": "Doc 1: T\\nx\\n"}</information>'
    assert S.information_block([]) == '<information>{"result": "No search results found."}</information>'


def test_episode_search_then_answer(qa_dir):
    tasks = load_tasks("search_qa", "test", data_dir=qa_dir)
    assert {t["data_source"] for t in tasks} >= {"nq", "hotpotqa"}
    env = make_env("search_qa", corpus_path=qa_dir / "corpus.jsonl", service="local")
    task = tasks[0]
    first = env.reset(task, seed=0)
    assert first.observation == task["question"] and first.info["admissible_actions"] == []
    step = env.step("<think>look it up</think><search>capital of france</search>")
    assert step.observation.startswith('<information>{"result": "Doc 1: \\"Paris\\"\\nParis is the capital')
    assert step.observation.count("Doc ") == 1 and not step.done  # Lucene BM25 returns matching passages only
    step = env.step("<answer> paris </answer>")
    assert step.done and step.reward == 1.0 and step.info["won"] and step.info["data_source"] == task["data_source"]
    env.reset(task, seed=0)
    wrong = env.step("<answer>Lyon</answer>")
    assert wrong.done and wrong.reward == 0.0 and not wrong.info["won"]


def test_invalid_actions_and_turn_limit(qa_dir):
    """verl-agent `SearchEnv`: no query -> empty observation; the 4th turn ends the episode without searching; the
    reward reads the episode's last <answer>."""
    env = S.SearchQAEnv(qa_dir / "corpus.jsonl", max_turns=4, service="local")
    env.reset(S.load_qa(qa_dir / "test.jsonl")[1], seed=0)
    for _ in range(3):
        step = env.step("")  # the projection of a response without tags
        assert step.observation == S.INVALID_OBSERVATION == "" and not step.done
    step = env.step("<search>mountain</search>")
    assert step.done and step.reward == 0.0 and step.observation == ""
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
    env = S.SearchQAEnv(corpora[0], service="local")
    for path in qa_files:
        tasks = S.load_qa(path)
        assert tasks and all(t["question"] and t["golden_answers"] for t in tasks)
        assert all(t["data_source"] in S.DATA_SOURCES for t in tasks)
        for t in tasks:
            env.reset(t, seed=0)
            info = env.step(f"<search>{t['question']}</search>").observation
            assert info.startswith("<information>") and info.endswith("</information>")
            result = json.loads(info[len("<information>") : -len("</information>")])["result"]
            docs = re.findall(r"^Doc (\d+): ", result, re.M)
            assert result == "No search results found." or docs == [str(i + 1) for i in range(len(docs))] != []
            assert len(docs) <= 3
            assert env.step(f"<answer>{t['golden_answers'][0]}</answer>").reward == 1.0
            env.reset(t, seed=0)
            assert env.step("<answer>zzzz not an answer</answer>").reward == 0.0


def test_eight_workers_share_one_retriever(qa_dir):
    """Issue 8 item 5: 8 environment workers (8 processes) talk to ONE retrieval server on this node; the index is
    built once, in the server, and never in a worker."""
    import functools

    from agentrl_shared.envs import retrieval as R
    from agentrl_shared.envs.pool import EnvPool

    tasks = S.load_qa(qa_dir / "test.jsonl")
    factory = functools.partial(make_env, "search_qa", corpus_path=str(qa_dir / "corpus.jsonl"))  # service="node"
    with EnvPool(factory, num_slots=8, timeout=120, num_workers=8) as pool:
        firsts = pool.reset(list(range(8)), [tasks[i % len(tasks)] for i in range(8)], list(range(8)))
        assert all(f.observation for f in firsts)
        steps = pool.step(list(range(8)), ["<search>largest planet</search>"] * 8)
        assert all("Jupiter is the fifth planet" in s.observation for s in steps)
        spec = {"retriever": "bm25", "corpus_path": str((qa_dir / "corpus.jsonl").resolve())}
        url = R.node_service(spec)  # this process finds the same live server
        stats = R.RemoteRetriever(url).stats()
        worker_pids = {p.pid for p in pool._procs}
    assert stats["index_builds"] == 1 and stats["pid"] not in worker_pids
    assert set(stats["clients"]) == worker_pids and stats["requests"] == 8


def test_retrieval_specs_name_the_fix(tmp_path):
    from agentrl_shared.envs import retrieval as R

    with pytest.raises(ValueError, match="valid: bm25, e5"):
        R.make_retriever({"retriever": "splade", "corpus_path": "x"})
    with pytest.raises(ValueError, match="Unknown retrieval keys"):
        R.make_retriever({"retriever": "bm25", "corpus_path": "x", "k": 3})
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "0", "contents": "T\\nx"}\n')
    with pytest.raises(ValueError, match="index_path, model_path"):
        R.make_retriever({"retriever": "e5", "corpus_path": str(corpus)})


def test_retrieval_server_context(qa_dir):
    from agentrl_shared.envs import retrieval as R

    with R.RetrievalServer({"retriever": "bm25", "corpus_path": str(qa_dir / "corpus.jsonl")}) as url:
        env = S.SearchQAEnv(search_url=url)
        env.reset(S.load_qa(qa_dir / "test.jsonl")[0], seed=0)
        assert "Paris is the capital" in env.step("<search>capital of france</search>").observation
