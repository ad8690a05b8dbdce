"""The vector file's catch-up reads only the rows written since it was synced (memory.backends.vector_file).

It used to walk the whole table in rid order testing each row's ``seq``: after a 20k-row import
into a 1M-row store that read the whole 4.8 GB table. These tests check that the rows copied are
exactly SQLite's (appends, scattered updates, deletes) and that the work does not grow with the
rows that did not change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memory.backends.sqlite import SqliteBackend
from memory.backends.vector_file import HEADER, sidecar_path
from memory.records import MemoryRecord

DIM = 8
OLD = 4000


def _vecs(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _recs(ids: list[str]) -> list[MemoryRecord]:
    return [MemoryRecord(id=i, namespace=("facts", f"u{k % 7}"), content=f"note {i}") for k, i in enumerate(ids)]


def _file_matches_sqlite(b: SqliteBackend) -> None:
    raw = Path(sidecar_path(b.path)).read_bytes()  # type: ignore[arg-type]
    rows = b._conn.execute("SELECT rid, vector FROM memories").fetchall()
    assert rows
    row = b.dim * 4
    for rid, blob in rows:
        assert raw[HEADER + rid * row : HEADER + (rid + 1) * row] == blob, rid


def _vm_steps(b: SqliteBackend) -> int:
    """SQLite virtual-machine steps (in units of 100) spent by one flush_vectors."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    b._conn.set_progress_handler(tick, 100)
    try:
        b.flush_vectors()
    finally:
        b._conn.set_progress_handler(None, 100)
    return steps[0]


def test_catch_up_copies_exactly_the_changed_rows_and_does_not_walk_the_table(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    old_ids = [f"m{i}" for i in range(OLD)]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(_recs(old_ids), _vecs(OLD, 1))
        b.flush_vectors()
        _file_matches_sqlite(b)
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        vf = b._vector_file()
        # An append (one dense run of new rids: read as a range).
        b.upsert(_recs([f"new{i}" for i in range(40)]), _vecs(40, 2))
        before = vf.rows_copied
        steps_append = _vm_steps(b)
        assert vf.rows_copied - before == 40
        _file_matches_sqlite(b)
        # Scattered updates of old rows, deletes and a few appends (read by rid).
        changed = [old_ids[i] for i in (3, 1500, 2999, 3998)]
        b.upsert(_recs(changed) + _recs([f"late{i}" for i in range(5)]), _vecs(9, 3))
        b.delete([old_ids[10], old_ids[2000]])
        before = vf.rows_copied
        steps_mixed = _vm_steps(b)
        assert vf.rows_copied - before == 9
        _file_matches_sqlite(b)
        assert vf.rebuilds == 0
    # Walking the 4,000 rows (the query this replaced) took ~125 of these units per catch-up;
    # reading only the changed rows, under 10.
    assert steps_append + steps_mixed < OLD // 40, (steps_append, steps_mixed)


def test_a_rebuild_still_copies_every_row(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.upsert(_recs([f"m{i}" for i in range(300)]), _vecs(300, 4))
        b.delete(["m7"])
        b.flush_vectors()
    Path(sidecar_path(str(path))).unlink()  # type: ignore[arg-type]
    with SqliteBackend(path, embedding_model="test", dim=DIM) as b:
        b.flush_vectors()
        assert b._vector_file().rows_copied == 299
        _file_matches_sqlite(b)


def test_a_bulk_import_fills_the_vector_file_batch_by_batch(tmp_path: Path, monkeypatch) -> None:
    """write_batches catches the vector file up after each batch but the last while workers embed
    (the end of the import then copies one batch), and the file equals SQLite afterwards."""
    from concurrent.futures import ThreadPoolExecutor

    from memory import bulk
    from memory.embeddings import USE_DIM, USE_MODEL, get_embedder
    from memory.records import utcnow
    from memory.service import MemoryService, NewMemory
    from memory.settings import EmbeddingSettings, MemorySettings

    calls: list[tuple[bool, int]] = []
    real = SqliteBackend.flush_vectors

    def spy(self: SqliteBackend, *, basis: bool = True) -> None:
        before = self._vector_file().rows_copied
        real(self, basis=basis)
        calls.append((basis, self._vector_file().rows_copied - before))

    monkeypatch.setattr(SqliteBackend, "flush_vectors", spy)
    settings = MemorySettings(path=str(tmp_path / "s.sqlite"), embedding=EmbeddingSettings(model=USE_MODEL))
    backend = SqliteBackend(settings.path, embedding_model=USE_MODEL, dim=USE_DIM)
    svc = MemoryService(backend, get_embedder(USE_MODEL), settings)
    monkeypatch.setattr(bulk, "_worker_svc", None)  # restored after the test
    bulk._worker_init(USE_MODEL, settings.context_weight)  # a worker's state, here for a thread
    now = utcnow()
    records = [svc.build_record(NewMemory(f"note {i} about tea", f"facts/u{i % 3}"), now) for i in range(120)]
    try:
        with bulk.EmbedWorkers(ThreadPoolExecutor(max_workers=1), 1) as pool:
            assert bulk.write_batches(svc, records, batch_size=40, pool=pool) == 3
        assert calls == [(False, 40), (False, 40), (True, 40)]
        _file_matches_sqlite(backend)
    finally:
        backend.close()
