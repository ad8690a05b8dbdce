"""Deferred consolidation: a slower, better judge re-examines, off the write path, the pairs the
write-time judge kept apart (what mem0 / LangMem call memory consolidation or background
"reflection").

A write decides at once with the fast judge (:mod:`memory.policy.judge`; p95 within the 25 ms
budget). :meth:`Consolidator.run` (``MemoryManager.consolidate``, ``memctl consolidate``, and the
write-behind worker when a namespace is idle with ``policy.consolidate: idle``) later takes every
current memory written since the namespace's last consolidation, finds its nearest current
neighbours in the same namespace (the write path's candidate search), and re-judges each pair the
fast judge leaves as distinct with the consolidation judge
(:mod:`memory.policy.consolidate_judge`: the fast judge's features + the multilingual-e5-small
cosine). With ``policy.chat_model`` set, the pairs that judge is unsure about are asked of the
model, as on the write path.

Two operating points, both fitted so that the write path and consolidation together merge no
more distinct pairs out of fold than the fast judge alone (``python -m memctl.tune_consolidate``):

* ``policy.consolidate: off`` (default): writes merge at the fast judge's own threshold; a manual
  ``memctl consolidate`` adds merges at the consolidation model's ``merge_threshold``. Out of fold
  this gains almost nothing: the fast judge has spent the false-merge budget already.
* ``policy.consolidate: idle``: writes merge only at a stricter threshold
  (``deferred_write_threshold``) and the write-behind worker consolidates each namespace once it
  is idle, at ``deferred_threshold``: the better judge decides the pairs in between.

What a merge does: the newer memory stays current (for an update, an LLM's merged statement
replaces its text when one was given) and the older one goes to history (``audit_trash``,
restorable with ``memctl restore``), audited as ``merge`` (duplicate) or ``supersede`` (update)
with actor ``consolidate`` and the judge's reason. Nothing is hard-deleted. ``docs/...``
namespaces (read-only collections) are never touched; in ``append`` namespaces a record of another
task only leaves the current set for a true restatement (the write path's rule, ``_may_merge``).

Each namespace keeps a watermark (the (updated_at, id) of the newest memory examined) in the store
file (table ``consolidation_marks``), so a memory is examined once unless it changes; a second run
with nothing new examines nothing. Concurrent writers: both records are read again just before a
merge acts; if either changed or is gone, the pair is skipped (counted), never overwritten.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.backends.sqlite_schema import open_side_db
from memory.errors import BackendUnavailable, InvalidInput, NotFound
from memory.namespace import Namespace, NamespaceLike, ns_key, parse_namespace
from memory.policy.audit import AuditEvent
from memory.policy.judge import Verdict
from memory.policy.merging import Actor, _may_merge, _same_result
from memory.records import MemoryQuery, MemoryRecord, as_now, record_to_dict

if TYPE_CHECKING:
    from memory.policy.consolidate_judge import ConsolidationJudge
    from memory.policy.manager import MemoryManager

log = logging.getLogger(__name__)

CONSOLIDATE_ACTOR = "consolidate"
READ_ONLY_ROOTS = ("docs",)  # markdown collections (memory.collections.DOCS): indexed, never judged
_E5_BATCH = 64


@dataclass
class NamespaceCounts:
    examined: int = 0  # memories written since the last consolidation that were looked at
    pairs: int = 0
    merged_duplicate: int = 0
    superseded_update: int = 0
    kept: int = 0
    skipped_changed: int = 0  # a concurrent writer changed a record between the read and the merge


@dataclass
class ConsolidationReport:
    """What one consolidation pass did. ``seconds`` is wall time; ``e5_encoded`` the texts the e5
    model ran on (vectors not found in the judge-view store or this process)."""

    pairs_examined: int = 0
    merged_duplicate: int = 0
    superseded_update: int = 0
    kept: int = 0
    skipped_changed: int = 0
    memories_examined: int = 0
    namespaces: dict[str, NamespaceCounts] = field(default_factory=dict)
    llm_asked: int = 0
    e5_encoded: int = 0
    seconds: float = 0.0
    dry_run: bool = False
    actions: list[dict[str, Any]] = field(default_factory=list)

    def add(self, ns: str, key: str, n: int = 1) -> None:
        c = self.namespaces.setdefault(ns, NamespaceCounts())
        setattr(c, key, getattr(c, key) + n)
        total = {"examined": "memories_examined", "pairs": "pairs_examined"}.get(key, key)
        setattr(self, total, getattr(self, total) + n)

    def as_dict(self) -> dict[str, Any]:
        return {"pairs_examined": self.pairs_examined, "merged_duplicate": self.merged_duplicate,
                "superseded_update": self.superseded_update, "kept": self.kept,
                "skipped_changed": self.skipped_changed, "memories_examined": self.memories_examined,
                "llm_asked": self.llm_asked, "e5_encoded": self.e5_encoded, "seconds": round(self.seconds, 3),
                "dry_run": self.dry_run,
                "namespaces": {k: vars(v) for k, v in sorted(self.namespaces.items())},
                "actions": self.actions}


class ConsolidationMarks:
    """Per-namespace watermark, ``(updated_at, id)`` of the newest memory examined, in the store file
    (an in-process dict for ``":memory:"``)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._mem: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection | None:
        if self.path == ":memory:":
            return None
        if self._conn is None:
            try:
                conn = open_side_db(self.path)
                conn.execute("CREATE TABLE IF NOT EXISTS consolidation_marks (ns TEXT PRIMARY KEY, "
                             "ts REAL NOT NULL, id TEXT NOT NULL)")
            except sqlite3.Error as exc:
                raise BackendUnavailable(f"consolidation watermark table in {self.path!r}: {exc}") from exc
            self._conn = conn
        return self._conn

    def get(self, ns: str) -> tuple[float, str] | None:
        with self._lock:
            db = self._db()
            if db is None:
                return self._mem.get(ns)
            row = db.execute("SELECT ts, id FROM consolidation_marks WHERE ns = ?", (ns,)).fetchone()
            return (float(row[0]), str(row[1])) if row else None

    def set(self, ns: str, mark: tuple[float, str]) -> None:
        with self._lock:
            db = self._db()
            if db is None:
                self._mem[ns] = mark
                return
            # Never moves back: two passes finishing out of order keep the later mark.
            db.execute("INSERT INTO consolidation_marks (ns, ts, id) VALUES (?, ?, ?) ON CONFLICT(ns) DO UPDATE "
                       "SET ts = excluded.ts, id = excluded.id WHERE (excluded.ts, excluded.id) > (ts, id)",
                       (ns, mark[0], mark[1]))

    def forget(self, namespaces: set[Namespace]) -> int:
        """Drop the marks of these namespaces (forget_user: the table must not keep a user's labels)."""
        keys = [ns_key(n) for n in namespaces]
        with self._lock:
            db = self._db()
            if db is None:
                return sum(self._mem.pop(k, None) is not None for k in keys)
            return sum(db.execute("DELETE FROM consolidation_marks WHERE ns = ?", (k,)).rowcount for k in keys)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _mark(r: MemoryRecord) -> tuple[float, str]:
    return (r.updated_at.timestamp(), r.id)


