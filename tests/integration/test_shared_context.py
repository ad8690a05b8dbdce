"""Shared context between agents (issue 15): a post-node publishes an agent's findings to
``shared_context/{user}``; the next agent's pre-node receives what is relevant — later in the
same run, and in a later session. Scripted models, real store file, real embedder."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from agents import default_agents
from memory.policy.findings import findings, query_choice
from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph

SQL_ACTIVE = ("SELECT g.name_zh AS region, COUNT(DISTINCT o.customer_id) AS active_customers FROM orders o "
              "JOIN regions g USING (region_id) WHERE o.status = 'paid' AND o.order_date >= date('2024-12-31', "
              "'-90 day') GROUP BY region ORDER BY active_customers DESC")
SQL_ONLINE = ("SELECT substr(order_date, 1, 7) AS month, COUNT(DISTINCT customer_id) AS buyers FROM orders "
              "WHERE channel = 'online' AND status = 'paid' AND order_date LIKE '2024%' GROUP BY month ORDER BY month")
DEFINITION = "这里活跃客户的口径是指最近90天内有已支付订单的客户。"


def _injected(model: ScriptedChatModel, call: int = -1) -> str:
    firsts = [c for c in model.calls if not any(isinstance(m, ToolMessage) for m in c)]
    return "\n".join(m.content for m in firsts[call] if isinstance(m, SystemMessage) and m.name == "memory")


def test_findings_are_drawn_from_answers():
    got = findings("text2sql", "各地区活跃客户数", f"{DEFINITION}\nSQL: {SQL_ACTIVE}\nrows: 6 (region)\n华东 | 120")
    assert [f.kind for f in got] == ["definition", "query_choice"]
    assert got[0].text == DEFINITION and got[0].memory_type == "domain_facts"
    assert "tables orders, regions" in got[1].text and "o.status = 'paid'" in got[1].text
    stats = findings("statistics", "trend", "Growth is steady.\nComputed: count=12, sum=3,400")
    assert [f.kind for f in stats] == ["figures"] and "count=12" in stats[0].text
    assert query_choice("SELECT 1") is None
    assert findings("analysis", "t", "No definitions here, just numbers: 12 | 13") == []


def test_analysis_uses_a_definition_text2sql_found_in_an_earlier_session(manager, tmp_path):
    sup = ScriptedChatModel(role="supervisor", strict=True)
    models = {a: ScriptedChatModel(role=a, strict=True) for a in ("text2sql", "statistics", "analysis")}
    graph = build_supervisor_graph(default_agents(models=models, reports_dir=tmp_path / "r"), manager, sup,
                                   checkpointer=InMemorySaver())
    ctx = SupervisorContext(user_id="li")

    # Session 1: Text2SQL discovers (and states) what "active customer" means here.
    sup.extend([{"tool_calls": [{"name": "transfer_to_text2sql", "args": {"task": "2024年底各地区的活跃客户数"}}]},
                "各地区活跃客户数已查出。"])
    models["text2sql"].extend([{"tool_calls": [{"name": "run_sql", "args": {"sql": SQL_ACTIVE}}]}, DEFINITION])
    out = graph.invoke({"messages": [HumanMessage("查一下2024年底各地区的活跃客户数")]},
                       {"configurable": {"thread_id": "s1"}}, context=ctx)
    assert out["memory_errors"] == []
    stored = {r.metadata.extra.get("finding"): r for r in manager.list("shared_context/li")}
    assert set(stored) == {"definition", "query_choice"} and stored["definition"].content == DEFINITION
    assert stored["definition"].metadata.agent == "text2sql"

    # Session 2 (new thread): Text2SQL → Statistics → Analysis. Statistics sees this run's table
    # choice (channel = 'online'); Analysis sees session 1's definition, found by its task.
    sup.extend([{"tool_calls": [{"name": "transfer_to_text2sql", "args": {"task": "2024年线上每月购买客户数"}}]},
                {"tool_calls": [{"name": "transfer_to_statistics", "args": {"task": "线上每月购买客户数的趋势统计"}}]},
                {"tool_calls": [{"name": "transfer_to_analysis",
                                 "args": {"task": "分析活跃客户的变化，并说明活跃客户口径"}}]},
                "分析完成。"])
    models["text2sql"].extend([{"tool_calls": [{"name": "run_sql", "args": {"sql": SQL_ONLINE}}]}, "已按月统计。"])
    models["statistics"].extend([
        {"tool_calls": [{"name": "compute_statistics", "args": {"measure": "buyers", "time_column": "month"}}],
         "expect": ["channel = 'online'"]},
        "线上购买客户数逐月上升。"])
    models["analysis"].extend([{"content": "按最近90天有已支付订单的口径，活跃客户在增长。",
                                "expect": ["最近90天内有已支付订单"]}])
    out = graph.invoke({"messages": [HumanMessage("分析一下活跃客户的变化趋势")]},
                       {"configurable": {"thread_id": "s2"}}, context=ctx)
    assert sup.remaining == 0 and all(m.remaining == 0 for m in models.values())
    assert out["memory_errors"] == []
    assert "channel = 'online'" in _injected(models["statistics"])
    assert "最近90天内有已支付订单" in _injected(models["analysis"])
    assert all(c["found"] for m in models.values() for c in m.checks)
    # Statistics' computed figures were published too, for whoever comes next.
    assert any(r.metadata.extra.get("finding") == "figures" for r in manager.list("shared_context/li", limit=50))


def test_another_user_never_receives_the_shared_context(manager, tmp_path):
    manager.remember(DEFINITION, "shared_context/li", {"type": "domain_facts", "source": "text2sql"})
    sup = ScriptedChatModel(role="supervisor", strict=True)
    models = {a: ScriptedChatModel(role=a) for a in ("text2sql", "statistics", "analysis")}
    graph = build_supervisor_graph(default_agents(models=models, reports_dir=tmp_path / "r"), manager, sup,
                                   checkpointer=InMemorySaver())
    sup.extend([{"tool_calls": [{"name": "transfer_to_text2sql", "args": {"task": "各地区的活跃客户数"}}]}, "ok"])
    models["text2sql"].extend([{"tool_calls": [{"name": "run_sql", "args": {"sql": SQL_ACTIVE}}]}, "done"])
    graph.invoke({"messages": [HumanMessage("各地区的活跃客户数")]}, {"configurable": {"thread_id": "x"}},
                 context=SupervisorContext(user_id="wang"))
    assert "90天" not in _injected(models["text2sql"])
