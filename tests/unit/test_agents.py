"""Sub-agents: read-only SQL, statistics against numpy, the sample DB generator, the agents."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from agents.data.generate import build, content_digest
from agents.db import (
    SQLExecutionError,
    UnsafeSQL,
    check_readonly,
    connect_readonly,
    describe_schema,
    run_readonly,
    sample_db_path,
)
from agents.stats_core import compute, describe, growth_rates

DB = sample_db_path()


@pytest.fixture
def db(tmp_path):
    """A private copy of the shipped database (a test that broke the guard would not hurt others)."""
    return shutil.copy(DB, tmp_path / "sales.sqlite")


# --------------------------------------------------------------------------- read-only SQL
@pytest.mark.parametrize("sql", [
    "INSERT INTO regions VALUES (9, 'X', '西北', 'Northwest')",
    "insert into regions select * from regions",
    "DROP TABLE orders",
    "UPDATE orders SET goods_amount = 0",
    "DELETE FROM refunds",
    "ATTACH DATABASE '/tmp/evil.sqlite' AS evil",
    "SELECT 1; DROP TABLE orders",
    "SELECT 1; SELECT 2",
    "select 1;\n;select 2",
    "WITH x AS (SELECT 1) DELETE FROM orders",
    "WITH x AS (SELECT 1) INSERT INTO regions SELECT 9, 'X', 'x', 'x'",
    "PRAGMA writable_schema = 1",
    "CREATE TABLE t (a)",
    "VACUUM",
    "REPLACE INTO regions VALUES (1, 'EAST', '华东', 'East China')",
    "",
    "   -- only a comment",
])
def test_non_select_is_rejected_and_nothing_changes(sql, db):
    before = content_digest(db)
    with pytest.raises(UnsafeSQL):
        run_readonly(db, sql)
    assert content_digest(db) == before


def test_guard_layers_below_the_lexical_check_also_refuse_writes(db, tmp_path):
    # Even if the lexical check were bypassed, mode=ro + the authorizer stop writes and ATTACH.
    before = content_digest(db)
    con = connect_readonly(db)
    try:
        for stmt in ("INSERT INTO regions VALUES (9, 'X', 'x', 'x')", "DROP TABLE orders",
                     f"ATTACH DATABASE '{tmp_path / 'evil.sqlite'}' AS evil", "PRAGMA query_only = OFF"):
            with pytest.raises(sqlite3.DatabaseError):
                con.execute(stmt)
    finally:
        con.close()
    assert content_digest(db) == before
    assert not (tmp_path / "evil.sqlite").exists()


def test_semicolons_and_keywords_inside_literals_or_comments_are_fine():
    assert check_readonly("SELECT 'a;b' AS x;") == "SELECT 'a;b' AS x"
    res = run_readonly(DB, "SELECT 'drop table; delete' AS note, count(*) AS n FROM orders -- ; drop table x")
    assert res.columns == ("note", "n") and res.rows[0] == ("drop table; delete", 9000)
    # words that merely contain a keyword are not keywords
    res = run_readonly(DB, "SELECT count(*) AS updated_total FROM orders WHERE status = 'refunded'")
    assert res.rows[0][0] > 0


def test_select_returns_sql_and_rows_and_truncates():
    res = run_readonly(DB, "SELECT order_id, goods_amount FROM orders ORDER BY order_id", max_rows=10)
    assert res.sql.startswith("SELECT order_id") and res.columns == ("order_id", "goods_amount")
    assert len(res.rows) == 10 and res.truncated
    assert run_readonly(DB, "SELECT count(*) FROM regions").rows == ((5,),)


def test_errors_and_timeouts_are_reported_not_raised_raw():
    with pytest.raises(SQLExecutionError, match="no such column"):
        run_readonly(DB, "SELECT nope FROM orders")
    slow = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT count(*) FROM c, orders")
    with pytest.raises(SQLExecutionError, match="longer than"):
        run_readonly(DB, slow, timeout_s=0.2)


def test_schema_description_names_tables_and_regions():
    text = describe_schema(DB)
    for name in ("CREATE TABLE orders", "CREATE TABLE refunds", "华东", "华南", "华北", "2024-12-31"):
        assert name in text


# --------------------------------------------------------------------------- statistics
def test_describe_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.lognormal(3, 1, 257)
    d = describe(list(x))
    assert d["count"] == 257
    for key, ref in [("sum", x.sum()), ("mean", x.mean()), ("median", np.median(x)), ("std", x.std(ddof=1)),
                     ("min", x.min()), ("max", x.max()), ("p25", np.percentile(x, 25)), ("p75", np.percentile(x, 75))]:
        assert d[key] == pytest.approx(ref, rel=1e-12), key
    assert describe([])["count"] == 0 and describe([4.0])["std"] == 0.0


def test_growth_rates_match_numpy():
    v = np.array([100.0, 120.0, 90.0, 0.0, 50.0])
    g = growth_rates(list(v))
    ref = np.diff(v[:4]) / v[:3]
    assert g[:3] == pytest.approx(list(ref)) and g[3] is None


def test_compute_on_real_rows_matches_sql_and_numpy():
    res = run_readonly(DB, "SELECT substr(order_date, 1, 7) AS month, g.name_zh AS region, SUM(goods_amount) AS amount "
                           "FROM orders o JOIN regions g USING (region_id) WHERE status = 'paid' "
                           "AND order_date LIKE '2024%' GROUP BY month, region ORDER BY month, region")
    s = compute(res.columns, res.rows, "amount", "month", "region")
    total = run_readonly(DB, "SELECT SUM(goods_amount) FROM orders WHERE status = 'paid' AND order_date LIKE '2024%'").rows[0][0]
    assert s["overall"]["sum"] == pytest.approx(total)
    amounts = np.array([r[2] for r in res.rows])
    assert s["overall"]["std"] == pytest.approx(amounts.std(ddof=1))
    monthly = run_readonly(DB, "SELECT SUM(goods_amount) FROM orders WHERE status = 'paid' AND order_date LIKE '2024%' "
                               "GROUP BY substr(order_date, 1, 7) ORDER BY 1").rows
    assert len(s["trend"]["periods"]) == 12
    series = np.array(s["trend"]["values"])
    assert sorted(series) == pytest.approx(sorted(r[0] for r in monthly))
    assert s["trend"]["mean_growth"] == pytest.approx(np.mean(np.diff(series) / series[:-1]))
    assert sum(g["share"] for g in s["groups"].values()) == pytest.approx(1.0)
    assert set(s["groups"]) >= {"华东", "华南", "华北"}


def test_compute_infers_columns_and_rejects_unknown():
    s = compute(["region_id", "month", "n"], [[1, "2024-01", 3], [1, "2024-02", 6]])
    assert (s["measure"], s["time_column"]) == ("n", "month") and s["trend"]["growth"] == [1.0]
    with pytest.raises(ValueError, match="not in the result"):
        compute(["a"], [[1]], measure="b")


# --------------------------------------------------------------------------- sample DB
def test_generator_is_deterministic_and_matches_the_shipped_db(tmp_path):
    a, b = build(tmp_path / "a.sqlite"), build(tmp_path / "b.sqlite")
    assert content_digest(a) == content_digest(b) == content_digest(DB)
    assert DB.stat().st_size < 2 * 1024 * 1024


def test_sample_db_is_a_realistic_sales_schema():
    q = lambda sql: run_readonly(DB, sql).rows  # noqa: E731
    assert {r[0] for r in q("SELECT name_zh FROM regions")} >= {"华东", "华南", "华北"}
    assert q("SELECT min(order_date), max(order_date) FROM orders")[0] == ("2023-01-01", "2024-12-31")
    assert {r[0] for r in q("SELECT DISTINCT status FROM orders")} == {"paid", "refunded", "cancelled"}
    # goods_amount is the discounted sum of the items
    diff = q("SELECT max(abs(o.goods_amount - t.s)) FROM orders o JOIN (SELECT order_id, "
             "round(sum(quantity * unit_price * (1 - discount)), 2) AS s FROM order_items GROUP BY order_id) t "
             "USING (order_id)")[0][0]
    assert diff < 0.02
    assert q("SELECT count(*) FROM refunds r JOIN orders o USING (order_id) WHERE o.status = 'refunded'")[0][0] > 100


# --------------------------------------------------------------------------- the agents
def _scripted(role, *replies):
    from supervisor.scripted import ScriptedChatModel

    return ScriptedChatModel(role=role, replies=list(replies))


def test_text2sql_agent_executes_model_sql_read_only_and_recovers_from_rejection(db):
    from agents.text2sql import Text2SQLAgent

    before = content_digest(db)
    m = _scripted("text2sql",
                  {"tool_calls": [{"name": "run_sql", "args": {"sql": "DROP TABLE orders"}}]},
                  {"tool_calls": [{"name": "run_sql", "args": {"sql": "SELECT name_zh, count(*) AS n FROM orders "
                                                                       "JOIN regions USING (region_id) GROUP BY name_zh"}}]},
                  "Order counts per region.")
    agent = Text2SQLAgent(m, db)
    res = agent.run("各地区订单数", "Relevant long-term memories:\n- 金额用万元", {})
    assert res.error is None and res.artifacts["sql"].startswith("SELECT name_zh")
    assert sum(r[1] for r in res.artifacts["rows"]) == 9000 and len(res.artifacts["rows"]) == 5
    assert "ERROR" in str(m.calls[1][-1].content) and "read-only" in str(m.calls[1][-1].content)
    assert content_digest(db) == before
    assert res.memory_items and "SELECT name_zh" in res.memory_items[0]
    assert [t.name for t in agent.tools] == ["run_sql"]


def test_statistics_and_analysis_agents(tmp_path):
    from agents.analysis import AnalysisAgent
    from agents.statistics import StatisticsAgent

    rows = [["2024-01", 10.0], ["2024-02", 12.0], ["2024-03", 9.0]]
    st = StatisticsAgent(_scripted("statistics",
                                   {"tool_calls": [{"name": "compute_statistics",
                                                    "args": {"measure": "v", "time_column": "m"}}]}, "ok"))
    res = st.run("growth", "", {"columns": ["m", "v"], "rows": rows})
    stats = res.artifacts["stats"]
    assert stats["overall"]["mean"] == pytest.approx(31 / 3, abs=1e-4)
    assert stats["trend"]["growth"] == pytest.approx([0.2, -0.25])
    an = AnalysisAgent(_scripted("analysis",
                                 {"tool_calls": [{"name": "write_report",
                                                  "args": {"title": "T", "findings": "- up then down"}}]},
                                 "- up then down"), reports_dir=tmp_path)
    out = an.run("analyse", "", {"stats": stats, "sql": "SELECT 1"})
    path = out.artifacts["report_path"]
    text = open(path, encoding="utf-8").read()
    assert path.startswith(str(tmp_path)) and "- up then down" in text and "SELECT 1" in text
    assert any(path in item for item in out.memory_items)