class Consolidator:
    """One consolidation pass over a :class:`~memory.policy.manager.MemoryManager`'s store."""

    def __init__(self, manager: MemoryManager, judge: ConsolidationJudge):
        self.mm = manager
        self.judge = judge

    # ------------------------------------------------------------------ e5 vectors via the view store
    def _prime_e5(self, ns: Namespace, texts: list[str], report: ConsolidationReport) -> None:
        """e5 vectors of ``texts``: this process, then the judge-view store (tag e5_tag(), owned by
        the text, so hard delete / forget_user / scrub remove them with the other views), then the model."""
        from memory.policy.consolidate_judge import E5_DIM, e5_tag
        from memory.policy.view_store import owner_key, view_key

        vecs = self.judge.vectors
        todo = [t for t in dict.fromkeys(texts) if vecs.have(t) is None]
        if not todo:
            return
        store = self.mm.views.store if self.mm.views.persist else None
        tag = e5_tag()
        keys = {t: view_key(tag, t) for t in todo}
        if store is not None:
            found = store.get(ns, {owner_key(t): {keys[t]} for t in todo}, {k: E5_DIM for k in keys.values()})
            for t in todo:
                v = found.get((owner_key(t), keys[t]))
                if v is not None:
                    vecs.seed(t, v)
        encoded = []
        missing = [t for t in todo if vecs.have(t) is None]
        for i in range(0, len(missing), _E5_BATCH):
            encoded += vecs.ensure(missing[i:i + _E5_BATCH])
        report.e5_encoded += len(encoded)
        if store is not None and encoded:
            store.put(ns, [(keys[t], owner_key(t), vecs.have(t)) for t in encoded])

    # ------------------------------------------------------------------ the pass
    def run(self, namespace_prefix: NamespaceLike | None = None, *, now: datetime | None = None,
            limit: int | None = None, actor: Actor | None = None, dry_run: bool = False) -> ConsolidationReport:
        t0 = time.perf_counter()
        now = as_now(now)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InvalidInput(f"limit must be a positive integer (memories to examine), got {limit!r:.40}")
        # dry_run="false" would be truthy and actor="bot" would fail deep inside with an AttributeError.
        if not isinstance(dry_run, bool):
            raise InvalidInput(f"dry_run must be True or False, got {dry_run!r:.40}")
        if actor is not None and not isinstance(actor, Actor):
            raise InvalidInput(f"actor must be a memory.policy.manager.Actor (e.g. Actor(agent='planner')) or None, "
                               f"got {type(actor).__name__}")
        prefix = parse_namespace(namespace_prefix) if namespace_prefix is not None else None
        report = ConsolidationReport(dry_run=dry_run)
        backend = self.mm.service.backend
        spaces = sorted({ns for ns, _ in backend.namespaces()})
        if prefix is not None:
            spaces = [ns for ns in spaces if ns[:len(prefix)] == prefix]
        spaces = [ns for ns in spaces if ns[0] not in READ_ONLY_ROOTS]
        if spaces:  # None: the operator's housekeeping (CLI, worker), every namespace but docs/
            self.mm.access.check(actor, "write", spaces, now=now)
        actor = actor if actor is not None and actor.agent else Actor(CONSOLIDATE_ACTOR, *(
            (actor.thread_id, actor.run_id) if actor is not None else (None, None)))
        budget = limit
        for ns in spaces:
            if budget is not None and budget <= 0:
                break
            done = self._namespace(ns, now, actor, report, budget, dry_run)
            if budget is not None:
                budget -= done
        report.seconds = time.perf_counter() - t0
        return report

    def _namespace(self, ns: Namespace, now: datetime, actor: Actor, report: ConsolidationReport,
                   budget: int | None, dry_run: bool) -> int:
        backend = self.mm.service.backend
        nsk = ns_key(ns)
        mark = self.mm.consolidation_marks.get(nsk)
        current = [r for r in backend.scroll(ns, limit=10**9) if r.namespace == ns]
        fresh = sorted((r for r in current if mark is None or _mark(r) > mark), key=_mark)
        if budget is not None:
            fresh = fresh[:budget]
        if not fresh:
            return 0
        strategy_of = self.mm._strategy
        gone: set[str] = set()
        seen: set[frozenset[str]] = set()
        for r in fresh:
            report.add(nsk, "examined")
            if r.id in gone:
                continue
            try:  # the stored vector: the write path's own candidate search, no re-embedding
                vec = backend.get_vectors([r.id])[0]
            except NotFound:  # deleted by another writer since the scroll
                continue
            hits = backend.query(MemoryQuery(namespaces=(ns,), vector=np.asarray(vec), text=r.content,
                                             limit=self.mm.policy.neighbours + 1, now=now))
            hits = sorted((h for h in hits if h.record.namespace == ns and h.record.id != r.id
                           and h.record.id not in gone), key=lambda h: -(h.vector_score or 0.0))
            neighbours = [h.record for h in hits[: self.mm.policy.neighbours]]
            pairs = []
            for n in neighbours:
                key = frozenset((n.id, r.id))
                if key in seen:
                    continue
                seen.add(key)
                old, new = (n, r) if (n.created_at, n.id) <= (r.created_at, r.id) else (r, n)
                pairs.append((old, new))
            if not pairs:
                continue
            texts = [t for o, w in pairs for t in (o.content, w.content)]
            self.mm.views.prime(ns, texts)  # the fast judge's views (stored at write time: read, not embedded)
            for old, new in pairs:
                if old.id in gone or new.id in gone:  # merged away earlier in this pass
                    continue
                report.add(nsk, "pairs")
                v = self._judge(old, new, ns, texts, report)
                strategy = strategy_of(new.metadata.type)
                if not (v.merge and _may_merge(old, new, v, strategy)):
                    report.add(nsk, "kept")
                    continue
                if dry_run:
                    gone.add(old.id)
                    report.add(nsk, "merged_duplicate" if v.label == "duplicate" else "superseded_update")
                    report.actions.append(_action(ns, old, new, v, dry_run=True))
                    continue
                if self._act(old, new, v, now, actor):
                    gone.add(old.id)
                    report.add(nsk, "merged_duplicate" if v.label == "duplicate" else "superseded_update")
                    report.actions.append(_action(ns, old, new, v, dry_run=False))
                else:
                    report.add(nsk, "skipped_changed")
        if not dry_run:
            self.mm.consolidation_marks.set(nsk, _mark(fresh[-1]))
        return len(fresh)

    def _judge(self, old: MemoryRecord, new: MemoryRecord, ns: Namespace, texts: list[str],
               report: ConsolidationReport) -> Verdict:
        task = new.metadata.extra.get("task")
        if _same_result(old, new.content, task if isinstance(task, str) else None):
            return Verdict("duplicate", 1.0, True, False, "the same result recorded for a repeated task")
        fast = self.mm.pair_judge(old.content, new.content)
        if fast.merge:  # never compared at write time (bulk import, a neighbour beyond the write's k)
            return fast
        self._prime_e5(ns, texts, report)
        v = self.judge(old.content, new.content)
        llm = self.mm._llm_judge
        if llm is None or not v.unsure:
            return v
        report.llm_asked += 1
        reply = llm.ask(old.content, new.content)
        if reply is None:
            return v
        return Verdict(reply.label, 1.0 if reply.label != "distinct" else 0.0, reply.label != "distinct", False,
                       f"consolidation llm: {reply.reason}" if reply.reason else "consolidation llm", reply.merged)

    def _act(self, old: MemoryRecord, new: MemoryRecord, v: Verdict, now: datetime, actor: Actor) -> bool:
        """Older to history, newer stays current; False (nothing done) if either changed since read."""
        backend = self.mm.service.backend
        fresh = {r.id: r for r in backend.get([old.id, new.id])}
        for r in (old, new):
            got = fresh.get(r.id)
            if got is None or got.updated_at != r.updated_at or got.content != r.content:
                log.info("consolidation skipped %s / %s: changed since read", old.id, new.id)
                return False
        ns = ns_key(old.namespace)
        ev: dict[str, Any] = {"actor": actor.agent or CONSOLIDATE_ACTOR, "thread_id": actor.thread_id,
                              "run_id": actor.run_id}
        after = new
        if v.label == "conflict" and v.merged and v.merged.strip() and v.merged != new.content:
            after = self.mm._replace(new, v.merged.strip(), new.metadata, now,
                                     self.mm.policy.ttl_days.get(new.metadata.type))
        backend.delete([old.id])
        self.mm.audit.trash_put(old, "superseded", f"consolidation: {v.label} of {new.id}: {v.reason}", now)
        self.mm.audit.record(AuditEvent("merge" if v.label == "duplicate" else "supersede", new.id, ns,
                                        reason=f"consolidation {v.label}: {v.reason}", before=record_to_dict(old),
                                        after=record_to_dict(after),
                                        details={"superseded": [old.id], "consolidation": True}, ts=now, **ev))
        return True


def _action(ns: Namespace, old: MemoryRecord, new: MemoryRecord, v: Verdict, *, dry_run: bool) -> dict[str, Any]:
    return {"namespace": ns_key(ns), "kept_id": new.id, "superseded_id": old.id, "label": v.label,
            "p_same": round(v.p_same, 4), "reason": v.reason, "kept": new.content, "superseded": old.content,
            "applied": not dry_run}


__all__ = ["CONSOLIDATE_ACTOR", "ConsolidationMarks", "ConsolidationReport", "Consolidator", "NamespaceCounts"]

