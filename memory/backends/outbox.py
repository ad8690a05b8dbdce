"""The durable outbox of :class:`~memory.backends.resilient.ResilientBackend`: writes the
primary could not take, kept in a small SQLite file (committed before the call returns) and
replayed in order once the primary answers again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np

from memory.backend import MemoryBackend
from memory.errors import BackendUnavailable
from memory.namespace import Namespace, ns_key
from memory.records import MemoryRecord

# The resilient wrapper's logger: operators see outbox and wrapper events in one place.
log = logging.getLogger("memory.resilient")


def _json_default(o: Any) -> Any:
    # Filters may hold datetimes and sets; validate_filter accepts ISO strings and lists back.
    if isinstance(o, datetime | date):
        return o.isoformat()
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    raise TypeError(f"cannot store {type(o).__name__} in the outbox")


def _private_file(path: str) -> None:
    """Create the outbox owner-only (0600) before SQLite opens it: queued ops hold memory text.

    SQLite gives the -wal and -shm files the main file's permissions. An existing outbox of
    ours is tightened too.
    """
    p = Path(path).expanduser()
    if not p.exists():
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
    for f in (p, Path(f"{p}-wal"), Path(f"{p}-shm")):
        try:
            if f.exists() and f.stat().st_mode & 0o077:
                f.chmod(0o600)
        except OSError as exc:  # not ours (e.g. a shared outbox): leave it, say so
            log.warning("cannot make the outbox file %s private: %s", f, exc)


def idempotency_key(records: Sequence[MemoryRecord]) -> str:
    """Key of an upsert's content: namespaces and whitespace/case-normalised texts."""
    h = hashlib.blake2b(digest_size=16)
    for r in sorted(records, key=lambda r: (ns_key(r.namespace), r.content)):
        h.update(ns_key(r.namespace).encode() + b"\0" + " ".join(r.content.split()).casefold().encode() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class OutboxOp:
    """One pending write. ``kind`` is "upsert" (records + vectors) or "delete" (ids/namespace/filter)."""

    seq: int
    kind: str
    records: list[MemoryRecord] | None = None
    vectors: np.ndarray | None = None
    ids: list[str] | None = None
    namespace: Namespace | None = None
    filter: dict[str, Any] | None = None

    def apply(self, backend: MemoryBackend) -> None:
        if self.kind == "upsert":
            backend.upsert(self.records or [], self.vectors)  # type: ignore[arg-type]
        else:
            backend.delete(self.ids, namespace=self.namespace, filter=self.filter)


class Outbox:
    """A durable FIFO of writes (one SQLite file; ``":memory:"`` is not durable, for tests only).

    Several processes may share the file: each replayed op is taken, applied and removed inside
    one ``BEGIN IMMEDIATE`` transaction, so two drainers never apply ops out of order.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            _private_file(self.path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False,
                                     isolation_level=None)
        # Queued ops hold memory text: overwrite it on disk when an op is removed (replayed),
        # rather than leave it in free pages.
        self._conn.execute("PRAGMA secure_delete = ON")
        if self.path != ":memory:":
            self._conn.execute("PRAGMA journal_mode = WAL")
            # FULL: an acknowledged write must survive a power cut, not only a crash.
            self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS ops (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- replay order; never reused
                kind TEXT NOT NULL,
                body TEXT NOT NULL,
                vectors BLOB,
                created_at REAL NOT NULL
            );
            CREATE TABLE IF NOT EXISTS dead (
                seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, body TEXT NOT NULL, vectors BLOB,
                created_at REAL NOT NULL, error TEXT NOT NULL, failed_at REAL NOT NULL
            );
            """
        )
        cols = {r[1] for r in self._conn.execute("PRAGMA table_info(ops)")}
        if "idem" not in cols:  # outboxes written before idempotency keys existed
            self._conn.execute("ALTER TABLE ops ADD COLUMN idem TEXT")
            self._conn.execute("ALTER TABLE ops ADD COLUMN ids TEXT")
        self._conn.execute("CREATE INDEX IF NOT EXISTS ops_idem ON ops (idem)")

    def append_upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> int:
        """Queue an upsert; returns its seq. A retry of a pending upsert is not queued twice.

        The idempotency key is the records' namespaces and normalised contents. A pending op
        with the same key but other ids is the same memory written again under a new id (a
        caller that retried): its seq is returned and nothing is added, so the replay stores
        the memory once. Same ids means an update of those records: it is queued (order kept).
        """
        vecs = np.ascontiguousarray(vectors, dtype="<f4")
        body = json.dumps({"records": [r.model_dump(mode="json") for r in records], "dim": int(vecs.shape[1])})
        key = idempotency_key(records)
        ids = json.dumps([r.id for r in records])
        with self._lock:
            row = self._conn.execute("SELECT seq, ids FROM ops WHERE idem = ? AND kind = 'upsert'"
                                     " ORDER BY seq DESC LIMIT 1", (key,)).fetchone()
            if row is not None and row[1] != ids:
                log.info("outbox: upsert %s is a retry of pending op %s; not queued twice", ids, row[0])
                return int(row[0])
            return self._append("upsert", body, vecs.tobytes(), key, ids)

    def ids_of(self, seq: int) -> list[str]:
        """The record ids of a pending upsert (empty when it is gone or not an upsert)."""
        with self._lock:
            row = self._conn.execute("SELECT ids FROM ops WHERE seq = ?", (seq,)).fetchone()
        return json.loads(row[0]) if row and row[0] else []

    def append_delete(self, ids: Sequence[str] | None, namespace: Namespace | None,
                      filter: dict[str, Any] | None) -> int:
        body = json.dumps({"ids": None if ids is None else list(ids),
                           "namespace": None if namespace is None else list(namespace),
                           "filter": filter}, default=_json_default)
        return self._append("delete", body, None)

    def _append(self, kind: str, body: str, blob: bytes | None, idem: str | None = None,
                ids: str | None = None) -> int:
        with self._lock:
            cur = self._conn.execute(
                "INSERT INTO ops (kind, body, vectors, created_at, idem, ids) VALUES (?, ?, ?, ?, ?, ?)",
                (kind, body, blob, time.time(), idem, ids),
            )
            return int(cur.lastrowid or 0)

    @staticmethod
    def _decode(row: Sequence[Any]) -> OutboxOp:
        seq, kind, body, blob = row
        data = json.loads(body)
        if kind == "upsert":
            records = [MemoryRecord.model_validate(r) for r in data["records"]]
            vecs = np.frombuffer(blob, dtype="<f4").reshape(len(records), data["dim"]).copy()
            return OutboxOp(seq, kind, records=records, vectors=vecs)
        ns = data.get("namespace")
        return OutboxOp(seq, kind, ids=data.get("ids"), namespace=None if ns is None else tuple(ns),
                        filter=data.get("filter"))

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0])

    def pending(self) -> list[OutboxOp]:
        """Every queued op, oldest first (inspection and tests)."""
        with self._lock:
            rows = self._conn.execute("SELECT seq, kind, body, vectors FROM ops ORDER BY seq").fetchall()
        return [self._decode(r) for r in rows]

    def dead_letters(self) -> list[tuple[int, str, str]]:
        """(seq, kind, error) of ops the primary rejected for good."""
        with self._lock:
            return [(int(s), k, e) for s, k, e in
                    self._conn.execute("SELECT seq, kind, error FROM dead ORDER BY seq")]

    def drain(self, apply: Callable[[OutboxOp], None], *,
              may_start: Callable[[], bool] | None = None) -> tuple[int, int]:
        """Apply queued ops oldest first until the queue is empty or ``may_start()`` says stop.

        ``apply`` raising :class:`BackendUnavailable` stops the drain (the op stays queued).
        Any other error moves the op to the dead-letter table: a write the primary will never
        accept (e.g. a schema change) must not block every write behind it.

        Returns:
            (applied, dead-lettered) counts.
        """
        try:
            return self._drain(apply, may_start)
        finally:
            self._purge_if_empty()

    def _purge_if_empty(self) -> None:
        """Once the queue is empty, fold the WAL into the file and truncate it, so replayed
        memory text (already zeroed in the file by secure_delete) is gone from the WAL too."""
        if self.path == ":memory:":
            return
        with self._lock:
            try:
                if self._conn.execute("SELECT 1 FROM ops LIMIT 1").fetchone() is None:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:  # best effort: another process may hold the file
                log.info("outbox WAL not truncated yet: %s", exc)

    def _drain(self, apply: Callable[[OutboxOp], None],
               may_start: Callable[[], bool] | None) -> tuple[int, int]:
        applied = dead = 0
        while may_start is None or may_start():
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    row = self._conn.execute(
                        "SELECT seq, kind, body, vectors FROM ops ORDER BY seq LIMIT 1").fetchone()
                    if row is None:
                        self._conn.execute("COMMIT")
                        return applied, dead
                    try:
                        apply(self._decode(row))
                    except BackendUnavailable:
                        self._conn.execute("COMMIT")
                        raise
                    except Exception as exc:  # permanent failure: park it, keep going
                        log.error("outbox op %s (%s) rejected by the primary, moved to dead letters: %s",
                                  row[0], row[1], exc)
                        self._conn.execute(
                            "INSERT INTO dead (seq, kind, body, vectors, created_at, error, failed_at)"
                            " SELECT seq, kind, body, vectors, created_at, ?, ? FROM ops WHERE seq = ?",
                            (f"{type(exc).__name__}: {exc}", time.time(), row[0]),
                        )
                        dead += 1
                    else:
                        applied += 1
                    self._conn.execute("DELETE FROM ops WHERE seq = ?", (row[0],))
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
        return applied, dead

    def close(self) -> None:
        with self._lock:
            self._conn.close()


__all__ = ["Outbox", "OutboxOp", "idempotency_key"]
