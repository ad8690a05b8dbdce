"""The Supervisor graph with long-term memory: memory nodes around every handoff."""

from __future__ import annotations

from supervisor.context import ANONYMOUS, SupervisorContext, resolve_user_id
from supervisor.graph import as_manager, build_supervisor_graph
from supervisor.router import RoutePlan, SemanticRouter, make_handoff_tool
from supervisor.scripted import ScriptedChatModel
from supervisor.state import SupervisorState

__all__ = ["ANONYMOUS", "RoutePlan", "ScriptedChatModel", "SemanticRouter", "SupervisorContext",
           "SupervisorState", "as_manager", "build_supervisor_graph", "make_handoff_tool", "resolve_user_id"]
