"""Memory the user steers in chat (issue 15), through the Supervisor graph: "what do you remember
about me", "forget that", "that's wrong, it is X", "remember this for the whole team", "undo that"
— zh and en, with no model (routing rules) and with a scripted tool-calling model (memory tools
bound to the Supervisor, never to sub-agents). Audit, soft delete and restore come from the policy."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from agents import default_agents
from memory import MemorySettings
from memory.policy.manager import MemoryManager
from memory.policy.routing import steer_intent
from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph


@pytest.mark.parametrize("text, kind, carried", [
    ("What do you remember about me?", "recall_me", ""), ("你都记得我什么？", "recall_me", ""),
    ("关于我你知道哪些", "recall_me", ""),
    ("Forget that.", "forget", ""), ("忘掉刚才那条", "forget", ""),
    ("forget that I prefer tea", "forget", "I prefer tea"), ("That's wrong, it is yuan", "correct", "yuan"),
    ("不对，应该是报表金额都用元为单位", "correct", "报表金额都用元为单位"),
    ("Remember this for the whole team: GMV excludes refunds", "team", "GMV excludes refunds"),
    ("记住这个，让整个团队都知道：GMV 不含退款", "team", "GMV 不含退款"),
    ("Undo that", "restore", ""), ("恢复刚才那条", "restore", ""),
])
def test_intents_zh_en(text, kind, carried):
    it = steer_intent(text)
    assert it is not None and (it.kind, it.text) == (kind, carried)


@pytest.mark.parametrize("text", ["查一下华东的GMV", "以后报表都用万元", "Remember that I prefer tea", "别忘了周报",
                                  "我忘了密码", "不对的地方请指出", "GMV 口径是不含退款的成交额", "帮我删除华东的数据"])
def test_ordinary_messages_are_not_steering(text):
    assert steer_intent(text) is None


@pytest.fixture
def mm(tmp_path, embedder):
    m = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "memory.sqlite")), embedder=embedder)
    yield m
    m.close()


def _say(graph, text: str, thread: str = "t1", user: str = "zhao") -> str:
    out = graph.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}},
                       context=SupervisorContext(user_id=user))
    return out["messages"][-1].content


def _contents(mm: MemoryManager, ns: str) -> list[str]:
    return [r.content for r in mm.list(ns)]


def test_no_model_supervisor_carries_out_each_request(mm, tmp_path):
    graph = build_supervisor_graph(default_agents(ScriptedChatModel(), reports_dir=tmp_path / "r"), mm,
                                   checkpointer=InMemorySaver())
    _say(graph, "以后报表里的金额都用万元为单位")
    assert _contents(mm, "user_profile/zhao") == ["以后报表里的金额都用万元为单位"]

    reply = _say(graph, "你都记得我什么？")
    assert "万元为单位" in reply and reply.startswith("我记得")

    pref_id = mm.list("user_profile/zhao")[0].id
    reply = _say(graph, "不对，应该是报表金额都用元为单位")
    assert reply.startswith("已更正") and _contents(mm, "user_profile/zhao") == ["报表金额都用元为单位"]
    assert mm.list("user_profile/zhao")[0].id == pref_id  # updated in place; the old text is in history
    assert any(e.action == "update" and e.actor == "supervisor:steer" for e in mm.audit.history(pref_id))

    reply = _say(graph, "忘掉刚才那条")
    assert reply.startswith("已忘记") and _contents(mm, "user_profile/zhao") == []
    assert mm.audit.trash_get(pref_id) is not None  # soft delete: restorable

    reply = _say(graph, "恢复刚才那条")
    assert reply.startswith("已恢复") and _contents(mm, "user_profile/zhao") == ["报表金额都用元为单位"]

    # English, in a new session: team memory goes to shared_context (every agent reads it) and is
    # not mistaken for a personal preference.
    reply = _say(graph, "Remember this for the whole team: GMV excludes refunds", thread="t2")
    assert reply.startswith("Noted for the whole team")
    assert _contents(mm, "shared_context/zhao") == ["GMV excludes refunds"]
    assert _contents(mm, "user_profile/zhao") == ["报表金额都用元为单位"]
    reply = _say(graph, "What do you remember about me?", thread="t2")
    assert "GMV excludes refunds" in reply and "元为单位" in reply
    reply = _say(graph, "That's wrong, it is gross of refunds", thread="t2")
    assert _contents(mm, "shared_context/zhao") == ["GMV excludes refunds (corrected by the user: gross of refunds)"]
    reply = _say(graph, "forget that amounts are shown in yuan", thread="t2")
    assert reply.startswith("Forgotten: 报表金额都用元为单位") and _contents(mm, "user_profile/zhao") == []
    # Another user sees none of it.
    assert "don't remember anything" in _say(graph, "What do you remember about me?", thread="t3", user="qian")


def test_model_supervisor_uses_memory_tools_sub_agents_never_get_them(mm, tmp_path):
    sup = ScriptedChatModel(role="supervisor", strict=True)
    models = {a: ScriptedChatModel(role=a) for a in ("text2sql", "statistics", "analysis")}
    graph = build_supervisor_graph(default_agents(models=models, reports_dir=tmp_path / "r"), mm, sup,
                                   checkpointer=InMemorySaver())
    assert {"memory_list", "memory_delete", "memory_update", "memory_share", "memory_restore"} <= set(
        sup.bound_tools[-1])
    assert all(not any(n.startswith("memory") for n in names) for m in models.values() for names in m.bound_tools)
    mm.remember("Show amounts in 万元", "user_profile/zhao")
    sup.extend([{"tool_calls": [{"name": "memory_list", "args": {}}]},
                {"content": "I remember: amounts in 万元.", "expect": ["Show amounts in 万元"]}])
    out = graph.invoke({"messages": [HumanMessage("What do you remember about me?")]},
                       {"configurable": {"thread_id": "m1"}}, context=SupervisorContext(user_id="zhao"))
    assert out["messages"][-1].content == "I remember: amounts in 万元."
    assert any(isinstance(m, ToolMessage) and m.name == "memory_list" for m in out["messages"])
    rid = mm.list("user_profile/zhao")[0].id
    sup.extend([{"tool_calls": [{"name": "memory_delete", "args": {"memory_id": rid}}]}, "Forgotten."])
    graph.invoke({"messages": [HumanMessage("Forget that.")]}, {"configurable": {"thread_id": "m1"}},
                 context=SupervisorContext(user_id="zhao"))
    assert mm.list("user_profile/zhao") == [] and mm.audit.trash_get(rid) is not None
    sup.extend([{"tool_calls": [{"name": "memory_restore", "args": {"memory_id": rid}}]}, "Back."])
    graph.invoke({"messages": [HumanMessage("Undo that")]}, {"configurable": {"thread_id": "m1"}},
                 context=SupervisorContext(user_id="zhao"))
    assert _contents(mm, "user_profile/zhao") == ["Show amounts in 万元"]
    sup.extend([{"tool_calls": [{"name": "memory_share", "args": {"content": "Fiscal year starts in April"}}]}, "ok"])
    graph.invoke({"messages": [HumanMessage("Remember this for the whole team: fiscal year starts in April")]},
                 {"configurable": {"thread_id": "m1"}}, context=SupervisorContext(user_id="zhao"))
    assert _contents(mm, "shared_context/zhao") == ["Fiscal year starts in April"]
    assert "fiscal" not in " ".join(_contents(mm, "user_profile/zhao")).lower()
