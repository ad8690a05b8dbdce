"""The offline demo behind ``memctl demo``: the Supervisor graph, two users, zh/en, four sessions.

Views: ``--quiet`` (one screen), default (a line per step, :mod:`memctl.demo_views`), ``--verbose``
(every routing decision and scored hit, :class:`_Printer`).

The scenario (``supervisor/scenarios/demo.yaml``) runs through the real graph on the embedded
default store (a SQLite file + the packaged embedding model): memory entry → supervisor →
pre-node → agent → post-node for every handoff, with an ``InMemorySaver`` checkpointer whose
threads are the sessions. Without ``model`` the agents' LLM steps are replayed from the scenario
file (and the output says so); with ``model`` ("provider:name") they run on that model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from memctl.demo_views import CompactPrinter, QuietPrinter, print_summary
from memory.settings import MemorySettings


def _hit_lines(hits: list[dict[str, Any]]) -> list[Text]:
    """One line per hit: score = alpha*sim + beta*decay + gamma*boost, sim from vector + keyword."""
    out = []
    for i, h in enumerate(hits, 1):
        t = Text("          ")
        t.append(f"#{i} {h['score']:.3f}", style="bold")
        t.append(f" = sim {h['sim']:.3f} [vec {h['vector']:.3f} kw {h['keyword']:.3f}] · decay {h['decay']:.3f}"
                 f" · boost {h['boost']:.2f}  ", style="dim")
        t.append(f"{h['namespace']}  ", style="blue")
        t.append(h["content"][:110] + ("…" if len(h["content"]) > 110 else ""))
        out.append(t)
    return out


class _Printer:
    def __init__(self, console: Console, budget: int):
        self.c = console
        self.budget = budget

    def line(self, tag: str, style: str, text: str) -> None:
        t = Text()
        t.append(f"{tag} ", style=style)
        t.append(text)
        self.c.print(t)

    def __call__(self, kind: str, d: dict[str, Any]) -> None:
        c = self.c
        if kind == "session":
            c.print()
            c.rule(f"session {d['index']} · user {d['user']} · thread {d['thread']} · {d['now']:%Y-%m-%d}")
            if d["title"]:
                c.print(Text(d["title"], style="italic"))
            c.print(Text("(store reopened from its file: a new process)", style="dim"))
        elif kind == "user":
            self.line(f"👤 {d['user']}:", "bold cyan", d["text"])
        elif kind == "route":
            if d["agents"]:
                why = "; ".join(f"{a} ({d['reasons'].get(a, '')})" for a in d["agents"])
                self.line("route   ▸", "magenta", f"semantic router → {' → '.join(d['agents'])}: {why}")
            else:
                self.line("route   ▸", "magenta", f"semantic router → no agent ({d['reasons'].get('*', '')})")
        elif kind == "handoff":
            self.line("handoff ▸", "magenta", f"{d['agent']}  task: {d['task'][:120]}")
        elif kind == "memory":
            self.memory(d)
        elif kind == "agent":
            tag = "[LLM replayed from scenario]" if d["replayed"] else "[live model]"
            self.line(f"agent   ▸ {d['agent']} {tag}", "green", "")
            if d.get("sql"):
                c.print(Text(f"          SQL (executed read-only): {d['sql']}", style="dim"))
                c.print(Text(f"          rows: {d['rows']} ({', '.join(d.get('columns') or [])})", style="dim"))
            if d.get("stats"):
                c.print(Text(f"          computed: {d['stats']}", style="dim"))
            if d.get("report"):
                c.print(Text(f"          report: {d['report']}", style="dim"))
            first = (d.get("text") or "").splitlines()[0] if d.get("text") else ""
            if first:
                c.print(Text(f"          says: {first[:200]}"))
            for e in d.get("expectations") or []:
                mark = "✓" if e["found"] else "✗"
                c.print(Text(f"          {mark} replayed step's input contained “{e['expect']}”",
                             style="green" if e["found"] else "red"))
            if d.get("error"):
                self.line("          !", "red", str(d["error"]))
        elif kind == "answer":
            self.line("🤖 supervisor:", "bold green", d["text"][:600])
        elif kind == "check":
            self.line("check   ▸", "green" if d["ok"] else "bold red", f"{'✓' if d['ok'] else '✗'} {d['check']}")
        elif kind == "capture":
            self.line("capture ▸", "blue", f"{d['as']} = {d['content']}")
        elif kind == "probe":
            self.line("probe   ▸", "blue", f"{d['user']} searches {', '.join(d['namespaces'])} for “{d['query']}”: "
                      f"{len(d['hits'])} hit(s), {d['foreign']} of another user")
            for line in _hit_lines([{**h.as_dict()["score"], "namespace": "/".join(h.record.namespace),
                                     "content": h.record.content} for h in d["hits"]]):
                self.c.print(line)
        elif kind == "warning":
            self.line("warning ▸", "bold yellow", d["text"])

    def memory(self, e: dict[str, Any]) -> None:
        where = e["step"] + (f":{e['agent']}" if e.get("agent") else "")
        tag = f"memory  ▸ {where:<18}"
        k = e["kind"]
        if k == "routed":
            parts = []
            if e["should_read"] and e["step"] != "post":
                parts.append(f"read {', '.join(e['read_namespaces'])} (top_k={e['top_k']})")
            if e["should_write"]:
                parts.append(f"write {e['memory_type']} → {e['write_namespace']}")
            self.line(f"{tag} routed:", "yellow", f"{' + '.join(parts) or 'nothing to read or write'} — {e['reason']}"
                      + ("" if e["step"] != "post" else f"  «{e['text'][:70]}»"))
        elif k == "retrieved":
            if e["hits"]:
                self.line(f"{tag} retrieved:", "yellow", f"{len(e['hits'])} hit(s) for “{e['query'][:60]}”")
                for line in _hit_lines(e["hits"]):
                    self.c.print(line)
            else:
                self.line(f"{tag} retrieved:", "yellow", "no memories")
        elif k == "injected":
            target = "the Supervisor's prompt" if e["step"] == "entry" else f"a SystemMessage for {e['agent']}"
            self.line(f"{tag} injected:", "yellow", f"{e['tokens']}/{e['budget']} tokens into {target}"
                      if e["tokens"] else "nothing")
        elif k == "written":
            extra = f" (superseded {len(e['superseded'])})" if e.get("superseded") else ""
            self.line(f"{tag} {e['status']}:", "bold yellow",
                      f"{e['namespace']}: {e['content'][:140]}  [{e['judgement']}: {e['reason']}]{extra}")
        elif k == "merged":
            self.line(f"{tag} merged:", "yellow", f"agent answer → supervisor messages ({e['as_']})")
        elif k == "error":
            self.line(f"{tag} ERROR:", "bold red", f"{e['op']}: {e['error']} — continuing without memory")
        elif k == "timing":
            self.line(f"{tag} time:", "dim", f"{e['ms']:.1f} ms")


DETAILS = ("quiet", "normal", "verbose")


def run_demo(path: str | None = None, console: Console | None = None, model: str | None = None,
             scenario: str | None = None, detail: str = "normal") -> dict[str, object]:
    """Run the scenario through the Supervisor graph; returns the facts it checked (used by tests).

    Args:
        path: the demo's SQLite store (default: a new temp file).
        console: where to print (default: stdout).
        model: an ``init_chat_model`` string ("provider:name"); None replays the agents' LLM
            steps from the scenario file.
        scenario: a scenario YAML (default: the packaged ``supervisor/scenarios/demo.yaml``).
        detail: ``"quiet"`` (one screen: a line per session and the checks), ``"normal"`` (a
            line per step) or ``"verbose"`` (every routing decision and scored hit).

    Returns:
        The checks, plus ``events``: every ``(kind, data)`` the run reported, in order (so a
        caller can render the run in another view, :func:`render`).

    Raises:
        ValueError: the model cannot be started (unknown provider, missing package or API key),
            or ``detail`` is not one of :data:`DETAILS`.
    """
    from supervisor.graph import as_chat_model
    from supervisor.scenario import ScenarioRunner, load_scenario

    if detail not in DETAILS:
        raise ValueError(f"detail must be one of {', '.join(DETAILS)}, got {detail!r}")
    chat = as_chat_model(model)  # fail before printing anything if the model cannot start
    console = console or Console()
    if path is None:
        path = str(Path(tempfile.mkdtemp(prefix="memctl-demo-")) / "demo.sqlite")
    reports = Path(path).resolve().parent / "reports"
    settings = MemorySettings(path=path)
    sc = load_scenario(scenario)
    _header(console, sc.source, model, path, settings, reports, detail)
    events: list[tuple[str, dict[str, Any]]] = []
    show = _view(console, detail, settings)

    def on_event(kind: str, data: dict[str, Any]) -> None:
        events.append((kind, data))
        show(kind, data)

    runner = ScenarioRunner(sc, settings, model=chat, reports_dir=reports, on_event=on_event)
    out = runner.run()
    checks = _checks(out)
    if isinstance(show, QuietPrinter):
        show.flush()
    print_summary(console, checks, path)
    checks["events"] = events
    return checks


def render(events: list[tuple[str, dict[str, Any]]], checks: dict[str, Any], console: Console, detail: str,
           path: str = "") -> None:
    """Print a finished run (``run_demo(...)["events"]``) in another view."""
    show = _view(console, detail, MemorySettings(path=":memory:"))
    for kind, data in events:
        show(kind, data)
    if isinstance(show, QuietPrinter):
        show.flush()
    print_summary(console, checks, path)


def _view(console: Console, detail: str, settings: MemorySettings) -> Any:
    if detail == "verbose":
        return _Printer(console, settings.policy.summary_max_tokens)
    return QuietPrinter(console) if detail == "quiet" else CompactPrinter(console)


def _header(console: Console, source: str, model: str | None, path: str, settings: MemorySettings,
            reports: Path, detail: str) -> None:
    console.rule("memctl demo: long-term memory in a LangGraph Supervisor (Text2SQL / Statistics / Analysis)")
    if detail == "verbose":
        if model is None:
            console.print(Text(
                "NO LLM IS USED. The agents' LLM steps (writing SQL, choosing statistics, writing findings) are "
                f"REPLAYED from the scenario file {source}. Live: the Supervisor's routing (semantic router: "
                "embeddings + rules), every memory step (route, search, summarise, inject, write, merge), read-only "
                "SQL on the sample sales DB, the statistics, the report files.", style="bold"))
        else:
            console.print(Text(f"LLM: {model} — the Supervisor (handoff tools) and all agents run on it; nothing is "
                               "replayed.", style="bold"))
        console.print(Text(f"store: {path} · embeddings: {settings.embedding.model} · reports: {reports} · "
                           "threads: InMemorySaver checkpointer, one thread per session; memory crosses threads",
                           style="dim"))
        return
    what = ("NO LLM: agents' LLM steps REPLAYED from the scenario; routing, memory, SQL, statistics run live"
            if model is None else f"LLM: {model} runs the Supervisor and every agent")
    for line, style in ((what, "bold"), (f"store: {path} · --verbose shows every memory step", "dim")):
        console.print(Text(line, style=style), no_wrap=True, overflow="ellipsis", crop=True)


def _checks(out: dict[str, Any]) -> dict[str, Any]:
    caps = out["captures"]
    probe = out["probes"].get("alice_probe") or {}
    return {
        "cross_language_top": caps.get("cross_language_top"),
        "definition_top": caps.get("definition_top"),
        "updated_top": caps.get("updated_top"),
        "alice_sees_zhang": bool(probe.get("foreign"))
        or any(v["user"] == "alice" for v in out["isolation_violations"]),
        "memories": out.get("memories", 0),
        "replayed": out["replayed"],
        "checks": out["checks"],
        "expectations": out["expectations"],
        "memory_errors": out["memory_errors"],
        "agent_errors": out["agent_errors"],
        "namespaces": out.get("namespaces", {}),
    }
