"""Publishing an agent's findings to ``shared_context/{user}`` after a handoff (issue 15).

The post-node calls :func:`finding_entries` once per handoff: the definitions, table choices and
computed figures :func:`memory.policy.findings.findings` draws from the agent's answer are written
through the write policy (dedupe / merge, audit, access rules) into the user's shared context,
where every later pre-node — the next agent of this run, or any agent in a later session —
searches them. With write-behind they are queued like the agent's own items, and the next
pre-node's barrier waits for them (the namespace is one it reads).
"""

from __future__ import annotations

import hashlib
from typing import Any

from memory.errors import InvalidInput
from memory.policy.findings import findings
from memory.policy.manager import MemoryManager
from memory.policy.routing import shared_namespace
from supervisor.journal import JournalEntry


def finding_entries(s: Any, agent: str, task: str, result: dict[str, Any],
                    handoff: str) -> list[tuple[JournalEntry, str]]:
    """The writes (entry, reason) for one agent result's findings. The post node journals and
    applies them with the agent's own items, so they are as durable as those (supervisor.journal)."""
    if result.get("error") or s.user_id is None:
        return []  # a failed step's answer is not a finding; no user, no shared context
    found = findings(agent, task, str(result.get("text") or ""), tuple(result.get("memory_items") or ()))
    ns = shared_namespace(s.user_id)
    out: list[tuple[JournalEntry, str]] = []
    for f in found:
        meta = {"type": f.memory_type, "source": agent, "agent": agent,
                "extra": {"finding": f.kind, "task": task[:300], "handoff": handoff}}
        why = f"shared finding ({f.kind}) from {agent}"
        out.append((JournalEntry(ns, f.text, meta, s.actor, why, s.now), why))
    return out


__all__ = ["finding_entries"]


def group_context(transcript: Any, state: dict[str, Any], s: Any, config: Any, *, n: int = 20,
                  max_tokens: int = 200) -> str:
    """Entry node, with a :class:`memory.transcript.GroupTranscript`: append the user's message to
    the group's transcript (thread = ``configurable.group_id``, else the LangGraph thread) and
    return the compact block of the *other* recent messages, written by any process."""
    from langchain_core.messages import HumanMessage

    conf = (config or {}).get("configurable", {}) or {}
    group = str(conf.get("group_id") or conf.get("thread_id") or "main")
    last = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
    mine: tuple[str, ...] = ()
    if last is not None and str(last.content).strip():
        # LangGraph gives every message an id; the fallback must be the same in every process
        # (``hash()`` is salted per process), so a relayed copy still dedupes.
        mid = str(last.id or f"{group}:{hashlib.sha1(str(last.content).encode()).hexdigest()[:20]}")
        s.guard("transcript append", lambda: transcript.append(mid, s.user_id, "user", str(last.content),
                                                               ts=s.now, thread=group))
        mine = (mid,)
    text = s.guard("transcript read", lambda: transcript.summary(n, max_tokens=max_tokens, thread=group,
                                                                 exclude=mine), "") or ""
    s.emit("group_transcript", thread=group, text=text)
    return text


def steer_offline(mm: MemoryManager, intent: Any, state: dict[str, Any], config: Any, runtime: Any) -> str:
    """The no-model Supervisor carrying out a steering request (:mod:`memory.policy.steer`)."""
    from langchain_core.messages import HumanMessage

    from memory.policy.manager import Actor
    from memory.policy.steer import steer
    from supervisor.context import resolve_now, resolve_user_id

    ctx = getattr(runtime, "context", None)
    conf = (config or {}).get("configurable", {}) or {}
    run_id = (config or {}).get("run_id")
    actor = Actor(agent="supervisor:steer", thread_id=conf.get("thread_id"), run_id=str(run_id) if run_id else None)
    humans = [str(m.content) for m in state.get("messages") or [] if isinstance(m, HumanMessage)]
    try:
        user = resolve_user_id(ctx, config)
    except InvalidInput as exc:  # a user id of the wrong type: answer, do not break the run
        return f"Memory is off for this run: {exc}"
    return steer(mm, intent, user, actor, message=humans[-1] if humans else "",
                 previous_user_message=humans[-2] if len(humans) > 1 else "", now=resolve_now(ctx))


def run_memory_tool(tool: Any, call: dict[str, Any], config: Any) -> Any:
    """Run one memory tool call of the Supervisor's model; always a ToolMessage (errors as text)."""
    from langchain_core.messages import ToolMessage
    from pydantic import ValidationError

    try:
        out = tool.invoke({"name": call["name"], "args": call.get("args") or {}, "id": call["id"],
                           "type": "tool_call"}, config)
    except ValidationError as exc:  # the model's arguments: one short line per argument, no pydantic URL
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                             for e in exc.errors()[:5])
        return ToolMessage(f"ERROR: {call['name']}: bad arguments: {problems}; call it again with valid arguments",
                           tool_call_id=call["id"], name=call["name"], status="error")
    except Exception as exc:  # noqa: BLE001 - bad arguments from the model: tell it, do not crash the turn
        return ToolMessage(f"ERROR: {call['name']}: {type(exc).__name__}: {exc}", tool_call_id=call["id"],
                           name=call["name"], status="error")
    if isinstance(out, ToolMessage):
        return out
    return ToolMessage(str(out), tool_call_id=call["id"], name=call["name"])


def fit_always_on_first(hits: list[Any], budget: int, always_on: tuple[str, ...], goal: str = "") -> list[Any]:
    """The hits an injection under ``budget`` tokens should consider, with profile and definitions
    (``always_on`` kinds) guaranteed a place: when everything does not fit, shared findings go
    first, then the lowest-scored of the step's own memories (agents' SQL, conclusions — often long).
    Without this, three long findings can crowd the user's standing preference out of the budget.
    The cost of a memory is estimated like the summary's bullet line (content + a date/type/source tag)."""
    from memory.text import count_tokens

    def cost(h: Any) -> int:
        return count_tokens(h.record.content) + 16

    total = count_tokens(goal) + 8 + sum(cost(h) for h in hits)
    if total <= budget:
        return hits
    first = [h for h in hits if h.record.namespace[0] in always_on]
    used = count_tokens(goal) + 8 + sum(cost(h) for h in first)
    keep = {id(h) for h in first}
    # Then the step's own memories (its SQL, conclusions), then what other agents shared: a
    # finding is a second-hand copy, and in the demo two long ones crowded out last week's SQL.
    from memory.policy.routing import SHARED_CONTEXT

    rest = (h for h in hits if id(h) not in keep)
    for h in sorted(rest, key=lambda h: (h.record.namespace[0] == SHARED_CONTEXT, -h.score)):
        if used + cost(h) <= budget:
            keep.add(id(h))
            used += cost(h)
    return [h for h in hits if id(h) in keep]


# Findings other agents shared (shared_context) injected per search: the best few. Findings are
# long (SQL filters, computed figures): in the demo (full injection) they raised the mean tokens
# injected per handoff from 162 to 248 with the full top_k, 235 with this cap (entry node 194 -> 172).
SHARED_TOP_K = 2


def shared_top_k(ns: tuple[str, ...], top_k: int) -> int:
    from memory.policy.routing import SHARED_CONTEXT

    return min(top_k, SHARED_TOP_K) if ns and ns[0] == SHARED_CONTEXT else top_k
