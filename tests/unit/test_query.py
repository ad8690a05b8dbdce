"""memory.query: date windows, question intent, named speakers, and the re-ranking they drive."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from memory.filters import matches, validate_filter
from memory.query import (
    QueryPlan,
    RerankWeights,
    asks,
    current_values,
    merge_candidates,
    plan_query,
    rerank,
    same_slot,
    states_time,
    window_filter,
)
from memory.records import MemoryMetadata, MemoryRecord, ScoreBreakdown, ScoredMemory, SearchHit
from memory.settings import ScoringSettings

NOW = datetime(2023, 10, 22, 12, 0, tzinfo=UTC)


def d(y: int, m: int, day: int) -> datetime:
    return datetime(y, m, day, tzinfo=UTC)


def window(q: str, now: datetime = NOW) -> tuple[datetime, datetime] | None:
    return plan_query(q, now).window


@pytest.mark.parametrize(("question", "inside", "outside"), [
    ("What movie did Joanna watch on 1 May, 2022?", d(2022, 5, 2), d(2022, 5, 20)),
    ("Who did Maria have dinner with on May 3, 2023?", d(2023, 5, 3), d(2023, 4, 20)),
    ("When did Melanie go camping in June?", d(2023, 6, 20), d(2023, 8, 1)),       # no year: latest June
    ("What setback did Melanie face in October 2023?", d(2023, 10, 13), d(2023, 9, 1)),
    ("Which tournament did Nate win in the beginning of November 2022?", d(2022, 11, 7), d(2022, 10, 30)),
    ("Where was John between August 11 and August 15 2023?", d(2023, 8, 11), d(2022, 8, 11)),  # year from later
    ("What did his teammates give him when they met on Aug 15th?", d(2023, 8, 17), d(2023, 8, 1)),
    ("How many times has Melanie gone to the beach in 2023?", d(2023, 7, 1), d(2022, 12, 1)),
    ("2023年7月7日发生了什么？", d(2023, 7, 8), d(2023, 7, 20)),
])
def test_explicit_dates_give_a_window_around_when_it_was_said(question, inside, outside):
    w = window(question)
    assert w is not None, question
    assert w[0] <= inside < w[1]
    assert not (w[0] <= outside < w[1])


def test_a_date_without_a_year_is_its_latest_occurrence_before_now():
    # On 22 October, "in December" is last December, "on 3 October" is this year's.
    w = window("What did she buy in December?")
    assert w is not None and w[0] == d(2022, 12, 1)
    w = window("What happened on 3 October?")
    assert w is not None and w[0] <= d(2023, 10, 3) < w[1]


@pytest.mark.parametrize("question", [
    "What was the April conversion rate?",       # the period a figure is about, reported weeks later
    "What was February's GMV?",
    "一月份的准时交付率是多少？",
    "去年十二月的 M1+ 逾期率是多少？",
    "Who is Jun's manager in Singapore?",         # a name, not a month
    "May I ask which chart type she prefers?",    # a verb, not a month
    "What does the 2024 ageing report cover?",
    "How should amounts be shown in reports?",
])
def test_no_window_without_an_event_date(question):
    assert window(question) is None


@pytest.mark.parametrize(("question", "days_back"), [
    ("What did Jun say yesterday?", 1),
    ("上周的次日留存是多少？", 7),
    ("What was discussed last week?", 7),
    ("上个月的复盘结论是什么？", 30),
])
def test_relative_dates_resolve_against_now(question, days_back):
    w = window(question)
    assert w is not None
    target = NOW - timedelta(days=days_back)
    assert w[0] <= target < w[1]
    assert w[1] <= NOW + timedelta(days=1)
    # The same words a year later point a year later: nothing is tied to the wall clock.
    later = window(question, NOW + timedelta(days=365))
    assert later is not None and later[0] == w[0] + timedelta(days=365)


@pytest.mark.parametrize(("question", "wants_time", "wants_current"), [
    ("When did Caroline go to the LGBTQ support group?", True, False),
    ("How long ago was Caroline's 18th birthday?", True, False),
    ("3.3 版本计划什么时候上线？", True, False),
    ("What is Caroline's identity?", False, False),
    ("Which currency should the Southeast Asia dashboards use now?", False, True),
    ("现在报表里的金额该用什么单位展示？", False, True),
    ("What is the know-how here?", False, False),  # "now" only as a whole word
    ("Who looks after event tracking nowadays?", False, True),
    ("What's North China's on-time rate target at this point?", False, True),
    ("眼下华东区的数据该找谁对接?", False, True),
])
def test_question_intent(question, wants_time, wants_current):
    p = plan_query(question, NOW)
    assert (p.wants_time, p.wants_current) == (wants_time, wants_current)


def test_states_time():
    assert states_time("I went to a counseling workshop last Friday")
    assert states_time("We moved here in 2019")
    assert states_time("上周我们把汇率改了")
    assert not states_time("I love painting landscapes with my kids")


JAN = d(2023, 1, 1)


def hit(rid: str, content: str, *, sim: float, created: datetime = JAN,
        speaker: str | None = None) -> SearchHit:
    extra = {"speaker": speaker} if speaker else {}
    rec = MemoryRecord(id=rid, namespace=("eval", "c"), content=content,
                       metadata=MemoryMetadata(type="conversation", extra=extra),
                       created_at=created, updated_at=created)
    return SearchHit(rec, ScoreBreakdown(sim=sim, vector=sim, keyword=0.0, decay=1.0, boost=0.0, score=sim))


def ids(hits: list[SearchHit]) -> list[str]:
    return [h.record.id for h in hits]


def test_speaker_named_in_the_question_is_preferred():
    hits = [hit("a", "Melanie: I painted a lake sunrise", sim=0.60, speaker="Melanie"),
            hit("b", "Caroline: I painted a stained glass window", sim=0.55, speaker="Caroline")]
    out = rerank(hits, plan_query("What did Caroline paint?", NOW), RerankWeights())
    assert ids(out) == ["b", "a"]
    assert out[0].breakdown.query == pytest.approx(0.2)
    assert out[0].breakdown.score == pytest.approx(0.55 + 0.2)
    # Naming both speakers (or nobody) favours neither; "Jon" is not "Jonathan".
    for q in ("What did Caroline and Melanie paint?", "What was painted?"):
        assert ids(rerank(hits, plan_query(q, NOW), RerankWeights())) == ["a", "b"]
    jon = [hit("a", "x", sim=0.6, speaker="Jonathan"), hit("b", "y", sim=0.5, speaker="Gina")]
    assert ids(rerank(jon, plan_query("What did Jon open?", NOW), RerankWeights())) == ["a", "b"]


def test_window_time_and_current_bonuses():
    june = [hit("may", "We went camping", sim=0.60, created=d(2023, 5, 10)),
            hit("jun", "We went camping again", sim=0.50, created=d(2023, 6, 12))]
    assert ids(rerank(june, plan_query("When did they go camping in June?", NOW), RerankWeights())) == ["jun", "may"]

    when = [hit("x", "Camping is fun", sim=0.60), hit("y", "We went camping last weekend", sim=0.55)]
    assert ids(rerank(when, plan_query("When did they go camping?", NOW), RerankWeights())) == ["y", "x"]
    assert ids(rerank(when, plan_query("Where did they go camping?", NOW), RerankWeights())) == ["x", "y"]

    unit = [hit("old", "金额用万元", sim=0.60, created=d(2023, 1, 1)),
            hit("new", "金额改用元", sim=0.58, created=d(2023, 6, 1))]
    assert ids(rerank(unit, plan_query("金额现在用什么单位？", NOW), RerankWeights())) == ["new", "old"]
    assert ids(rerank(unit, plan_query("金额用什么单位？", NOW), RerankWeights())) == ["old", "new"]


def test_current_bonus_is_scaled_by_relevance():
    # The newest candidate barely matches the question: the recency bonus of a "now" question is
    # scaled by its sim over the best one's, so it no longer jumps an older relevant memory (the
    # unscaled bonus lifted unrelated new memories as much as the update and pushed evidence out
    # of the top 5 on the zh/en sets).
    q = plan_query("What's the weekly report deadline now?", NOW)
    hits = [hit("old", "Weekly report due Monday 10:00", sim=0.60, created=d(2023, 1, 1)),
            SearchHit(hit("noise", "Off to five-a-side, Thursdays are sacred", sim=0.10, created=d(2023, 6, 1)).record,
                      ScoreBreakdown(sim=0.10, vector=0.10, keyword=0.0, decay=1.0, boost=0.0, score=0.45))]
    assert ids(rerank(hits, q, RerankWeights())) == ["old", "noise"]
    assert ids(rerank(hits, q, RerankWeights(current_by_sim=False))) == ["noise", "old"]
    # ... while a relevant update still overtakes the older statement.
    upd = hits + [hit("new", "Weekly report now due Tuesday", sim=0.45, created=d(2023, 5, 1))]
    assert ids(rerank(upd, q, RerankWeights()))[0] == "new"


def test_bonuses_off_and_irrelevant_hits_untouched():
    hits = [hit("a", "Melanie: hi", sim=0.6, speaker="Melanie"), hit("b", "Caroline: hi", sim=0.5, speaker="Caroline"),
            hit("c", "Caroline: unrelated", sim=0.0, speaker="Caroline")]
    off = RerankWeights(window=0, time=0, current=0, speaker=0)
    assert ids(rerank(hits, plan_query("What did Caroline say?", NOW), off)) == ["a", "b", "c"]
    out = rerank(hits, plan_query("What did Caroline say?", NOW), RerankWeights())
    assert out[-1].record.id == "c" and out[-1].breakdown.query == 0.0  # sim 0: no bonus
    assert rerank([], QueryPlan(text="x"), RerankWeights()) == []


def test_asks_is_the_share_of_a_memory_that_is_questions():
    assert asks("Caroline: That's so nice! What pet do you have?") == pytest.approx(21 / 36)
    assert asks("Tim: Where are you headed?") == 1.0
    assert asks("Nate: I love turtles. [image: a turtle? in a tank]") == 0.0  # captions do not count
    assert asks("Joanna: Is it 5:30? Yes.") == pytest.approx(11 / 15)   # "Speaker:" only at the start
    assert asks("你现在住哪里？") == 1.0 and asks("我住在上海。") == 0.0
    assert asks("") == 0.0


def test_a_memory_that_only_asks_is_demoted():
    hits = [hit("q", "Caroline: What pet do you have?", sim=0.62),
            hit("a", "Caroline: Yup, I have a guinea pig named Oscar.", sim=0.55)]
    out = rerank(hits, plan_query("What pet does Caroline have?", NOW), RerankWeights())
    assert ids(out) == ["a", "q"]
    assert out[1].breakdown.query == pytest.approx(-0.15)
    assert out[1].breakdown.score == pytest.approx(0.62 - 0.15)
    assert ids(rerank(hits, plan_query("What pet does Caroline have?", NOW), RerankWeights(question=0))) == ["q", "a"]


def test_window_filter_restricts_the_extra_query_to_the_window():
    plan = plan_query("What did Nate cook on 9 November, 2022?", NOW)
    assert plan.window is not None
    start, end = plan.window
    flt = window_filter(plan, {"type": "conversation"})
    assert flt == {"type": "conversation", "created_at": {"$gte": start}, "updated_at": {"$lt": end}}
    norm = validate_filter(flt)  # a valid filter for every backend

    def rec(created: datetime, updated: datetime | None = None) -> MemoryRecord:
        return MemoryRecord(id="r", namespace=("eval", "c"), content="x", metadata=MemoryMetadata(type="conversation"),
                            created_at=created, updated_at=updated or created)

    assert matches(rec(d(2022, 11, 10)), norm)
    assert not matches(rec(d(2022, 10, 1)), norm) and not matches(rec(d(2023, 1, 1)), norm)
    assert not matches(rec(d(2022, 11, 10), d(2023, 1, 1)), norm)  # edited after the window
    assert window_filter(plan_query("What did Nate cook?", NOW)) is None
    assert window_filter(plan, {"created_at": {"$gte": d(2020, 1, 1)}}) is None  # the caller's own time filter wins


def test_merge_candidates_dedupes_by_id_and_keeps_each_channels_max():
    def rec(rid: str) -> MemoryRecord:
        return MemoryRecord(id=rid, namespace=("eval", "c"), content=rid, metadata=MemoryMetadata(type="conversation"),
                            created_at=JAN, updated_at=JAN)

    a, b, c = rec("a"), rec("b"), rec("c")
    out = merge_candidates([ScoredMemory(a, 0.5, 1.0), ScoredMemory(b, 0.4, None)],
                           [ScoredMemory(b, 0.3, 2.0), ScoredMemory(c, 0.2, 0.0), ScoredMemory(a, 0.7, 0.5)])
    assert [(m.record.id, m.vector_score, m.keyword_score) for m in out] == [
        ("a", 0.7, 1.0), ("b", 0.4, 2.0), ("c", 0.2, 0.0)]
    assert merge_candidates([], []) == []


def test_service_runs_the_window_query_only_for_a_dated_question(service, monkeypatch):
    from memory.service import NewMemory

    # Many older memories that match the words better crowd the one written in the window
    # out of the normal candidates (1 per channel here).
    service.write_many(NewMemory(f"Nate: which tournament did Nate win, in the beginning, take {i}", ("eval", "c"),
                                 {"type": "conversation"}, created_at=d(2022, 3, 1) + timedelta(days=i))
                       for i in range(8))
    [target] = service.write_many([NewMemory("Nate: I won the regional tournament!", ("eval", "c"),
                                             {"type": "conversation"}, created_at=d(2022, 11, 7))])
    calls: list[dict | None] = []
    real = service.backend.query

    def spy(q):
        calls.append(q.filter)
        return real(q)

    monkeypatch.setattr(service.backend, "query", spy)
    cfg = service.settings.scoring
    now = d(2023, 1, 1)
    q = "Which tournament did Nate win in the beginning of November 2022?"
    service.settings.scoring = cfg.model_copy(update={"candidates": 1, "window_candidates": 0})
    assert service.search(q, ("eval",), top_k=1, min_sim=0, now=now)[0].record.id != target.id
    assert len(calls) == 1
    service.settings.scoring = cfg.model_copy(update={"candidates": 1, "window_candidates": 2})
    calls.clear()
    found = service.search(q, ("eval",), top_k=1, min_sim=0, now=now)
    assert found[0].record.id == target.id  # found by the window query, then the window bonus
    assert len(calls) == 2 and calls[1] is not None and set(calls[1]) == {"created_at", "updated_at"}
    calls.clear()
    service.search("Which tournament did Nate win?", ("eval",), top_k=1, min_sim=0, now=now)
    assert len(calls) == 1  # no date: no extra query


def test_weights_mirror_settings():
    assert RerankWeights.from_scoring(ScoringSettings()) == RerankWeights()


def test_same_slot_needs_the_same_attribute_not_just_values_of_one_class():
    # Both state a time with other values, so the reading alone paired them (zh/en tuning
    # conversations: 6 of 9 such pairs among current-value questions' top hits were other facts).
    assert not same_slot("Mei: I ran a half marathon on Sunday, my legs are sore.",
                         "Mei: The weekly funnel report is now due every Friday.")
    assert same_slot("Mei: The weekly funnel report is due every Monday.",
                     "Mei: From now on the weekly funnel report is due every Friday.")
    # A relevant newer statement well below the best hit (.53 of its sim) still counts.
    units = [hit("old", "Fang: 以后报表里的金额都用人民币万元为单位，保留两位小数。", sim=0.60, created=d(2023, 3, 1)),
             hit("gmv", "Fang: 另外我们这边 GMV 的口径是已支付订单的金额，不含退款。", sim=0.45, created=d(2023, 3, 1)),
             hit("new", "Fang: 财务要求统一口径，以后报表金额改成人民币百万元，保留一位小数。", sim=0.32,
                 created=d(2023, 5, 20))]
    now_q = plan_query("现在报表里的金额该用什么单位展示？", NOW)
    assert ids(rerank(units, now_q, RerankWeights(current=0.0)))[0] == "new"


def test_planning_is_cheap():
    qs = ["When did Melanie go camping in June?", "What did John's teammates give him when they met on Aug 15th?",
          "现在报表里的金额该用什么单位展示？", "What is Caroline's identity?"] * 250
    t = time.perf_counter()
    for q in qs:
        plan_query(q, NOW)
    assert (time.perf_counter() - t) / len(qs) < 0.001  # well under a millisecond each


def test_newer_statement_of_the_same_slot_wins_now_questions():
    # The older preference matches the question better (sim), but a newer memory states the same
    # slot (amount unit, decimals) with other values: "now" questions get the newer one first.
    units = [hit("old", "以后报表里的金额都用人民币万元为单位，保留两位小数。", sim=0.60, created=d(2023, 3, 1)),
             hit("new", "以后报表金额改成人民币百万元，保留一位小数。", sim=0.53, created=d(2023, 5, 20)),
             hit("gmv", "GMV 不含退款和运费。", sim=0.40, created=d(2023, 6, 1))]
    now_q = plan_query("现在报表里的金额该用什么单位？", NOW)
    assert now_q.wants_current and not now_q.asks_past
    out = rerank(units, now_q, RerankWeights(current=0.0))
    assert ids(out)[:2] == ["new", "old"]
    # Lifted to just above the older statement (.60 - .53), not by a fixed amount.
    assert out[0].breakdown.query == pytest.approx(0.07, abs=1e-3)
    assert out[0].breakdown.score == pytest.approx(0.60, abs=1e-3)
    assert [h.breakdown.query for h in out[1:]] == [0.0, 0.0]  # the other slot and the old value: nothing
    # slot_bonus caps the lift: an older statement far ahead stays ahead.
    capped = rerank(units, now_q, RerankWeights(current=0.0, slot=0.05))
    assert ids(capped)[0] == "old" and capped[1].breakdown.query == pytest.approx(0.05)
    # Off, a question about the original value, or one without "now": the order is unchanged.
    assert ids(rerank(units, now_q, RerankWeights(current=0.0, slot=0.0)))[0] == "old"
    past = plan_query("现在的单位之前最初是什么？", NOW)
    assert past.asks_past and ids(rerank(units, past, RerankWeights(current=0.0)))[0] == "old"
    assert ids(rerank(units, plan_query("报表金额用什么单位？", NOW), RerankWeights(current=0.0)))[0] == "old"
    # A value that differs in the subject (another region) is another slot, not an update.
    regions = [hit("n", "North China's on-time target is 96.5%", sim=0.6, created=d(2023, 3, 1)),
               hit("s", "South China's on-time target is 97%", sim=0.55, created=d(2023, 4, 1))]
    assert ids(rerank(regions, plan_query("What's the on-time target now?", NOW), RerankWeights(current=0.0))) \
        == ["n", "s"]
    # Stored chat turns ("Fang: ..."): the speaker is not the subject, so another region in
    # the subject is still another slot.
    turns = [hit("n", "Fang: North China's on-time target is 96.5%", sim=0.6, created=d(2023, 3, 1)),
             hit("s", "Fang: South China's on-time target is 97%", sim=0.55, created=d(2023, 4, 1))]
    assert ids(rerank(turns, plan_query("What's the on-time target now?", NOW), RerankWeights(current=0.0))) \
        == ["n", "s"]
    # Written minutes apart (one import, one indexing pass): no order, so no bonus.
    batch = [hit("a", "以后报表里的金额都用人民币万元为单位。", sim=0.60, created=datetime(2023, 3, 1, 9, 0, tzinfo=UTC)),
             hit("b", "以后报表金额改成人民币百万元。", sim=0.55, created=datetime(2023, 3, 1, 9, 5, tzinfo=UTC))]
    assert all(h.breakdown.query == 0.0 for h in rerank(batch, now_q, RerankWeights(current=0.0)))


def test_current_values_overlap_keeps_only_pairs_whose_slot_terms_overlap_that_much():
    units = [hit("old", "以后报表里的金额都用人民币万元为单位，保留两位小数。", sim=0.60, created=d(2023, 3, 1)),
             hit("new", "以后报表金额改成人民币百万元，保留一位小数。", sim=0.53, created=d(2023, 5, 20))]
    shipped = current_values(units)
    assert set(shipped) == {"new"} and shipped["new"] == pytest.approx(0.07, abs=1e-3)
    assert current_values(units, 0.0) == shipped  # 0: every pair same_slot reads as one slot
    assert current_values(units, 0.01) == shipped  # the two share slot terms
    assert current_values(units, 1.0) == {}  # but not all of them

