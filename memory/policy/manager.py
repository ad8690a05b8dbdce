"""``MemoryManager``: the policy layer the Supervisor uses (route, dedupe/merge, TTL, capacity,
soft/hard delete, forget-user, audit, PII, summaries) over a :class:`MemoryService`."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

import numpy as np

from memory import scoring
from memory.errors import BackendUnavailable, NotFound
from memory.filters import validate_filter
from memory.namespace import Namespace, NamespaceLike, ns_key, parse_namespace, parse_namespaces
from memory.policy.access import AccessControl
from memory.policy.audit import AuditEvent, AuditLog
from memory.policy.forget import ForgetReport, check_user_label, forget_user, scrub, user_namespaces
from memory.policy.judge import JUDGE_EMBEDDING_MODEL, PairJudge, Verdict
from memory.policy.llm_judge import LLMJudge
from memory.policy.paraphrase import get_paraphrase_scorer
from memory.policy.pii import redact
from memory.policy.routing import LLMRouter, RouteContext, RouteDecision, route
from memory.policy.summarize import summarize, summarize_with_model
from memory.policy.view_cache import JudgeViews, ViewStore, live_texts_of
from memory.records import (
    MEMORY_TYPES,
    MemoryMetadata,
    MemoryQuery,
    MemoryRecord,
    SearchHit,
    as_now,
    record_to_dict,
)
from memory.service import (
    MemoryService,
    NewMemory,
    _metadata,
    check_content_size,
    check_id,
    check_ids,
    clean_content,
)
from memory.settings import MemorySettings

log = logging.getLogger(__name__)

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


class MemoryManager:
    """Policy-aware memory operations. Build with :meth:`from_settings` or from parts.

    Example:
        >>> from memory import MemorySettings
        >>> from memory.policy.manager import MemoryManager
        >>> mm = MemoryManager.from_settings(MemorySettings(path=":memory:"))
        >>> mm.remember("以后报表都用万元为单位", "user_profile/u1").status
        'added'
        >>> mm.remember("From now on, show report amounts in yuan instead", "user_profile/u1").status
        'updated'
        >>> [r.content for r in mm.service.list("user_profile/u1")]
        ['From now on, show report amounts in yuan instead']
        >>> mm.close()
    """

    def __init__(self, service: MemoryService, audit: AuditLog, settings: MemorySettings | None = None,
                 chat_model: Any = None):
        self.service = service
        self.audit = audit
        self.settings = settings or service.settings
        self.policy = self.settings.policy
        self.chat_model = chat_model
        self._llm_router = LLMRouter(chat_model) if chat_model is not None else None
        # English paraphrase signal for the judge (lazy: nothing loads until a pair needs it).
        self._paraphrase = get_paraphrase_scorer(self.policy.paraphrase_model)
        # The fitted offline judge decides every pair; with a chat model, the pairs it is unsure
        # about (P(same fact) near its threshold) are asked of the model (strict JSON).
        # When the store embeds with the judge's model, the judge embeds through the same
        # embedder (one model in memory, one place to inject a different one).
        same = getattr(service.embedder, "name", None) == JUDGE_EMBEDDING_MODEL
        self.pair_judge = PairJudge(paraphrase=self._paraphrase, encoder_id=JUDGE_EMBEDDING_MODEL,
                                    embed=service.embedder.embed_documents if same else None)
        # The judge's view vectors persist beside the store: a neighbour is embedded once, at its
        # own write, not again in every process that meets it (memory.policy.view_cache).
        self.views = JudgeViews(self.pair_judge, ViewStore.for_path(self.settings.path))
        self._llm_judge = LLMJudge(chat_model) if chat_model is not None else None
        # Who may read/write which namespace (settings.acl); checked before every read and write.
        self.access = AccessControl.from_settings(self.settings.acl, audit)

    @classmethod
    def from_settings(cls, settings: MemorySettings | None = None, *, embedder: Any = None,
                      chat_model: Any = None) -> MemoryManager:
        settings = settings or MemorySettings.load()
        svc = MemoryService.from_settings(settings, embedder=embedder)
        # The audit log lives in the same SQLite file as the embedded store (or next to
        # nothing at all for ":memory:"), so copying one file copies memories and history.
        audit = AuditLog(settings.path)
        if chat_model is None and settings.policy.chat_model:
            from langchain.chat_models import init_chat_model

            chat_model = init_chat_model(settings.policy.chat_model)
        return cls(svc, audit, settings, chat_model)

    # ------------------------------------------------------------------ routing
    # Tries of the conditional insert before storing without a further dedupe check.
    GUARD_ATTEMPTS = 8

    def route(self, message: str, user_id: str, *, role: str = "user", agent: str | None = None) -> RouteDecision:
        ctx = RouteContext(user_id=user_id, role=role, agent=agent)  # type: ignore[arg-type]
        if self._llm_router is not None:
            return self._llm_router(message, ctx)
        return route(message, ctx, default_top_k=self.settings.scoring.top_k)

    # ------------------------------------------------------------------ write
    def _strategy(self, mtype: str) -> str:
        return self.policy.strategies.get(mtype, self.policy.default_strategy)

    def _judge(self, existing: MemoryRecord, incoming: str, incoming_task: str | None = None) -> Verdict:
        if _same_result(existing, incoming, incoming_task):
            return Verdict("duplicate", 1.0, True, False, "the same result recorded for a repeated task")
        v = self.pair_judge(existing.content, incoming)
        if self._llm_judge is None or not v.unsure:
            return v
        reply = self._llm_judge.ask(existing.content, incoming)
        if reply is None:  # the offline verdict stands
            return replace(v, reason=f"{v.reason} ({self._llm_judge.last_error})")
        return Verdict(reply.label, 1.0 if reply.label != "distinct" else 0.0, reply.label != "distinct", False,
                       f"llm: {reply.reason}" if reply.reason else "llm", reply.merged)

    def remember(
        self,
        content: str,
        namespace: NamespaceLike,
        metadata: MemoryMetadata | Mapping[str, Any] | None = None,
        *,
        actor: Actor | None = None,
        ttl_days: float | None = None,
        now: datetime | None = None,
        reason: str | None = None,
    ) -> WriteResult:
        """Write with PII redaction, dedupe and conflict merge, TTL and capacity."""
        now = as_now(now)
        check_content_size(content, self.settings.max_content_chars)  # before the PII regexes run
        actor = actor or Actor()
        ns = parse_namespace(namespace)
        self.access.check(actor, "write", [ns], now=now)
        meta = _metadata(metadata)
        if meta.type == "note" and ns[0] in MEMORY_TYPES:
            # Namespaces like user_profile/u1 name their type; use it when none was given.
            meta = meta.model_copy(update={"type": ns[0]})
        redactions: dict[str, int] = {}
        if self.policy.pii_redaction and isinstance(content, str):
            r = redact(content)
            content, redactions = r.text, r.counts
            if r.changed:
                meta = meta.model_copy(update={"extra": {**meta.extra, "redacted": r.counts}})
        if ttl_days is None:
            ttl_days = self.policy.ttl_days.get(meta.type)
        record = self.service.build_record(NewMemory(content, ns, meta, created_at=now, ttl_days=ttl_days), now)
        if self.service.embedder.name == JUDGE_EMBEDDING_MODEL and not record.metadata.extra.get("context"):
            # The store embeds with the judge's own model: one batch gives the stored vector and
            # every view the judge reads of this text, now and when it is a neighbour later.
            self.views.prime(ns, [record.content])
            vec = np.asarray([self.pair_judge.vector(record.content)], dtype=np.float32)
        else:
            vec = self.service.embed_records([record])
        # Dedupe holds across processes: where the backend supports it, the insert below only
        # happens if no memory of this namespace was written since this read (checked inside
        # its write transaction); rows written meanwhile are judged like the neighbours.
        guarded = getattr(self.service.backend, "upsert_if_unchanged", None)
        marker = self.service.backend.change_marker() if guarded is not None else 0
        neighbours = self.service.backend.query(MemoryQuery(
            namespaces=(ns,), vector=vec[0], text=record.content, limit=self.policy.neighbours, now=now))
        neighbours = [n for n in neighbours if n.record.namespace == ns]
        neighbours.sort(key=lambda n: -(n.vector_score or 0.0))
        neighbours = neighbours[: self.policy.neighbours]
        if neighbours:  # one embedding batch for every text the judge reads (cached ones are skipped)
            self.views.prime(ns, [record.content] + [n.record.content for n in neighbours])
        task = record.metadata.extra.get("task")
        task_s = task if isinstance(task, str) else None
        judged = [(n.record, self._judge(n.record, record.content, task_s)) for n in neighbours]
        ev = {"actor": actor.agent, "thread_id": actor.thread_id, "run_id": actor.run_id}
        for _attempt in range(self.GUARD_ATTEMPTS):
            merges = [(r, v) for r, v in judged if v.merge and _may_merge(r, record, v, self._strategy(meta.type))]
            if merges:
                old, v = max(merges, key=lambda rv: rv[1].p_same)
                if v.reason != "same words":
                    # The newest statement of a fact is the current one: an update wins, and a
                    # restatement loses nothing by it (the older wording stays in history).
                    return self._supersede(old, record, v, vec, now, ttl_days, redactions, actor, ev)
                new = self._replace(old, None, _touch_meta(old.metadata, meta, now), now, ttl_days)
                self.audit.record(AuditEvent("skip", old.id, ns_key(ns), reason="duplicate: same words",
                                             details={"incoming": record.content}, ts=now, **ev))
                return WriteResult("skipped", old.id, "duplicate", v.reason, new, redactions=redactions)
            if guarded is None:
                self.service.backend.upsert([record], vec)
                break
            written, changed, marker = guarded([record], vec, namespace=ns, since=marker)
            if written:
                break
            # Another writer stored memories here since our read: judge them too, then retry.
            self.views.prime(ns, [record.content] + [r.content for r in changed])
            changed_ids = {c.id for c in changed}
            judged = [(r, v) for r, v in judged if r.id not in changed_ids] + [
                (r, self._judge(r, record.content, task_s)) for r in changed]
        else:  # the namespace kept changing under us: store rather than lose the memory
            log.warning("namespace %s changed during %d dedupe checks; storing without a further check",
                        ns_key(ns), self.GUARD_ATTEMPTS)
            self.service.backend.upsert([record], vec)

        queued = bool(getattr(self.service.backend, "last_write_queued", False))
        if queued:
            # A retry of a write still pending in the outbox is stored once, under the first id.
            pending = list(getattr(self.service.backend, "last_queued_ids", []) or [record.id])
            if pending[0] != record.id:
                record = record.model_copy(update={"id": pending[0]})
        self.audit.record(AuditEvent("add", record.id, ns_key(ns), reason=reason or "distinct from stored memories",
                                     after=record_to_dict(record),
                                     details={"redactions": redactions} if redactions else {}, ts=now, **ev))
        j_reason = judged[0][1].reason if judged else "no similar memory"
        if queued:
            # The primary is down: the write waits in the durable outbox and is replayed when it
            # is back. Not an error (a retrying caller would queue it twice); capacity is
            # enforced by the next write that reaches the primary.
            return WriteResult("queued", record.id, "distinct", f"primary backend unavailable, queued; {j_reason}",
                               record, redactions=redactions)
        evicted = self._enforce_capacity(ns, now, actor)
        return WriteResult("added", record.id, "distinct", j_reason, record, redactions=redactions, evicted=evicted)

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

    def sweep(self, now: datetime | None = None) -> int:
        """Hard-delete expired memories everywhere; each one is audited."""
        now = as_now(now)
        total = 0
        roots = {ns[:1] for ns, _ in self.service.backend.namespaces()}
        for root in roots:
            expired = self.service.backend.scroll(root, filter={"expires_at": {"$lte": now}}, limit=1_000_000,
                                                  include_expired=True)  # type: ignore[call-arg]
            if not expired:
                continue
            total += self.service.backend.delete([r.id for r in expired])
            for r in expired:
                self.audit.record(AuditEvent("expire", r.id, ns_key(r.namespace), reason="TTL passed",
                                             before=record_to_dict(r), ts=now))
        return total

    # ------------------------------------------------------------------ read
    def recall(
        self,
        query: str,
        namespaces: NamespaceLike | Iterable[NamespaceLike],
        *,
        top_k: int | None = None,
        filter: Mapping[str, Any] | None = None,
        actor: Actor | None = None,
        now: datetime | None = None,
    ) -> list[SearchHit]:
        """Search, drop weak tail hits (relative to the best), audit the search."""
        now = as_now(now)
        self.access.check(actor, "read", parse_namespaces(namespaces), now=now)
        hits = self.service.search(query, namespaces, top_k=top_k, filter=filter, now=now)
        if hits and self.policy.relative_cut > 0:
            best = max(h.breakdown.sim for h in hits)
            hits = [h for h in hits if h.breakdown.sim >= best * self.policy.relative_cut]
        actor = actor or Actor()
        nss = [ns_key(n) for n in parse_namespaces(namespaces)]
        self.audit.record(AuditEvent(
            "search", None, nss[0] if len(nss) == 1 else None, actor.agent, actor.thread_id, actor.run_id,
            reason=query[:500],
            details={"namespaces": nss, "hits": len(hits),
                     "results": [{"id": h.record.id, "score": round(h.score, 4)} for h in hits]}, ts=now))
        return hits

    def list(self, namespace: NamespaceLike, *, limit: int = 100, actor: Actor | None = None) -> list[MemoryRecord]:
        """Memories under a namespace (prefix), newest first; access-checked like ``recall``."""
        self.access.check(actor, "read", [parse_namespace(namespace)])
        return self.service.list(namespace, limit=limit)

    def get(self, id: str, *, actor: Actor | None = None) -> MemoryRecord:
        """One memory by id; an agent asking for another agent's private memory gets AccessDenied."""
        rec = self.service.get(id)
        self.access.check(actor, "read", [rec.namespace])
        return rec

    def summarize(self, hits: Sequence[SearchHit], goal: str = "", max_tokens: int | None = None) -> str:
        budget = self.policy.summary_max_tokens if max_tokens is None else max_tokens
        if self.chat_model is not None:
            return summarize_with_model(self.chat_model, hits, goal, budget)
        return summarize(hits, goal, budget)

    # ------------------------------------------------------------------ update / delete
    def update(self, id: str, content: str | None = None, metadata: Mapping[str, Any] | None = None, *,
               actor: Actor | None = None, reason: str = "explicit update", now: datetime | None = None) -> MemoryRecord:
        now = as_now(now)
        if content is not None:  # validated before the PII regexes run on it
            content = clean_content(content, self.settings.max_content_chars)
        old = self.service.get(id)
        self.access.check(actor, "write", [old.namespace], now=now)
        if content is not None and self.policy.pii_redaction:
            content = redact(content).text
        new = self.service.update(id, content, metadata, now=now)
        actor = actor or Actor()
        self.audit.trash_put(old, "superseded", reason, now) if content is not None and content != old.content else None
        self.audit.record(AuditEvent("update", id, ns_key(old.namespace), actor.agent, actor.thread_id, actor.run_id,
                                     reason, record_to_dict(old), record_to_dict(new), ts=now))
        return new

    def delete(self, ids: str | Sequence[str], *, hard: bool = False, actor: Actor | None = None,
               reason: str = "explicit delete", now: datetime | None = None) -> int:
        """Soft delete (default) keeps a restorable copy in the trash; hard delete keeps nothing."""
        now = as_now(now)
        id_list = check_ids(ids)
        found = self.service.backend.get(id_list)
        self.access.check(actor, "write", {r.namespace for r in found}, now=now)
        n = self.service.backend.delete(id_list)
        actor = actor or Actor()
        if hard:  # the text leaves the audit log, the trash and the file's free pages too
            self.audit.forget_memories([r.id for r in found])
        for r in found:
            if not hard:
                self.audit.trash_put(r, "deleted", reason, now)
            self.audit.record(AuditEvent("delete", r.id, ns_key(r.namespace), actor.agent, actor.thread_id, actor.run_id,
                                         f"{'hard' if hard else 'soft'}: {reason}",
                                         None if hard else record_to_dict(r), None, {"hard": hard}, ts=now))
        if hard and found:
            self.views.purge({r.namespace for r in found}, live_texts_of(self.service.backend))
            scrub(self.service.backend, self.audit)
        return n

    def delete_where(self, namespace: NamespaceLike, filter: Mapping[str, Any] | None = None, *, hard: bool = False,
                     actor: Actor | None = None, reason: str = "delete by filter", now: datetime | None = None) -> int:
        ns = parse_namespace(namespace)
        validate_filter(filter)  # a non-dict filter raised TypeError from dict() below
        records = self.service.backend.scroll(ns, filter=dict(filter) if filter else None, limit=10_000_000)
        if not records:
            return 0
        return self.delete([r.id for r in records], hard=hard, actor=actor, reason=reason, now=now)

    def restore(self, id: str, *, actor: Actor | None = None, now: datetime | None = None) -> MemoryRecord:
        """Bring back a soft-deleted, superseded or evicted memory (same id, re-embedded)."""
        now = as_now(now)
        got = self.audit.trash_get(check_id(id))
        if got is None:
            raise NotFound(f"memory {id!r} is not in the trash (hard-deleted, never existed, or already restored)")
        rec, kind = got
        self.access.check(actor, "write", [rec.namespace], now=now)
        vec = self.service.embed_records([rec])
        self.service.backend.upsert([rec], vec)
        self.audit.trash_remove(id)
        actor = actor or Actor()
        self.audit.record(AuditEvent("restore", id, ns_key(rec.namespace), actor.agent, actor.thread_id, actor.run_id,
                                     f"restored from {kind}", None, record_to_dict(rec), ts=now))
        return rec

    def forget_user(self, user_id: str, *, position: int = 1, actor: Actor | None = None,
                    now: datetime | None = None) -> ForgetReport:
        """Remove every memory, trashed copy and audit text of one user; prove it with counts.

        A user's namespaces are those with ``user_id`` as the label at ``position`` (default 1:
        ``user_profile/u1``, ``text2sql_memories/u1``, ``memories/u1/preferences`` ...); see
        :mod:`memory.policy.forget` for what is removed and what the audit log keeps.
        """
        now = as_now(now)
        targets = user_namespaces(self.service.backend, self.audit, check_user_label(user_id, position), position)
        self.access.check(actor, "write", targets, now=now)  # an agent never erases others' private memory
        report = forget_user(self.service.backend, self.audit, user_id, position=position, actor=actor or Actor(),
                             now=now, views=self.views)
        # Writes the Supervisor journaled but had not applied yet would come back on the next
        # replay: drop them too (memory.journal imports this module, hence the late import).
        from memory.journal import WriteJournal

        journal = WriteJournal.for_store(self.settings.path)
        try:
            journal.forget(report.user_id, position)
        finally:
            journal.close()
        return report

    def close(self) -> None:
        self.service.close()
        self.audit.close()
        self.views.close()

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


