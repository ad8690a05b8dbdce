"""The per-process query cache in front of an embedder, and why benchmarks clear it.

``memctl bench --systems handoff`` runs an inline pass and then a write-behind pass in one process
with the same seeded tasks; without :meth:`CachedEmbedder.clear` the second pass found every query
vector cached and its timings left the query embedding out (lat16, stop 28).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory.embeddings import CachedEmbedder


class CountingEmbedder:
    """A deterministic stand-in that counts model calls (the cache, not a model, is under test)."""

    name, dim = "counting", 4

    def __init__(self) -> None:
        self.calls = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed_query(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        v = np.array([len(text), text.count("a"), 1.0, 0.0], dtype=np.float32)
        return v / np.linalg.norm(v)


def test_repeat_query_is_served_from_cache_until_cleared() -> None:
    inner = CountingEmbedder()
    emb = CachedEmbedder(inner)
    first = emb.embed_query("which chart style")
    again = emb.embed_query("which chart style")
    assert inner.calls == 1 and np.array_equal(first, again)
    emb.clear()
    after = emb.embed_query("which chart style")
    assert inner.calls == 2 and np.array_equal(first, after)


def test_handoff_bench_second_pass_embeds_its_queries(tmp_path, monkeypatch) -> None:
    """Two handoff runs in one process (as `memctl bench --systems handoff` does): the second one
    must call the model for its queries again, or its latency leaves the embedding out."""
    from memctl.bench_handoff import handoff_overhead
    from memory.embeddings import get_embedder
    from memory.settings import MemorySettings

    st = MemorySettings(path=":memory:")
    emb = get_embedder(st.embedding.model, threads=st.embedding.threads, batch_size=st.embedding.batch_size,
                       cache_dir=st.embedding.cache_dir)
    assert isinstance(emb, CachedEmbedder)
    calls: list[str] = []
    real = emb.inner.embed_query

    def counted(text: str) -> np.ndarray:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(emb.inner, "embed_query", counted)
    handoff_overhead(200, 4, cache_dir=tmp_path)
    first = len(calls)
    handoff_overhead(200, 4, cache_dir=tmp_path, write_behind=True)
    assert first > 0 and len(calls) - first >= first // 2, (first, len(calls))
