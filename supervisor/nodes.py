"""The memory nodes of the Supervisor graph: entry, pre-handoff and post-handoff.

Profile and definitions (``ALWAYS_ON``) are searched without a similarity floor — a preference
like "amounts in 万元" is relevant to every report although it resembles no question — while the
agents' own memories (SQL, conclusions, file paths) must be similar to the task to be injected.

* ``memory_entry`` — route the user's message; write the sentences that state a preference or a
  definition; search the Supervisor's namespaces; summarise under the token budget.
* ``memory_pre_<agent>`` — route the handoff task; search ``user_profile/{user}``,
  ``domain_facts/{user}`` and ``{agent}_memories/{user}``; summarise under the budget; the
  result is what the agent gets as a ``SystemMessage``.
* ``memory_post_<agent>`` — route each statement the agent produced (conclusions, SQL, file
  paths); write the ones the router keeps (dedupe/conflict merge happens in ``remember``);
  merge the agent's answer back into the Supervisor's conversation.

Memory is an aid, not a dependency: any failure of a memory step (store down, closed or corrupt,
embedder unreachable, audit log or disk failing) is logged, recorded in ``memory_errors`` and
``memory_log`` (kind ``error``), and the graph goes on without it. Every write is committed to the
write journal first (:mod:`supervisor.journal`); a write that fails stays there and is retried at
the next turn (or by the next process that builds a graph on the store), never lost.

Without a user id, memory is per thread or off (``policy.anonymous``); user ids become labels
injectively (:mod:`memory.policy.identity`).
Every step is recorded as an event in ``memory_log`` and sent on the ``custom`` stream.
"""

from __future__ import annotations

import logging
import re
from contextlib import nullcontext
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from memory.disclosure import ID_CHARS, compact_block
from memory.embeddings import CachedEmbedder
from memory.errors import InvalidConfig, InvalidInput, MemoryLayerError
from memory.namespace import Namespace, ns_key
from memory.policy.audit import AuditEvent
from memory.policy.manager import Actor, MemoryManager
from memory.policy.routing import SHARED_CONTEXT, RouteDecision, agent_namespace, steer_intent
from memory.policy.summarize import summarize as summarize_block
from memory.records import SearchHit, utcnow
from memory.text import count_tokens
from supervisor.context import resolve_now, resolve_user_id
from supervisor.journal import JournalEntry, WriteJournal
from supervisor.router import split_sentences
from supervisor.shared import finding_entries, fit_always_on_first, group_context, shared_top_k
from supervisor.state import SupervisorState
from supervisor.writebehind import Pending, WriteBehind

# Leading connectives carry no content: "另外，GMV 口径是…" is stored as "GMV 口径是…".
_LEAD = re.compile(r"^(?:另外|此外|还有|并且|而且|然后|同时)[，,、:：]\s*|^(?:also|and|plus|btw|by the way)[,:]?\s+", re.I)

log = logging.getLogger("supervisor.memory")

# Namespace kinds searched without a similarity floor (few memories, always relevant): the
# query orders them, top_k and the token budget cut them.
ALWAYS_ON: tuple[str, ...] = ("user_profile", "domain_facts")


def message_text(m: Any) -> str:
    c = getattr(m, "content", m)
    if isinstance(c, str):
        return c
    return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)


def last_user_message(state: SupervisorState) -> str:
    for m in reversed(state.get("messages") or []):
        if isinstance(m, HumanMessage):
            return message_text(m)
    return ""


def _hit(h: SearchHit) -> dict[str, Any]:
    b = h.breakdown
    return {"id": h.record.id, "namespace": ns_key(h.record.namespace), "type": h.record.metadata.type,
            "content": h.record.content, "score": round(b.score, 4), "sim": round(b.sim, 4),
            "vector": round(b.vector, 4), "keyword": round(b.keyword, 4), "decay": round(b.decay, 4),
            "boost": round(b.boost, 4)}


def _decision(d: RouteDecision, text: str) -> dict[str, Any]:
    return {"should_read": d.should_read, "should_write": d.should_write,
            "read_namespaces": [ns_key(n) for n in d.read_namespaces],
            "write_namespace": ns_key(d.write_namespace) if d.write_namespace else None,
            "memory_type": d.memory_type, "top_k": d.top_k, "reason": d.reason, "text": text[:300]}


