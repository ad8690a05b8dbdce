"""Learning curve of the write-path judge: do held-out figures still rise with more authors?

    OMP_NUM_THREADS=1 python scripts/judge_curve.py          # needs the judge_lab cache (JLAB)

Fit + choose kinds only (the judge_lab cache; test kinds and blind set unread). The corpus
authors are split into three groups (each two of the six first authors and one or two later
ones); each group in turn is the evaluation authors, and the model (tune_judge's current one) is
trained on 50%, 75% or 100% of the remaining authors (plus the two older sets), 5-fold by kind inside. A
pair is scored only when neither its author nor its kind was seen in training, so the figure is
"a new author writing about a new kind" at every fraction (no seen-author confound). The
threshold is tune_judge's rule (4% of distinct pairs merged) over the pooled scores.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from memctl import tune_judge as tj  # noqa: E402

CACHE = Path(os.environ.get("JLAB", "/tmp/judge3_lab.pkl"))
# Each group mixes the first six authors with the later ones (h, i, j; k, l when the corpus has them).
GROUPS = [("a", "b", "h", "k"), ("c", "d", "i", "l"), ("e", "f", "j")]


def curve(d: dict, fractions: tuple[float, ...] = (0.5, 0.75, 1.0), seeds: int = 2) -> None:
    pairs, unrelated, x, v, xu, vu = d["pairs"], d["unrelated"], d["x"], d["v"], d["xu"], d["vu"]
    # The shipped model's inputs: the cache holds every feature, the model reads MODEL_FEATURES.
    keep = [list(d["features"]).index(f) for f in tj.MODEL_FEATURES]
    x, xu = x[:, keep], xu[:, keep]
    present = {str(p.get("author")) for p in pairs}
    groups = [tuple(a for a in g if a in present) for g in GROUPS]
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    kind = np.array([p["kind"] for p in pairs])
    kind_u = np.array([p["kind"] for p in unrelated])
    auth = np.array([str(p.get("author")) for p in pairs])
    auth_u = np.array([str(p.get("author")) for p in unrelated])
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    folds = tj._folds(pairs, sorted(set(kind[corpus])))
    for frac in fractions:
        runs = []
        for seed in range(seeds if frac < 1 else 1):
            s = np.full(len(pairs), np.nan)
            for gi, group in enumerate(groups):
                rest = sorted(a for g in groups if g != group for a in g)
                k = max(1, round(frac * len(rest)))
                train_auth = set(random.Random(1000 * seed + gi).sample(rest, k)) | {"old"}
                for ks in folds:
                    held_k = np.isin(kind, list(ks))
                    tr = np.isin(auth, list(train_auth)) & ~held_k
                    tr_u = np.isin(auth_u, list(train_auth)) & ~np.isin(kind_u, list(ks))
                    xt, yt, wt = tj._train(x[tr], y[tr], xu[tr_u], 0.1)
                    clf = tj.fit_both(xt, np.vstack([v[tr], vu[tr_u]]), yt, wt, 4, 300)
                    ev = corpus & held_k & np.isin(auth, list(group))
                    s[ev] = tj.scores(clf, x[ev], v[ev])
            m = ~np.isnan(s)
            t = tj.threshold_for(s[m], y[m], tj.MAX_FALSE_MERGE)
            sel = [p for p, k in zip(pairs, m, strict=True) if k]
            r = tj._slice(sel, s[m], t)
            runs.append(r)
            bl = r["by_lang"]
            print(f"frac {frac:.2f} seed {seed} n={r['n']} {r['duplicate_merge_rate']}/{r['conflict_resolution_rate']}/"
                  f"{r['distinct_false_merge_rate']}  " + " | ".join(
                      f"{lg} {bl[lg]['duplicate_merge_rate']}/{bl[lg]['conflict_resolution_rate']}/"
                      f"{bl[lg]['distinct_false_merge_rate']}" for lg in ("en", "zh", "mixed")), flush=True)
        dup = np.mean([r["duplicate_merge_rate"] for r in runs])
        conf = np.mean([r["conflict_resolution_rate"] for r in runs])
        print(f"== frac {frac:.2f} mean dup {dup:.3f} conf {conf:.3f}", flush=True)


if __name__ == "__main__":
    curve(pickle.loads(CACHE.read_bytes()))
