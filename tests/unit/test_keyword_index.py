"""The in-memory BM25 index must score exactly like the FTS5 table it replaced at query time."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memory.backends.keyword_index import KeywordIndex
from memory.backends.sqlite import SqliteBackend
from memory.backends.sqlite_schema import ns_term
from memory.records import INDEX_TEXT_VERSION, MemoryRecord
from memory.text import fts_query

WORDS = ("chart report sales revenue quarter region north south bar line pie weekly monthly "
         "customer order refund budget forecast margin profit coffee tea meeting deadline").split()
ZH = "销售报表季度华东华南柱状图折线图客户订单退款预算利润咖啡会议截止日期每周每月"


def _doc(rng: random.Random) -> str:
    en = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
    if rng.random() < 0.4:
        i = rng.randrange(len(ZH) - 6)
        en += " " + ZH[i : i + rng.randint(2, 6)]
    return en


def _fts_scores(b: SqliteBackend, namespaces: list[tuple[str, ...]], text: str) -> dict[int, float]:
    """Ground truth: FTS5's own bm25() over the same rows, column weights (nsk 0, terms 1)."""
    ns_expr = " OR ".join(ns_term(ns) for ns in namespaces)
    rows = b._conn.execute(
        "SELECT rowid, bm25(memories_fts, 0.0, 1.0) FROM memories_fts WHERE memories_fts MATCH ?",
        (f"nsk : ({ns_expr}) AND terms : ({fts_query(text)})",),
    )
    return {int(r): -float(s) for r, s in rows}


@pytest.fixture()
def backend(tmp_path):
    rng = random.Random(7)
    b = SqliteBackend(tmp_path / "kw.sqlite", embedding_model="test", dim=4)
    recs, vecs = [], []
    for i in range(400):
        ns = ("user_profile", f"u{i % 3}") if i % 2 else ("facts", f"u{i % 3}", "x")
        recs.append(MemoryRecord(id=f"m{i}", namespace=ns, content=_doc(rng)))
        vecs.append(rng.random() for _ in range(4))
    b.upsert(recs, np.array([list(v) for v in vecs], dtype=np.float32))
    # churn: re-index some rows with new text and delete others, so dead slots exist
    b.upsert([MemoryRecord(id=f"m{i}", namespace=recs[i].namespace, content=_doc(rng)) for i in range(0, 400, 7)],
             np.ones((len(range(0, 400, 7)), 4), dtype=np.float32))
    b.delete([f"m{i}" for i in range(3, 400, 11)])
    yield b
    b.close()


QUERIES = ["weekly sales chart", "refund budget", "销售报表", "咖啡 meeting deadline", "profit margin north region",
           "tea"]


@pytest.mark.parametrize("query", QUERIES)
def test_scores_match_fts5_bm25(backend: SqliteBackend, query: str) -> None:
    for prefixes in ([("user_profile",)], [("facts",), ("user_profile", "u1")], [("user_profile", "u2")]):
        blocks = backend._matching(prefixes)
        ours = dict(backend._keyword(blocks, query))
        truth = _fts_scores(backend, prefixes, query)
        assert ours.keys() == truth.keys()
        assert truth, "the query should match something"
        for rid, s in truth.items():
            assert ours[rid] == pytest.approx(s, rel=1e-4, abs=1e-6)


def test_reopen_and_another_process_rebuild_the_same_index(backend: SqliteBackend) -> None:
    other = SqliteBackend(backend.path, embedding_model="test", dim=4)
    try:
        blocks = other._matching([("user_profile",), ("facts",)])
        assert other._keyword(blocks, "weekly sales chart 销售") == backend._keyword(blocks, "weekly sales chart 销售")
        # a write through one handle is scored by the other's next query
        backend.upsert([MemoryRecord(id="new", namespace=("user_profile", "u0"), content="zebra zebra chart")],
                       np.ones((1, 4), dtype=np.float32))
        other._sync()  # what every query does first
        hits = other._keyword(other._matching([("user_profile",)]), "zebra")
        assert [backend._conn.execute("SELECT id FROM memories WHERE rid = ?", (r,)).fetchone()[0]
                for r, _ in hits] == ["new"]
    finally:
        other.close()


