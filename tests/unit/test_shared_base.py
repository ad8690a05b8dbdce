"""The mapped ``<store>.partitions`` file (memory.backends.shared_base): partitions loaded as
read-only views of it give the same results as private copies, writes after the mapping stay
visible (and never reach the file), a dirty/stale/corrupt/foreign file is not trusted, two
builders race safely, and scrub removes it."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memory.backends import shared_base
from memory.backends import sqlite_partitions as sp
from memory.backends.shared_base import open_base, partitions_path
from memory.backends.sqlite import SqliteBackend
from memory.records import MemoryQuery, MemoryRecord, utcnow

DIM = 16
USERS = 4
KINDS = ("user_profile", "facts")
PER_NS = 30
WORDS = ["tea", "coffee", "chart", "budget", "report", "east", "sales", "deadline", "refund", "用户"]


def _vecs(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _text(i: int) -> str:
    rng = np.random.default_rng(i)
    return " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7))).tolist()) + f" note{i % 7}"


def _fill(path: Path) -> None:
    n = USERS * len(KINDS) * PER_NS
    recs = [MemoryRecord(id=f"m{i}", namespace=(KINDS[i % 2], f"u{(i // 2) % USERS}"), content=_text(i))
            for i in range(n)]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(recs, _vecs(n, 1))


def _queries() -> list[MemoryQuery]:
    out = []
    for i, text in enumerate(["tea coffee", "chart budget report", "用户 refund", None]):
        v = _vecs(1, 50 + i)[0]
        for ns in [(k, f"u{u}") for k in KINDS for u in range(USERS)] + [("facts",), ("user_profile",)]:
            out.append(MemoryQuery(namespaces=(ns,), vector=v, text=text, limit=8, now=utcnow()))
    return out


def _results(b: SqliteBackend) -> list[list[tuple[str, float, float]]]:
    return [[(h.record.id, round(h.vector_score or 0, 5), round(h.keyword_score or 0, 5)) for h in b.query(q)]
            for q in _queries()]


def _reference(path: Path) -> list[list[tuple[str, float, float]]]:
    """What a backend without the partitions file returns (private copies, as before)."""
    ref = path.parent / "ref" / path.name
    ref.parent.mkdir(exist_ok=True)
    for p in ref.parent.iterdir():
        p.unlink()
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b._conn.execute(f"VACUUM INTO '{ref}'")
    with SqliteBackend(ref, embedding_model="test", dim=DIM) as b:
        b._shared = lambda rows: None  # type: ignore[method-assign]
        b.SMALL_LOAD_AFTER = b.LOAD_AFTER = 1  # type: ignore[misc]
        out = _results(b)
        assert b._parts.mapped_loads == 0
    return out


@pytest.fixture(autouse=True)
def small_loads_build(monkeypatch) -> None:
    """Every load counts as large (it builds the file when missing) and loads on first use."""
    monkeypatch.setattr(sp, "ARENA_MIN_ROWS", 1)
    monkeypatch.setattr(SqliteBackend, "SMALL_LOAD_AFTER", 1)
    monkeypatch.setattr(SqliteBackend, "LOAD_AFTER", 1)


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_partitions_load_as_read_only_views_with_identical_results(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    want = _reference(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert _results(b) == want
        assert b._parts.base_builds == 1 and b._parts.mapped_loads == len(KINDS) * USERS
        block = b._index._blocks[("facts", "u1")]
        assert not block.vecs.flags.writeable  # a view of the mapped file, not a private copy
        assert b._kw.attached == USERS * len(KINDS) * PER_NS and not b._kw._slot_of
    assert os.path.exists(partitions_path(str(path)))  # type: ignore[arg-type]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:  # another process: reuses it
        assert _results(b) == want
        assert b._parts.base_builds == 0 and b._parts.mapped_loads == len(KINDS) * USERS


def test_writes_after_the_mapping_are_visible_and_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    side = partitions_path(str(path))
    assert side is not None
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b, \
            SqliteBackend(path, embedding_model="test", dim=DIM) as other:
        _results(b)  # everything loaded from the mapped file
        before = _digest(side)
        v = _vecs(4, 77)
        # This process: an update in place, a new row, a move to another namespace, a delete.
        b.upsert([MemoryRecord(id="m8", namespace=("facts", "u0"), content="tea tea tea brand new words"),
                  MemoryRecord(id="fresh", namespace=("facts", "u1"), content="coffee chart fresh"),
                  MemoryRecord(id="m3", namespace=("facts", "u3"), content="moved budget")], v[:3])
        assert b.delete(ids=["m10"]) == 1
        # Another process: the same kinds of change, seen through _sync.
        other.upsert([MemoryRecord(id="m12", namespace=("user_profile", "u2"), content="refund 用户 deadline"),
                      MemoryRecord(id="other", namespace=("user_profile", "u0"), content="sales east")], v[2:4])
        assert other.delete(ids=["m21"]) == 1
        got = _results(b)
        assert _digest(side) == before
    assert got == _reference(path)
    assert any(h[0] == "fresh" for r in got for h in r) and not any(h[0] in ("m10", "m21") for r in got for h in r)


def test_a_dirty_namespace_is_loaded_privately_and_a_stale_file_rebuilt(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.query(_queries()[0])  # builds the file
        b.upsert([MemoryRecord(id="late", namespace=("facts", "u2"), content="tea late")], _vecs(1, 5))
    monkeypatch.setattr(shared_base, "STALE_SHARE", 0.5)  # one changed row: not stale yet
    want = _reference(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert _results(b) == want
        assert b._parts.base_builds == 0 and b._parts.mapped_loads == len(KINDS) * USERS - 1
        assert b._index._blocks[("facts", "u2")].vecs.flags.writeable  # dirty: a private copy
    monkeypatch.setattr(shared_base, "STALE_SHARE", 0.0)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert _results(b) == want
        assert b._parts.base_builds == 1 and b._parts.mapped_loads == len(KINDS) * USERS


@pytest.mark.parametrize("damage", ["header", "vector", "truncated", "foreign"])
def test_a_corrupt_or_foreign_file_is_not_used_and_is_rebuilt(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    want = _reference(path)
    side = partitions_path(str(path))
    assert side is not None
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.query(_queries()[0])
        assert b._parts.base is not None
    vec_at = _header(side)["arrays"]["vecs"][0]
    if damage == "header":
        with open(side, "r+b") as f:
            f.write(b"garbage!")
    elif damage == "vector":  # slot 0's vector (always spot-checked) overwritten
        with open(side, "r+b") as f:
            f.seek(vec_at)
            f.write(np.full(DIM, 7.0, dtype="<f4").tobytes())
    elif damage == "truncated":
        with open(side, "r+b") as f:
            f.truncate(os.path.getsize(side) // 2)
    else:  # the file of another store copied beside this one
        other = tmp_path / "other.sqlite"
        _fill(other)
        with SqliteBackend(other, embedding_model="test", dim=DIM) as o:
            o.query(_queries()[0])
        shutil.copy(partitions_path(str(other)), side)  # type: ignore[arg-type]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert open_base(side, b._vector_file().tag, DIM, b._conn) is None
        assert _results(b) == want
        assert b._parts.base_builds == 1 and b._parts.mapped_loads == len(KINDS) * USERS


def _header(side: str) -> dict:
    import json
    import struct

    raw = Path(side).read_bytes()[: shared_base.HEADER]
    (n,) = struct.unpack("<I", raw[8:12])
    return json.loads(raw[12 : 12 + n])


def test_two_builders_at_once_leave_one_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    want = _reference(path)
    got: list[object] = []
    start = threading.Barrier(2)

    def run() -> None:
        with SqliteBackend(path, embedding_model="test", dim=DIM) as b:  # its own descriptors and lock
            start.wait()
            got.append((_results(b), b._parts.base_builds))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r for r, _ in got] == [want, want]  # type: ignore[misc]
    assert sum(n for _, n in got) == 1  # type: ignore[misc]  # the second found the first one's file
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_scrub_removes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    _fill(path)
    side = partitions_path(str(path))
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        _results(b)
        assert os.path.exists(side)  # type: ignore[arg-type]
        shutil.copy(side, f"{side}.123.456.tmp")  # a builder killed while writing its copy
        assert b.delete(namespace=("facts", "u1")) == PER_NS
        b.scrub()
        assert not os.path.exists(side) and not os.path.exists(f"{side}.123.456.tmp")
        got = _results(b)
    assert got == _reference(path)
    assert not any(h[0] in {f"m{i}" for i in range(1, 240, 2) if (i // 2) % USERS == 1} for r in got for h in r)


def test_two_stage_projections_are_read_from_the_file_and_copied_on_write(tmp_path: Path, monkeypatch) -> None:
    """With a two-stage basis, the file holds each row's projection: a large search reads them
    (no private projection), and stays exact (the same hits and scores as private ones)."""
    from memory.backends import vector_index as vi

    global DIM
    monkeypatch.setattr(vi, "TWO_STAGE_MIN_ROWS", 1)
    monkeypatch.setattr(sys.modules[__name__], "DIM", 64)
    rng = np.random.default_rng(3)
    n = USERS * len(KINDS) * PER_NS
    low = rng.standard_normal((n, 4)) @ rng.standard_normal((4, DIM)) + 0.05 * rng.standard_normal((n, DIM))
    vecs = (low / np.linalg.norm(low, axis=1, keepdims=True)).astype(np.float32)
    path = tmp_path / "p.sqlite"
    recs = [MemoryRecord(id=f"m{i}", namespace=(KINDS[i % 2], f"u{(i // 2) % USERS}"), content=_text(i))
            for i in range(n)]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(recs, vecs)
    want = _reference(path)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        assert _results(b) == want
        assert b._index.last_plan.startswith("two-stage") and b._parts.base is not None
        block = b._index._blocks[("facts", "u1")]
        assert block.proj is not None and not block.proj.flags.writeable  # the file's, not computed here
        b.upsert([MemoryRecord(id="m3", namespace=("facts", "u1"), content="tea changed")], vecs[7:8])
        assert b.delete(ids=["m5"]) == 1
        got = _results(b)
    assert got == _reference(path)