class _Step:
    """Collects the events and errors of one memory node run; never lets a memory error out."""

    def __init__(self, step: str, agent: str | None, runtime: Runtime[Any] | None, config: RunnableConfig | None,
                 anonymous: str = "thread"):
        self.step, self.agent = step, agent
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.t0 = time.perf_counter()
        self.writer = getattr(runtime, "stream_writer", None)
        ctx = getattr(runtime, "context", None)
        # None: no user id and policy.anonymous says off (or no thread to scope to), or a user id
        # of the wrong type (memory is off for the run; the error says why).
        try:
            self.user_id: str | None = resolve_user_id(ctx, config, anonymous)
        except InvalidInput as exc:
            self.user_id = None
            self.errors.append(f"{step}: {type(exc).__name__}: {exc}")
            log.warning("memory step skipped: %s", exc)
        self.now = resolve_now(ctx)
        conf = (config or {}).get("configurable", {}) or {}
        run_id = (config or {}).get("run_id")
        self.actor = Actor(agent=f"supervisor:{step}" + (f":{agent}" if agent else ""),
                           thread_id=conf.get("thread_id"), run_id=str(run_id) if run_id else None)

    def emit(self, kind: str, **data: Any) -> None:
        ev = {"step": self.step, "agent": self.agent, "user_id": self.user_id, "kind": kind, **data}
        self.events.append(ev)
        if self.writer is not None:
            try:
                self.writer({"memory": ev})
            except Exception:  # noqa: BLE001 - a broken stream consumer must not break the graph
                log.debug("stream writer failed", exc_info=True)

    def guard(self, op: str, fn: Callable[[], Any], default: Any = None) -> Any:
        """``fn()``, or ``default`` after logging and recording the failure.

        Any exception is caught, not only our :class:`MemoryLayerError`: an embedder's
        ``ConnectionError``, a driver's ``OSError`` or a bug in a memory step must not end the
        user's run. LangGraph's own control flow (interrupts, ``GraphBubbleUp``) passes through.
        """
        try:
            return fn()
        except GraphBubbleUp:
            raise
        except Exception as exc:  # noqa: BLE001 - see the docstring
            if not isinstance(exc, MemoryLayerError):
                log.debug("memory step %s raised", op, exc_info=True)
            msg = f"{self.step}{':' + self.agent if self.agent else ''} {op}: {type(exc).__name__}: {exc}"
            log.warning("memory step failed, continuing without it: %s", msg)
            self.errors.append(msg)
            self.emit("error", op=op, error=f"{type(exc).__name__}: {exc}")
            return default

    def update(self, state: SupervisorState, reset: bool = False) -> dict[str, Any]:
        self.emit("timing", ms=round((time.perf_counter() - self.t0) * 1000, 2))
        prev_log = [] if reset else list(state.get("memory_log") or [])
        prev_err = [] if reset else list(state.get("memory_errors") or [])
        return {"memory_log": prev_log + self.events, "memory_errors": prev_err + self.errors}


def _emit_written(s: _Step, res: Any, ns: Namespace, incoming: str, route_reason: str, **extra: Any) -> None:
    s.emit("written", status=res.status, judgement=res.judgement, reason=res.reason, id=res.id,
           namespace=ns_key(ns), content=res.record.content, incoming=incoming,
           superseded=list(res.superseded), evicted=list(res.evicted), route_reason=route_reason, **extra)


_FAILED = object()


def _report(s: _Step, done: list[Pending]) -> None:
    """Report background writes that finished as if this step had made them (events, errors)."""
    for p in done:
        res = s.guard(f"write {ns_key(p.namespace)} (queued by {p.info['origin']})", p.future.result, _FAILED)
        if res is _FAILED:
            if p.info.get("journal"):
                s.emit("retry_queued", namespace=ns_key(p.namespace), incoming=p.info["incoming"],
                       journal=p.info["journal"])
        elif res is not None:
            _emit_written(s, res, p.namespace, p.info["incoming"], p.info["route_reason"],
                          deferred_from=p.info["origin"])


