"""A group transcript shared by several processes on one SQLite file (seed 003).

Agents and apps in different processes append the messages of a group conversation; any of them
reads the recent ones back, in one order for everyone (timestamp, then message id). SQLite in WAL
mode with a busy timeout serialises the writers; ``message_id`` is the primary key, so a message
delivered twice (a retry, two relays of one chat event) is stored once::

    >>> from memory.transcript import GroupTranscript
    >>> t = GroupTranscript(":memory:")
    >>> t.append("m1", "zhang", "user", "今天先看华东的数据", ts="2026-01-05T09:00:00+00:00")
    True
    >>> t.append("m1", "zhang", "user", "今天先看华东的数据", ts="2026-01-05T09:00:00+00:00")
    False
    >>> [m.text for m in t.get_recent(5)]
    ['今天先看华东的数据']
    >>> t.close()

Retention: at most ``max_messages`` per thread (the oldest go first) and nothing older than
``max_age_days``, applied on append (every ``prune_every`` appends) and by :meth:`prune`.
Dedupe holds within what is retained: a message pruned away and delivered again comes back
(and is pruned again when it is still the oldest).

The table lives in the file given (by default the memory store's own file, like the audit log), so
one file holds memories, their history and the group's conversation.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memory.errors import BackendUnavailable, InvalidContent, InvalidInput
from memory.records import as_utc, utcnow
from memory.text import count_tokens, is_blank

ROLES = ("user", "assistant", "agent", "system", "tool")
MAX_TEXT_CHARS = 20_000
MAX_LABEL_CHARS = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS group_transcript (
    message_id TEXT PRIMARY KEY,
    thread TEXT NOT NULL,
    ts REAL NOT NULL,
    sender TEXT NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS group_transcript_order ON group_transcript (thread, ts, message_id);
CREATE INDEX IF NOT EXISTS group_transcript_ts ON group_transcript (ts, message_id);
"""


@dataclass(frozen=True)
class TranscriptMessage:
    message_id: str
    sender: str
    role: str
    text: str
    ts: datetime
    thread: str

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ts"] = self.ts.isoformat()
        return d


