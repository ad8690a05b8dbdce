"""The audit log and the history/trash of memories, kept in SQLite next to (or inside) the store.

Every search, write, merge, update, delete, eviction and expiry becomes one row with before/after
content, the acting agent, the thread/run id and a reason. Soft-deleted and superseded memories
are kept in ``audit_trash`` so they can be restored or shown in ``memctl history``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memory.backends.sqlite import apply_migrations
from memory.errors import BackendUnavailable, MemoryBackendError
from memory.namespace import Namespace, ns_key
from memory.records import MemoryRecord, as_utc, utcnow

MIGRATIONS = [
    """
    CREATE TABLE audit_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        action TEXT NOT NULL,
        memory_id TEXT,
        namespace TEXT,
        actor TEXT,
        thread_id TEXT,
        run_id TEXT,
        reason TEXT,
        before TEXT,
        after TEXT,
        details TEXT
    );
    CREATE INDEX audit_events_memory ON audit_events (memory_id);
    CREATE INDEX audit_events_action ON audit_events (action, ts);
    CREATE INDEX audit_events_ns ON audit_events (namespace);
    CREATE TABLE audit_trash (
        memory_id TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        record TEXT NOT NULL,
        kind TEXT NOT NULL,
        reason TEXT,
        deleted_at REAL NOT NULL
    );
    CREATE INDEX audit_trash_ns ON audit_trash (namespace)
    """,
]

ACTIONS = ("search", "add", "merge", "update", "supersede", "skip", "delete", "restore", "evict", "expire",
           "forget_user", "redact", "deny")


@dataclass(frozen=True)
class AuditEvent:
    action: str
    memory_id: str | None = None
    namespace: str | None = None
    actor: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    reason: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    ts: datetime = field(default_factory=utcnow)
    seq: int | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["ts"] = self.ts.isoformat()
        return d


def _ns_prefix_clause(prefix: Namespace) -> tuple[str, list[str]]:
    key = ns_key(prefix)
    return "(namespace = ? OR (namespace >= ? AND namespace < ?))", [key, key + "/", key + "0"]


class AuditLog:
    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 10000")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
                # As for the store: in WAL mode NORMAL cannot corrupt the file; it only skips an
                # fsync per commit (a power cut may lose the last events, a crash does not).
                self._conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open the audit log at {self.path!r}: {exc}") from exc

    def _migrate(self) -> None:
        apply_migrations(self._conn, "audit_migrations", MIGRATIONS)

    def _exec(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, tuple(params))
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"audit log {self.path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            raise MemoryBackendError(f"audit log {self.path!r}: {exc}") from exc

    # ------------------------------------------------------------------ events
    def record(self, ev: AuditEvent) -> None:
        with self._lock:
            self._exec(
                "INSERT INTO audit_events (ts, action, memory_id, namespace, actor, thread_id, run_id, reason,"
                " before, after, details) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ev.ts.timestamp(), ev.action, ev.memory_id, ev.namespace, ev.actor, ev.thread_id, ev.run_id,
                 ev.reason, _dumps(ev.before), _dumps(ev.after), _dumps(ev.details)),
            )

    def events(self, *, action: str | None = None, namespace: Namespace | None = None,
               memory_id: str | None = None, limit: int = 100) -> list[AuditEvent]:
        where, params = ["1"], []
        if action:
            where.append("action = ?")
            params.append(action)
        if namespace:
            clause, p = _ns_prefix_clause(namespace)
            where.append(clause)
            params += p
        if memory_id:
            where.append("(memory_id = ? OR details LIKE ?)")
            params += [memory_id, f'%"{memory_id}"%']
        with self._lock:
            rows = self._exec(
                f"SELECT seq, ts, action, memory_id, namespace, actor, thread_id, run_id, reason, before, after,"
                f" details FROM audit_events WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [
            AuditEvent(seq=r[0], ts=as_utc(r[1]), action=r[2], memory_id=r[3], namespace=r[4], actor=r[5],
                       thread_id=r[6], run_id=r[7], reason=r[8], before=_loads(r[9]), after=_loads(r[10]),
                       details=_loads(r[11]) or {})
            for r in rows
        ]

    def history(self, memory_id: str, limit: int = 200) -> list[AuditEvent]:
        """Everything that happened to one memory, oldest first."""
        return list(reversed(self.events(memory_id=memory_id, limit=limit)))

    def memory_ids(self, prefix: str, *, events: bool = True, trash: bool = True, limit: int = 6) -> list[str]:
        """Memory ids starting with ``prefix`` that appear in events and/or the trash (for the CLI's
        id prefixes), sorted, at most ``limit``."""
        hi = prefix + "\U0010ffff"
        parts = (["SELECT memory_id FROM audit_events WHERE memory_id >= ? AND memory_id < ?"] if events else []) + \
                (["SELECT memory_id FROM audit_trash WHERE memory_id >= ? AND memory_id < ?"] if trash else [])
        if not parts:
            return []
        with self._lock:
            rows = self._exec(f"SELECT DISTINCT memory_id FROM ({' UNION '.join(parts)}) ORDER BY memory_id LIMIT ?",
                              (*([prefix, hi] * len(parts)), limit)).fetchall()
        return [r[0] for r in rows]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._exec("SELECT action, COUNT(*) FROM audit_events GROUP BY action").fetchall())
            searches_hit = self._exec(
                "SELECT COUNT(*) FROM audit_events WHERE action = 'search' AND json_extract(details, '$.hits') > 0"
            ).fetchone()[0]
        searches = counts.get("search", 0)
        writes = sum(counts.get(a, 0) for a in ("add", "merge", "update", "supersede", "skip"))
        duplicates = counts.get("merge", 0) + counts.get("skip", 0)
        return {
            "events": counts,
            "searches": searches,
            "hit_rate": round(searches_hit / searches, 4) if searches else None,
            "writes": writes,
            "duplicate_write_rate": round(duplicates / writes, 4) if writes else None,
            "merges": counts.get("merge", 0),
            "conflicts_resolved": counts.get("update", 0) + counts.get("supersede", 0),
            "deletes": counts.get("delete", 0),
            "evictions": counts.get("evict", 0),
            "expired": counts.get("expire", 0),
        }

    # ------------------------------------------------------------------ trash / history
    def trash_put(self, record: MemoryRecord, kind: str, reason: str, now: datetime | None = None) -> None:
        with self._lock:
            self._exec(
                "INSERT OR REPLACE INTO audit_trash (memory_id, namespace, record, kind, reason, deleted_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (record.id, ns_key(record.namespace), record.model_dump_json(), kind, reason,
                 (now or utcnow()).timestamp()),
            )

    def trash_get(self, memory_id: str) -> tuple[MemoryRecord, str] | None:
        with self._lock:
            row = self._exec("SELECT record, kind FROM audit_trash WHERE memory_id = ?", (memory_id,)).fetchone()
        return (MemoryRecord.model_validate_json(row[0]), row[1]) if row else None

    def trash_remove(self, memory_id: str) -> None:
        with self._lock:
            self._exec("DELETE FROM audit_trash WHERE memory_id = ?", (memory_id,))

    def trash_list(self, namespace: Namespace | None = None, limit: int = 100) -> list[tuple[MemoryRecord, str]]:
        where, params = ("1", [])
        if namespace:
            where, params = _ns_prefix_clause(namespace)
        with self._lock:
            rows = self._exec(f"SELECT record, kind FROM audit_trash WHERE {where} ORDER BY deleted_at DESC LIMIT ?",
                              (*params, limit)).fetchall()
        return [(MemoryRecord.model_validate_json(r[0]), r[1]) for r in rows]

    def purge(self, namespace: Namespace) -> dict[str, int]:
        """Remove every event and trashed memory under a namespace prefix (forget a user)."""
        clause, params = _ns_prefix_clause(namespace)
        with self._lock:
            ev = self._exec(f"DELETE FROM audit_events WHERE {clause}", params).rowcount
            tr = self._exec(f"DELETE FROM audit_trash WHERE {clause}", params).rowcount
        return {"events": ev, "trash": tr}

    def residue(self, namespace: Namespace) -> dict[str, int]:
        clause, params = _ns_prefix_clause(namespace)
        with self._lock:
            ev = self._exec(f"SELECT COUNT(*) FROM audit_events WHERE {clause}", params).fetchone()[0]
            tr = self._exec(f"SELECT COUNT(*) FROM audit_trash WHERE {clause}", params).fetchone()[0]
        return {"audit_events": ev, "trash": tr}

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _dumps(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, ensure_ascii=False, default=str)


def _loads(s: str | None) -> Any:
    return None if s is None else json.loads(s)
