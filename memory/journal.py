"""A durable journal of the memory writes the Supervisor's nodes (and the memory hooks) decided to make.

Why: with write-behind (:mod:`supervisor.writebehind`) a post-node returns before its writes
are applied; a process that dies in between (kill -9, OOM, a redeploy) used to lose them, and
only resuming the same thread from its checkpoint replayed them. Now every write is first
committed to this journal, *then* handed to the background thread, and deleted from the
journal once it is applied. A write that fails (embedder down, backend down, disk full) stays in
the journal and is retried. The journal runs in WAL mode with ``synchronous=NORMAL``: a commit
survives the process being killed (kill -9, OOM); a power cut may lose the last commits. That
choice costs the post-node ~0.3 ms per handoff where ``FULL`` (an fsync per commit) cost 10-15 ms
on our 2-core host (``memctl.bench_handoff``, write-behind, 2,000 memories, load 11-16).

Where: a small SQLite file beside the store, ``<MEMORY_PATH>.pending`` (not a table in the
store's file: a store made unwritable, or locked by a long write, must not also stop the
journal). ``:memory:`` stores get an in-memory journal (nothing to survive). If the journal
file itself cannot be written, the journal falls back to memory and says so in the error.

Replay: :meth:`WriteJournal.replay` applies every row no live writer owns. It runs when a
Supervisor graph or memory hooks are built on the store (any process, any thread) and at the
start of every turn. Rows are claimed atomically (owner = host:pid:token plus a lease), so
two processes never apply the same row, and a row of a process that died (its pid gone, or the
lease expired) is taken over. Applying is idempotent: the stored record carries the row id in
``metadata.extra.journal``; a row whose record exists is only deleted.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory.errors import InvalidConfig, InvalidInput, MemoryBackendError, MemoryLayerError
from memory.namespace import Namespace, ns_key, parse_namespace
from memory.policy.manager import Actor, MemoryManager, WriteResult
from memory.policy.pii import redact

log = logging.getLogger("memory.journal")

SUFFIX = ".pending"
LEASE_SECONDS = 300.0  # a claim older than this is taken over even if its owner looks alive

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending_writes (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT,
    now TEXT,
    created REAL NOT NULL,
    owner TEXT,
    claimed REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
)"""


@dataclass(frozen=True)
class JournalEntry:
    """One write the graph decided to make."""

    namespace: Namespace
    content: str
    metadata: Mapping[str, Any]
    actor: Actor = field(default_factory=Actor)
    reason: str | None = None
    now: datetime | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


def journal_path(store_path: str) -> str | None:
    """The journal file of a store file (None: the store is in memory)."""
    if not store_path or store_path == ":memory:" or store_path.startswith("file::memory:"):
        return None
    return store_path + SUFFIX


