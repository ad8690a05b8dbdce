"""A learned reranker over the best fused candidates of a search (``scoring.rerank``).

The fused score (:mod:`memory.scoring`) and the question rules (:mod:`memory.query`) are linear: each
channel and each bonus adds a fitted constant, whatever the others say. A gradient-boosted tree
ensemble over the same signals can combine them non-linearly ("a keyword match counts for more
when the vector channel also ranks the memory high", "the speaker bonus matters only when the
question names one speaker"). It re-orders the ``depth`` best hits after the question rules and
leaves every later hit where it was.

Features per (question, candidate) come only from what search already computed, plus query-term
coverage of the turn and of its retrieval context (:data:`FEATURES`; a few microseconds a
candidate). The later ones read a candidate against the others: whether a newer candidate states
the same slot by shared terms (:mod:`memory.rerank_supersede`), its cosine within its own script and against the
question's (:data:`SCRIPT_FEATURES`), its change wording and same slot by stored vectors and values, then what a
dense-channel switch did to its vector score (:data:`VECTOR_FEATURES`), then its session, its neighbour turns, its rank among every
candidate, the top hits' terms, the question's Han bigrams (:mod:`memory.rerank_context`);
a model reads a prefix of :data:`FEATURES`, and features past it are not computed, so a model
fitted without them costs nothing more. The model is plain JSON
(``rerank_model.json``, exported from scikit-learn's ``HistGradientBoostingClassifier`` by
``python -m memctl.tune_retrieval --stage rerank``), evaluated here with numpy, so search never
imports scikit-learn.

Scores stay monotone with the new order: the re-ordered hits take the head's own scores, highest
first, and the difference goes into ``breakdown.query`` (``score = alpha*sim + beta*decay +
gamma*boost + query`` still holds), so callers that pool hits of several namespaces by score
(:mod:`memory.store_reads`) and the ``min_score`` threshold see the same scale as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import InvalidConfig
from memory.query import QueryPlan, asks, named_speakers, states_time
from memory.records import ScoreBreakdown, SearchHit
from memory.rerank_context import ABSENT, CONTEXT_FEATURES, context_features, terms
from memory.rerank_supersede import (
    CHANGE_FEATURES, SLOT_FEATURES, SUPERSEDE_FEATURES, change_matrix, slot_matrix, supersede_matrix,
)
from memory.scoring import bridge_coverage, han_share, keyword_visibility
from memory.text import TEXT_CACHE

MODEL_FILE = Path(__file__).with_name("rerank_model.json")

# The order matters: the model file lists the names it was fitted on, and loading checks them.
FEATURES: tuple[str, ...] = (
    "score", "score_gap", "rank", "sim", "sim_rel", "vector", "vector_gap", "vector_rank",
    "keyword", "bm25", "bm25_rel", "bm25_rank", "query_bonus", "decay", "recency", "newest",
    "q_han", "m_han", "visibility", "cover_turn", "cover_context", "cover_gain", "speaker_named",
    "named_any", "in_window", "has_window", "wants_time", "states_time", "wants_current", "asks_past",
    "asks", "log_chars", "n_candidates", "q_terms", "session_n", "session_gap", "prev_gap", "next_gap",
) + SUPERSEDE_FEATURES
# Each candidate's vector read within its own script (script_matrix, stop 34, issue 16 "hybrid >= dense in R@5"): on
# zh_en_10 ... zh_en_16, where dense-only had a listed turn in its top 5 and the default none (34 questions), 48 of the
# 170 turns in the default's top 5 were turns in the other script than the question while every listed turn was in
# its script (38 of them in en-en / zh-zh), lifted by an imputed keyword part at a cross-language cosine the
# dense channel ranks lower; 13 more were same-script turns above a cross-language listed one. Cross- and same-language
# cosines are on different scales, and the 49 read only the cosine over every candidate: these read it within the
# candidate's script and against the best candidate in the question's script. Right after the superseded group, so
# the 49-feature prefix is unchanged (the change group follows them).
# bridge_cov, last (a model may read the first four without it): the question's bilingual-lexicon coverage in the
# candidate (memory.cedict, as the fusion's bridge reads it), which the fusion adds times bridge_bonus (3) to an
# other-script turn's imputed keyword part, so that part saturates at 1 for any coverage >= 1/3 and the keyword
# feature no longer tells a turn that covers a third of the question from one that covers all of it.
SCRIPT_FEATURES: tuple[str, ...] = ("script_vec_rank", "script_vec_gap", "qscript_vec_gap", "qscript_share",
                                    "bridge_cov")
SCRIPT_NO_BRIDGE = 4  # the group without bridge_cov (no lexicon lookup)
FEATURES += SCRIPT_FEATURES
# The update's own wording (memory.rerank_supersede.change_matrix, stop 33): after the superseded group (and the
# script group, stop 34), so the 49-feature prefix is unchanged (the same-slot group follows them).
FEATURES += CHANGE_FEATURES
# The cross-language same-slot reading over the candidates' stored vectors (memory.rerank_supersede.slot_matrix,
# stop 32): right after the superseded group, so the 49-feature prefix is unchanged and a model fitted without
# them fetches no vector.
FEATURES += SLOT_FEATURES
# What the dense-channel switches did (scoring.query_adapter / strip_speakers, issue 16, stop 31): the cosine of the
# question's own, unadapted vector, its gap and rank, how far the switch moved the candidate's vector rank, and
# whether a switch changed this question's vector. Without them a reranker sees only the switched cosine and cannot
# tell a candidate the adapted vector alone found from one both vectors agree on. Right after the shipped model's 49
# (the own and superseded groups), so a model can read those and these as a prefix without the context group; a
# model fitted on fewer (the shipped one) never computes them.
VECTOR_FEATURES: tuple[str, ...] = ("vector_raw", "vector_raw_gap", "vector_raw_rank", "vector_rank_shift", "adapted")
FEATURES += VECTOR_FEATURES + CONTEXT_FEATURES
# The features computed here; then memory.rerank_supersede's superseded group, the script group (here), then
# memory.rerank_supersede's change and same-slot groups; then the switch group; then memory.rerank_context's.
_OWN = (len(FEATURES) - len(CONTEXT_FEATURES) - len(VECTOR_FEATURES) - len(SLOT_FEATURES) - len(CHANGE_FEATURES)
        - len(SCRIPT_FEATURES) - len(SUPERSEDE_FEATURES))
_SUP = _OWN + len(SUPERSEDE_FEATURES)
_SCR = _SUP + len(SCRIPT_FEATURES)
_CHG = _SCR + len(CHANGE_FEATURES)
_SLOT = _CHG + len(SLOT_FEATURES)
_VEC = _SLOT + len(VECTOR_FEATURES)
# The widths at which a group ends: a model reading a prefix gets every group up to the first bound at or past it.
_BOUNDS = (_OWN, _SUP, _SUP + SCRIPT_NO_BRIDGE, _SCR, _CHG, _SLOT, _VEC, len(FEATURES))


@lru_cache(maxsize=TEXT_CACHE)
def _content(text: str) -> tuple[float, frozenset[str], float, float, float]:
    """What the features read from a memory's own text, once per text (candidates recur across the
    searches of one user): Han share, keyword terms, states a time, share asked, log length."""
    return han_share(text), terms(text), float(states_time(text)), asks(text), math.log1p(len(text))


def _ranks(values: np.ndarray) -> np.ndarray:
    """0 for the largest value; ties share the better rank: how many values are strictly larger
    (as a stable sort by -value that gives a tie the position of its first member)."""
    return len(values) - np.searchsorted(np.sort(values), values, side="right")


def candidate_features(hits: Sequence[SearchHit], plan: QueryPlan,
                       bm25: Mapping[str, float | None], pool: Sequence[SearchHit] | None = None,
                       width: int | None = None, raw_cos: Mapping[str, float] | None = None,
                       vectors: np.ndarray | None = None) -> np.ndarray:
    """One row of :data:`FEATURES` per hit (hits in the order the fused score and rules gave).

    ``bm25`` maps a record id to the backend's raw keyword score (None or absent: no keyword match);
    ``pool`` is every candidate in that order (``hits`` its head; default: ``hits`` alone). ``width``:
    only the first ``width`` features are needed (a model fitted on fewer; the rest are not computed). ``raw_cos``
    maps a record id to the cosine of the question's unadapted vector when a dense-channel switch changed the
    question vector (:func:`raw_cosines`); None: it did not, the dense channel's cosine is that cosine. ``vectors``: the
    hits' stored unit vectors, row i for hit i (:data:`CHANGE_FEATURES`' change_cos and :data:`SLOT_FEATURES`; None: the
    backend has none to give).

    Built column by column with numpy (the same float operations, in the same order, as a row at a
    time): the Python loop is left with what only Python can read (texts, sets, metadata). A row of
    49 Python floats per candidate cost ~.4 ms a search, about a tenth of a search at 100k.
    """
    n = len(hits)
    if not n:
        return np.zeros((0, len(FEATURES)))
    q = plan.text
    qt = terms(q)
    nq = len(qt)
    qh = han_share(q)
    named = named_speakers(hits, q)
    bd = [h.breakdown for h in hits]
    num = np.array([(b.score, b.sim, b.vector, b.keyword, b.query, b.decay) for b in bd], dtype=float)
    raw = [float(bm25.get(h.record.id) or 0.0) for h in hits]
    stamps = [h.record.created_at.timestamp() for h in hits]
    scores = num[:, 0]
    best_s, best_sim, best_v, best_k = scores.max(), num[:, 1].max() or 1.0, num[:, 2].max(), max(raw) or 1.0
    new, old = max(stamps), min(stamps)
    # Memories written at one instant (one chat session, one import) and the turns just before and
    # after a candidate (its retrieval context holds the previous turns): evidence often sits next
    # to the turn that asked or the one that elaborates.
    session: dict[float, list[int]] = {}
    session_best: dict[float, float] = {}
    for i, (st, s) in enumerate(zip(stamps, scores.tolist(), strict=True)):
        session.setdefault(st, []).append(i)
        if st not in session_best or s > session_best[st]:  # the first of equal maxima, as max()
            session_best[st] = s
    contexts = [c if isinstance(c := h.record.metadata.extra.get("context"), str) else "" for h in hits]
    prev_gap, next_gap = [ABSENT] * n, [ABSENT] * n
    neighbours: list[list[int]] = [[] for _ in range(n)]
    before: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if not contexts[i]:
            continue
        for j in session[stamps[i]]:
            if j != i and hits[j].record.content in contexts[i]:  # j is a turn just before i
                prev_gap[i] = min(prev_gap[i], best_s - scores[j])
                next_gap[j] = min(next_gap[j], best_s - scores[i])
                neighbours[i].append(j)
                neighbours[j].append(i)
                before[i].append(j)
    # What only the texts and metadata say, one tuple per hit (the texts' own part is cached).
    text_cols = []
    for h, ctx in zip(hits, contexts, strict=True):
        rec = h.record
        mh, tt, st_time, asked, log_chars = _content(rec.content)
        asked_terms = qt & tt
        n_context = len(asked_terms | (qt & terms(ctx))) if ctx else len(asked_terms)
        in_window = plan.window is not None and plan.window[0] <= rec.created_at < plan.window[1]
        text_cols.append((mh, len(asked_terms), n_context, float(bool(named) and rec.metadata.extra.get("speaker") in named),
                          float(in_window), st_time, asked, log_chars))
    tc = np.array(text_cols, dtype=float)
    # Feature groups past the model's prefix are not computed.
    cols = len(FEATURES) if width is None else next(c for c in _BOUNDS if width <= c)
    vec, raw_a, st_a = num[:, 2], np.array(raw, dtype=float), np.array(stamps, dtype=float)
    mh_a = tc[:, 0]
    cover_t, cover_c = (tc[:, 1] / nq, tc[:, 2] / nq) if nq else (0.0, 0.0)
    # By name, so a feature added to FEATURES without a column here fails loudly (KeyError), never
    # leaves np.empty's garbage in a column.
    own: dict[str, Any] = {
        "score": scores, "score_gap": best_s - scores, "rank": np.arange(n), "sim": num[:, 1],
        "sim_rel": num[:, 1] / best_sim, "vector": vec, "vector_gap": best_v - vec, "vector_rank": _ranks(vec),
        "keyword": num[:, 3], "bm25": raw_a, "bm25_rel": raw_a / best_k,
        "bm25_rank": np.where(raw_a > 0, _ranks(raw_a), n), "query_bonus": num[:, 4], "decay": num[:, 5],
        "recency": (st_a - old) / (new - old) if new > old else 1.0, "newest": st_a == new,
        "q_han": qh, "m_han": mh_a, "visibility": keyword_visibility(qh, mh_a),
        "cover_turn": cover_t, "cover_context": cover_c, "cover_gain": cover_c - cover_t,
        "speaker_named": tc[:, 3], "named_any": float(bool(named)), "in_window": tc[:, 4],
        "has_window": float(plan.window is not None), "wants_time": float(plan.wants_time),
        "states_time": tc[:, 5], "wants_current": float(plan.wants_current), "asks_past": float(plan.asks_past),
        "asks": tc[:, 6], "log_chars": tc[:, 7], "n_candidates": n, "q_terms": nq,
        "session_n": [len(session[st]) for st in stamps],
        "session_gap": [best_s - session_best[st] for st in stamps], "prev_gap": prev_gap, "next_gap": next_gap,
    }
    x = np.empty((n, cols))
    for k, name in enumerate(FEATURES[:_OWN]):
        x[:, k] = own[name]
    if cols > _OWN:
        x[:, _OWN:_SUP] = supersede_matrix(hits, q, stamps, before)
    if cols > _SUP:
        cov = ((bridge_coverage(q, qh, [h.record.content for h in hits]) or [0.0] * n)
               if cols > _SUP + SCRIPT_NO_BRIDGE else None)
        x[:, _SUP:min(cols, _SCR)] = script_matrix(vec, mh_a, qh, cov)
    if cols > _SCR:
        x[:, _SCR:_CHG] = change_matrix(vectors, hits, stamps)
    if cols > _CHG:
        x[:, _CHG:_SLOT] = slot_matrix(vectors, hits, stamps)
    if cols > _SLOT:
        x[:, _SLOT:_VEC] = switch_features(vec, own["vector_rank"], None if raw_cos is None else
                                          np.array([max(0.0, raw_cos.get(h.record.id, 0.0)) for h in hits]))
    if cols > _VEC:
        pool = hits if pool is None else pool
        pool_raw = raw + [float(bm25.get(h.record.id) or 0.0) for h in pool[n:]]
        x[:, _VEC:] = context_features(hits, pool, q, raw, pool_raw, contexts, stamps, neighbours)
    return x


def script_matrix(vec: np.ndarray, m_han: np.ndarray, q_han: float, cov: Sequence[float] | None = None) -> np.ndarray:
    """:data:`SCRIPT_FEATURES` columns: the candidate's dense cosine (``vec``) ranked and gapped within the candidates of
    its own script (Han share >= .5 or not, as ``m_han`` says), its gap to the best cosine among the candidates in the
    question's script (ABSENT when there is none), the share of candidates in the question's script, and ``cov``
    (the question's bilingual-lexicon coverage per candidate, :func:`memory.scoring.bridge_coverage`; None: the
    column is left out, a model reading the first four does not look words up).

    Why: a cross-language cosine runs lower than a same-language one for the same fact, so "vector_gap" over every
    candidate mixes two scales; within a script the scale is one, and the gap to the question's script says how far
    below the same-language best an other-script turn (lifted by its imputed keyword part) sits."""
    n = len(vec)
    zh = m_han >= 0.5
    rank, gap = np.zeros(n), np.zeros(n)
    for g in (zh, ~zh):
        if g.any():
            rank[g] = _ranks(vec[g])
            gap[g] = vec[g].max() - vec[g]
    same = zh == (q_han >= 0.5)
    q_gap = vec[same].max() - vec if same.any() else np.full(n, ABSENT)
    cols = [rank, gap, q_gap, np.full(n, same.mean() if n else 0.0)]
    return np.column_stack(cols if cov is None else cols + [np.asarray(cov, dtype=float)])


def switch_features(vec: np.ndarray, vec_rank: np.ndarray, raw: np.ndarray | None) -> np.ndarray:
    """:data:`VECTOR_FEATURES` columns from the dense channel's cosines (``vec``, clipped at 0 as the breakdown's),
    their ranks, and the unadapted question's clipped cosines (None: no switch changed the vector; the columns
    repeat the dense channel's and ``adapted`` is 0)."""
    r = vec if raw is None else raw
    r_rank = vec_rank if raw is None else _ranks(r)
    return np.column_stack((r, r.max() - r, r_rank, r_rank - vec_rank, np.full(len(r), float(raw is not None))))


