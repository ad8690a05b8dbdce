"""The written-out scoring loop (stop 34) reproduces the per-call one bit for bit.

:func:`memory.scoring.score_candidates` is compared exactly (``==`` on every breakdown field and on the order, not
approx) with the code it replaced (:mod:`tests.unit.scoring_reference`) on random candidate lists that exercise every
branch: vector or keyword scores missing (one channel only), zero and negative cosines, BM25 ties and zeros, Chinese,
English and mixed texts (language fusion, the lexicon bridge, the keyword cap), type and source boosts that clip at 0
and 1, future timestamps (age 0), equal scores broken by recency and id, and settings with fusion or bridge off.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from memory import cedict
from memory.records import MemoryMetadata, MemoryRecord, ScoredMemory
from memory.scoring import score_candidates
from memory.settings import ScoringSettings
from tests.unit import scoring_reference as ref

NOW = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
TEXTS = ("the ferry ticket price for adults is 198 yuan", "Caroline: I painted a sunset for the shelter",
         "report amounts in yuan from now on", "以后报表里的金额都用万元为单位", "渡轮成人票价现在是215元",
         "押金现在改成300元了 deposit 300", "周敏: 上周我们去露营了", "SELECT sum(amount) FROM sales", "12345")
QUESTIONS = ("What is the ferry ticket price now?", "押金现在是多少？", "how should amounts be shown 金额", "sunset",
             "渡轮 ticket")
TYPES = ("conversation", "preference", "fact", "procedure", "episode")
SOURCES = ("user", "analysis", "text2sql", "import")


def _candidates(rng: random.Random, n: int, vector: bool, keyword: bool) -> list[ScoredMemory]:
    out = []
    for i in range(n):
        # Coarse times and scores, so equal scores (ties by recency, then id) occur.
        updated = NOW + timedelta(days=rng.choice((-400, -30, -30, -1, 0, 2)), seconds=rng.choice((0, 0, 7)))
        rec = MemoryRecord(id=f"m{rng.randrange(10_000):05d}", namespace=("user_profile", "u1"),
                           content=rng.choice(TEXTS), created_at=updated - timedelta(days=1), updated_at=updated,
                           metadata=MemoryMetadata(type=rng.choice(TYPES), source=rng.choice(SOURCES)))
        out.append(ScoredMemory(
            rec,
            rng.choice((None, -0.2, 0.0, 0.31, 0.5, 0.5, 0.87, rng.uniform(-1, 1))) if vector else None,
            rng.choice((None, 0.0, 0.0, 1.5, 3.25, 3.25, rng.uniform(0, 20))) if keyword else None))
    return out


def _settings(rng: random.Random) -> ScoringSettings:
    return ScoringSettings(
        language_fusion=rng.random() < .8, bridge_weight=rng.choice((0.0, 0.5)), bridge_bonus=rng.choice((0.0, 0.1)),
        type_boosts={"preference": rng.choice((0.3, 1.2)), "fact": -0.4, "procedure": 0.2},
        source_boosts=rng.choice(({}, {"user": 0.5, "import": -0.1, "analysis": 0.9})),
        decay_lambda=rng.choice((0.0, 0.01, 0.3)), vector_floor=rng.choice((0.0, 0.8)))


def _key(hits: list) -> list:
    return [(h.record.id, h.record.updated_at, h.breakdown) for h in hits]


@pytest.mark.parametrize("seed", range(12))
def test_score_candidates_identical(seed: int) -> None:
    rng = random.Random(seed)
    differ = 0
    for _ in range(60):
        vector, keyword = rng.choice(((True, True), (True, True), (True, False), (False, True)))
        cands = _candidates(rng, rng.choice((0, 1, 5, 40, 100)), vector, keyword)
        cfg = _settings(rng)
        query = rng.choice(QUESTIONS + (None,))
        new, old = score_candidates(cands, NOW, cfg, query), ref.score_candidates(cands, NOW, cfg, query)
        differ += _key(new) != _key(old)
    assert differ == 0


def test_score_candidates_exercises_every_branch() -> None:
    """The generated lists above reach the cases the written-out code distinguishes (so the comparison can fail)."""
    rng = random.Random(0)
    seen = set()
    for _ in range(200):
        cands = _candidates(rng, 40, True, True)
        cfg = _settings(rng)
        hits = score_candidates(cands, NOW, cfg, rng.choice(QUESTIONS))
        seen |= {("boost0", h.breakdown.boost == 0.0) for h in hits} | {("boost1", h.breakdown.boost == 1.0)
                                                                          for h in hits}
        seen |= {("floor", h.breakdown.sim == cfg.vector_floor * h.breakdown.vector > 0) for h in hits}
        seen |= {("future", h.record.updated_at > NOW) for h in hits}
        scores = [h.breakdown.score for h in hits]
        seen.add(("tie", len(set(scores)) < len(scores)))
    assert {("boost0", True), ("boost1", True), ("floor", True), ("future", True), ("tie", True)} <= seen


BRIDGE_TEXTS = TEXTS + ("苏可欣: 过敏的孩子有三个,小宇对鸡蛋过敏。", "每天早上八点到八点半入园", "Fang: 咖啡 coffee every morning",
                        "the kids are allergic to eggs", "报表 report in 万元", "", "ok")
BRIDGE_QUESTIONS = ("Which kid is allergic to eggs?", "以后的报表金额用什么单位？", "我喜欢喝咖啡吗？",
                    "How much is the deposit now?", "渡轮票价", "coffee report eggs")


@pytest.mark.parametrize("seed", range(6))
def test_bridge_coverage_identical(seed: int) -> None:
    """The lexicon bridge's weights summed by column and by compress() give the old generator sums exactly."""
    rng = random.Random(seed)
    seen = differ = 0
    for _ in range(40):
        texts = [rng.choice(BRIDGE_TEXTS) for _ in range(rng.choice((1, 3, 20, 60)))]
        query, to_han = rng.choice(BRIDGE_QUESTIONS), rng.random() < .5
        new, old = cedict.bridge_coverage(query, to_han, texts), ref.cedict_bridge_coverage(query, to_han, texts)
        differ += new != old
        seen += new is not None and 0.0 < max(new) < 1.0
    assert differ == 0 and seen  # some coverages strictly between 0 and 1: the weights were summed
