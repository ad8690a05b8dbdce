"""Diagnose what outranks same-language evidence under language-aware fusion (issue 16).

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/diag_lang_fusion.py [--cache /tmp/emb.pkl]
        [--sets zh_en,zh_en_2,...] [--category en-en] [--show 8]

Only the FITTING sets are loaded by default (tests/data/zh_en, zh_en_2 ... zh_en_6; all have been looked
at). For every question of ``--category`` (and its mirror, zh-zh, in the summary) the evidence rank is
computed in four scorings of the same candidates:

* ``hybrid``  -- the shipped scoring (imputation + mixed-script vector shift + keyword cap);
* ``plain``   -- language_fusion off;
* ``impute``  -- imputation only (vector_shift 0, keyword_cap 1: neither acts);
* ``shift``   -- vector shift + cap only, keyword parts left as BM25 gives them (no imputation).

For each question where ``hybrid`` ranks the evidence lower than ``plain`` it prints the hits that
outrank it under hybrid: their script (han share), vector score, real keyword part, the keyword part
after imputation, and sim; then a tally of what outranks the evidence (other script with imputed
keywords / same script) per category.

``--signals`` prints how well query-level signals tell same- from cross-language questions (AUC).

``--loso`` instead fits alternative imputation rules (one constant each), leave-one-set-out over the same six
sets (for each set, the point best on the other five is scored on it):

* ``scale s``   -- the imputed keyword part times s (< 1: a guess counts for less than real evidence);
* ``margin d``  -- the imputed keyword part minus d (a guess never ties a real match);
* ``condmean``  -- the conditional mean of the visible keyword parts at that vector score (isotonic
  regression) instead of the quantile map (which assumes vector and keyword rank alike);
* ``gate c``    -- impute only when the best other-script vector match is within c of the best
  same-script one (the vector channel's guess at the answer's script);
* ``dominance`` -- a memory in the other script never passes a visible memory whose vector score is at
  least its own (``dominance-en``: only for questions in Latin script);
* ``hiddencap c`` -- keywords lift an other-script memory at most c above its vector score (the
  shipped ``keyword_cap`` is .15 for every memory).

Objective on the five training sets: en-en + zh-zh R@5 + MRR. Eligible: the other categories' MRR,
averaged over the five training sets, at most .005 below the shipped rule's, and the Markdown notes'
R@5 + MRR within .02 of it. LoCoMo is one script (every memory visible), so none of these act on it.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from collections.abc import Callable, Sequence  # noqa: E402

from memctl.tune_retrieval import ZH_EN, DiskCachedEmbedder, _rank, candidates, note_candidates  # noqa: E402
from memory import MemorySettings, scoring  # noqa: E402
from memory.embeddings import get_embedder  # noqa: E402
from memory.query import RerankWeights, plan_query, rerank  # noqa: E402
from memory.records import SearchHit  # noqa: E402
from memory.settings import ScoringSettings  # noqa: E402

FIT_SETS = ("zh_en", "zh_en_2", "zh_en_3", "zh_en_4", "zh_en_5", "zh_en_6")
VARIANTS: dict[str, dict[str, Any]] = {
    "hybrid": {},
    "plain": {"language_fusion": False},
    "impute": {"vector_shift": 0.0, "keyword_cap": 1.0},
    "shift": {},  # scored with imputation switched off (see _score)
    "dense": {"vector_weight": 1.0, "language_fusion": False},
}


def _score(cands: Any, now: Any, cfg: ScoringSettings, text: str, no_impute: bool) -> list[Any]:
    if not no_impute:
        return scoring.score_candidates(cands, now, cfg, text)
    real = scoring.impute_keywords
    # Keep each memory's real keyword part: vis-weighting and imputation both off.
    scoring.impute_keywords = lambda v, k, s: list(k)  # type: ignore[assignment]
    try:
        return scoring.score_candidates(cands, now, cfg, text)
    finally:
        scoring.impute_keywords = real  # type: ignore[assignment]


def ranked(q: Any, now: Any, cs: Any, variant: str) -> list[Any]:
    cfg = ScoringSettings().model_copy(update=VARIANTS[variant])
    weights = RerankWeights.from_scoring(cfg)
    return rerank(_score(cs, now, cfg, q.question, variant == "shift"), plan_query(q.question, now), weights)


Imputer = Callable[[Sequence[float], Sequence[float], Sequence[float]], list[float]]
SHIPPED: Imputer = scoring.impute_keywords


def _scaled(f: float, d: float) -> Imputer:
    """The shipped imputation with the imputed part times ``f`` minus ``d`` (real parts untouched)."""
    def imp(vectors: Sequence[float], keywords: Sequence[float], vis: Sequence[float]) -> list[float]:
        base = SHIPPED(vectors, keywords, vis)
        return [s * k + max(0.0, f * (b - s * k) - (1.0 - s) * d) if s < 1.0 else b
                for b, k, s in zip(base, keywords, vis, strict=True)]
    return imp


def _isotonic(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Pool-adjacent-violators: block means (x, y) of the non-decreasing least-squares fit of y on x."""
    blocks: list[list[float]] = []
    for x, y in zip(xs, ys, strict=True):
        blocks.append([x, y, 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            b = blocks.pop()
            blocks[-1] = [blocks[-1][0] + b[0], blocks[-1][1] + b[1], blocks[-1][2] + b[2]]
    return [b[0] / b[2] for b in blocks], [b[1] / b[2] for b in blocks]


def _condmean(vectors: Sequence[float], keywords: Sequence[float], vis: Sequence[float]) -> list[float]:
    pts = sorted((v, k) for v, k, s in zip(vectors, keywords, vis, strict=True) if s >= 0.5)
    if not pts:
        return [s * k for k, s in zip(keywords, vis, strict=True)]
    bx, by = _isotonic([p[0] for p in pts], [p[1] for p in pts])
    out = []
    for v, k, s in zip(vectors, keywords, vis, strict=True):
        i = bisect.bisect_left(bx, v)
        if i in (0, len(bx)):
            imp = by[min(i, len(by) - 1)]  # flat beyond the ends
        else:
            x0, x1, y0, y1 = bx[i - 1], bx[i], by[i - 1], by[i]
            imp = y0 + (y1 - y0) * (v - x0) / (x1 - x0) if x1 > x0 else y1
        out.append(s * k + (1.0 - s) * imp)
    return out


def _gate(c: float) -> Imputer:
    def imp(vectors: Sequence[float], keywords: Sequence[float], vis: Sequence[float]) -> list[float]:
        seen = [v for v, s in zip(vectors, vis, strict=True) if s >= 0.5]
        hidden = [v for v, s in zip(vectors, vis, strict=True) if s < 0.5]
        if seen and hidden and max(seen) - max(hidden) > c:
            return [s * k for k, s in zip(keywords, vis, strict=True)]
        return SHIPPED(vectors, keywords, vis)
    return imp


Post = Callable[[list[SearchHit], str, ScoringSettings], list[SearchHit]]


def _resim(hits: Sequence[SearchHit], sims: Sequence[float], cfg: ScoringSettings) -> list[SearchHit]:
    """Hits with new sims, re-scored and re-sorted exactly as scoring.score_candidates does."""
    out = [SearchHit(h.record, dataclasses.replace(
        h.breakdown, sim=sim, score=cfg.alpha * sim + cfg.beta * h.breakdown.decay + cfg.gamma * h.breakdown.boost))
        for h, sim in zip(hits, sims, strict=True)]
    out.sort(key=lambda h: (-h.breakdown.score, -h.record.updated_at.timestamp(), h.record.id))
    return out


def _hidden(hits: Sequence[SearchHit], text: str) -> list[bool]:
    qh = scoring.han_share(text)
    return [scoring.keyword_visibility(qh, scoring.han_share(h.record.content)) < 0.5 for h in hits]


def _dominance(latin_only: bool) -> Post:
    """A hidden memory's sim never passes a visible memory's that has at least its vector score."""
    def post(hits: list[SearchHit], text: str, cfg: ScoringSettings) -> list[SearchHit]:
        hidden = _hidden(hits, text)
        if not any(hidden) or (latin_only and scoring.han_share(text) >= 0.5):
            return hits
        sims = [h.breakdown.sim for h in hits]
        order = sorted(range(len(hits)), key=lambda i: -hits[i].breakdown.vector)
        best, i = math.inf, 0
        while i < len(order):
            j = i
            while j < len(order) and hits[order[j]].breakdown.vector == hits[order[i]].breakdown.vector:
                j += 1
            best = min([best] + [sims[g] for g in order[i:j] if not hidden[g]])
            for g in order[i:j]:
                if hidden[g]:
                    sims[g] = min(sims[g], best)
            i = j
        return _resim(hits, sims, cfg)
    return post


def _hidden_cap(c: float) -> Post:
    """Keywords (imputed) lift a hidden memory at most ``c`` above its vector score."""
    def post(hits: list[SearchHit], text: str, cfg: ScoringSettings) -> list[SearchHit]:
        hidden = _hidden(hits, text)
        if not any(hidden):
            return hits
        return _resim(hits, [min(h.breakdown.sim, h.breakdown.vector + c) if hid else h.breakdown.sim
                             for h, hid in zip(hits, hidden, strict=True)], cfg)
    return post


Rule = tuple[Imputer, Post | None]
RULES: dict[str, Rule] = {"shipped": (SHIPPED, None), "condmean": (_condmean, None),
                          **{f"scale {f}": (_scaled(f, 0.0), None) for f in (0.85, 0.7, 0.5)},
                          **{f"margin {d}": (_scaled(1.0, d), None) for d in (0.02, 0.05, 0.1)},
                          **{f"gate {c}": (_gate(c), None) for c in (0.15, 0.1, 0.05)},
                          "dominance": (SHIPPED, _dominance(False)), "dominance-en": (SHIPPED, _dominance(True)),
                          **{f"hiddencap {c}": (SHIPPED, _hidden_cap(c)) for c in (0.1, 0.05)}}


def _by_category(cands: Any, rule: Rule) -> dict[str, list[float]]:
    """Reciprocal ranks (0 when missed within 50) and R@5 hits per category under ``rule``."""
    cfg = ScoringSettings()
    weights = RerankWeights.from_scoring(cfg)
    out: dict[str, list[float]] = defaultdict(list)
    imputer, post = rule
    scoring.impute_keywords = imputer  # type: ignore[assignment]
    try:
        for q, now, cs in cands:
            text = q["question"] if isinstance(q, dict) else q.question
            hits = scoring.score_candidates(cs, now, cfg, text)
            if post is not None:
                hits = post(hits, text, cfg)
            r = _rank(q, rerank(hits, plan_query(text, now), weights))
            cat = "notes" if isinstance(q, dict) else q.category
            out[cat].append(1.0 / r if r else 0.0)
            out[cat + "@5"].append(1.0 if r and r <= 5 else 0.0)
    finally:
        scoring.impute_keywords = SHIPPED  # type: ignore[assignment]
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def pooled_line(res_p: dict[str, dict[str, list[float]]], note_p: dict[str, list[float]], names: Sequence[str],
                cats: Sequence[str]) -> str:
    """One scoring point's R@5 / MRR per category pooled over ``names``, and the Markdown notes' (also used by
    scripts/fit_lexicon_bridge.py)."""
    return " | ".join(f"{c} {_mean([x for k in names for x in res_p[k][c + '@5']]):.3f}/"
                      f"{_mean([x for k in names for x in res_p[k][c]]):.3f}" for c in cats) \
        + f" | notes {_mean(note_p['notes@5']):.3f}/{_mean(note_p['notes']):.3f}"


def note_score(note_p: dict[str, list[float]]) -> float:
    """The Markdown notes' guard: MRR + R@5."""
    return _mean(note_p["notes"]) + _mean(note_p["notes@5"])


def loso(emb: DiskCachedEmbedder, names: Sequence[str]) -> None:
    """Leave-one-set-out fit of the imputation rules (module docstring); prints out-of-set figures."""
    cw = MemorySettings(path=":memory:").context_weight
    sets = {n: candidates(ZH_EN.parent / n, None, emb, 2, cw) for n in names}
    notes = note_candidates(emb)
    emb.save()
    res = {rule: {n: _by_category(c, f) for n, c in sets.items()} for rule, f in RULES.items()}
    note_res = {rule: _by_category(notes, f) for rule, f in RULES.items()}
    dense_cfg = ScoringSettings().model_copy(update=VARIANTS["dense"])
    dense = {n: _dense_by_category(c, dense_cfg) for n, c in sets.items()}
    target, cats = ("en-en", "zh-zh"), ("en-en", "zh-zh", "en->zh", "zh->en", "mixed", "current")

    def other_mrr(rule: str, keys: Sequence[str]) -> float:
        return _mean([_mean(res[rule][k][c]) for k in keys for c in cats if c not in target and res[rule][k][c]])

    def obj(rule: str, keys: Sequence[str]) -> float:
        return sum(_mean(res[rule][k][c]) + _mean(res[rule][k][c + "@5"]) for k in keys for c in target)

    def note_obj(rule: str) -> float:
        return note_score(note_res[rule])

    for rule in RULES:
        print(f"{rule:13s} all six: " + pooled_line(res[rule], note_res[rule], names, cats), flush=True)
    picks: dict[str, str] = {}
    for held in names:
        train = [k for k in names if k != held]
        ok = [r for r in RULES if other_mrr(r, train) >= other_mrr("shipped", train) - 0.005
              and note_obj(r) >= note_obj("shipped") - 0.02]
        picks[held] = max(ok, key=lambda r: (obj(r, train), r == "shipped"))
        print(f"fit without {held}: {picks[held]} (eligible: {', '.join(ok)})")
    print("\nout of set, R@5 / MRR per category (pooled over the six held-out folds): picked | shipped | dense")
    for c in cats:
        def pooled(get: Callable[[str], dict[str, list[float]]], c: str = c) -> str:
            rr = [x for k in names for x in get(k)[c]]
            r5 = [x for k in names for x in get(k)[c + "@5"]]
            return f"{_mean(r5):.3f} / {_mean(rr):.3f}"
        print(f"  {c:7s} {pooled(lambda k: res[picks[k]][k])} | {pooled(lambda k: res['shipped'][k])} | "
              f"{pooled(lambda k: dense[k])}")


def _dense_by_category(cands: Any, cfg: ScoringSettings) -> dict[str, list[float]]:
    weights = RerankWeights.from_scoring(cfg)
    out: dict[str, list[float]] = defaultdict(list)
    for q, now, cs in cands:
        r = _rank(q, rerank(scoring.score_candidates(cs, now, cfg, q.question), plan_query(q.question, now), weights))
        out[q.category].append(1.0 / r if r else 0.0)
        out[q.category + "@5"].append(1.0 if r and r <= 5 else 0.0)
    return out


def _auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    return sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / max(1, len(pos) * len(neg))


def signals(emb: DiskCachedEmbedder, names: Sequence[str]) -> None:
    """Can anything a search knows tell a same-language question from a cross-language one?

    For each question: vgap (best same-script vector score minus best other-script one), the share
    of candidates in the question's script, the best raw BM25 score, and the share of the question's
    keyword terms the best-covering visible memory has. Printed: the AUC of each between en-en and
    en->zh (zh-zh and zh->en), over all questions and over the *contested* ones only (same-language
    questions where hybrid ranks the evidence below plain, cross-language ones where above): the
    questions a gate on that signal would have to tell apart.
    """
    from memory.text import keyword_terms

    cw = MemorySettings(path=":memory:").context_weight
    rows: list[tuple[str, bool, dict[str, float]]] = []
    for name in names:
        for q, now, cs in candidates(ZH_EN.parent / name, None, emb, 2, cw):
            if q.category not in ("en-en", "en->zh", "zh-zh", "zh->en"):
                continue
            rh, rp = (_rank(q, ranked(q, now, cs, v)) or 99 for v in ("hybrid", "plain"))
            same = q.category in ("en-en", "zh-zh")
            qh, qt = scoring.han_share(q.question), set(keyword_terms(q.question))
            seen = [scoring.keyword_visibility(qh, scoring.han_share(c.record.content)) >= 0.5 for c in cs]
            vec = [max(0.0, c.vector_score or 0.0) for c in cs]
            vv, iv = [v for v, s in zip(vec, seen, strict=True) if s], [v for v, s in zip(vec, seen, strict=True) if not s]
            feats = {"vgap": (max(vv) - max(iv)) if vv and iv else 0.0, "visible share": sum(seen) / len(seen),
                     "max bm25": max((c.keyword_score or 0.0) for c in cs),
                     "term coverage": max((len(qt & set(keyword_terms(c.record.content))) / max(1, len(qt))
                                           for c, s in zip(cs, seen, strict=True) if s), default=0.0)}
            rows.append((q.category, (rh > rp) if same else (rp > rh), feats))
    emb.save()
    for a, b in (("en-en", "en->zh"), ("zh-zh", "zh->en")):
        for only in (False, True):
            pos = [f for c, k, f in rows if c == a and (k or not only)]
            neg = [f for c, k, f in rows if c == b and (k or not only)]
            print(f"{a} ({len(pos)}) vs {b} ({len(neg)}){', contested only' if only else ''}: " + ", ".join(
                f"{m} AUC {_auc([f[m] for f in pos], [f[m] for f in neg]):.2f}" for m in pos[0]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--sets", default=",".join(FIT_SETS))
    ap.add_argument("--category", default="en-en")
    ap.add_argument("--show", type=int, default=6, help="outranking hits printed per losing question")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    ap.add_argument("--loso", action="store_true", help="fit the imputation rules leave-one-set-out instead")
    ap.add_argument("--signals", action="store_true", help="AUC of query-level signals (see signals())")
    args = ap.parse_args()
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    if args.loso:
        loso(emb, args.sets.split(","))
        return
    if args.signals:
        signals(emb, args.sets.split(","))
        return
    cw = MemorySettings(path=":memory:").context_weight
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    summary: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for name in args.sets.split(","):
        cands = candidates(ZH_EN.parent / name, None, emb, 2, cw)
        for q, now, cs in cands:
            ranks = {v: _rank(q, ranked(q, now, cs, v)) for v in VARIANTS}
            for v, r in ranks.items():
                summary[(name, q.category, v)].append(1.0 / r if r else 0.0)
                summary[(name, q.category, v + "@5")].append(1.0 if r and r <= 5 else 0.0)
            if q.category not in (args.category, "zh-zh"):
                continue
            rh, rp = ranks["hybrid"] or 99, ranks["plain"] or 99
            if rh <= rp:
                continue
            hits = ranked(q, now, cs, "hybrid")
            qh = scoring.han_share(q.question)
            raw = {c.record.id: c for c in cs}
            max_bm = max((c.keyword_score or 0.0 for c in cs), default=0.0)
            above = hits[: rh - 1] if rh != 99 else hits[:10]
            # Hits plain fusion ranks below the evidence: the ones language fusion lifted past it.
            plain_ids = [h.record.id for h in ranked(q, now, cs, "plain")]
            below_in_plain = set(plain_ids[rp:]) if rp != 99 else set(plain_ids[10:])
            for h in above:
                mh = scoring.han_share(h.record.content)
                vis = scoring.keyword_visibility(qh, mh)
                kind = "other-script" if vis < 0.5 else "same-script"
                tally[q.category][kind] += 1
                if h.record.id in below_in_plain:
                    tally[q.category][kind + ", lifted past it"] += 1
            if args.quiet:
                continue
            print(f"\n[{name}] {q.category} {q.question_id} ranks {ranks}  Q: {q.question[:90]}")
            ev = next((h for h in hits if h.record.metadata.extra.get("dia_id") in set(q.evidence)), None)
            rows = ([("EVID", ev)] if ev else []) + [("  >", h) for h in above[: args.show]]
            for tag, h in rows:
                b = h.breakdown
                realkw = scoring.keyword_part(raw[h.record.id].keyword_score, max_bm, ScoringSettings().bm25_k)
                mh = scoring.han_share(h.record.content)
                print(f"  {tag} han {mh:.2f} vis {scoring.keyword_visibility(qh, mh):.2f} vec {b.vector:.3f} "
                      f"kw real {realkw:.3f} used {b.keyword:.3f} sim {b.sim:.3f} score {b.score:.3f} "
                      f"| {h.record.content[:70]!r}")
    emb.save()
    print("\nWhat outranks the evidence where hybrid < plain (hits above it under hybrid, by script; "
          "'lifted past it': plain ranks them below the evidence):")
    for cat, c in tally.items():
        print(f"  {cat}: {dict(c)}")
    print("\nMRR (R@5) per set and category: hybrid | plain | impute-only | shift+cap-only | dense")
    keys = sorted({(s, c) for s, c, _ in summary})
    for s, c in keys:
        row = " | ".join(f"{sum(summary[(s, c, v)]) / len(summary[(s, c, v)]):.3f} "
                         f"({sum(summary[(s, c, v + '@5')]) / len(summary[(s, c, v)]):.3f})" for v in VARIANTS)
        print(f"  {s:8s} {c:7s} n={len(summary[(s, c, 'hybrid')]):3d}  {row}")


if __name__ == "__main__":
    main()
