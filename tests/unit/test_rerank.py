"""memory.rerank: the learned reranker's features, its JSON tree evaluator and how search applies it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest

from memory.errors import InvalidConfig
from memory.query import plan_query
from memory.records import MemoryMetadata, MemoryRecord, ScoreBreakdown, SearchHit
from memory.rerank import _SUP, FEATURES, MODEL_FILE, RerankModel, apply, candidate_features

NOW = datetime(2023, 10, 22, 12, 0, tzinfo=UTC)
DAY1 = datetime(2023, 5, 1, tzinfo=UTC)
DAY2 = datetime(2023, 6, 1, tzinfo=UTC)


def hit(rid: str, content: str, score: float, *, vector: float, created: datetime = DAY1,
        context: str | None = None, speaker: str | None = None) -> SearchHit:
    extra: dict[str, str] = {}
    if context:
        extra["context"] = context
    if speaker:
        extra["speaker"] = speaker
    rec = MemoryRecord(id=rid, namespace=("eval", "c"), content=content,
                       metadata=MemoryMetadata(type="conversation", extra=extra), created_at=created, updated_at=created)
    return SearchHit(rec, ScoreBreakdown(sim=score, vector=vector, keyword=0.0, decay=1.0, boost=0.0, score=score))


def col(x: np.ndarray, name: str) -> np.ndarray:
    return x[:, FEATURES.index(name)]


def vector_group_order(hits: list[SearchHit], plan, vectors: np.ndarray, feature: str, width: int) -> list[str]:
    """For a feature group that reads stored vectors: a model of the shipped width (``_SUP``) never fetches them, and a
    model of ``width`` features with one split on ``feature`` (above .5 first) fetches them once; its order (ids)."""
    calls: list[int] = []

    def fetch(head):
        calls.append(len(head))
        return vectors
    apply(hits, plan, {}, RerankModel(FEATURES[:_SUP], 0.0, (), 50, {}), vectors=fetch)
    assert calls == []
    tree = np.array([[FEATURES.index(feature), 0.5, 1, 2, 0.0], [-1, 0, 0, 0, 1.0], [-1, 0, 0, 0, -1.0]])
    out = apply(hits, plan, {}, RerankModel(FEATURES[:width], 0.0, (tree,), 50, {}), vectors=fetch)
    assert calls == [len(hits)]
    return [h.record.id for h in out]


def one_split_model(feature: str, threshold: float, low: float, high: float, depth: int = 50) -> RerankModel:
    """A one-tree model: ``feature <= threshold`` scores ``low``, else ``high``."""
    tree = np.array([[FEATURES.index(feature), threshold, 1, 2, 0.0], [-1, 0, 0, 0, low], [-1, 0, 0, 0, high]])
    return RerankModel(FEATURES, 0.0, (tree,), depth, {})


def test_features_read_coverage_speakers_and_neighbour_turns():
    q = "What did Caroline paint for the shelter?"
    hits = [
        hit("a", "Melanie: I went camping with the kids.", 0.9, vector=0.5, speaker="Melanie"),
        hit("b", "Caroline: Yes, a sunset painting for the shelter!", 0.7, vector=0.6, speaker="Caroline",
            context="Melanie: I went camping with the kids."),
        hit("c", "Caroline: It was lovely.", 0.2, vector=0.2, created=DAY2, speaker="Caroline"),
    ]
    x = candidate_features(hits, plan_query(q, NOW), {"a": 2.0, "b": 4.0})
    assert x.shape == (3, len(FEATURES))
    assert list(col(x, "rank")) == [0, 1, 2]
    assert list(col(x, "speaker_named")) == [0.0, 1.0, 1.0]  # the question names Caroline only
    assert list(col(x, "bm25_rank")) == [1, 0, 3]  # no keyword match: ranked after every match
    assert col(x, "bm25_rel")[1] == 1.0 and col(x, "bm25_rel")[0] == 0.5
    assert col(x, "cover_turn")[1] > col(x, "cover_turn")[0] == 0.0
    # b's context is a's text: a is the turn before b (same session), c is alone in its session.
    assert col(x, "prev_gap")[1] == pytest.approx(0.0)  # its previous turn is the best hit
    assert col(x, "next_gap")[0] == pytest.approx(0.2)  # its next turn scored .2 below the best
    assert col(x, "prev_gap")[2] == col(x, "next_gap")[2] == 2.0
    assert list(col(x, "session_n")) == [2, 2, 1]
    assert list(col(x, "newest")) == [0.0, 0.0, 1.0]


def test_apply_reorders_the_head_keeps_scores_monotone_and_leaves_the_tail():
    hits = [hit(str(i), f"memory number {i}", 1.0 - i / 10, vector=i / 10) for i in range(6)]
    model = one_split_model("vector", 0.25, 0.0, 1.0, depth=4)  # prefers vector > .25 among the best 4
    out = apply(hits, plan_query("anything", NOW), {}, model)
    assert [h.record.id for h in out] == ["3", "0", "1", "2", "4", "5"]  # ties keep their order
    scores = [h.breakdown.score for h in out]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    assert out[4:] == hits[4:]
    for h in out:  # the documented sum still holds: the change is in the query part
        b = h.breakdown
        assert b.score == pytest.approx(b.sim + b.query)


def test_evaluator_walks_deeper_trees_and_sums_them():
    # Two trees: (vector <= .5 ? (rank <= 0 ? 1 : 2) : 3) and a constant leaf .5.
    t1 = np.array([[FEATURES.index("vector"), 0.5, 1, 2, 0], [FEATURES.index("rank"), 0.0, 3, 4, 0],
                   [-1, 0, 0, 0, 3.0], [-1, 0, 0, 0, 1.0], [-1, 0, 0, 0, 2.0]])
    t2 = np.array([[-1, 0, 0, 0, 0.5]])
    m = RerankModel(FEATURES, -1.0, (t1, t2), 50, {})
    x = np.zeros((3, len(FEATURES)))
    x[:, FEATURES.index("vector")] = [0.1, 0.1, 0.9]
    x[:, FEATURES.index("rank")] = [0, 1, 2]
    assert list(m.log_odds(x)) == [0.5, 1.5, 2.5]


def test_model_file_errors_say_what_to_do(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidConfig, match="MEMORY_SCORING__RERANK=false"):
        RerankModel.load(bad)
    bad.write_text(json.dumps({"features": ["nope"], "baseline": 0, "trees": [], "depth": 50}), encoding="utf-8")
    with pytest.raises(InvalidConfig, match="does not match this code"):
        RerankModel.load(bad)
    m = one_split_model("vector", 0.5, 0, 1)
    bad.write_text(json.dumps({**m.to_json(), "depth": 1}), encoding="utf-8")
    with pytest.raises(InvalidConfig, match="depth"):
        RerankModel.load(bad)
    good = tmp_path / "ok.json"
    good.write_text(json.dumps(m.to_json()), encoding="utf-8")
    assert RerankModel.load(good).log_odds(np.ones((1, len(FEATURES))))[0] == 1.0


@pytest.mark.skipif(not MODEL_FILE.exists(), reason="no reranker model shipped")
def test_shipped_model_loads_and_matches_the_features():
    m = RerankModel.load()
    assert m.features == FEATURES[:len(m.features)] and m.trees and m.depth >= 10


TEXTS = ["Caroline: I painted a sunset for the animal shelter last week.",
         "Melanie: We went camping near the lake with the kids.",
         "Caroline: The shelter needed something bright for the hallway.",
         "Melanie: I signed up for a pottery class on Tuesdays.",
         "Caroline: What did you think of the painting?",
         "Melanie: 我最近在学做陶艺。"]
QUESTION = "What did Caroline paint for the shelter?"


def _search_both(service) -> tuple[list[SearchHit], list[SearchHit]]:
    from memory.settings import ScoringSettings

    for i, t in enumerate(TEXTS):
        service.write(t, ("eval", "c"), {"type": "conversation", "extra": {"speaker": t.split(":")[0]}},
                      now=datetime(2023, 5, 1 + i, tzinfo=UTC))
    assert service.settings.scoring.rerank  # on by default
    on = service.search(QUESTION, ("eval",), top_k=10, min_score=float("-inf"), min_sim=0.0, now=NOW)
    base_cfg = service.settings.scoring
    service.settings = service.settings.model_copy(update={"scoring": ScoringSettings(rerank=False)})
    try:
        off = service.search(QUESTION, ("eval",), top_k=10, min_score=float("-inf"), min_sim=0.0, now=NOW)
    finally:
        service.settings = service.settings.model_copy(update={"scoring": base_cfg})
    return off, on


def test_search_applies_the_model_only_when_the_setting_is_on(service, monkeypatch):
    import memory.rerank as rr

    # A model that sends the best-ranked hit to the end of the head: the setting must reach it.
    monkeypatch.setattr(rr, "default_model", lambda: one_split_model("rank", 0.5, 0.0, 1.0))
    off, on = _search_both(service)
    assert len(off) == len(TEXTS)
    assert [h.record.id for h in on] == [h.record.id for h in off[1:]] + [off[0].record.id]
    scores = [h.breakdown.score for h in on]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.skipif(not MODEL_FILE.exists(), reason="no reranker model shipped")
def test_search_with_the_shipped_model_permutes_the_head(service):
    off, on = _search_both(service)
    assert sorted(h.record.id for h in on) == sorted(h.record.id for h in off)
    scores = [h.breakdown.score for h in on]
    assert scores == sorted(scores, reverse=True)
    assert sorted(scores) == pytest.approx(sorted(h.breakdown.score for h in off), abs=1e-6)
