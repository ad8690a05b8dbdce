"""State of the Supervisor graph. Per-turn fields are reset by the entry node."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages


class SupervisorState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    memory_context: str               # injected into the Supervisor's own prompt (this turn)
    agent_context: str                # injected into the active agent's input (this handoff)
    active: dict[str, Any] | None     # {"agent", "task", "tool_call_id"}
    pending: list[dict[str, Any]]     # handoffs still to run this turn
    plan: dict[str, Any] | None       # the semantic router's plan (no-model mode)
    artifacts: dict[str, Any]         # sql, columns, rows, stats, report_path (this turn)
    last_result: dict[str, Any] | None
    results: list[dict[str, Any]]     # every agent result this turn
    handoffs: int
    memory_log: list[dict[str, Any]]  # every memory step this turn (also on the custom stream)
    memory_errors: list[str]          # memory failures this turn (the graph went on)
    agent_errors: list[str]
