"""The lexicon bridge's bonus scaled by the memory's vector score against the best in the question's script
(``ScoringSettings.bridge_relative``, memory.scoring.bridge_factor; stop 35, off by default)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from memory import scoring
from memory.records import MemoryMetadata, MemoryRecord, ScoredMemory
from memory.settings import ScoringSettings

NOW = datetime(2025, 6, 1, tzinfo=UTC)
Q = "Which kid is allergic to eggs?"


def _rec(id: str, content: str) -> MemoryRecord:
    return MemoryRecord(id=id, namespace="n/x", content=content, metadata=MemoryMetadata(type="note"),
                        created_at=NOW, updated_at=NOW)


def _mixed(egg_vec: float) -> list[ScoredMemory]:
    return [
        ScoredMemory(_rec("en_ans", "Mia: The kids' allergy list: Leo is allergic to eggs."), 0.50, 6.0),
        ScoredMemory(_rec("en_other", "Mia: The bus leaves at eight."), 0.20, 1.0),
        # Chinese: the keyword channel cannot see them; zh_egg covers the question in the lexicon.
        ScoredMemory(_rec("zh_egg", "苏可欣: 小宇对鸡蛋过敏,午餐不要给他鸡蛋。"), egg_vec, None),
        ScoredMemory(_rec("zh_other", "苏可欣: 家长群的安静时间改到晚上八点。"), 0.15, None),
    ]


def test_bridge_factor():
    assert scoring.bridge_factor(0.25, 0.5, 1.0) == pytest.approx(0.5)
    assert scoring.bridge_factor(0.25, 0.5, 2.0) == pytest.approx(0.25)
    assert scoring.bridge_factor(0.6, 0.5, 4.0) == 1.0  # at or above the best in the question's script: all of it
    assert scoring.bridge_factor(0.3, 0.0, 4.0) == 1.0  # nothing visible to compare with
    assert scoring.bridge_factor(-0.1, 0.5, 1.0) == 0.0


def test_off_by_default_and_never_evaluated_when_off(monkeypatch: pytest.MonkeyPatch):
    assert ScoringSettings().bridge_relative == 0.0

    def boom(*a: object) -> float:
        raise AssertionError("bridge_factor evaluated with bridge_relative 0")

    monkeypatch.setattr(scoring, "bridge_factor", boom)
    rng = random.Random(35)
    for _ in range(200):
        n = rng.randint(1, 8)
        vecs = [rng.random() for _ in range(n)]
        kws = [rng.random() * (rng.random() < 0.5) for _ in range(n)]
        vis = [rng.choice((0.0, 0.3, 1.0)) for _ in range(n)]
        cov = [rng.choice((0.0, 0.2, 0.5, 1.0)) for _ in range(n)]
        assert scoring.impute_keywords(vecs, kws, vis, cov, 0.3, 3.0, 0.0) == scoring.impute_keywords(
            vecs, kws, vis, cov, 0.3, 3.0)


def test_a_weak_other_script_match_keeps_less_of_the_bonus():
    # zh_egg covers the question; at cosine .2 (best English .5) its bonus is scaled by (.2 / .5) ** p.
    vecs, kws, vis, cov = [0.5, 0.2, 0.2], [0.9, 0.0, 0.0], [1.0, 1.0, 0.0], [None, None, 0.2]
    base = scoring.impute_keywords(vecs, kws, vis, cov, 0.3, 3.0)
    one = scoring.impute_keywords(vecs, kws, vis, cov, 0.3, 3.0, 1.0)
    two = scoring.impute_keywords(vecs, kws, vis, cov, 0.3, 3.0, 2.0)
    assert base[:2] == one[:2] == two[:2]  # memories the keyword channel sees are untouched
    imp = base[2] - 3.0 * 0.2  # the imputed part before the bonus (unsaturated at this coverage)
    assert one[2] == pytest.approx(imp + 3.0 * 0.2 * 0.4) and two[2] == pytest.approx(imp + 3.0 * 0.2 * 0.16)
    # Above the best visible cosine the bonus is whole.
    vecs[2] = 0.6
    assert scoring.impute_keywords(vecs, kws, vis, cov, 0.3, 3.0, 4.0) == scoring.impute_keywords(
        vecs, kws, vis, cov, 0.3, 3.0)


def test_search_reads_the_setting():
    on = ScoringSettings(bridge_relative=2.0)
    weak = {h.record.id: h.breakdown.keyword for h in scoring.score_candidates(_mixed(0.25), NOW, on, Q)}
    shipped = {h.record.id: h.breakdown.keyword for h in scoring.score_candidates(_mixed(0.25), NOW,
                                                                                  ScoringSettings(), Q)}
    assert weak["zh_egg"] < shipped["zh_egg"] and weak["en_ans"] == shipped["en_ans"]
    strong = [(h.record.id, h.breakdown) for h in scoring.score_candidates(_mixed(0.55), NOW, on, Q)]
    assert strong == [(h.record.id, h.breakdown) for h in scoring.score_candidates(_mixed(0.55), NOW,
                                                                                    ScoringSettings(), Q)]
