"""The embedded default backend: one SQLite file is the source of truth.

* Rows, vectors (float32 blobs) and an FTS5 keyword index live in one file (WAL mode), or in
  RAM with ``":memory:"``. Schema changes are numbered, append-only migrations.
* Vectors are served from an in-memory exact index (:mod:`memory.backends.vector_index`), and
  keyword scores from an in-memory BM25 index (:mod:`memory.backends.keyword_index`) that mirrors
  the FTS5 table and scores like its ``bm25()``; FTS5 keeps the terms durable.
* Several processes may share a file. Every write transaction bumps a sequence number stored
  in the file and stamps the rows it touched (deletions go to a log); before each operation a
  backend compares the file's sequence with the one its index has applied and loads only the
  difference. A write by one process is therefore visible to the next search of another.
* Keywords: FTS5 cannot segment Chinese, so :mod:`memory.text` tokenizes and the FTS column
  stores space-separated terms. Namespace prefixes are indexed as hashed terms in a second
  column, so FTS5 can count or delete a namespace's keyword entries without the rows.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory.backend import AsyncMixin, check_upsert
from memory.backends.keyword_index import KeywordIndex
from memory.backends.sqlite_filters import FilterSqlMixin
from memory.backends.sqlite_fork import ForkMixin, abandon
from memory.backends.sqlite_partitions import PartitionMixin, PartitionState, df_delta
from memory.backends.sqlite_query import QueryMixin
from memory.backends.sqlite_schema import (
    COLS,
    MIGRATIONS,
    apply_migrations,
    epoch,
    ns_clause,
    ns_term,
    ns_terms,
    check_store_path,
    refuse_foreign,
    row_to_record,
)
from memory.backends.sqlite_sync import SqliteFileMixin
from memory.backends.vector_file import VectorFile
from memory.backends.vector_index import VectorIndex
from memory.errors import BackendUnavailable, InvalidInput
from memory.filters import matches, validate_filter
from memory.namespace import Namespace, ns_key
from memory.records import MemoryRecord, index_text, utcnow
from memory.text import fts_document


class SqliteBackend(QueryMixin, PartitionMixin, SqliteFileMixin, FilterSqlMixin, ForkMixin, AsyncMixin):
    """InMemory+SQLite backend.

    Example:
        >>> import numpy as np
        >>> from memory.backends.sqlite import SqliteBackend
        >>> from memory.records import MemoryRecord
        >>> b = SqliteBackend(":memory:", embedding_model="demo", dim=2)
        >>> b.upsert([MemoryRecord(id="m1", namespace="user_profile/u1", content="likes tea")],
        ...          np.array([[1.0, 0.0]], dtype=np.float32))
        >>> b.get(["m1"])[0].content
        'likes tea'
        >>> b.close()
    """

    supports_keyword = True

    def __init__(self, path: str | Path, *, embedding_model: str, dim: int, timeout_s: float = 10.0,
                 memory_budget_mb: float = 1024.0):
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        if not memory_budget_mb > 0:
            raise InvalidInput(f"memory_budget_mb must be > 0, got {memory_budget_mb}")
        self.path = str(path)
        self.embedding_model = embedding_model
        self.dim = dim
        self._lock = threading.RLock()
        self._closed = False
        # Partitions (per namespace) load on first use: see memory.backends.sqlite_partitions.
        self._parts = PartitionState(dim, int(memory_budget_mb * 2**20))
        self._vf: VectorFile | None = None
        self._index = VectorIndex(dim)
        self._index.basis_source = self._basis_now
        self._kw = KeywordIndex()
        self._records: OrderedDict[int, MemoryRecord] = OrderedDict()
        self._applied_seq = 0
        self._write_timeout_s = timeout_s
        if self.path != ":memory:":
            refuse_foreign(self.path)  # before the connection switches the file to WAL
            check_store_path(self.path)
        self._pid = os.getpid()  # the process this connection belongs to (see _check_open)
        self._conn = self._connect()
        try:
            # Translated: a damaged or read-only file fails here with a StoreCorrupt/StoreReadOnly.
            with self._translate_open():
                self._migrate()
                self._check_model()
                self._reindex_if_stale()
                self._sync()
        except BaseException:
            self._conn.close()
            raise


    def _connect(self) -> sqlite3.Connection:
        """A new connection with this backend's settings (also each forked worker's own one,
        see :mod:`memory.backends.sqlite_fork`)."""
        try:
            conn = sqlite3.connect(self.path, timeout=self._write_timeout_s, check_same_thread=False,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open SQLite file {self.path!r}: {exc}") from exc
        try:
            with self._translate_open():
                conn.execute(f"PRAGMA busy_timeout = {int(self._write_timeout_s * 1000)}")
                if self.path != ":memory:":
                    conn.execute("PRAGMA journal_mode = WAL")
                    conn.execute("PRAGMA synchronous = NORMAL")
                # Deleted rows are overwritten with zeros, not just unlinked (forget-user, hard delete).
                conn.execute("PRAGMA secure_delete = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    # ------------------------------------------------------------------ primitives
    def upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        self._upsert(records, vectors, None)

    def _upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray,
                guard: tuple[Namespace, int] | None) -> tuple[bool, list[MemoryRecord], int]:
        """Upsert; with ``guard=(ns, since)`` only if no row of ``ns`` changed after sequence
        ``since`` (see :meth:`SqliteFileMixin.upsert_if_unchanged`)."""
        # Validated before anything is written (a queued write must be one the primary accepts).
        records, vecs = check_upsert(records, vectors, dim=self.dim, model=self.embedding_model)
        if not records:
            return True, [], self._applied_seq

        # Tokenized and encoded before the write lock is taken: other processes wait on that
        # lock, so only SQL runs while it is held.
        terms_of = [fts_document(index_text(r)) for r in records]
        nsterms_of = [ns_terms(r.namespace) for r in records]

        # Keyword documents of the rows replaced and inserted (filled by `do`): the only document
        # frequencies this write changes, and by how much (PartitionMixin._changed).
        gone: list[str] = []
        fts_rows: list[tuple[int, str, str]] = []

        def do(conn: sqlite3.Connection, seq: int) -> tuple[bool, list[MemoryRecord], int]:
            gone.clear()  # `do` runs once per transaction; a retry starts again
            fts_rows.clear()
            if guard is not None:
                changed = self._changed_since(conn, guard[0], guard[1])
                if changed:
                    return False, changed, seq
            # AUTOINCREMENT: a row inserted now gets a rid above every rid ever used, so only a
            # rid at or below this one (an update of an existing memory) can have a keyword row
            # to replace. Skipping the DELETE for new rows, and inserting the keyword rows in one
            # executemany, took ~0.3 s of CPU off a 20k-memory import (same rows stored).
            top = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'memories'").fetchone()
            top_rid = int(top[0]) if top is not None else 0
            blobs = vecs.astype("<f4", copy=False)  # the stored layout; no copy per row
            for r, v, blob, terms, nsterms in zip(records, vecs, blobs, terms_of, nsterms_of, strict=True):
                rid = conn.execute(
                    """INSERT INTO memories (id, ns, content, metadata, type, created_at, updated_at,
                                             expires_at, vector, seq)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT (id) DO UPDATE SET ns = excluded.ns, content = excluded.content,
                         metadata = excluded.metadata, type = excluded.type,
                         created_at = excluded.created_at, updated_at = excluded.updated_at,
                         expires_at = excluded.expires_at, vector = excluded.vector, seq = excluded.seq
                       RETURNING rid""",
                    (
                        r.id, ns_key(r.namespace), r.content, r.metadata.model_dump_json(),
                        r.metadata.type, epoch(r.created_at), epoch(r.updated_at), epoch(r.expires_at),
                        blob.tobytes(), seq,
                    ),
                ).fetchone()[0]
                if rid <= top_rid:
                    old = conn.execute("SELECT terms FROM memories_fts WHERE rowid = ?", (rid,)).fetchone()
                    if old is not None:
                        gone.append(old[0] or "")
                    conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rid,))
                fts_rows.append((rid, nsterms, terms))
                self._records.pop(rid, None)
                cat = self._parts.catalogue
                if cat is None:
                    continue  # nothing loaded yet: the catalogue is built from the file later
                cat.set(rid, r.namespace)
                if self._partition_loaded(r.namespace):
                    self._index.add(rid, r.namespace, v)
                    self._index_terms(rid, r.namespace, terms.split())
                else:  # moved out of a loaded partition (or in one not loaded): drop it here
                    self._index.remove(rid)
                    self._kw.remove(rid)
            conn.executemany("INSERT INTO memories_fts (rowid, nsk, terms) VALUES (?, ?, ?)", fts_rows)
            return True, [], seq

        return self._write(do, lambda: df_delta([t for _, _, t in fts_rows], gone))

    def get(self, ids: Sequence[str]) -> list[MemoryRecord]:
        ids = list(ids)
        if not ids:
            return []
        now = utcnow().timestamp()
        with self._lock, self._translate():
            self._check_open()
            found: dict[str, MemoryRecord] = {}
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                for row in self._conn.execute(
                    f"SELECT {COLS} FROM memories WHERE id IN ({','.join('?' * len(chunk))})"
                    " AND (expires_at IS NULL OR expires_at > ?)",
                    (*chunk, now),
                ):
                    rec = row_to_record(row)
                    found[rec.id] = rec
        return [found[i] for i in ids if i in found]

    def get_vectors(self, ids: Sequence[str]) -> np.ndarray:
        """Stored vectors of ``ids`` (expired or not), row i for ids[i]; for migrations.

        Raises:
            NotFound: some id is not stored.
        """
        from memory.errors import NotFound

        ids = list(ids)
        found: dict[str, np.ndarray] = {}
        with self._lock, self._translate():
            self._check_open()
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                for id_, blob in self._conn.execute(
                    f"SELECT id, vector FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk
                ):
                    found[id_] = np.frombuffer(blob, dtype="<f4")
        missing = [x for x in ids if x not in found]
        if missing:
            raise NotFound(f"no stored vector for ids {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for row, x in enumerate(ids):
            out[row] = found[x]
        return out

    def _select_rids(self, namespace: Namespace | None, flt: dict[str, Any] | None,
                     include_expired: bool) -> list[int]:
        where, params = ns_clause(namespace)
        if not include_expired:
            where += " AND (expires_at IS NULL OR expires_at > ?)"
            params.append(utcnow().timestamp())
        if not flt:
            return [r for (r,) in self._conn.execute(f"SELECT rid FROM memories WHERE {where}", params)]
        return [
            row[0]
            for row in self._conn.execute(f"SELECT {COLS} FROM memories WHERE {where}", params)
            if matches(row_to_record(row), flt)
        ]

    # A delete of at most this many rows reads their keyword terms to update the cached document
    # frequencies (the write policy evicts or supersedes one or two rows per write); a larger one
    # drops them all rather than read every row's terms.
    DF_DELTA_MAX_ROWS = 500

    def delete(self, ids: Sequence[str] | None = None, *, namespace: Namespace | None = None,
               filter: dict[str, Any] | None = None, include_expired: bool = True) -> int:
        flt = validate_filter(filter)
        if ids is None and namespace is None and not flt:
            raise InvalidInput("delete needs ids, a namespace or a filter; refusing to delete everything")

        # Keyword documents of the rows deleted (filled by `do`; None: too many to read, every
        # cached document frequency is dropped instead, see PartitionMixin._changed).
        gone: list[str] | None = []

        def do(conn: sqlite3.Connection, seq: int) -> int:
            nonlocal gone
            if ids is not None:
                id_list = list(ids)
                rids = []
                for i in range(0, len(id_list), 500):
                    chunk = id_list[i : i + 500]
                    rids += [r for (r,) in conn.execute(
                        f"SELECT rid FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk)]
            else:
                rids = self._select_rids(namespace, flt, include_expired)
            gone = [] if len(rids) <= self.DF_DELTA_MAX_ROWS else None
            for i in range(0, len(rids), 500):
                chunk = rids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                if gone is not None:
                    gone.extend(t or "" for (t,) in conn.execute(
                        f"SELECT terms FROM memories_fts WHERE rowid IN ({marks})", chunk))
                conn.execute(f"DELETE FROM memories WHERE rid IN ({marks})", chunk)
                conn.execute(f"DELETE FROM memories_fts WHERE rowid IN ({marks})", chunk)
                conn.executemany("INSERT INTO deletions (seq, rid) VALUES (?, ?)", [(seq, r) for r in chunk])
            cat = self._parts.catalogue
            for r in rids:
                if cat is not None:
                    cat.remove(r)
                self._index.remove(r)
                self._kw.remove(r)
                self._records.pop(r, None)
            if rids:
                self._prune_deletions(conn)
            return len(rids)

        return self._write(do, lambda: None if gone is None else df_delta([], gone))

    def scroll(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
               limit: int = 100, offset: int = 0, include_expired: bool = False) -> list[MemoryRecord]:
        flt = validate_filter(filter)
        if limit < 0 or offset < 0:
            raise InvalidInput("limit and offset must be >= 0")
        where, params = ns_clause(namespace)
        if not include_expired:
            where += " AND (expires_at IS NULL OR expires_at > ?)"
            params.append(utcnow().timestamp())
        with self._lock, self._translate():
            self._check_open()
            sql = f"SELECT {COLS} FROM memories WHERE {where} ORDER BY updated_at DESC, rid DESC"
            if not flt:
                rows = self._conn.execute(sql + " LIMIT ? OFFSET ?", (*params, limit, offset))
                return [row_to_record(r) for r in rows]
            out: list[MemoryRecord] = []
            skipped = 0
            for row in self._conn.execute(sql, params):
                rec = row_to_record(row)
                if not matches(rec, flt):
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                out.append(rec)
                if len(out) >= limit:
                    break
            return out

    def contents(self, namespace: Namespace) -> list[str]:
        """The content of every live memory in exactly ``namespace`` (what ``scroll`` returns there),
        without building records: bulk import's dedupe scan (a 100k store: 2.0 s of CPU as records)."""
        with self._lock, self._translate():
            self._check_open()
            rows = self._conn.execute(
                "SELECT content FROM memories WHERE ns = ? AND (expires_at IS NULL OR expires_at > ?)",
                (ns_key(namespace), utcnow().timestamp()))
            return [r[0] for r in rows]

    def count(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
              include_expired: bool = False) -> int:
        flt = validate_filter(filter)
        with self._lock, self._translate():
            self._check_open()
            if flt:
                return len(self._select_rids(namespace, flt, include_expired))
            where, params = ns_clause(namespace)
            if not include_expired:
                where += " AND (expires_at IS NULL OR expires_at > ?)"
                params.append(utcnow().timestamp())
            return int(self._conn.execute(f"SELECT COUNT(*) FROM memories WHERE {where}", params).fetchone()[0])

    def size_hint(self, namespace: Namespace) -> int:
        """Rows under a namespace prefix, expired ones included: an upper bound of ``count``
        from the in-memory index, without a query."""
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            cat = self._catalogue([namespace])
            return cat.size(cat.matching([namespace]))

    def namespaces(self) -> list[tuple[Namespace, int]]:
        with self._lock, self._translate():
            self._check_open()
            rows = self._conn.execute("SELECT ns, COUNT(*) FROM memories GROUP BY ns ORDER BY ns").fetchall()
        return [(tuple(ns.split("/")), int(n)) for ns, n in rows]

    def residue(self, namespace: Namespace) -> dict[str, int]:
        """What is left of a namespace prefix in rows, vectors and keyword entries (for forget-user)."""
        where, params = ns_clause(namespace)
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            rows = int(self._conn.execute(f"SELECT COUNT(*) FROM memories WHERE {where}", params).fetchone()[0])
            kw = int(self._conn.execute(
                "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH ?", (f"nsk : {ns_term(namespace)}",)
            ).fetchone()[0])
            cat = self._catalogue([namespace])
            vectors = cat.size(cat.matching([namespace]))
        return {"rows": rows, "vectors": vectors, "keyword_entries": kw}

    def scrub(self) -> None:
        """Leave no deleted text in the file: merge the FTS index (a delete only adds tombstones that
        repeat the terms), then checkpoint and truncate the WAL (old frames hold the old pages)."""
        self._write(lambda conn, seq: conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')"))
        if self.path != ":memory:":
            with self._lock, self._translate():
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._drop_shared()  # the mapped partitions file holds deleted rows too

    def stats(self) -> dict[str, Any]:
        """Sizes for ``memctl stats``: rows, keyword rows, indexed vectors, file size."""
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            rows = int(self._conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])
            fts = int(self._conn.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0])
            vectors = len(self._catalogue())
            loaded = len(self._parts.loaded)
        size = 0
        if self.path != ":memory:":
            size = sum(p.stat().st_size for p in Path(self.path).parent.glob(Path(self.path).name + "*"))
        return {
            "backend": "sqlite", "path": self.path, "embedding_model": self.embedding_model,
            "dim": self.dim, "rows": rows, "keyword_rows": fts, "vectors": vectors,
            "file_bytes": size, "loaded_partitions": loaded,
        }

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._pid != os.getpid():
                    # Opened by the process this one was forked from: closing a connection
                    # carried across fork() is a use of it too, so it is left alone.
                    abandon(self._conn)
                    return
                self._conn.close()
                if self._vf is not None:
                    self._vf.close()
                if self._parts.base is not None:
                    # Unmap the partitions file now, not whenever the garbage collector frees
                    # this object: its pages would keep counting in this process.
                    self._index, self._kw = VectorIndex(self.dim), KeywordIndex()
                    self._parts.base = None

    def __enter__(self) -> SqliteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# MIGRATIONS and apply_migrations stay importable from here (memory.policy.audit uses them).
__all__ = ["MIGRATIONS", "SqliteBackend", "apply_migrations"]
