"""Memory for apps we did not build: a ``create_agent`` app and a ``create_supervisor`` app each
get cross-session memory from one added call (offline: scripted chat models, real SQLite file,
real packaged embedder)."""

from __future__ import annotations

import asyncio

import pytest
from langchain.agents import create_agent
from langchain_core.messages import SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_supervisor import create_supervisor

from memory import MemorySettings
from memory.policy.manager import MemoryManager
from supervisor.memory_hooks import MEMORY_HEADER, memory_middleware, supervisor_memory_hooks
from supervisor.scripted import ScriptedChatModel, message_text

PREF = "以后报表金额都用万元为单位"


@pytest.fixture
def mm(tmp_path, embedder):
    m = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite")), embedder=embedder)
    yield m
    m.close()


def cfg(thread: str, user: str = "u1") -> dict:
    return {"configurable": {"thread_id": thread, "user_id": user}}


def system_text(call: list) -> str:
    return "\n".join(message_text(m) for m in call if isinstance(m, SystemMessage))


def test_create_agent_gets_cross_session_memory(mm):
    model = ScriptedChatModel(replies=["好的，已记住。", "Conclusion: East China GMV grew 12% in Q3.",
                                       "报表如下", "It grew 12%.", "12%, as before."])
    app = create_agent(model, [], system_prompt="You are a data assistant.",
                       middleware=[memory_middleware(mm)], checkpointer=InMemorySaver())
    app.invoke({"messages": [("user", PREF)]}, cfg("s1"))
    assert [r.content for r in mm.service.list("user_profile/u1")] == [PREF]
    app.invoke({"messages": [("user", "How did East China GMV do in Q3?")]}, cfg("s1"))
    # after_model: the agent's conclusion is a memory of its own
    assert any("12%" in r.content for r in mm.service.list("supervisor_memories/u1"))

    out = app.invoke({"messages": [("user", "做一份华东区营收报表")]}, cfg("s2"))  # a new session
    sys_text = system_text(model.calls[2])
    assert sys_text.startswith("You are a data assistant.") and MEMORY_HEADER in sys_text and "万元" in sys_text
    # The summary goes to the model only; the conversation itself is unchanged.
    assert not any(MEMORY_HEADER in message_text(m) for m in out["messages"])
    # Another user sees none of u1's memory.
    app.invoke({"messages": [("user", "做一份华东区营收报表")]}, cfg("s3", user="u2"))
    assert "万元" not in system_text(model.calls[3])
    # ... and the conclusion of session 1 comes back to u1 when it is relevant again.
    app.invoke({"messages": [("user", "What was the East China GMV growth in Q3?")]}, cfg("s4"))
    assert "12%" in system_text(model.calls[4])


def test_create_agent_async_and_memory_failure(mm):
    model = ScriptedChatModel(replies=["ok", "ok"])
    app = create_agent(model, [], middleware=[memory_middleware(mm)], checkpointer=InMemorySaver())
    asyncio.run(app.ainvoke({"messages": [("user", PREF)]}, cfg("a1")))
    assert [r.content for r in mm.service.list("user_profile/u1")] == [PREF]
    mm.service.backend.close()  # the store goes away: the agent still answers, without memory
    out = app.invoke({"messages": [("user", "做一份报表")]}, cfg("a2"))
    assert out["messages"][-1].content == "ok" and MEMORY_HEADER not in system_text(model.calls[-1])


def test_create_supervisor_gets_cross_session_memory(mm):
    sup = ScriptedChatModel(role="sup", replies=[
        "好的，已记住。",
        {"tool_calls": [{"name": "transfer_to_analyst", "args": {}}]},
        "East China GMV grew 12% in Q3.",
        {"tool_calls": [{"name": "transfer_to_analyst", "args": {}}]},
        "报表如下（万元）",
    ])
    analyst_model = ScriptedChatModel(role="an", replies=["Conclusion: East China GMV grew 12% in Q3.",
                                                          "Report done."])
    analyst = create_agent(analyst_model, [], name="analyst", middleware=[memory_middleware(mm, agent="analyst")])
    app = create_supervisor([analyst], model=sup, prompt="You are the supervisor.",
                            **supervisor_memory_hooks(mm)).compile(checkpointer=InMemorySaver())

    app.invoke({"messages": [("user", PREF)]}, cfg("s1"))
    assert [r.content for r in mm.service.list("user_profile/u1")] == [PREF]
    app.invoke({"messages": [("user", "How did East China GMV do in Q3?")]}, cfg("s1"))
    # The analyst's answer came back through the handoff and was written to its namespace.
    assert any("12%" in r.content for r in mm.service.list("analyst_memories/u1"))

    app.invoke({"messages": [("user", "Make the East China GMV report for Q3")]}, cfg("s2"))  # new session
    first_call_s2 = sup.calls[3]
    assert MEMORY_HEADER in system_text(first_call_s2) and "万元" in system_text(first_call_s2)
    # The sub-agent's own middleware recalls its earlier conclusion in the new session.
    assert "12%" in system_text(analyst_model.calls[-1])
    # Nothing was written twice: one preference, the conclusion once.
    assert len(mm.service.list("user_profile/u1")) == 1


def test_model_that_cannot_bind_tools_gets_a_clear_error(mm):
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from agents import default_agents
    from supervisor.graph import build_supervisor_graph

    fake = GenericFakeChatModel(messages=iter([AIMessage("hi")]))
    with pytest.raises(TypeError,
                       match="Supervisor's chat model GenericFakeChatModel cannot call tools.*ScriptedChatModel"):
        build_supervisor_graph(default_agents(ScriptedChatModel()), mm, fake)
    with pytest.raises(TypeError, match="agent text2sql's chat model GenericFakeChatModel cannot call tools"):
        build_supervisor_graph(default_agents(fake), mm)
    # The documented offline way works: no Supervisor model, scripted agents.
    assert build_supervisor_graph(default_agents(ScriptedChatModel()), mm) is not None
