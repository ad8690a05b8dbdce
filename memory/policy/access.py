"""Enforcing the access rules (:mod:`memory.policy.acl`): raise :class:`AccessDenied` and audit it.

:class:`MemoryManager` calls :meth:`AccessControl.check` before every read and write; the
LangGraph store view (:meth:`memory.store.MemoryStore.for_actor`) and the Supervisor's
always-on search do the same. A denial writes one ``deny`` row to the audit log (actor, thread,
run, namespace, operation, why) before the error is raised, so nothing is read or written and
every attempt is on record.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory.errors import AccessDenied
from memory.namespace import Namespace, ns_key
from memory.policy.acl import AccessPolicy, Decision, KindRule, Op, check_all, principal, readable
from memory.policy.audit import AuditEvent, AuditLog
from memory.records import utcnow

if TYPE_CHECKING:
    from memory.settings import AclSettings


def policy_from_settings(acl: AclSettings) -> AccessPolicy:
    rules = {k: KindRule(tuple(r.read), tuple(r.write)) for k, r in acl.kinds.items()}
    return AccessPolicy(acl.enabled, rules, acl.unlisted, tuple(acl.operators))


class AccessControl:
    """The access rules bound to an audit log."""

    def __init__(self, policy: AccessPolicy, audit: AuditLog | None = None):
        self.policy = policy
        self.audit = audit

    @classmethod
    def from_settings(cls, acl: AclSettings, audit: AuditLog | None = None) -> AccessControl:
        return cls(policy_from_settings(acl), audit)

    def who(self, actor: Any) -> str:
        """The principal of an :class:`~memory.policy.manager.Actor` (or None: the operator)."""
        return principal(getattr(actor, "agent", None), self.policy.operators)

    def check(self, actor: Any, op: Op, namespaces: Iterable[Namespace], *, now: datetime | None = None) -> None:
        """Raise :class:`AccessDenied` (after auditing it) unless ``actor`` may ``op`` every namespace."""
        if not self.policy.enabled:
            return
        who = self.who(actor)
        denied = check_all(self.policy, who, op, list(namespaces))
        if denied:
            self._deny(actor, denied, now)

    def may_read(self, actor: Any, ns: Namespace) -> bool:
        return readable(self.policy, self.who(actor), ns)

    def _deny(self, actor: Any, denied: list[Decision], now: datetime | None) -> None:
        if self.audit is not None:
            for d in denied:
                self.audit.record(AuditEvent(
                    "deny", None, ns_key(d.namespace) if d.namespace else None, getattr(actor, "agent", None),
                    getattr(actor, "thread_id", None), getattr(actor, "run_id", None), reason=d.reason,
                    details={"op": d.op, "principal": d.principal}, ts=now or utcnow()))
        reasons = "; ".join(dict.fromkeys(d.reason for d in denied))
        raise AccessDenied(
            f"access denied: {reasons}. Read and write only the namespaces the access rules give this agent "
            "(settings acl.kinds, configs/default.yaml); shared findings belong in shared_context/<user>.",
            tuple(denied))


__all__ = ["AccessControl", "policy_from_settings"]
