"""``memctl eval graph``: the four metrics of seed 004 on scripted multi-session Supervisor runs.

The scenario file (``supervisor/scenarios/graph_eval.yaml``) gives, per user, a preference, a
definition, a correction and two tasks with their labels (markers); :func:`expand` turns each
user into four sessions (see the file's header). The sessions run through the real Supervisor
graph — scripted Supervisor and Text2SQL models (``ScriptedChatModel``), the real store, embedder,
write policy and SQL — twice:

* **memory on**: one store for every session (long-term memory);
* **memory off**: a new, empty store for every session (only what was said in the session).

Metrics (labels: the scenario's markers; "task" = a Text2SQL handoff with ``needs`` labels):

* ``hit_rate`` — memory on: share of the Text2SQL pre-node searches of labelled tasks in which
  at least one injected memory is relevant (contains one of the task's ``needs`` markers).
* ``context_utilisation`` — memory on: share of the memories injected into Text2SQL that its
  output used: the memory contains a marker (any fact label of that user) that appears in the
  agent's output (its reply and the SQL it ran), or the SQL it ran appears in the memory (a
  recalled query reused verbatim).
* ``duplicate_write_rate`` — memory on, at the end: share of current memories (user's profile,
  definitions, Text2SQL memories, shared context) that restate a fact another current memory of
  the same namespace already states (the same label, or the same text).
* ``cross_session_reuse_uplift`` — tasks answered correctly with memory on minus with memory off
  (shares of all labelled tasks). A task is answered correctly when the Text2SQL model's input
  contained every ``needs`` marker and no ``forbids`` marker (a preference replaced by a
  correction): a model cannot honour a preference or a definition it never sees.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from memory.errors import InvalidInput

USER_KEYS = ("id", "lang", "pref", "pref_marker", "definition", "definition_marker", "correction",
             "correction_marker", "task_a", "sql_a", "sql_marker", "task_b", "sql_b", "answer")


def _start() -> datetime:
    """The first simulated day: four days ago, so the last session is recent and TTLs (tool
    effects: 90 days) are judged against a clock the store agrees with."""
    today = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0)
    return today - timedelta(days=4)


@dataclass(frozen=True)
class Step:
    kind: str  # say | task
    text: str
    sql: str = ""
    needs: tuple[str, ...] = ()
    forbids: tuple[str, ...] = ()
    answer: str = ""
    cross_session: bool = False


@dataclass
class SimSession:
    user: str
    thread: str
    day: int
    steps: list[Step]
    markers: tuple[str, ...] = field(default_factory=tuple)


def default_scenario() -> Path:
    return Path(str(resources.files("supervisor").joinpath("scenarios", "graph_eval.yaml")))


def load_users(path: str | Path | None = None) -> list[dict[str, str]]:
    p = Path(path) if path is not None else default_scenario()
    if not p.is_file():
        raise InvalidInput(f"scenario file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{p}: not valid YAML: {exc}") from exc
    users = data.get("users") if isinstance(data, Mapping) else None
    if not isinstance(users, list) or not users:
        raise InvalidInput(f"{p}: needs a non-empty 'users' list")
    for i, u in enumerate(users):
        missing = [k for k in USER_KEYS if not isinstance(u, Mapping) or not str(u.get(k, "")).strip()]
        if missing:
            raise InvalidInput(f"{p}: user #{i + 1} lacks {', '.join(missing)}")
        for m, where in (("pref_marker", "pref"), ("definition_marker", "definition"),
                         ("correction_marker", "correction"), ("sql_marker", "sql_a")):
            if u[m] not in u[where]:
                raise InvalidInput(f"{p}: user {u['id']}: {m} {u[m]!r} does not occur in {where}")
    return [{k: str(u[k]) for k in USER_KEYS} for u in users]


def expand(users: list[dict[str, str]]) -> list[SimSession]:
    """Four sessions per user (see the scenario file's header), interleaved by day."""
    out: list[SimSession] = []
    for u in users:
        pref, dfn, cor, sqlm = u["pref_marker"], u["definition_marker"], u["correction_marker"], u["sql_marker"]
        markers = (pref, dfn, cor, sqlm)
        a = dict(sql=u["sql_a"], answer=u["answer"])
        b = dict(sql=u["sql_b"], answer=u["answer"])
        out += [
            SimSession(u["id"], f"{u['id']}-s1", 0, [Step("say", u["pref"]), Step("say", u["definition"]),
                                                     Step("task", u["task_a"], needs=(pref, dfn), **a)], markers),
            SimSession(u["id"], f"{u['id']}-s2", 1, [Step("task", u["task_b"], needs=(pref, dfn), cross_session=True,
                                                          **b)], markers),
            SimSession(u["id"], f"{u['id']}-s3", 2, [Step("say", u["correction"]),
                                                     Step("task", u["task_b"], needs=(cor,), forbids=(pref,), **b)],
                       markers),
            SimSession(u["id"], f"{u['id']}-s4", 3, [Step("task", u["task_a"], needs=(cor, dfn, sqlm), forbids=(pref,),
                                                          cross_session=True, **a)], markers),
        ]
    return sorted(out, key=lambda s: (s.day, s.user))


def _run(sessions: list[SimSession], *, memory: bool, embedder: Any, workdir: Path,
         progress: Callable[[str, int, int], None]) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage, SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from agents import default_agents
    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings
    from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph

    label = "memory on" if memory else "memory off"
    tasks: list[dict[str, Any]] = []
    shared: MemoryManager | None = None
    managers: list[MemoryManager] = []
    t0 = time.perf_counter()
    start = _start()

    def manager(i: int) -> MemoryManager:
        nonlocal shared
        if memory and shared is not None:
            return shared
        path = workdir / ("on.sqlite" if memory else f"off-{i}.sqlite")
        mm = MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder)
        managers.append(mm)
        if memory:
            shared = mm
        return mm

    try:
        for i, sess in enumerate(sessions):
            mm = manager(i)
            sup = ScriptedChatModel(role="supervisor")
            t2s = ScriptedChatModel(role="text2sql")
            models = {"text2sql": t2s, "statistics": ScriptedChatModel(role="statistics"),
                      "analysis": ScriptedChatModel(role="analysis")}
            graph = build_supervisor_graph(default_agents(models=models, reports_dir=workdir / "reports"), mm, sup,
                                           checkpointer=InMemorySaver())
            ctx = SupervisorContext(user_id=sess.user, now=start + timedelta(days=sess.day, minutes=i))
            for step in sess.steps:
                if step.kind == "say":
                    sup.extend(["OK"])
                else:
                    handoff = {"name": "transfer_to_text2sql", "args": {"task": step.text}}
                    sup.extend([{"tool_calls": [handoff]}, "done"])
                    t2s.extend([{"tool_calls": [{"name": "run_sql", "args": {"sql": step.sql}}]}, step.answer])
                n_calls = len(t2s.calls)
                out = graph.invoke({"messages": [HumanMessage(step.text)]},
                                   {"configurable": {"thread_id": sess.thread}}, context=ctx)
                if step.kind != "task":
                    continue
                first = t2s.calls[n_calls] if len(t2s.calls) > n_calls else []
                # What the model was given about this task: the injected memory and the task itself
                # (not the agent's own system prompt, which holds the schema).
                seen = "\n".join(str(m.content) for m in first if isinstance(m, HumanMessage) or (
                    isinstance(m, SystemMessage) and m.name == "memory"))
                mem_text = "\n".join(str(m.content) for m in first
                                     if isinstance(m, SystemMessage) and m.name == "memory")
                pre = [e for e in out["memory_log"] if e["step"] == "pre" and e.get("agent") == "text2sql"]
                hits = {h["id"]: h["content"] for e in pre if e["kind"] == "retrieved" for h in e["hits"]}
                used_ids = [i2 for e in pre if e["kind"] == "injected" for i2 in e.get("used", [])]
                tasks.append({
                    "user": sess.user, "thread": sess.thread, "task": step.text, "cross_session": step.cross_session,
                    "needs": list(step.needs), "forbids": list(step.forbids),
                    "correct": all(m in seen for m in step.needs) and not any(m in mem_text for m in step.forbids),
                    "injected": [hits[x] for x in used_ids if x in hits], "output": f"{step.answer}\n{step.sql}",
                    "markers": list(sess.markers), "sql": step.sql, "errors": list(out.get("memory_errors") or []),
                })
            progress(label, i + 1, len(sessions))
        final: dict[str, list[str]] = {}
        if memory and shared is not None:
            for u in dict.fromkeys(s.user for s in sessions):
                for kind in ("user_profile", "domain_facts", "text2sql_memories", "shared_context"):
                    final[f"{kind}/{u}"] = [r.content for r in shared.list(f"{kind}/{u}", limit=1000)]
    finally:
        for mm in managers:
            mm.close()
    return {"tasks": tasks, "final": final, "seconds": round(time.perf_counter() - t0, 1)}


