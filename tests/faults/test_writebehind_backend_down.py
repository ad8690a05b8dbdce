"""A graph run with the store down completes, and its writes are replayed when the store returns.

"Down" is a fault we can produce for real on this machine: another process holds the SQLite
store file under an exclusive lock (``BEGIN EXCLUSIVE``), so every write times out. The run
answers, the failures are in ``memory_errors``, the writes wait in the journal, and once the lock
is released the next turn applies them — each exactly once.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from memory import MemorySettings
from memory.policy.manager import MemoryManager
from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph
from supervisor.journal import WriteJournal
from tests.faults._wb_child import ITEMS, Noter

pytestmark = pytest.mark.slow
LOCK = ("import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n")


@pytest.mark.parametrize("write_behind", [True, False], ids=["write_behind", "inline"])
def test_store_locked_by_another_process(tmp_path, embedder, write_behind):
    path = str(tmp_path / "memory.sqlite")
    settings = MemorySettings(path=path, policy={"write_behind": write_behind})
    with MemoryManager.from_settings(settings, embedder=embedder) as mm:
        # A short busy timeout: the store is "down" after 0.3 s instead of the default 10 s.
        mm.service.backend._conn.execute("PRAGMA busy_timeout = 300")
        sup = ScriptedChatModel(role="supervisor", replies=[
            {"tool_calls": [{"name": "transfer_to_noter", "args": {"task": "items:0,3"}}]}, "done",
            {"tool_calls": [{"name": "transfer_to_noter", "args": {"task": "items:5"}}]}, "done again"])
        graph = build_supervisor_graph([Noter()], mm, sup, checkpointer=InMemorySaver())
        holder = subprocess.Popen([sys.executable, "-c", LOCK, path], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            out = graph.invoke({"messages": [HumanMessage("以后报表金额都用万元为单位。note the findings")]},
                               {"configurable": {"thread_id": "t1"}}, context=SupervisorContext(user_id="u1"))
            assert out["messages"][-1].content == "done"  # the run completed without memory
            assert out["memory_errors"] and any(e["kind"] == "retry_queued" for e in out["memory_log"])
            assert len(WriteJournal.for_store(path)) == 3  # the preference and the two conclusions
        finally:
            holder.stdin.close()  # type: ignore[union-attr]
            holder.wait(timeout=30)
        out = graph.invoke({"messages": [HumanMessage("note the findings")]}, {"configurable": {"thread_id": "t2"}},
                           context=SupervisorContext(user_id="u1"))
        assert out["messages"][-1].content == "done again" and out["memory_errors"] == []
        assert len(WriteJournal.for_store(path)) == 0
        stored = [r.content for r in mm.service.list("noter_memories/u1")]
        assert sorted(stored) == sorted([ITEMS[0], ITEMS[3], ITEMS[5]])  # each once
        assert [r.content for r in mm.service.list("user_profile/u1")] == ["以后报表金额都用万元为单位。"]
