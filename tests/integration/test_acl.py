"""Access control between agents (issue 15): agent B never reads agent A's private memory —
through search, list, get, the LangGraph store view or a memory tool — on SQLite and on
qdrant-client's local mode; shared kinds are shared; every denial is audited."""

from __future__ import annotations

import json

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from memory.errors import AccessDenied, MemoryLayerError
from memory.policy.acl import AccessPolicy, decide, principal
from memory.policy.audit import AuditLog
from memory.policy.manager import Actor, MemoryManager
from memory.policy.tools import make_memory_tools
from memory.service import MemoryService
from memory.settings import MemorySettings
from memory.store import MemoryStore

T2S = Actor(agent="supervisor:post:text2sql", thread_id="t1")
T2S_PRE = Actor(agent="supervisor:pre:text2sql", thread_id="t1")
ANALYSIS = Actor(agent="supervisor:pre:analysis", thread_id="t1")
SECRET = "text2sql private: the orders table joins refunds on order_id"


@pytest.fixture(params=["sqlite", "qdrant"])
def mm(request, tmp_path, embedder):
    settings = MemorySettings(path=str(tmp_path / "memory.sqlite"), backend=request.param)
    if request.param == "qdrant":
        from memory.backends.qdrant import QdrantBackend

        svc = MemoryService(QdrantBackend(location=":memory:", embedding_model=embedder.name, dim=embedder.dim),
                            embedder, settings)
    else:
        svc = MemoryService.from_settings(settings, embedder=embedder)
    m = MemoryManager(svc, AuditLog(settings.path), settings)
    yield m
    m.close()


def test_principals_and_rules_are_pure():
    p = AccessPolicy()
    assert principal("supervisor:pre:text2sql") == "text2sql"
    assert principal("supervisor:entry") == "supervisor"
    assert principal("agent:analysis") == "analysis"
    assert principal(None) == principal("memctl") == principal("memctl:import") == "operator"
    assert decide(p, "text2sql", "read", ("text2sql_memories", "u1")).allowed
    assert not decide(p, "analysis", "read", ("text2sql_memories", "u1")).allowed
    assert not decide(p, "analysis", "write", ("text2sql_memories", "u1")).allowed
    assert decide(p, "analysis", "write", ("shared_context", "u1")).allowed
    assert decide(p, "analysis", "read", ("docs", "notes")).allowed
    assert not decide(p, "analysis", "write", ("docs", "notes")).allowed
    assert not decide(p, "analysis", "read", ()).allowed  # the empty prefix covers private kinds
    assert decide(p, "operator", "read", ("text2sql_memories", "u1")).allowed


def test_agent_b_never_reads_agent_a_private_memory(mm):
    rec = mm.remember(SECRET, "text2sql_memories/u1", {"type": "tool_effects"}, actor=T2S).record
    # The owner reads its own memory.
    own = mm.recall("orders refunds order_id", "text2sql_memories/u1", actor=T2S_PRE)
    assert [h.record.id for h in own] == [rec.id]
    # Another agent: search (direct, through a parent prefix, mixed with allowed namespaces), list, get.
    for nss in ("text2sql_memories/u1", "text2sql_memories", ["user_profile/u1", "text2sql_memories/u1"]):
        with pytest.raises(AccessDenied, match="private to agent 'text2sql'"):
            mm.recall("orders refunds order_id", nss, actor=ANALYSIS)
    with pytest.raises(AccessDenied):
        mm.list("text2sql_memories/u1", actor=ANALYSIS)
    with pytest.raises(AccessDenied):
        mm.get(rec.id, actor=ANALYSIS)
    # ... nor write, update, delete or restore it.
    with pytest.raises(AccessDenied):
        mm.remember("analysis overwrites", "text2sql_memories/u1", actor=ANALYSIS)
    with pytest.raises(AccessDenied):
        mm.update(rec.id, "tampered", actor=ANALYSIS)
    with pytest.raises(AccessDenied):
        mm.delete(rec.id, actor=ANALYSIS)
    assert [r.content for r in mm.list("text2sql_memories/u1")] == [SECRET]  # the operator sees it unchanged
    # Every denial is one audit row naming actor, namespace and operation.
    denied = [e for e in mm.audit.events(action="deny", limit=100)]
    assert len(denied) >= 8 and {e.actor for e in denied} == {"supervisor:pre:analysis"}
    assert all(e.namespace == "text2sql_memories/u1" or e.namespace == "text2sql_memories" for e in denied)
    assert {e.details["op"] for e in denied} == {"read", "write"}
    assert issubclass(AccessDenied, MemoryLayerError)


