"""Our memory for graphs we did not build: one call adds it to an existing LangGraph app.

* ``create_agent`` (LangChain 1.x): ``create_agent(model, tools, middleware=[memory_middleware(mm)])``.
* ``langgraph-supervisor``: ``create_supervisor(agents, model=model, **supervisor_memory_hooks(mm))``.

Both do what the Supervisor graph's memory nodes do (:mod:`supervisor.nodes`), with the same
policy (:class:`~memory.policy.manager.MemoryManager`: routing rules, dedupe/conflict merge, PII
redaction, audit) and the same namespaces, so the three kinds of app share one memory file:

* a new user message: its sentences that state a preference or a definition are written
  (``user_profile/{user}``, ``domain_facts/{user}``), then profile, definitions and the agent's own
  memories are searched and summarised under the token budget;
* every model call of that turn sees the summary as part of its system prompt (not stored in
  the conversation: it is rebuilt from memory each turn);
* an agent's finished answer (no tool calls) is routed statement by statement; conclusions, SQL
  and file paths go to ``{agent}_memories/{user}`` (``supervisor_memories/{user}`` for the
  user-facing model) or ``domain_facts/{user}``, where the next sessions' recall finds them.

For ``create_supervisor`` one pre-model hook does both halves: before each Supervisor model call
it writes what arrived since the Supervisor's previous call (the user's message, or the answer of
the agent it handed off to) and injects the recalled memory. Sub-agents built with
``create_agent`` can carry ``memory_middleware(mm, agent="<name>")`` to get their own memories.

The user id comes from the run's ``context`` (``user_id``) or ``configurable.user_id`` /
``langgraph_user_id`` (:func:`supervisor.context.resolve_user_id`), escaped into a label
injectively; without one, memory is per thread or off (``policy.anonymous``). Memory is an aid:
any memory failure (store, embedder, audit log, disk) is logged and the model call goes on
without it; writes go through the store's write journal (:mod:`supervisor.journal`), so a write
that fails is retried at the next turn instead of being lost.

Example (offline, scripted model):
    >>> from langchain.agents import create_agent
    >>> from langgraph.checkpoint.memory import InMemorySaver
    >>> from memory import MemorySettings
    >>> from memory.policy.manager import MemoryManager
    >>> from supervisor.scripted import ScriptedChatModel
    >>> mm = MemoryManager.from_settings(MemorySettings(path=":memory:"))
    >>> model = ScriptedChatModel(replies=["好的", "报表如下（单位：万元）"])
    >>> app = create_agent(model, [], middleware=[memory_middleware(mm)], checkpointer=InMemorySaver())
    >>> _ = app.invoke({"messages": [("user", "以后报表金额都用万元为单位")]},
    ...                {"configurable": {"thread_id": "s1", "user_id": "u1"}})
    >>> _ = app.invoke({"messages": [("user", "做一份华东区营收报表")]},
    ...                {"configurable": {"thread_id": "s2", "user_id": "u1"}})   # a new session
    >>> "万元" in model.calls[-1][0].content   # the second session's system prompt has the preference
    True
    >>> mm.close()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NotRequired

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.runtime import Runtime

from memory.policy.manager import MemoryManager
from memory.service import MemoryService
from supervisor.graph import as_manager
from supervisor.journal import JournalEntry, WriteJournal
from supervisor.nodes import (
    _FAILED,
    _LEAD,
    ALWAYS_ON,
    _emit_written,
    _inject,
    _recall,
    _Step,
    apply_entry,
    journal_writes,
    message_text,
    replay_journal,
    skipped,
)
from supervisor.router import split_sentences

MEMORY_HEADER = "Long-term memory about this user (use it; do not mention it unless asked):"


class GraphMemory:
    """The memory steps, independent of the graph they run in.

    Args:
        memory: a :class:`MemoryManager`, or a :class:`MemoryService` (wrapped with an audit log).
        agent: whose memories are read and written (``{agent}_memories/{user}``); None for the
            user-facing model (the Supervisor's namespaces).
        budget: tokens of injected memory (default ``settings.policy.summary_max_tokens``).
        always_on: namespace kinds searched without a similarity floor (profile, definitions).
    """

    def __init__(self, memory: MemoryManager | MemoryService, *, agent: str | None = None,
                 budget: int | None = None, always_on: tuple[str, ...] = ALWAYS_ON):
        self.manager = as_manager(memory)
        self.agent = agent
        self.budget = self.manager.settings.policy.summary_max_tokens if budget is None else budget
        self.always_on = always_on
        self.journal = WriteJournal.for_store(self.manager.settings.path)
        self.replay()  # what an earlier process queued and never applied

    def _step(self, name: str, runtime: Any, config: RunnableConfig | None, agent: str | None = None) -> _Step:
        return _Step(name, agent if agent is not None else self.agent, runtime,
                     config if config is not None else _config(), self.manager.settings.policy.anonymous)

    def replay(self, runtime: Any = None, config: RunnableConfig | None = None) -> list[dict[str, Any]]:
        """Retry the writes left in the write journal (failed, or queued by a process that died)."""
        s = self._step("entry", runtime, config)
        replay_journal(s, self.manager, self.journal)
        return s.events

    def _write(self, s: _Step, todo: list[tuple[JournalEntry, str, str]]) -> None:
        jids = journal_writes(s, self.manager, self.journal, [e for e, _, _ in todo])
        for jid, (e, incoming, why) in zip(jids, todo, strict=True):
            res = s.guard("write " + "/".join(e.namespace),
                          lambda jid=jid, e=e: apply_entry(self.manager, self.journal, jid, e), _FAILED)
            if res is not _FAILED and res is not None:
                _emit_written(s, res, e.namespace, incoming, why)
            elif res is _FAILED and jid is not None:
                s.emit("retry_queued", namespace="/".join(e.namespace), incoming=incoming, journal=jid)

    def write_user(self, text: str, runtime: Any = None, config: RunnableConfig | None = None) -> list[dict[str, Any]]:
        """Write the sentences of a user message that the routing rules keep; returns the events."""
        s = self._step("entry", runtime, config)
        if s.user_id is None:
            skipped(s)
            return s.events
        uid = s.user_id
        todo: list[tuple[JournalEntry, str, str]] = []
        for sentence in split_sentences(text):
            d = s.guard("route", lambda sentence=sentence: self.manager.route(sentence, uid, role="user"))
            if d is None or not d.should_write or d.write_namespace is None:
                continue
            content = _LEAD.sub("", sentence).strip() or sentence
            todo.append((JournalEntry(d.write_namespace, content, {"type": d.memory_type, "source": "user"},
                                      s.actor, d.reason, s.now), sentence, d.reason))
        self._write(s, todo)
        return s.events

    def write_agent(self, text: str, agent: str | None = None, runtime: Any = None,
                    config: RunnableConfig | None = None) -> list[dict[str, Any]]:
        """Write the statements of an agent's answer that the routing rules keep (``role="agent"``)."""
        who = agent or self.agent  # None: the user-facing model, whose namespace is supervisor_memories
        s = self._step("post", runtime, config, who)
        if s.user_id is None:
            skipped(s)
            return s.events
        uid = s.user_id
        todo: list[tuple[JournalEntry, str, str]] = []
        for item in split_sentences(text):
            d = s.guard("route", lambda item=item: self.manager.route(item, uid, role="agent", agent=who))
            if d is None or not d.should_write or d.write_namespace is None:
                continue
            meta = {"type": d.memory_type, "source": who or "supervisor", "agent": who}
            todo.append((JournalEntry(d.write_namespace, item, meta, s.actor, d.reason, s.now), item, d.reason))
        self._write(s, todo)
        return s.events

    def context(self, query: str, runtime: Any = None, config: RunnableConfig | None = None) -> str:
        """The memory summary for ``query`` ("" when nothing relevant is stored)."""
        if not query.strip():
            return ""
        s = self._step("pre", runtime, config)
        if s.user_id is None:
            return ""
        uid = s.user_id
        d = s.guard("route", lambda: self.manager.route(query, uid, role="user" if self.agent is None else "assistant",
                                                        agent=self.agent))
        if d is None or not d.should_read:
            return ""
        hits = _recall(self.manager, s, query, d.read_namespaces, d.top_k or self.manager.settings.scoring.top_k,
                       self.always_on)
        return _inject(self.manager, s, hits, query, self.budget)


def _config() -> RunnableConfig | None:
    try:
        return get_config()
    except RuntimeError:  # called outside a graph run
        return None


def _last_human(messages: Sequence[BaseMessage]) -> tuple[int, HumanMessage | None]:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i, messages[i]  # type: ignore[return-value]
    return -1, None


def with_memory(system: SystemMessage | None, context: str) -> SystemMessage:
    """The system message with the memory summary appended."""
    block = f"{MEMORY_HEADER}\n{context}"
    if system is None:
        return SystemMessage(block)
    return SystemMessage(f"{message_text(system)}\n\n{block}")


# ---------------------------------------------------------------- create_agent middleware
def memory_middleware(memory: MemoryManager | MemoryService, *, agent: str | None = None,
                      budget: int | None = None, always_on: tuple[str, ...] = ALWAYS_ON) -> Any:
    """An ``AgentMiddleware`` for ``langchain.agents.create_agent`` (before/after model hooks).

    ``before_model`` runs the turn's memory steps once (on the first model call after a new user
    message: write the user's statements, recall and summarise); ``wrap_model_call`` appends the
    summary to the system prompt of every model call of the turn; ``after_model`` writes what the
    agent concluded when it answers without tool calls. ``agent`` names the agent's own
    namespace (``{agent}_memories/{user}``); None = the user-facing model (``supervisor``).
    """
    from langchain.agents.middleware import AgentMiddleware, AgentState

    mem = GraphMemory(memory, agent=agent, budget=budget, always_on=always_on)

    class MemoryState(AgentState):
        memory_context: NotRequired[str]
        memory_turn: NotRequired[str]
        memory_log: NotRequired[list[dict[str, Any]]]

    class MemoryMiddleware(AgentMiddleware):
        state_schema = MemoryState
        name = f"memory_{agent}" if agent else "memory"

        def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
            messages = state.get("messages") or []
            i, human = _last_human(messages)
            if human is None:
                return None
            turn = human.id or f"{i}:{message_text(human)[:200]}"
            if state.get("memory_turn") == turn:
                return None  # this turn's memory is already in state
            text = message_text(human)
            log: list[dict[str, Any]] = []
            if i == len(messages) - 1 and agent is None:  # a new user message, seen first by this model
                log += mem.replay(runtime)  # retry writes a failure or a crash left in the journal
                log += mem.write_user(text, runtime)
            ctx = mem.context(text, runtime)
            return {"memory_context": ctx, "memory_turn": turn, "memory_log": log}

        def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
            messages = state.get("messages") or []
            last = messages[-1] if messages else None
            if not isinstance(last, AIMessage) or last.tool_calls or not message_text(last).strip():
                return None
            events = mem.write_agent(message_text(last), agent, runtime)
            return {"memory_log": list(state.get("memory_log") or []) + events} if events else None

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(_inject_request(request))

        async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
            return await handler(_inject_request(request))

    return MemoryMiddleware()


def _inject_request(request: Any) -> Any:
    ctx = (request.state or {}).get("memory_context") or ""
    if not ctx:
        return request
    return request.override(system_message=with_memory(request.system_message, ctx))


# ---------------------------------------------------------------- langgraph-supervisor hooks
def supervisor_memory_hooks(memory: MemoryManager | MemoryService, *, supervisor_name: str = "supervisor",
                            budget: int | None = None, always_on: tuple[str, ...] = ALWAYS_ON) -> dict[str, Any]:
    """Keyword arguments for ``langgraph_supervisor.create_supervisor``: ``pre_model_hook``.

    Before each Supervisor model call, what arrived since its previous call is written (a user
    message: its preferences and definitions; an agent's answer: its conclusions, SQL, paths, in
    ``{agent}_memories/{user}``), then memory for the user's request is recalled and given to the
    model as a system message (``llm_input_messages``: the conversation itself is not changed).
    """
    mem = GraphMemory(memory, budget=budget, always_on=always_on)

    def memory_pre_model_hook(state: dict[str, Any], config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        messages: list[BaseMessage] = list(state.get("messages") or [])
        start = 0
        for i in range(len(messages) - 1, -1, -1):  # after the Supervisor's previous model reply
            m = messages[i]
            if isinstance(m, AIMessage) and m.name == supervisor_name:
                start = i + 1
                break
        for m in messages[start:]:
            if isinstance(m, HumanMessage):
                mem.write_user(message_text(m), runtime, config)
            elif isinstance(m, AIMessage) and m.name not in (supervisor_name, None) and not m.tool_calls \
                    and message_text(m).strip():
                mem.write_agent(message_text(m), m.name, runtime, config)
        _, human = _last_human(messages)
        ctx = mem.context(message_text(human), runtime, config) if human is not None else ""
        if not ctx:
            return {"llm_input_messages": messages}
        return {"llm_input_messages": [with_memory(None, ctx), *messages]}

    return {"pre_model_hook": memory_pre_model_hook}


__all__ = ["GraphMemory", "MEMORY_HEADER", "memory_middleware", "supervisor_memory_hooks", "with_memory"]
