"""``memctl mcp`` end to end with the official SDK's own client: over stdio (the console script
spawned by the client) and over streamable HTTP (a server process on a free port). The same
search → timeline → get → save → forget session runs on both, and a client scoped to
``user_profile/u1`` must not see, change or delete anything of ``user_profile/u12``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memctl.mcp_server import ScopedMemory
from memory.collections import Collections
from memory.errors import InvalidInput, NotFound
from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings
from memory.text import count_tokens

mcp = pytest.importorskip("mcp")

_SCRIPT = Path(sys.executable).parent / "memctl"
MEMCTL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "memctl.cli"]
TOOLS = {"search", "timeline", "get", "save", "forget"}
U12_SECRET = "User u12 keeps the Kyoto budget spreadsheet as pie charts"


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("mcp")
    notes = d / "notes"
    notes.mkdir()
    (notes / "charts.md").write_text("# Chart guide\n\n## Colours\n\nBar charts use the brand palette; "
                                     "never use red for revenue.\n", encoding="utf-8")
    path = d / "memory.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        ids = {
            "chart": mm.remember("The user prefers bar charts over pie charts", "user_profile/u1").id,
            "unit": mm.remember("以后报表金额都用万元为单位", "user_profile/u1").id,
            "u12": mm.remember(U12_SECRET, "user_profile/u12").id,
        }
        with Collections(mm.service, mm.audit) as docs:
            docs.add("notes", notes)
            docs.index()
    return {"path": path, "ids": ids, "notes": notes}


def _env(store: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(MEMORY_PATH=str(store["path"]), HF_HUB_OFFLINE="1")
    return env


def _text(res: Any) -> str:
    return "\n".join(c.text for c in res.content if getattr(c, "type", "") == "text")


async def _session(client: Any, store: dict[str, Any]) -> dict[str, Any]:
    """search → timeline → get → save → forget, plus the isolation probes; returns what it saw."""
    seen: dict[str, Any] = {}
    tools = await client.list_tools()
    seen["tools"] = {t.name for t in tools.tools}
    res = await client.call_tool("search", {"query": "which chart type does the user like?"})
    assert not res.is_error, _text(res)
    lines = _text(res).splitlines()
    seen["search_lines"] = lines
    short = lines[0].split()[0]
    seen["short"] = short
    tl = await client.call_tool("timeline", {"id": short, "before": 2, "after": 2})
    seen["timeline"] = _text(tl)
    got = json.loads(_text(await client.call_tool("get", {"ids": [short]})))
    seen["get"] = got
    saves = []
    for content in ("The user wants weekly reports on Monday mornings",
                    "The user wants weekly reports on Monday mornings",
                    "From now on, show report amounts in yuan instead"):
        r = await client.call_tool("save", {"content": content})
        assert not r.is_error, _text(r)
        saves.append(json.loads(_text(r)))
    seen["saves"] = saves
    seen["forget"] = json.loads(_text(await client.call_tool("forget", {"id": saves[0]["id"]})))
    seen["after_forget"] = json.loads(_text(await client.call_tool("get", {"ids": [saves[0]["id"]]})))
    docs = await client.call_tool("search", {"query": "which colour must revenue charts avoid?", "k": 1})
    seen["docs_line"] = _text(docs)
    # isolation: u12's memory by content, by id, by namespace
    u12 = store["ids"]["u12"]
    probe = await client.call_tool("search", {"query": U12_SECRET, "k": 10})
    seen["probe_search"] = _text(probe)
    seen["probe_get"] = json.loads(_text(await client.call_tool("get", {"ids": [u12]})))
    seen["probe_forget"] = await client.call_tool("forget", {"id": u12})
    seen["probe_timeline"] = await client.call_tool("timeline", {"id": u12})
    seen["probe_save"] = await client.call_tool("save", {"content": "x", "namespace": "user_profile/u12"})
    seen["probe_ns"] = await client.call_tool("search", {"query": "charts", "namespace": "user_profile/u12"})
    seen["bad"] = await client.call_tool("timeline", {"id": short, "date": "2025-01-01"})
    return seen


def _check(seen: dict[str, Any], store: dict[str, Any]) -> None:
    ids = store["ids"]
    assert seen["tools"] == TOOLS
    first = seen["search_lines"][0]
    # compact: short id, score, date, namespace, first line — a few tokens per hit
    assert re.match(r"^[0-9a-f]{12} \d\.\d\d \d{4}-\d\d-\d\d user_profile/u1 The user prefers bar charts", first)
    assert ids["chart"].startswith(seen["short"])
    assert all(count_tokens(line) <= 40 for line in seen["search_lines"])
    assert "→ " + seen["short"] in seen["timeline"]
    (rec,) = seen["get"]["memories"]
    assert rec["id"] == ids["chart"] and rec["content"] == "The user prefers bar charts over pie charts"
    assert [s["status"] for s in seen["saves"]] == ["added", "skipped", "updated"]
    assert seen["saves"][2]["id"] == ids["unit"]  # the unit preference was updated in place
    assert seen["forget"] == {"forgotten": seen["saves"][0]["id"], "deleted": 1, "restorable": True}
    assert seen["after_forget"] == {"memories": [], "missing": [seen["saves"][0]["id"]]}
    assert "docs/notes charts.md:5 Bar charts use the brand palette" in seen["docs_line"]
    # u1 is a prefix of u12 as a string, never as a namespace
    assert "u12" not in seen["probe_search"] and "Kyoto" not in seen["probe_search"]
    assert seen["probe_get"] == {"memories": [], "missing": [ids["u12"]]}
    for key in ("probe_forget", "probe_timeline", "probe_save", "probe_ns", "bad"):
        assert seen[key].is_error, key
    assert "outside this server's scope" in _text(seen["probe_save"])
    assert "no memory" in _text(seen["probe_forget"])  # same answer as for an id that does not exist
    with MemoryManager.from_settings(MemorySettings(path=str(store["path"]))) as mm:
        assert mm.service.get(ids["u12"]).content == U12_SECRET
        assert mm.service.get(ids["unit"]).content == "From now on, show report amounts in yuan instead"
        actors = {e.actor for e in mm.audit.events(namespace=("user_profile", "u1"), limit=100)}
        assert "mcp" in actors


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stdio_client_spawns_memctl_mcp(store):
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=MEMCTL[0], args=[*MEMCTL[1:], "mcp", "--ns", "user_profile/u1",
                                                            "--ns", "docs/notes"], env=_env(store))

    async def main() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _session(client, store)

    _check(_run(main()), store)


def test_http_client_streamable(store, tmp_path):
    from mcp import Client

    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([*MEMCTL, "mcp", "--http", str(port), "--ns", "user_profile/u1", "--ns", "docs/notes"],
                            env=_env(store), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.2)

        async def main() -> dict[str, Any]:
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as client:
                return await _session(client, store)

        seen = _run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    # the stdio test ran the same session first on this module's store: the saves now restate
    # what is stored, so compare the parts that do not depend on order
    assert seen["tools"] == TOOLS and seen["probe_get"]["memories"] == []
    assert "u12" not in seen["probe_search"] and seen["probe_save"].is_error and seen["probe_forget"].is_error
    assert seen["search_lines"][0].split()[3] == "user_profile/u1"
    assert seen["get"]["memories"][0]["namespace"] == "user_profile/u1"
    assert {s["status"] for s in seen["saves"]} <= {"added", "skipped", "merged", "updated"}


def test_scoped_memory_rules(tmp_path, embedder, store):
    with MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite")), embedder=embedder) as mm:
        mm.remember("Team standup is at 9:30", "domain_facts/u1")
        with pytest.raises(InvalidInput, match="at least one"):
            ScopedMemory(mm, [])
        two = ScopedMemory(mm, ["user_profile/u1", "domain_facts/u1"])
        with pytest.raises(InvalidInput, match="several namespaces"):
            two.save("x")
        assert json.loads(two.save("Prefers tables", "user_profile/u1"))["status"] == "added"
        with pytest.raises(InvalidInput, match="between 1 and 50"):
            two.search("x", k=0)
        with pytest.raises(InvalidInput, match="YYYY-MM-DD"):
            two.timeline(date="yesterday-ish")
        with pytest.raises(InvalidInput, match="either id"):
            two.timeline()
        day = two.timeline(date="2000-01-01", before=1, after=5)
        assert day.splitlines()[0] == "→ 2000-01-01 00:00" and len(day.splitlines()) == 3
        with pytest.raises(NotFound):
            two.forget("0" * 32)
        docs = ScopedMemory(mm, ["docs"])
        with pytest.raises(InvalidInput, match="read-only"):
            docs.save("x", "docs/notes")
