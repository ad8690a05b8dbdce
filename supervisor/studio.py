"""The Supervisor graph for LangGraph Server / Studio (``langgraph dev``).

``langgraph.json`` points ``"graphs": {"supervisor": "./supervisor/studio.py:make_graph"}`` here and
``"store": {"path": "./memory/store.py:make_store"}`` at our store adapter. Both read their settings
from ``MemorySettings.load()`` (``MEMORY_*`` environment variables, e.g. ``MEMORY_PATH``), so the
graph's :class:`MemoryManager` and the server's store open the same memory file, and the store
shows what the Supervisor remembered under its own namespaces (``("user_profile", <user>)``,
``("domain_facts", <user>)``, ``("text2sql_memories", <user>)`` ...): Studio's Memory tab and
``client.store.search_items`` read them directly.

Models: ``MEMORY_DEMO_MODEL`` (an ``init_chat_model`` string, e.g. ``"openai:gpt-4.1-mini"``) runs the
Supervisor and every agent on that model. Unset, the Supervisor routes with the offline semantic
router and the agents replay their LLM steps from the demo scenario
(``supervisor/scenarios/demo.yaml``, :class:`ScenarioReplayModel`): type the demo's messages in
Studio (or send them with langgraph-sdk) and the whole scenario runs, report included; a message
the scenario does not have gets a reply saying that no chat model is configured. Memory
extraction, injection and the store work the same either way.

The user id comes from the run's ``context`` (``{"user_id": "u1"}``), or ``configurable.user_id``.
"""

from __future__ import annotations

import asyncio
import difflib
import gc
import os
import threading
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph.state import CompiledStateGraph

from agents import default_agents
from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings
from supervisor.graph import as_chat_model, build_supervisor_graph
from supervisor.scenario import AGENTS, Scenario, load_scenario
from supervisor.scripted import ScriptedChatModel, message_text

MODEL_ENV = "MEMORY_DEMO_MODEL"

NO_MODEL_TEXT = (
    "No chat model is configured for this agent and the demo scenario has no step for this request "
    "(set MEMORY_DEMO_MODEL to an init_chat_model string, e.g. 'openai:gpt-4.1-mini', or send one of "
    "the demo's messages: supervisor/scenarios/demo.yaml). Memory still works: preferences and facts are stored."
)


def _offline(role: str) -> AIMessage:
    return AIMessage(content=NO_MODEL_TEXT, name=role, response_metadata={"offline": True})


class ScenarioReplayModel(ScriptedChatModel):
    """An agent's LLM steps replayed from a scenario file, for whichever turn is being asked.

    Stateless across runs: the turn is the scenario turn whose user message the agent's task
    contains (or resembles: difflib ratio >= ``min_ratio``), and the step is the number of AI
    messages already in the agent's input (each tool round adds one). A task no turn matches,
    or a step past the script, gets the :data:`NO_MODEL_TEXT` reply.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> m = ScenarioReplayModel(role="analysis", turns=[("report please", ["the report"])])
        >>> m.invoke([HumanMessage("report please")]).content
        'the report'
        >>> m.invoke([HumanMessage("something else entirely")]).response_metadata["offline"]
        True
    """

    role: str = "replay"
    turns: list[tuple[str, list[Any]]] = []
    min_ratio: float = 0.8

    @classmethod
    def for_agent(cls, agent: str, scenario: Scenario) -> ScenarioReplayModel:
        turns = [(t.user, list(t.replay[agent])) for s in scenario.sessions for t in s.turns if t.replay.get(agent)]
        return cls(role=agent, turns=turns)

    def _match(self, task: str) -> list[Any] | None:
        best, score = None, 0.0
        for user, replies in self.turns:
            if user in task:
                return replies
            r = difflib.SequenceMatcher(None, user, task[: len(user) + 40]).ratio()
            if r > score:
                best, score = replies, r
        return best if score >= self.min_ratio else None

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        task = next((message_text(m) for m in messages if isinstance(m, HumanMessage)), "")
        replies = self._match(task)
        step = sum(isinstance(m, AIMessage) for m in messages)
        if replies is None or step >= len(replies):
            return ChatResult(generations=[ChatGeneration(message=_offline(self.role))])
        msg, _ = self._to_message(replies[step])
        msg = msg.model_copy(update={"response_metadata": {**msg.response_metadata, "replayed": True}})
        return ChatResult(generations=[ChatGeneration(message=msg)])


def build_studio_graph(mm: MemoryManager, model: Any = None, *, checkpointer: Any = None,
                       scenario: Scenario | None = None) -> CompiledStateGraph:
    """The Supervisor graph as Studio runs it. ``make_graph`` compiles it without a checkpointer
    (LangGraph Server supplies one). Without a model the agents replay ``scenario`` (default: the
    packaged demo) and the Supervisor routes with the semantic router."""
    chat = as_chat_model(model)
    if chat is not None:
        agents = default_agents(chat)
    else:
        scn = scenario or load_scenario()
        agents = default_agents(models={a: ScenarioReplayModel.for_agent(a, scn) for a in AGENTS})
    return build_supervisor_graph(agents, mm, chat, checkpointer=checkpointer)


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
            # The start-up heap (imports, model, store) lives as long as the server: out of the
            # collector's reach, a full collection no longer walks it (~135k objects, 75-83 ms
            # each time on two cores, landing in whichever handoff is running; memory.prefork
            # does the same for forked workers).
            gc.collect()
            gc.freeze()
        return _graph


async def make_graph() -> CompiledStateGraph:
    """Graph factory for ``langgraph.json``. LangGraph Server calls it on its event loop for every
    run, where blocking I/O is refused (blockbuster), so the first build runs in a worker thread."""
    if _graph is not None:
        return _graph
    return await asyncio.to_thread(studio_graph)


__all__ = ["NO_MODEL_TEXT", "ScenarioReplayModel", "build_studio_graph", "make_graph", "studio_graph"]