def _duplicates(final: dict[str, list[str]], markers: dict[str, tuple[str, ...]]) -> tuple[int, int]:
    dup = total = 0
    for ns, contents in final.items():
        user = ns.split("/", 1)[1]
        seen: set[str] = set()
        for c in contents:
            total += 1
            keys = {f"m:{m}" for m in markers.get(user, ()) if m in c} or {"t:" + " ".join(c.split())}
            if keys & seen:
                dup += 1
            seen |= keys
    return dup, total


def metrics(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    labelled = [t for t in on["tasks"] if t["needs"]]
    searched = labelled  # every Text2SQL handoff of a task runs one pre-node search
    hits = sum(1 for t in searched if any(any(m in c for m in t["needs"]) for c in t["injected"]))
    injected = [(t, c) for t in on["tasks"] for c in t["injected"]]
    used = sum(1 for t, c in injected
               if any(m in c and m in t["output"] for m in t["markers"]) or (t["sql"] and t["sql"] in c))
    markers = {t["user"]: tuple(t["markers"]) for t in on["tasks"]}
    dup, total = _duplicates(on["final"], markers)
    c_on = sum(t["correct"] for t in on["tasks"]) / max(1, len(on["tasks"]))
    c_off = sum(t["correct"] for t in off["tasks"]) / max(1, len(off["tasks"]))
    cross_on = [t["correct"] for t in on["tasks"] if t["cross_session"]]
    cross_off = [t["correct"] for t in off["tasks"] if t["cross_session"]]
    r = lambda x: round(x, 3)  # noqa: E731
    return {
        "hit_rate": r(hits / max(1, len(searched))),
        "context_utilisation": r(used / max(1, len(injected))),
        "duplicate_write_rate": r(dup / max(1, total)),
        "cross_session_reuse_uplift": r(c_on - c_off),
        "task_accuracy": {"memory_on": r(c_on), "memory_off": r(c_off)},
        "cross_session_task_accuracy": {"memory_on": r(sum(cross_on) / max(1, len(cross_on))),
                                        "memory_off": r(sum(cross_off) / max(1, len(cross_off)))},
        "counts": {"tasks": len(on["tasks"]), "labelled_searches": len(searched), "hits": hits,
                   "injected_memories": len(injected), "used_memories": used, "stored_memories": total,
                   "duplicates": dup},
    }


def run_graph_eval(scenario: str | Path | None = None, *, users: int | None = None,
                   progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Run the simulation with memory on and off; the four metrics plus per-task detail."""
    from memory.embeddings import get_embedder
    from memory.settings import EmbeddingSettings

    people = load_users(scenario)
    if users is not None:
        if users < 1:
            raise InvalidInput(f"--users must be >= 1, got {users}")
        people = people[:users]
    sessions = expand(people)
    embedder = get_embedder(EmbeddingSettings().model)
    prog = progress or (lambda _s, _d, _t: None)
    with tempfile.TemporaryDirectory(prefix="memctl-eval-graph-") as tmp:
        on = _run(sessions, memory=True, embedder=embedder, workdir=Path(tmp), progress=prog)
        off = _run(sessions, memory=False, embedder=embedder, workdir=Path(tmp), progress=prog)
    result = metrics(on, off)
    result["scenario"] = str(scenario or default_scenario())
    result["sessions"] = len(sessions)
    result["users"] = len(people)
    result["languages"] = sorted({u["lang"] for u in people})
    result["seconds"] = {"memory_on": on["seconds"], "memory_off": off["seconds"]}
    result["memory_errors"] = [e for t in on["tasks"] + off["tasks"] for e in t["errors"]]
    result["tasks"] = [{k: t[k] for k in ("user", "thread", "task", "cross_session", "needs", "forbids", "correct")}
                       | {"correct_memory_off": o["correct"], "injected": len(t["injected"])}
                       for t, o in zip(on["tasks"], off["tasks"], strict=True)]
    return result


__all__ = ["expand", "load_users", "metrics", "run_graph_eval"]
