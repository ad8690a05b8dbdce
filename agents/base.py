"""What every sub-agent is to the Supervisor: a name, a description, a ``run`` method.

A sub-agent is a LangGraph graph (built with ``langchain.agents.create_agent``) around a chat
model and its own *work* tools (run SQL, compute statistics, write a report). It has no memory
tools and no conversation history: :meth:`SubAgent.run` gives it only the task, the context the
Supervisor injected (as a ``SystemMessage``) and the data produced by earlier agents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool


@dataclass(frozen=True)
class AgentResult:
    """What a sub-agent hands back.

    ``text`` goes back to the Supervisor; ``artifacts`` (sql, columns, rows, stats, report_path)
    are passed to later agents; ``memory_items`` are statements the Supervisor's post-node may
    route into long-term memory (the agent never writes memory itself).
    """

    agent: str
    text: str
    artifacts: dict[str, Any] = field(default_factory=dict)
    memory_items: tuple[str, ...] = ()
    messages: tuple[BaseMessage, ...] = ()
    error: str | None = None

    def as_state(self) -> dict[str, Any]:
        return {"agent": self.agent, "text": self.text, "memory_items": list(self.memory_items),
                "error": self.error, "artifact_keys": sorted(self.artifacts)}


@runtime_checkable
class SubAgent(Protocol):
    name: str
    description: str
    examples: tuple[str, ...]
    keywords: re.Pattern[str]
    requires: tuple[str, ...]
    tools: Sequence[BaseTool]
    model: BaseChatModel

    def run(self, task: str, context: str, inputs: Mapping[str, Any],
            config: RunnableConfig | None = None) -> AgentResult: ...


def agent_input(context: str, task: str, data: str = "") -> list[BaseMessage]:
    """The whole input of a sub-agent: injected memory (SystemMessage), then the task."""
    msgs: list[BaseMessage] = []
    if context.strip():
        msgs.append(SystemMessage(context, name="memory"))
    msgs.append(HumanMessage(task + (f"\n\n{data}" if data else "")))
    return msgs


def last_ai_text(messages: Sequence[BaseMessage]) -> str:
    for m in reversed(messages):
        if isinstance(m, AIMessage) and not m.tool_calls:
            c = m.content
            return c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def tool_artifacts(messages: Sequence[BaseMessage], tool: str) -> list[Any]:
    """Artifacts of the successful calls of ``tool``, in order."""
    return [m.artifact for m in messages
            if isinstance(m, ToolMessage) and m.name == tool and m.status != "error"
            and isinstance(m.artifact, dict) and not m.artifact.get("error")]


def recursion_config(config: RunnableConfig | None, limit: int = 25) -> RunnableConfig:
    cfg: RunnableConfig = dict(config or {})  # type: ignore[assignment]
    cfg["recursion_limit"] = limit
    return cfg
