"""The file side of :class:`~memory.backends.sqlite.SqliteBackend`: transactions, migrations,
the model check, and keeping the in-memory indexes in step with the file.

Several processes may share a file. Every write transaction bumps a sequence number stored in
the file and stamps the rows it touched (deletions go to a log); before each operation a backend
compares the file's sequence with the one its indexes have applied and loads only the
difference (:meth:`SqliteFileMixin._sync`).
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np

from memory.backends.keyword_index import KeywordIndex
from memory.backends.sqlite_partitions import PartitionState
from memory.backends.sqlite_schema import COLS, MIGRATIONS, apply_migrations, check_not_newer, row_to_record
from memory.backends.vector_index import VectorIndex
from memory.errors import (
    BackendUnavailable,
    MemoryBackendError,
    SchemaMismatch,
    StoreCorrupt,
    StoreForked,
    StoreFull,
    StoreReadOnly,
)
from memory.namespace import Namespace, ns_key
from memory.records import INDEX_TEXT_VERSION, MemoryRecord, index_text
from memory.text import fts_document

T = TypeVar("T")
REINDEX_BATCH = 5_000  # rows re-tokenised per step of the one-time keyword re-index
log = logging.getLogger(__name__)

# Primary result codes (sqlite3 exposes the extended code; the low byte is the primary one).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR = 5, 6, 8, 10
_SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 11, 13, 14, 26


def _code(exc: sqlite3.Error) -> int:
    return int(getattr(exc, "sqlite_errorcode", -1) or -1) & 0xFF


def _is_busy(exc: sqlite3.Error) -> bool:
    return _code(exc) in (_SQLITE_BUSY, _SQLITE_LOCKED) or "locked" in str(exc) or "busy" in str(exc)


def _not_writable(path: str) -> bool:
    p = Path(path).expanduser()
    return (p.exists() and not os.access(p, os.W_OK)) or not os.access(p.parent, os.W_OK)


def translate_sqlite_error(exc: sqlite3.Error, path: str) -> MemoryBackendError:
    """The error of our tree for a sqlite3 error, with the real SQLite message and what to do."""
    msg, code = str(exc), _code(exc)
    if code == _SQLITE_FULL or "disk is full" in msg:
        return StoreFull(f"SQLite store {path!r}: {msg}. The write was rolled back and nothing stored was "
                         "changed; free disk space (or raise the size limit) and retry.")
    if code == _SQLITE_READONLY or "readonly" in msg:
        return StoreReadOnly(f"SQLite store {path!r} cannot be written: {msg}. Check the permissions of the "
                             "file and its directory (and the -wal/-shm files), or open a writable copy.")
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in msg or "not a database" in msg:
        return StoreCorrupt(f"SQLite store {path!r} is damaged: {msg}. Nothing was written; restore the file "
                            "from a backup (or move it aside and start a new store).")
    if _is_busy(exc) or code in (_SQLITE_CANTOPEN, _SQLITE_IOERR) or "unable to open" in msg \
            or "disk I/O" in msg:
        return BackendUnavailable(f"SQLite store {path!r} is unavailable: {msg}")
    return MemoryBackendError(f"SQLite error on {path!r}: {msg}")


class SqliteFileMixin:
    """Transactions and index synchronisation; ``SqliteBackend.__init__`` sets the state below."""

    path: str
    embedding_model: str
    dim: int
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _closed: bool
    _index: VectorIndex
    _kw: KeywordIndex
    _records: OrderedDict[int, MemoryRecord]
    _applied_seq: int
    _parts: PartitionState  # and _changed / _partition_loaded / _basis_now from PartitionMixin

    # Set once a statement found the file damaged: later writes are refused. Partitions load
    # lazily, so opening no longer reads every page and a damaged file can open; a write after
    # the damage was seen could only spread it.
    _corrupt: str | None = None

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            err = translate_sqlite_error(exc, self.path)
            if isinstance(err, StoreCorrupt):
                self._corrupt = str(exc)
            raise err from exc

    @contextmanager
    def _translate_open(self) -> Iterator[None]:
        """Like _translate, but a file we cannot write (read-only mount or permissions: SQLite
        then says "unable to open" for the -shm/-wal files) is reported as StoreReadOnly."""
        try:
            with self._translate():
                yield
        except BackendUnavailable as exc:
            if self.path != ":memory:" and _not_writable(self.path):
                raise StoreReadOnly(
                    f"SQLite store {self.path!r} is read-only (file, directory or mount): {exc.__cause__}. "
                    "The store needs write access to the file and its directory (for the -wal/-shm "
                    "files); copy it somewhere writable to read it."
                ) from exc
            raise

    _pid: int  # the process that opened the connection (SqliteBackend.__init__, sqlite_fork)

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryBackendError("this backend is closed; open a new one")
        if self._pid != os.getpid():
            # Checked before every use of the connection: a SQLite connection carried across
            # fork() shares the parent's file handle and locks, the way files get corrupted.
            raise StoreForked(
                f"the store {self.path!r} was opened in process {self._pid} and this is process "
                f"{os.getpid()}, forked from it; a SQLite connection must not cross a fork, so nothing "
                "was read or written. Open the store again in this process, or call "
                "memory.prefork(service) in the parent before forking (each worker then reopens it)."
            )

    # How long a write waits for the file's write lock before BackendUnavailable. Set per
    # backend from ``timeout_s``.
    _write_timeout_s: float = 10.0
    # Longest sleep between two tries of the write lock. SQLite's own busy handler sleeps up to
    # 100 ms between tries, so a waiter kept missing the short gaps between other processes'
    # transactions (p99 ~90 ms, waits over 1 s; 15.9 s with searchers): short jittered sleeps
    # give every waiter a fair chance at each gap.
    BUSY_SLEEP_MAX_S = 0.004

    def _begin_immediate(self) -> None:
        """``BEGIN IMMEDIATE`` with a bounded, jittered retry instead of SQLite's busy handler
        (which stays in place for every other statement)."""
        conn = self._conn
        deadline = time.monotonic() + self._write_timeout_s
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            sleep = 0.0005
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or time.monotonic() >= deadline:
                        raise
                time.sleep(random.uniform(0.0, sleep))
                sleep = min(sleep * 2, self.BUSY_SLEEP_MAX_S)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self._write_timeout_s * 1000)}")

    def _write(self, fn: Callable[[sqlite3.Connection, int], T],
               df_delta: Callable[[], dict[str, int] | None] | None = None) -> T:
        """Run ``fn(conn, seq)`` in one IMMEDIATE transaction with a fresh sequence number.

        ``df_delta()``, called after the commit, says by how much ``fn`` moved each keyword
        term's document frequency (None: unknown); the cached ones are updated instead of
        dropped (:meth:`PartitionMixin._changed`). Exact: the ``_sync`` inside the transaction
        applied every other writer's change first, and none can land before our commit.
        """
        with self._lock, self._translate():
            self._check_open()
            if self._corrupt is not None:
                raise StoreCorrupt(f"SQLite store {self.path!r} is damaged ({self._corrupt}); writes are refused "
                                   "so the damage cannot spread. Restore the file from a backup (or move it aside "
                                   "and start a new store).")
            # Catch up with other writers before taking the write lock (a read: WAL readers do
            # not block writers), so the catch-up inside the lock is only the last few rows.
            self._sync()
            self._begin_immediate()
            try:
                self._sync()  # catch up with other writers before applying ours
                self._conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'seq'")
                seq = int(self._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])
                result = fn(self._conn, seq)
                self._conn.execute("COMMIT")
            except BaseException:
                self._abort()
                raise
            self._applied_seq = seq
            self._changed(df_delta() if df_delta is not None else None)
            return result

    def _abort(self) -> None:
        """Roll back a failed write and make the indexes equal to the rows again.

        Never raises: the caller re-raises the statement's own error. SQLite has already rolled
        the transaction back after some errors (disk full, I/O), and a second ROLLBACK used to
        raise "cannot rollback - no transaction is active", which hid the real error and skipped
        the index rebuild (a phantom entry after a failed insert; a failed delete made a stored
        memory unfindable).
        """
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error as exc:  # the connection is unusable; the next call reports it
            log.warning("rollback of a failed write on %r failed: %s", self.path, exc)
        # Our indexes may hold changes that were rolled back: drop them and reload from the
        # file. If even the reload fails, _applied_seq is 0, so the next operation reloads.
        self._reset_indexes()
        try:
            self._sync()
        except sqlite3.Error as exc:
            self._reset_indexes()
            log.warning("index reload after a failed write on %r failed: %s", self.path, exc)

    # ------------------------------------------------------------------ compare-and-write
    # The write policy reads a namespace's neighbours, judges them, then inserts. Two processes
    # remembering the same text at once both read "no neighbour" and both inserted (4 processes
    # x the same 100 texts stored 326 rows). The insert is therefore made conditional: it only
    # happens if no row of the namespace changed since the read, checked inside the write
    # transaction; otherwise the rows written meanwhile go back to the caller to be judged.
    CHANGED_MAX = 64

    def change_marker(self) -> int:
        """The file's write sequence number now: pass it to :meth:`upsert_if_unchanged`."""
        with self._lock, self._translate():
            self._check_open()
            return int(self._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])

    def upsert_if_unchanged(self, records: Sequence[MemoryRecord], vectors: np.ndarray, *,
                            namespace: Namespace, since: int) -> tuple[bool, list[MemoryRecord], int]:
        """Upsert ``records`` unless a row of exactly ``namespace`` changed after ``since``.

        Returns:
            (written, changed, marker): when not written, ``changed`` holds the rows of the
            namespace written since ``since`` (at most CHANGED_MAX, newest first; unexpired) and
            ``marker`` is the sequence they were read at, to pass to the next try.
        """
        return self._upsert(records, vectors, (namespace, since))  # type: ignore[attr-defined,no-any-return]

    def _changed_since(self, conn: sqlite3.Connection, ns: Namespace, since: int) -> list[MemoryRecord]:
        # `+ns` keeps SQLite off the namespace index: it chose memories_ns (equality beats a range
        # without statistics), read every row of the namespace and sorted them, ~3.7 ms a write at
        # 10k memories a namespace. `since` is the marker this write read moments ago, so the seq
        # index finds only the few rows written since (usually none). Same rows, same order.
        rows = conn.execute(
            f"SELECT {COLS} FROM memories WHERE +ns = ? AND seq > ? AND (expires_at IS NULL OR expires_at > ?)"
            " ORDER BY seq DESC LIMIT ?", (ns_key(ns), since, time.time(), self.CHANGED_MAX)).fetchall()
        return [row_to_record(r) for r in rows]

    def _migrate(self) -> None:
        with self._translate():
            apply_migrations(self._conn, "schema_migrations", MIGRATIONS)

    def _check_model(self) -> None:
        with self._translate():
            rows = dict(self._conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')"
            ).fetchall())
            if not rows:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('embedding_model', ?), ('embedding_dim', ?)",
                    (self.embedding_model, str(self.dim)),
                )
                self._conn.execute("COMMIT")
                rows = dict(self._conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')"
                ).fetchall())
        if rows.get("embedding_model") != self.embedding_model or int(rows.get("embedding_dim", -1)) != self.dim:
            raise SchemaMismatch(
                f"the store {self.path!r} was built with embedding model {rows.get('embedding_model')!r} "
                f"(dim {rows.get('embedding_dim')}), but it was opened with {self.embedding_model!r} "
                f"(dim {self.dim}). Open it with the same model (MEMORY_EMBEDDING__MODEL), or use "
                "another MEMORY_PATH for the new model."
            )

    def _index_version(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'index_text_version'").fetchone()
        return None if row is None else int(row[0])

    def _reindex_if_stale(self) -> None:
        """Re-tokenize every row once when the file was indexed under another INDEX_TEXT_VERSION.

        Rows are re-stamped with the new sequence number, so other processes reload their terms.
        """
        with self._translate():
            found = self._index_version(self._conn)
            if found == INDEX_TEXT_VERSION:
                return
        check_not_newer("keyword index", found or 0, INDEX_TEXT_VERSION)  # never re-tokenise down

        def do(conn: sqlite3.Connection, seq: int) -> None:
            if self._index_version(conn) == INDEX_TEXT_VERSION:  # another process just did it
                return
            # In batches, in the same transaction: reading every row at once raised the process's peak
            # by ~130 MB for a 100k-row store (so ~1.3 GB at 1M); in batches the step adds ~26 MB.
            last = -1
            while True:
                rows = conn.execute(f"SELECT {COLS} FROM memories WHERE rid > ? ORDER BY rid LIMIT ?",
                                    (last, REINDEX_BATCH)).fetchall()
                if not rows:
                    break
                conn.executemany("UPDATE memories_fts SET terms = ? WHERE rowid = ?",
                                 [(fts_document(index_text(row_to_record(row))), row[0]) for row in rows])
                last = rows[-1][0]
            conn.execute("UPDATE memories SET seq = ?", (seq,))
            conn.execute("INSERT INTO meta (key, value) VALUES ('index_text_version', ?)"
                         " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(INDEX_TEXT_VERSION),))

        self._write(do)
        self._reset_indexes()  # the write above synced the old terms into our indexes

    def _sync(self) -> None:
        """Bring the loaded partitions up to the file's sequence number.

        Only the catalogue and loaded partitions are kept in step: a change to a namespace no
        partition holds costs one catalogue entry, and nothing at all before the catalogue
        is built (see :mod:`memory.backends.sqlite_partitions`).
        """
        db_seq = int(self._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])
        if db_seq == self._applied_seq:
            return
        self._changed()
        if db_seq < self._applied_seq:  # file replaced or restored from backup: start over
            self._reset_indexes()
        elif self._applied_seq:
            floor = self._conn.execute("SELECT value FROM meta WHERE key = 'deletions_floor'").fetchone()
            if floor is not None and self._applied_seq < int(floor[0]):
                # Deletions we have not applied were pruned from the log: rebuild from the rows.
                self._reset_indexes()
        cat = self._parts.catalogue
        if cat is None:  # nothing loaded, so nothing to bring up to date
            self._applied_seq = db_seq
            return
        for (rid,) in self._conn.execute("SELECT rid FROM deletions WHERE seq > ?", (self._applied_seq,)):
            cat.remove(rid)
            self._index.remove(rid)
            self._kw.remove(rid)
            self._records.pop(rid, None)
        reload: dict[int, Namespace] = {}
        for rid, ns in self._conn.execute("SELECT rid, ns FROM memories WHERE seq > ?", (self._applied_seq,)):
            namespace = tuple(ns.split("/"))
            self._records.pop(rid, None)
            cat.set(rid, namespace)
            if self._partition_loaded(namespace):
                reload[rid] = namespace
            else:  # moved out of a loaded partition, or in one we do not hold
                self._index.remove(rid)
                self._kw.remove(rid)
        rids = list(reload)
        for i in range(0, len(rids), 500):
            chunk = rids[i : i + 500]
            for rid, blob, terms in self._conn.execute(
                "SELECT m.rid, m.vector, f.terms FROM memories AS m LEFT JOIN memories_fts AS f"
                f" ON f.rowid = m.rid WHERE m.rid IN ({','.join('?' * len(chunk))})", chunk
            ):
                self._index.add(rid, reload[rid], np.frombuffer(blob, dtype="<f4"))
                self._index_terms(rid, reload[rid], (terms or "").split())
        self._applied_seq = db_seq

    # The deletion log tells other processes which rows to drop from their indexes. It is cut
    # back to its newest DELETION_LOG_KEEP entries once it holds twice that many; a process that
    # was behind the cut (meta 'deletions_floor') rebuilds its indexes from the rows instead.
    DELETION_LOG_KEEP = 50_000

    def _prune_deletions(self, conn: sqlite3.Connection) -> None:
        (n,) = conn.execute("SELECT COUNT(*) FROM deletions").fetchone()
        if n <= 2 * self.DELETION_LOG_KEEP:
            return
        (cut,) = conn.execute("SELECT seq FROM deletions ORDER BY seq DESC LIMIT 1 OFFSET ?",
                              (self.DELETION_LOG_KEEP,)).fetchone()
        conn.execute("DELETE FROM deletions WHERE seq <= ?", (cut,))
        conn.execute("INSERT INTO meta (key, value) VALUES ('deletions_floor', ?) ON CONFLICT (key)"
                     " DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))", (cut,))

    def _reset_indexes(self) -> None:
        """Drop everything loaded; partitions load again on demand (the basis is kept)."""
        self._index = VectorIndex(self.dim)
        self._index.basis_source = self._basis_now
        self._kw = KeywordIndex()
        self._records.clear()
        self._parts.catalogue = None
        self._parts.loaded.clear()
        self._changed()
        self._applied_seq = 0

    def _index_terms(self, rid: int, ns: Namespace, terms: list[str]) -> None:
        # FTS5's document length counts the namespace column's tokens too (one per ancestor).
        self._kw.add(rid, ns, terms, doc_len=len(terms) + len(ns))