def raw_cosines(vectors: np.ndarray, ids: Sequence[str], question: np.ndarray) -> dict[str, float]:
    """Record id -> cosine of ``question`` (the unadapted, unit question vector) with its stored unit vector."""
    return dict(zip(ids, (np.asarray(vectors, dtype=np.float32) @ np.asarray(question, dtype=np.float32)).tolist(),
                    strict=True))


@dataclass(frozen=True)
class RerankModel:
    """A boosted ensemble of binary trees: log-odds that a candidate is the memory asked for.

    Each tree is a list of nodes ``[feature, threshold, left, right, value]``; feature -1 is a leaf.
    ``x[feature] <= threshold`` goes left (as scikit-learn's histogram trees predict).
    """

    features: tuple[str, ...]
    baseline: float
    trees: tuple[np.ndarray, ...]
    depth: int  # how many of the best hits are re-ordered
    info: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path = MODEL_FILE) -> RerankModel:
        p = Path(path)
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
            model = cls(tuple(obj["features"]), float(obj["baseline"]),
                        tuple(np.asarray(t, dtype=float).reshape(-1, 5) for t in obj["trees"]),
                        int(obj["depth"]), dict(obj.get("info", {})))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidConfig(f"cannot read the reranker model {p}: {exc}; reinstall the package "
                                "(pip install -e .), refit it with python -m memctl.tune_retrieval --stage rerank, "
                                "or turn it off with MEMORY_SCORING__RERANK=false") from exc
        if model.features != FEATURES[:len(model.features)] or not model.features:
            raise InvalidConfig(f"reranker model {p} does not match this code (features {list(model.features)}); "
                                "refit it with python -m memctl.tune_retrieval --stage rerank")
        if model.depth < 2:
            raise InvalidConfig(f"reranker model {p}: depth must be at least 2, got {model.depth}")
        return model

    def to_json(self) -> dict[str, Any]:
        return {"features": list(self.features), "baseline": round(self.baseline, 10), "depth": self.depth,
                "trees": [[[int(n[0]), float(n[1]), int(n[2]), int(n[3]), round(float(n[4]), 10)] for n in t]
                          for t in self.trees],
                "info": self.info}

    @cached_property
    def _base_cache(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        return {}

    @cached_property
    def _table(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The trees as complete binary trees of one depth ``D``: (D, features, thresholds, leaf values).

        A leaf above depth ``D`` becomes a chain of "always left" nodes (threshold +inf) ending in
        its value, so every (row, tree) walks exactly ``D`` steps with three 1-D gathers each and
        no test for leaves: 50 candidates x a few hundred depth-5 trees in about a millisecond
        (a padded table walked with leaf tests took ~5 ms).
        """
        def depth(t: np.ndarray, i: int = 0) -> int:
            return 0 if t[i, 0] < 0 else 1 + max(depth(t, int(t[i, 2])), depth(t, int(t[i, 3])))

        d = max((depth(t) for t in self.trees), default=0)
        inner, leaves = 2 ** d - 1, 2 ** d
        feature = np.zeros((len(self.trees), max(inner, 1)), dtype=np.intp)
        threshold = np.full((len(self.trees), max(inner, 1)), np.inf)
        value = np.zeros((len(self.trees), leaves))
        for k, t in enumerate(self.trees):
            stack = [(0, 0)]  # (node in t, position in the complete tree)
            while stack:
                i, pos = stack.pop()
                if t[i, 0] >= 0:
                    feature[k, pos], threshold[k, pos] = int(t[i, 0]), t[i, 1]
                    stack += [(int(t[i, 2]), 2 * pos + 1), (int(t[i, 3]), 2 * pos + 2)]
                else:  # every leaf of the complete tree below pos reached by going left holds it
                    while pos < inner:
                        pos = 2 * pos + 1
                    value[k, pos - inner] = t[i, 4]
        return d, feature.ravel(), threshold.ravel(), value.ravel()

    def _bases(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Index arrays of the (tree, row) walk for ``n`` rows, built once per row count (searches
        mostly re-rank the same number of hits). A lane is ``tree * n + row``, so neighbouring
        lanes walk one tree and read one feature column (``x`` transposed). A lane holds its node's
        index in the node table (tree ``k``'s nodes start at ``k * inner``): the lanes' roots, the
        row's position in a column, the offset that turns a node into its left child
        (``2 * node + offset``: ``k * inner + 2 * (node - k * inner) + 1``), the offset that turns
        the node past the last level into its leaf (tree ``k``'s leaves start at
        ``k * (inner + 1)``), and the node table's features times ``n`` (a feature's column start)."""
        got = self._base_cache.get(n)
        if got is None:
            d, feature, _, _ = self._table
            n_trees, inner = len(self.trees), 2 ** d - 1
            step = np.arange(n_trees, dtype=np.intp) * max(inner, 1)
            got = (np.repeat(step, n), np.tile(np.arange(n, dtype=np.intp), n_trees), np.repeat(1 - step, n),
                   np.repeat(np.arange(n_trees, dtype=np.intp) * (inner + 1) - step - inner, n), feature * n)
            for a in got:
                a.flags.writeable = False
            if len(self._base_cache) < 256:  # bounded: row counts are at most the model's depth
                self._base_cache[n] = got
        return got

    def log_odds(self, x: np.ndarray) -> np.ndarray:
        """Log-odds per row of ``x`` (columns: :data:`FEATURES`, of which the model reads its own)."""
        x = np.asarray(x, dtype=float)[:, :len(self.features)]
        if x.shape[1] < len(self.features):
            raise ValueError(f"the reranker reads {len(self.features)} features, got {x.shape[1]}")
        n, n_trees = len(x), len(self.trees)
        if not n_trees or not n:
            return np.full(n, self.baseline)
        d, _, threshold, value = self._table
        cols = np.ascontiguousarray(x.T).ravel()  # feature-major: feature f of row r at f * n + r
        roots, row, child, leaf_of, feature_base = self._bases(n)
        # Every index is in range by construction, so np.take's "clip" (no bounds check, no
        # negative indexes) into buffers reused across levels: ~15% less than fancy indexing.
        node = roots.copy()
        at, v, t, right = np.empty_like(node), np.empty(len(node)), np.empty(len(node)), np.empty(len(node), dtype=bool)
        for _ in range(d):
            np.take(feature_base, node, out=at, mode="clip")
            at += row
            np.take(cols, at, out=v, mode="clip")
            np.take(threshold, node, out=t, mode="clip")
            np.greater(v, t, out=right)
            node *= 2
            node += child
            node += right
        node += leaf_of
        leaves = np.take(value, node, mode="clip").reshape(n_trees, n)
        # Leaves summed tree by tree in a fixed order: the same float additions every run. Over two or more rows
        # numpy reduces axis 0 row after row (the row is its inner loop), the cumulative sum's last row bit for bit
        # at ~1/6 of its CPU (it wrote all 300 partial sums); with one row the reduction is pairwise, other last
        # bits than the JSON trees', so one row keeps the cumulative sum (test_rerank_identical pins both).
        total = leaves.sum(axis=0) if n > 1 else np.cumsum(leaves, axis=0)[-1]
        return self.baseline + total


@cache
def default_model() -> RerankModel:
    """The packaged model, read once per process."""
    return RerankModel.load()


def apply(hits: Sequence[SearchHit], plan: QueryPlan, bm25: Mapping[str, float | None],
          model: RerankModel | None = None,
          raw_cos: Callable[[Sequence[SearchHit]], Mapping[str, float] | None] | None = None,
          vectors: Callable[[Sequence[SearchHit]], np.ndarray | None] | None = None) -> list[SearchHit]:
    """Re-order the ``model.depth`` best hits by the model; later hits keep their place.

    ``raw_cos``: given the head, the unadapted question's cosines (see :func:`candidate_features`), called only
    when the model reads :data:`VECTOR_FEATURES` (a model fitted without them costs nothing more). ``vectors``: given
    the head, its stored vectors (None: unavailable), called only when the model reads :data:`CHANGE_FEATURES` (or later).

    The head keeps its own scores, highest first, in the new order (the difference goes into
    ``breakdown.query``), so scores stay monotone. Ties keep the earlier order (stable sort).
    """
    model = model or default_model()
    head, tail = list(hits[:model.depth]), list(hits[model.depth:])
    if len(head) < 2:
        return list(hits)
    width = len(model.features)
    cos = raw_cos(head) if raw_cos is not None and width > _SLOT else None
    vecs = vectors(head) if vectors is not None and width > _SCR else None
    z = model.log_odds(candidate_features(head, plan, bm25, hits, width, cos, vecs))
    # Highest log-odds first, ties in the earlier order: a stable sort of -z (sorted() with a (-z[i], i) key read
    # 50 numpy scalars).
    order = np.argsort(-z, kind="stable").tolist()
    slots = sorted((h.breakdown.score for h in head), reverse=True)
    out = []
    for pos, i in enumerate(order):
        h, b = head[i], head[i].breakdown
        # Strictly decreasing, so a later sort by score (pooling namespaces) keeps this order.
        s = slots[pos] - pos * 1e-9
        out.append(SearchHit(h.record, ScoreBreakdown(b.sim, b.vector, b.keyword, b.decay, b.boost, s,
                                                      b.query + (s - b.score))))
    return out + tail
