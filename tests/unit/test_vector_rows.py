"""Rows of blocks loaded as views of the mapped partitions file are located through the file,
with no dict entry per row (memory.backends.vector_rows); the first change of such a block
gives its rows entries, and a row is never located in two places."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory.backends import sqlite_partitions as sp
from memory.backends.sqlite import SqliteBackend
from memory.backends.vector_index import VectorIndex
from memory.records import MemoryRecord

DIM = 8


class _File:
    """A stand-in for the mapped file: rows sorted by namespace, then row id (as it is built)."""

    def __init__(self, layout: dict[tuple[str, ...], list[int]], seed: int = 0) -> None:
        self.ns_list = list(layout)
        self.ns_code = {ns: i for i, ns in enumerate(self.ns_list)}
        self.rids = np.concatenate([np.asarray(sorted(r), dtype=np.int64) for r in layout.values()])
        self.slot_ns = np.repeat(np.arange(len(layout), dtype=np.int32), [len(r) for r in layout.values()])
        self.starts = dict(zip(self.ns_list, np.concatenate([[0], np.cumsum([len(r) for r in layout.values()])])
                               .tolist(), strict=False))
        self.rid_slot = np.full(int(self.rids.max()) + 1, -1, dtype=np.int32)
        self.rid_slot[self.rids] = np.arange(len(self.rids), dtype=np.int32)
        self.vecs = np.random.default_rng(seed).standard_normal((len(self.rids), DIM)).astype(np.float32)
        for a in (self.rids, self.vecs, self.rid_slot, self.slot_ns):
            a.flags.writeable = False  # as the mapping is

    def load(self, idx: VectorIndex, ns: tuple[str, ...]) -> None:
        lo = self.starts[ns]
        sl = slice(lo, lo + int((self.slot_ns == self.ns_code[ns]).sum()))
        idx.add_block(ns, self.rids[sl], self.vecs[sl], mapped=(self, lo))

    def vec(self, rid: int) -> np.ndarray:
        return self.vecs[self.rid_slot[rid]]


A, B, C = ("k", "a"), ("k", "b"), ("k", "c")


def _index(f: _File) -> VectorIndex:
    idx = VectorIndex(DIM)
    for ns in f.ns_list:
        f.load(idx, ns)
    return idx


def test_mapped_rows_need_no_entries_and_are_found_through_the_file() -> None:
    f = _File({A: [3, 9, 4], B: [1, 7], C: [20, 11, 5, 8]})
    idx = _index(f)
    assert not idx._where.rows and len(idx) == 9
    for rid in f.rids.tolist():
        assert rid in idx and np.array_equal(idx.vector(rid), f.vec(rid))
    assert 2 not in idx and 99 not in idx and -1 not in idx and idx.vector(6) is None
    q = np.ones(DIM, dtype=np.float32)
    rids, _ = idx.search([A, C], q, 3)
    assert set(rids.tolist()) <= {3, 4, 9, 5, 8, 11, 20}
    got, _ = idx.search_rids(np.asarray([7, 20, 2]), q, 5)
    assert sorted(got.tolist()) == [7, 20]


def test_a_change_gives_only_that_block_entries_and_keeps_every_row_findable() -> None:
    f = _File({A: [3, 9, 4], B: [1, 7], C: [20, 11, 5, 8]})
    idx = _index(f)
    idx.remove(4)  # A: the last row of A swaps into the hole
    assert set(idx._where.rows) == {3, 9} and 4 not in idx
    new = np.full(DIM, 0.5, dtype=np.float32)
    idx.add(11, C, new)  # C: updated in place (the file is never written)
    assert set(idx._where.rows) == {3, 9, 20, 11, 5, 8}
    assert np.array_equal(idx.vector(11), new) and not np.array_equal(f.vec(11), new)
    idx.add(7, A, new)  # B -> A: leaves B (which is changed too), joins A
    assert 7 in idx._where.rows and idx._where.rows[7][0] == A and set(idx._where.starts) == set()
    assert len(idx) == 8 and idx._blocks[B].n == 1 and np.array_equal(idx.vector(1), f.vec(1))
    for rid in (3, 9, 1, 7, 20, 11, 5, 8):
        ns, pos = idx._where.get(rid)  # type: ignore[misc]
        assert int(idx._blocks[ns].rids[pos]) == rid


def test_a_row_is_never_in_two_places_when_blocks_are_reloaded() -> None:
    f = _File({A: [3, 9, 4], B: [1, 7]})
    idx = _index(f)
    # Row 9 moved to B in SQLite: B is loaded privately (it changed since the file) with it.
    idx.add_block(B, np.asarray([1, 7, 9], dtype=np.int64), np.ones((3, DIM), dtype=np.float32))
    assert len(idx) == 5 and idx._where.get(9) == (B, 2) and idx._blocks[A].n == 2
    assert np.array_equal(idx.vector(9), np.ones(DIM, dtype=np.float32))
    # A newer file has row 7 in A: loading A from it takes 7 out of the private B.
    g = _File({A: [3, 4, 7], B: [1, 9]}, seed=1)
    g.load(idx, A)
    assert len(idx) == 5 and idx._where.get(7) == (A, 2) and idx._blocks[B].n == 2
    assert np.array_equal(idx.vector(7), g.vec(7)) and set(idx._where.starts) == {A}
    idx.drop_block(A)
    assert len(idx) == 2 and 3 not in idx and 7 not in idx and idx._where.mapped_rows == 0


@pytest.fixture()
def small_loads(monkeypatch) -> None:
    monkeypatch.setattr(sp, "ARENA_MIN_ROWS", 1)
    monkeypatch.setattr(SqliteBackend, "SMALL_LOAD_AFTER", 1)
    monkeypatch.setattr(SqliteBackend, "LOAD_AFTER", 1)


def test_a_backend_loading_from_the_file_keeps_no_entry_per_row(tmp_path: Path, small_loads) -> None:
    path = tmp_path / "p.sqlite"
    n = 60
    recs = [MemoryRecord(id=f"m{i}", namespace=("facts", f"u{i % 3}"), content=f"tea note{i}") for i in range(n)]
    vecs = np.random.default_rng(3).standard_normal((n, DIM)).astype(np.float32)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(recs, vecs)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        with b._lock:
            b._matching([("facts",)])
        assert b._parts.mapped_loads == 3 and len(b._index) == n and not b._index._where.rows
        b.upsert([MemoryRecord(id="m4", namespace=("facts", "u1"), content="coffee")], vecs[:1])
        assert len(b._index._where.rows) == n // 3 and len(b._index) == n  # only u1 changed
