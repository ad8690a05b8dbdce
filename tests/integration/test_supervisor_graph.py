"""Supervisor graph simulations: scripted tool-calling chat models, a real SQLite store file, the
real packaged embedder, an InMemorySaver checkpointer (threads are sessions)."""

from __future__ import annotations

import logging

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from agents import default_agents
from memory.service import MemoryService
from memory.text import count_tokens
from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph

SQL = ("SELECT substr(order_date, 1, 7) AS month, ROUND(SUM(goods_amount) / 10000.0, 2) AS gmv_wan "
       "FROM orders o JOIN regions g USING (region_id) WHERE status = 'paid' AND g.name_zh = '华东' "
       "AND order_date LIKE '2024%' GROUP BY month ORDER BY month")


class Team:
    """A graph whose Supervisor and agents are scripted tool-calling chat models."""

    def __init__(self, memory, tmp_path, **kw):
        self.sup = ScriptedChatModel(role="supervisor", strict=True)
        self.models = {a: ScriptedChatModel(role=a) for a in ("text2sql", "statistics", "analysis")}
        self.agents = default_agents(models=self.models, reports_dir=tmp_path / "reports")
        self.graph = build_supervisor_graph(self.agents, memory, self.sup, checkpointer=InMemorySaver(), **kw)

    def say(self, user, thread, text, *, final="done", query_task=None, config_user=False, callbacks=None):
        """One turn. With ``query_task`` the Supervisor hands off to text2sql once, then answers."""
        if query_task:
            self.sup.extend([{"tool_calls": [{"name": "transfer_to_text2sql", "args": {"task": query_task}}]}, final])
            self.models["text2sql"].extend([{"tool_calls": [{"name": "run_sql", "args": {"sql": SQL}}]},
                                            "华东 2024 monthly GMV in 万元."])
        else:
            self.sup.extend([final])
        cfg = {"configurable": {"thread_id": thread, **({"user_id": user} if config_user else {})}}
        if callbacks:
            cfg["callbacks"] = callbacks
        ctx = None if config_user or user is None else SupervisorContext(user_id=user)
        out = self.graph.invoke({"messages": [HumanMessage(text)]}, cfg, context=ctx)
        assert self.sup.remaining == 0 and all(m.remaining == 0 for m in self.models.values())
        return out

    def agent_input(self, agent="text2sql", call=-1):
        """The messages the agent's model received on its first model call of a run."""
        calls = self.models[agent].calls
        firsts = [c for c in calls if not any(isinstance(m, ToolMessage) for m in c)]
        return firsts[call]


def injected(msgs) -> str:
    return "\n".join(m.content for m in msgs if isinstance(m, SystemMessage) and m.name == "memory")


