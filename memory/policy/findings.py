"""What one agent leaves for the next: findings drawn from an agent's answer, pure (no I/O).

The Supervisor's post-node publishes these to ``shared_context/{user}`` (readable by every agent
of the user under the access rules), and every pre-node searches that namespace, so the next
agent — in the same run or in a later session — receives what is relevant to its task:

* ``definition`` — a sentence of the agent's answer that states a definition or an alias
  ("活跃客户的口径是最近90天内有已支付订单的客户", "GMV here means goods amount before refunds").
* ``query_choice`` — the tables and filters of the SQL an agent ran (Text2SQL's table choices).
* ``figures`` — the computed figures an agent reported (Statistics' ``Computed:`` line).

Each finding names its memory type so the write policy treats it like its kind (definitions are
merged by ``summarize``, the others ``append`` per task).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.policy.routing import _FACT

_SQL_LINE = re.compile(r"^\s*SQL(?: used for .*?)?:\s*(select\b.+)$", re.I | re.M)
_FROM = re.compile(r"\b(?:from|join)\s+([A-Za-z_][\w.]*)", re.I)
_WHERE = re.compile(r"\bwhere\b(.+?)(?=\bgroup\s+by\b|\border\s+by\b|\blimit\b|\bhaving\b|;|$)", re.I | re.S)
_COMPUTED = re.compile(r"^\s*Computed:\s*(.+)$", re.M)
# Lines of an answer that are data, not prose (SQL, row previews, report paths).
_DATA_LINE = re.compile(r"^\s*(?:SQL|rows|Computed|Report|Series|Statistics)\s*:|\|", re.I)
_SENTENCE = re.compile(r"(?<=[。！？!?；;])|(?<=[.])\s+")


@dataclass(frozen=True)
class Finding:
    kind: str  # definition | query_choice | figures
    text: str
    memory_type: str


def _definitions(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        if not line.strip() or _DATA_LINE.search(line):
            continue
        for s in _SENTENCE.split(line):
            s = s.strip()
            if len(s) >= 6 and _FACT.search(s):
                out.append(s)
    return out


def query_choice(sql: str) -> str | None:
    """'tables orders, regions; filters status = 'paid' AND ...' from one SELECT, or None."""
    tables = list(dict.fromkeys(t.split(".")[-1] for t in _FROM.findall(sql)))
    if not tables:
        return None
    where = _WHERE.search(sql)
    filters = " ".join(where.group(1).split()) if where else ""
    return f"tables {', '.join(tables)}" + (f"; filters {filters[:300]}" if filters else "")


def findings(agent: str, task: str, text: str, items: tuple[str, ...] | list[str] = ()) -> list[Finding]:
    """The findings in one agent result (answer ``text`` and its ``memory_items``), in order, deduplicated."""
    who = agent[:1].upper() + agent[1:]
    task = " ".join(task.split())[:160]
    out: list[Finding] = [Finding("definition", d, "domain_facts") for d in _definitions(text)]
    sqls = [m.group(1) for m in _SQL_LINE.finditer("\n".join([text, *items]))]
    if sqls:
        choice = query_choice(sqls[-1])
        if choice:
            out.append(Finding("query_choice", f"{who} for “{task}” used {choice}", "task_traces"))
    for m in _COMPUTED.finditer(text):
        out.append(Finding("figures", f"{who} figures for “{task}”: {m.group(1).strip()[:600]}", "task_traces"))
    seen: set[str] = set()
    return [f for f in out if not (f.text in seen or seen.add(f.text))]


__all__ = ["Finding", "findings", "query_choice"]
