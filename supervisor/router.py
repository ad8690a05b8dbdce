"""Choosing sub-agents: handoff tools for a chat model, a semantic router without one.

:class:`SemanticRouter` scores each agent by the embedding similarity of the user's request to
the agent's description and examples, adds keyword rules, drops sentences that only state a
preference or definition (those go to memory, not to an agent), and completes the plan with the
agents a chosen agent depends on (Statistics needs Text2SQL's rows). Every decision says why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from agents.base import SubAgent
from memory.policy.routing import RouteContext, route

HANDOFF_PREFIX = "transfer_to_"

_SENTENCE = re.compile(r"(?<=[。！？!?；;\n])|(?<=[.])\s+")
_ASK = re.compile(
    r"[?？]|帮我|请问|查一下|查询|看一下|看看|算一下|计算|统计|分析|多少|哪些|哪个|是否|能否|给我|列出|对比|比较"
    r"|^\s*(?:how|what|which|who|when|where|why|show|list|give|find|compute|calculate|analy[sz]e|compare|tell me|can you|could you)\b",
    re.I)


def split_sentences(text: str) -> list[str]:
    """The message's sentences, each once: a sentence repeated 2,000 times was routed, journaled and
    written 2,000 times (one memory after dedupe) and listed 2,000 times in the offline reply."""
    return list(dict.fromkeys(s.strip() for s in _SENTENCE.split(text) if s and s.strip()))


class HandoffArgs(BaseModel):
    task: str = Field(description="A self-contained description of what the agent should do, "
                                  "with every detail it needs (the agent does not see the conversation).")


def make_handoff_tool(agent: SubAgent) -> BaseTool:
    """``transfer_to_<agent>(task)``. The Supervisor node intercepts the call and hands off."""

    def _handoff(task: str) -> str:
        return f"handed off to {agent.name}: {task}"

    return StructuredTool.from_function(
        _handoff, name=f"{HANDOFF_PREFIX}{agent.name}", args_schema=HandoffArgs,
        description=f"Hand the task to the {agent.name} agent. {agent.description}")


@dataclass(frozen=True)
class RoutePlan:
    agents: tuple[str, ...]
    ask: str
    scores: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    statements: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"agents": list(self.agents), "ask": self.ask, "scores": {k: round(v, 3) for k, v in self.scores.items()},
                "reasons": self.reasons, "statements": list(self.statements)}


class SemanticRouter:
    """Offline agent routing: embedding similarity to agent descriptions plus rules."""

    def __init__(self, embedder: Any, agents: Sequence[SubAgent], *, threshold: float = 0.5):
        self.embedder = embedder
        self.agents = list(agents)
        self.threshold = threshold
        self._rows: list[tuple[str, np.ndarray]] = []
        for a in self.agents:
            texts = [a.description, *a.examples]
            self._rows.append((a.name, np.asarray(embedder.embed_documents(texts), dtype=np.float32)))

    def similarity(self, text: str) -> dict[str, float]:
        q = np.asarray(self.embedder.embed_query(text), dtype=np.float32)
        return {name: float(np.max(mat @ q)) for name, mat in self._rows}

    def plan(self, message: str, user_id: str = "router") -> RoutePlan:
        asks, statements = [], []
        for s in split_sentences(message):
            d = route(s, RouteContext(user_id=user_id))
            if d.should_write and d.memory_type in ("user_profile", "domain_facts") and not _ASK.search(s):
                statements.append(s)
            elif d.should_read or _ASK.search(s):
                asks.append(s)
        ask = " ".join(asks)
        if not ask:
            return RoutePlan((), "", {}, {"*": "no request besides statements for memory" if statements
                                          else "small talk"}, tuple(statements))
        sims = self.similarity(ask)
        chosen: dict[str, str] = {}
        for a in self.agents:
            m = a.keywords.search(ask)
            if m:
                chosen[a.name] = f"rule: “{m.group(0)}”; similarity {sims[a.name]:.2f}"
            elif sims[a.name] >= self.threshold:
                chosen[a.name] = f"similarity {sims[a.name]:.2f} >= {self.threshold:.2f}"
        by_name = {a.name: a for a in self.agents}
        changed = True
        while changed:  # add what the chosen agents need (their inputs)
            changed = False
            for name in list(chosen):
                for req in by_name[name].requires:
                    if req in by_name and req not in chosen:
                        chosen[req] = f"needed by {name}"
                        changed = True
        order = tuple(a.name for a in self.agents if a.name in chosen)
        return RoutePlan(order, ask, sims, chosen, tuple(statements))