def test_preference_is_recalled_in_a_new_thread(manager, tmp_path):
    team = Team(manager, tmp_path)
    out = team.say("zhang", "t1", "以后报表里的金额都用万元为单位，保留两位小数。", final="好的，记住了")
    assert [(e["namespace"], e["status"]) for e in out["memory_log"] if e["kind"] == "written"] == \
        [("user_profile/zhang", "added")]
    assert out["messages"][-1].content == "好的，记住了" and out["memory_errors"] == []

    out = team.say("zhang", "t2", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    # a new thread: the checkpoint does not carry thread t1's conversation ...
    assert not any("万元为单位" in str(m.content) for m in out["messages"] if isinstance(m, HumanMessage))
    # ... the long-term memory does: into the Supervisor's prompt and into text2sql's input
    assert "万元" in injected(team.sup.calls[-2])
    assert "万元" in injected(team.agent_input("text2sql"))
    assert out["artifacts"]["sql"] == SQL and len(out["artifacts"]["rows"]) == 12
    assert out["messages"][-1].content == "done" and out["memory_errors"] == [] and out["agent_errors"] == []
    # the handoff protocol is well formed: the agent's answer is the tool result of the handoff call
    handoff = next(m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert result.tool_call_id == handoff.tool_calls[0]["id"] and "SQL:" in result.content
    # the post-node wrote the SQL into text2sql's namespace
    written = [e for e in out["memory_log"] if e["kind"] == "written"]
    assert written and written[0]["namespace"] == "text2sql_memories/zhang" and SQL in written[0]["content"]


def test_updated_preference_wins(manager, tmp_path):
    team = Team(manager, tmp_path)
    team.say("zhang", "s1", "以后报表里的金额都用万元为单位，保留两位小数。")
    out = team.say("zhang", "s2", "改成：以后报表金额都用元为单位，保留两位小数。")
    assert [e["status"] for e in out["memory_log"] if e["kind"] == "written"] == ["updated"]
    team.say("zhang", "s3", "查一下2024年华东每个月的销售额", query_task="2024年华东每月销售额")
    ctx = injected(team.agent_input("text2sql"))
    assert "元为单位" in ctx and "万元" not in ctx
    assert [r.content for r in manager.service.list("user_profile/zhang")] == ["改成：以后报表金额都用元为单位，保留两位小数。"]


def test_users_are_isolated(manager, tmp_path):
    team = Team(manager, tmp_path)
    team.say("zhang", "z1", "以后报表里的金额都用万元为单位。GMV 口径是指已支付订单金额，不含退款。")
    # alice identified through configurable.user_id instead of the Runtime context
    out = team.say("alice", "a1", "Show monthly GMV for East China in 2024", query_task="monthly GMV, East China, 2024",
                   config_user=True)
    ctx = injected(team.agent_input("text2sql")) + injected(team.sup.calls[-2])
    assert "万元" not in ctx and "GMV 口径" not in ctx
    hits = [h for e in out["memory_log"] if e["kind"] == "retrieved" for h in e["hits"]]
    assert all(h["namespace"].endswith("/alice") for h in hits)
    assert {e["user_id"] for e in out["memory_log"]} == {"alice"}
    # no user at all: memory scoped to the thread (policy.anonymous: thread), isolated from zhang
    out = team.say(None, "n1", "From now on always use bar charts.")
    written = [e["namespace"] for e in out["memory_log"] if e["kind"] == "written"]
    assert len(written) == 1 and written[0].startswith("user_profile/%~thread-")
    assert manager.service.count("user_profile/zhang") == 1 and manager.service.count("user_profile/alice") == 0


def test_sub_agents_get_only_task_and_injected_context_and_no_memory_tools(manager, tmp_path):
    # More memories than the budget can hold (written past the write policy: one template with
    # changing numbers would rightly be judged updates of one fact).
    from memory.service import NewMemory

    manager.service.write_many([NewMemory(f"GMV 口径补充{i}：地区{i}月报不含运费", "domain_facts/zhang",
                                          {"type": "domain_facts"}) for i in range(30)])
    manager.remember("以后报表里的金额都用万元为单位", "user_profile/zhang")
    team = Team(manager, tmp_path, context_budget=60)
    team.say("zhang", "t1", "你好，我是张伟，负责华东区的销售。")
    team.say("zhang", "t1", "查一下2024年华东每个月的 GMV", query_task="2024年华东每月 GMV（已支付订单金额）")
    msgs = team.agent_input("text2sql")
    # exactly: the agent's own system prompt, the injected memory, the task — no conversation history
    assert [type(m).__name__ for m in msgs] == ["SystemMessage", "SystemMessage", "HumanMessage"]
    assert msgs[1].name == "memory" and msgs[2].content == "2024年华东每月 GMV（已支付订单金额）"
    assert "张伟" not in "".join(str(m.content) for m in msgs)
    assert 0 < count_tokens(injected(msgs)) <= 60
    # tools offered to each sub-agent model: its work tools only
    for name, m in team.models.items():
        for tools in m.bound_tools:
            assert not [t for t in tools if t.startswith("memory")], (name, tools)
    assert team.models["text2sql"].bound_tools[0] == ["run_sql"]
    assert {t.name for t in team.agents[0].tools} == {"run_sql"}
    # and the Supervisor itself is offered the handoffs, then its memory tools (issue 15: the user steers memory)
    assert team.sup.bound_tools[0][:3] == ["transfer_to_text2sql", "transfer_to_statistics", "transfer_to_analysis"]
    assert all(t.startswith("memory_") for t in team.sup.bound_tools[0][3:]) and "memory_list" in team.sup.bound_tools[0]


def test_a_sub_agent_with_a_memory_tool_is_refused(manager, tmp_path):
    from langchain_core.tools import tool

    @tool
    def memory_search(query: str) -> str:
        """Search memory."""
        return ""

    agents = default_agents(ScriptedChatModel(), reports_dir=tmp_path)
    agents[2].tools = [*agents[2].tools, memory_search]
    with pytest.raises(ValueError, match="memory tools"):
        build_supervisor_graph(agents, manager)


class _KillStoreWhenAgentStarts(BaseCallbackHandler):
    """Closes the memory backend the moment the text2sql model is called: the store dies mid-run."""

    def __init__(self, service: MemoryService):
        self.service = service

    def on_chat_model_start(self, serialized, messages, **kwargs):
        if any(isinstance(m, SystemMessage) and "Text2SQL agent" in str(m.content) for m in messages[0]):
            self.service.backend.close()


def test_backend_failure_mid_run_does_not_stop_the_graph(manager, tmp_path, caplog):
    team = Team(manager, tmp_path, write_behind=False)  # inline writes fail in the post step itself
    team.say("zhang", "t1", "以后报表里的金额都用万元为单位。")
    caplog.set_level(logging.WARNING, logger="supervisor.memory")
    out = team.say("zhang", "t2", "查一下2024年华东每个月的 GMV", query_task="2024年华东每月 GMV",
                   final="华东 2024 GMV: see the table", callbacks=[_KillStoreWhenAgentStarts(manager.service)])
    # before the failure memory still worked: the agent got its context
    assert "万元" in injected(team.agent_input("text2sql"))
    # the answer still comes back ...
    assert out["messages"][-1].content == "华东 2024 GMV: see the table"
    assert out["artifacts"]["sql"] == SQL and out["agent_errors"] == []
    # ... and the failure is recorded in state and logged
    assert out["memory_errors"] and all("post:text2sql" in e for e in out["memory_errors"])
    assert "closed" in out["memory_errors"][0]
    assert [e for e in out["memory_log"] if e["kind"] == "error" and e["step"] == "post"]
    assert any("memory step failed" in r.message for r in caplog.records)
    # a whole turn on a dead store: every memory step fails, the turn still completes
    out = team.say("zhang", "t3", "再查一次2024年华东每个月的 GMV", query_task="2024年华东每月 GMV", final="again")
    assert out["messages"][-1].content == "again"
    assert {e.split()[0] for e in out["memory_errors"]} >= {"entry", "pre:text2sql", "post:text2sql"}


def test_offline_semantic_router_runs_the_pipeline(manager, tmp_path):
    from supervisor.router import SemanticRouter

    models = {a: ScriptedChatModel(role=a) for a in ("text2sql", "statistics", "analysis")}
    agents = default_agents(models=models, reports_dir=tmp_path)
    router = SemanticRouter(manager.service.embedder, agents)
    assert router.plan("以后报表金额都用万元为单位。GMV 口径是指已支付订单金额。").agents == ()
    assert router.plan("帮我查一下2024年华东每个月的GMV，并计算环比增长率").agents == ("text2sql", "statistics")
    assert router.plan("Analyse the refund trend in South China").agents == ("text2sql", "statistics", "analysis")

    graph = build_supervisor_graph(agents, manager.service, checkpointer=InMemorySaver())  # no model
    models["text2sql"].extend([{"tool_calls": [{"name": "run_sql", "args": {"sql": SQL}}]}, "ok"])
    models["statistics"].extend([{"tool_calls": [{"name": "compute_statistics",
                                                  "args": {"measure": "gmv_wan", "time_column": "month"}}]}, "stats ok"])
    out = graph.invoke({"messages": [HumanMessage("帮我查一下2024年华东每个月的GMV，并计算环比增长率")]},
                       {"configurable": {"thread_id": "x", "user_id": "u1"}})
    assert out["plan"]["agents"] == ["text2sql", "statistics"]
    assert out["artifacts"]["stats"]["trend"]["periods"][0] == "2024-01"
    assert "stats ok" in out["messages"][-1].content and out["memory_errors"] == []
    assert [e["step"] for e in out["memory_log"] if e["kind"] == "timing"] == ["entry", "pre", "post", "pre", "post"]


def test_docstring_examples(embedder):
    import doctest

    import supervisor.graph
    import supervisor.memory_hooks
    import supervisor.scripted
    import supervisor.studio

    for mod in (supervisor.scripted, supervisor.graph, supervisor.memory_hooks, supervisor.studio):
        result = doctest.testmod(mod)
        assert result.failed == 0 and result.attempted > 0, mod.__name__


def test_write_behind_keeps_read_your_writes_and_settles_before_the_answer(manager, tmp_path):
    team = Team(manager, tmp_path, write_behind=True)
    out = team.say("zhang", "t1", "查一下2024年华东每个月的 GMV", query_task="2024年华东每月 GMV")
    # (the text2sql namespace: the post-node also queues a shared finding for shared_context/zhang)
    post = [e for e in out["memory_log"] if e["step"] == "post" and e.get("namespace") == "text2sql_memories/zhang"]
    assert [e["kind"] for e in post if e["kind"] in ("queued", "written")] == ["queued"]
    # the Supervisor waited for the queued write before answering, and reported it
    written = [e for e in out["memory_log"] if e["kind"] == "written" and e["namespace"] != "shared_context/zhang"]
    assert [(e["namespace"], e["deferred_from"], e["status"]) for e in written] == \
        [("text2sql_memories/zhang", "post:text2sql", "added")]
    assert manager.service.count("text2sql_memories/zhang") == 1
    # the next turn's handoff reads it back (same SQL is recalled, and not written twice)
    out = team.say("zhang", "t2", "再查一下2024年华东每个月的 GMV", query_task="2024年华东每月 GMV 再查一次")
    assert SQL[:60] in injected(team.agent_input("text2sql"))
    assert manager.service.count("text2sql_memories/zhang") == 1
    assert out["memory_errors"] == []


def test_write_behind_failure_is_reported_with_its_origin(manager, tmp_path):
    team = Team(manager, tmp_path, write_behind=True)
    out = team.say("zhang", "t2", "查一下2024年华东每个月的 GMV", query_task="2024年华东每月 GMV",
                   final="华东 2024 GMV: see the table", callbacks=[_KillStoreWhenAgentStarts(manager.service)])
    assert out["messages"][-1].content == "华东 2024 GMV: see the table"
    assert out["memory_errors"] and all("queued by post:text2sql" in e for e in out["memory_errors"])
    assert [e for e in out["memory_log"] if e["kind"] == "error" and e["step"] == "end"]
