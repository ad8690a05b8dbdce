"""Small BLAS work runs on one thread: on a busy 2-core machine a second OpenBLAS thread cost
5-100x in latency (see memory/backends/vector_index.py and memory/embeddings.py)."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from memory.backends.vector_index import VectorIndex
from memory.embeddings import get_embedder


def _blas_threads() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_threadpoolctl_sees_numpys_blas() -> None:
    assert _blas_threads(), "threadpoolctl found no BLAS library: the thread caps would do nothing"


def test_vector_scan_uses_one_blas_thread(monkeypatch) -> None:
    idx = VectorIndex(4)
    for i in range(10):
        idx.add(i, ("a", f"u{i % 2}"), np.full(4, i + 1.0, dtype=np.float32))
    seen: list[set[int]] = []
    scan = VectorIndex._search

    def spy(self, *args):  # type: ignore[no-untyped-def]
        seen.append(_blas_threads())
        return scan(self, *args)

    monkeypatch.setattr(VectorIndex, "_search", spy)
    rids, _ = idx.search(idx.matching([("a",)]), np.ones(4, dtype=np.float32), 3)
    assert len(rids) == 3
    assert seen == [{1}]


def test_use_embeds_queries_on_one_thread_and_restores_its_setting(monkeypatch) -> None:
    emb = get_embedder("local/use-multilingual-v3", threads=2, batch_size=64)
    emb.embed_documents(["warm up the model"])
    # The packaged USE runs through memory.use_direct.UseDirect (no fastembed import), or through
    # fastembed's UseMultilingualEmbedding when the direct loader fell back.
    packaged = emb.inner._model
    packaged = getattr(packaged, "model", packaged)
    backend = packaged._model._model
    assert backend.threads == 2
    seen: list[set[int]] = []
    encode = type(backend)._encode

    def spy(self, texts):  # type: ignore[no-untyped-def]
        seen.append(_blas_threads())
        return encode(self, texts)

    monkeypatch.setattr(type(backend), "_encode", spy)
    emb.embed_query("which chart style does the user prefer? 用户喜欢什么图表")
    emb.embed_documents([f"memory number {i}" for i in range(20)])
    assert seen[0] == {1}
    assert seen[-1] == {2}
    assert backend.threads == 2


def test_large_scans_split_in_two_give_the_exact_top_k() -> None:
    rng = np.random.default_rng(5)
    idx = VectorIndex(16)
    vecs = rng.standard_normal((30_000, 16)).astype(np.float32)
    sizes = (17_000, 9_000, 4_000)  # uneven blocks: the cut falls inside the first one
    start = 0
    for b, n in enumerate(sizes):
        for i in range(start, start + n):
            idx.add(i, ("bench", f"u{b}"), vecs[i])
        start += n
    q = rng.standard_normal(16).astype(np.float32)
    rids, sims = idx.search(idx.matching([("bench",)]), q, 50)
    truth = np.argsort(-(vecs @ q), kind="stable")[:50]
    assert rids.tolist() == truth.tolist()
    assert np.allclose(sims, (vecs @ q)[truth], atol=1e-5)
