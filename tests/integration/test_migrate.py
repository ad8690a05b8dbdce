"""memctl migrate: SQLite -> Qdrant (local path) -> SQLite with vectors, resume, verified counts.

Also the Qdrant path store's own persistence checks (reopen, schema identity), which the
conformance suite cannot run for it (see tests/conformance/conftest.py PERSISTENT).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from memory.backends.qdrant import QdrantBackend, collection_name
from memory.backends.sqlite import SqliteBackend
from memory.errors import InvalidInput, SchemaMismatch
from memory.migrate import migrate, register
from memory.records import MemoryMetadata, MemoryQuery, MemoryRecord
from memory.settings import MemorySettings

DIM = 16
MODEL = "migrate/test-vectors"
N = 300
T0 = datetime(2025, 1, 1, tzinfo=UTC)
WORDS = "tea coffee chart report revenue region quarterly 咖啡 报表 金额 user profile bar line".split()


def corpus(n: int = N, seed: int = 0) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        recs.append(MemoryRecord(
            id=f"m{i:04d}", namespace=("user_profile" if i % 3 else "domain_facts", f"u{i % 7}"),
            content=" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))),
            metadata=MemoryMetadata(type="user_profile" if i % 2 else "domain_facts", source="test",
                                    tags=("t", f"g{i % 4}"), extra={"i": i, "nested": {"k": [i, "x"]}}),
            created_at=T0 + timedelta(minutes=i), updated_at=T0 + timedelta(minutes=i, seconds=7),
            # A few expired ones: a copy is a copy, they travel too (still never returned).
            expires_at=(T0 + timedelta(days=1)) if i % 50 == 0 else None,
        ))
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    return recs, vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


@pytest.fixture
def settings() -> MemorySettings:
    return MemorySettings(path=":memory:")


@pytest.fixture
def source(tmp_path):
    recs, vecs = corpus()
    path = tmp_path / "source.sqlite"
    with SqliteBackend(path, embedding_model=MODEL, dim=DIM) as b:
        b.upsert(recs, vecs)
    return path, recs, vecs


def _all(b, include_expired: bool = True) -> dict[str, MemoryRecord]:
    return {r.id: r for r in b.scroll(limit=10_000, include_expired=include_expired)}


def test_round_trip_sqlite_qdrant_sqlite(tmp_path, source, settings):
    path, recs, vecs = source
    qdir, back = tmp_path / "qdrant", tmp_path / "back.sqlite"
    report = migrate(f"sqlite:{path}", f"qdrant:{qdir}", batch=64, settings=settings)
    assert report["ok"] and report["copied"] == N and report["skipped"] == 0
    assert report["source_count"] == report["destination_count"] == N
    assert report["embedding_model"] == MODEL and report["dim"] == DIM

    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as q, \
            SqliteBackend(path, embedding_model=MODEL, dim=DIM) as s:
        assert _all(q) == {r.id: r for r in recs}  # every field, expired records included
        np.testing.assert_allclose(q.get_vectors([r.id for r in recs]), vecs, atol=1e-6)
        assert q.count() == s.count() == N - len([r for r in recs if r.expires_at])
        # No re-embedding: the same vectors rank the same way in both stores.
        now = T0 + timedelta(days=30)
        for i in range(0, N, 37):
            mq = MemoryQuery(namespaces=(("user_profile",), ("domain_facts",)), vector=vecs[i],
                             limit=10, now=now)
            a, b = s.query(mq), q.query(mq)
            assert [x.record.id for x in a] == [x.record.id for x in b]
            np.testing.assert_allclose([x.vector_score for x in a], [x.vector_score for x in b], atol=1e-5)

    report = migrate(f"qdrant:{qdir}", f"sqlite:{back}", batch=100, settings=settings)
    assert report["ok"] and report["copied"] == N
    with SqliteBackend(back, embedding_model=MODEL, dim=DIM) as b:
        assert _all(b) == {r.id: r for r in recs}
        np.testing.assert_allclose(b.get_vectors([r.id for r in recs]), vecs, atol=1e-6)


def test_resume_after_interruption_copies_only_the_rest(tmp_path, source, settings):
    path, recs, _ = source
    qdir = tmp_path / "qdrant"
    calls = []

    def interrupt(done: int, total: int) -> None:
        calls.append(done)
        if done >= 100:
            raise KeyboardInterrupt  # Ctrl-C mid-run

    with pytest.raises(KeyboardInterrupt):
        migrate(f"sqlite:{path}", f"qdrant:{qdir}", batch=50, progress=interrupt, settings=settings)
    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as q:
        partial = len(_all(q))
    assert partial == 100

    seen: list[tuple[int, int]] = []
    report = migrate(f"sqlite:{path}", f"qdrant:{qdir}", batch=50,
                     progress=lambda d, t: seen.append((d, t)), settings=settings)
    assert report["ok"] and report["destination_count"] == N
    # Live records already there are skipped; expired ones (invisible to get) are re-copied.
    expired_in_first = len([r for r in recs[-100:] if r.expires_at])  # scroll is newest first
    assert report["skipped"] == 100 - expired_in_first
    assert report["copied"] == N - 100 + expired_in_first
    assert seen[-1] == (N, N)
    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as q:
        assert len(_all(q)) == N  # nothing twice


def test_count_mismatch_is_reported_and_cli_exits_nonzero(tmp_path, source, settings, monkeypatch):
    path, recs, vecs = source
    dst = tmp_path / "dst.sqlite"
    with SqliteBackend(dst, embedding_model=MODEL, dim=DIM) as b:  # data already there
        b.upsert([MemoryRecord(id="stray", namespace=recs[0].namespace, content="extra")], vecs[:1])
    report = migrate(f"sqlite:{path}", f"sqlite:{dst}", settings=settings)
    ns = "/".join(recs[0].namespace)
    assert not report["ok"] and report["mismatched_namespaces"][ns]["destination"] == \
        report["mismatched_namespaces"][ns]["source"] + 1

    app = typer.Typer()
    app.callback()(lambda: None)  # keep "migrate" a subcommand
    register(app, load_settings=lambda: settings)
    runner = CliRunner()
    res = runner.invoke(app, ["migrate", "--from", f"sqlite:{path}", "--to", f"sqlite:{dst}", "--json"])
    assert res.exit_code == 1, res.output
    ok_dst = tmp_path / "ok.sqlite"
    res = runner.invoke(app, ["migrate", "--from", f"sqlite:{path}", "--to", f"sqlite:{ok_dst}", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])
    assert out["ok"] and out["copied"] == N
    res = runner.invoke(app, ["migrate", "--from", "mysql:x", "--to", f"sqlite:{ok_dst}"])
    assert res.exit_code == 2


def test_bad_specs(tmp_path, settings):
    with pytest.raises(InvalidInput, match="sqlite:PATH"):
        migrate("sqlite", "qdrant:/x", settings=settings)
    with pytest.raises(InvalidInput, match="same store"):
        migrate(f"sqlite:{tmp_path}/a.sqlite", f"sqlite:{tmp_path}/a.sqlite", settings=settings)
    with pytest.raises(InvalidInput, match="no SQLite store"):
        migrate(f"sqlite:{tmp_path}/missing.sqlite", f"qdrant:{tmp_path}/q", settings=settings)
    with pytest.raises(InvalidInput, match="no Qdrant local store"):
        migrate(f"qdrant:{tmp_path}/missing", f"sqlite:{tmp_path}/b.sqlite", settings=settings)


# ---------------------------------------------------------------------- Qdrant path persistence
def test_qdrant_path_reopen_keeps_records_keywords_and_stats(tmp_path):
    recs, vecs = corpus(120)
    qdir = tmp_path / "q"
    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as b:
        b.upsert(recs, vecs)
        b.delete(["m0001"])
        avg = b.stats()["avg_doc_terms"]
        before = b.query(MemoryQuery(namespaces=(("user_profile",),), text="revenue chart", limit=500,
                                     now=T0 + timedelta(days=30)))
    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as b:
        assert b.get(["m0001"]) == [] and b.count(include_expired=True) == 119
        assert b.stats()["avg_doc_terms"] == avg  # BM25 length statistic persisted
        after = b.query(MemoryQuery(namespaces=(("user_profile",),), text="revenue chart", limit=500,
                                    now=T0 + timedelta(days=30)))
        # Same matches with the same BM25 scores (ties may come back in another order).
        assert {x.record.id: round(x.keyword_score, 5) for x in after} == \
               {x.record.id: round(x.keyword_score, 5) for x in before}
        assert after and all(x.keyword_score > 0 for x in after)


def test_qdrant_collections_are_per_model_and_checked(tmp_path):
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    qdir = tmp_path / "q"
    recs, vecs = corpus(3)
    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as a:
        a.upsert(recs, vecs)
    # Another model (or dimension) gets its own collection and never sees these records.
    with QdrantBackend(path=qdir, embedding_model="another/model", dim=DIM) as other:
        assert other.count(include_expired=True) == 0 and other.collection != collection_name("memories", MODEL, DIM)
    assert collection_name("memories", "a/b", 8) != collection_name("memories", "a-b", 8)
    # A collection with our name but built for something else is refused, not silently used.
    client = QdrantClient(path=str(qdir))
    name = collection_name("memories", "third/model", DIM)
    client.create_collection(name, vectors_config={"dense": qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)},
                             metadata={"embedding_model": "someone/else", "dim": DIM})
    client.close()
    with pytest.raises(SchemaMismatch, match="someone/else"):
        QdrantBackend(path=qdir, embedding_model="third/model", dim=DIM)
    with QdrantBackend(path=qdir, embedding_model=MODEL, dim=DIM) as a:  # still fine
        assert a.count(include_expired=True) == 3
