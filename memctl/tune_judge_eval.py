"""Scoring and threshold rules of :mod:`memctl.tune_judge` (and :mod:`memctl.tune_consolidate`).

A threshold is either one P(same) for every pair or one per write-time pair language
(:func:`memory.policy.judge_lang.pair_lang`, what the judge can know at write time); the report's
``by_lang`` groups by the files' own ``lang`` label, as ``memctl eval dedupe`` does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from memory.policy.judge_lang import LANGS, pair_lang

UNSURE_BAND = 1.0  # log-odds either side of the threshold: the pairs an LLM is asked about
Threshold = float | Mapping[str, float]


def write_langs(pairs: Sequence[dict[str, Any]]) -> np.ndarray:
    """Each pair's write-time language (read from its texts, not from the file's label)."""
    return np.array([pair_lang(p["existing"], p["incoming"]) for p in pairs])


def per_pair(pairs: Sequence[dict[str, Any]], t: Threshold) -> np.ndarray:
    """The threshold each pair is held to: ``t`` itself, or its write-time language's."""
    if isinstance(t, Mapping):
        return np.array([float(t[lg]) for lg in write_langs(pairs)], dtype=float)
    return np.full(len(pairs), float(t))


def threshold_for(s: np.ndarray, y: np.ndarray, max_false: float) -> float:
    """The lowest threshold that merges at most ``max_false`` of the distinct pairs (y == 0)."""
    dist = np.sort(s[y == 0])[::-1]
    k = int(np.floor(max_false * len(dist)))
    return float(min(dist[k] + 1e-6, 0.999)) if k < len(dist) else 0.5


def choose_thresholds(s: np.ndarray, y: np.ndarray, langs: np.ndarray, su: np.ndarray, max_false: float,
                      max_unrelated: float) -> dict[str, Any]:
    """Both threshold rules on one set of out-of-fold scores, each keeping the distinct pairs merged at
    most ``max_false`` overall *and within each write-time language*, and unrelated pairs at most
    ``max_unrelated``:

    * ``single``: one threshold, the strictest of the four constraints (so the language whose
      look-alikes score highest sets it for all);
    * ``per_lang``: each language's own lowest threshold (overall is then within the target too,
      as a weighted mean of the languages'), none below the unrelated-pair floor."""
    floor = threshold_for(su, np.zeros(len(su), dtype=int), max_unrelated)
    own = {lg: threshold_for(s[langs == lg], y[langs == lg], max_false) for lg in LANGS if np.any(langs == lg)}
    single = max(floor, threshold_for(s, y, max_false), *own.values())
    return {"single": single, "per_lang": {lg: max(floor, own.get(lg, single)) for lg in LANGS}}


def outcomes(s: np.ndarray, t: Threshold, pairs: Sequence[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Per pair (label, merged). The eval's meaning: duplicate/conflict ok = merged (the incoming
    statement then becomes current); distinct "ok" = wrongly merged."""
    return [(p["label"], bool(v >= tp)) for p, v, tp in zip(pairs, s, per_pair(pairs, t), strict=True)]


def rates(outs: Iterable[tuple[str, bool]]) -> dict[str, Any]:
    outs = list(outs)

    def r(label: str) -> float | None:
        xs = [ok for lab, ok in outs if lab == label]
        return round(sum(xs) / len(xs), 3) if xs else None

    return {"n": len(outs), "duplicate_merge_rate": r("duplicate"), "conflict_resolution_rate": r("conflict"),
            "distinct_false_merge_rate": r("distinct")}


def _by(pairs: Sequence[dict[str, Any]], outs: Sequence[tuple[str, bool]], key: str) -> dict[str, Any]:
    groups: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for p, o in zip(pairs, outs, strict=True):
        groups[str(p.get(key))].append(o)
    return {g: rates(o) for g, o in sorted(groups.items())}


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def _slice(pairs: Sequence[dict[str, Any]], s: np.ndarray, t: Threshold) -> dict[str, Any]:
    outs = outcomes(s, t, pairs)
    tp = per_pair(pairs, t)
    return {**rates(outs), "by_lang": _by(pairs, outs, "lang"), "by_kind": _by(pairs, outs, "kind"),
            "unsure_share": round(float(np.mean(np.abs(_logit(s) - _logit(tp)) < UNSURE_BAND)), 3) if len(s) else 0.0}


def _nested_merged(pairs: Sequence[dict[str, Any]], s: np.ndarray, su: np.ndarray, authors_u: np.ndarray,
                   rule: str, max_false: float, max_unrelated: float) -> np.ndarray:
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    langs = write_langs(pairs)
    auth = np.array([str(p.get("author")) for p in pairs])
    merged = np.zeros(len(pairs), dtype=bool)
    for a in sorted(set(auth)):
        m, mu = auth != a, authors_u != a
        t = choose_thresholds(s[m], y[m], langs[m], su[mu], max_false, max_unrelated)[rule]
        held = auth == a
        sel = [p for p, k in zip(pairs, held, strict=True) if k]
        merged[held] = s[held] >= per_pair(sel, t)
    return merged


def nested_by_author(pairs: Sequence[dict[str, Any]], s: np.ndarray, su: np.ndarray, authors_u: np.ndarray,
                     rule: str, max_false: float, max_unrelated: float) -> dict[str, Any]:
    """How the threshold rule holds for a writer it was not chosen on: each author's out-of-author
    scores judged at the thresholds chosen (by ``rule``, at target ``max_false``) on every *other*
    author's scores. The scores are already out of author; this also takes the author out of the
    threshold choice, as for a new writer."""
    merged = _nested_merged(pairs, s, su, authors_u, rule, max_false, max_unrelated)
    outs = [(p["label"], bool(k)) for p, k in zip(pairs, merged, strict=True)]
    return {**rates(outs), "by_lang": _by(pairs, outs, "lang"), "target": max_false}


def calibrate(pairs: Sequence[dict[str, Any]], s: np.ndarray, su: np.ndarray, authors_u: np.ndarray, rule: str,
              max_false: float, max_unrelated: float, targets: Sequence[float]) -> tuple[float, dict[str, Any]]:
    """The largest target (of ``targets``, descending) at which the rule, its thresholds chosen
    without the scored author (:func:`nested_by_author`), merges at most ``max_false`` of the
    distinct pairs overall and within each language (the files' labels, unrounded). A quantile
    chosen on the very pairs it is judged on is optimistic (out of author at a 4% target: 4.3%
    nested); this keeps the promise for a writer outside the choice. Returns (target, nested report);
    the smallest target when none holds."""
    labels = np.array([p["label"] for p in pairs])
    lang = np.array([str(p.get("lang")) for p in pairs])
    dist = labels == "distinct"
    for target in sorted(targets, reverse=True):
        merged = _nested_merged(pairs, s, su, authors_u, rule, target, max_unrelated)
        groups = [dist] + [dist & (lang == lg) for lg in sorted(set(lang))]
        if all(float(np.mean(merged[g])) <= max_false + 1e-12 for g in groups if g.any()):
            break
    return target, nested_by_author(pairs, s, su, authors_u, rule, target, max_unrelated)
