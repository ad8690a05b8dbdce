"""LangChain tools for the Supervisor: memory_search / write / update / delete / route / summarize,
and for memory the user steers: memory_list ("what do you remember about me"), memory_restore
(undo a forget), memory_share ("remember this for the whole team").

Namespaces are filled from the graph's user id (``configurable.user_id`` or
``configurable.langgraph_user_id``, else ``context.user_id``); the model never chooses a user.
The id becomes a label injectively (:func:`memory.policy.identity.user_label`: ``"team/alice"``
and ``"team_alice"`` are two users). Without a user id, memory is per thread or off
(``policy.anonymous``); there is no shared anonymous namespace.
Only the Supervisor gets these tools; sub-agents receive injected context instead.
"""

from __future__ import annotations

import json
from typing import Literal

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool

from memory.errors import MemoryLayerError
from memory.policy.identity import scope_label
from memory.policy.manager import Actor, MemoryManager
from memory.policy.routing import read_namespaces, shared_namespace
from memory.policy.steer import user_namespaces

ANONYMOUS = "anonymous"  # kept for compatibility; no longer a shared namespace (see scope_label)
OFF = ("memory is off for this caller: no user id (pass configurable.user_id or context.user_id; "
       "policy.anonymous 'thread' keeps per-thread memory when a thread_id is set)")
MemoryType = Literal["user_profile", "domain_facts", "task_traces", "tool_effects"]


def user_id_from_config(config: RunnableConfig | None, anonymous: str = "thread") -> str | None:
    """The namespace label of the caller (escaped user id, or the thread's), None = memory off."""
    conf = (config or {}).get("configurable", {}) or {}
    uid = conf.get("user_id") or conf.get("langgraph_user_id")
    if not uid:
        ctx = conf.get("__pregel_runtime")
        uid = getattr(getattr(ctx, "context", None), "user_id", None)
    return scope_label(uid, conf.get("thread_id"), anonymous)


def _actor_of(config: RunnableConfig | None, who: str = "supervisor") -> Actor:
    conf = (config or {}).get("configurable", {}) or {}
    return Actor(agent=who, thread_id=conf.get("thread_id"), run_id=str((config or {}).get("run_id") or "") or None)


def _ns(mtype: str, uid: str, agent: str | None = None) -> tuple[str, str]:
    if mtype in ("user_profile", "domain_facts"):
        return (mtype, uid)
    return (f"{agent or 'supervisor'}_memories", uid)


