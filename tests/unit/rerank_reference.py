"""The learned reranker's features and tree walk as they were written before they were vectorised
(stop 30): one Python tuple of floats per candidate, ``np.unique`` for the shared slot words, a
row-major walk. Kept as the specification the fast code must reproduce bit for bit
(``tests/unit/test_rerank_identical.py``); not imported by the library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from memory.query import QueryPlan, named_speakers
from memory.records import SearchHit
from memory.rerank import _CHG, _OWN, _SCR, _SUP, _VEC, SCRIPT_NO_BRIDGE, RerankModel, _content
from memory.rerank_context import ABSENT, context_features, terms
from memory.rerank_supersede import MIN_GAP, NEAR, _slot_words, asks_before, says_change
from memory.scoring import bridge_coverage, han_share, keyword_visibility


def ranks(values: Sequence[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0] * len(values)
    for pos, i in enumerate(order):
        out[i] = pos if pos == 0 or values[order[pos - 1]] != values[i] else out[order[pos - 1]]
    return out


def supersede_rows(head: Sequence[SearchHit], query: str, stamps: Sequence[float],
                   before: Sequence[Sequence[int]] | None = None) -> list[tuple[float, ...]]:
    n = len(head)
    words = [_slot_words(h.record.content) for h in head]
    lens = np.fromiter((len(w) for w in words), dtype=np.intp, count=n)
    inc = np.zeros((n, 1))
    if lens.sum():
        _, col, count = np.unique(np.concatenate(words), return_inverse=True, return_counts=True)
        shared = count >= 2
        keep = shared[col]
        inc = np.zeros((n, max(1, int(shared.sum()))))
        inc[np.repeat(np.arange(n), lens)[keep], (np.cumsum(shared) - 1)[col[keep]]] = 1.0
    size = lens.astype(float)
    denom = size[:, None] + size[None, :]
    dice = np.divide(2.0 * (inc @ inc.T), denom, out=np.zeros((n, n)), where=denom > 0)
    st = np.asarray(stamps, dtype=float)
    later = st[None, :] - st[:, None] >= MIN_GAP
    earlier = later.T
    d_new = np.where(later, dice, -1.0)
    near = dice >= NEAR
    n_newer = (later & near).sum(axis=1)
    n_older = (earlier & near).sum(axis=1)
    j = d_new.argmax(axis=1)
    sd = d_new[np.arange(n), j]
    found = sd >= NEAR
    scores = np.fromiter((h.breakdown.score for h in head), float, n)
    vecs = np.fromiter((h.breakdown.vector for h in head), float, n)
    span = float(st.max() - st.min()) or 1.0
    n_near = n_newer + n_older
    echo_prev, echo_next = np.zeros(n), np.zeros(n)
    for i, js in enumerate(before or ()):
        for k in js:
            echo_prev[i] = max(echo_prev[i], dice[i, k])
            echo_next[k] = max(echo_next[k], dice[i, k])
    cols = (
        np.maximum(sd, 0.0), n_newer.astype(float), n_older.astype(float),
        np.maximum(np.where(earlier, dice, -1.0).max(axis=1), 0.0),
        np.where(found, scores - scores[j], ABSENT), np.where(found, vecs - vecs[j], ABSENT),
        np.where(found, (st[j] - st) / span, -1.0),
        np.divide(n_newer, n_near, out=np.full(n, -1.0), where=n_near > 0),
        np.full(n, asks_before(query)), echo_prev, echo_next,
    )
    return list(zip(*(c.tolist() for c in cols), strict=True))


def change_rows(head: Sequence[SearchHit], stamps: Sequence[float]) -> list[tuple[float, ...]]:
    """The change group (stop 33) without stored vectors, one candidate and one later candidate at a time."""
    words = [set(_slot_words(h.record.content).tolist()) for h in head]
    says = [says_change(h.record.content) for h in head]
    rows = []
    for i, h in enumerate(head):
        best, best_j = -1.0, -1
        for j in range(len(head)):
            if stamps[j] - stamps[i] >= MIN_GAP and says[j]:
                size = len(words[i]) + len(words[j])
                d = 2.0 * len(words[i] & words[j]) / size if size else 0.0
                if d > best:
                    best, best_j = d, j
        gap = h.breakdown.score - head[best_j].breakdown.score if best_j >= 0 else ABSENT
        rows.append((says[i], max(best, 0.0), -1.0, gap))
    return rows


def features(hits: Sequence[SearchHit], plan: QueryPlan, bm25: Mapping[str, float | None],
             pool: Sequence[SearchHit] | None = None, width: int | None = None) -> np.ndarray:
    n = len(hits)
    q = plan.text
    qt = terms(q)
    qh = han_share(q)
    named = named_speakers(hits, q)
    bd = [h.breakdown for h in hits]
    scores = [b.score for b in bd]
    sims = [b.sim for b in bd]
    vecs = [b.vector for b in bd]
    raw = [float(bm25.get(h.record.id) or 0.0) for h in hits]
    stamps = [h.record.created_at.timestamp() for h in hits]
    best_s, best_sim, best_v, best_k = max(scores), max(sims) or 1.0, max(vecs), max(raw) or 1.0
    new, old = max(stamps), min(stamps)
    vr, kr = ranks(vecs), ranks(raw)
    session: dict[float, list[int]] = {}
    for i, st in enumerate(stamps):
        session.setdefault(st, []).append(i)
    session_best = {st: max(scores[j] for j in idx) for st, idx in session.items()}
    contexts = [c if isinstance(c := h.record.metadata.extra.get("context"), str) else "" for h in hits]
    prev_gap, next_gap = [ABSENT] * n, [ABSENT] * n
    neighbours: list[list[int]] = [[] for _ in range(n)]
    before: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if not contexts[i]:
            continue
        for j in session[stamps[i]]:
            if j != i and hits[j].record.content in contexts[i]:
                prev_gap[i] = min(prev_gap[i], best_s - scores[j])
                next_gap[j] = min(next_gap[j], best_s - scores[i])
                neighbours[i].append(j)
                neighbours[j].append(i)
                before[i].append(j)
    sup: list[tuple[float, ...]] = [()] * n
    extra: list[tuple[float, ...]] = [()] * n
    # The same-slot group (stop 32) without stored vectors reads "no pair" (tests/unit/test_rerank_slot.py reads it
    # with vectors); the switch group is not here (tests/unit/test_rerank_switch.py), so the context group is
    # computed only for the full width.
    slot: tuple[float, ...] = (-1.0, 0.0, 0.0, ABSENT) if width is None or width > _CHG else ()
    script: list[tuple[float, ...]] = script_rows(vecs, q, qh, hits, width) if width is None or width > _SUP else [()] * n
    change: list[tuple[float, ...]] = change_rows(hits, stamps) if width is None or width > _SCR else [()] * n
    if width is None or width > _OWN:
        sup = supersede_rows(hits, q, stamps, before)
    if width is None or width > _VEC:
        pool = hits if pool is None else pool
        pool_raw = raw + [float(bm25.get(h.record.id) or 0.0) for h in pool[n:]]
        extra = context_features(hits, pool, q, raw, pool_raw, contexts, stamps, neighbours)
    rows: list[tuple[float, ...]] = []
    for i, h in enumerate(hits):
        rec, b = h.record, bd[i]
        mh, tt, st_time, asked, log_chars = _content(rec.content)
        ctx = rec.metadata.extra.get("context")
        ct = terms(ctx) if isinstance(ctx, str) and ctx else frozenset()
        cover_t = len(qt & tt) / len(qt) if qt else 0.0
        cover_c = len(qt & (tt | ct)) / len(qt) if qt else 0.0
        speaker = rec.metadata.extra.get("speaker")
        in_window = plan.window is not None and plan.window[0] <= rec.created_at < plan.window[1]
        rows.append((
            b.score, best_s - b.score, i, b.sim, b.sim / best_sim, b.vector, best_v - b.vector, vr[i],
            b.keyword, raw[i], raw[i] / best_k, kr[i] if raw[i] > 0 else n, b.query, b.decay,
            (stamps[i] - old) / (new - old) if new > old else 1.0, float(stamps[i] == new),
            qh, mh, keyword_visibility(qh, mh), cover_t, cover_c, cover_c - cover_t,
            float(bool(named) and speaker in named), float(bool(named)), float(in_window),
            float(plan.window is not None), float(plan.wants_time), st_time,
            float(plan.wants_current), float(plan.asks_past), asked, log_chars,
            n, len(qt), len(session[stamps[i]]), best_s - session_best[stamps[i]],
            prev_gap[i], next_gap[i], *sup[i], *script[i], *change[i], *slot, *extra[i],
        ))
    return np.array(rows, dtype=float)


def script_rows(vecs: Sequence[float], q: str, qh: float, hits: Sequence[SearchHit],
                width: int | None) -> list[tuple[float, ...]]:
    """The script group (stop 34) one candidate at a time: its cosine's rank and gap within its script, its gap to
    the best cosine in the question's script (ABSENT: none), the share of candidates in the question's script, and
    (for a width past the first four) the question's lexicon coverage in it."""
    zh = [han_share(h.record.content) >= 0.5 for h in hits]
    q_zh = qh >= 0.5
    in_q = [v for v, z in zip(vecs, zh, strict=True) if z == q_zh]
    cov = None
    if width is None or width > _SUP + SCRIPT_NO_BRIDGE:
        cov = bridge_coverage(q, qh, [h.record.content for h in hits]) or [0.0] * len(hits)
    out = []
    for i, (v, z) in enumerate(zip(vecs, zh, strict=True)):
        own = [w for w, y in zip(vecs, zh, strict=True) if y == z]
        row = (float(sum(1 for w in own if w > v)), max(own) - v, max(in_q) - v if in_q else ABSENT,
               len(in_q) / len(vecs))
        out.append(row if cov is None else (*row, cov[i]))
    return out


def log_odds(model: RerankModel, x: np.ndarray) -> np.ndarray:
    """Each tree walked node by node from its JSON form, leaves summed tree by tree."""
    out = np.full(len(x), model.baseline)
    for r, row in enumerate(np.asarray(x, dtype=float)):
        total = 0.0
        for k, t in enumerate(model.trees):
            i = 0
            while t[i, 0] >= 0:
                i = int(t[i, 3]) if row[int(t[i, 0])] > t[i, 1] else int(t[i, 2])
            total = t[i, 4] if k == 0 else total + t[i, 4]
        out[r] = model.baseline + total
    return out