def _label_at(ns: str, position: int) -> str | None:
    labels = ns.split("/")
    return labels[position] if 0 <= position < len(labels) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class WriteJournal:
    """The pending writes of one store. Thread-safe; one per process and store.

    Args:
        path: the journal file, or None for an in-memory journal.
    """

    def __init__(self, path: str | None):
        self.path = path
        self.durable = path is not None
        self.fallback_reason: str | None = None
        self._lock = threading.RLock()
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._conn: sqlite3.Connection | None = None
        # Rows this journal added and has not tried to apply yet: no attempt can have stored them.
        self._fresh: set[str] = set()
        if path is not None and os.path.exists(path):
            self._connect()  # a journal left by an earlier process: open it to replay

    @classmethod
    def for_store(cls, store_path: str) -> WriteJournal:
        return cls(journal_path(store_path))

    # ------------------------------------------------------------------ connection
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        try:
            if self.path is None:
                raise sqlite3.OperationalError("in-memory store")
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives kill -9 (power loss may lose the last)
            conn.execute("PRAGMA secure_delete=ON")  # applied or forgotten rows leave no text in free pages
            conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            if self.path is not None:
                self.fallback_reason = f"write journal {self.path} unusable ({exc}); pending writes kept in memory only"
                log.warning(self.fallback_reason)
            self.durable = False
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            conn.execute(_SCHEMA)
        self._conn = conn
        return conn

    def _exec(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            conn = self._connect()
            try:
                return conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                if not self.durable or "locked" in str(exc) or "busy" in str(exc):
                    raise  # busy is transient: the caller applies the write directly this once
                # The file went bad (disk full, read-only, deleted dir): keep going in memory.
                self.fallback_reason = f"write journal {self.path} failed ({exc}); pending writes kept in memory only"
                log.warning(self.fallback_reason)
                self._conn, self.durable = None, False
                self.path = None
                return self._connect().execute(sql, args).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One IMMEDIATE transaction under this journal's lock; rolled back on any error."""
        with self._lock:
            self._exec("BEGIN IMMEDIATE")
            try:
                yield
                self._exec("COMMIT")
            except BaseException:
                try:
                    self._exec("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise

    # ------------------------------------------------------------------ writing
    def add(self, entries: Sequence[JournalEntry], *, redact_pii: bool = True) -> list[str]:
        """Commit ``entries`` (claimed by this process) before anything else happens to them.

        Content is PII-redacted first when ``redact_pii`` (the store would redact it anyway; the
        journal must not keep what the store would not).
        """
        if not entries:
            return []
        now = time.time()
        rows = []
        for i, e in enumerate(entries):
            content = redact(e.content).text if redact_pii else e.content
            rows.append((e.id, time.time_ns() + i, ns_key(e.namespace), content,
                         json.dumps(dict(e.metadata), ensure_ascii=False, default=str),
                         json.dumps([e.actor.agent, e.actor.thread_id, e.actor.run_id]), e.reason,
                         e.now.isoformat() if e.now is not None else None, now, self._owner, now))
        with self._transaction():
            self._connect().executemany(
                "INSERT INTO pending_writes (id, seq, namespace, content, metadata, actor, "
                "reason, now, created, owner, claimed) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        with self._lock:
            self._fresh.update(e.id for e in entries)
        return [e.id for e in entries]

    def __len__(self) -> int:
        if self._conn is None and not (self.path and os.path.exists(self.path)):
            return 0
        return int(self._exec("SELECT count(*) FROM pending_writes")[0][0])

    def pending(self) -> list[dict[str, Any]]:
        """Every row, oldest first (for tests and diagnostics)."""
        if self._conn is None and not (self.path and os.path.exists(self.path)):
            return []
        cols = ("id", "namespace", "content", "owner", "attempts", "last_error")
        return [dict(zip(cols, r, strict=True)) for r in self._exec(
            f"SELECT {', '.join(cols)} FROM pending_writes ORDER BY seq")]

    # ------------------------------------------------------------------ applying
    def apply(self, jid: str, manager: MemoryManager) -> WriteResult | None:
        """Apply one claimed row; delete it when done. On failure the row is released for a
        retry and the error re-raised (bad input, which no retry fixes, is deleted instead). None when the row is gone (applied elsewhere)."""
        with self._lock:
            fresh = jid in self._fresh
            self._fresh.discard(jid)
        rows = self._exec("SELECT namespace, content, metadata, actor, reason, now, owner, attempts "
                          "FROM pending_writes WHERE id = ?", (jid,))
        if not rows:
            return None
        ns_s, content, meta_s, actor_s, reason, now_s, owner, attempts = rows[0]
        # Was it applied before a crash? Only a row some earlier attempt may have stored needs the
        # look-up: it scans the namespace (metadata is not indexed; ~65 ms per write at 2,000
        # memories a namespace, most of the post-node at 100k). A row this journal added, still
        # owned by it and never attempted, cannot have been stored yet.
        applied_before = not (fresh and owner == self._owner and not attempts)
        ns = parse_namespace(ns_s)
        meta = json.loads(meta_s)
        meta["extra"] = {**(meta.get("extra") or {}), "journal": jid}
        agent, thread_id, run_id = json.loads(actor_s)
        now = datetime.fromisoformat(now_s) if now_s else None
        try:
            if applied_before and manager.service.list(ns, filter={"extra.journal": jid}, limit=1):
                res = None  # applied before a crash, not yet deleted from the journal
            else:
                res = manager.remember(content, ns, meta, actor=Actor(agent, thread_id, run_id), now=now,
                                       reason=reason)
        except BaseException as exc:
            if isinstance(exc, InvalidInput) and not isinstance(exc, InvalidConfig):
                # The write path refused the entry itself (a NUL in the user's text, an oversized
                # message): no retry can make it valid, and a kept row failed again at every turn
                # and every graph build. The caller reports the error once; the row goes.
                self._exec("DELETE FROM pending_writes WHERE id = ?", (jid,))
                raise
            self._exec("UPDATE pending_writes SET owner = NULL, claimed = NULL, attempts = attempts + 1, "
                       "last_error = ? WHERE id = ?", (f"{type(exc).__name__}: {exc}"[:500], jid))
            raise
        self._exec("DELETE FROM pending_writes WHERE id = ?", (jid,))
        return res

    def _claim(self, limit: int) -> list[str]:
        """Atomically claim up to ``limit`` rows no live writer owns."""
        now = time.time()
        host = socket.gethostname()
        with self._transaction():
            rows = self._exec("SELECT id, owner, claimed FROM pending_writes ORDER BY seq")
            mine = []
            for jid, owner, claimed in rows:
                if owner is not None and owner != self._owner and (claimed or 0) > now - LEASE_SECONDS:
                    o_host, _, rest = owner.partition(":")
                    pid = rest.split(":")[0]
                    if o_host != host or not pid.isdigit() or _alive(int(pid)):
                        continue  # a live writer (another process or journal) is on it
                if owner == self._owner:
                    continue  # ours and in flight (the write-behind thread applies it)
                mine.append(jid)
                if len(mine) >= limit:
                    break
            for jid in mine:
                self._exec("UPDATE pending_writes SET owner = ?, claimed = ? WHERE id = ?", (self._owner, now, jid))
        return mine

    def replay(self, manager: MemoryManager,
               limit: int = 1000) -> list[tuple[str, WriteResult | None, Exception | None]]:
        """Apply every pending row no live writer owns, oldest first.

        Returns ``(id, result, error)`` per row tried; a row that fails stays for the next replay,
        unless the write path refused it as bad input (:class:`InvalidInput`): that row is dropped.
        Rows that fail because the store is down stop the replay (the rest would fail too).
        """
        if self._conn is None and not (self.path and os.path.exists(self.path)):
            return []
        out: list[tuple[str, WriteResult | None, Exception | None]] = []
        claimed = self._claim(limit)
        for i, jid in enumerate(claimed):
            try:
                out.append((jid, self.apply(jid, manager), None))
            except Exception as exc:  # noqa: BLE001 - reported to the caller, row kept
                out.append((jid, None, exc))
                if not isinstance(exc, MemoryLayerError) or isinstance(exc, MemoryBackendError):
                    # The store or embedder is down: the other rows would fail too; leave them.
                    for rest in claimed[i + 1:]:
                        self._exec("UPDATE pending_writes SET owner = NULL, claimed = NULL WHERE id = ?", (rest,))
                    break
        return out

    def forget(self, user_id: str, position: int = 1) -> int:
        """Drop the pending writes into one user's namespaces (``user_id`` as the label at
        ``position``), so a later replay cannot bring back what ``forget_user`` erased; their text
        leaves the file too (``secure_delete``, WAL truncated). Returns how many were dropped.
        Creates no journal where there is none."""
        if self.path is not None and self._conn is None and not os.path.exists(self.path):
            return 0
        gone = [jid for jid, ns in self._exec("SELECT id, namespace FROM pending_writes")
                if _label_at(ns, position) == user_id]
        for jid in gone:
            self._exec("DELETE FROM pending_writes WHERE id = ?", (jid,))
        if gone and self.durable:
            self._exec("PRAGMA wal_checkpoint(TRUNCATE)")
        return len(gone)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["JournalEntry", "SUFFIX", "WriteJournal", "journal_path"]
