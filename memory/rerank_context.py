"""Listwise, multi-hop and Chinese-bigram features of the learned reranker (:mod:`memory.rerank`).

:func:`memory.rerank.candidate_features` reads each candidate mostly on its own (its scores, gaps to
the best, coverage of the question). The features here read it against the other candidates:

* **listwise context**: the candidate against its own session among the candidates (the gap to the
  session's best and its mean), the best vector / keyword evidence of the turns just around it
  (found through the retrieval context, as the single-step gaps are), and its fused / vector /
  keyword rank among *all* candidates, not only the re-ordered head;
* **multi-hop**: how many of the top three hits' content terms and capitalised names (minus the
  question's own terms and the speakers' names) the candidate shares; evidence for "what did X do
  after Y" questions often names what the first hits name, not what the question names;
* **Chinese**: the share of the question's Han bigrams found in the turn and in the turn plus its
  context (unigram coverage rewards any turn with common characters), and how far the dense and
  keyword channels disagree on the candidate.

Everything comes from what search already holds (texts, scores, timestamps); texts are read once
per process through caches shared with :mod:`memory.rerank` (:func:`terms`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from memory.records import SearchHit
from memory.text import TEXT_CACHE, keyword_term_set

# In groups, so a model can read a prefix (memctl.tune_rerank.WIDTHS): listwise context, then
# Chinese bigrams and channel disagreement, then session / neighbour question coverage, then multi-hop.
CONTEXT_FEATURES: tuple[str, ...] = (
    "sess_own_gap", "sess_mean_gap", "nb_vector_gap", "nb_bm25_rel", "fused_rank_all", "vector_rank_all",
    "bm25_rank_all", "n_all", "bigram_turn", "bigram_context", "dv_rank_diff", "dv_rel_diff", "sess_cover",
    "nb_cover", "hop_terms", "hop_share", "hop_names",
)
# A neighbour turn that is not among the candidates: farther than any real score gap (also
# memory.rerank's single-step gaps).
ABSENT = 2.0
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}")
_SPEAKER = re.compile(r"^[^:：\s]{1,40}[:：]\s*")


@lru_cache(maxsize=TEXT_CACHE)
def terms(text: str) -> frozenset[str]:
    """A text's keyword terms, once per text for both feature modules (candidates recur across the
    searches of one user)."""
    return keyword_term_set(text)


@lru_cache(maxsize=TEXT_CACHE)
def _names(text: str) -> frozenset[str]:
    """Capitalised words that do not start a sentence (a cheap stand-in for named entities)."""
    m = _SPEAKER.match(text)
    body = text[m.end():] if m else text
    return frozenset(w.lower() for w in _NAME.findall(body))


@lru_cache(maxsize=TEXT_CACHE)
def _bigrams(text: str) -> frozenset[str]:
    """Two-character Han terms (keyword_terms emits each CJK run's bigrams and unigrams)."""
    if text.isascii():
        return frozenset()
    return frozenset(t for t in terms(text) if len(t) == 2 and all("\u3400" <= c <= "\u9fff" for c in t))


def _count_above(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each of ``at``: how many of ``values`` are strictly larger (its rank, 0 for the largest;
    ties share the better rank, as :func:`memory.rerank._ranks`)."""
    asc = np.sort(values)
    return len(values) - np.searchsorted(asc, at, side="right")


def context_features(head: Sequence[SearchHit], pool: Sequence[SearchHit], query: str,
                     raw: Sequence[float], pool_raw: Sequence[float], contexts: Sequence[str],
                     stamps: Sequence[float], neighbours: Sequence[Sequence[int]]) -> list[tuple[float, ...]]:
    """One row of :data:`CONTEXT_FEATURES` per head hit.

    ``pool`` is every candidate in ranked order (``head`` its first ``len(head)``), ``raw`` /
    ``pool_raw`` their raw keyword scores, ``contexts`` / ``stamps`` the head's retrieval contexts and
    creation times, ``neighbours[i]`` the head indexes of the turns within two of hit ``i``.
    """
    n, m = len(head), len(pool)
    scores = [h.breakdown.score for h in head]
    vecs = [h.breakdown.vector for h in head]
    best_v, best_k = max(vecs), max(raw) or 1.0
    pb = [h.breakdown for h in pool]
    fused = np.fromiter((b.score - b.query for b in pb), float, m)
    vec_pool = np.fromiter((b.vector for b in pb), float, m)
    kw_pool = np.asarray(pool_raw, dtype=float)
    fused_all = _count_above(fused, fused[:n]).tolist()
    vec_all = _count_above(vec_pool, vec_pool[:n]).tolist()
    kw_all = np.where(kw_pool[:n] > 0, _count_above(kw_pool, kw_pool[:n]), m).tolist()
    sessions: dict[float, list[float]] = {}
    for st, s in zip(stamps, scores, strict=True):
        sessions.setdefault(st, []).append(s)
    s_best = {st: max(v) for st, v in sessions.items()}
    s_mean = {st: sum(v) / len(v) for st, v in sessions.items()}
    qt = terms(query)
    nq = len(qt) or 1
    # Question terms the candidate turns of one session cover together (a conversation about the
    # thing asked, not one turn that happens to share a word).
    s_terms: dict[float, set[str]] = {}
    for h, st in zip(head, stamps, strict=True):
        s_terms.setdefault(st, set()).update(qt & terms(h.record.content))
    s_cover = {st: len(v) / nq for st, v in s_terms.items()}
    qb = _bigrams(query)
    speakers = frozenset(w.lower() for h in head if isinstance(s := h.record.metadata.extra.get("speaker"), str)
                         for w in s.split())
    top_t = [terms(h.record.content) - qt - speakers for h in head[:3]]
    top_n = [_names(h.record.content) - qt - speakers for h in head[:3]]
    # The other top hits' terms: a top hit is not compared with itself.
    hop_t = [frozenset().union(*(t for j, t in enumerate(top_t) if j != i)) for i in range(min(n, 3))]
    hop_n = [frozenset().union(*(t for j, t in enumerate(top_n) if j != i)) for i in range(min(n, 3))]
    all_t, all_n = frozenset().union(*top_t), frozenset().union(*top_n)
    rows = []
    for i, h in enumerate(head):
        text = h.record.content
        ht, hn = (hop_t[i], hop_n[i]) if i < 3 else (all_t, all_n)
        shared = len(terms(text) & ht)
        nb = neighbours[i]
        nb_v = best_v - max(vecs[j] for j in nb) if nb else ABSENT
        nb_k = max(raw[j] for j in nb) / best_k if nb else 0.0
        own = qt & terms(text)
        nb_cover = len(own.union(*(qt & terms(head[j].record.content) for j in nb))) / nq if nb else len(own) / nq
        if qb:
            bt = _bigrams(text)
            b_turn = len(qb & bt) / len(qb)
            b_ctx = len(qb & (bt | _bigrams(contexts[i]))) / len(qb) if contexts[i] else b_turn
        else:
            b_turn = b_ctx = -1.0
        kr = kw_all[i]
        rows.append((
            s_best[stamps[i]] - scores[i], scores[i] - s_mean[stamps[i]], nb_v, nb_k, fused_all[i], vec_all[i], kr, m,
            b_turn, b_ctx, (vec_all[i] - kr) / m, h.breakdown.vector / (best_v or 1.0) - raw[i] / best_k,
            s_cover[stamps[i]], nb_cover, shared, shared / len(ht) if ht else 0.0, len(_names(text) & hn),
        ))
    return rows
