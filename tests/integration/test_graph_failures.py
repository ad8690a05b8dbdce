"""Failure never breaks the flow: embedder, backend, audit-log and journal-disk failures injected into a
real Supervisor graph (scripted models, real SQLite file, real embedder). The run completes without
memory, the failure is in ``memory_errors`` / ``memory_log``, and the write that failed is kept in the
write journal and applied at the next turn, once."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import pytest
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver

from memory import MemorySettings
from memory.errors import BackendUnavailable
from memory.policy.manager import MemoryManager
from supervisor import ScriptedChatModel
from supervisor.journal import WriteJournal
from supervisor.memory_hooks import memory_middleware
from tests.integration.test_supervisor_graph import SQL, Team, injected

PREF = "以后报表里的金额都用万元为单位。"


class FlakyEmbedder:
    """The real embedder, unreachable while ``down`` (like a remote embedding API)."""

    def __init__(self, inner: Any):
        self.inner, self.down = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_documents(self, texts: Any) -> np.ndarray:
        if self.down:
            raise ConnectionError("embedding service unreachable")
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if self.down:
            raise ConnectionError("embedding service unreachable")
        return self.inner.embed_query(text)


@pytest.fixture
def flaky(embedder):
    return FlakyEmbedder(embedder)


@pytest.fixture(params=[True, False], ids=["write_behind", "inline"])
def manager(request, tmp_path, flaky):
    # Built on the flaky embedder: the write judge keeps a reference to the manager's embedder.
    settings = MemorySettings(path=str(tmp_path / "memory.sqlite"), policy={"write_behind": request.param})
    mm = MemoryManager.from_settings(settings, embedder=flaky)
    yield mm
    mm.close()


def errors_of(out: dict[str, Any]) -> list[str]:
    return [e["error"] for e in out["memory_log"] if e["kind"] == "error"]


def contents(mm: MemoryManager, ns: str) -> list[str]:
    return [r.content for r in mm.service.list(ns)]


def test_embedder_connection_error_does_not_break_the_run(manager, flaky, tmp_path):
    flaky.down = True
    team = Team(manager, tmp_path)
    out = team.say("u1", "t1", PREF, final="好的")
    assert out["messages"][-1].content == "好的"
    assert out["memory_errors"] and any("ConnectionError" in e for e in errors_of(out))
    assert any(e["kind"] == "retry_queued" for e in out["memory_log"])
    out = team.say("u1", "t2", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert out["messages"][-1].content == "done" and out["artifacts"]["sql"] == SQL  # the handoff ran
    journal = WriteJournal.for_store(manager.settings.path)
    # the preference, text2sql's SQL and the finding it publishes to shared_context, kept for a retry
    assert len(journal) == 3
    flaky.down = False  # the service is back: the next turn applies both, once
    out = team.say("u1", "t3", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert out["memory_errors"] == [] and len(journal) == 0
    assert contents(manager, "user_profile/u1") == [PREF]
    assert len(manager.service.list("text2sql_memories/u1")) == 1
    assert len(manager.service.list("shared_context/u1")) == 1
    assert "万元" in injected(team.agent_input("text2sql"))


@pytest.mark.parametrize("fault", [BackendUnavailable("store down (injected)"),
                                   sqlite3.OperationalError("database or disk is full")],
                         ids=["unavailable", "disk_full"])
def test_backend_down_queues_writes_and_replays_them(manager, tmp_path, monkeypatch, fault):
    backend = manager.service.backend
    # Every SQLite write (plain upsert and the policy's compare-and-write) goes through _upsert.
    real_upsert = backend._upsert
    state = {"down": True}

    def upsert(*a: Any, **k: Any) -> Any:
        if state["down"]:
            raise fault
        return real_upsert(*a, **k)

    monkeypatch.setattr(backend, "_upsert", upsert)
    team = Team(manager, tmp_path)
    out = team.say("u1", "t1", PREF, final="好的")
    assert out["messages"][-1].content == "好的" and any(type(fault).__name__ in e for e in errors_of(out))
    assert manager.service.count("user_profile/u1") == 0
    state["down"] = False
    out = team.say("u1", "t2", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert [e["journal"] for e in out["memory_log"] if e["kind"] == "written" and e.get("journal")]
    assert contents(manager, "user_profile/u1") == [PREF] and "万元" in injected(team.agent_input("text2sql"))


def test_audit_log_failure_does_not_break_the_run_nor_duplicate(manager, tmp_path, monkeypatch):
    def broken(*a: Any, **k: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setattr(manager.audit, "record", broken)
    team = Team(manager, tmp_path)
    out = team.say("u1", "t1", PREF, final="好的")
    assert out["messages"][-1].content == "好的" and any("disk I/O error" in e for e in errors_of(out))
    monkeypatch.undo()
    team.say("u1", "t2", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    # the memory was stored before the audit row failed; the retry found it and did not add it again
    assert contents(manager, "user_profile/u1") == [PREF]
    assert len(WriteJournal.for_store(manager.settings.path)) == 0


def test_unwritable_journal_falls_back_and_writes_still_land(tmp_path, embedder):
    path = tmp_path / "memory.sqlite"
    (tmp_path / "memory.sqlite.pending").mkdir()  # the journal file cannot be created
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        team = Team(mm, tmp_path)
        out = team.say("u1", "t1", PREF, final="好的")
        assert out["messages"][-1].content == "好的"
        assert any(e["kind"] == "warning" and "kept in memory" in e["warning"] for e in out["memory_log"])
        assert contents(mm, "user_profile/u1") == [PREF]


def test_memory_hooks_survive_an_embedder_outage(tmp_path, flaky):
    with MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite")), embedder=flaky) as mm:
        flaky.down = True
        model = ScriptedChatModel(replies=["好的", "报表如下"])
        app = create_agent(model, [], middleware=[memory_middleware(mm)], checkpointer=InMemorySaver())
        out = app.invoke({"messages": [("user", "以后报表金额都用万元为单位")]},
                         {"configurable": {"thread_id": "s1", "user_id": "u1"}})
        assert out["messages"][-1].content == "好的"
        assert any(e["kind"] == "retry_queued" for e in out["memory_log"])
        flaky.down = False
        app.invoke({"messages": [("user", "做一份华东区营收报表")]},
                   {"configurable": {"thread_id": "s2", "user_id": "u1"}})
        assert "万元" in str(model.calls[-1][0].content)  # replayed at the next turn, then recalled
