"""SQLite and Qdrant rank alike: the same memories and queries through MemoryService on both.

The pattern is qdrant-client's tests/congruence_tests: one call against two implementations,
results compared. Real packaged embeddings (USE-multilingual), real zh/en and LoCoMo turns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memory import MemoryService, MemorySettings
from memory.records import as_utc
from memory.service import NewMemory

ROOT = Path(__file__).resolve().parents[2]
ZH_EN = ROOT / "tests" / "data" / "zh_en"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo"
N_MEMORIES = 2000
N_QUERIES = 100
# LoCoMo's tuning half (SPLIT.md); the held-out half stays unseen.
TUNE = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")


class MemoEmbedder:
    """Embeds each text once for both services (embedding is the slow part, not the stores)."""

    def __init__(self, inner):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._docs: dict[str, np.ndarray] = {}

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._docs]
        if todo:
            for t, v in zip(todo, self.inner.embed_documents(todo), strict=True):
                self._docs[t] = v
        return np.stack([self._docs[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def _jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _corpus() -> tuple[list[NewMemory], list[tuple[str, tuple[str, ...], dict | None]]]:
    turns = _jsonl(ZH_EN / "turns.jsonl")
    turns += [t for t in _jsonl(LOCOMO / "turns.jsonl") if t["conversation_id"] in TUNE]
    turns = turns[:N_MEMORIES]
    items = [
        NewMemory(f"{t['speaker']}: {t['text']}", ("conversation", t["conversation_id"]),
                  {"type": "conversation", "source": t["speaker"].lower()},
                  id=f"{t['conversation_id']}:{t['dia_id']}", created_at=as_utc(t["session_date"]))
        for t in turns
    ]
    convs = {t["conversation_id"] for t in turns}
    zh = _jsonl(ZH_EN / "questions.jsonl")[::4][:40]
    lq = [q for q in _jsonl(LOCOMO / "questions.jsonl") if q["conversation_id"] in convs][::7]
    picked = (zh + lq)[:N_QUERIES]
    queries = []
    for i, q in enumerate(picked):
        # Mostly one conversation; every 5th across all of them (a parent prefix); every
        # 10th with a metadata filter that Qdrant and Python evaluate together.
        ns = ("conversation",) if i % 5 == 4 else ("conversation", q["conversation_id"])
        flt = {"source": {"$ne": "assistant"}} if i % 10 == 9 else None
        queries.append((q["question"], ns, flt))
    return items, queries


def _run(backend: str, embedder, items, queries) -> tuple[list[list[str]], float]:
    settings = MemorySettings(path=":memory:", backend=backend)
    with MemoryService.from_settings(settings, embedder=embedder) as svc:
        assert type(svc.backend).__name__ == {"sqlite": "SqliteBackend", "qdrant": "QdrantBackend"}[backend]
        for i in range(0, len(items), 500):
            svc.write_many(items[i : i + 500])
        assert svc.count() == len(items)
        now = as_utc("2026-01-01T00:00")
        t0 = time.perf_counter()
        out = [[h.record.id for h in svc.search(text, [ns], top_k=10, filter=flt, now=now)]
               for text, ns, flt in queries]
        return out, (time.perf_counter() - t0) / len(queries)


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.is_dir(), reason=f"LoCoMo data not found at {LOCOMO}")
def test_sqlite_and_qdrant_rank_alike(embedder):
    items, queries = _corpus()
    assert len(items) == N_MEMORIES and len(queries) == N_QUERIES
    emb = MemoEmbedder(embedder)
    sq, sq_ms = _run("sqlite", emb, items, queries)
    qd, qd_ms = _run("qdrant", emb, items, queries)
    overlaps = [1.0 if not a and not b else len(set(a) & set(b)) / max(len(a), len(b))
                for a, b in zip(sq, qd, strict=True)]
    mean = sum(overlaps) / len(overlaps)
    same_order = sum(a == b for a, b in zip(sq, qd, strict=True))
    print(f"\ncongruence: mean top-10 overlap {mean:.3f} (min {min(overlaps):.2f}, identical lists "
          f"{same_order}/{len(queries)}); search {sq_ms * 1000:.1f} ms sqlite vs {qd_ms * 1000:.1f} ms "
          "qdrant local")
    assert sum(len(a) for a in sq) >= 5 * len(queries)  # the comparison is not between empty lists
    assert mean >= 0.9


def test_filters_select_the_same_records_on_both_backends():
    """Tricky filter semantics (list-valued extras, missing keys, bools vs ints, $ne/$nin,
    time ranges) give identical results: Qdrant only pre-selects, memory.filters decides."""
    from datetime import UTC, datetime, timedelta

    from memory.backends.qdrant import QdrantBackend
    from memory.backends.sqlite import SqliteBackend
    from memory.records import MemoryMetadata, MemoryQuery, MemoryRecord

    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    extras = [{"lang": "zh"}, {"lang": ["zh", "en"]}, {"lang": "en", "n": 5}, {"n": True}, {"n": 1},
              {"n": [1, 9]}, {"n": "7"}, {}, {"lang": None}, {"n": 2.5}]
    recs = [MemoryRecord(id=f"r{i}", namespace=("n", f"u{i % 2}"), content=f"note {i} tea",
                         metadata=MemoryMetadata(type=("user_profile", "note", "task_traces")[i % 3],
                                                 source=("user", "analysis")[i % 2],
                                                 agent=None if i % 4 else "sql", tags=("a",) if i % 2 else ("b", "a"),
                                                 extra=e),
                         created_at=t0 + timedelta(days=i), updated_at=t0 + timedelta(days=i))
            for i, e in enumerate(extras)]
    vecs = np.ones((len(recs), 4), dtype=np.float32) / 2
    filters = [
        {"extra.lang": "zh"}, {"extra.lang": {"$ne": "zh"}}, {"extra.lang": {"$nin": ["zh"]}},
        {"extra.lang": {"$in": ["en", "zh"]}}, {"extra.n": 1}, {"extra.n": True}, {"extra.n": {"$gte": 1}},
        {"extra.n": {"$lt": 9}}, {"extra.n": {"$gt": "5"}}, {"agent": None}, {"agent": {"$ne": "sql"}},
        {"tags": {"$nin": ["b"]}}, {"tags": {"$ne": "a"}}, {"type": {"$in": ["note", "user_profile"]}},
        {"created_at": {"$gt": (t0 + timedelta(days=3)).isoformat()}},
        {"updated_at": {"$lte": t0 + timedelta(days=3)}, "source": {"$ne": "user"}},
    ]
    with SqliteBackend(":memory:", embedding_model="f", dim=4) as s, \
            QdrantBackend(location=":memory:", embedding_model="f", dim=4) as q:
        s.upsert(recs, vecs)
        q.upsert(recs, vecs)
        for flt in filters:
            mq = MemoryQuery(namespaces=(("n",),), vector=vecs[0], text="tea", filter=flt, limit=20)
            expect = sorted(r.record.id for r in s.query(mq))
            assert sorted(r.record.id for r in q.query(mq)) == expect, flt
            assert sorted(r.id for r in q.scroll(("n",), filter=flt)) == expect, flt
            assert q.count(("n",), filter=flt) == s.count(("n",), filter=flt) == len(expect), flt


def test_qdrant_collection_from_an_older_index_text_is_reindexed_on_open(tmp_path):
    """A collection written under an older records.INDEX_TEXT_VERSION gets its sparse vectors
    rewritten once on open, so its keyword scores equal a freshly written collection's."""
    from qdrant_client import models as qm

    from memory.backends.qdrant import SPARSE, QdrantBackend, point_id
    from memory.records import INDEX_TEXT_VERSION, MemoryQuery, MemoryRecord

    rng = np.random.default_rng(3)
    recs = [MemoryRecord(id=f"r{i}", namespace=("n", "u1"), content=f"{w} tea note {i}")
            for i, w in enumerate(["green", "black", "oolong", "herbal", "white", "green"])]
    vecs = rng.standard_normal((len(recs), 4)).astype(np.float32)
    mq = MemoryQuery(namespaces=(("n",),), vector=vecs[0], text="green tea", limit=10)
    with QdrantBackend(location=":memory:", embedding_model="f", dim=4) as fresh:
        fresh.upsert(recs, vecs)
        want = {r.record.id: round(r.keyword_score, 5) for r in fresh.query(mq)}
    old = QdrantBackend(path=tmp_path / "q", embedding_model="f", dim=4)
    old.upsert(recs, vecs)
    # What an older version left behind: no version in the metadata, stale sparse vectors.
    old._client.update_collection(old.collection, metadata={"index_text_version": 1})
    old._client.update_vectors(old.collection, points=[
        qm.PointVectors(id=point_id(r.id), vector={SPARSE: qm.SparseVector(indices=[1], values=[0.5])})
        for r in recs])
    assert not any(r.keyword_score for r in old.query(mq))
    old.close()
    with QdrantBackend(path=tmp_path / "q", embedding_model="f", dim=4) as reopened:
        got = {r.record.id: round(r.keyword_score, 5) for r in reopened.query(mq)}
        meta = reopened._client.get_collection(reopened.collection).config.metadata
        assert meta["index_text_version"] == INDEX_TEXT_VERSION and meta["kw_docs"] == len(recs)
        assert reopened.count(("n",)) == len(recs)
    assert got == want and any(got.values())
