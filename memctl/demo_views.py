"""The short views of ``memctl demo``: one line per step (default) and one screen (``--quiet``).

The full trace (every routing decision, every hit with its score breakdown) is
:class:`memctl.demo._Printer`, shown with ``--verbose``. These views print the same run with one
line per event that matters, cut at the terminal's width: what the user said, what memory stored,
what each agent got and did, the answer, and any failed check. ``--quiet`` prints only the
closing summary: the checks that show memory at work, and the totals.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class CompactPrinter:
    """One line per step, never wrapped (long lines end in …)."""

    def __init__(self, console: Console):
        self.c = console
        self._injected: dict[str, int] = {}

    def line(self, text: Text | str, style: str = "") -> None:
        t = text if isinstance(text, Text) else Text(_one_line(text), style=style)
        self.c.print(t, no_wrap=True, overflow="ellipsis", crop=True)

    def tagged(self, tag: str, style: str, text: str) -> None:
        t = Text()
        t.append(tag, style=style)
        t.append(_one_line(text))
        self.line(t)

    def __call__(self, kind: str, d: dict[str, Any]) -> None:
        if kind == "session":
            self.c.print()
            self.c.rule(f"session {d['index']} · {d['user']} · thread {d['thread']} · {d['now']:%Y-%m-%d}")
            if d["title"]:
                self.line(d["title"], "italic")
        elif kind == "user":
            self.tagged(f"👤 {d['user']}: ", "bold cyan", d["text"])
        elif kind == "memory":
            self.memory(d)
        elif kind == "agent":
            self.agent(d)
        elif kind == "answer":
            self.tagged("🤖 ", "bold green", d["text"])
        elif kind == "check" and not d["ok"]:
            self.tagged("   ✗ check failed: ", "bold red", d["check"])
        elif kind == "probe":
            self.tagged("   probe: ", "blue", f"{d['user']} asks “{d['query']}” → {len(d['hits'])} hit(s), "
                                              f"{d['foreign']} of another user")
        elif kind == "warning":
            self.tagged("   warning: ", "bold yellow", d["text"])

    def memory(self, e: dict[str, Any]) -> None:
        k = e["kind"]
        if k == "written":
            self.tagged(f"   memory {e['status']}: ", "yellow", f"{e['namespace']} ← {e['content']}")
        elif k == "injected" and e.get("agent"):
            self._injected[e["agent"]] = e["tokens"]
        elif k == "error":
            self.tagged("   memory error: ", "bold red", f"{e['op']}: {e['error']} (continuing without memory)")

    def agent(self, d: dict[str, Any]) -> None:
        did = []
        if d.get("rows") is not None and d.get("sql"):
            did.append(f"SQL → {d['rows']} rows")
        if d.get("stats"):
            did.append("statistics computed")
        if d.get("report"):
            did.append(f"report {str(d['report']).rsplit('/', 1)[-1]}")
        tokens = self._injected.pop(d["agent"], 0)
        seen = [e["expect"] for e in d.get("expectations") or [] if e["found"]]
        missed = [e["expect"] for e in d.get("expectations") or [] if not e["found"]]
        mem = f"memory in: {tokens} tok" + (f" (saw {', '.join(seen)})" if seen else "")
        if missed:
            mem += f" ✗ missing {', '.join(missed)}"
        tag = "replayed" if d["replayed"] else "live model"
        self.tagged(f"   → {d['agent']} [{tag}]: ", "green", " · ".join([*did, mem]))
        if d.get("error"):
            self.tagged("     ! ", "red", str(d["error"]))


def key_checks(checks: dict[str, Any]) -> list[tuple[bool, str]]:
    """The checks that show memory at work, one line each."""
    cross = str(checks.get("cross_language_top") or "")
    definition = str(checks.get("definition_top") or "")
    updated = str(checks.get("updated_top") or "")
    return [
        ("万元" in cross, f"new session, English question → Chinese preference recalled: "
                         f"{cross or 'nothing'}"),
        ("GMV" in definition, f"the user's GMV definition reaches the SQL agent: {definition or 'nothing'}"),
        ("元为单位" in updated and "万元" not in updated,
         f"a changed preference replaces the old one: {updated or 'nothing'}"),
        (not checks.get("alice_sees_zhang"), "a second user never sees the first user's memories"),
    ]


def print_summary(console: Console, checks: dict[str, Any], path: str) -> None:
    """The closing block, the same in every view."""
    console.print()
    console.rule("summary")
    for ok, text in key_checks(checks):
        t = Text(f"{'✓' if ok else '✗'} ", style="bold green" if ok else "bold red")
        t.append(_one_line(text))
        console.print(t, no_wrap=True, overflow="ellipsis", crop=True)
    all_checks = checks.get("checks") or []
    exp = checks.get("expectations") or []
    failed = [c for c in all_checks if not c["ok"]] + [e for e in exp if not e["found"]]
    console.print(Text(
        f"scenario checks passed: {sum(c['ok'] for c in all_checks)}/{len(all_checks)} · replayed steps that saw "
        f"their memory: {sum(e['found'] for e in exp)}/{len(exp)} · memory errors: "
        f"{len(checks.get('memory_errors') or [])} · agent errors: {len(checks.get('agent_errors') or [])}",
        style="bold red" if failed else "bold green"))
    ns = checks.get("namespaces") or {}
    console.print(Text(f"stored: {checks.get('memories', 0)} memories in {len(ns)} namespaces · file kept at {path}",
                       style="dim"))
    for c in failed[:10]:
        console.print(Text(f"✗ {c.get('check') or c.get('expect')}", style="red"), no_wrap=True, overflow="ellipsis")


class QuietPrinter:
    """``--quiet``: one line per session while it runs; the summary does the rest."""

    def __init__(self, console: Console):
        self.c = console
        self._session: dict[str, Any] | None = None
        self._counts = {"turns": 0, "written": 0, "handoffs": 0, "failed": 0}

    def __call__(self, kind: str, d: dict[str, Any]) -> None:
        if kind == "session":
            self.flush()
            self._session = d
            self._counts = dict.fromkeys(self._counts, 0)
        elif kind == "user":
            self._counts["turns"] += 1
        elif kind == "memory" and d["kind"] == "written":
            self._counts["written"] += 1
        elif kind == "agent":
            self._counts["handoffs"] += 1
        elif kind == "check" and not d["ok"]:
            self._counts["failed"] += 1

    def flush(self) -> None:
        if self._session is None:
            return
        d, n = self._session, self._counts
        mark = "✓" if not n["failed"] else f"✗ {n['failed']} failed"
        t = Text(f"session {d['index']} · {d['user']} · {d['now']:%Y-%m-%d}: ", style="bold")
        turns = f"{n['turns']} turn" + ("s" if n["turns"] != 1 else "")
        t.append(f"{turns}, {n['handoffs']} agent steps, {n['written']} memories written {mark}")
        self.c.print(t, no_wrap=True, overflow="ellipsis", crop=True)
        self._session = None


__all__ = ["CompactPrinter", "QuietPrinter", "key_checks", "print_summary"]
