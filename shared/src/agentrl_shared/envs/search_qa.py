"""Search-QA: the search-tool environment of verl-agent as SDAR runs it (SDAR section 6.3).

Semantics of verl-agent's `SearchEnv` (ZJU-REAL/SDAR@8b85c23, `agent_system/environments/env_package/search/
third_party/skyrl_gym/envs/search/env.py` and `tools/search.py`): the reset observation is the question; each step
counts a turn; an action holding `<answer>...</answer>` (or the `max_turns`-th turn) ends the episode with reward =
exact match (Search-R1 `qa_em`) of the last `<answer>` in the episode's text, and an empty observation; otherwise
the first `<search>query</search>` is sent to the retriever and the top-3 passages come back as
`<information>{"result": "Doc 1: <contents>\nDoc 2: ..."}</information>` (the tool's JSON string, as the policy
sees it there); an action with no search query gets an empty observation. Retrieval goes through a `retrieval`
service (one index per node, shared by all environment workers, as Search-R1's retrieval server) or, for small
corpora, an in-process BM25. Loaders read Search-R1 parquet/jsonl QA files and `{"id", "contents"}` corpora.
"""

import json
import multiprocessing
import os
import re
import string
from functools import lru_cache
from pathlib import Path

from .base import Step
from .retrieval import RemoteRetriever, load_corpus, make_retriever, node_service


__all__ = ["SearchQAEnv", "em_check", "exact_match_by_source", "load_corpus", "load_qa", "load_tasks"]


DATA_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
INVALID_OBSERVATION = ""  # verl-agent: a turn without a search query returns no observation


def normalize_answer(s: str) -> str:
    """Search-R1 `qa_em.normalize_answer`: lowercase, drop punctuation, drop articles a/an/the, squeeze whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def em_check(prediction: str, golden_answers: list[str] | str) -> float:
    """Search-R1 `qa_em.em_check`: 1.0 if the normalised prediction equals any normalised gold answer."""
    golds = [golden_answers] if isinstance(golden_answers, str) else golden_answers
    pred = normalize_answer(prediction)
    return 1.0 if any(normalize_answer(g) == pred for g in golds) else 0.0


def passages_to_string(docs: list[str]) -> str:
    """verl-agent `tools/search.py` `_passages2string`: `Doc i: <contents stripped>` per passage, one line each."""
    return "".join(f"Doc {i + 1}: {content.strip()}\n" for i, content in enumerate(docs))


def information_block(docs: list[str]) -> str:
    """The observation of a search: the tool's JSON result (`json.dumps({"result": ...})`) inside `<information>`
    (verl-agent `SearchEnv._execute_tool`, stripped as `SearchMultiProcessEnv._sync_step` does)."""
    result = passages_to_string(docs) if docs else "No search results found."
    return f"<information>{json.dumps({'result': result})}</information>"


# ----------------------------------------------------------------------------------------------------------------
# Data loaders
# ----------------------------------------------------------------------------------------------------------------


def _source_from_name(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(DATA_SOURCES, key=len, reverse=True) if s in name), None)


def load_qa(path: str | Path, data_source: str | None = None) -> list[dict]:
    """QA tasks from a Search-R1 parquet (`question`, `golden_answers`, `data_source`) or a json/jsonl file
    (`question` with `golden_answers` or `answer`; `data_source` per record, else the argument, else the file name).

    Returns:
        `list[dict]`: tasks with `task_id`, `task_type` (= data source), `question`, `golden_answers`, `data_source`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No QA file at {path}.")
    if path.suffix == ".parquet":
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError(
                "Reading parquet QA files needs pandas and pyarrow (`pip install pandas pyarrow`)."
            ) from exc
        records = pd.read_parquet(path).to_dict("records")
    elif path.suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    elif path.suffix == ".json":
        records = json.loads(path.read_text())
    else:
        raise ValueError(f"Unknown QA file type {path.suffix!r}; valid: .parquet, .jsonl, .json.")
    default_source = data_source or _source_from_name(path) or "unknown"
    tasks = []
    for i, rec in enumerate(records):
        golds = rec.get("golden_answers")
        if golds is None:
            golds = rec["answer"]
        golds = [golds] if isinstance(golds, str) else [str(g) for g in golds]
        source = rec.get("data_source") or default_source
        tasks.append(
            {
                "task_id": str(rec.get("id", f"{path.stem}_{i}")),
                "task_type": source,
                "question": rec["question"].strip(),
                "golden_answers": golds,
                "data_source": source,
            }
        )
    return tasks


def load_tasks(split: str, data_dir: str | Path | None = None) -> list[dict]:
    """All QA tasks of `split` in `data_dir`: files named `<split>.parquet` / `<split>.jsonl` (Search-R1 layout) or
    any `*<split>*.{parquet,jsonl}`, sorted by name."""
    if data_dir is None:
        raise ValueError("Search-QA needs data_dir=: a folder with QA parquet/jsonl files and a corpus jsonl.")
    files = sorted(p for p in Path(data_dir).glob(f"*{split}*") if p.suffix in (".parquet", ".jsonl"))
    files = [p for p in files if "corpus" not in p.name]
    if not files:
        raise FileNotFoundError(f"No QA files matching *{split}*.parquet/jsonl in {data_dir}.")
    return [t for p in files for t in load_qa(p)]


