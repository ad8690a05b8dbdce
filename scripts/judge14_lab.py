"""Judge14 (issue 11): learning curve by author and out-of-author thresholds, on the 27 fitting authors.

    OMP_NUM_THREADS=1 python scripts/judge14_lab.py cache      # featurize every corpus pair once
    OMP_NUM_THREADS=1 python scripts/judge14_lab.py curve      # learning curve (5 / 10 / 19 / 26 authors)
    OMP_NUM_THREADS=1 python scripts/judge14_lab.py errors     # en distinct pairs merged out of author

The cache (``J14_CACHE``, default /tmp/judge14/feat.pkl) holds tune_judge's features and pair vectors of
every pair :func:`memctl.tune_judge.load_corpus` reads (19 corpus authors + the 8 retired held-out
authors + the two older sets) and of their unrelated pairs. Only the fit + choose kinds are fitted
or scored here: the test kinds stay report-only (tune_judge scores them once).

Learning curve: every author's fit + choose pairs are scored by a model that never saw that author,
fitted on the fit + choose kinds of N other authors (N = 5, 10, 19: the 27 authors in 9 seeded
groups of 3, each group scored by a model fitted on N authors drawn from the other 24, seeds 0 and
1; N = 26: leave-one-author-out). The older sets are left out of the curve (they are not an
author's). Model: tune_judge's, at the shipped size. Figures at the threshold that merges 4% of the
scored distinct pairs (equal false merges), and at a fixed threshold .986.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from memctl import tune_judge as tj  # noqa: E402

CACHE = Path(os.environ.get("J14_CACHE", "/tmp/judge14/feat.pkl"))


def make_cache() -> None:
    from memory.policy.judge import FEATURES, PairJudge, TreeModel
    from memory.policy.paraphrase import get_paraphrase_scorer

    t0 = time.time()
    pairs = tj.load_corpus()
    unrelated = tj.unrelated_pairs(pairs)
    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}), paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    (x, v) = tj.featurize(pairs, judge)
    print(f"pairs featurized in {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    (xu, vu) = tj.featurize(unrelated, judge)
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_bytes(pickle.dumps({"pairs": pairs, "unrelated": unrelated, "x": x, "v": v, "xu": xu, "vu": vu,
                                    "features": tj.MODEL_FEATURES}))
    print(f"cached {len(pairs)} pairs, {len(unrelated)} unrelated in {time.time() - t0:.0f}s", file=sys.stderr)


def load() -> dict[str, Any]:
    d = annotate(pickle.loads(CACHE.read_bytes()))
    d["lang"] = np.array([p["lang"] for p in d["pairs"]])
    d["label"] = np.array([p["label"] for p in d["pairs"]])
    return d


def annotate(d: dict[str, Any]) -> dict[str, Any]:
    """Split part, author and same-fact label per pair (and per unrelated pair) of a feature cache
    (also used by scripts/judge16_lab.py)."""
    split = json.loads((tj.CORPUS / "split.json").read_text(encoding="utf-8"))
    part = {k: name for name in ("fit", "choose", "test") for k in split[name]}
    d["part"] = np.array([part.get(p["kind"], "fit") for p in d["pairs"]])
    d["part_u"] = np.array([part.get(p["kind"], "fit") for p in d["unrelated"]])
    d["author"] = np.array([str(p.get("author")) for p in d["pairs"]])
    d["author_u"] = np.array([str(p.get("author")) for p in d["unrelated"]])
    d["y"] = np.array([0 if p["label"] == "distinct" else 1 for p in d["pairs"]])
    return d


def fit_score(d: dict[str, Any], train_authors: set[str], score_mask: np.ndarray,
              cfg: tuple[int, int, float] = (3, 500, 0.1), old: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Fit on the fit + choose pairs of ``train_authors`` (+ older sets if ``old``) and their unrelated
    pairs; score the pairs in ``score_mask`` and the unrelated pairs of the same authors."""
    depth, iters, w = cfg
    dev, dev_u = d["part"] != "test", d["part_u"] != "test"
    ta = set(train_authors) | ({"old"} if old else set())
    tr = dev & np.isin(d["author"], list(ta))
    tr_u = dev_u & np.isin(d["author_u"], list(ta))
    xt, yt, wt = tj._train(d["x"][tr], d["y"][tr], d["xu"][tr_u], w)
    clf = tj.fit_both(xt, np.vstack([d["v"][tr], d["vu"][tr_u]]), yt, wt, depth, iters)
    held_auth = set(d["author"][score_mask])
    su_mask = dev_u & np.isin(d["author_u"], list(held_auth))
    return tj.scores(clf, d["x"][score_mask], d["v"][score_mask]), tj.scores(clf, d["xu"][su_mask], d["vu"][su_mask])


