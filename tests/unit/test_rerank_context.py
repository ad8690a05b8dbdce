"""memory.rerank_context: the reranker's listwise, multi-hop and Chinese-bigram features."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memory.query import plan_query
from memory.records import MemoryMetadata, MemoryRecord, ScoreBreakdown, SearchHit
from memory.rerank import FEATURES, candidate_features

NOW = datetime(2023, 10, 22, 12, 0, tzinfo=UTC)
DAY1 = datetime(2023, 5, 1, tzinfo=UTC)
DAY2 = datetime(2023, 6, 1, tzinfo=UTC)


def hit(rid: str, content: str, score: float, *, vector: float, created: datetime = DAY1,
        context: str | None = None, speaker: str | None = None, query: float = 0.0) -> SearchHit:
    extra: dict[str, str] = {}
    if context:
        extra["context"] = context
    if speaker:
        extra["speaker"] = speaker
    rec = MemoryRecord(id=rid, namespace=("eval", "c"), content=content, created_at=created, updated_at=created,
                       metadata=MemoryMetadata(type="conversation", extra=extra))
    return SearchHit(rec, ScoreBreakdown(sim=score - query, vector=vector, keyword=0.0, decay=1.0, boost=0.0,
                                         score=score, query=query))


def col(x: np.ndarray, name: str) -> np.ndarray:
    return x[:, FEATURES.index(name)]


def test_session_and_neighbour_features_read_the_other_candidates():
    a = "Melanie: We drove to the lake on Friday."
    b = "Caroline: Did you swim?"
    hits = [
        hit("a", a, 0.9, vector=0.3, speaker="Melanie"),
        hit("b", b, 0.5, vector=0.8, speaker="Caroline", context=a),
        hit("c", "Melanie: The kids built a sandcastle.", 0.3, vector=0.4, speaker="Melanie", context=f"{a}\n{b}"),
        hit("d", "Caroline: My mentor called today.", 0.4, vector=0.2, created=DAY2, speaker="Caroline"),
    ]
    x = candidate_features(hits, plan_query("Where did Melanie go on Friday?", NOW), {"a": 3.0, "c": 1.5})
    # a, b, c share a session (one timestamp); its best is a (.9), its mean .5667.
    assert list(col(x, "sess_own_gap")) == pytest.approx([0.0, 0.4, 0.6, 0.0])
    assert col(x, "sess_mean_gap")[0] == pytest.approx(0.9 - 1.7 / 3)
    # Neighbours within two turns, through the retrieval context: c's are a and b (best vector .8).
    assert col(x, "nb_vector_gap")[2] == pytest.approx(0.0)
    assert col(x, "nb_vector_gap")[0] == pytest.approx(0.0)  # a's neighbours: b (.8) and c
    assert col(x, "nb_vector_gap")[3] == 2.0  # d has no neighbour among the candidates
    assert list(col(x, "nb_bm25_rel")) == pytest.approx([0.5, 1.0, 1.0, 0.0])


def test_ranks_among_the_whole_pool_not_only_the_head():
    pool = [hit(str(i), f"memory {i}", 1.0 - i / 10, vector=0.1 * i) for i in range(6)]
    plan = plan_query("anything", NOW)
    x = candidate_features(pool[:3], plan, {"5": 2.0, "1": 1.0}, pool)
    # Vectors rise with the position: in the whole pool of six, the head's ranks are 5, 4, 3.
    assert list(col(x, "vector_rank_all")) == [5, 4, 3]
    assert list(col(x, "vector_rank")) == [2, 1, 0]  # within the head
    assert list(col(x, "bm25_rank_all")) == [6, 1, 6]  # "5" outside the head ranks first
    assert list(col(x, "n_all")) == [6, 6, 6]
    alone = candidate_features(pool[:3], plan, {"5": 2.0, "1": 1.0})
    assert list(col(alone, "vector_rank_all")) == [2, 1, 0]


def test_fused_rank_ignores_the_question_rules():
    hits = [hit("a", "memory a", 0.9, vector=0.5, query=0.4), hit("b", "memory b", 0.8, vector=0.5)]
    x = candidate_features(hits, plan_query("anything", NOW), {})
    assert list(col(x, "fused_rank_all")) == [1, 0]  # a led only through its .4 query bonus


def test_multi_hop_overlap_with_the_top_hits_minus_the_question():
    q = "What did Caroline buy after the adoption meeting?"
    hits = [
        hit("a", "Caroline: The adoption agency in Boston said yes!", 0.9, vector=0.6, speaker="Caroline"),
        hit("b", "Caroline: I met Rachel from the agency today.", 0.8, vector=0.5, speaker="Caroline"),
        hit("c", "Melanie: Congrats on the meeting.", 0.7, vector=0.5, speaker="Melanie"),
        hit("d", "Caroline: I bought a crib in Boston after talking to the agency.", 0.3, vector=0.3,
            speaker="Caroline"),
        hit("e", "Melanie: The weather was awful.", 0.2, vector=0.1, speaker="Melanie"),
    ]
    x = candidate_features(hits, plan_query(q, NOW), {})
    # d shares "agency" and "boston" with the top three; "adoption" is the question's own term and
    # the speakers' names never count.
    assert col(x, "hop_terms")[3] == 2
    assert col(x, "hop_names")[3] == 1  # Boston
    assert col(x, "hop_terms")[4] == 0 and col(x, "hop_share")[4] == 0.0
    # A top hit is compared with the other two only: a shares "agency" with b.
    assert col(x, "hop_terms")[0] == 1


def test_han_bigram_coverage_of_turn_and_context():
    q = "我奶奶住在哪个城市？"
    hits = [
        hit("a", "Fang: 奶奶上个月搬到杭州了。", 0.9, vector=0.7, context="Li: 你奶奶还住在老家吗？"),
        hit("b", "Fang: 我住在城市边上。", 0.8, vector=0.6),
    ]
    x = candidate_features(hits, plan_query(q, NOW), {})
    assert col(x, "bigram_turn")[0] > 0  # 奶奶
    assert col(x, "bigram_context")[0] > col(x, "bigram_turn")[0]  # 住在 is in the context only
    assert col(x, "bigram_turn")[1] > 0  # 住在, 城市
    en = candidate_features(hits, plan_query("Where does my grandmother live?", NOW), {})
    assert list(col(en, "bigram_turn")) == [-1.0, -1.0]  # no Han bigram in the question


def test_a_model_reading_fewer_features_skips_the_context_ones():
    hits = [hit(str(i), f"Caroline: memory {i}", 1.0 - i / 10, vector=0.1 * i) for i in range(4)]
    plan = plan_query("What did Caroline say?", NOW)
    full = candidate_features(hits, plan, {"1": 1.0})
    own = len(FEATURES) - FEATURES.index("sess_own_gap")
    short = candidate_features(hits, plan, {"1": 1.0}, width=len(FEATURES) - own)
    assert full.shape == (4, len(FEATURES)) and short.shape == (4, len(FEATURES) - own)
    assert np.array_equal(short, full[:, :short.shape[1]])
