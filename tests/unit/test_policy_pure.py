"""Pure policy modules: PII, routing, dedupe judge, summaries."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from memory.policy.dedupe import change_cue, entities, values
from memory.policy.llm_judge import LLMJudge, LLMReply, parse_llm_judgement
from memory.policy.pii import redact
from memory.policy.routing import RouteContext, route
from memory.policy.summarize import summarize
from memory.records import MemoryMetadata, MemoryRecord, ScoreBreakdown, SearchHit
from memory.text import count_tokens


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("请联系 13812345678", "PHONE"),
        ("手机 +86 138-1234-5678", "PHONE"),
        ("mail me at zhang.wei@example.com", "EMAIL"),
        ("身份证 11010519491231002X", "ID_NUMBER"),
        ("SSN 123-45-6789", "ID_NUMBER"),
        ("card 4111 1111 1111 1111", "CARD_NUMBER"),
        ("call (415) 555-0132", "PHONE"),
    ],
)
def test_pii_is_redacted(text, label):
    r = redact(text)
    assert f"[{label}]" in r.text and r.counts.get(label) == 1


@pytest.mark.parametrize(
    "text",
    ["订单号 20230508123456", "金额 1,234,567 元", "日期 2023-05-08", "version v1.2.3", "数量 138 个",
     "card-like but not Luhn 4111 1111 1111 1112", "Q3 revenue was 5.2M"],
)
def test_pii_leaves_business_numbers(text):
    assert redact(text).text == text


@pytest.mark.parametrize(
    ("msg", "mtype"),
    [
        ("以后报表都用万元为单位", "user_profile"),
        ("记住：我习惯看折线图", "user_profile"),
        ("From now on always use bar charts", "user_profile"),
        ("Please stop sending me PDF exports", "user_profile"),
        ("GMV 口径是指已支付订单金额", "domain_facts"),
        ("'Active user' means logged in within 30 days", "domain_facts"),
        ("dim_store 的别名是门店维表", "domain_facts"),
        ("What was revenue by region last quarter?", None),
        ("帮我查一下上个月的销售额", None),
    ],
)
def test_route_user_messages(msg, mtype):
    d = route(msg, RouteContext("u1"))
    assert d.memory_type == mtype
    assert d.should_write == (mtype is not None)
    assert d.should_read
    if mtype:
        assert d.write_namespace == (mtype, "u1")
    assert ("user_profile", "u1") in d.read_namespaces and ("domain_facts", "u1") in d.read_namespaces


def test_route_agent_outputs_and_skips():
    sql = route("SELECT region, SUM(x) FROM orders GROUP BY region", RouteContext("u1", role="agent", agent="text2sql"))
    assert (sql.memory_type, sql.write_namespace) == ("tool_effects", ("text2sql_memories", "u1"))
    path = route("Saved the chart to /tmp/out/revenue.png", RouteContext("u1", role="agent", agent="analysis"))
    assert path.memory_type == "tool_effects"
    concl = route("结论：华东区的退货率最高，主要来自服装类目", RouteContext("u1", role="agent", agent="analysis"))
    assert concl.memory_type == "task_traces"
    for small in ("谢谢", "ok", "Thanks!", "   "):
        d = route(small, RouteContext("u1"))
        assert not d.should_read and not d.should_write
    cross = route("还是按上次的口径来", RouteContext("u1"))
    assert cross.extra["cross_session"] and cross.top_k > route("查销售额", RouteContext("u1")).top_k


def test_route_is_fast():
    msgs = ["以后报表都用万元为单位，上次那个口径别忘了"] * 2000
    t = time.perf_counter()
    for m in msgs:
        route(m, RouteContext("u1"))
    per_call_ms = (time.perf_counter() - t) * 1000 / len(msgs)
    assert per_call_ms < 1.0, per_call_ms


def test_values_lexicon_crosses_languages():
    assert values("用户更喜欢柱状图")["chart"] == values("User prefers bar charts")["chart"] == frozenset({"bar"})
    assert values("answer in English")["language"] != values("请用中文回答")["language"]
    assert "num" in values("保留 2 位小数")


def test_entities_are_names_not_lexicon_values():
    assert entities("DAU 和 iOS 的 Q3 数据") == {"dau", "ios", "q3"}
    assert entities("Amounts in USD, time zone UTC") == frozenset()  # values, compared by the lexicon


class _Model:
    """A stand-in chat model: replays replies (or raises), records prompts."""

    def __init__(self, *replies):
        self.replies, self.prompts = list(replies), []

    def invoke(self, prompt):
        self.prompts.append(prompt)
        r = self.replies.pop(0)
        if isinstance(r, Exception):
            raise r
        return type("Msg", (), {"content": r})()


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ('{"label": "update", "merged": "Amounts in yuan", "reason": "new unit"}',
         LLMReply("conflict", "new unit", "Amounts in yuan")),
        ('{"label": "conflict", "reason": "new unit"}', LLMReply("conflict", "new unit", None)),
        ('```json\n{"label": "distinct"}\n```', LLMReply("distinct", "", None)),
        ('Sure! {"label": "duplicate", "reason": "same"} hope that helps', LLMReply("duplicate", "same", None)),
        ('{"label": "maybe"}', None),
        ("duplicate", None),
        ("{not json}", None),
    ],
)
def test_parse_llm_judgement(reply, parsed):
    assert parse_llm_judgement(reply) == parsed


def test_llm_judge_asks_and_reports_failures():
    a, b = "User prefers bar charts.", "用户更喜欢柱状图"
    m = _Model('{"label": "distinct", "reason": "test says so"}', "no json here", RuntimeError("down"))
    j = LLMJudge(m)
    assert j.ask(a, b) == LLMReply("distinct", "test says so", None)
    assert a in m.prompts[0] and b in m.prompts[0]
    assert j.ask(a, b) is None and j.last_error == "llm reply unparseable"
    assert j.ask(a, b) is None and j.last_error == "llm judge failed: RuntimeError"


def test_change_cue_is_relative_to_the_stored_text():
    assert change_cue("报表用万元", "报表改成用元")
    assert not change_cue("From now on use bar charts", "From now on, bar charts please")
    assert change_cue("Use bar charts", "From now on use line charts")


def _hit(content: str, score: float, day: int, type_: str = "user_profile") -> SearchHit:
    t = datetime(2025, 1, day, tzinfo=UTC)
    r = MemoryRecord(namespace="user_profile/u1", content=content, created_at=t, updated_at=t,
                     metadata=MemoryMetadata(type=type_, source="user"))
    return SearchHit(r, ScoreBreakdown(score, score, 0, 1, 0, score))


def test_summarize_ranks_dedupes_and_respects_budget():
    hits = [_hit("Prefers bar charts for revenue", 0.5, 2), _hit("Amounts in 万元", 0.9, 3),
            _hit("prefers bar charts for revenue!", 0.4, 4), _hit("x " * 400, 0.3, 5)]
    block = summarize(hits, "make a revenue chart", max_tokens=60)
    lines = block.splitlines()
    assert lines[0].startswith("Relevant long-term memories for: make a revenue chart")
    assert "万元" in lines[1] and "2025-01-03" in lines[1] and "user_profile" in lines[1]
    assert sum("bar charts" in line for line in lines) == 1  # near-duplicate dropped
    assert count_tokens(block) <= 60
    assert summarize([], "x") == "" and summarize(hits, "x", 0) == ""
