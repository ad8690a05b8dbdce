"""Bad input on the surfaces stop 30 swept: the Supervisor's memory tools called by a (scripted)
model, ``MemoryStore``'s ``index`` / ``ttl`` config, ``memctl import MEMORY.md`` with a hand-edited
file, ``memctl transcript tail``, ``memctl migrate`` onto a newer store, ``memctl eval retrieval``
with a malformed data folder, ``memctl delete`` with unknown ids and the MCP server's tools.

Each case: a clear error that says what to do (or the documented "memory is off" answer), and
what was stored before the bad call still there, unchanged (count and content), on a real SQLite
file with the packaged embedder.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memory.policy.manager import MemoryManager
from memory.policy.tools import OFF, make_memory_tools
from memory.settings import MemorySettings
from supervisor.shared import run_memory_tool


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("MEMORY_")]:
        monkeypatch.delenv(key)


def rows(path: Path) -> list[tuple[str, str, str]]:
    """(id, namespace, content) of every stored memory, read with plain sqlite3."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT id, ns, content FROM memories ORDER BY id").fetchall()
    finally:
        con.close()


def call_tool(tools: dict[str, Any], name: str, args: dict[str, Any], config: dict[str, Any]) -> str:
    """One tool call as the Supervisor graph runs it (supervisor.shared.run_memory_tool)."""
    msg = run_memory_tool(tools[name], {"name": name, "args": args, "id": "call-1"}, config)
    return str(msg.content)


# ------------------------------------------------------------------ memory tools (scripted LLM calls)
@pytest.mark.parametrize("config", [{"configurable": {"thread_id": "t1"}}, {"configurable": {}}, {}],
                         ids=["thread-only", "no-ids", "no-configurable"])
def test_steering_tools_respect_memory_off(config: dict[str, Any], tmp_path: Path, embedder: Any) -> None:
    """policy.anonymous 'off' and no user id: memory_list / memory_share / memory_restore answer that
    memory is off, like the other tools, and write nothing (memory_share wrote a thread's team memory,
    and without any id the three answered with a namespace error about a None label)."""
    path = tmp_path / "m.sqlite"
    settings = MemorySettings(path=str(path), policy={"anonymous": "off"})
    with MemoryManager.from_settings(settings, embedder=embedder) as mm:
        rid = mm.remember("The user prefers bar charts", "user_profile/u1").id
        mm.delete(rid)
        tools = {t.name: t for t in make_memory_tools(mm)}
        before = rows(path)
        for name, args in [("memory_share", {"content": "The team reports in yuan"}), ("memory_list", {}),
                           ("memory_restore", {"memory_id": rid})]:
            assert call_tool(tools, name, args, config) == OFF, name
        assert rows(path) == before
        assert mm.service.backend.count() == 0  # the deleted memory stayed in the trash


def test_steering_tools_without_any_id_say_memory_is_off(tmp_path: Path, embedder: Any) -> None:
    """Default policy (per-thread memory) but neither user nor thread id: the documented answer,
    not "namespace ('user_profile', None): label None is a NoneType"."""
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
        tools = {t.name: t for t in make_memory_tools(mm)}
        before = rows(path)
        for name, args in [("memory_share", {"content": "The team reports in yuan"}), ("memory_list", {})]:
            assert call_tool(tools, name, args, {"configurable": {"user_id": "  "}}) == OFF, name
        assert rows(path) == before