def _label(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > MAX_LABEL_CHARS:
        raise InvalidInput(f"{name} is {len(value)} characters; at most {MAX_LABEL_CHARS}")
    return value.strip()


def parse_ts(value: datetime | str | float | int | None, name: str = "ts") -> datetime:
    """A timestamp from a datetime, an ISO-8601 string or epoch seconds (naive = UTC)."""
    if value is None:
        return utcnow()
    if isinstance(value, bool):
        raise InvalidInput(f"{name} must be a datetime, an ISO-8601 string or epoch seconds, got {value!r}")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=as_utc(utcnow()).tzinfo)
    if isinstance(value, str):
        try:
            return as_utc(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
        except ValueError:
            raise InvalidInput(f"{name} {value!r} is not an ISO-8601 time, e.g. 2026-01-05T09:00:00+00:00") from None
    if isinstance(value, datetime):
        return as_utc(value)
    raise InvalidInput(f"{name} must be a datetime, an ISO-8601 string or epoch seconds, got {type(value).__name__}")


class GroupTranscript:
    """The messages of group conversations, shared by processes through one SQLite file."""

    def __init__(self, path: str | Path, *, max_messages: int | None = 10_000, max_age_days: float | None = None,
                 prune_every: int = 100, busy_timeout_s: float = 30.0):
        if max_messages is not None and (isinstance(max_messages, bool) or max_messages < 1):
            raise InvalidInput(f"max_messages must be >= 1 or None, got {max_messages!r}")
        if max_age_days is not None and max_age_days <= 0:
            raise InvalidInput(f"max_age_days must be > 0 or None, got {max_age_days!r}")
        self.path = str(path)
        self.max_messages, self.max_age_days, self.prune_every = max_messages, max_age_days, max(1, prune_every)
        self._lock = threading.Lock()
        self._appends = 0
        try:
            if self.path != ":memory:":
                Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(Path(self.path).expanduser()) if self.path != ":memory:" else self.path,
                                       timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL: a committed message survives an application crash; only a power
                # loss can drop the last few (no fsync per message, which 4 busy writers would queue on).
                self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open the group transcript at {self.path!r}: {exc}") from exc

    # ------------------------------------------------------------------ write
    def append(self, message_id: str, sender: str, role: str, text: str, ts: datetime | str | float | None = None,
               thread: str = "main") -> bool:
        """Store one message; False when a message with this id is already stored (nothing changes).

        Raises:
            InvalidInput: an empty id / sender / thread, an unknown role, a bad timestamp.
            InvalidContent: empty text or text over 20,000 characters.
        """
        row = self._row(message_id, sender, role, text, ts, thread)
        with self._lock:
            new = self._exec("INSERT OR IGNORE INTO group_transcript VALUES (?, ?, ?, ?, ?, ?)", row).rowcount == 1
            self._appends += 1
            due = self._appends % self.prune_every == 0
        if due:
            self.prune()
        return new

    def _row(self, message_id: Any, sender: Any, role: Any, text: Any, ts: Any, thread: Any) -> tuple[Any, ...]:
        mid, who, th = _label("message_id", message_id), _label("sender", sender), _label("thread", thread)
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(text, str) or is_blank(text):
            # Invisible-only text (a zero-width space, a bidi mark) is empty too: nobody can read it back.
            raise InvalidContent("text must be a non-empty string with visible characters")
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidContent(f"text is {len(text)} characters; at most {MAX_TEXT_CHARS}")
        return (mid, th, parse_ts(ts).timestamp(), who, role, text)

    def _exec(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.OperationalError as exc:  # locked past the busy timeout, disk full, ...
            raise BackendUnavailable(f"group transcript {self.path!r}: {exc}; retry later") from exc

    def prune(self, now: datetime | None = None) -> int:
        """Apply the retention limits; returns how many messages were removed."""
        removed = 0
        with self._lock:
            if self.max_age_days is not None:
                cutoff = (as_utc(now) if now is not None else utcnow()) - timedelta(days=self.max_age_days)
                removed += self._exec("DELETE FROM group_transcript WHERE ts < ?", (cutoff.timestamp(),)).rowcount
            if self.max_messages is not None:
                threads = [r[0] for r in self._exec(
                    "SELECT thread FROM group_transcript GROUP BY thread HAVING COUNT(*) > ?", (self.max_messages,))]
                for th in threads:
                    removed += self._exec(
                        "DELETE FROM group_transcript WHERE message_id IN (SELECT message_id FROM group_transcript "
                        "WHERE thread = ? ORDER BY ts DESC, message_id DESC LIMIT -1 OFFSET ?)",
                        (th, self.max_messages)).rowcount
        return removed

    # ------------------------------------------------------------------ read
    def get_recent(self, n: int | None = 20, *, since: datetime | str | float | None = None,
                   thread: str | None = None) -> list[TranscriptMessage]:
        """The last ``n`` messages (all with ``n=None``), or those at or after ``since``; oldest first,
        ordered by timestamp then message id."""
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InvalidInput(f"n must be an integer >= 0 or None, got {n!r}")
        where, params = [], []
        if thread is not None:
            where.append("thread = ?")
            params.append(_label("thread", thread))
        if since is not None:
            where.append("ts >= ?")
            params.append(parse_ts(since, "since").timestamp())
        sql = "SELECT message_id, sender, role, text, ts, thread FROM group_transcript"
        sql += (" WHERE " + " AND ".join(where)) if where else ""
        sql += " ORDER BY ts DESC, message_id DESC" + (f" LIMIT {n}" if n is not None else "")
        with self._lock:
            rows = self._exec(sql, params).fetchall()
        tz = utcnow().tzinfo
        return [TranscriptMessage(r[0], r[1], r[2], r[3], datetime.fromtimestamp(r[4], tz=tz), r[5])
                for r in reversed(rows)]

    def count(self, thread: str | None = None) -> int:
        with self._lock:
            if thread is None:
                return int(self._exec("SELECT COUNT(*) FROM group_transcript").fetchone()[0])
            return int(self._exec("SELECT COUNT(*) FROM group_transcript WHERE thread = ?", (thread,)).fetchone()[0])

    def summary(self, n: int = 20, *, max_tokens: int = 300, thread: str | None = None,
                exclude: tuple[str, ...] = ()) -> str:
        """A compact block of the recent messages for injection into a prompt: one line each
        (``HH:MM sender: text``, long texts cut), the newest kept when the budget runs out."""
        lines: list[str] = []
        used = 0
        for m in reversed(self.get_recent(n, thread=thread)):
            if m.message_id in exclude:
                continue
            text = " ".join(m.text.split())
            line = f"{m.ts:%m-%d %H:%M} {m.sender}: {text[:160] + ('…' if len(text) > 160 else '')}"
            cost = count_tokens(line)
            if used + cost > max_tokens:
                break
            lines.append(line)
            used += cost
        if not lines:
            return ""
        return "Recent group messages:\n" + "\n".join(reversed(lines))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> GroupTranscript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ROLES", "GroupTranscript", "TranscriptMessage", "parse_ts"]
