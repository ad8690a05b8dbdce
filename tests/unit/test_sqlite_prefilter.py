"""Filtered searches on SQLite: conditions on real columns narrow the rows before any record is
read, with the same results as filtering after reading. Also the bounded deletion log that keeps
several processes' indexes in step."""

from __future__ import annotations

import random
from datetime import timedelta

import numpy as np
import pytest

from memory.backends.sqlite import SqliteBackend
from memory.records import MemoryQuery, MemoryRecord, utcnow

N = 30_000
T0 = utcnow() - timedelta(days=400)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    rng = random.Random(11)
    vecs = np.random.default_rng(11).standard_normal((N, 8)).astype(np.float32)
    recs = []
    for i in range(N):
        rare = i % 1000 == 7  # 30 rows
        recs.append(MemoryRecord(
            id=f"m{i}", namespace=("facts", f"u{i % 3}"),
            content=f"{rng.choice(['revenue', 'churn', 'margin'])} note {i}" + (" rare" if rare else ""),
            metadata={"type": "rare_kind" if rare else "task_traces", "source": "import" if rare else "user",
                      "tags": ["rare"] if rare else ["common", f"t{i % 7}"],
                      "extra": {"batch": 7 if rare else 1000 + i % 50, "flag": rare}},
            created_at=T0 + timedelta(hours=i / 10), updated_at=T0 + timedelta(hours=i / 10)))
    b = SqliteBackend(tmp_path_factory.mktemp("pf") / "pf.sqlite", embedding_model="test", dim=8)
    b.upsert(recs, vecs)
    yield b
    b.close()


def _run(b: SqliteBackend, flt: dict, text: str = "revenue note", seed: int = 0) -> tuple[list, int]:
    read: list[int] = []
    fetch = b._fetch_rids

    def spy(rids, now):  # type: ignore[no-untyped-def]
        read.extend(rids)
        return fetch(rids, now)

    b._fetch_rids = spy  # type: ignore[method-assign]
    try:
        q = MemoryQuery(namespaces=(("facts",),), vector=np.random.default_rng(seed).standard_normal(8).astype(np.float32),
                        text=text, filter=flt, limit=10, now=utcnow())
        hits = b.query(q)
    finally:
        del b._fetch_rids
    return [(h.record.id, round(h.vector_score, 5), round(h.keyword_score, 5)) for h in hits], len(read)


@pytest.mark.parametrize("flt", [
    {"type": "rare_kind"},
    {"type": {"$in": ["rare_kind", "nothing"]}},
    {"created_at": {"$gte": (T0 + timedelta(hours=(N - 40) / 10)).isoformat()}},  # the newest 40
    {"created_at": {"$lt": (T0 + timedelta(hours=50)).isoformat()}, "type": "task_traces"},
    {"updated_at": {"$gt": (T0 + timedelta(days=100)).isoformat()}, "type": "rare_kind"},
])
def test_prefiltered_search_matches_filtering_after_reading_and_reads_few_rows(backend, flt, monkeypatch) -> None:
    fast, read_fast = _run(backend, flt)
    monkeypatch.setattr(SqliteBackend, "PREFILTER_MAX_ROWS", 0)  # force the read-then-filter path
    slow, read_slow = _run(backend, flt)
    assert fast == slow and fast
    assert read_fast <= 60, "the search should read only candidates that can pass the filter"
    assert read_slow > read_fast


def test_a_filter_nothing_passes_reads_nothing(backend) -> None:
    hits, read = _run(backend, {"type": "no_such_type"})
    assert hits == [] and read == 0


def test_filters_without_column_conditions_still_work(backend) -> None:
    hits, _ = _run(backend, {"extra.missing": {"$ne": "x"}, "created_at": {"$ne": T0.isoformat()}})
    assert len(hits) >= 10


@pytest.mark.parametrize("flt", [
    {"source": "import"},
    {"tags": "rare"},
    {"tags": {"$in": ["rare", "nothing"]}},
    {"extra.batch": 7},
    {"extra.batch": {"$in": [7.0, 99999]}},
    {"extra.flag": True},
    {"source": "import", "created_at": {"$gte": T0.isoformat()}},  # with an indexed condition
])
def test_rare_json_filters_are_selected_in_sql_with_the_same_results(backend, flt, monkeypatch) -> None:
    fast, read_fast = _run(backend, flt)
    monkeypatch.setattr(SqliteBackend, "PREFILTER_MAX_ROWS", 0)
    slow, read_slow = _run(backend, flt)
    assert fast == slow and fast
    # Read a few rounds of candidates first (DEFER_JSON_FETCH), then only the rows that pass.
    assert read_fast <= 4 * SqliteBackend.DEFER_JSON_FETCH
    assert read_slow > 5 * read_fast


def test_common_json_filters_do_not_scan_in_sql(backend, monkeypatch) -> None:
    calls: list[bool] = []
    prefilter = SqliteBackend._prefilter

    def spy(self, *args, **kw):  # type: ignore[no-untyped-def]
        calls.append(kw.get("json_only", True))
        return prefilter(self, *args, **kw)

    monkeypatch.setattr(SqliteBackend, "_prefilter", spy)
    hits, read = _run(backend, {"source": "user", "tags": "common"})
    assert len(hits) >= 10 and read <= 60
    assert True not in calls  # only the indexed-conditions probe ran, which does nothing here


def test_deletion_log_is_pruned_and_a_reader_behind_the_cut_rebuilds(tmp_path, monkeypatch) -> None:
    """Two backends on one file (as two processes): the writer deletes enough to prune the
    deletion log; the reader, which had synced before, must still drop every deleted row."""
    monkeypatch.setattr(SqliteBackend, "DELETION_LOG_KEEP", 5)
    monkeypatch.setattr(SqliteBackend, "SMALL_LOAD_AFTER", 1)  # loaded on first use: their rebuild is checked
    path = tmp_path / "log.sqlite"
    vecs = np.random.default_rng(2).standard_normal((60, 8)).astype(np.float32)
    recs = [MemoryRecord(id=f"d{i}", namespace=("facts", "u1"), content=f"fact {i} revenue") for i in range(60)]
    with SqliteBackend(path, embedding_model="test", dim=8) as writer, \
            SqliteBackend(path, embedding_model="test", dim=8) as reader:
        writer.upsert(recs, vecs)
        q = MemoryQuery(namespaces=(("facts",),), vector=vecs[0], text="revenue", limit=60, now=utcnow())
        assert len(reader.query(q)) == 60  # the reader's indexes now hold every row
        for i in range(0, 40, 2):  # 20 deletes, one op each: the log is cut back as it passes 10
            writer.delete(ids=[f"d{i}", f"d{i + 1}"])
        (logged,) = writer._conn.execute("SELECT COUNT(*) FROM deletions").fetchone()
        assert logged <= 2 * 5 * 2  # at most 2 * KEEP ops' worth (2 rows each) remain
        floor = int(writer._conn.execute("SELECT value FROM meta WHERE key = 'deletions_floor'").fetchone()[0])
        assert floor > reader._applied_seq
        got = {h.record.id for h in reader.query(q)}
        assert got == {f"d{i}" for i in range(40, 60)}
        assert reader.count(("facts",)) == 20 and len(reader._index) == 20 and len(reader._kw) == 20
    with SqliteBackend(path, embedding_model="test", dim=8) as again:
        assert {h.record.id for h in again.query(q)} == got
