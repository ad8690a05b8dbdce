"""Child process of test_writebehind_crash: one Supervisor turn whose post-nodes queue writes.

``python -m tests.faults._wb_child STORE RUN N_HANDOFFS PER_HANDOFF SLOW_MS`` runs one turn with a
scripted Supervisor handing off ``N_HANDOFFS`` times to a ``noter`` agent that reports
``PER_HANDOFF`` distinct conclusions each (items of :data:`ITEMS`), with write-behind on and every
background write slowed by up to ``SLOW_MS`` ms (so the parent's kill lands while writes are
queued). Prints ``QUEUED <journal id> <item index>`` (flushed) as each post-node returns, so the
parent knows what was acknowledged as queued, then ``DONE``. Building the graph also replays what
an earlier, killed run left in the journal.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from agents.base import AgentResult
from memory import MemorySettings
from memory.policy.manager import MemoryManager
from supervisor import ScriptedChatModel, build_supervisor_graph

ITEMS = [
    "Conclusion: East China GMV grew 18% in 2024, driven by the Hangzhou stores.",
    "SQL used for refunds by channel: SELECT channel, SUM(refund_amount) FROM refunds GROUP BY channel",
    "The quarterly report was saved to /data/reports/q3_margin_review.md",
    "结论：华南地区退款率在十月达到 4.2%，主要来自直播渠道。",
    "Finding: customers who bought twice within 30 days have a 3x higher lifetime value.",
    "SQL used for top products: SELECT product_id, COUNT(*) FROM order_items GROUP BY product_id "
    "ORDER BY 2 DESC LIMIT 10",
    "结论：北京门店的客单价比上海高 12 元。",
    "The churn analysis notebook lives at /srv/analysis/churn_2024.ipynb",
    "Conclusion: weekend orders carry smaller baskets but higher shipping costs.",
    "SQL used for new customers per month: SELECT substr(signup_date,1,7), COUNT(*) FROM customers GROUP BY 1",
    "结论：西南地区的物流时效平均为 3.4 天，比去年缩短半天。",
    "Finding: the spring promotion cannibalised full-price sales of kitchen appliances.",
    "The inventory snapshot CSV was written to /exports/inventory_2024-06-30.csv",
    "结论：会员用户贡献了 61% 的营收。",
    "Conclusion: coupon redemption is highest among students in university towns.",
    "SQL used for average delivery time: SELECT region, AVG(julianday(delivered_at)-julianday(shipped_at)) "
    "FROM shipments GROUP BY region",
    "结论：退货最多的品类是女装，其次是鞋靴。",
    "Finding: mobile app sessions convert twice as well as mobile web.",
    "The pricing experiment summary is in /docs/experiments/price_elasticity.pdf",
    "结论：华北地区冬季取暖设备销量同比翻倍。",
    "Conclusion: supplier lead times doubled after the port strike in August.",
    "SQL used for payment failures: SELECT gateway, COUNT(*) FROM payments WHERE status='failed' GROUP BY gateway",
    "结论：客服响应时间超过两小时的订单差评率高出三倍。",
    "Finding: gift cards are mostly bought in the two weeks before Lunar New Year.",
]
USER, NAMESPACE = "u1", "noter_memories/u1"


@dataclass
class Noter:
    """Reports the conclusions its task names (``items:3,4``)."""

    name: str = "noter"
    description: str = "Writes down findings."
    examples: tuple[str, ...] = ("note the findings",)
    keywords: re.Pattern[str] = re.compile("note")
    requires: tuple[str, ...] = ()
    tools: list[Any] = field(default_factory=list)
    model: Any = None

    def run(self, task: str, context: str, inputs: Any, config: Any = None) -> AgentResult:
        idx = [int(i) for i in task.split(":", 1)[1].split(",")]
        return AgentResult(self.name, f"noted {idx}", memory_items=tuple(ITEMS[i] for i in idx))


def main(store: str, run: int, handoffs: int, per: int, slow_ms: int) -> None:
    mm = MemoryManager.from_settings(MemorySettings(path=store, policy={"write_behind": True}))
    remember = mm.remember

    def slow_remember(*a: Any, **k: Any) -> Any:
        time.sleep(random.uniform(0, slow_ms) / 1000)
        return remember(*a, **k)

    mm.remember = slow_remember  # type: ignore[method-assign]
    start = run * handoffs * per
    tasks = [",".join(str((start + h * per + j) % len(ITEMS)) for j in range(per)) for h in range(handoffs)]
    sup = ScriptedChatModel(role="supervisor", replies=[
        *({"tool_calls": [{"name": "transfer_to_noter", "args": {"task": f"items:{t}"}}]} for t in tasks), "done"])
    graph = build_supervisor_graph([Noter()], mm, sup)  # replays what a killed run left behind
    print("READY", flush=True)
    for part in graph.stream({"messages": [("user", "note the findings")]},
                             {"configurable": {"thread_id": f"run-{run}", "user_id": USER}}, stream_mode="custom"):
        ev = part.get("memory") if isinstance(part, dict) else None
        # The agent's items (findings it also publishes to shared_context go through the same journal).
        if ev and ev.get("kind") == "queued" and ev["incoming"] in ITEMS:
            print("QUEUED", ev["journal"], ITEMS.index(ev["incoming"]), flush=True)
    print("DONE", flush=True)


def verify(store: str) -> None:
    """The next open: build a graph (which replays the journal), then report counts and integrity."""
    import sqlite3

    from supervisor.journal import WriteJournal

    mm = MemoryManager.from_settings(MemorySettings(path=store))
    build_supervisor_graph([Noter()], mm, ScriptedChatModel(role="supervisor"))
    counts = {i: 0 for i in range(len(ITEMS))}
    for r in mm.service.list(NAMESPACE, limit=10_000):
        if r.content in ITEMS:
            counts[ITEMS.index(r.content)] += 1
    left = len(WriteJournal.for_store(store))
    mm.close()
    integrity = sqlite3.connect(store).execute("PRAGMA integrity_check").fetchone()[0]
    print(json.dumps({"counts": counts, "journal_left": left, "integrity": integrity}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "verify":
        verify(sys.argv[2])
    else:
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
