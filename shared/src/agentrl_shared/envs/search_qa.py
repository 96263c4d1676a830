"""Search-QA: a search-tool environment in the Search-R1 / verl-agent format (SDAR section 6.3).

The agent answers `<search>query</search>` (the top-3 passages come back as Search-R1 formats them,
`Doc i(Title: t) text`, inside `<information>...</information>`) or `<answer>...</answer>` (ends the episode, reward =
exact match under Search-R1's `qa_em.normalize_answer`). At most 4 turns. Retrieval is BM25 (`rank_bm25`) over a
local passage corpus by default; `DenseRetriever` is the E5 + faiss flat inner-product setup of Search-R1's
retrieval server, for GPU runs with a local model and index. Loaders read Search-R1 parquet/jsonl QA files and
`{"id", "contents"}` corpora; `write_synthetic_qa` makes a small corpus and QA set for tests.
"""

import json
import re
import string
from functools import lru_cache
from pathlib import Path

from .base import Step


DATA_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
INVALID_FEEDBACK = (  # Search-R1 `generation.py` answer to a turn with neither tag
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)
_STOP = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with what who whom which when where why how did does do".split()
)


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
    """Search-R1 `_passages2string`: `Doc i(Title: <first line>) <rest>` per passage, one line each."""
    out = ""
    for i, content in enumerate(docs):
        title, _, text = content.partition("\n")
        out += f"Doc {i + 1}(Title: {title}) {text}\n"
    return out


def _tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOP]


class BM25Retriever:
    """BM25 (`rank_bm25.BM25Okapi`, Lucene's k1 = 0.9, b = 0.4) over passage `contents`; sparse scoring by postings.

    Args:
        passages (`list[str]`): the corpus `contents` strings (title line + text).
    """

    def __init__(self, passages: list[str]):
        from rank_bm25 import BM25Okapi

        self.passages = passages
        self.bm25 = BM25Okapi([_tokenize(p) for p in passages], k1=0.9, b=0.4)
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, freqs in enumerate(self.bm25.doc_freqs):
            for term, tf in freqs.items():
                self._postings.setdefault(term, []).append((i, tf))

    def search(self, query: str, k: int = 3) -> list[str]:
        """The `k` best passages; always `k` (padded in corpus order when fewer share a term), like a dense index."""
        bm, scores = self.bm25, {}
        for term in set(_tokenize(query)):
            if term not in bm.idf:
                continue
            for i, tf in self._postings[term]:
                norm = bm.k1 * (1 - bm.b + bm.b * bm.doc_len[i] / bm.avgdl)
                scores[i] = scores.get(i, 0.0) + bm.idf[term] * tf * (bm.k1 + 1) / (tf + norm)
        ranked = sorted(scores, key=lambda i: (-scores[i], i))[:k]
        ranked += [i for i in range(len(self.passages)) if i not in scores][: k - len(ranked)]
        return [self.passages[i] for i in ranked]


class DenseRetriever:
    """E5-style dense retrieval (Search-R1 `retrieval_server.py`: `query: ` / `passage: ` prefixes, mean pooling,
    L2-normalised embeddings, faiss flat inner product). Needs a local E5 model folder and the `dense` extra.

    Args:
        passages (`list[str]`): corpus `contents`.
        model_path (`str`): local E5 checkpoint (e.g. a copy of intfloat/e5-base-v2).
        index_path (`str`, *optional*): a prebuilt faiss index over the same passages; built in memory if absent.
        device (`str`, *optional*, defaults to `"cuda"`): where the encoder runs.
    """

    def __init__(self, passages: list[str], model_path: str, index_path: str | None = None, device: str = "cuda"):
        try:
            import faiss
        except ImportError as exc:
            raise ImportError("DenseRetriever needs the `dense` extra: `uv sync --extra dense`.") from exc
        from transformers import AutoModel, AutoTokenizer

        self.passages, self.device = passages, device
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModel.from_pretrained(model_path).to(device).eval()
        if index_path is not None:
            self.index = faiss.read_index(index_path)
        else:
            embs = self._encode([f"passage: {p}" for p in passages])
            self.index = faiss.IndexFlatIP(embs.shape[1])
            self.index.add(embs)

    def _encode(self, texts: list[str], batch_size: int = 64):
        import torch

        out = []
        for i in range(0, len(texts), batch_size):
            batch = self.tokenizer(texts[i : i + batch_size], padding=True, truncation=True, max_length=256)
            batch = {k: torch.tensor(v, device=self.device) for k, v in batch.items()}
            with torch.no_grad():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(emb, dim=-1).float().cpu().numpy())
        import numpy as np

        return np.concatenate(out).astype("float32")

    def search(self, query: str, k: int = 3) -> list[str]:
        _, idx = self.index.search(self._encode([f"query: {query}"]), k)
        return [self.passages[i] for i in idx[0] if i >= 0]


# ----------------------------------------------------------------------------------------------------------------
# Data loaders
# ----------------------------------------------------------------------------------------------------------------