def skipped(s: _Step) -> None:
    """Record that memory is off for this caller (no user id, ``policy.anonymous``)."""
    s.emit("skipped", reason="no user id: memory is off for this caller (policy.anonymous is 'off', "
                             "or there is no thread_id to scope it to); pass context.user_id or configurable.user_id")


def journal_writes(s: _Step, manager: MemoryManager, journal: WriteJournal | None,
                   entries: list[JournalEntry]) -> list[str | None]:
    """Commit ``entries`` to the journal before they are applied; None per entry when the journal
    itself failed (the write is then applied directly, not durable before it lands)."""
    if journal is None or not entries:
        return [None] * len(entries)
    ids = s.guard("journal", lambda: journal.add(entries, redact_pii=manager.settings.policy.pii_redaction))
    if ids is None:
        return [None] * len(entries)
    if not journal.durable and journal.fallback_reason:
        s.emit("warning", op="journal", warning=journal.fallback_reason)
    return list(ids)


def apply_entry(manager: MemoryManager, journal: WriteJournal | None, jid: str | None, e: JournalEntry) -> Any:
    """Apply one write: through the journal when it holds it (deleted once stored), else directly."""
    if journal is not None and jid is not None:
        return journal.apply(jid, manager)
    return manager.remember(e.content, e.namespace, dict(e.metadata), actor=e.actor, now=e.now, reason=e.reason)


def replay_journal(s: _Step, manager: MemoryManager, journal: WriteJournal | None) -> None:
    """Retry the writes an earlier turn, thread or process left in the journal."""
    if journal is None:
        return
    for jid, res, exc in s.guard("journal replay", lambda: journal.replay(manager), []) or []:
        if exc is not None:
            # memory.journal drops an entry the write path refused as bad input: no retry fixes it.
            retry = not (isinstance(exc, InvalidInput) and not isinstance(exc, InvalidConfig))
            fate = "kept in the write journal for a retry" if retry else "dropped from the write journal: not storable"
            msg = f"{s.step} replay {jid}: {type(exc).__name__}: {exc} ({fate})"
            log.warning("memory replay failed: %s", msg)
            s.errors.append(msg)
            s.emit("error", op=f"replay {jid}", error=f"{type(exc).__name__}: {exc}", journal=jid, retry=retry)
        elif res is not None:
            _emit_written(s, res, res.record.namespace, res.record.content, "replayed from the write journal",
                          journal=jid)


def finish_writes(wb: WriteBehind | None, state: SupervisorState, config: RunnableConfig | None,
                  runtime: Runtime[Any] | None) -> dict[str, Any]:
    """End of a turn: wait for every background write and report them (no-op without write-behind)."""
    if wb is None:
        return {}
    s = _Step("end", None, runtime, config)
    _report(s, wb.drain())
    if not s.events and not s.errors:
        return {}
    out = s.update(state)
    out["memory_log"] = [e for e in out["memory_log"] if not (e.get("step") == "end" and e["kind"] == "timing")]
    return out


def _search_always_on(mm: MemoryManager, s: _Step, query: str, nss: list[Namespace], top_k: int) -> list[SearchHit]:
    """Profile and definitions are few and always matter: every memory of these namespaces
    competes (no similarity floor, no relative cut) and the query only orders them. One search
    (one audit row) for all of them; audited and access-checked like ``recall``."""
    mm.access.check(s.actor, "read", nss, now=s.now)
    hits = mm.service.search(query, nss, top_k=top_k * len(nss), min_sim=0.0, now=s.now)
    keys = [ns_key(n) for n in nss]
    s.guard("audit", lambda: mm.audit.record(AuditEvent(
        "search", None, keys[0] if len(keys) == 1 else None, s.actor.agent, s.actor.thread_id, s.actor.run_id,
        reason=query[:500], details={"namespaces": keys, "hits": len(hits), "always_on": True,
                                     "results": [{"id": h.record.id, "score": round(h.score, 4)} for h in hits]},
        ts=s.now or utcnow())))  # a failing audit log must not cost the hits
    return hits


