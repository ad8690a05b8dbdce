"""Run context of the Supervisor graph, and where the user id comes from."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig

ANONYMOUS = "anonymous"
_BAD = re.compile(r"[/\x00-\x1f]+")


@dataclass(frozen=True)
class SupervisorContext:
    """Run dependencies (LangGraph ``context``): who the user is, and optionally the clock.

    ``now`` pins the time of memory writes and searches (replays, demos); None is the wall clock.
    """

    user_id: str | None = None
    now: datetime | None = None


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def resolve_user_id(context: Any, config: RunnableConfig | None) -> str:
    """``context.user_id``, else ``configurable.user_id`` / ``langgraph_user_id``, else anonymous.

    The id becomes a namespace label, so separators and control characters are replaced.
    """
    conf = (config or {}).get("configurable", {}) or {}
    uid = _get(context, "user_id") or conf.get("user_id") or conf.get("langgraph_user_id")
    text = _BAD.sub("_", str(uid).strip()) if uid is not None else ""
    return text[:128] or ANONYMOUS


def resolve_now(context: Any) -> datetime | None:
    now = _get(context, "now")
    return now if isinstance(now, datetime) else None
