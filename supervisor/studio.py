"""The Supervisor graph for LangGraph Server / Studio (``langgraph dev``).

``langgraph.json`` points ``"graphs": {"supervisor": "./supervisor/studio.py:make_graph"}`` here and
``"store": {"path": "./memory/store.py:make_store"}`` at our store adapter. Both read their settings
from ``MemorySettings.load()`` (``MEMORY_*`` environment variables, e.g. ``MEMORY_PATH``), so the
graph's :class:`MemoryManager` and the server's store open the same memory file.

Graph::

    START → supervisor (the graph of :func:`supervisor.graph.build_supervisor_graph`) → publish_memories → END

All memory writes and reads go through the manager, inside the Supervisor graph's memory nodes.
``publish_memories`` then mirrors the user's current memories (read from the manager's service)
into the LangGraph store under ``("memories", <user_id>)`` — key = memory id, value = content,
origin namespace, type, timestamps — and drops mirror items whose memory is gone. Why a mirror:
the store adapter deliberately only sees its own items (``metadata.source == "langgraph_store"``),
so without it the server's store API (``/store/items``, ``client.store.search_items``) and Studio's
Memory tab would show nothing of what the Supervisor remembered. The mirror is a read-only view:
nothing reads it back into prompts, and ``MemoryManager.forget_user`` deletes it with the rest of
the user's namespaces.

Models: ``MEMORY_DEMO_MODEL`` (an ``init_chat_model`` string, e.g. ``"openai:gpt-4.1-mini"``) runs the
Supervisor and every agent on that model. Unset, the Supervisor routes with the offline semantic
router, and the agents answer with :class:`OfflineChatModel`, which says that no chat model is
configured (scenario replays need per-turn scripts, which an interactive Studio session has not).
Memory extraction, injection and the store work the same either way.

The user id comes from the run's ``context`` (``{"user_id": "u1"}``), or ``configurable.user_id``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import datetime
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from agents import default_agents
from memory.policy.manager import MemoryManager
from memory.records import MemoryRecord
from memory.settings import MemorySettings
from supervisor.context import SupervisorContext, resolve_user_id
from supervisor.graph import as_chat_model, build_supervisor_graph
from supervisor.scripted import ScriptedChatModel
from supervisor.state import SupervisorState

MODEL_ENV = "MEMORY_DEMO_MODEL"
MIRROR = "memories"
STORE_SOURCE = "langgraph_store"  # records the store adapter writes (memory.store.SOURCE)
MAX_MIRRORED = 500

NO_MODEL_TEXT = (
    "No chat model is configured for this agent (set MEMORY_DEMO_MODEL to an init_chat_model "
    "string, e.g. 'openai:gpt-4.1-mini'). Memory still works: preferences and facts are stored."
)


class OfflineChatModel(ScriptedChatModel):
    """A tool-less stand-in for agents when no chat model is configured: always one fixed reply."""

    role: str = "offline"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(list(messages))
        msg = AIMessage(content=NO_MODEL_TEXT, name=self.role, response_metadata={"offline": True})
        return ChatResult(generations=[ChatGeneration(message=msg)])


def user_memories(mm: MemoryManager, user_id: str, limit: int = MAX_MIRRORED) -> list[MemoryRecord]:
    """The user's memories as the manager keeps them (namespaces with ``user_id`` after the first
    label, like ``forget_user``), without store-adapter items (the mirror itself included)."""
    out: list[MemoryRecord] = []
    for ns, _ in sorted(mm.service.backend.namespaces()):
        if ns[0] == MIRROR or user_id not in ns[1:]:
            continue
        out.extend(r for r in mm.service.list(ns, limit=limit) if r.metadata.source != STORE_SOURCE)
    out.sort(key=lambda r: r.updated_at, reverse=True)
    return out[:limit]


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def mirror_value(r: MemoryRecord) -> dict[str, Any]:
    return {
        "content": r.content,
        "namespace": "/".join(r.namespace),
        "type": r.metadata.type,
        "source": r.metadata.source,
        "created_at": _iso(r.created_at),
        "updated_at": _iso(r.updated_at),
    }


def make_publish_node(mm: MemoryManager):
    def publish_memories(
        state: SupervisorState, config: RunnableConfig, runtime: Runtime[SupervisorContext]
    ) -> dict[str, Any]:
        store = runtime.store
        if store is None:  # compiled without a store (plain Python use): nothing to mirror into
            return {}
        user = resolve_user_id(runtime.context, config)
        ns = (MIRROR, user)
        records = user_memories(mm, user)
        current = {r.id for r in records}
        stale = {it.key for it in store.search(ns, limit=MAX_MIRRORED * 2)} - current
        for key in stale:
            store.delete(ns, key)
        for r in records:
            store.put(ns, r.id, mirror_value(r), index=["content"])
        return {}

    return publish_memories


def build_studio_graph(
    mm: MemoryManager, model: Any = None, *, checkpointer: Any = None, store: Any = None
) -> CompiledStateGraph:
    """The Supervisor graph plus the store mirror. ``make_graph`` compiles it without checkpointer
    or store (LangGraph Server supplies both); pass them for use outside the server."""
    chat = as_chat_model(model)
    if chat is not None:
        agents = default_agents(chat)
    else:
        agents = default_agents(models={a: OfflineChatModel(role=a) for a in ("text2sql", "statistics", "analysis")})
    inner = build_supervisor_graph(agents, mm, chat)
    g = StateGraph(SupervisorState, context_schema=SupervisorContext)
    g.add_node("supervisor", inner)
    g.add_node("publish_memories", make_publish_node(mm))
    g.add_edge(START, "supervisor")
    g.add_edge("supervisor", "publish_memories")
    g.add_edge("publish_memories", END)
    return g.compile(checkpointer=checkpointer, store=store, name="supervisor")


_lock = threading.Lock()
_graph: CompiledStateGraph | None = None


def studio_graph() -> CompiledStateGraph:
    """The process-wide Studio graph, built on first use (its MemoryManager opens MEMORY_PATH and
    loads the embedding model, so it is built once, not per run)."""
    global _graph
    with _lock:
        if _graph is None:
            mm = MemoryManager.from_settings(MemorySettings.load())
            _graph = build_studio_graph(mm, os.environ.get(MODEL_ENV) or None)
        return _graph


async def make_graph() -> CompiledStateGraph:
    """Graph factory for ``langgraph.json``. LangGraph Server calls it on its event loop for every
    run, where blocking I/O is refused (blockbuster), so the first build runs in a worker thread."""
    if _graph is not None:
        return _graph
    return await asyncio.to_thread(studio_graph)


__all__ = ["OfflineChatModel", "build_studio_graph", "make_graph", "studio_graph", "mirror_value", "user_memories"]