def _recall(mm: MemoryManager, s: _Step, query: str, namespaces: Iterable[Namespace], top_k: int,
            always_on: tuple[str, ...], unranked: tuple[str, ...] = ()) -> list[SearchHit]:
    """``always_on`` kinds in one search without a floor; every other namespace on its own (a
    strong hit in one must not cut another's tail through the relative cut); merged by score.
    ``unranked``: namespace kinds searched without the learned reranker (the others follow
    ``scoring.rerank``)."""
    nss = list(namespaces)
    on = [n for n in nss if n[0] in always_on]
    hits: dict[str, SearchHit] = {}
    if on:
        for h in s.guard("search " + ",".join(ns_key(n) for n in on),
                         lambda: _search_always_on(mm, s, query, on, top_k), []):
            hits.setdefault(h.record.id, h)
    for ns in (n for n in nss if n[0] not in always_on):
        k = shared_top_k(ns, top_k)  # other agents' findings: the best few only (they are long)
        learned = False if ns[0] in unranked else None
        for h in s.guard(f"search {ns_key(ns)}", lambda ns=ns, k=k, learned=learned: mm.recall(
                query, ns, top_k=k, actor=s.actor, now=s.now, use_reranker=learned), []):
            hits.setdefault(h.record.id, h)
    ranked = sorted(hits.values(), key=lambda h: -h.score)
    s.emit("retrieved", query=query[:300], namespaces=[ns_key(n) for n in nss], hits=[_hit(h) for h in ranked])
    return ranked


def _inject(mm: MemoryManager, s: _Step, hits: list[SearchHit], goal: str, budget: int,
            always_on: tuple[str, ...] = ALWAYS_ON) -> str:
    if not hits or budget <= 0:
        s.emit("injected", tokens=0, budget=budget, text="", used=[])
        return ""
    hits = fit_always_on_first(hits, budget, always_on, goal)  # profile/definitions are never crowded out
    if mm.settings.policy.injection == "compact":  # progressive disclosure: one line per memory
        text = compact_block(hits, goal, budget, whole=lambda h: h.record.namespace[0] in always_on)
        used = [h.record.id for h in hits if f" {h.record.id[:ID_CHARS]}]" in text]
        s.emit("injected", tokens=count_tokens(text), budget=budget, text=text, used=used, mode="compact")
        return text
    text = s.guard("summarize", lambda: mm.summarize(hits, goal, budget), "") or ""
    if count_tokens(text) > budget:  # a model summary may overshoot; the deterministic one never does
        text = summarize_block(hits, goal, budget)
    used = [h.record.id for h in hits if h.record.content in text]
    s.emit("injected", tokens=count_tokens(text), budget=budget, text=text, used=used)
    return text


_TURN_RESET: dict[str, Any] = {"artifacts": {}, "plan": None, "pending": [], "active": None, "last_result": None,
                               "handoffs": 0, "agent_errors": [], "agent_context": "", "results": []}


