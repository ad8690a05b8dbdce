"""Experiment bench for the write-path judge (fit + choose kinds only; the test kinds and the blind
set are never read here).

    python scripts/judge_lab.py cache          # featurize once (current features) -> /tmp/judge3_lab.pkl
    python scripts/judge_lab.py eval base,names+wl [loko]   # 5-fold-by-kind OOF (+ LOKO) per variant

A variant adds columns to the feature matrix (computed from the texts) and/or changes the model
(``names``: memory.policy.names features + name-masked cosine; ``wl``: WordLlama cosines;
``vnames``: name-masked vectors in the linear part; ``C=``: the linear part's C; ``bal``:
class-balanced weights). Every figure is out of fold over the fit + choose kinds, the threshold
chosen by tune_judge's rule. The levers of the 2026-11-26 report were measured with the cache
built from the features *before* names and the static view joined the judge (commit 819101a plus
these two modules; ``JLAB=/tmp/other.pkl`` keeps a second cache, e.g. with the zh verb split).
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memctl import tune_judge as tj  # noqa: E402
from memory.policy.judge import FEATURES, PairJudge, TreeModel  # noqa: E402
from memory.policy.paraphrase import get_paraphrase_scorer  # noqa: E402

CACHE = Path(os.environ.get("JLAB", "/tmp/judge3_lab.pkl"))


def dev_pairs() -> tuple[list[dict[str, Any]], dict[str, str]]:
    import json

    split = json.loads((tj.CORPUS / "split.json").read_text(encoding="utf-8"))
    part = {k: name for name in ("fit", "choose", "test") for k in split[name]}
    pairs = [p for p in tj.load_corpus() if part.get(p["kind"], "fit") != "test"]
    return pairs, part


def make_cache() -> None:
    pairs, part = dev_pairs()
    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}), paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    unrelated = tj.unrelated_pairs(pairs)
    (x, v), (xu, vu) = tj.featurize(pairs, judge), tj.featurize(unrelated, judge)
    CACHE.write_bytes(pickle.dumps({"pairs": pairs, "unrelated": unrelated, "x": x, "v": v, "xu": xu, "vu": vu,
                                    "features": FEATURES}))
    print("cached", len(pairs), len(unrelated))


def evaluate(d: dict[str, Any], cfg: tuple[int, int, float] = (4, 300, 0.1), fitter: Callable[..., Any] | None = None,
             loko: bool = True, loao: bool = False) -> dict[str, Any]:
    pairs, unrelated, x, v, xu, vu = d["pairs"], d["unrelated"], d["x"], d["v"], d["xu"], d["vu"]
    fitter = fitter or tj.fit_both
    depth, iters, w = cfg
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    kind = np.array([p["kind"] for p in pairs])
    kind_u = np.array([p["kind"] for p in unrelated])
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    corpus_u = np.array([p["of"] == "corpus" for p in unrelated])
    folds = tj._folds(pairs, sorted(set(kind[corpus])))

    def run_groups(groups: list[set[str]], key_arr: np.ndarray, key_arr_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, su = np.full(len(pairs), np.nan), np.full(len(unrelated), np.nan)
        for ks in groups:
            held, held_u = corpus & np.isin(key_arr, list(ks)), corpus_u & np.isin(key_arr_u, list(ks))
            xt, yt, wt = tj._train(x[~held], y[~held], xu[~held_u], w)
            clf = fitter(xt, np.vstack([v[~held], vu[~held_u]]), yt, wt, depth, iters)
            s[held], su[held_u] = tj.scores(clf, x[held], v[held]), tj.scores(clf, xu[held_u], vu[held_u])
        return s, su

    ev_pairs = [p for p, k in zip(pairs, corpus, strict=True) if k]
    s, su = run_groups(folds, kind, kind_u)
    t = max(tj.threshold_for(s[corpus], y[corpus], tj.MAX_FALSE_MERGE),
            tj.threshold_for(su[corpus_u], np.zeros(int(corpus_u.sum()), dtype=int), tj.MAX_UNRELATED_MERGE))
    out = {"t": round(t, 4), "cv": tj._slice(ev_pairs, s[corpus], t), "cv_scores": s}
    if loko:
        s2, su2 = run_groups([{k} for k in sorted(set(kind[corpus]))], kind, kind_u)
        out["loko"] = tj._slice(ev_pairs, s2[corpus], t)
        out["loko_scores"] = s2
        out["loko_unrel"] = float(np.mean(su2[corpus_u] >= t))
    if loao:
        auth = np.array([str(p.get("author")) for p in pairs])
        auth_u = np.array([str(p.get("author")) for p in unrelated])
        s3, _ = run_groups([{a} for a in sorted(set(auth[corpus]))], auth, auth_u)
        out["loao"] = tj._slice(ev_pairs, s3[corpus], t)
    return out


Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def oof(d: dict[str, Any], fitter: Callable[..., Any], key: str = "kind", groups: list[set[str]] | None = None,
        t: float | None = None, cfg: tuple[int, int, float] = (4, 300, 0.1),
        extra: Callable[[np.ndarray, np.ndarray], Rows | None] | None = None) -> dict[str, Any]:
    """Out-of-fold scores by tune_judge's protocol, one group of ``key`` values held out at a time
    (default: 5 folds by kind for key "kind", else one group per value). ``extra(held, y)`` may
    return more training rows (x, v, y, weight) for a fold, e.g. augmented pairs whose source pair
    is in the training part; ``t`` fixes the threshold (else chosen by tune_judge's rule)."""
    pairs, unrelated, x, v, xu, vu = d["pairs"], d["unrelated"], d["x"], d["v"], d["xu"], d["vu"]
    depth, iters, w = cfg
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    kv = np.array([str(p.get(key)) for p in pairs])
    kv_u = np.array([str(p.get(key)) for p in unrelated])
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    corpus_u = np.array([p["of"] == "corpus" for p in unrelated])
    if groups is None:
        groups = tj._folds(pairs, sorted(set(kv[corpus]))) if key == "kind" else [{g} for g in sorted(set(kv[corpus]))]
    s, su = np.full(len(pairs), np.nan), np.full(len(unrelated), np.nan)
    for ks in groups:
        held, held_u = corpus & np.isin(kv, list(ks)), corpus_u & np.isin(kv_u, list(ks))
        xt, yt, wt = tj._train(x[~held], y[~held], xu[~held_u], w)
        vt = np.vstack([v[~held], vu[~held_u]])
        more = extra(held, y) if extra is not None else None
        if more is not None:
            xa, va, ya, wa = more
            xt, yt, wt, vt = np.vstack([xt, xa]), np.concatenate([yt, ya]), np.concatenate([wt, wa]), np.vstack([vt, va])
        clf = fitter(xt, vt, yt, wt, depth, iters)
        s[held], su[held_u] = tj.scores(clf, x[held], v[held]), tj.scores(clf, xu[held_u], vu[held_u])
    ev_pairs = [p for p, k in zip(pairs, corpus, strict=True) if k]
    if t is None:
        t = max(tj.threshold_for(s[corpus], y[corpus], tj.MAX_FALSE_MERGE),
                tj.threshold_for(su[corpus_u], np.zeros(int(corpus_u.sum()), dtype=int), tj.MAX_UNRELATED_MERGE))
    return {"t": round(t, 4), "cv": tj._slice(ev_pairs, s[corpus], t), "cv_scores": s,
            "unrel": float(np.mean(su[corpus_u] >= t))}


def line(name: str, r: dict[str, Any]) -> str:
    bl = r["by_lang"]
    langs = " | ".join(f"{lg} {bl[lg]['duplicate_merge_rate']}/{bl[lg]['conflict_resolution_rate']}/"
                       f"{bl[lg]['distinct_false_merge_rate']}" for lg in ("en", "zh", "mixed") if lg in bl)
    return (f"{name:10s} {r['duplicate_merge_rate']}/{r['conflict_resolution_rate']}/"
            f"{r['distinct_false_merge_rate']} unsure {r['unsure_share']}  [{langs}]")


def report(name: str, out: dict[str, Any]) -> None:
    print(f"== {name} t={out['t']}")
    for k in ("cv", "loko", "loao"):
        if k in out:
            print("  " + line(k, out[k]))
    sys.stdout.flush()


# ---------------------------------------------------------------------------- variants
def _embed_all(texts: list[str]) -> dict[str, np.ndarray]:
    from memory.embeddings import get_embedder
    from memory.policy.judge import JUDGE_EMBEDDING_MODEL

    uniq = list(dict.fromkeys(texts))
    rows = get_embedder(JUDGE_EMBEDDING_MODEL).embed_documents(uniq)
    return {t: np.asarray(r, dtype=float) for t, r in zip(uniq, rows, strict=True)}


def extra_names(ps: list[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    from memory.policy.names import NAME_FEATURES, mask_names, name_features

    views = [mask_names(t) for p in ps for t in (p["existing"], p["incoming"])]
    e = _embed_all(views)
    rows = []
    for p in ps:
        f = name_features(p["existing"], p["incoming"])
        a, b = e[mask_names(p["existing"])], e[mask_names(p["incoming"])]
        rows.append([f[k] for k in NAME_FEATURES] + [float(a @ b)])
    return np.array(rows), list(NAME_FEATURES) + ["cos_nmask"]


def with_extra(d: dict[str, Any], fn: Callable[..., Any]) -> dict[str, Any]:
    key = "extra_" + fn.__name__
    if key not in d:
        xa, names_ = fn(d["pairs"])
        xb, _ = fn(d["unrelated"])
        d[key] = (xa, xb, names_)
    xa, xb, _ = d[key]
    return {**d, "x": np.hstack([d["x"], xa]), "xu": np.hstack([d["xu"], xb])}


def vec_names(d: dict[str, Any]) -> dict[str, Any]:
    """Pair vector extended with the name-masked views' |a-b| and a*b."""
    from memory.policy.names import mask_names

    out = {}
    for part, vk in (("pairs", "v"), ("unrelated", "vu")):
        ps = d[part]
        e = _embed_all([mask_names(t) for p in ps for t in (p["existing"], p["incoming"])])
        extra = np.array([np.concatenate([np.abs(e[mask_names(p["existing"])] - e[mask_names(p["incoming"])]),
                                          e[mask_names(p["existing"])] * e[mask_names(p["incoming"])]]) for p in ps])
        out[vk] = np.hstack([d[vk], extra])
    return {**d, **out}


def extra_wordllama(ps: list[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    import wordllama
    from memory.policy.reading import read

    wl = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent)
    texts = list(dict.fromkeys(t for p in ps for t in (p["existing"], p["incoming"])))
    masked = [read(t).masked for t in texts]
    ev = wl.embed(texts, norm=True)
    em = wl.embed(masked, norm=True)
    idx = {t: i for i, t in enumerate(texts)}
    rows = []
    for p in ps:
        i, j = idx[p["existing"]], idx[p["incoming"]]
        rows.append([float(ev[i] @ ev[j]), float(em[i] @ em[j])])
    return np.array(rows), ["cos_wl", "cos_wl_masked"]



def load_cache(extra_suffix: str) -> dict:
    """The cached features, with the extra columns saved under ``extra_suffix`` when present."""
    d = pickle.loads(CACHE.read_bytes())
    xp = CACHE.with_suffix(extra_suffix)
    if xp.exists():
        d.update(pickle.loads(xp.read_bytes()))
    return d

def main(argv: list[str]) -> None:
    if argv[0] == "cache":
        make_cache()
        return
    d = load_cache(".x.pkl")
    xp = CACHE.with_suffix(".x.pkl")  # extra columns computed here are saved back for the next run
    t0 = time.time()
    for what in argv[1].split(","):
        dd = d
        parts = what.split("+")
        for part in parts:
            if part == "names":
                dd = with_extra(dd, extra_names)
            elif part == "wl":
                dd = with_extra(dd, extra_wordllama)
            elif part == "wlparts":
                dd = with_extra(dd, extra_wl_parts)
            elif part == "nonm":  # drop the encoder's name-masked cosine
                k = list(FEATURES).index("cos_nmask")
                dd = {**dd, "x": np.delete(dd["x"], k, axis=1), "xu": np.delete(dd["xu"], k, axis=1)}
            elif part == "wlnm":
                dd = with_extra(dd, extra_wl_nmask)
            elif part == "vnames":
                dd = vec_names(dd)
            elif part.startswith("C="):
                tj.LINEAR_C = float(part[2:])
        d.update({k: dd[k] for k in dd if k.startswith("extra_")})
        xp.write_bytes(pickle.dumps({k: d[k] for k in d if k.startswith("extra_")}))
        fitter = None
        if "bal" in parts:
            def fitter(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
                wt = wt.copy()
                lab = wt == 1  # labelled pairs (unrelated ones keep their own weight)
                wt[lab & (yt == 0)] *= (yt[lab] == 1).sum() / max(1, (yt[lab] == 0).sum())
                return tj.fit_both(xt, v, yt, wt, depth, iters)
        if "mono" in parts:
            def fitter(xt: np.ndarray, v: np.ndarray, yt: np.ndarray, wt: np.ndarray, depth: int, iters: int) -> Any:
                from sklearn.ensemble import HistGradientBoostingClassifier

                up = {"cos", "cos_para", "cos_masked", "cos_nmask", "cos_wl", "cos_wl_masked", "al_f"}
                cst = [1 if f in up else 0 for f in FEATURES] + [0] * (xt.shape[1] - len(FEATURES))
                clf = HistGradientBoostingClassifier(max_depth=depth, learning_rate=0.05, max_iter=iters,
                                                     l2_regularization=1.0, random_state=0,
                                                     monotonic_cst=cst).fit(xt, yt, sample_weight=wt)
                return tj.Fitted(clf, tj.fit_linear(xt, v, yt, wt))
        report(what, evaluate(dd, loko="loko" in argv, fitter=fitter))
    print("secs", round(time.time() - t0))



def extra_wl_parts(ps: list[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    """WordLlama cosines of the subjects and of the value parts (text after the predicate)."""
    from memory.policy.reading import read
    from memory.policy.static_view import StaticView

    sv = StaticView()
    rows = []
    for p in ps:
        ra, rb = read(p["existing"]), read(p["incoming"])
        sa, sb, qa, qb = sv.vectors([ra.subject or ra.text, rb.subject or rb.text, ra.rest or ra.text,
                                     rb.rest or rb.text])
        rows.append([float(sa @ sb), float(qa @ qb)])
    return np.array(rows), ["cos_wl_subject", "cos_wl_rest"]


def extra_wl_nmask(ps: list[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    """WordLlama cosine of the name-masked texts."""
    from memory.policy.names import mask_names
    from memory.policy.static_view import StaticView

    sv = StaticView()
    return np.array([[sv.cosine(mask_names(p["existing"]), mask_names(p["incoming"]))] for p in ps]), ["cos_wl_nmask"]


if __name__ == "__main__":
    main(sys.argv[1:])