def test_compaction_keeps_scores() -> None:
    rng = random.Random(3)
    idx, fresh = KeywordIndex(), KeywordIndex()
    live: dict[int, list[str]] = {}
    for rid in range(12_000):
        terms = [rng.choice(WORDS) for _ in range(rng.randint(1, 8))]
        idx.add(rid, ("ns",), terms)
        live[rid] = terms
        if rid % 3 != 2:  # two thirds die: compaction must run (dead > live and > 4096)
            idx.remove(rid)
            del live[rid]
    assert idx._n_slots < 12_000, "compaction should have dropped dead slots"
    for rid, terms in live.items():
        fresh.add(rid, ("ns",), terms)
    for q in (["chart"], ["tea", "coffee", "refund"]):
        a_r, a_s = idx.search([("ns",)], q)
        b_r, b_s = fresh.search([("ns",)], q)
        assert dict(zip(a_r.tolist(), a_s.tolist(), strict=True)) == pytest.approx(
            dict(zip(b_r.tolist(), b_s.tolist(), strict=True)))
    assert len(idx) == len(live)


def test_namespaces_are_exact_and_reindexing_replaces_terms() -> None:
    idx = KeywordIndex()
    idx.add(1, ("a", "u1"), ["tea"])
    idx.add(2, ("a", "u12"), ["tea"])
    r, _ = idx.search([("a", "u1")], ["tea"])
    assert r.tolist() == [1]
    idx.add(1, ("a", "u1"), ["coffee"])  # same row, new text: the old term must stop matching
    assert idx.search([("a", "u1")], ["tea"])[0].tolist() == []
    assert idx.search([("a", "u1")], ["coffee"])[0].tolist() == [1]
    idx.remove(1)
    assert idx.search([("a", "u1")], ["coffee"])[0].tolist() == []
    assert len(idx) == 1


def test_a_file_indexed_under_an_older_index_text_version_is_retokenized_on_open(tmp_path) -> None:
    path = tmp_path / "old.sqlite"
    b = SqliteBackend(path, embedding_model="test", dim=4)
    b.upsert([MemoryRecord(id="m1", namespace=("facts", "u1"), content="walrus migration",
                           metadata={"extra": {"context": "what about the seals"}})], np.ones((1, 4), dtype=np.float32))
    other = SqliteBackend(path, embedding_model="test", dim=4)  # a second process that stays open
    # what an older release left behind: other terms, an older version stamp
    b._conn.execute("UPDATE memories_fts SET terms = 'stale'")
    b._conn.execute("UPDATE meta SET value = '1' WHERE key = 'index_text_version'")
    b.close()
    b = SqliteBackend(path, embedding_model="test", dim=4)
    try:
        blocks = b._matching([("facts",)])
        assert [r for r, _ in b._keyword(blocks, "walrus")] and not b._keyword(blocks, "stale")
        terms = b._conn.execute("SELECT terms FROM memories_fts").fetchone()[0].split()
        assert terms.count("walrus") == 3 and terms.count("seal") == 1  # content x3, context x1
        assert b._conn.execute("SELECT value FROM meta WHERE key = 'index_text_version'").fetchone()[0] \
            == str(INDEX_TEXT_VERSION)
        other._sync()
        assert [r for r, _ in other._keyword(blocks, "walrus")] and not other._keyword(blocks, "stale")
    finally:
        b.close()
        other.close()


def test_the_one_time_retokenisation_covers_every_row_across_batches(tmp_path, monkeypatch) -> None:
    """The re-index reads rows in batches (bounded memory at 1M rows); no row may be skipped at a
    batch boundary, also with gaps in the row ids left by deletes."""
    from memory.backends import sqlite_sync

    path = tmp_path / "old.sqlite"
    b = SqliteBackend(path, embedding_model="test", dim=4)
    recs = [MemoryRecord(id=f"m{i}", namespace=("facts", "u1"), content=f"walrus{i} colony") for i in range(7)]
    b.upsert(recs, np.ones((7, 4), dtype=np.float32))
    b.delete([recs[2].id, recs[3].id])  # a gap in the row ids
    b._conn.execute("UPDATE memories_fts SET terms = 'stale'")
    b._conn.execute("UPDATE meta SET value = '1' WHERE key = 'index_text_version'")
    b.close()
    monkeypatch.setattr(sqlite_sync, "REINDEX_BATCH", 2)
    b = SqliteBackend(path, embedding_model="test", dim=4)
    try:
        terms = [t for (t,) in b._conn.execute("SELECT terms FROM memories_fts")]
        assert len(terms) == 5 and all("stale" not in t.split() for t in terms)
        assert sorted(int(next(w for w in t.split() if w.startswith("walrus"))[6:]) for t in terms) \
            == [0, 1, 4, 5, 6]
    finally:
        b.close()
