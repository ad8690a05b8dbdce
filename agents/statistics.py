"""Statistics: real numbers on the rows Text2SQL returned (numpy), chosen by the chat model.

The model sees the task, the injected context and a preview of the rows, and calls
``compute_statistics`` with the measure/time/group columns; the tool computes count, sum,
mean, median, std, min/max, quartiles, period-over-period growth and group shares on *all*
rows (:mod:`agents.stats_core`). The rows reach the tool through the run's context, never
through the prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool

from agents.base import AgentResult, agent_input, last_ai_text, recursion_config, tool_artifacts
from agents.stats_core import compute, format_number

PROMPT = """You are the Statistics agent of a data team. You receive the result of a SQL query
(columns and a preview of the rows). Call compute_statistics once with the column to measure
and, when present, the time column and the group column. Then summarise the key numbers in two
to four sentences, using the language, units and definitions given in the system context."""


@dataclass
class StatsInput:
    """Run context of the statistics agent: the full result set."""

    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 4)
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


def stats_brief(stats: Mapping[str, Any]) -> str:
    """A short plain-text digest of a ``compute()`` result."""
    o = stats["overall"]
    parts = [f"{stats['measure']}: n={o['count']}, sum={format_number(o['sum'])}, mean={format_number(o['mean'])}, "
             f"median={format_number(o['median'])}, std={format_number(o['std'])}, "
             f"min={format_number(o['min'])}, max={format_number(o['max'])}"]
    t = stats.get("trend")
    if t and len(t["periods"]) > 1:
        parts.append(f"by {stats['time_column']} {t['periods'][0]}..{t['periods'][-1]}: "
                     f"mean growth {format_number(t['mean_growth'], '%')}, total {format_number(t['total_growth'], '%')}, "
                     f"best {t['best_period']} ({format_number(t['best_growth'], '%')}), "
                     f"worst {t['worst_period']} ({format_number(t['worst_growth'], '%')}), peak {t['peak_period']}")
    g = stats.get("groups")
    if g:
        top = list(g.items())[:5]
        parts.append(f"by {stats['group_column']}: " + ", ".join(
            f"{k} {format_number(v['sum'])} ({(v['share'] or 0) * 100:.1f}%)" for k, v in top))
    return "; ".join(parts)


def make_compute_statistics() -> BaseTool:
    @tool(response_format="content_and_artifact")
    def compute_statistics(runtime: ToolRuntime[StatsInput], measure: str | None = None,
                           time_column: str | None = None, group_column: str | None = None) -> tuple[str, dict[str, Any]]:
        """Compute count/sum/mean/median/std/min/max, growth per period and group shares on all rows.

        Args:
            measure: the numeric column to describe (default: the last numeric column).
            time_column: a date/month/year column to compute growth over (optional).
            group_column: a category column to compute shares over (optional).
        """
        ctx = runtime.context
        if ctx is None or not ctx.rows:
            return "ERROR: there are no rows to analyse; ask for a query first", {"error": "no rows"}
        try:
            stats = compute(ctx.columns, ctx.rows, measure, time_column, group_column)
        except ValueError as exc:
            return f"ERROR: {exc}", {"error": str(exc)}
        return stats_brief(stats), stats

    return compute_statistics


class StatisticsAgent:
    name = "statistics"
    description = ("Computes statistics on query results: totals, averages, median, standard deviation, "
                   "min/max, growth rates (month over month, year over year) and shares by group.")
    examples = (
        "计算环比增长率", "算一下平均值和中位数", "各地区占比是多少", "同比增长了多少",
        "Compute the month-over-month growth", "What is the average and median order value?",
        "Give me summary statistics of these numbers",
    )
    keywords = re.compile(
        r"统计|平均|均值|中位数|标准差|方差|增长|增速|环比|同比|占比|比例|波动|最大|最小|趋势"
        r"|\b(?:statistics|stats|average|mean|median|std|deviation|variance|growth|grow|trend|share|percent(?:age)?"
        r"|month[- ]over[- ]month|year[- ]over[- ]year|mom|yoy)\b", re.I)
    requires = ("text2sql",)

    def __init__(self, model: BaseChatModel):
        self.model = model
        self.tools = [make_compute_statistics()]
        self.graph = create_agent(model, self.tools, system_prompt=PROMPT, context_schema=StatsInput, name=self.name)

    def run(self, task: str, context: str, inputs: Mapping[str, Any], config: RunnableConfig | None = None) -> AgentResult:
        cols, rows = list(inputs.get("columns") or []), [list(r) for r in inputs.get("rows") or []]
        if not rows:
            return AgentResult(self.name, "Statistics: no rows to analyse (no query result yet).", error="no rows")
        preview = json.dumps({"columns": cols, "row_count": len(rows), "first_rows": rows[:10]},
                             ensure_ascii=False, default=str)
        out = self.graph.invoke({"messages": agent_input(context, task, f"Query result: {preview}")},
                                recursion_config(config), context=StatsInput(cols, rows))
        msgs = tuple(out["messages"])
        answer = last_ai_text(msgs)
        ok = tool_artifacts(msgs, "compute_statistics")
        if not ok:
            return AgentResult(self.name, f"Statistics could not be computed. {answer}".strip(), messages=msgs,
                               error="compute_statistics did not succeed")
        stats = _round(ok[-1])
        text = f"{answer}\nComputed: {stats_brief(ok[-1])}".strip()
        item = f"Statistics conclusion for “{task.strip()[:200]}”: {answer or stats_brief(ok[-1])}"
        return AgentResult(self.name, text, {"stats": stats}, (item,), msgs)
