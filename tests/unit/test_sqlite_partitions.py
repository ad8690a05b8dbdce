"""Lazy partitions of the SQLite backend: a search loads only what it needs, the vector file
beside the SQLite file is rebuilt when missing/stale/corrupt, the projection basis is reused
across opens, and other processes' writes are seen (memory.backends.sqlite_partitions)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memory.backends import sqlite_partitions as sp
from memory.backends import vector_index as vi
from memory.backends.sqlite import SqliteBackend
from memory.backends.sqlite_partitions import basis_path, load_basis, save_basis
from memory.backends.vector_file import HEADER, sidecar_path
from memory.records import MemoryQuery, MemoryRecord, utcnow

DIM = 16
USERS = 4
KINDS = ("user_profile", "facts")
PER_NS = 30


def _vecs(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _fill(path: Path) -> dict[str, np.ndarray]:
    recs, out = [], {}
    vecs = _vecs(USERS * len(KINDS) * PER_NS, 1)
    for i in range(len(vecs)):
        kind, user = KINDS[i % 2], f"u{(i // 2) % USERS}"
        rid = f"{kind}-{user}-{i}"
        recs.append(MemoryRecord(id=rid, namespace=(kind, user), content=f"note {i} about {kind} tea coffee {user}"))
        out[rid] = vecs[i]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(recs, vecs)
    return out


def _q(ns: tuple[str, ...], vec: np.ndarray, text: str | None = "tea coffee", limit: int = 10) -> MemoryQuery:
    return MemoryQuery(namespaces=(ns,), vector=vec, text=text, limit=limit, now=utcnow())


def _result(b: SqliteBackend, q: MemoryQuery) -> list[tuple[str, float | None, float | None]]:
    return [(h.record.id, round(h.vector_score or 0, 5), round(h.keyword_score or 0, 5)) for h in b.query(q)]


@pytest.fixture
def load_on_first_use(monkeypatch) -> None:
    """Small partitions load on a selection's first search (by default its first
    SMALL_LOAD_AFTER - 1 searches are streamed from the files): for the tests of loading."""
    monkeypatch.setattr(SqliteBackend, "SMALL_LOAD_AFTER", 1)


def test_a_scoped_search_is_streamed_until_the_selection_is_searched_again(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    q_vec = _vecs(1, 9)[0]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b, \
            SqliteBackend(path, embedding_model="test", dim=DIM) as ref:
        ref.SMALL_LOAD_AFTER = 1  # type: ignore[misc]
        want = _result(ref, _q(("user_profile", "u1"), q_vec))
        assert b.SMALL_LOAD_AFTER >= 2
        for _ in range(b.SMALL_LOAD_AFTER - 1):  # nothing of the namespace stays in this process
            assert _result(b, _q(("user_profile", "u1"), q_vec)) == want
            assert b._parts.loads == 0 and len(b._index) == 0 and len(b._kw) == 0
        assert _result(b, _q(("user_profile", "u1"), q_vec)) == want
        assert list(b._parts.loaded) == [("user_profile", "u1")]


def test_scoped_search_loads_only_its_namespace(tmp_path: Path, load_on_first_use: None) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert b._parts.loads == 0 and len(b._index) == 0 and len(b._kw) == 0  # opening loads nothing
        hits = b.query(_q(("user_profile", "u1"), _vecs(1, 9)[0]))
        assert hits and all(h.record.namespace == ("user_profile", "u1") for h in hits)
        assert list(b._parts.loaded) == [("user_profile", "u1")] and b._parts.loads == 1
        assert len(b._index) == PER_NS and len(b._kw) == PER_NS
        b.query(_q(("user_profile", "u1"), _vecs(1, 10)[0]))  # loaded once, then reused
        assert b._parts.loads == 1
        b.query(_q(("facts",), _vecs(1, 11)[0]))  # a prefix loads each namespace under it
        assert b._parts.loads == 1 + USERS and len(b._index) == PER_NS * (1 + USERS)


def test_partitions_are_evicted_under_the_budget_and_results_do_not_change(tmp_path: Path, load_on_first_use: None) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    q_vec = _vecs(1, 3)[0]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as big, \
            SqliteBackend(path, embedding_model="test", dim=DIM, memory_budget_mb=0.001) as small:
        one = small._parts.partition_bytes(PER_NS)
        assert one > small._parts.budget_bytes  # the budget holds less than one partition
        for u in range(USERS):
            for kind in KINDS:
                ns = (kind, f"u{u}")
                assert _result(small, _q(ns, q_vec)) == _result(big, _q(ns, q_vec))
                assert list(small._parts.loaded) == [ns]  # the others were evicted
        assert small._parts.evictions == USERS * len(KINDS) - 1
        assert len(small._index) == PER_NS and len(small._kw) == PER_NS
        # an evicted partition comes back on demand, with a write made meanwhile
        small.upsert([MemoryRecord(id="late", namespace=("facts", "u0"), content="late tea coffee")], q_vec[None])
        assert _result(small, _q(("facts", "u0"), q_vec))[0][0] == "late"


def test_keyword_scores_use_the_whole_store_statistics(tmp_path: Path) -> None:
    """With one partition loaded, BM25 must still equal FTS5's bm25() (global N, avgdl, df)."""
    path = tmp_path / "p.sqlite"
    _fill(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        blocks = b._matching([("facts", "u2")])
        ours = dict(b._keyword(blocks, "note tea u2"))
        assert len(b._parts.loaded) == 1
        from memory.backends.sqlite_schema import ns_term
        from memory.text import fts_query

        truth = {int(r): -float(s) for r, s in b._conn.execute(
            "SELECT rowid, bm25(memories_fts, 0.0, 1.0) FROM memories_fts WHERE memories_fts MATCH ?",
            (f"nsk : ({ns_term(('facts', 'u2'))}) AND terms : ({fts_query('note tea u2')})",))}
        assert truth and ours.keys() == truth.keys()
        for rid, s in truth.items():
            assert ours[rid] == pytest.approx(s, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("damage", ["missing", "header", "row", "truncated", "foreign"])
def test_a_missing_or_corrupt_vector_file_is_rebuilt_with_identical_results(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    qs = [_q((k, f"u{u}"), _vecs(1, 20 + u)[0]) for u in range(USERS) for k in KINDS]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        want = [_result(b, q) for q in qs]
        assert b._vf is not None and b._vf.rebuilds == 1  # created on first use
    side = sidecar_path(str(path))
    assert side is not None and os.path.getsize(side) > HEADER
    if damage == "missing":
        os.remove(side)
    elif damage == "header":
        with open(side, "r+b") as f:
            f.write(b"garbage!")
    elif damage == "row":  # the highest rid's vector (always spot-checked) overwritten
        with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
            (hi,) = b._conn.execute("SELECT MAX(rid) FROM memories").fetchone()
        with open(side, "r+b") as f:
            f.seek(HEADER + hi * DIM * 4)
            f.write(np.full(DIM, 7.0, dtype="<f4").tobytes())
    elif damage == "truncated":
        with open(side, "r+b") as f:
            f.truncate(HEADER + 8)
    else:  # the vector file of another store copied beside this one
        other = tmp_path / "other.sqlite"
        _fill(other)
        with SqliteBackend(other, embedding_model="test", dim=DIM) as o:
            o.query(qs[0])
        os.replace(sidecar_path(str(other)), side)  # type: ignore[arg-type]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert [_result(b, q) for q in qs] == want
        assert b._vf is not None and b._vf.rebuilds == 1


def test_a_stale_vector_file_catches_up_without_a_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    vecs = _fill(path)
    q_vec = _vecs(1, 5)[0]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.query(_q(("facts", "u0"), q_vec))
        copied = b._vf.rows_copied  # type: ignore[union-attr]
        assert copied == len(vecs)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as w:  # writes after the file was synced
        target = next(k for k in vecs if k.startswith("facts-u0"))
        w.upsert([MemoryRecord(id=target, namespace=("facts", "u0"), content="moved tea coffee")], q_vec[None])
        w.delete([k for k in vecs if k.startswith("facts-u0")][1:3])
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        res = b.query(_q(("facts", "u0"), q_vec))
        assert res[0].record.id == target and res[0].vector_score == pytest.approx(1.0, abs=1e-5)
        assert b._vf.rebuilds == 0 and b._vf.rows_copied == 1  # type: ignore[union-attr]
        assert b.count(("facts", "u0")) == PER_NS - 2 == b.size_hint(("facts", "u0"))


BDIM = 64  # the basis keeps multiples of 16 dims, and at most half of them


def _dominant(n: int, seed: int) -> np.ndarray:
    """Vectors with most of their energy in a few directions (so a basis is kept)."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, BDIM)).astype(np.float32) * 0.05
    v[:, :3] += rng.standard_normal((n, 3)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_the_projection_basis_is_saved_reused_and_dropped_when_stale(tmp_path: Path, monkeypatch,
                                                                   load_on_first_use: None) -> None:
    monkeypatch.setattr(vi, "TWO_STAGE_MIN_ROWS", 200)
    path = tmp_path / "b.sqlite"
    vecs = _dominant(600, 1)
    recs = [MemoryRecord(id=f"m{i}", namespace=("facts", f"u{i % 3}"), content=f"x {i}") for i in range(600)]
    with SqliteBackend(path, embedding_model="test", dim=BDIM) as b:
        b.upsert(recs, vecs)
    q = MemoryQuery(namespaces=(("facts",),), vector=vecs[7], limit=5, now=utcnow())
    exact = [f"m{i}" for i in np.argsort(-(vecs @ vecs[7]), kind="stable")[:5]]
    with SqliteBackend(path, embedding_model="test", dim=BDIM) as b:
        assert [h.record.id for h in b.query(q)] == exact
        assert b._parts.basis_fits == 1 and b._index.last_plan.startswith("two-stage")
        tag = b._vf.tag  # type: ignore[union-attr]
    bp = basis_path(sidecar_path(str(path)))
    saved = load_basis(bp, tag, BDIM)
    assert saved is not None and saved[0] is not None and saved[1] == 600
    with SqliteBackend(path, embedding_model="test", dim=BDIM) as b:  # another process: reused
        assert [h.record.id for h in b.query(q)] == exact
        assert b._parts.basis_fits == 0 and b._index.last_plan.startswith("two-stage")
    save_basis(bp, tag, BDIM, saved[0], 10)  # fitted when the store was 60x smaller: stale
    with SqliteBackend(path, embedding_model="test", dim=BDIM) as b:
        assert [h.record.id for h in b.query(q)] == exact
        assert b._parts.basis_fits == 1
    assert load_basis(bp, tag, BDIM)[1] == 600  # type: ignore[index]
    save_basis(bp, b"\0" * 16, BDIM, saved[0], 600)  # another store's basis is not used
    with SqliteBackend(path, embedding_model="test", dim=BDIM) as b:
        b.query(q)
        assert b._parts.basis_fits == 1
    monkeypatch.setattr(sp, "FIT_RULE", sp.FIT_RULE + 1)  # fitted by an older head-size rule: fit again
    save_basis(bp, tag, BDIM, saved[0], 600)
    monkeypatch.setattr(sp, "FIT_RULE", sp.FIT_RULE - 1)
    assert load_basis(bp, tag, BDIM) is None
    with SqliteBackend(path, embedding_model="test", dim=BDIM) as b:
        assert [h.record.id for h in b.query(q)] == exact
        assert b._parts.basis_fits == 1
    assert load_basis(bp, tag, BDIM) is not None


_OTHER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from memory.backends.sqlite import SqliteBackend
    from memory.records import MemoryRecord
    path, dim = sys.argv[1], int(sys.argv[2])
    v = np.zeros((2, dim), dtype=np.float32); v[:, 3] = 1
    with SqliteBackend(path, embedding_model="test", dim=dim) as b:
        b.upsert([MemoryRecord(id="other-loaded", namespace=("facts", "u1"), content="from the other process"),
                  MemoryRecord(id="other-unloaded", namespace=("facts", "u2"), content="from the other process")], v)
        b.delete(["facts-u1-3"])
    """
)


def test_another_process_writes_reach_loaded_and_unloaded_partitions(tmp_path: Path, load_on_first_use: None) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    e3 = np.zeros(DIM, dtype=np.float32)
    e3[3] = 1
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.query(_q(("facts", "u1"), e3))
        assert ("facts", "u1") in b._parts.loaded and ("facts", "u2") not in b._parts.loaded
        run = subprocess.run([sys.executable, "-c", _OTHER, str(path), str(DIM)], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        for ns, rid in ((("facts", "u1"), "other-loaded"), (("facts", "u2"), "other-unloaded")):
            res = b.query(_q(ns, e3, text="other process", limit=PER_NS + 5))
            assert res[0].record.id == rid and res[0].vector_score == pytest.approx(1.0, abs=1e-5)
        ids = {h.record.id for h in b.query(_q(("facts", "u1"), e3, limit=PER_NS + 5))}
        assert "facts-u1-3" not in ids and len(ids) == PER_NS  # one deleted, one added


def test_deleted_rows_are_erased_from_the_vector_file(tmp_path: Path) -> None:
    """forget-user must not leave a user's vectors in the file beside the store."""
    path = tmp_path / "p.sqlite"
    vecs = _fill(path)
    gone = [k for k in vecs if "-u2-" in k]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.query(_q(("facts", "u2"), _vecs(1, 3)[0]))  # the file now holds every row
        rids = [r for (r,) in b._conn.execute(
            f"SELECT rid FROM memories WHERE id IN ({','.join('?' * len(gone))})", gone)]
        assert b.delete(namespace=("facts", "u2")) + b.delete(namespace=("user_profile", "u2")) == len(gone)
        b.flush_vectors()
    raw = Path(sidecar_path(str(path))).read_bytes()  # type: ignore[arg-type]
    for rid in rids:
        row = np.frombuffer(raw[HEADER + rid * DIM * 4 : HEADER + (rid + 1) * DIM * 4], dtype="<f4")
        assert not row.any()
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert b.residue(("facts", "u2")) == {"rows": 0, "vectors": 0, "keyword_entries": 0}
        assert b.query(_q(("facts", "u1"), _vecs(1, 3)[0]))  # the others still there


def test_a_large_unloaded_search_streams_from_the_files_with_identical_results(tmp_path: Path) -> None:
    """Served from the vector file and FTS5 (nothing loaded), the same hits and scores as from
    loaded partitions; the same selection searched LOAD_AFTER times is then loaded."""
    path = tmp_path / "p.sqlite"
    _fill(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as loaded, \
            SqliteBackend(path, embedding_model="test", dim=DIM) as streamed:
        loaded.STREAM_MIN_ROWS, loaded.SMALL_LOAD_AFTER = 10**9, 1  # type: ignore[misc]
        streamed.STREAM_MIN_ROWS, streamed.LOAD_AFTER = 1, 10**9  # type: ignore[misc]
        queries = [MemoryQuery(namespaces=ns, vector=v, text=t, limit=k, now=utcnow(), filter=f)
                   for ns in ((("facts",),), (("user_profile",), ("facts", "u1")), (("user_profile", "u3"),))
                   for v, t, k, f in ((_vecs(1, 40)[0], "tea coffee u2", 7, None), (None, "note u1", 5, None),
                                      (_vecs(1, 41)[0], None, 12, None),
                                      (_vecs(1, 42)[0], "note", 6, {"type": "user_profile"}))]
        for q in queries:
            want, got = loaded.query(q), streamed.query(q)
            assert [h.record.id for h in got] == [h.record.id for h in want]
            for a, b in zip(got, want, strict=True):
                assert (a.vector_score is None) == (b.vector_score is None)
                assert (a.keyword_score is None) == (b.keyword_score is None)
                if b.vector_score is not None:
                    assert a.vector_score == pytest.approx(b.vector_score, abs=1e-5)
                if b.keyword_score is not None:
                    assert a.keyword_score == pytest.approx(b.keyword_score, rel=1e-4, abs=1e-6)
        assert streamed._parts.loads == 0 and len(streamed._index) == 0 and loaded._parts.loads > 0
        streamed.LOAD_AFTER = 2  # type: ignore[misc]
        streamed.query(queries[0])
        assert streamed._parts.loads == USERS


def test_a_scoped_search_catalogues_only_its_prefix_and_sees_later_writes(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    q_vec = _vecs(1, 5)[0]
    new = MemoryRecord(id="late", namespace=("facts", "u2"), content="tea coffee late fact")
    moved = MemoryRecord(id="user_profile-u1-2", namespace=("facts", "u2"), content="moved out of u1, tea")
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b, \
            SqliteBackend(path, embedding_model="test", dim=DIM) as other:
        b.query(_q(("user_profile", "u1"), q_vec))
        cat = b._parts.catalogue
        assert cat is not None and cat.covered == {("user_profile", "u1")}  # not the whole table
        assert len(cat) == PER_NS and cat.ns_list == [("user_profile", "u1")]
        other.upsert([new, moved], _vecs(2, 6))  # another process: one row into, one out of u1's sibling
        assert b.size_hint(("user_profile", "u1")) == PER_NS - 1
        assert b.size_hint(("facts",)) == PER_NS * USERS + 2  # extended on demand, reads the file now
        assert cat.covered == {("user_profile", "u1"), ("facts",)}
        assert b.stats()["vectors"] == len(cat) == USERS * len(KINDS) * PER_NS + 1  # the whole store
        assert cat.covered is None
        with SqliteBackend(path, embedding_model="test", dim=DIM) as fresh:
            for ns in (("facts", "u2"), ("user_profile", "u1"), ("facts",), ("user_profile",)):
                assert _result(b, _q(ns, q_vec)) == _result(fresh, _q(ns, q_vec))


def test_the_record_cache_stays_small_and_never_changes_results(tmp_path: Path, monkeypatch) -> None:
    """Parsed records cost ~3 KB of private heap each: a long-lived process keeps at most
    RECORD_CACHE of them however many rows its searches read, with the same results (checked with a
    cap of 1,024 so that a search can read more rows than the cap cheaply)."""
    monkeypatch.setattr(SqliteBackend, "RECORD_CACHE", 1024)
    path = tmp_path / "p.sqlite"
    n = 1500
    recs = [MemoryRecord(id=f"r{i}", namespace=("facts", "u0"), content=f"tea note {i}") for i in range(n)]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(recs, _vecs(n, 7))
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b, \
            SqliteBackend(path, embedding_model="test", dim=DIM) as fresh:
        q = _q(("facts", "u0"), _vecs(1, 8)[0], limit=n)  # reads every row
        first = _result(b, q)
        assert len(first) == n
        assert len(b._records) == SqliteBackend.RECORD_CACHE
        assert _result(b, q) == first == _result(fresh, q)


def test_a_write_updates_the_cached_document_frequencies_exactly(tmp_path: Path) -> None:
    """An upsert moves the cached document frequencies by the rows it added or replaced instead
    of dropping them all; every cached frequency still equals FTS5's own after inserts,
    replacements, Chinese and accented (unicode61-folded: all dropped) text, and deletes."""
    path = tmp_path / "p.sqlite"
    _fill(path)
    terms = ["note", "tea", "coffee", "u1", "facts", "cafe", "café", "华东", "华", "gmv", "latte", "milk"]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:

        def check() -> None:
            fresh = sp.fts_df(b._conn, terms)
            assert b._kw_stats(terms)[0] == fresh
            assert b._kw_stats(terms)[1:] == sp.fts_totals(b._conn)

        check()
        b.upsert([MemoryRecord(id="n1", namespace=("facts", "u1"), content="latte with milk")], _vecs(1, 7))
        assert b._parts.df_cache["latte"] == 1 and "coffee" in b._parts.df_cache  # updated, not dropped
        check()
        # Replacing a row: the terms it loses ("tea", "coffee") go down.
        b.upsert([MemoryRecord(id="facts-u1-3", namespace=("facts", "u1"), content="华东 GMV note")], _vecs(1, 8))
        assert b._parts.df_cache["gmv"] == 1 and "coffee" in b._parts.df_cache
        check()
        b.delete(["facts-u1-3"])  # a small delete moves them too
        assert b._parts.df_cache["gmv"] == 0 and "coffee" in b._parts.df_cache
        check()
        # An accented word becomes another vocabulary entry in FTS5: everything is re-read.
        b.upsert([MemoryRecord(id="n2", namespace=("facts", "u2"), content="café au lait")], _vecs(1, 9))
        assert not b._parts.df_cache
        check()
        b.delete(["n1"])
        check()
    assert sp.df_delta(["tea tea 华东 u1", "gmv tea"], ["tea u1"]) == {"tea": 1, "华东": 1, "u1": 0, "gmv": 1}
    assert sp.df_delta(["tea café"], []) is None
