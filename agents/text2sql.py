"""Text2SQL: the chat model writes SQL for the sample sales database; it runs read-only.

The agent is ``create_agent(model, [run_sql])``. ``run_sql`` executes one SELECT on a
``mode=ro`` connection guarded by an authorizer (:mod:`agents.db`); errors go back to the model
so it can fix the query. The result carries the SQL and the rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool

from agents.base import AgentResult, agent_input, last_ai_text, recursion_config, tool_artifacts
from agents.db import SQLExecutionError, UnsafeSQL, describe_schema, run_readonly, sample_db_path

PROMPT = """You are the Text2SQL agent of a data team. You answer questions by querying a SQLite
sales database with the run_sql tool. Write exactly one read-only SELECT (or WITH ... SELECT).
Follow the metric definitions and user preferences given in the system context exactly (for
example how GMV is defined, or which unit amounts are reported in). If run_sql returns an
error, fix the query and call it again. Finish with one short sentence saying what the result
contains. Schema:

{schema}"""

PREVIEW_ROWS = 20


def make_run_sql(db_path: str | Path, max_rows: int = 1000) -> BaseTool:
    @tool(response_format="content_and_artifact")
    def run_sql(sql: str) -> tuple[str, dict[str, Any]]:
        """Run one read-only SELECT on the sales database; returns columns and rows (JSON)."""
        try:
            res = run_readonly(db_path, sql, max_rows=max_rows)
        except (UnsafeSQL, SQLExecutionError) as exc:
            return f"ERROR: {exc}", {"error": str(exc), "sql": sql}
        data = res.as_dict(max_rows=PREVIEW_ROWS)
        return json.dumps(data, ensure_ascii=False, default=str), res.as_dict()

    return run_sql


class Text2SQLAgent:
    name = "text2sql"
    description = ("Writes and runs read-only SQL on the sales database (regions, customers, products, "
                   "orders, order items, refunds) to fetch numbers such as sales, GMV, order counts, "
                   "customers and refunds by region, month, product or channel.")
    examples = (
        "查询2024年华东地区每个月的销售额", "各地区去年的订单数是多少", "退款金额最多的产品有哪些",
        "How many orders did South China have in 2024?", "Show monthly GMV by region",
        "List the top 10 customers by revenue", "What was the refund amount per month last year?",
    )
    keywords = re.compile(
        r"查|多少|销售|销量|订单|客户|退款|GMV|营收|收入|金额|数据|地区|华东|华南|华北|华中|西南|每月|每个月|按月"
        r"|\b(?:sales|revenue|gmv|orders?|customers?|refunds?|how many|how much|top \d+|by (?:region|month|product|channel)"
        r"|query|sql|monthly|per month|list)\b", re.I)
    requires: tuple[str, ...] = ()

    def __init__(self, model: BaseChatModel, db_path: str | Path | None = None, *, max_rows: int = 1000):
        self.model = model
        self.db_path = Path(db_path) if db_path is not None else sample_db_path()
        self.tools = [make_run_sql(self.db_path, max_rows)]
        self.graph = create_agent(model, self.tools, system_prompt=PROMPT.format(schema=describe_schema(self.db_path)),
                                  name=self.name)

    def run(self, task: str, context: str, inputs: Mapping[str, Any], config: RunnableConfig | None = None) -> AgentResult:
        out = self.graph.invoke({"messages": agent_input(context, task)}, recursion_config(config))
        msgs = tuple(out["messages"])
        answer = last_ai_text(msgs)
        ok = tool_artifacts(msgs, "run_sql")
        if not ok:
            return AgentResult(self.name, f"Text2SQL found no working query. {answer}".strip(), messages=msgs,
                               error="no successful query")
        res = ok[-1]
        preview = "\n".join(" | ".join(str(v) for v in r) for r in res["rows"][:8])
        text = (f"{answer}\nSQL: {res['sql']}\nrows: {res['row_count']} ({', '.join(res['columns'])})\n"
                f"{' | '.join(res['columns'])}\n{preview}").strip()
        item = f"SQL used for “{task.strip()[:200]}”: {res['sql']}"
        return AgentResult(self.name, text, {"sql": res["sql"], "columns": res["columns"], "rows": res["rows"]},
                           (item,), msgs)