def exact_match_by_source(results: list[tuple[str, float]]) -> dict[str, float]:
    """Per-source mean EM (in %) and the unweighted average over sources, from (data_source, em) pairs."""
    by: dict[str, list[float]] = {}
    for source, em in results:
        by.setdefault(source, []).append(em)
    table = {s: 100.0 * sum(v) / len(v) for s, v in sorted(by.items())}
    if table:
        table["average"] = sum(table.values()) / len(table)
    return table


# ----------------------------------------------------------------------------------------------------------------
# The environment
# ----------------------------------------------------------------------------------------------------------------

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)


def last_answer(text: str) -> str | None:
    """Search-R1 `qa_em.extract_solution`: the last `<answer>...</answer>` of `text`, stripped; None if there is none."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


@lru_cache(maxsize=4)
def _local_retriever(spec_json: str):
    return make_retriever(json.loads(spec_json))


class SearchQAEnv:
    """One question per episode; `step` takes the projected action text (verl-agent `SearchEnv`).

    Args:
        corpus_path (`str`, *optional*): corpus jsonl (`{"id", "contents"}` lines) for the retriever.
        retriever (`str`, *optional*, defaults to `"bm25"`): `bm25` (bm25s, Lucene scoring) or `e5` (faiss).
        index_path (`str`, *optional*), model_path (`str`, *optional*): the prebuilt faiss index and the local E5
            model (`retriever="e5"`).
        search_url (`str`, *optional*): an already running retrieval server (`.../retrieve`); overrides the above.
        service (`str`, *optional*, defaults to `"node"`): `node` asks this node's shared retrieval server
            (`retrieval.node_service`: one index per node, built once, shared by every worker); `local` builds the
            index in this process (small corpora, debugging).
        topk (`int`, *optional*, defaults to `3`): passages per search (Search-R1 `retriever.topk=3`).
        max_turns (`int`, *optional*, defaults to `4`): turns per episode (verl-agent `env.max_steps=4`).
    """

    def __init__(
        self,
        corpus_path: str | Path | None = None,
        retriever: str = "bm25",
        index_path: str | None = None,
        model_path: str | None = None,
        search_url: str | None = None,
        service: str = "node",
        topk: int = 3,
        max_turns: int = 4,
    ):
        if search_url is None:
            if corpus_path is None:
                raise ValueError("SearchQAEnv needs corpus_path= (a jsonl of {'id', 'contents'}) or search_url=.")
            spec = {"retriever": retriever, "corpus_path": str(Path(corpus_path).resolve())}
            spec.update({k: v for k, v in (("index_path", index_path), ("model_path", model_path)) if v})
            if service == "local":
                self.retriever = _local_retriever(json.dumps(spec, sort_keys=True))
            elif service == "node":
                in_worker = multiprocessing.parent_process() is not None
                search_url = node_service(spec, owner_pid=os.getppid() if in_worker else os.getpid())
            else:
                raise ValueError(f"Unknown retrieval service {service!r}; valid: node, local.")
        if search_url is not None:
            self.retriever = RemoteRetriever(search_url)
        self.topk, self.max_turns = topk, max_turns
        self._done = True

    def _out(self, obs: str, reward: float, done: bool) -> Step:
        info = {
            "won": bool(done and reward >= 1.0),
            "admissible_actions": [],
            "task_type": self.task["task_type"],
            "data_source": self.task["data_source"],
            "instruction": self.task["question"],
            "golden_answers": list(self.task["golden_answers"]),
            "turn": self._turn,
        }
        return Step(observation=obs, reward=reward, done=done, info=info)

    def reset(self, task: dict, seed: int) -> Step:
        """Start on `task` (from `load_qa`); the observation is the question. Nothing is random."""
        self.task = {"data_source": task.get("task_type", "unknown"), **task}
        self._turn, self._done, self._text = 0, False, ""
        return self._out(self.task["question"], 0.0, False)

    def step(self, action: str) -> Step:
        """An action with `<answer>` and `</answer>`, or the `max_turns`-th turn, ends the episode with the exact
        match of the episode's last `<answer>`; otherwise a `<search>` query returns `<information>` and anything
        else an empty observation (verl-agent `SearchEnv.step`)."""
        if self._done:
            raise RuntimeError("Search-QA episode is over (or never started): call reset(task, seed) first.")
        self._turn += 1
        self._text += action
        if self._turn >= self.max_turns or ("<answer>" in action and "</answer>" in action):
            self._done = True
            answer = last_answer(self._text)
            reward = 0.0 if answer is None else em_check(answer, self.task["golden_answers"])
            return self._out("", reward, True)
        query = _SEARCH.search(action) if "<search>" in action and "</search>" in action else None
        if query is None:
            return self._out(INVALID_OBSERVATION, 0.0, False)
        obs = information_block(self.retriever.search(query.group(1).strip(), self.topk))
        self._text += f"\n{obs}\n"
        return self._out(obs, 0.0, False)

    def close(self) -> None:
        self._done = True
