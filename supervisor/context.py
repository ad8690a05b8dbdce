"""Run context of the Supervisor graph, and where the user id comes from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig

from memory.errors import InvalidInput, nearest
from memory.policy.identity import check_user_id, scope_label
from memory.records import as_utc

# Kept for compatibility: this label is no longer used for callers without a user id (their
# memory is per thread, or off: ``policy.anonymous``); a user whose id is "anonymous" has it.
ANONYMOUS = "anonymous"


@dataclass(frozen=True, init=False)
class SupervisorContext:
    """Run dependencies (LangGraph ``context``): who the user is, and optionally the clock.

    ``now`` pins the time of memory writes and searches (replays, demos); None is the wall clock.
    A datetime or an ISO-8601 string. LangGraph builds this from a ``context`` dict, so a
    misspelt key or an unusable ``now`` is refused here, before the run starts.
    """

    user_id: str | None = None
    now: datetime | None = None

    def __init__(self, user_id: str | None = None, now: datetime | str | None = None, **unknown: Any) -> None:
        if unknown:
            key = next(iter(unknown))
            near = nearest(key, ("user_id", "now"), cutoff=0.5)
            raise InvalidInput(f"context has no key {key!r}" + (f"; did you mean {near!r}" if near else "")
                               + "; the Supervisor's context takes user_id and now")
        if now is not None and not isinstance(now, datetime):
            if not isinstance(now, str):
                raise InvalidInput(f"context now must be a datetime or an ISO-8601 string, got {type(now).__name__}")
            try:
                now = as_utc(now)
            except ValueError as exc:
                raise InvalidInput(f"context now: {exc}") from None
        object.__setattr__(self, "user_id", user_id)
        object.__setattr__(self, "now", now)


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def raw_user_id(context: Any, config: RunnableConfig | None) -> str | None:
    """``context.user_id``, else ``configurable.user_id`` / ``langgraph_user_id``; None if none is set.

    Raises:
        InvalidInput: the id in use is neither text nor an integer (:func:`memory.policy.identity.check_user_id`).
    """
    if isinstance(context, str | bytes | int | float | list | tuple):  # not read as "no user": say so
        raise InvalidInput(f"context must be SupervisorContext(user_id=...) or a dict like {{'user_id': 'u1'}}, "
                           f"got {type(context).__name__} {context!r:.40} (memory is off for this run)")
    conf = (config or {}).get("configurable", {}) or {}
    for uid in (_get(context, "user_id"), conf.get("user_id"), conf.get("langgraph_user_id")):
        if uid is None:
            continue
        check_user_id(uid)  # before str(): a dict or bytes id must not become a user named by its repr
        if str(uid).strip():
            return str(uid)
    return None


def resolve_user_id(context: Any, config: RunnableConfig | None, anonymous: str = "thread") -> str | None:
    """The namespace label memory is scoped to for this run, or None when memory is off.

    The user id is escaped, never replaced or truncated (:func:`memory.policy.identity.user_label`):
    ``"team/alice"`` and ``"team_alice"`` are two users. Without a user id, memory is per thread
    (``anonymous="thread"``: ``configurable.thread_id``; no thread id → off) or off (``"off"``).
    """
    conf = (config or {}).get("configurable", {}) or {}
    return scope_label(raw_user_id(context, config), conf.get("thread_id"), anonymous)


def resolve_now(context: Any) -> datetime | None:
    now = _get(context, "now")
    return now if isinstance(now, datetime) else None
