"""Passage retrieval for Search-QA: BM25 (`bm25s`, Lucene's scoring) or E5 + faiss, served once per node.

Search-R1 (PeterGriffinJin/Search-R1, `search_r1/search/retrieval_server.py`) runs ONE retrieval server per node and
every environment talks to it over HTTP (`POST /retrieve`); verl-agent's `SearchEnv` does the same through
`search_url` (ZJU-REAL/SDAR@8b85c23, `agent_system/environments/env_package/search/third_party/skyrl_gym/tools/
search.py`). This module does the same with the standard library:
- `BM25Retriever`: Lucene BM25 (k1 = 0.9, b = 0.4, pyserini's defaults) through `bm25s` (`method="lucene"`) over
  tokens made as Lucene's English analyzer makes them (`lucene_analyze`: word tokens, possessive `'s` dropped,
  lower case, Lucene's 33 English stop words, Porter stemming by PyStemmer's `porter`, the algorithm of Lucene's
  `PorterStemFilter`).
- `DenseRetriever`: Search-R1's E5 setup (`query: ` prefix, mean pooling, L2 normalisation, faiss inner product) over
  a prebuilt faiss index (`build_dense_index` writes one, offline, once).
- `serve(spec)` / `RetrievalServer`: an HTTP server holding one retriever (or one WebShop catalogue, whose methods
  `RemoteRetriever.call` reaches); `RemoteRetriever(url)` is its client.
- `node_service(spec)`: the URL of this node's server for `spec`, started by the first environment that asks
  (a lock file in the temp folder serialises the start); later environments, in any process, reuse it. The server
  stops when the process that started the pool (the caller's parent for a pool worker) exits.
A spec is a dict: `{"retriever": "bm25", "corpus_path": ...}` or `{"retriever": "e5", "corpus_path": ...,
"index_path": ..., "model_path": ...}`.
"""

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


RETRIEVERS = ("bm25", "e5")
# Lucene `EnglishAnalyzer.ENGLISH_STOP_WORDS_SET` (the 33 words pyserini's default analyzer removes)
LUCENE_STOP = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=1)
def _porter():
    import Stemmer

    return Stemmer.Stemmer("porter")


def lucene_analyze(text: str) -> list[str]:
    """Tokens as pyserini's default English analyzer makes them (StandardTokenizer words, EnglishPossessiveFilter,
    LowerCaseFilter, StopFilter with Lucene's English set, PorterStemFilter)."""
    words = [w[:-2] if w.endswith("'s") else w for w in re.findall(r"\w+(?:'s)?", text.lower())]
    words = [w for w in words if w not in LUCENE_STOP]
    return _porter().stemWords(words)