def make_memory_tools(manager: MemoryManager, *, acting_for: str = "supervisor") -> list[BaseTool]:
    """Tools bound to one manager. Errors come back as text the model can act on.

    ``acting_for`` is the actor label the access rules (settings.acl) judge every call by: the
    Supervisor by default; ``"agent:<name>"`` gives tools that can reach only what that agent may."""
    mode = manager.settings.policy.anonymous

    def who(config: RunnableConfig | None) -> str | None:
        return user_id_from_config(config, mode)

    def _actor(config: RunnableConfig | None) -> Actor:  # every call acts for ``acting_for``
        return _actor_of(config, acting_for)

    @tool
    def memory_search(query: str, config: RunnableConfig, top_k: int = 5, agent: str | None = None) -> str:
        """Search the user's long-term memory (profile, facts, and an agent's memories). Returns JSON hits."""
        uid = who(config)
        if uid is None:
            return OFF
        try:
            hits = manager.recall(query, read_namespaces(uid, agent), top_k=top_k, actor=_actor(config))
        except MemoryLayerError as exc:
            return f"memory_search failed: {exc}"
        return json.dumps([{"id": h.record.id, "content": h.record.content, "type": h.record.metadata.type,
                            "score": round(h.score, 3)} for h in hits], ensure_ascii=False)

    @tool
    def memory_write(content: str, memory_type: MemoryType, config: RunnableConfig, agent: str | None = None) -> str:
        """Remember something durable about the user: a preference, a definition, a conclusion, SQL or a file path."""
        uid = who(config)
        if uid is None:
            return OFF
        try:
            res = manager.remember(content, _ns(memory_type, uid, agent), {"type": memory_type, "source": "supervisor"},
                                   actor=_actor(config))
        except MemoryLayerError as exc:
            return f"memory_write failed: {exc}"
        return json.dumps({"status": res.status, "id": res.id, "judgement": res.judgement}, ensure_ascii=False)

    @tool
    def memory_update(memory_id: str, content: str, config: RunnableConfig) -> str:
        """Replace the content of one of the user's memories (by id from memory_search)."""
        uid = who(config)
        if uid is None:
            return OFF
        try:
            rec = manager.get(memory_id, actor=_actor(config))
            if rec.namespace[1:2] != (uid,):
                return "memory_update failed: that memory belongs to another user"
            new = manager.update(memory_id, content, actor=_actor(config), reason="memory_update tool")
        except MemoryLayerError as exc:
            return f"memory_update failed: {exc}"
        return json.dumps({"status": "updated", "id": new.id})

    @tool
    def memory_delete(memory_id: str, config: RunnableConfig) -> str:
        """Delete (restorably) one of the user's memories by id."""
        uid = who(config)
        if uid is None:
            return OFF
        try:
            rec = manager.get(memory_id, actor=_actor(config))
            if rec.namespace[1:2] != (uid,):
                return "memory_delete failed: that memory belongs to another user"
            n = manager.delete(memory_id, actor=_actor(config), reason="memory_delete tool")
        except MemoryLayerError as exc:
            return f"memory_delete failed: {exc}"
        return json.dumps({"deleted": n})

    @tool
    def memory_route(message: str, config: RunnableConfig) -> str:
        """Decide whether a message should be stored and whether memory should be read for it."""
        uid = who(config)
        if uid is None:
            return OFF
        d = manager.route(message, uid)
        return json.dumps({"should_read": d.should_read, "should_write": d.should_write,
                           "memory_type": d.memory_type, "top_k": d.top_k, "reason": d.reason}, ensure_ascii=False)

    @tool
    def memory_summarize(goal: str, config: RunnableConfig, max_tokens: int = 300, agent: str | None = None) -> str:
        """Summarise what memory knows that is relevant to a goal, within a token budget."""
        uid = who(config)
        if uid is None:
            return OFF
        try:
            hits = manager.recall(goal, read_namespaces(uid, agent), top_k=10, actor=_actor(config))
        except MemoryLayerError as exc:
            return f"memory_summarize failed: {exc}"
        return manager.summarize(hits, goal, max_tokens) or "(nothing relevant in memory)"

    @tool
    def memory_list(config: RunnableConfig) -> str:
        """Everything remembered about the user (profile, definitions, what the team shares): for
        "what do you remember about me". Returns JSON with ids (for memory_update / memory_delete)."""
        uid = who(config)  # policy.anonymous decides, as for the other tools
        if uid is None:
            return OFF
        try:
            recs = [r for ns in user_namespaces(uid) for r in manager.list(ns, limit=50, actor=_actor(config))]
        except MemoryLayerError as exc:
            return f"memory_list failed: {exc}"
        return json.dumps([{"id": r.id, "content": r.content, "kind": r.namespace[0]} for r in recs],
                          ensure_ascii=False)

    @tool
    def memory_restore(memory_id: str, config: RunnableConfig) -> str:
        """Bring back one of the user's memories that was deleted or replaced (undo a forget or a correction)."""
        uid = who(config)
        if uid is None:
            return OFF
        got = manager.audit.trash_get(memory_id)
        if got is None or uid not in got[0].namespace[1:]:
            return "memory_restore failed: no deleted memory of this user has that id"
        try:
            rec = manager.restore(memory_id, actor=_actor(config))
        except MemoryLayerError as exc:
            return f"memory_restore failed: {exc}"
        return json.dumps({"status": "restored", "id": rec.id, "content": rec.content}, ensure_ascii=False)

    @tool
    def memory_share(content: str, config: RunnableConfig) -> str:
        """Remember something for the whole team: every agent working for this user will receive it."""
        uid = who(config)  # with memory off, a thread's "team" memory would outlive the thread
        if uid is None:
            return OFF
        try:
            res = manager.remember(content, shared_namespace(uid), {"type": "domain_facts", "source": "user",
                                                                     "extra": {"team": True}}, actor=_actor(config))
        except MemoryLayerError as exc:
            return f"memory_share failed: {exc}"
        return json.dumps({"status": res.status, "id": res.id}, ensure_ascii=False)

    return [memory_search, memory_write, memory_update, memory_delete, memory_route, memory_summarize,
            memory_list, memory_restore, memory_share]


__all__ = ["ANONYMOUS", "make_memory_tools", "user_id_from_config"]
