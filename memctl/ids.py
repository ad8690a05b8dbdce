"""Memory ids on the command line: a full id or any unique prefix of one.

Tables print the first 12 characters of an id; every command that takes an id (``get``,
``delete``, ``restore``, ``history``) accepts that, or any prefix that names one memory. An
ambiguous prefix is an error that lists the candidates; nothing is guessed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memory.errors import InvalidInput, NotFound

_MAX = 6  # candidates shown when a prefix is ambiguous
_END = "\U0010ffff"


def live_ids(svc: Any, prefix: str, limit: int = _MAX) -> list[str]:
    """Ids of stored memories starting with ``prefix`` (expired rows included; ``get`` then says so)."""
    s = svc.settings
    if s.backend == "sqlite" and s.path != ":memory:":
        try:  # the id column is the primary key: a range scan, without loading any record
            con = sqlite3.connect(f"file:{Path(s.path).expanduser()}?mode=ro", uri=True)
            try:
                rows = con.execute("SELECT id FROM memories WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                                   (prefix, prefix + _END, limit))
                return [r[0] for r in rows]
            finally:
                con.close()
        except sqlite3.Error:
            pass  # another layout: fall back to paging through the records
    found: list[str] = []
    offset = 0
    while len(found) < limit:
        page = svc.backend.scroll(None, limit=1000, offset=offset)
        found += [r.id for r in page if r.id.startswith(prefix)]
        if len(page) < 1000:
            break
        offset += 1000
    return sorted(found)[:limit]


def audit_ids(audit: Any, prefix: str, *, events: bool = True, trash: bool = True, limit: int = _MAX) -> list[str]:
    """Memory ids in the audit log (events and/or trash) starting with ``prefix``."""
    return audit.memory_ids(prefix, events=events, trash=trash, limit=limit)


def resolve_id(prefix: str, candidates: Iterable[str], what: str = "memory") -> str:
    """The one id ``prefix`` names among ``candidates``.

    Raises:
        InvalidInput: the prefix is empty or names several ids (they are listed).
        NotFound: no id starts with it.
    """
    prefix = prefix.strip()
    if not prefix:
        raise InvalidInput("the id is empty; pass a memory id or a prefix of one (`memctl list --ns NS` shows them)")
    ids = sorted(set(candidates))
    if prefix in ids:
        return prefix
    ids = [i for i in ids if i.startswith(prefix)]
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise NotFound(f"no {what} with an id starting with {prefix!r}; `memctl list --ns NS` shows the ids")
    shown = ", ".join(ids[:_MAX - 1]) + (", ..." if len(ids) >= _MAX else "")
    raise InvalidInput(f"id prefix {prefix!r} matches several memories ({shown}); give more characters")


__all__ = ["audit_ids", "live_ids", "resolve_id"]
