"""``policy.injection: full | compact``: what the pre-node injects, and its token cost on the demo."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from langgraph.runtime import Runtime

from memctl.bench_injection import demo_injection
from memory.disclosure import compact_block, first_line
from memory.policy.manager import MemoryManager
from memory.records import MemoryRecord, ScoreBreakdown, SearchHit
from memory.settings import MemorySettings
from memory.text import count_tokens
from supervisor.context import SupervisorContext
from supervisor.nodes import make_pre_node

SQL = ("SQL used for “华东 2024 月度 GMV”: SELECT substr(order_date, 1, 7) AS month,\n"
       "  ROUND(SUM(goods_amount) / 10000.0, 2) AS gmv_wan FROM orders o JOIN regions g USING (region_id)\n"
       "  WHERE status = 'paid' AND g.name_zh = '华东' AND order_date LIKE '2024%' GROUP BY month ORDER BY month")
PREF = "Always report amounts in 万元 with two decimals, and never round percentages below one decimal place"


def _hit(content: str, ns: tuple[str, ...], score: float, rid: str) -> SearchHit:
    rec = MemoryRecord(id=rid, namespace=ns, content=content, created_at=datetime(2025, 1, 7, tzinfo=UTC),
                       updated_at=datetime(2025, 1, 7, tzinfo=UTC))
    return SearchHit(rec, ScoreBreakdown(sim=score, vector=score, keyword=0, decay=1, boost=0, score=score))


def test_bad_injection_setting_says_what_to_use():
    from memory.errors import InvalidConfig

    with pytest.raises(InvalidConfig, match="policy.injection"):
        MemorySettings.load(policy={"injection": "tiny"})


def test_compact_lines():
    assert first_line("  \nfirst\nsecond") == "first …"
    assert first_line("x" * 100) == "x" * 79 + "…"
    hits = [_hit(SQL, ("text2sql_memories", "u1"), 0.9, "a" * 32), _hit(PREF, ("user_profile", "u1"), 0.5, "b" * 32),
            _hit(SQL + " ", ("text2sql_memories", "u1"), 0.4, "c" * 32)]
    block = compact_block(hits, whole=lambda h: h.record.namespace[0] == "user_profile")
    lines = block.splitlines()
    assert len(lines) == 3  # header + SQL first line + whole preference; the repeated first line dropped
    assert lines[1].startswith("- SQL used for “华东 2024 月度 GMV”") and lines[1].endswith("[2025-01-07 aaaaaaaa]")
    assert "GROUP BY" not in block and f"- {PREF} [2025-01-07 bbbbbbbb]" in lines
    assert compact_block(hits, max_tokens=5) == ""


@pytest.mark.parametrize("mode", ["full", "compact"])
def test_pre_node_injection_modes(tmp_path, embedder, mode):
    st = MemorySettings(path=str(tmp_path / "m.sqlite"))
    st = st.model_copy(update={"policy": st.policy.model_copy(update={"injection": mode})})
    with MemoryManager.from_settings(st, embedder=embedder) as mm:
        mm.remember(PREF, "user_profile/u1")
        mm.remember(SQL, "text2sql_memories/u1", {"type": "task_traces", "source": "text2sql"})
        pre = make_pre_node(mm, "text2sql", st.policy.summary_max_tokens)
        task = "查一下 2024 年华东每月 GMV"
        out = pre({"messages": [], "active": {"agent": "text2sql", "task": task}},
                  {"configurable": {"thread_id": "t", "user_id": "u1"}},
                  Runtime(context=SupervisorContext(user_id="u1")))
    text = out["agent_context"]
    (ev,) = [e for e in out["memory_log"] if e["kind"] == "injected"]
    assert ev["tokens"] == count_tokens(text) and len(ev["used"]) == 2
    assert PREF in text  # standing instructions are whole in both modes
    if mode == "full":
        assert "GROUP BY month" in text
    else:
        assert "GROUP BY month" not in text and "SQL used for “华东 2024 月度 GMV”" in text
        assert ev["mode"] == "compact"


def test_demo_costs_fewer_tokens_in_compact_mode_and_still_passes(embedder):
    full, compact = demo_injection("full", embedder), demo_injection("compact", embedder)
    for r in (full, compact):
        a, b = r["checks_passed"].split("/")
        assert a == b and r["missed_expectations"] == [], r
        assert r["per_handoff"]["n"] >= 8
    assert compact["per_handoff"]["mean"] < 0.75 * full["per_handoff"]["mean"]
