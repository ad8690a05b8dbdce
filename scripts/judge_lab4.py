"""Round-4 experiments for the write-path judge (fit + choose kinds only; the test kinds and the
blind set are never read here). Uses the judge_lab cache (``JLAB``).

    OMP_NUM_THREADS=1 python scripts/judge_lab4.py base,3cls,3tree [loko] [loao]

Variants (``+``-joined): ``3cls`` a three-class model (duplicate / update / distinct; trees and a
multinomial linear part, logits added; merge score P(dup) + P(update)); ``3tree`` three-class
trees + the binary linear part; ``ngram`` character n-gram overlaps; ``vals`` per-class value
equality flags; ``drop=f1/f2`` drops features. Every figure is out of fold (5-fold by kind, and
leave-one-kind-out / leave-one-author-out when asked), threshold by tune_judge's rule.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import judge_lab as jl  # noqa: E402

from memctl import tune_judge as tj  # noqa: E402
from memory.policy.judge import FEATURES  # noqa: E402

GROUPS = {
    "rule": ("rule_duplicate", "rule_conflict"),
    "lex": ("surface", "jaccard", "para_gap", "length_ratio"),
    "cues": ("cue_strong", "cue_weak", "cue_existing", "cue_x_masked", "negation_flip"),
    "vals": ("n_equal", "n_changed", "changed_subject", "changed_rest", "changed_scope", "new_values", "lost_values",
             "changed_x_masked", "value_only_change"),
    "ent": ("names_differ", "names_shared"),
    "align": __import__("memory.policy.align", fromlist=["x"]).ALIGN_FEATURES,
    "names": __import__("memory.policy.names", fromlist=["x"]).NAME_FEATURES,
    "static": __import__("memory.policy.static_view", fromlist=["x"]).STATIC_FEATURES,
}
CLASSES = {"distinct": 0, "duplicate": 1, "conflict": 2}


class Fitted3(tj.Fitted):
    """Three-class trees (+ a linear part, multinomial or binary); P(same) = P(dup) + P(update)."""

    def __init__(self, clf: Any, lin: Any, mean: np.ndarray, scale: np.ndarray, binary_lin: bool):
        super().__init__(clf, None)
        self.lin, self.mean, self.scale, self.binary_lin = lin, mean, scale, binary_lin

    def p_same(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        x = x[:, :-1]  # the last column carries the 3-class label (training only)
        raw = self.clf._raw_predict(x)  # (n, 3)
        z = np.hstack([v, tj.LINEAR_FEAT_SCALE * (x - self.mean) / self.scale])
        if self.binary_lin:
            p = _softmax(raw)
            same = np.log(p[:, 1] + p[:, 2] + 1e-12) - np.log(p[:, 0] + 1e-12)
            same = same + self.lin.decision_function(z)
            return 1.0 / (1.0 + np.exp(-same))
        p = _softmax(raw + self.lin.decision_function(z))
        return p[:, 1] + p[:, 2]


def _softmax(a: np.ndarray) -> np.ndarray:
    a = a - a.max(axis=1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=1, keepdims=True)


def fit3(binary_lin: bool) -> Any:
    def fitter(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.linear_model import LogisticRegression

        y3 = xt[:, -1].astype(int)
        x = xt[:, :-1]
        clf = HistGradientBoostingClassifier(max_depth=depth, learning_rate=0.05, max_iter=iters,
                                             l2_regularization=1.0, random_state=0).fit(x, y3, sample_weight=wt)
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale < 1e-9] = 1.0
        z = np.hstack([v, tj.LINEAR_FEAT_SCALE * (x - mean) / scale])
        lin = LogisticRegression(C=tj.LINEAR_C, max_iter=3000).fit(z, (y3 > 0) if binary_lin else y3, sample_weight=wt)
        return Fitted3(clf, lin, mean, scale, binary_lin)
    return fitter


def strip_last(fitter: Any) -> Any:
    """A binary fitter for data whose last column is the 3-class label."""
    class F(tj.Fitted):
        def p_same(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
            return super().p_same(x[:, :-1], v)

    def f(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
        m = fitter(xt[:, :-1], v, yt, wt, depth, iters)
        return F(m.clf, m.linear, m.projection)
    return f


def with_label(d: dict[str, Any]) -> dict[str, Any]:
    y3 = np.array([CLASSES[p["label"]] for p in d["pairs"]], dtype=float)[:, None]
    return {**d, "x": np.hstack([d["x"], y3]), "xu": np.hstack([d["xu"], np.zeros((len(d["xu"]), 1))])}


# ---------------------------------------------------------------------------- extra features
def _cjk_chars(s: str) -> str:
    import unicodedata

    s = unicodedata.normalize("NFKC", s).lower()
    return "".join(ch for ch in s if not ch.isspace() and ch not in "，。、：；！？,.:;!?()（）\"'“”")


def _grams(s: str, n: int) -> set[str]:
    return {s[i:i + n] for i in range(len(s) - n + 1)} if len(s) >= n else ({s} if s else set())


def extra_ngram(ps: list[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    """Character 1-3-gram overlap (Dice and containment of the shorter) of the texts and of their
    value-masked forms: shared wording in Chinese, where word tokens are unreliable."""
    from memory.policy.reading import read

    rows = []
    for p in ps:
        row = []
        for a, b in ((p["existing"], p["incoming"]), (read(p["existing"]).masked, read(p["incoming"]).masked)):
            ca, cb = _cjk_chars(a), _cjk_chars(b)
            for n in (1, 2, 3):
                ga, gb = _grams(ca, n), _grams(cb, n)
                inter = len(ga & gb)
                row += [2 * inter / max(1, len(ga) + len(gb)), inter / max(1, min(len(ga), len(gb)))]
        rows.append(row)
    names = [f"ng{n}_{k}{'_m' if m else ''}" for m in (0, 1) for n in (1, 2, 3) for k in ("dice", "cont")]
    return np.array(rows), names


VAL_GROUPS = {
    "num": {"num", "percent", "currency", "scale", "decimals", "units"},
    "time": {"date", "year", "month", "day", "time", "duration", "weekday", "period", "frequency"},
    "tz": {"timezone", "city"},
}


def extra_vals(ps: list[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    """Per value group (numbers, dates / times, time zones, everything else): both texts state one
    and they agree / they differ / only one states one."""
    from memory.policy.reading import read

    rows = []
    for p in ps:
        ra, rb = read(p["existing"]), read(p["incoming"])
        ca, cb = ra.classes(), rb.classes()
        row = []
        for g in ("num", "time", "tz", "other"):
            def pick(c: dict[str, frozenset[str]]) -> set[tuple[str, str]]:
                out = set()
                for k, vs in c.items():
                    grp = next((n for n, s in VAL_GROUPS.items() if k in s), "other")
                    if grp == g:
                        out |= {(k, x) for x in vs}
                return out
            a, b = pick(ca), pick(cb)
            both = bool(a) and bool(b)
            row += [float(both and bool(a & b)), float(both and bool(a ^ b)), float(bool(a) != bool(b))]
        rows.append(row)
    names = [f"v_{g}_{k}" for g in ("num", "time", "tz", "other") for k in ("eq", "diff", "one")]
    return np.array(rows), names


# ---------------------------------------------------------------------------- augmentation
def swap_cache(d: dict[str, Any]) -> dict[str, Any]:
    """Features of every labelled pair with its two texts swapped (same label: a restatement,
    an update and a distinct fact stay so read backwards). Cached beside the lab cache."""
    path = jl.CACHE.with_suffix(".swap.pkl")
    if path.exists():
        return pickle.loads(path.read_bytes())
    from memory.policy.judge import PairJudge, TreeModel
    from memory.policy.paraphrase import get_paraphrase_scorer

    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}), paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    sw = [{**p, "existing": p["incoming"], "incoming": p["existing"]} for p in d["pairs"]]
    x, v = tj.featurize(sw, judge)
    out = {"xs": x, "vs": v}
    path.write_bytes(pickle.dumps(out))
    return out


def evaluate4(d: dict[str, Any], fitter: Any, key: str = "kind", aug: dict[str, Any] | None = None,
              aug_w: float = 1.0, cfg: tuple[int, int, float] = (4, 300, 0.1), t: float | None = None,
              groups: list[set[str]] | None = None) -> dict[str, Any]:
    """:func:`judge_lab.oof` with optional augmented rows (``aug``: xs / vs aligned with the pairs);
    an augmented row trains only when its original pair does."""
    x = d["x"]

    def extra(held: np.ndarray, y: np.ndarray) -> jl.Rows | None:
        if aug is None:
            return None
        xa = aug["xs"][~held]
        if xa.shape[1] < x.shape[1]:  # the label column
            xa = np.hstack([xa, x[~held][:, xa.shape[1]:]])
        return xa, aug["vs"][~held], y[~held], np.full(len(xa), aug_w)

    return jl.oof(d, fitter, key=key, groups=groups, t=t, cfg=cfg, extra=extra)


def fit_custom(hk: dict[str, Any], lin: dict[str, float]) -> Any:
    """tune_judge.fit_both with other tree settings (``hk``) and linear settings (C, fs, blend)."""
    def f(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
        from sklearn.ensemble import HistGradientBoostingClassifier

        kw = {"max_depth": depth, "learning_rate": 0.05, "max_iter": iters, "l2_regularization": 1.0,
              "random_state": 0, **hk}
        clf = HistGradientBoostingClassifier(**kw).fit(xt, yt, sample_weight=wt)
        old = (tj.LINEAR_C, tj.LINEAR_FEAT_SCALE, tj.LINEAR_BLEND)
        tj.LINEAR_C, tj.LINEAR_FEAT_SCALE = lin.get("C", old[0]), lin.get("fs", old[1])
        tj.LINEAR_BLEND = lin.get("blend", old[2])
        try:
            return tj.Fitted(clf, tj.fit_linear(xt, v, yt, wt))
        finally:
            tj.LINEAR_C, tj.LINEAR_FEAT_SCALE, tj.LINEAR_BLEND = old
    return f


class FittedProj(tj.Fitted):
    """Trees over the features + a projection of the pair vector; the usual linear part beside."""

    def __init__(self, clf: Any, linear: Any, proj: Any):
        super().__init__(clf, linear)
        self.proj = proj

    def p_same(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        x = x[:, :-1]
        z = self.clf._raw_predict(np.hstack([x, self.proj(v)]))[:, 0]
        if self.linear is not None:
            z = z + np.array([self.linear.log_odds(a, b) for a, b in zip(x, v, strict=True)])
        return 1.0 / (1.0 + np.exp(-z))


def fit_proj(mode: str, k: int) -> Any:
    """``pca``: the pair vector's top-k principal components (fitted on the training rows) as tree
    features; ``stack``: an inner-CV logistic regression over the pair vector alone, its log-odds
    one tree feature (out of fold for the training rows, the full fit for scored rows)."""
    def f(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
        from sklearn.decomposition import PCA
        from sklearn.linear_model import LogisticRegression

        x = xt[:, :-1]
        if mode in ("pca", "pcal"):
            pca = PCA(n_components=k, random_state=0).fit(v[wt == 1] if mode == "pcal" else v)
            proj = pca.transform
            ptr = proj(v)
        else:
            lr = LogisticRegression(C=tj.LINEAR_C, max_iter=3000).fit(v, yt, sample_weight=wt)
            ptr = np.zeros((len(v), 1))
            rng = np.random.RandomState(0)
            fold = rng.randint(0, 5, len(v))
            for i in range(5):
                m = LogisticRegression(C=tj.LINEAR_C, max_iter=3000).fit(v[fold != i], yt[fold != i],
                                                                          sample_weight=wt[fold != i])
                ptr[fold == i, 0] = m.decision_function(v[fold == i])
            proj = lambda vv: lr.decision_function(vv)[:, None]  # noqa: E731
        clf = tj.fit(np.hstack([x, ptr]), yt, wt, depth, iters)
        return FittedProj(clf, tj.fit_linear(x, v, yt, wt), proj)
    return f


def wl_pairvec(d: dict[str, Any]) -> dict[str, Any]:
    """WordLlama's pair vector (|a-b|, a*b of the texts and of their value-masked forms), cached."""
    path = jl.CACHE.with_suffix(".wlv.pkl")
    if path.exists():
        return pickle.loads(path.read_bytes())
    from memory.policy.reading import read
    from memory.policy.static_view import StaticView

    sv = StaticView()
    out = {}
    for part, key in (("pairs", "wv"), ("unrelated", "wvu")):
        rows = []
        for p in d[part]:
            a, b, ma, mb = sv.vectors([p["existing"], p["incoming"], read(p["existing"]).masked,
                                       read(p["incoming"]).masked])
            rows.append(np.concatenate([np.abs(a - b), a * b, np.abs(ma - mb), ma * mb]))
        out[key] = np.array(rows)
    path.write_bytes(pickle.dumps(out))
    return out


