"""Current value first, on a real SQLite file with the packaged encoder (memory.retrieval.current).

Written without the write policy (as an import or a transcript would be), the store holds both
statements of the amount unit. The old one shares the question's words ("报表里的金额 ... 单位")
and wins on fused similarity; a "now" question must still get the update first.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory import MemoryService, MemorySettings
from memory.service import NewMemory

NS = ("user_profile", "fang")
MEMORIES = [
    ("old", "以后报表里的金额都用人民币万元为单位，保留两位小数。", datetime(2025, 3, 1, tzinfo=UTC)),
    ("gmv", "GMV 的口径是已支付订单的金额，不含退款，也不含运费。", datetime(2025, 3, 1, tzinfo=UTC)),
    ("week", "周报的统计周期是周一到周日。", datetime(2025, 3, 8, tzinfo=UTC)),
    ("new", "财务要求统一口径，以后报表金额改成人民币百万元，保留一位小数，之前那个万元的设置作废。",
     datetime(2025, 5, 20, tzinfo=UTC)),
    ("chart", "趋势图都用折线图，对比类的用柱状图。", datetime(2025, 5, 21, tzinfo=UTC)),
]
NOW = datetime(2025, 6, 1, tzinfo=UTC)


def _store(tmp_path, embedder, **scoring) -> MemoryService:
    svc = MemoryService.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite"), scoring=scoring),
                                      embedder=embedder)
    svc.write_many(NewMemory(text, NS, {"type": "user_profile"}, created_at=at, id=rid)
                   for rid, text, at in MEMORIES)
    return svc


@pytest.mark.parametrize("question", ["现在报表里的金额该用什么单位展示？",
                                      "What unit should report amounts be shown in now?"])
def test_now_question_gets_the_newest_statement_of_the_slot_first(tmp_path, embedder, question):
    with _store(tmp_path, embedder) as svc:
        hits = svc.search(question, NS, top_k=5, now=NOW)
        assert hits[0].record.id == "new", [(h.record.id, round(h.breakdown.score, 3)) for h in hits]
        assert hits[0].breakdown.query > 0  # it was moved, and the breakdown says by how much
        assert "old" in [h.record.id for h in hits]  # the older value is still found, just below


def test_the_older_value_leads_without_the_rule_and_for_questions_about_the_past(tmp_path, embedder):
    q = "现在报表里的金额该用什么单位展示？"
    with _store(tmp_path, embedder, slot_bonus=0.0) as svc:
        # The situation the rule exists for: by similarity alone the superseded value is first.
        assert svc.search(q, NS, top_k=5, now=NOW)[0].record.id == "old"
    with _store(tmp_path / "b", embedder) as svc:
        assert svc.search("报表金额最初用的是什么单位？", NS, top_k=5, now=NOW)[0].record.id == "old"
