"""The audit log and the history/trash of memories, kept in SQLite next to (or inside) the store.

Every search, write, merge, update, delete, eviction and expiry becomes one row with before/after
content, the acting agent, the thread/run id and a reason. Soft-deleted and superseded memories
are kept in ``audit_trash`` so they can be restored or shown in ``memctl history``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memory.backends.sqlite_schema import apply_migrations, open_side_db
from memory.errors import BackendUnavailable, InvalidInput, MemoryBackendError
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

MAX_LIMIT = 2**62  # SQLite integers are 64-bit: a larger LIMIT raised OverflowError
# What a forgotten or hard-deleted event keeps: its seq, time, action, memory id and actors.
FORGOTTEN = "forgotten"

# Every action an event is recorded with; `events(action=...)` refuses others (a typo used to list nothing).
ACTIONS = ("search", "add", "merge", "update", "supersede", "skip", "delete", "restore", "evict", "expire",
           "forget_user", "redact", "deny", "import", "index", "collection_remove")


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
        self._lock = threading.RLock()
        try:
            # Deleted and redacted rows are overwritten with zeros in the file, not just unlinked:
            # forget-user and hard delete promise the text is gone from the bytes on disk.
            self._conn = open_side_db(self.path, secure_delete=True)
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
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT:
            raise InvalidInput(f"limit must be an integer from 0 to {MAX_LIMIT}, got {limit!r:.40}")
        if action is not None and action not in ACTIONS:
            raise InvalidInput(f"unknown audit action {action!r:.40}; use one of: {', '.join(ACTIONS)}")
        where, params = ["1"], []
        if action:
            where.append("action = ?")
            params.append(action)
        if namespace:
            clause, p = _ns_prefix_clause(namespace)
            where.append(clause)
            params += p
        if memory_id:
            # Escaped: an id like "%" must match itself, not every event that mentions any id.
            where.append("(memory_id = ? OR details LIKE ? ESCAPE '\\')")
            params += [memory_id, f'%"{_like_escape(memory_id)}"%']
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
        """Remove every trashed memory under a namespace prefix and redact its events (forget a user)."""
        n = self.forget_namespaces([namespace])
        return {"events": n["events"], "trash": n["trash"]}

    def namespaces_with_label(self, label: str, position: int = 1) -> set[Namespace]:
        """Every namespace the log mentions (events, multi-namespace searches, trash) whose label at
        ``position`` is ``label`` — also namespaces that no longer hold any memory."""
        with self._lock:
            rows = self._exec(
                "SELECT namespace FROM audit_events WHERE namespace IS NOT NULL"
                " UNION SELECT namespace FROM audit_trash"
                " UNION SELECT j.value FROM audit_events AS e, json_each(e.details, '$.namespaces') AS j"
                " WHERE e.action = 'search' AND json_valid(e.details) AND j.type = 'text'").fetchall()
        out: set[Namespace] = set()
        for (key,) in rows:
            ns = tuple(str(key).split("/"))
            if len(ns) > position and ns[position] == label:
                out.add(ns)
        return out

    def _user_event_seqs(self, namespaces: Iterable[Namespace]) -> list[int]:
        seqs: set[int] = set()
        keys = [ns_key(n) for n in namespaces]
        with self._lock:
            for ns in namespaces:
                clause, params = _ns_prefix_clause(ns)
                seqs.update(r[0] for r in self._exec(f"SELECT seq FROM audit_events WHERE {clause}", params))
            # A search over several namespaces is one event with a NULL namespace: it is the user's
            # when any of its namespaces is (its query text is theirs).
            for i in range(0, len(keys), 500):
                chunk = keys[i: i + 500]
                marks = ",".join("?" * len(chunk))
                seqs.update(r[0] for r in self._exec(
                    "SELECT DISTINCT e.seq FROM audit_events AS e, json_each(e.details, '$.namespaces') AS j"
                    f" WHERE e.action = 'search' AND json_valid(e.details) AND j.value IN ({marks})", chunk))
                for k in chunk:  # prefixes: a search of user_profile/u1/x belongs to user_profile/u1
                    seqs.update(r[0] for r in self._exec(
                        "SELECT DISTINCT e.seq FROM audit_events AS e, json_each(e.details, '$.namespaces') AS j"
                        " WHERE e.action = 'search' AND json_valid(e.details) AND j.value >= ? AND j.value < ?",
                        (k + "/", k + "0")))
        return sorted(seqs)

    def _redact(self, seqs: Sequence[int], reason: str, *, keep_namespace: bool) -> int:
        """Blank the text of events (reason, before, after, details; the namespace too unless kept),
        keeping seq, time, action, memory id and actors. A search keeps its hit count (stats)."""
        n = 0
        ns_sql = "namespace" if keep_namespace else "NULL"
        with self._lock:
            for i in range(0, len(seqs), 500):
                chunk = list(seqs[i: i + 500])
                n += self._exec(
                    f"UPDATE audit_events SET namespace = {ns_sql}, reason = ?, before = NULL, after = NULL,"
                    " details = CASE WHEN action = 'search' AND json_valid(details)"
                    "   THEN json_object('hits', json_extract(details, '$.hits'), ?, 1)"
                    "   ELSE json_object(?, 1) END"
                    f" WHERE seq IN ({','.join('?' * len(chunk))})", (reason, FORGOTTEN, FORGOTTEN, *chunk)).rowcount
        return n

    def forget_namespaces(self, namespaces: Iterable[Namespace], memory_ids: Iterable[str] = ()) -> dict[str, int]:
        """Forget a user's namespaces: trashed memories deleted, events redacted (text and namespace
        gone; seq, time, action and memory id kept), also events of ``memory_ids`` anywhere."""
        nss = sorted(set(namespaces))
        ids = set(memory_ids)
        seqs = set(self._user_event_seqs(nss))
        tr = 0
        with self._lock:
            for ns in nss:
                clause, params = _ns_prefix_clause(ns)
                ids.update(r[0] for r in self._exec(f"SELECT memory_id FROM audit_trash WHERE {clause}", params))
                ids.update(r[0] for r in self._exec(
                    f"SELECT memory_id FROM audit_events WHERE memory_id IS NOT NULL AND {clause}", params))
                tr += self._exec(f"DELETE FROM audit_trash WHERE {clause}", params).rowcount
            seqs.update(self._memory_event_seqs(sorted(ids)))
        ev = self._redact(sorted(seqs), f"{FORGOTTEN}: forget user", keep_namespace=False)
        return {"events": ev, "trash": tr}

    def _memory_event_seqs(self, ids: Sequence[str]) -> set[int]:
        seqs: set[int] = set()
        for i in range(0, len(ids), 500):
            chunk = list(ids[i: i + 500])
            seqs.update(r[0] for r in self._exec(
                f"SELECT seq FROM audit_events WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk))
        return seqs

    def forget_memories(self, ids: Sequence[str], reason: str = "hard delete") -> int:
        """A hard delete: the memories' text leaves their events and the trash (ids, actions and times
        stay); an event that superseded one of them loses the old text it kept in ``before``."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return 0
        with self._lock:
            seqs = self._memory_event_seqs(ids)
            n = self._redact(sorted(seqs), f"{FORGOTTEN}: {reason}", keep_namespace=True)
            for i in range(0, len(ids), 500):
                chunk = ids[i: i + 500]
                marks = ",".join("?" * len(chunk))
                self._exec(f"DELETE FROM audit_trash WHERE memory_id IN ({marks})", chunk)
                self._exec(
                    "UPDATE audit_events SET before = NULL WHERE seq IN (SELECT DISTINCT e.seq FROM audit_events AS e,"
                    " json_each(e.details, '$.superseded') AS j WHERE json_valid(e.details)"
                    f" AND j.value IN ({marks}))", chunk)
        return n

    def residue(self, namespace: Namespace) -> dict[str, int]:
        """What the log still holds of a namespace: events naming it (or searching it) with their
        text, and trashed memories."""
        clause, params = _ns_prefix_clause(namespace)
        seqs = self._user_event_seqs([namespace])
        with self._lock:
            tr = self._exec(f"SELECT COUNT(*) FROM audit_trash WHERE {clause}", params).fetchone()[0]
            ev = 0
            for i in range(0, len(seqs), 500):
                chunk = seqs[i: i + 500]
                ev += self._exec(
                    f"SELECT COUNT(*) FROM audit_events WHERE seq IN ({','.join('?' * len(chunk))})"
                    " AND NOT (reason IS NOT NULL AND reason LIKE 'forgotten:%' AND before IS NULL AND after IS NULL)",
                    chunk).fetchone()[0]
        return {"audit_events": ev, "trash": tr}

    def scrub(self) -> None:
        """Checkpoint and truncate the WAL, so frames holding deleted text leave the disk too."""
        if self.path == ":memory:":
            return
        with self._lock:
            self._exec("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _dumps(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, ensure_ascii=False, default=str)


def _loads(s: str | None) -> Any:
    return None if s is None else json.loads(s)