def load_corpus(path: str | Path) -> list[str]:
    """Passages of a Search-R1 corpus file (`.jsonl`, one `{"id", "contents"}` per line) in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No corpus at {path}; expected a jsonl file of {{'id', 'contents'}} records.")
    with path.open() as f:
        return [json.loads(line)["contents"] for line in f if line.strip()]


class BM25Retriever:
    """Lucene BM25 over `docs` with `bm25s`.

    Args:
        docs (`list[str]`): the texts to index (Search-QA: corpus `contents`; WebShop: product documents).
        k1 (`float`, *optional*, defaults to `0.9`), b (`float`, *optional*, defaults to `0.4`): pyserini's defaults.
    """

    def __init__(self, docs: list[str], k1: float = 0.9, b: float = 0.4):
        import bm25s

        self.docs = docs
        self.bm25 = bm25s.BM25(method="lucene", k1=k1, b=b)
        self.bm25.index([lucene_analyze(d) for d in docs], show_progress=False)
        self.vocab = self.bm25.vocab_dict

    def rank(self, query: str, k: int) -> list[tuple[int, float]]:
        """Up to `k` (document index, score) pairs with a score > 0, best first, ties by index."""
        terms = [t for t in lucene_analyze(query) if t in self.vocab]
        if not terms:
            return []
        scores = self.bm25.get_scores(terms)
        hits = [i for i in scores.argsort()[::-1][: max(k * 4, k + 16)] if scores[i] > 0]
        hits.sort(key=lambda i: (-float(scores[i]), int(i)))
        return [(int(i), float(scores[i])) for i in hits[:k]]

    def search(self, query: str, k: int = 3) -> list[str]:
        return [self.docs[i] for i, _ in self.rank(query, k)]


class DenseRetriever:
    """E5 dense retrieval over a prebuilt faiss index (Search-R1 `retrieval_server.py`: `query: ` prefix, mean
    pooling over the attention mask, L2-normalised, inner product). Needs the `dense` extra and a local E5 model.

    Args:
        passages (`list[str]`): corpus `contents`, in the order the index was built.
        model_path (`str`): local E5 checkpoint (e.g. a copy of intfloat/e5-base-v2).
        index_path (`str`): the faiss index (`build_dense_index`, or Search-R1's `e5_Flat.index`).
        device (`str`, *optional*, defaults to `"cuda"`): where the query encoder runs.
    """

    def __init__(self, passages: list[str], model_path: str, index_path: str, device: str = "cuda"):
        try:
            import faiss
        except ImportError as exc:
            raise ImportError("E5 retrieval needs the `dense` extra: `uv sync --extra dense`.") from exc
        if not Path(index_path).is_file():
            raise FileNotFoundError(
                f"No faiss index at {index_path}; build it once with agentrl_shared.envs.retrieval.build_dense_index."
            )
        self.passages, self.encoder = passages, _E5Encoder(model_path, device)
        self.index = faiss.read_index(str(index_path))
        if self.index.ntotal != len(passages):
            raise ValueError(
                f"faiss index {index_path} holds {self.index.ntotal} vectors for {len(passages)} passages."
            )

    def search(self, query: str, k: int = 3) -> list[str]:
        _, idx = self.index.search(self.encoder([f"query: {query}"]), k)
        return [self.passages[i] for i in idx[0] if i >= 0]


class _E5Encoder:
    def __init__(self, model_path: str, device: str):
        from transformers import AutoModel, AutoTokenizer

        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModel.from_pretrained(model_path).to(device).eval()

    def __call__(self, texts: list[str], batch_size: int = 64):
        import numpy as np
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
        return np.concatenate(out).astype("float32")


def build_dense_index(corpus_path: str, model_path: str, index_path: str, device: str = "cuda") -> Path:
    """Encode every passage (`passage: ` prefix) and write a flat inner-product faiss index (run once, offline)."""
    import faiss

    encoder = _E5Encoder(model_path, device)
    embs = encoder([f"passage: {p}" for p in load_corpus(corpus_path)])
    index = faiss.IndexFlatIP(embs.shape[1])
    index.add(embs)
    faiss.write_index(index, str(index_path))
    return Path(index_path)


def make_service(spec: dict):
    """What a node server holds: a retriever (`make_retriever`), or a WebShop catalogue for
    `{"service": "webshop", "data_dir": ..., "full": ...}` (products, index, per-seed goals)."""
    if spec.get("service") == "webshop":
        from .webshop import Catalog

        return Catalog(spec["data_dir"], full=bool(spec.get("full", False)))
    return make_retriever(spec)


def make_retriever(spec: dict):
    """The retriever a spec names (`retriever`: `bm25` or `e5`), built in this process."""
    kind = spec.get("retriever", "bm25")
    unknown = set(spec) - {"retriever", "corpus_path", "index_path", "model_path", "device"}
    if unknown:
        raise ValueError(
            f"Unknown retrieval keys {sorted(unknown)}; valid: retriever, corpus_path, index_path, model_path, device."
        )
    if kind not in RETRIEVERS:
        raise ValueError(f"Unknown retriever {kind!r}; valid: {', '.join(RETRIEVERS)}.")
    if "corpus_path" not in spec:
        raise ValueError("Retrieval needs corpus_path= (a jsonl of {'id', 'contents'}).")
    missing = [k for k in ("index_path", "model_path") if kind == "e5" and not spec.get(k)]
    if missing:
        raise ValueError(f"retriever=e5 needs {', '.join(missing)} (a prebuilt faiss index and a local E5 model).")
    passages = load_corpus(spec["corpus_path"])
    if kind == "bm25":
        return BM25Retriever(passages)
    return DenseRetriever(passages, spec["model_path"], spec["index_path"], spec.get("device", "cuda"))


# ----------------------------------------------------------------------------------------------------------------
# The service (Search-R1 `retrieval_server.py` API: POST /retrieve {"queries", "topk", "return_scores"})
# ----------------------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server_version = "agentrl-retrieval/1"

    def log_message(self, *args) -> None:  # quiet: one line per request would flood the run log
        pass

    def _reply(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._reply(dict(self.server.stats))

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.stats["requests"] += 1
            self.server.stats["clients"] = sorted(set(self.server.stats["clients"]) | {int(req.get("client", 0))})
        held = self.server.retriever
        if self.path.endswith("/call"):  # a method of a shared object (e.g. the WebShop catalogue)
            if req["method"] not in held.REMOTE_METHODS:
                raise ValueError(f"{req['method']!r} is not a remote method of {type(held).__name__}")
            self._reply({"result": getattr(held, req["method"])(*req["args"])})
            return
        queries = req["queries"] if "queries" in req else [req["query"]]
        topk = int(req.get("topk", 3))
        result = [[{"document": {"contents": doc}} for doc in held.search(q, topk)] for q in queries]
        self._reply({"result": result})


def serve(spec: dict, port: int = 0, ready: Path | None = None, owner_pid: int | None = None) -> None:
    """Build the retriever of `spec` once and serve it on 127.0.0.1:`port` (0: any free port) until `owner_pid`
    exits; writes `{"url", "pid"}` to `ready` when it accepts requests."""
    t0 = time.perf_counter()
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    httpd.retriever, httpd.lock = make_service(spec), threading.Lock()
    httpd.stats = {
        "index_builds": 1,
        "build_s": time.perf_counter() - t0,
        "requests": 0,
        "clients": [],
        "pid": os.getpid(),
    }
    url = f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
    if owner_pid is not None:

        def watch() -> None:
            while _alive(owner_pid):
                time.sleep(2)
            httpd.shutdown()

        threading.Thread(target=watch, daemon=True).start()
    if ready is not None:
        tmp = ready.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        tmp.replace(ready)
    httpd.serve_forever()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RemoteRetriever:
    """Client of a retrieval server (`url` ends in `/retrieve`); `search(query, k)` like the local retrievers."""

    def __init__(self, url: str, timeout: float = 30.0):
        self.url, self.timeout = url, timeout

    def _post(self, payload: dict) -> dict:
        req = urllib.request.Request(
            self.url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def search(self, query: str, k: int = 3) -> list[str]:
        result = self._post({"queries": [query], "topk": k, "return_scores": False, "client": os.getpid()})
        return [hit["document"]["contents"] for hit in result["result"][0]]

    def call(self, method: str, *args):
        """A remote method of the object the server holds (`POST .../call`)."""
        url = self.url.rsplit("/", 1)[0] + "/call"
        req = urllib.request.Request(
            url,
            data=json.dumps({"method": method, "args": list(args), "client": os.getpid()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())["result"]

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url, timeout=self.timeout) as resp:
            return json.loads(resp.read())


def _key(spec: dict) -> str:
    norm = {k: str(Path(v).resolve()) if k.endswith("_path") else v for k, v in sorted(spec.items())}
    return hashlib.sha1(json.dumps(norm, sort_keys=True).encode()).hexdigest()[:16]


def _start(spec: dict, ready: Path, owner_pid: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "agentrl_shared.envs.retrieval", json.dumps(spec), str(ready), str(owner_pid)]
    return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL)


def node_service(spec: dict, owner_pid: int | None = None, start_timeout: float = 3600.0) -> str:
    """The URL of this node's retrieval server for `spec`, starting it if no live one exists.

    `owner_pid` (default: the parent process, i.e. the trainer that owns a worker pool) bounds the server's life.
    The first caller builds the index (inside the server process) while the others wait on the lock.
    """
    folder = Path(tempfile.gettempdir()) / f"agentrl-retrieval-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    ready, lock = folder / f"{_key(spec)}.json", folder / f"{_key(spec)}.lock"
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if ready.is_file():
            info = json.loads(ready.read_text())
            if _alive(info["pid"]):
                return info["url"]
            ready.unlink()
        proc = _start(spec, ready, owner_pid or os.getppid())
        deadline = time.monotonic() + start_timeout
        while not ready.is_file():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"The retrieval server for {spec} exited with code {proc.returncode} while building."
                )
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"The retrieval server for {spec} was not ready after {start_timeout:.0f}s.")
            time.sleep(0.05)
        return json.loads(ready.read_text())["url"]


class RetrievalServer:
    """A retrieval server for `spec` in a child process for the life of a `with` block (tests, scripts):
    `with RetrievalServer(spec) as url: ...`."""

    def __init__(self, spec: dict, start_timeout: float = 3600.0):
        self.spec, self.start_timeout = spec, start_timeout

    def __enter__(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        ready = Path(self._dir.name) / "ready.json"
        self.proc = _start(self.spec, ready, os.getpid())
        deadline = time.monotonic() + self.start_timeout
        while not ready.is_file():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"The retrieval server for {self.spec} did not start.")
            time.sleep(0.05)
        return json.loads(ready.read_text())["url"]

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._dir.cleanup()


if __name__ == "__main__":  # python -m agentrl_shared.envs.retrieval '<spec json>' <ready file> <owner pid>
    serve(json.loads(sys.argv[1]), ready=Path(sys.argv[2]), owner_pid=int(sys.argv[3]))
