"""The lexicon bridge's bonus scaled by the memory's vector score against the best in the question's script
(``ScoringSettings.bridge_relative``, memory.scoring.bridge_factor; stop 35, off by default)."""

from __future__ import annotations

import random

import pytest

from memory import scoring
from memory.records import ScoredMemory
from memory.settings import ScoringSettings
from tests.unit.test_cedict_bridge import NOW
from tests.unit.test_cedict_bridge import _mixed as _bridge_case

Q = "Which kid is allergic to eggs?"


def _mixed(egg_vec: float) -> list[ScoredMemory]:
    # The bridge tests' store (zh_egg covers the question in the lexicon) with the unrelated Chinese memory weak.
    return _bridge_case(egg_vec, other_vec=0.15)


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
