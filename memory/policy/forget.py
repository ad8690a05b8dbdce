"""Forgetting: ``forget_user`` and the scrubbing a hard delete needs, so deleted text leaves the file.

A user's namespaces are those whose label at ``position`` (default 1, the second label:
``user_profile/u1``, ``text2sql_memories/u1``, ``memories/u1/preferences``) is the user id; a
label equal to the user id anywhere else does not count (``forget_user("preferences")`` used to
delete ``memories/u2/preferences``).

What is removed: the memories (rows, vectors, keyword entries), their trashed copies, and the
text of every audit event of those namespaces or memories — also searches over several
namespaces (logged with no namespace) and namespaces that no longer hold a memory. Events keep
their sequence number, time, action and memory id, so the log still shows that something
happened. Afterwards the backend is scrubbed (SQLite: the FTS index is merged so no deleted term
remains, freed pages are zeroed by ``secure_delete``, the WAL is checkpointed and truncated).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory.errors import InvalidInput, InvalidNamespace
from memory.namespace import MAX_DEPTH, Namespace, ns_key, parse_namespace
from memory.policy.audit import AuditEvent, AuditLog

if TYPE_CHECKING:
    from memory.backend import MemoryBackend


@dataclass(frozen=True)
class ForgetReport:
    user_id: str
    namespaces: tuple[str, ...]
    deleted: int
    residue: dict[str, int]

    @property
    def clean(self) -> bool:
        return all(v == 0 for v in self.residue.values())


def check_user_label(user_id: object, position: int) -> str:
    """A user id usable as a namespace label at ``position``.

    Raises:
        InvalidInput: not a non-empty label, or ``position`` is not 1..MAX_DEPTH-1.
    """
    if isinstance(position, bool) or not isinstance(position, int) or not 1 <= position < MAX_DEPTH:
        raise InvalidInput(f"position must be an integer from 1 to {MAX_DEPTH - 1} (the label's index "
                           f"in the namespace; 1 for user_profile/<user>), got {position!r}")
    if not isinstance(user_id, str):
        raise InvalidInput(f"user_id must be a string, got {type(user_id).__name__}")
    try:
        parse_namespace(("user", user_id))
    except InvalidNamespace as exc:
        raise InvalidInput(f"user_id {user_id!r:.60} is not a namespace label: {exc}") from exc
    return user_id


def scrub(backend: Any, audit: AuditLog) -> None:
    """Make deletions physical where the backend can (SQLite: FTS merge, zeroed pages, WAL truncated)."""
    fn = getattr(backend, "scrub", None)
    if callable(fn):
        fn()
    audit.scrub()


def user_namespaces(backend: MemoryBackend, audit: AuditLog, user_id: str, position: int) -> list[Namespace]:
    """The namespaces of a user, live or only mentioned in the audit log / trash."""
    live = {ns for ns, _ in backend.namespaces() if len(ns) > position and ns[position] == user_id}
    return sorted(live | audit.namespaces_with_label(user_id, position))


def forget_user(backend: MemoryBackend, audit: AuditLog, user_id: str, *, position: int = 1,
                actor: Any = None, now: datetime, views: Any = None) -> ForgetReport:
    """Remove every memory, trashed copy and audit text of one user; prove it with residue counts.

    ``views`` (:class:`memory.policy.view_cache.JudgeViews`): the judge's stored view vectors of
    the user's namespaces go too (vectors of the deleted texts are derived data)."""
    user_id = check_user_label(user_id, position)
    targets = user_namespaces(backend, audit, user_id, position)
    live = {ns for ns, _ in backend.namespaces()}
    deleted = 0
    ids: list[str] = []
    for ns in targets:
        if ns in live:
            ids += [r.id for r in backend.scroll(ns, limit=10**9, include_expired=True)]  # type: ignore[call-arg]
            deleted += backend.delete(namespace=ns)
    audit.forget_namespaces(targets, ids)
    if views is not None:  # before the scrub, which truncates the WAL holding the deleted rows
        views.forget(targets, user_id, position)
    scrub(backend, audit)
    residue: dict[str, int] = {"rows": 0, "vectors": 0, "keyword_entries": 0, "audit_events": 0, "trash": 0}
    if views is not None and views.store is not None:
        residue["judge_views"] = views.store.count(targets)
    backend_residue = getattr(backend, "residue", None)
    for ns in targets:
        for k, v in audit.residue(ns).items():
            residue[k] += v
        if callable(backend_residue):
            for k, v in backend_residue(ns).items():
                residue[k] = residue.get(k, 0) + v
        else:
            residue["rows"] += backend.count(ns, include_expired=True)  # type: ignore[call-arg]
    # One event without content survives, so the deletion itself is auditable.
    audit.record(AuditEvent("forget_user", None, None, getattr(actor, "agent", None), getattr(actor, "thread_id", None),
                            getattr(actor, "run_id", None), f"forget user (deleted {deleted})",
                            details={"namespaces_count": len(targets), "deleted": deleted}, ts=now))
    return ForgetReport(user_id, tuple(ns_key(n) for n in targets), deleted, residue)


__all__ = ["ForgetReport", "check_user_label", "forget_user", "scrub", "user_namespaces"]