class FittedWL(tj.Fitted):
    """tune_judge's model + a projection of WordLlama's pair vector (its columns appended to v)."""

    def __init__(self, inner: Any, pca: Any, n_use: int):
        super().__init__(inner.clf, inner.linear, inner.projection)
        self.pca, self.n_use = pca, n_use

    def p_same(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        x, vu, vw = x[:, :-1], v[:, :self.n_use], v[:, self.n_use:]
        z = self.clf._raw_predict(np.hstack([tj.tree_inputs(x, vu, self.projection), self.pca.transform(vw)]))[:, 0]
        z = z + np.array([self.linear.log_odds(a, b) for a, b in zip(x, vu, strict=True)])
        return 1.0 / (1.0 + np.exp(-z))


def fit_wl(k: int, n_use: int) -> Any:
    def f(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
        from sklearn.decomposition import PCA

        x, vu, vw = xt[:, :-1], v[:, :n_use], v[:, n_use:]
        pca = PCA(n_components=k, random_state=0).fit(vw)
        proj = tj.fit_projection(vu, tj.PROJECTION_DIMS)
        clf = tj.fit(np.hstack([tj.tree_inputs(x, vu, proj), pca.transform(vw)]), yt, wt, depth, iters)
        return FittedWL(tj.Fitted(clf, tj.fit_linear(x, vu, yt, wt), proj), pca, n_use)
    return f


def main(argv: list[str]) -> None:
    d = jl.load_cache(".x4.pkl")
    xp = jl.CACHE.with_suffix(".x4.pkl")  # extra columns computed here are saved back for the next run
    t0 = time.time()
    for what in argv[0].split(","):
        dd = d
        parts = what.split("+")
        for part in parts:
            if part == "ngram":
                dd = jl.with_extra(dd, extra_ngram)
            elif part == "vals":
                dd = jl.with_extra(dd, extra_vals)
            elif part.startswith("drop="):
                names = [f for g in part[5:].split("/") for f in GROUPS.get(g, (g,))]
                idx = [list(FEATURES).index(f) for f in names]
                dd = {**dd, "x": np.delete(dd["x"], idx, axis=1), "xu": np.delete(dd["xu"], idx, axis=1)}
        d.update({k: dd[k] for k in dd if k.startswith("extra_")})
        xp.write_bytes(pickle.dumps({k: d[k] for k in d if k.startswith("extra_")}))
        dd = with_label(dd)
        # tune_judge's own projection (PROJECTION_DIMS): off unless a "k=N" part asks for it
        tj.PROJECTION_DIMS = next((int(q[2:]) for q in parts if q.startswith("k=")), 0)
        if "3cls" in parts:
            fitter = fit3(False)
        elif "3tree" in parts:
            fitter = fit3(True)
        else:
            fitter = strip_last(tj.fit_both)
        hk = {k: (float(v) if "." in v else int(v)) for k, v in
              (q[2:].split("=") for q in parts if q.startswith("h:"))}
        lin = {q.split("=")[0]: float(q.split("=")[1]) for q in parts if q.split("=")[0] in ("C", "fs", "blend")}
        for q in parts:
            if q.startswith("pca") or q.startswith("stack"):
                mode = "pcal" if q.startswith("pcal") else "pca" if q.startswith("pca") else "stack"
                fitter = fit_proj(mode, int(q[len(mode):] or 1))
        if hk or lin:
            fitter = strip_last(fit_custom(hk, lin))
        for q in parts:
            if q.startswith("wl") and q[2:].isdigit():
                w = wl_pairvec(d)
                n_use = dd["v"].shape[1]
                dd = {**dd, "v": np.hstack([dd["v"], w["wv"]]), "vu": np.hstack([dd["vu"], w["wvu"]])}
                fitter = fit_wl(int(q[2:]), n_use)
        aug, aug_w = None, 1.0
        for part in parts:
            if part.startswith("swap"):
                aug = swap_cache(d)
                aug_w = float(part[5:]) if part.startswith("swap=") else 1.0
        if "loao_only" in argv:  # leave-one-author-out alone, its own threshold by the same rule
            r = evaluate4(dd, fitter, key="author", aug=aug, aug_w=aug_w)
            print(f"== {what} loao t={r['t']}\n  " + jl.line("loao", r["cv"]), flush=True)
            continue
        if "loko_only" in argv:  # leave-one-kind-out alone, its own threshold by the same rule
            kinds = sorted({p["kind"] for p in dd["pairs"] if p["source"] == "corpus"})
            r = evaluate4(dd, fitter, aug=aug, aug_w=aug_w, groups=[{k} for k in kinds])
            print(f"== {what} loko t={r['t']}\n  " + jl.line("loko", r["cv"]), flush=True)
            continue
        out = evaluate4(dd, fitter, aug=aug, aug_w=aug_w)
        if "loko" in argv:
            kinds = sorted({p["kind"] for p in dd["pairs"] if p["source"] == "corpus"})
            r = evaluate4(dd, fitter, aug=aug, aug_w=aug_w, t=out["t"], groups=[{k} for k in kinds])
            out["loko"], out["loko_scores"] = r["cv"], r["cv_scores"]
        if "loao" in argv:
            r = evaluate4(dd, fitter, key="author", aug=aug, aug_w=aug_w, t=out["t"])
            out["loao"], out["loao_scores"] = r["cv"], r["cv_scores"]
        jl.report(what, out)
        print("   unrelated merged", round(out["unrel"], 4))
        pickle.dump({k: out[k] for k in out if k.endswith("scores")},
                    open(f"/tmp/j4/scores_{what.replace('/', '_')}.pkl", "wb"))
    print("secs", round(time.time() - t0))


if __name__ == "__main__":
    main(sys.argv[1:])
