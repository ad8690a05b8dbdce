"""Sub-agents of the Supervisor: Text2SQL, Statistics, Analysis (no memory tools).

:func:`default_agents` builds the three with one chat model (or one per agent).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from langchain_core.language_models import BaseChatModel

from agents.analysis import AnalysisAgent
from agents.base import AgentResult, SubAgent
from agents.db import sample_db_path
from agents.statistics import StatisticsAgent
from agents.text2sql import Text2SQLAgent


def default_agents(model: BaseChatModel | None = None, *, models: Mapping[str, BaseChatModel] | None = None,
                   db_path: str | Path | None = None, reports_dir: str | Path | None = None) -> list[SubAgent]:
    """Text2SQL, Statistics and Analysis; ``models`` overrides ``model`` per agent name."""
    models = dict(models or {})

    def pick(name: str) -> BaseChatModel:
        m = models.get(name, model)
        if m is None:
            raise ValueError(f"agent {name!r} needs a chat model (a real one, or a ScriptedChatModel offline)")
        return m

    return [Text2SQLAgent(pick("text2sql"), db_path), StatisticsAgent(pick("statistics")),
            AnalysisAgent(pick("analysis"), reports_dir)]


__all__ = ["AgentResult", "AnalysisAgent", "StatisticsAgent", "SubAgent", "Text2SQLAgent", "default_agents",
           "sample_db_path"]
