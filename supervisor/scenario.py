"""Scenario files: sessions of users talking to the Supervisor graph, run for real.

A scenario (YAML; see ``supervisor/scenarios/demo.yaml``) lists sessions (one thread each, one
user, a day offset) and their turns. Without a chat model the agents' LLM steps are replayed
from each turn's ``replay`` lists by :class:`ScriptedChatModel`; the Supervisor routes with the
semantic router. Everything else — memory, SQL, statistics, reports — runs live. With a model,
``replay`` is ignored.

:class:`ScenarioRunner` reports every step through a callback (``on_event(kind, data)``), and
returns what it observed: captured top memories, checks, expectations, errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.memory import InMemorySaver

from agents import default_agents
from agents.statistics import stats_brief
from memory.namespace import parse_namespace
from memory.policy.manager import MemoryManager
from memory.policy.routing import read_namespaces
from memory.records import as_utc
from memory.settings import MemorySettings
from supervisor.context import SupervisorContext
from supervisor.graph import as_chat_model, build_supervisor_graph
from supervisor.scripted import ScriptedChatModel

log = logging.getLogger(__name__)
AGENTS = ("text2sql", "statistics", "analysis")
Event = Callable[[str, dict[str, Any]], None]


@dataclass
class Turn:
    user: str
    replay: dict[str, list[Any]] = field(default_factory=dict)
    check: dict[str, list[str]] = field(default_factory=dict)
    capture: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Session:
    thread: str
    user: str
    day: float
    title: str
    turns: list[Turn]
    probe: dict[str, str] | None = None
    # Checked after the session: each text is part of some current memory of the namespace
    # (what the write policy must not have merged away).
    stored: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Scenario:
    title: str
    start: datetime
    sessions: list[Session]
    source: str


def default_scenario_path() -> Path:
    return Path(str(resources.files("supervisor").joinpath("scenarios", "demo.yaml")))


def load_scenario(path: str | Path | None = None) -> Scenario:
    """Read and validate a scenario file (default: the packaged demo)."""
    p = Path(path) if path is not None else default_scenario_path()
    data = yaml.safe_load(p.read_text(encoding="utf-8"))
    if not isinstance(data, Mapping) or not isinstance(data.get("sessions"), list):
        raise ValueError(f"{p}: a scenario needs a 'sessions' list")
    sessions = []
    for i, s in enumerate(data["sessions"]):
        try:
            turns = [Turn(t["user"], dict(t.get("replay") or {}), dict(t.get("check") or {}), list(t.get("capture") or []))
                     for t in s["turns"]]
            stored = {str(ns): [str(t) for t in texts] for ns, texts in (s.get("stored") or {}).items()}
            sessions.append(Session(str(s["thread"]), str(s["user"]), float(s.get("day", 0)), str(s.get("title", "")),
                                    turns, s.get("probe"), stored))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{p}: session #{i + 1} is malformed ({exc!r}); needs thread, user, turns[].user") from exc
        for t in turns:
            unknown = set(t.replay) - set(AGENTS)
            if unknown:
                raise ValueError(f"{p}: replay for unknown agents {sorted(unknown)}; known: {AGENTS}")
    raw = data.get("start", "auto")
    if raw in (None, "auto"):
        # The last session happens today (09:00 UTC), earlier ones the given days before: memory
        # TTLs (tool_effects 90 days, ...) are then judged against a clock they agree with.
        last = max((s.day for s in sessions), default=0.0)
        today = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0)
        start = today - timedelta(days=last)
    else:
        start = as_utc(raw)
    return Scenario(str(data.get("title", p.stem)), start, sessions, str(p))


def _user_of(namespace: str) -> str | None:
    ns = parse_namespace(namespace)
    return ns[1] if len(ns) > 1 else None


class ScenarioRunner:
    """Run a scenario through the real Supervisor graph on a real store."""

    def __init__(self, scenario: Scenario, settings: MemorySettings, *, model: BaseChatModel | str | None = None,
                 embedder: Any = None, reports_dir: str | Path | None = None, db_path: str | Path | None = None,
                 on_event: Event | None = None):
        self.scenario = scenario
        self.settings = settings
        self.model = as_chat_model(model)
        self.embedder = embedder
        self.reports_dir = reports_dir
        self.db_path = db_path
        self.on_event = on_event or (lambda kind, data: None)
        self.replayed = self.model is None
        self.scripted = {a: ScriptedChatModel(role=a) for a in AGENTS}
        self.checkpointer = InMemorySaver()  # threads are sessions; memory lives in the store

    def _graph(self, mm: MemoryManager) -> Any:
        if self.replayed:
            agents = default_agents(models=self.scripted, db_path=self.db_path, reports_dir=self.reports_dir)
        else:
            agents = default_agents(self.model, db_path=self.db_path, reports_dir=self.reports_dir)
        return build_supervisor_graph(agents, mm, self.model, checkpointer=self.checkpointer)

    def run(self) -> dict[str, Any]:
        out: dict[str, Any] = {"captures": {}, "checks": [], "expectations": [], "memory_errors": [],
                               "agent_errors": [], "isolation_violations": [], "probes": {}, "replayed": self.replayed,
                               "turns": 0, "answers": []}
        for si, session in enumerate(self.scenario.sessions, 1):
            now0 = self.scenario.start + timedelta(days=session.day)
            self.on_event("session", {"index": si, "thread": session.thread, "user": session.user,
                                      "title": session.title, "now": now0})
            # A new process per session: the store is reopened from its file.
            mm = MemoryManager.from_settings(self.settings, embedder=self.embedder)
            try:
                graph = self._graph(mm)
                for ti, turn in enumerate(session.turns):
                    self._turn(graph, session, turn, now0 + timedelta(minutes=5 * ti), out)
                if session.probe:
                    self._probe(mm, session, session.probe, now0 + timedelta(hours=1), out)
                for ns, texts in session.stored.items():
                    current = [r.content for r in mm.service.list(ns, limit=1000)]
                    for text in texts:
                        self._check(out, session, f"{ns} still holds “{text}”", any(text in c for c in current))
                if si == len(self.scenario.sessions):
                    out["memories"] = mm.service.count()
                    out["namespaces"] = {"/".join(ns): n for ns, n in mm.service.backend.namespaces()}
            finally:
                mm.close()
        return out

    def _turn(self, graph: Any, session: Session, turn: Turn, now: datetime, out: dict[str, Any]) -> None:
        out["turns"] += 1
        marks = {a: len(m.checks) for a, m in self.scripted.items()}
        if self.replayed:
            for agent, replies in turn.replay.items():
                self.scripted[agent].reset(replies)
        self.on_event("user", {"user": session.user, "text": turn.user, "now": now})
        config = {"configurable": {"thread_id": session.thread}}
        ctx = SupervisorContext(user_id=session.user, now=now)
        for mode, chunk in graph.stream({"messages": [("user", turn.user)]}, config, context=ctx,
                                        stream_mode=["custom", "updates"]):
            if mode == "custom":
                if "memory" in chunk:
                    self.on_event("memory", chunk["memory"])
                elif "route" in chunk:
                    self.on_event("route", chunk["route"])
                continue
            for node, upd in (chunk or {}).items():
                if not isinstance(upd, Mapping):
                    continue
                if node == "supervisor":
                    if upd.get("active"):
                        self.on_event("handoff", dict(upd["active"]))
                    elif upd.get("messages"):
                        self.on_event("answer", {"text": str(upd["messages"][-1].content)})
                elif node in AGENTS:
                    res = dict(upd.get("last_result") or {})
                    arts = upd.get("artifacts") or {}
                    info = {"agent": node, "replayed": self.replayed, "text": res.get("text", ""),
                            "error": res.get("error")}
                    if node == "text2sql" and arts.get("sql"):
                        info.update(sql=arts["sql"], rows=len(arts.get("rows") or []), columns=arts.get("columns"))
                    if node == "statistics" and arts.get("stats"):
                        info["stats"] = stats_brief(arts["stats"])
                    if node == "analysis" and arts.get("report_path"):
                        info["report"] = arts["report_path"]
                    new = self.scripted[node].checks[marks[node]:] if self.replayed else []
                    marks[node] += len(new)
                    info["expectations"] = new
                    out["expectations"].extend({"thread": session.thread, **c} for c in new)
                    self.on_event("agent", info)
        state = graph.get_state(config).values
        out["memory_errors"].extend(state.get("memory_errors") or [])
        out["agent_errors"].extend(state.get("agent_errors") or [])
        out["answers"].append(str(state["messages"][-1].content) if state.get("messages") else "")
        if self.replayed:
            for agent, m in self.scripted.items():
                if m.remaining:
                    self.on_event("warning", {"text": f"{agent}: {m.remaining} replayed step(s) unused — the graph "
                                                      "took another route than the scenario expected"})
                    m.reset()
        self._evaluate(session, turn, state.get("memory_log") or [], out)

    def _evaluate(self, session: Session, turn: Turn, mlog: list[dict[str, Any]], out: dict[str, Any]) -> None:
        injected = [e.get("text", "") for e in mlog if e["kind"] == "injected"]
        retrieved = [(e, h) for e in mlog if e["kind"] == "retrieved" for h in e["hits"]]
        for text in turn.check.get("injected_contains", []):
            self._check(out, session, f"injected memory contains “{text}”", any(text in i for i in injected))
        for text in turn.check.get("injected_excludes", []):
            self._check(out, session, f"injected memory does not contain “{text}”", not any(text in i for i in injected))
        for text in turn.check.get("profile_excludes", []):
            bad = [h["content"] for _, h in retrieved if h["type"] == "user_profile" and text in h["content"]]
            self._check(out, session, f"no retrieved user_profile memory contains “{text}”", not bad)
        foreign = [h for _, h in retrieved if _user_of(h["namespace"]) != session.user]
        if foreign:
            out["isolation_violations"].extend({"user": session.user, **h} for h in foreign)
        self._check(out, session, f"every retrieved memory belongs to {session.user}", not foreign)
        for cap in turn.capture:
            top = next((h["content"] for e, h in retrieved
                        if e["step"] == cap.get("step", e["step"]) and e["agent"] == cap.get("agent", e["agent"])
                        and parse_namespace(h["namespace"])[0] == cap["type"]), None)
            out["captures"][cap["as"]] = top
            self.on_event("capture", {"as": cap["as"], "content": top})

    def _check(self, out: dict[str, Any], session: Session, what: str, ok: bool) -> None:
        item = {"thread": session.thread, "check": what, "ok": bool(ok)}
        out["checks"].append(item)
        self.on_event("check", item)

    def _probe(self, mm: MemoryManager, session: Session, probe: Mapping[str, str], now: datetime,
               out: dict[str, Any]) -> None:
        user = probe.get("user", session.user)
        nss = list(read_namespaces(user, "text2sql"))
        hits = mm.recall(probe["query"], nss, top_k=10, now=now)
        foreign = [h for h in hits if h.record.namespace[1] != user]
        out["probes"][probe.get("as", "probe")] = {"user": user, "query": probe["query"],
                                                   "hits": [h.as_dict() for h in hits], "foreign": len(foreign)}
        self.on_event("probe", {"user": user, "query": probe["query"], "namespaces": ["/".join(n) for n in nss],
                                "hits": hits, "foreign": len(foreign)})
        self._check(out, session, f"probe as {user}: no memory of another user comes back",
                    not foreign)
