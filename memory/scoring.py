"""Scoring as pure functions of floats and an explicit ``now``.

    S     = alpha * sim + beta * decay + gamma * boost
    decay = exp(-lambda * age_days)                    age from the record's updated_at
    sim   = w_vec * vector + w_kw * keyword            both in [0, 1], w_vec + w_kw = 1
    vector  = max(0, cosine)
    keyword = bm25 / (bm25 + k) * bm25 / max_bm25      saturating, relative to the best match

The keyword part mixes an absolute saturation (a lone weak match stays weak) with the
per-query maximum (BM25 scales differ across corpora and backends), so ``sim`` stays in
[0, 1] and means the same thing on SQLite and Qdrant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime

from memory.records import MemoryRecord, ScoreBreakdown, ScoredMemory, SearchHit
from memory.settings import ScoringSettings


def decay(age_days: float, lam: float) -> float:
    """exp(-lam * age); future timestamps (clock skew) count as age 0."""
    return math.exp(-lam * max(0.0, age_days))


def age_days(record: MemoryRecord, now: datetime) -> float:
    return (now - record.updated_at).total_seconds() / 86400.0


def boost(record: MemoryRecord, type_boosts: Mapping[str, float], source_boosts: Mapping[str, float]) -> float:
    """Configured boost for the record's type plus its source, clipped to [0, 1]."""
    b = type_boosts.get(record.metadata.type, 0.0) + source_boosts.get(record.metadata.source, 0.0)
    return min(1.0, max(0.0, b))


def keyword_part(bm25: float | None, max_bm25: float, k: float) -> float:
    if not bm25 or bm25 <= 0 or max_bm25 <= 0:
        return 0.0
    return (bm25 / (bm25 + k)) * (bm25 / max_bm25)


def similarity(vector: float, keyword: float, vector_weight: float, vector_floor: float = 0.0) -> float:
    """Weighted fusion; keywords can add to a strong vector match but never bury it.

    ``vector_floor`` * vector is a lower bound: a memory in another language than the query
    (no shared terms) is not outranked by one that merely shares a generic word.
    """
    return max(vector_weight * vector + (1.0 - vector_weight) * keyword, vector_floor * vector)


def score_candidates(
    candidates: Sequence[ScoredMemory], now: datetime, cfg: ScoringSettings
) -> list[SearchHit]:
    """Turn raw backend candidates into ranked hits with an explained score (best first)."""
    max_bm25 = max((c.keyword_score or 0.0 for c in candidates), default=0.0)
    has_vector = any(c.vector_score is not None for c in candidates)
    has_keyword = any(c.keyword_score is not None for c in candidates)
    # With only one channel available, it carries the whole similarity.
    wv = cfg.vector_weight if (has_vector and has_keyword) else (1.0 if has_vector else 0.0)
    hits = []
    for c in candidates:
        vec = max(0.0, c.vector_score or 0.0)
        kw = keyword_part(c.keyword_score, max_bm25, cfg.bm25_k)
        sim = similarity(vec, kw, wv, cfg.vector_floor)
        d = decay(age_days(c.record, now), cfg.decay_lambda)
        b = boost(c.record, cfg.type_boosts, cfg.source_boosts)
        s = cfg.alpha * sim + cfg.beta * d + cfg.gamma * b
        hits.append(SearchHit(c.record, ScoreBreakdown(sim=sim, vector=vec, keyword=kw, decay=d, boost=b, score=s)))
    # Ties broken by recency, then id, so the order is deterministic across backends.
    hits.sort(key=lambda h: (-h.breakdown.score, -h.record.updated_at.timestamp(), h.record.id))
    return hits


def select(hits: Sequence[SearchHit], top_k: int, min_score: float, min_sim: float = 0.0) -> list[SearchHit]:
    """The best ``top_k`` hits whose score and relevance (sim) clear the thresholds.

    ``min_sim`` exists because decay and boost alone give an unrelated memory a positive
    score: without it, a search on an empty topic would return the newest profile entries.
    """
    return [h for h in hits if h.breakdown.score >= min_score and h.breakdown.sim >= min_sim][:top_k]