def load_corpus(path: str | Path) -> list[str]:
    """Passages of a Search-R1 corpus file (`.jsonl`, one `{"id", "contents"}` per line) in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No corpus at {path}; expected a jsonl file of {{'id', 'contents'}} records.")
    with path.open() as f:
        return [json.loads(line)["contents"] for line in f if line.strip()]


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


@lru_cache(maxsize=4)
def _bm25_for(corpus_path: str) -> BM25Retriever:
    return BM25Retriever(load_corpus(corpus_path))


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

_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class SearchQAEnv:
    """One question per episode; `step` takes the projected action text.

    Args:
        corpus_path (`str`, *optional*): corpus jsonl for the default BM25 retriever.
        retriever (*optional*): any object with `search(query, k) -> list[str]` (e.g. `DenseRetriever`); overrides
            `corpus_path`.
        topk (`int`, *optional*, defaults to `3`): passages per search (Search-R1 `retriever.topk=3`).
        max_turns (`int`, *optional*, defaults to `4`): turns per episode (verl-agent `env.max_steps=4`).
    """

    def __init__(self, corpus_path: str | Path | None = None, retriever=None, topk: int = 3, max_turns: int = 4):
        if retriever is None:
            if corpus_path is None:
                raise ValueError("SearchQAEnv needs corpus_path= (a jsonl of {'id', 'contents'}) or retriever=.")
            retriever = _bm25_for(str(Path(corpus_path).resolve()))
        self.retriever, self.topk, self.max_turns = retriever, topk, max_turns
        self._done = True

    def _out(self, obs: str, reward: float, done: bool) -> Step:
        info = {
            "won": reward >= 1.0,
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
        self._turn, self._done = 0, False
        return self._out(self.task["question"], 0.0, False)

    def step(self, action: str) -> Step:
        """`<answer>..</answer>` ends with reward EM; `<search>..</search>` returns `<information>`; anything else
        returns Search-R1's invalid-action message. The episode ends after `max_turns` turns."""
        if self._done:
            raise RuntimeError("Search-QA episode is over (or never started): call reset(task, seed) first.")
        self._turn += 1
        answer, search = _ANSWER.search(action), _SEARCH.search(action)
        if answer is not None and (search is None or answer.start() < search.start()):
            self._done = True
            reward = em_check(answer.group(1).strip(), self.task["golden_answers"])
            return self._out("", reward, True)
        if search is not None:
            docs = self.retriever.search(search.group(1).strip(), self.topk)
            obs = f"<information>{passages_to_string(docs)}</information>"
        else:
            obs = INVALID_FEEDBACK
        self._done = self._turn >= self.max_turns
        return self._out(obs, 0.0, self._done)

    def close(self) -> None:
        self._done = True


# ----------------------------------------------------------------------------------------------------------------
# A small corpus and QA set (tests, CPU-scale runs)
# ----------------------------------------------------------------------------------------------------------------

_FACTS = [
    ("Paris", "Paris is the capital and largest city of France, on the Seine river.", "capital of france", "Paris"),
    (
        "Mount Everest",
        "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
        "highest mountain",
        "Mount Everest",
    ),  # noqa: E501
    (
        "Marie Curie",
        "Marie Curie was a physicist and chemist who discovered polonium and radium.",
        "discovered polonium",
        "Marie Curie",
    ),  # noqa: E501
    (
        "Pacific Ocean",
        "The Pacific Ocean is the largest and deepest of Earth's five oceanic divisions.",
        "largest ocean",
        "Pacific Ocean",
    ),  # noqa: E501
    (
        "Jupiter",
        "Jupiter is the fifth planet from the Sun and the largest planet in the Solar System.",
        "largest planet",
        "Jupiter",
    ),  # noqa: E501
    (
        "Amazon River",
        "The Amazon River in South America is the largest river by discharge volume of water.",
        "largest river by discharge",
        "Amazon River",
    ),  # noqa: E501
]


def write_synthetic_qa(data_dir: str | Path) -> Path:
    """Write `corpus.jsonl` (Search-R1 `{"id", "contents"}` with a quoted title line) and `test.jsonl` (questions
    from several data sources with `golden_answers`). Returns the folder."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with (data_dir / "corpus.jsonl").open("w") as f:
        for i, (title, text, _, _) in enumerate(_FACTS):
            f.write(json.dumps({"id": str(i), "contents": f'"{title}"\n{text}'}) + "\n")
    sources = ["nq", "triviaqa", "hotpotqa", "popqa", "musique", "bamboogle"]
    with (data_dir / "test.jsonl").open("w") as f:
        for i, (_, _, clue, answer) in enumerate(_FACTS):
            rec = {"id": f"test_{i}", "question": f"What is the {clue}?", "golden_answers": [answer, answer.lower()]}
            f.write(json.dumps({**rec, "data_source": sources[i % len(sources)]}) + "\n")
    return data_dir