def test_shared_kinds_are_shared_and_acl_can_be_turned_off(mm, tmp_path, embedder):
    mm.remember("The team defines active customer as one with an order in 90 days", "shared_context/u1",
                {"type": "domain_facts"}, actor=T2S)
    hits = mm.recall("active customer definition", ["shared_context/u1", "user_profile/u1"], actor=ANALYSIS)
    assert hits and "active customer" in hits[0].record.content
    with pytest.raises(AccessDenied, match="read-only"):
        mm.remember("agents cannot write global docs", "docs/notes", actor=ANALYSIS)
    off = MemorySettings(path=str(tmp_path / "off.sqlite"), acl={"enabled": False})
    with MemoryManager.from_settings(off, embedder=embedder) as m2:
        m2.remember(SECRET, "text2sql_memories/u1", actor=T2S)
        assert m2.recall("orders refunds", "text2sql_memories/u1", actor=ANALYSIS)


def test_yaml_rule_gives_analysis_read_access(tmp_path, embedder):
    cfg = tmp_path / "acl.yaml"
    cfg.write_text('acl:\n  kinds:\n    "{agent}_memories": {read: [owner, analysis], write: [owner]}\n')
    s = MemorySettings.load(cfg, path=str(tmp_path / "m.sqlite"))
    with MemoryManager.from_settings(s, embedder=embedder) as m:
        m.remember(SECRET, "text2sql_memories/u1", actor=T2S)
        assert m.recall("orders refunds", "text2sql_memories/u1", actor=ANALYSIS)
        with pytest.raises(AccessDenied):
            m.remember("still no writes", "text2sql_memories/u1", actor=ANALYSIS)
        with pytest.raises(AccessDenied):
            m.recall("orders refunds", "text2sql_memories/u1", actor=Actor(agent="agent:statistics"))


def test_store_view_refuses_other_agents_private_namespaces(mm):
    mm.remember(SECRET, "text2sql_memories/u1", {"type": "tool_effects"}, actor=T2S)
    mm.remember("Amounts in 万元", "user_profile/u1", actor=T2S)
    with MemoryStore(mm.service, owns_service=False) as store:
        view = store.for_actor(Actor(agent="agent:analysis", thread_id="t9"))
        with pytest.raises(AccessDenied):
            view.search(("text2sql_memories", "u1"), query="orders refunds")
        with pytest.raises(AccessDenied):
            view.batch([GetOp(("user_profile", "u1"), "x"), SearchOp(("text2sql_memories",), None, 10, 0, "orders")])
        with pytest.raises(AccessDenied):
            view.put(("text2sql_memories", "u1"), "k", {"content": "overwrite"})
        with pytest.raises(AccessDenied):
            view.batch([PutOp(("text2sql_memories", "u1"), "k", None)])
        # The empty prefix and list_namespaces only show what the agent may read.
        found = view.search((), query="orders refunds order_id", limit=50)
        assert found and all(it.namespace[0] != "text2sql_memories" for it in found)
        assert ("text2sql_memories", "u1") not in view.list_namespaces()
        assert ("user_profile", "u1") in view.list_namespaces()
        # The owner's view and the unscoped store still see it.
        own = store.for_actor(Actor(agent="agent:text2sql"))
        assert [it.value["content"] for it in own.search(("text2sql_memories", "u1"), query="orders")] == [SECRET]
        assert store.search(("text2sql_memories", "u1"), query="orders")
        denied = AuditLog(mm.settings.path).events(action="deny", limit=50)
        assert any(e.actor == "agent:analysis" for e in denied)


def test_memory_tools_act_for_their_agent(mm):
    rec = mm.remember(SECRET, "text2sql_memories/u1", {"type": "tool_effects"}, actor=T2S)
    tools = {t.name: t for t in make_memory_tools(mm, acting_for="agent:analysis")}
    cfg = {"configurable": {"user_id": "u1", "thread_id": "t1"}}
    out = tools["memory_search"].invoke({"query": "orders refunds", "agent": "text2sql"}, cfg)
    assert out.startswith("memory_search failed: access denied") and "order_id" not in out
    out = tools["memory_summarize"].invoke({"goal": "orders refunds", "agent": "text2sql"}, cfg)
    assert "order_id" not in out
    assert tools["memory_delete"].invoke({"memory_id": rec.record.id}, cfg).startswith("memory_delete failed")
    assert tools["memory_update"].invoke({"memory_id": rec.record.id, "content": "x"}, cfg).startswith(
        "memory_update failed")
    assert json.loads(tools["memory_search"].invoke({"query": "orders", "agent": "analysis"}, cfg)) == []
    own = {t.name: t for t in make_memory_tools(mm, acting_for="agent:text2sql")}
    assert SECRET in own["memory_search"].invoke({"query": "orders refunds", "agent": "text2sql"}, cfg)


def test_forget_user_is_for_operators_not_agents(mm):
    mm.remember(SECRET, "text2sql_memories/u1", actor=T2S)
    with pytest.raises(AccessDenied):
        mm.forget_user("u1", actor=ANALYSIS)
    assert mm.list("text2sql_memories/u1")
    assert mm.forget_user("u1", actor=Actor(agent="memctl")).deleted == 1
