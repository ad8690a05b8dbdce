""":func:`memory.scoring.score_candidates` as it was written before stop 34 wrote its per-candidate calls out
(``similarity``, ``decay``, ``age_days``, ``boost``, ``keyword_part``, ``keyword_visibility`` one call each, the hits
sorted by a key function), and :func:`memory.cedict.bridge_coverage`'s weights as they were summed then (a generator
per concept and per row). Kept as the specification the fast code must reproduce bit for bit
(``tests/unit/test_scoring_identical.py``); not imported by the library."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from memory import cedict

from memory.records import ScoreBreakdown, ScoredMemory, SearchHit
from memory.scoring import (
    age_days, boost, bridge_coverage, decay, han_share, impute_keywords, keyword_part, keyword_visibility,
    mixed_script_fusion, similarity,
)
from memory.settings import ScoringSettings


def score_candidates(candidates: Sequence[ScoredMemory], now: datetime, cfg: ScoringSettings,
                     query: str | None = None) -> list[SearchHit]:
    max_bm25 = max((c.keyword_score or 0.0 for c in candidates), default=0.0)
    has_vector = any(c.vector_score is not None for c in candidates)
    has_keyword = any(c.keyword_score is not None for c in candidates)
    wv = cfg.vector_weight if (has_vector and has_keyword) else (1.0 if has_vector else 0.0)
    vecs = [max(0.0, c.vector_score or 0.0) for c in candidates]
    kws = [keyword_part(c.keyword_score, max_bm25, cfg.bm25_k) for c in candidates]
    cap: float | None = None
    if query is not None and cfg.language_fusion and has_vector and has_keyword and 0.0 < wv < 1.0:
        qh = han_share(query)
        vis = [keyword_visibility(qh, han_share(c.record.content)) for c in candidates]
        cov = None
        if (cfg.bridge_weight or cfg.bridge_bonus) and min(vis) < 0.5:
            cov = bridge_coverage(query, qh, [c.record.content for c in candidates])
        kws = impute_keywords(vecs, kws, vis, cov, cfg.bridge_weight, cfg.bridge_bonus)
        wv, cap = mixed_script_fusion(wv, vis, cfg.vector_shift, cfg.keyword_cap)
    hits = []
    for c, vec, kw in zip(candidates, vecs, kws, strict=True):
        sim = similarity(vec, kw, wv, cfg.vector_floor)
        if cap is not None:
            sim = min(sim, vec + cap)
        d = decay(age_days(c.record, now), cfg.decay_lambda)
        b = boost(c.record, cfg.type_boosts, cfg.source_boosts)
        s = cfg.alpha * sim + cfg.beta * d + cfg.gamma * b
        hits.append(SearchHit(c.record, ScoreBreakdown(sim=sim, vector=vec, keyword=kw, decay=d, boost=b, score=s)))
    hits.sort(key=lambda h: (-h.breakdown.score, -h.record.updated_at.timestamp(), h.record.id))
    return hits


def cedict_bridge_coverage(query: str, to_han: bool, texts: Sequence[str]) -> list[float] | None:
    concepts = cedict._query_concepts(query, to_han)
    if not concepts or not texts:
        return None
    none = [False] * len(concepts)
    if to_han:
        hits = []
        for text in texts:
            if text.isascii():
                hits.append(none)
                continue
            gl = cedict._han_glosses(text)
            hits.append([t in gl or any(h in text for h in heads) for t, heads in concepts])
    else:
        import re

        letter = re.compile(cedict._NON_CJK_LETTER).search
        term_sets = [cedict._terms(text) if letter(text) else cedict._NO_HITS for text in texts]
        hits = [[not terms.isdisjoint(gl) for _, gl in concepts] if terms else none for terms in term_sets]
    n = len(texts)
    weights = []
    for j, (_, trans) in enumerate(concepts):
        df = sum(row[j] for row in hits)
        weights.append(max(0.0, math.log((n + 1) / (df + 0.5))) / math.log(2 + len(trans)))
    total = sum(weights)
    if total <= 0:
        return None
    return [sum(w for w, h in zip(weights, row, strict=True) if h) / total for row in hits]
