"""Build the Supervisor graph: memory entry → supervisor ⇄ (pre → agent → post) per handoff.

::

    START → memory_entry → supervisor ─┬→ memory_pre_text2sql → text2sql → memory_post_text2sql ─┐
                              ↑        ├→ memory_pre_statistics → statistics → memory_post_… ─────┤
                              │        ├→ memory_pre_analysis → analysis → memory_post_analysis ──┤
                              │        └→ END                                                      │
                              └────────────────────────────────────────────────────────────────────┘

The Supervisor routes with a tool-calling chat model (``transfer_to_<agent>`` handoff tools) or,
with no model, with :class:`supervisor.router.SemanticRouter`. Only the memory nodes touch
memory; sub-agents get the injected context and their own work tools, nothing else.

Example (offline, no model: the semantic router picks no agent for a pure preference):
    >>> from memory import MemorySettings
    >>> from memory.policy.manager import MemoryManager
    >>> from langgraph.checkpoint.memory import InMemorySaver
    >>> from agents import default_agents
    >>> from supervisor.scripted import ScriptedChatModel
    >>> mm = MemoryManager.from_settings(MemorySettings(path=":memory:"))
    >>> g = build_supervisor_graph(default_agents(ScriptedChatModel()), mm, checkpointer=InMemorySaver())
    >>> out = g.invoke({"messages": [("user", "以后报表金额都用万元为单位")]},
    ...                {"configurable": {"thread_id": "t1", "user_id": "u1"}})
    >>> [e["status"] for e in out["memory_log"] if e["kind"] == "written"]
    ['added']
    >>> mm.close()
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer, Command

from agents.base import AgentResult, SubAgent
from memory.errors import InvalidConfig, InvalidInput
from memory.policy.audit import AuditLog
from memory.policy.manager import MemoryManager
from memory.policy.routing import steer_intent
from memory.policy.tools import make_memory_tools
from memory.service import MemoryService
from supervisor.context import SupervisorContext
from supervisor.guard import check_agent_tools, without_store
from supervisor.journal import WriteJournal
from supervisor.nodes import (
    ALWAYS_ON,
    finish_writes,
    last_user_message,
    make_entry_node,
    make_post_node,
    make_pre_node,
    message_text,
)
from supervisor.router import HANDOFF_PREFIX, SemanticRouter, make_handoff_tool
from supervisor.shared import run_memory_tool, steer_offline
from supervisor.state import SupervisorState
from supervisor.writebehind import WriteBehind, consolidation_hook

log = logging.getLogger("supervisor")

SUPERVISOR_PROMPT = """You are the Supervisor of a data team. Agents:
{agents}
Hand work to an agent with its transfer_to_<agent> tool and a self-contained task (agents do not
see this conversation). Data flows text2sql (rows) → statistics (numbers) → analysis (findings):
hand off in that order, one step at a time, and only as far as the request needs. When the user
only states a preference or a definition, acknowledge it (it is stored automatically). When the
work is done, answer the user in their language, honouring their stored preferences."""

_CJK = re.compile(r"[\u4e00-\u9fff]")


def as_manager(memory: MemoryManager | MemoryService) -> MemoryManager:
    """Accept a manager, or wrap a bare service (audit log next to the store, like from_settings)."""
    if isinstance(memory, MemoryManager):
        return memory
    if isinstance(memory, MemoryService):
        return MemoryManager(memory, AuditLog(memory.settings.path), memory.settings)
    raise TypeError(f"memory must be a MemoryManager or MemoryService, got {type(memory).__name__}")


def as_chat_model(model: BaseChatModel | str | None) -> BaseChatModel | None:
    if model is None or isinstance(model, BaseChatModel):
        return model
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        try:
            return init_chat_model(model)
        except Exception as exc:  # missing provider package, API key, unknown provider ...
            raise ValueError(f"cannot start chat model {model!r}: {type(exc).__name__}: {exc}") from exc
    raise TypeError(f"model must be a chat model, an init_chat_model string or None, got {type(model).__name__}")


def bind_tools_or_explain(model: BaseChatModel, tools: Sequence[Any], who: str) -> Any:
    """``model.bind_tools(tools)``, or a ``TypeError`` that says what to use instead.

    Test doubles such as ``GenericFakeChatModel`` cannot call tools; LangChain then raises a bare
    ``NotImplementedError`` from deep inside the first run.
    """
    try:
        return model.bind_tools(tools)
    except NotImplementedError as exc:
        raise TypeError(
            f"{who} chat model {type(model).__name__} cannot call tools (bind_tools is not implemented). "
            "Use a tool-calling model (e.g. init_chat_model('openai:gpt-4o-mini')); for the Supervisor, "
            "model=None routes offline with the semantic router; for tests and offline demos use "
            "supervisor.scripted.ScriptedChatModel, which replays scripted replies and tool calls."
        ) from exc


def _compose_answer(user_text: str, results: Sequence[Mapping[str, Any]], log_: Sequence[Mapping[str, Any]]) -> str:
    """The no-model Supervisor's reply: the last agent's answer, or what memory stored."""
    zh = bool(_CJK.search(user_text))
    if results:
        last = results[-1]
        return str(last.get("text") or "")
    written = [e for e in log_ if e.get("kind") == "written" and e.get("step") == "entry"]
    if written:
        items = "；".join(e["content"] for e in written) if zh else "; ".join(e["content"] for e in written)
        return f"好的，已记住：{items}" if zh else f"Noted: {items}"
    return "好的。" if zh else "OK."


def _replay_on_open(mm: MemoryManager, journal: WriteJournal) -> None:
    """Apply the writes an earlier process queued but never applied (killed, store down)."""
    try:
        done = journal.replay(mm)
    except Exception:  # noqa: BLE001 - memory is an aid: a journal that cannot replay must not stop the app
        log.warning("write journal replay failed; will retry at the next turn", exc_info=True)
        return
    failed = [(jid, exc) for jid, _, exc in done if exc is not None]
    if done:
        log.info("write journal: %d queued writes replayed, %d failed", len(done) - len(failed), len(failed))
    for jid, exc in failed:
        # memory.journal drops a write the store refuses as bad input; others stay for a retry.
        fate = "dropped (not storable)" if isinstance(exc, InvalidInput) and not isinstance(exc, InvalidConfig) \
            else "kept for a retry"
        log.warning("write journal: %s not applied, %s: %s: %s", jid, fate, type(exc).__name__, exc)


def build_supervisor_graph(
    agents: Sequence[SubAgent],
    memory: MemoryManager | MemoryService,
    model: BaseChatModel | str | None = None,
    *,
    checkpointer: Checkpointer = None,
    router: SemanticRouter | None = None,
    context_budget: int | None = None,
    max_handoffs: int = 8,
    always_on: tuple[str, ...] = ALWAYS_ON,
    write_behind: bool | None = None,
    store: BaseStore | None = None,
    transcript: Any = None,
    memory_tools: bool = True,
) -> CompiledStateGraph:
    """Compile the Supervisor graph.

    Args:
        agents: sub-agents (each with its own chat model), e.g. :func:`agents.default_agents`.
        memory: a :class:`MemoryManager`, or a :class:`MemoryService` (wrapped with an audit log).
        model: the Supervisor's tool-calling chat model (or an ``init_chat_model`` string). None
            routes with a :class:`SemanticRouter` on the memory layer's embedder, offline.
        checkpointer: e.g. ``InMemorySaver()``; threads are sessions, memory crosses threads.
        router: a custom semantic router (no-model mode).
        context_budget: tokens of injected memory per prompt (default: settings.policy.summary_max_tokens).
        max_handoffs: handoffs per turn before the Supervisor must answer.
        always_on: namespace kinds searched without a similarity floor (profile, definitions).
        write_behind: post-handoff writes run on a background thread (see
            :mod:`supervisor.writebehind`); default: settings.policy.write_behind.
        store: compiled into the graph (``get_store()`` in the Supervisor's own nodes); sub-agents
            never get it (they run with :class:`supervisor.guard.NoStore`).

    Every memory write is committed to the store's write journal (``<path>.pending``,
    :mod:`supervisor.journal`) before it is applied; building the graph applies what an earlier
    process left there.
        memory_tools: bind the memory tools (:func:`memory.policy.tools.make_memory_tools`) to the
            Supervisor's model, next to the handoff tools (never to sub-agents).
        transcript: a :class:`memory.transcript.GroupTranscript`: the entry node appends each user
            message to it and injects the group's other recent messages (any process's).

    Returns:
        A compiled graph with ``context_schema=SupervisorContext``; invoke it with
        ``context=SupervisorContext(user_id=...)`` or ``configurable.user_id``.
    """
    mm = as_manager(memory)
    chat = as_chat_model(model)
    names = [a.name for a in agents]
    if len(set(names)) != len(names) or not agents:
        raise ValueError(f"agents need unique names, got {names}")
    by_name = {a.name: a for a in agents}
    for a in agents:  # by what a tool can do, not by its name (supervisor.guard)
        check_agent_tools(a.name, a.tools)
    budget = mm.settings.policy.summary_max_tokens if context_budget is None else context_budget
    wb = (WriteBehind(idle=consolidation_hook(mm), idle_seconds=mm.settings.policy.consolidate_idle_seconds)
          if (mm.settings.policy.write_behind if write_behind is None else write_behind) else None)
    journal = WriteJournal.for_store(mm.settings.path)
    _replay_on_open(mm, journal)
    handoff_tools = [make_handoff_tool(a) for a in agents]
    # The Supervisor (never a sub-agent) also gets the memory tools, so the user can steer memory
    # in chat: "what do you remember about me", "forget that", "that's wrong", "for the whole team".
    mem_tools = {t.name: t for t in make_memory_tools(mm)} if chat is not None and memory_tools else {}
    bound = (bind_tools_or_explain(chat, [*handoff_tools, *mem_tools.values()], "the Supervisor's")
             if chat is not None else None)
    for a in agents:
        model_of = getattr(a, "model", None)
        if isinstance(model_of, BaseChatModel) and a.tools:
            bind_tools_or_explain(model_of, list(a.tools), f"agent {a.name}'s")
    semantic = router if router is not None or chat is not None else SemanticRouter(mm.service.embedder, agents)
    agent_list = "\n".join(f"- {a.name}: {a.description}" for a in agents)

    def goto_next(state: SupervisorState, pending: list[dict[str, Any]], update: dict[str, Any]) -> Command:
        nxt, rest = pending[0], pending[1:]
        return Command(goto=f"memory_pre_{nxt['agent']}",
                       update={**update, "active": nxt, "pending": rest, "handoffs": (state.get("handoffs") or 0) + 1})

    def supervisor(state: SupervisorState, config: RunnableConfig, runtime: Runtime[SupervisorContext]) -> Command:
        pending = list(state.get("pending") or [])
        if pending:
            return goto_next(state, pending, {})
        over = (state.get("handoffs") or 0) >= max_handoffs
        if bound is None:
            plan = state.get("plan")
            steering = steer_intent(last_user_message(state)) if plan is None else None
            if steering is not None:  # memory the user steers, offline: no agent is involved
                answer = steer_offline(mm, steering, state, config, runtime)
                return Command(goto=END, update={"messages": [AIMessage(answer, name="supervisor")], "plan": {},
                                                 **finish_writes(wb, state, config, runtime)})
            if plan is None:
                p = semantic.plan(last_user_message(state))  # type: ignore[union-attr]
                if runtime.stream_writer is not None:
                    runtime.stream_writer({"route": p.as_dict()})
                todo = [{"agent": a, "task": p.ask, "tool_call_id": None} for a in p.agents]
                if todo and not over:
                    return goto_next(state, todo, {"plan": p.as_dict()})
            answer = _compose_answer(last_user_message(state), state.get("results") or [], state.get("memory_log") or [])
            return Command(goto=END, update={"messages": [AIMessage(answer, name="supervisor")], "plan": plan or {},
                                             **finish_writes(wb, state, config, runtime)})
        prompt: list[BaseMessage] = [SystemMessage(SUPERVISOR_PROMPT.format(agents=agent_list))]
        if state.get("memory_context"):
            prompt.append(SystemMessage(state["memory_context"], name="memory"))
        ai = bound.invoke(prompt + list(state.get("messages") or []), config)
        if not isinstance(ai, AIMessage):
            ai = AIMessage(message_text(ai))
        ai = ai.model_copy(update={"name": ai.name or "supervisor"})
        todo, extra = [], []
        for tc in ai.tool_calls:
            agent = tc["name"][len(HANDOFF_PREFIX):] if tc["name"].startswith(HANDOFF_PREFIX) else None
            if tc["name"] in mem_tools and not over:  # run now; the model sees the result next
                extra.append(run_memory_tool(mem_tools[tc["name"]], tc, config))
            elif agent in by_name and not over:
                task = str((tc.get("args") or {}).get("task") or last_user_message(state))
                todo.append({"agent": agent, "task": task, "tool_call_id": tc["id"]})
            else:
                why = "handoff limit reached; answer now" if agent in by_name else f"unknown tool {tc['name']}"
                extra.append(ToolMessage(f"ERROR: {why}", tool_call_id=tc["id"], name=tc["name"], status="error"))
        if todo:
            return goto_next(state, todo, {"messages": [ai, *extra]})
        if extra:  # memory tool results or bad calls: back to the model
            return Command(goto="supervisor", update={"messages": [ai, *extra], "handoffs": (state.get("handoffs") or 0) + 1})
        return Command(goto=END, update={"messages": [ai], **finish_writes(wb, state, config, runtime)})

    def make_agent_node(agent: SubAgent):
        def run_agent(state: SupervisorState, config: RunnableConfig) -> dict[str, Any]:
            active = state.get("active") or {}
            task = str(active.get("task") or last_user_message(state))
            inputs = dict(state.get("artifacts") or {})
            try:
                # The agent runs with a runtime whose store refuses (supervisor.guard.NoStore):
                # a graph compiled with a store must not hand it to sub-agents.
                with without_store(config, agent.name) as sub_config:
                    res = agent.run(task, state.get("agent_context") or "", inputs, sub_config)
            except Exception as exc:  # an agent failure is reported to the Supervisor, not raised
                log.exception("sub-agent %s failed", agent.name)
                res = AgentResult(agent.name, f"{agent.name} failed: {type(exc).__name__}: {exc}", error=str(exc))
            errors = list(state.get("agent_errors") or []) + ([f"{agent.name}: {res.error}"] if res.error else [])
            return {"last_result": res.as_state(), "artifacts": {**inputs, **res.artifacts}, "agent_errors": errors}

        run_agent.__name__ = agent.name
        return run_agent

    g = StateGraph(SupervisorState, context_schema=SupervisorContext)
    g.add_node("memory_entry", make_entry_node(mm, budget, always_on, wb, journal, transcript))
    g.add_node("supervisor", supervisor, destinations=(*(f"memory_pre_{n}" for n in names), "supervisor", END))
    for a in agents:
        g.add_node(f"memory_pre_{a.name}", make_pre_node(mm, a.name, budget, always_on, wb))
        g.add_node(a.name, make_agent_node(a))
        g.add_node(f"memory_post_{a.name}", make_post_node(mm, a.name, wb, journal))
        g.add_edge(f"memory_pre_{a.name}", a.name)
        g.add_edge(a.name, f"memory_post_{a.name}")
        g.add_edge(f"memory_post_{a.name}", "supervisor")
    g.add_edge(START, "memory_entry")
    g.add_edge("memory_entry", "supervisor")
    return g.compile(checkpointer=checkpointer, store=store, name="supervisor")