def summary(d: dict[str, Any], s: np.ndarray, m: np.ndarray, t: float) -> dict[str, Any]:
    pairs = [p for p, k in zip(d["pairs"], m, strict=True) if k]
    out = tj._slice(pairs, s[m], t)
    return {k: out[k] for k in ("n", "duplicate_merge_rate", "conflict_resolution_rate", "distinct_false_merge_rate",
                                "by_lang", "unsure_share")}


def line(name: str, r: dict[str, Any]) -> str:
    langs = " ".join(f"{lg} {x['duplicate_merge_rate']:.3f}/{x['conflict_resolution_rate']:.3f}/"
                     f"{x['distinct_false_merge_rate']:.3f}" for lg, x in r["by_lang"].items())
    return (f"{name:28s} n={r['n']} {r['duplicate_merge_rate']:.3f}/{r['conflict_resolution_rate']:.3f}/"
            f"{r['distinct_false_merge_rate']:.3f} | {langs}")


def curve() -> None:
    d = load()
    authors = sorted(set(d["author"]) - {"old"})
    dev = d["part"] != "test"
    out: dict[str, Any] = {}
    t0 = time.time()
    for n_auth in (5, 10, 19, 26):
        for seed in ((0, 1) if n_auth < 26 else (0,)):
            s = np.full(len(d["pairs"]), np.nan)
            su_all: list[np.ndarray] = []
            if n_auth == 26:
                groups = [[a] for a in authors]
            else:
                shuffled = authors[:]
                random.Random(1000 + seed).shuffle(shuffled)
                groups = [shuffled[i::9] for i in range(9)]
            for g in groups:
                others = sorted(set(authors) - set(g))
                train = set(random.Random(hash((seed, n_auth, tuple(g))) & 0xFFFF).sample(others, n_auth)) \
                    if n_auth < len(others) else set(others)
                m = dev & np.isin(d["author"], g)
                s[m], su = fit_score(d, train, m)
                su_all.append(su)
            m = dev & ~np.isnan(s) & (d["author"] != "old")
            su_cat = np.concatenate(su_all)
            t4 = max(tj.threshold_for(s[m], d["y"][m], tj.MAX_FALSE_MERGE),
                     tj.threshold_for(su_cat, np.zeros(len(su_cat), dtype=int), tj.MAX_UNRELATED_MERGE))
            key = f"N={n_auth} seed={seed}"
            out[key] = {"at_4pct": summary(d, s, m, t4), "t4": t4, "at_986": summary(d, s, m, 0.986),
                        "auc": _auc(s[m], d["y"][m])}
            print(line(key + f" @4% t={t4:.4f}", out[key]["at_4pct"]), flush=True)
            print(line(key + " @.986", out[key]["at_986"]) + f" AUC {out[key]['auc']:.3f}", flush=True)
            print(f"  ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
            np.save(CACHE.parent / f"curve_{n_auth}_{seed}.npy", s)
    (CACHE.parent / "curve.json").write_text(json.dumps(out, indent=1))


def _auc(s: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def errors() -> None:
    """The distinct fit + choose pairs tune_judge's chosen model scores highest out of author (its
    ``TUNE_JUDGE_DUMP`` scores), by language, with their tags: what the look-alikes that get merged share."""
    from collections import Counter

    d = load()
    z = np.load(os.environ.get("TUNE_JUDGE_DUMP", "/tmp/judge14/dump") + "/oof_by_author.npz")
    s, ev = z["s"], z["ev"]
    wl = tj.write_langs(d["pairs"])
    for lg in ("en", "zh", "mixed"):
        m = ev & (d["y"] == 0) & (wl == lg)
        idx = np.argsort(-s * m)[: max(1, int(0.06 * m.sum()))]
        tags = Counter(str(d["pairs"][i].get("hard")) for i in idx)
        kinds = Counter(d["pairs"][i]["kind"] for i in idx)
        base = Counter(str(d["pairs"][i].get("hard")) for i in np.where(m)[0])
        print(f"== {lg}: {m.sum()} distinct, top {len(idx)} tags {dict(tags)} (all: {dict(base)}) kinds {dict(kinds)}")
        if lg == "en" or os.environ.get("J14_ALL"):
            for i in idx:
                p = d["pairs"][i]
                print(f"  {s[i]:.4f} {p['author']:3s} {p['kind']:18s} {p.get('hard')} | {p['existing']} || {p['incoming']}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "curve"
    {"cache": make_cache, "curve": curve, "errors": errors}[cmd]()
