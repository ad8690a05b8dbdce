"""Analysis: the chat model writes findings from the statistics; a report file is saved.

The model sees the task, the injected context and the statistics (plus the SQL that produced
them) and calls ``write_report`` with its findings; the tool writes a Markdown report (findings,
SQL, the computed numbers) and returns its path.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool

from agents.base import AgentResult, agent_input, last_ai_text, recursion_config, tool_artifacts
from agents.statistics import stats_brief

PROMPT = """You are the Analysis agent of a data team. From the statistics you are given, write
three to five concise findings (trend, peaks and troughs, notable changes, a recommendation),
honouring the language, units and definitions in the system context. Save them with the
write_report tool (a short title plus the findings as Markdown bullets), then reply with the
findings."""


@dataclass
class ReportInput:
    """Run context of the analysis agent: what the report is built from."""

    task: str = ""
    sql: str | None = None
    stats: dict[str, Any] | None = None
    reports_dir: str = ""


def make_write_report() -> BaseTool:
    @tool(response_format="content_and_artifact")
    def write_report(title: str, findings: str, runtime: ToolRuntime[ReportInput]) -> tuple[str, dict[str, Any]]:
        """Save the findings as a Markdown report (with the SQL and numbers); returns the file path."""
        ctx = runtime.context or ReportInput()
        out_dir = Path(ctx.reports_dir or Path(tempfile.gettempdir()) / "supervisor-reports")
        out_dir.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha1(f"{ctx.task}\n{findings}".encode()).hexdigest()[:8]
        path = out_dir / f"report-{datetime.now():%Y%m%d-%H%M%S}-{digest}.md"
        body = [f"# {title}", "", f"Task: {ctx.task}", "", "## Findings", "", findings.strip(), ""]
        if ctx.stats:
            body += ["## Numbers", "", stats_brief(ctx.stats), ""]
        if ctx.sql:
            body += ["## SQL", "", "```sql", ctx.sql, "```", ""]
        path.write_text("\n".join(body), encoding="utf-8")
        return f"report saved to {path}", {"path": str(path)}

    return write_report


class AnalysisAgent:
    name = "analysis"
    description = ("Writes analysis findings and a report from statistics: trends, peaks and troughs, "
                   "anomalies, drivers and recommendations.")
    examples = (
        "分析一下趋势", "解读一下这些数据并给出建议", "写一份分析报告", "为什么下降了",
        "Analyse the trend and explain it", "Write up the findings in a report", "What should we do about it?",
    )
    keywords = re.compile(
        r"分析|洞察|原因|为什么|解读|建议|报告|总结|结论"
        r"|\b(?:analy[sz]e|analysis|insights?|why|explain|interpret|recommend(?:ation)?s?|report|findings?|summari[sz]e)\b",
        re.I)
    requires = ("text2sql", "statistics")

    def __init__(self, model: BaseChatModel, reports_dir: str | Path | None = None):
        self.model = model
        self.reports_dir = str(reports_dir) if reports_dir is not None else ""
        self.tools = [make_write_report()]
        self.graph = create_agent(model, self.tools, system_prompt=PROMPT, context_schema=ReportInput, name=self.name)

    def run(self, task: str, context: str, inputs: Mapping[str, Any], config: RunnableConfig | None = None) -> AgentResult:
        stats = inputs.get("stats")
        data = []
        if stats:
            data.append(f"Statistics: {stats_brief(stats)}")
            if stats.get("trend"):
                t = stats["trend"]
                data.append("Series: " + json.dumps(dict(zip(t["periods"], [round(v, 2) for v in t["values"]], strict=True)),
                                                    ensure_ascii=False))
        if inputs.get("sql"):
            data.append(f"SQL: {inputs['sql']}")
        if not data:
            return AgentResult(self.name, "Analysis: there are no numbers to analyse yet.", error="no statistics")
        ctx = ReportInput(task, inputs.get("sql"), stats, self.reports_dir)
        out = self.graph.invoke({"messages": agent_input(context, task, "\n".join(data))},
                                recursion_config(config), context=ctx)
        msgs = tuple(out["messages"])
        findings = last_ai_text(msgs)
        reports = tool_artifacts(msgs, "write_report")
        path = reports[-1]["path"] if reports else None
        text = findings + (f"\nReport: {path}" if path else "")
        items = [f"Analysis conclusion for “{task.strip()[:200]}”: {findings}"] if findings else []
        if path:
            items.append(f"Analysis report for “{task.strip()[:120]}” saved at {path}")
        return AgentResult(self.name, text.strip(), {"report_path": path} if path else {}, tuple(items), msgs)
