"""The write path's merge mechanics, split from :mod:`memory.policy.manager` (which decides what a
write is; this module carries it out): supersede a stored memory by a newer statement (in place or
into history), rewrite one in place, the summarise-merge, and the capacity cap's eviction.

``MergeOps`` is a mixin of :class:`memory.policy.manager.MemoryManager`; it reads the manager's
``service``, ``audit``, ``settings``, ``policy`` and ``chat_model``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from memory import scoring
from memory.errors import BackendUnavailable, NotFound
from memory.namespace import Namespace, ns_key
from memory.policy.audit import AuditEvent, AuditLog
from memory.policy.judge import Verdict
from memory.records import MemoryMetadata, MemoryRecord, record_to_dict

if TYPE_CHECKING:
    from memory.service import MemoryService
    from memory.settings import MemorySettings, PolicySettings

log = logging.getLogger("memory.policy.manager")

# "queued": the primary backend was down and the write waits in the durable outbox.
Status = Literal["added", "merged", "updated", "skipped", "queued"]


@dataclass(frozen=True)
class Actor:
    """Who acts, for the audit log."""

    agent: str | None = None
    thread_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class WriteResult:
    status: Status
    id: str
    judgement: str  # duplicate | conflict | distinct
    reason: str
    record: MemoryRecord
    superseded: tuple[str, ...] = ()
    redactions: dict[str, int] = field(default_factory=dict)
    evicted: tuple[str, ...] = ()


def _touch_meta(meta: MemoryMetadata, incoming: MemoryMetadata, now: datetime) -> MemoryMetadata:
    extra = dict(meta.extra)
    extra["seen_count"] = int(extra.get("seen_count", 1) or 1) + 1  # type: ignore[call-overload]
    extra["last_seen"] = now.isoformat()
    tags = tuple(dict.fromkeys(meta.tags + incoming.tags))
    return meta.model_copy(update={"extra": extra, "tags": tags})


def _may_merge(old: MemoryRecord, new: MemoryRecord, v: Verdict, strategy: str) -> bool:
    """Whether a merge verdict may act on this pair, by what the records say they belong to.

    * Statements one agent reported in the same handoff (same ``extra.handoff``) are distinct
      by construction — a report path never replaces the conclusion written beside it.
    * In ``append`` namespaces (task traces, tool effects) a record belongs to its task
      (``extra.task``): a record of another task never supersedes it as an update (a South
      China GMV query does not replace the East China one); only a restatement (the same SQL
      asked again) is folded into it.
    """
    a, b = old.metadata.extra, new.metadata.extra
    if a.get("handoff") and a.get("handoff") == b.get("handoff"):
        return False
    if strategy == "append" and a.get("task") and b.get("task") and a.get("task") != b.get("task"):
        return v.label == "duplicate"
    return True


def _same_result(old: MemoryRecord, incoming: str, incoming_task: str | None) -> bool:
    """An agent's item restated for another wording of its task: the same text once each task
    is taken out ("SQL used for “<task>”: SELECT ..." twice with the same SELECT)."""
    old_task = old.metadata.extra.get("task")
    if not (incoming_task and isinstance(old_task, str) and old_task and old_task != incoming_task):
        return False
    a = old.content.replace(old_task.strip()[:200], "")
    b = incoming.replace(incoming_task.strip()[:200], "")
    return a != old.content and b != incoming and a.strip() == b.strip()


class MergeOps:
    """Supersede / replace / merge / evict for :class:`~memory.policy.manager.MemoryManager`."""

    service: MemoryService
    audit: AuditLog
    settings: MemorySettings
    policy: PolicySettings
    chat_model: Any

    def _strategy(self, mtype: str) -> str:
        return self.policy.strategies.get(mtype, self.policy.default_strategy)

    def _supersede(self, old: MemoryRecord, record: MemoryRecord, v: Verdict, vec: Any, now: datetime,
                   ttl_days: float | None, redactions: dict[str, int], actor: Actor, ev: dict[str, Any]
                   ) -> WriteResult:
        """The incoming statement becomes current; the stored one goes to history (restorable).

        ``overwrite`` / ``summarize`` rewrite the stored memory in place (same id; ``summarize``
        keeps the stored details an LLM says do not contradict); ``append`` adds the new record
        and moves the old one to history."""
        ns = old.namespace
        strategy = self._strategy(record.metadata.type)
        status: Status = "updated" if v.label == "conflict" else "merged"
        if strategy in ("overwrite", "summarize"):
            merged = v.merged or (self._merge_conflict(old, record) if strategy == "summarize" else record.content)
            self.audit.trash_put(old, "superseded", f"{v.label}: {v.reason}", now)
            meta = record.metadata
            if v.label == "duplicate":  # the same fact seen again: carry its count and tags over
                seen = _touch_meta(old.metadata, meta, now)
                meta = meta.model_copy(update={"tags": seen.tags, "extra": {
                    **meta.extra, "seen_count": seen.extra["seen_count"], "last_seen": seen.extra["last_seen"]}})
            new = self._replace(old, merged, meta, now, ttl_days, vec if merged == record.content else None)
            self.audit.record(AuditEvent("update" if v.label == "conflict" else "merge", old.id, ns_key(ns),
                                         reason=f"{v.label} ({strategy}): {v.reason}",
                                         before=record_to_dict(old), after=record_to_dict(new),
                                         details={"incoming": record.content}, ts=now, **ev))
            return WriteResult(status, old.id, v.label, v.reason, new, (old.id,), redactions)
        # append: the new record is added; the old one leaves the current set for history.
        self.service.backend.upsert([record], vec)
        self.service.backend.delete([old.id])
        self.audit.trash_put(old, "superseded", f"superseded by {record.id}: {v.reason}", now)
        self.audit.record(AuditEvent("supersede", record.id, ns_key(ns), reason=f"{v.label} (append): {v.reason}",
                                     before=record_to_dict(old), after=record_to_dict(record),
                                     details={"superseded": [old.id]}, ts=now, **ev))
        evicted = self._enforce_capacity(ns, now, actor)
        return WriteResult("added", record.id, v.label, v.reason, record, (old.id,), redactions, evicted)

    def _replace(self, old: MemoryRecord, content: str | None, meta: MemoryMetadata, now: datetime,
                 ttl_days: float | None, vec: Any = None) -> MemoryRecord:
        """Rewrite a stored memory in place (same id and created_at), renewing its TTL.

        Works from the record we already hold rather than re-reading it, so an explicit
        ``now`` (replays, evaluations) is honoured end to end.
        """
        text = old.content if content is None else content
        new = old.model_copy(update={
            "content": text, "metadata": meta, "updated_at": now,
            "expires_at": now + timedelta(days=ttl_days) if ttl_days is not None else None,
        })
        if content is None:  # same text: keep its stored vector rather than embed it again
            try:
                vec = self.service.backend.get_vectors([old.id])
            except NotFound:  # deleted meanwhile: upsert re-creates it
                vec = None
        if vec is None:
            vec = self.service.embed_records([new])
        self.service.backend.upsert([new], vec)
        return new

    def _merge_conflict(self, old: MemoryRecord, new: MemoryRecord) -> str:
        """Summarise-merge: the new value wins. With a chat model, details of the old one that
        do not contradict are kept; without one, the new statement replaces the old."""
        if self.chat_model is None:
            return new.content
        try:
            msg = self.chat_model.invoke(
                "Merge two memories about the same thing into one sentence. The NEW one wins on "
                "every point they disagree on; keep non-conflicting details of the OLD one. "
                f"Answer with the merged sentence only.\nOLD: {old.content}\nNEW: {new.content}"
            )
            text = str(getattr(msg, "content", "")).strip()
            return text or new.content
        except Exception as exc:  # noqa: BLE001 - the deterministic merge always works
            log.warning("LLM merge failed, keeping the new statement: %s", exc)
            return new.content

    # ------------------------------------------------------------------ capacity / TTL
    def _value(self, r: MemoryRecord, now: datetime) -> float:
        cfg = self.settings.scoring
        d = scoring.decay(scoring.age_days(r, now), cfg.decay_lambda)
        b = scoring.boost(r, cfg.type_boosts, cfg.source_boosts)
        return cfg.beta * d + cfg.gamma * b + 1e-3 * math.log1p(int(r.metadata.extra.get("seen_count", 1) or 1))  # type: ignore[arg-type]

    def _enforce_capacity(self, ns: Namespace, now: datetime, actor: Actor) -> tuple[str, ...]:
        cap = self.policy.capacity_per_namespace
        # Every write ends here: skip the COUNT query when an in-memory upper bound (rows under
        # the prefix, expired ones included) already shows the namespace is under its cap.
        size_hint = getattr(self.service.backend, "size_hint", None)
        if size_hint is not None and size_hint(ns) <= cap:
            return ()
        try:
            n = self.service.backend.count(ns)
        except BackendUnavailable as exc:
            # The write itself succeeded; raising now would make the caller retry it (a
            # duplicate). The next write enforces the cap.
            log.warning("capacity check of %s skipped, backend unavailable: %s", ns_key(ns), exc)
            return ()
        if n <= cap:
            return ()
        records = self.service.backend.scroll(ns, limit=n)
        records = [r for r in records if r.namespace == ns]
        victims = sorted(records, key=lambda r: (self._value(r, now), r.updated_at))[: n - cap]
        ids = [r.id for r in victims]
        self.service.backend.delete(ids)
        for r in victims:
            self.audit.trash_put(r, "evicted", f"capacity {cap} of {ns_key(ns)}", now)
            self.audit.record(AuditEvent("evict", r.id, ns_key(ns), actor=actor.agent, thread_id=actor.thread_id,
                                         run_id=actor.run_id, reason=f"capacity {cap}: lowest decayed value",
                                         before=record_to_dict(r), ts=now))
        return tuple(ids)