def make_entry_node(manager: MemoryManager, budget: int,
                    always_on: tuple[str, ...] = ALWAYS_ON, write_behind: WriteBehind | None = None,
                    journal: WriteJournal | None = None, transcript: Any = None) -> Callable[..., dict[str, Any]]:
    anonymous = manager.settings.policy.anonymous

    def memory_entry(state: SupervisorState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        s = _Step("entry", None, runtime, config, anonymous)
        if write_behind is not None:  # a new turn starts from a settled store
            _report(s, write_behind.drain())
        replay_journal(s, manager, journal)  # writes a failure or a crash left behind
        text = last_user_message(state)
        turn_reset = dict(_TURN_RESET)
        if s.user_id is None:
            skipped(s)
            return {"memory_context": "", **turn_reset, **s.update(state, reset=True)}
        uid = s.user_id
        decision = s.guard("route", lambda: manager.route(text, uid, role="user"))
        if decision is None:
            return {"memory_context": "", **turn_reset, **s.update(state, reset=True)}
        # The user's own statements are routed and written sentence by sentence, so
        # "以后用万元。查一下华东" stores the preference and not the question.
        writes = [(sentence, d) for sentence in split_sentences(text)
                  for d in [s.guard("route", lambda sentence=sentence: manager.route(sentence, uid, role="user"))]
                  if d is not None and d.should_write and d.write_namespace is not None]
        steering = steer_intent(text)
        if steering is not None:  # "forget that", "remember this for the team": the Supervisor acts on it
            s.emit("steer", intent=steering.kind, text=steering.text)
            writes = []
        routed = _decision(decision, text)
        if writes:
            routed.update(should_write=True,
                          write_namespace=", ".join(dict.fromkeys(ns_key(d.write_namespace) for _, d in writes)),  # type: ignore[arg-type]
                          memory_type=", ".join(dict.fromkeys(str(d.memory_type) for _, d in writes)),
                          reason="; ".join(dict.fromkeys(d.reason for _, d in writes)))
        s.emit("routed", **routed)
        entries = [JournalEntry(d.write_namespace, _LEAD.sub("", sentence).strip() or sentence,  # type: ignore[arg-type]
                                {"type": d.memory_type, "source": "user"}, s.actor, d.reason, s.now)
                   for sentence, d in writes]
        for jid, e, (sentence, d) in zip(journal_writes(s, manager, journal, entries), entries, writes, strict=True):
            res = s.guard("write " + ns_key(e.namespace), lambda jid=jid, e=e: apply_entry(manager, journal, jid, e),
                          _FAILED)
            if res is not _FAILED and res is not None:
                _emit_written(s, res, e.namespace, sentence, d.reason)
            elif res is _FAILED and jid is not None:
                s.emit("retry_queued", namespace=ns_key(e.namespace), incoming=sentence, journal=jid)
        context = ""
        if decision.should_read and text.strip():
            hits = _recall(manager, s, text, decision.read_namespaces, decision.top_k, always_on)
            context = _inject(manager, s, hits, text, budget, always_on)
        if transcript is not None:  # the group's recent messages, from any process (memory.transcript)
            group = group_context(transcript, state, s, config)
            context = "\n\n".join(p for p in (context, group) if p)
        return {"memory_context": context, **turn_reset, **s.update(state, reset=True)}

    return memory_entry


def _query_prefetch(manager: MemoryManager, query: str) -> Callable[[], None] | None:
    """What a pre-node does while its barrier waits: embed the question into the embedder's query
    cache, where the search reads it (the same text, the same vector: results are unchanged). The
    write it waits for runs on the other core meanwhile, and the model's matrix products release
    the GIL, so the ~4 ms of embedding leave the pre-node's critical path when a barrier waits
    (most of its slowest 5% in the 100k handoff bench). None when the embedder keeps no query cache
    (the vector would be computed twice) or there is no question."""
    emb = manager.service.embedder
    text = query.strip() if isinstance(query, str) else ""
    if not text or not isinstance(emb, CachedEmbedder):
        return None

    def prefetch() -> None:
        try:
            emb.embed_query(text)
        except Exception:  # noqa: BLE001 - the search embeds it again and reports the failure there
            log.debug("query prefetch failed", exc_info=True)
    return prefetch


def make_pre_node(manager: MemoryManager, agent: str, budget: int,
                  always_on: tuple[str, ...] = ALWAYS_ON, write_behind: WriteBehind | None = None,
                  ) -> Callable[..., dict[str, Any]]:
    anonymous = manager.settings.policy.anonymous

    def memory_pre(state: SupervisorState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        # Queued writes wait while this node searches (they compete for the same two cores).
        with write_behind.foreground() if write_behind is not None else nullcontext():
            return _pre(state, config, runtime)

    def _pre(state: SupervisorState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        s = _Step("pre", agent, runtime, config, anonymous)
        task = (state.get("active") or {}).get("task") or last_user_message(state)
        if s.user_id is None:
            if write_behind is not None:
                _report(s, write_behind.collect())
            skipped(s)
            return {"agent_context": "", **s.update(state)}
        uid = s.user_id
        decision = s.guard("route", lambda: manager.route(task, uid, role="assistant", agent=agent))
        if decision is None:
            return {"agent_context": "", **s.update(state)}
        s.emit("routed", **_decision(decision, task))
        context = ""
        if write_behind is not None:  # read-your-writes: only the namespaces about to be searched
            _report(s, write_behind.barrier(decision.read_namespaces, meanwhile=_query_prefetch(manager, task))
                    if decision.should_read else write_behind.collect())
        if decision.should_read:
            # policy.rerank_agent_memories off: the agent's own memories (SQL, conclusions, paths) are
            # searched without the learned reranker (fitted on conversation turns; ~3-4 ms of the
            # pre-node's ~25 ms CPU). Profile, definitions and the shared findings always keep it.
            own = () if manager.settings.policy.rerank_agent_memories else (agent_namespace(agent, uid)[0],)
            hits = _recall(manager, s, task, decision.read_namespaces, decision.top_k or manager.settings.scoring.top_k,
                           always_on, own)
            context = _inject(manager, s, hits, task, budget, always_on)
        return {"agent_context": context, **s.update(state)}

    return memory_pre


def make_post_node(manager: MemoryManager, agent: str, write_behind: WriteBehind | None = None,
                   journal: WriteJournal | None = None) -> Callable[..., dict[str, Any]]:
    anonymous = manager.settings.policy.anonymous

    def memory_post(state: SupervisorState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        s = _Step("post", agent, runtime, config, anonymous)
        active = state.get("active") or {}
        result = state.get("last_result") or {}
        if write_behind is not None:
            _report(s, write_behind.collect())
        # Items reported together are distinct statements: the write policy never merges them
        # into each other (see memory.policy.manager._may_merge).
        handoff = uuid.uuid4().hex
        todo: list[tuple[JournalEntry, str]] = []
        items = list(result.get("memory_items") or [])
        if s.user_id is None and items:
            skipped(s)
        for item in items if s.user_id is not None else []:
            uid = s.user_id
            d = s.guard("route", lambda item=item, uid=uid: manager.route(item, uid, role="agent", agent=agent))
            if d is None:
                continue
            s.emit("routed", **_decision(d, item))
            if not d.should_write or d.write_namespace is None:
                continue
            ns = d.write_namespace or agent_namespace(agent, uid)
            meta = {"type": d.memory_type, "source": agent, "agent": agent,
                    "extra": {"task": str(active.get("task", ""))[:300], "handoff": handoff}}
            todo.append((JournalEntry(ns, item, meta, s.actor, d.reason, s.now), d.reason))
        # Findings the next agent needs (definitions, table choices, figures) go to shared_context.
        todo.extend(finding_entries(s, agent, str(active.get("task", "")), result, handoff))
        # Durable before this node returns: a crash from here on loses nothing (replayed on the
        # next open of the store by any process, see supervisor.journal).
        jids = journal_writes(s, manager, journal, [e for e, _ in todo])
        # Queued together, so the worker starts with the urgent ones (not the first submitted).
        with write_behind.batch() if write_behind is not None else nullcontext():
            for jid, (e, why) in zip(jids, todo, strict=True):
                def write(e: JournalEntry = e, jid: str | None = jid) -> Any:
                    return apply_entry(manager, journal, jid, e)
                if write_behind is not None:
                    # Findings run first: the next pre-node reads shared_context (the items go elsewhere).
                    write_behind.submit(e.namespace, write, urgent=e.namespace[:1] == (SHARED_CONTEXT,),
                                        incoming=e.content, route_reason=why, origin=f"post:{agent}", journal=jid)
                    s.emit("queued", namespace=ns_key(e.namespace), incoming=e.content, route_reason=why, journal=jid)
                    continue
                res = s.guard("write " + ns_key(e.namespace), write, _FAILED)
                if res is not _FAILED and res is not None:
                    _emit_written(s, res, e.namespace, e.content, why)
                elif res is _FAILED and jid is not None:
                    s.emit("retry_queued", namespace=ns_key(e.namespace), incoming=e.content, journal=jid)
        # Merge: the agent's answer joins the Supervisor's conversation (as the handoff's tool
        # result when a model asked for it, else as a named AI message).
        text = result.get("text") or f"{agent} returned nothing"
        call_id = active.get("tool_call_id")
        msg = (ToolMessage(text, tool_call_id=call_id, name=f"transfer_to_{agent}") if call_id
               else AIMessage(text, name=agent))
        s.emit("merged", into="messages", as_="tool_result" if call_id else "agent_message", chars=len(text))
        results = list(state.get("results") or []) + [result]
        return {"messages": [msg], "active": None, "results": results, **s.update(state)}

    return memory_post
