"""Judge15 (issue 11): does the CC-CEDICT gloss view (memctl/judge_gloss.py) help the write judge?

    OMP_NUM_THREADS=1 J14_CACHE=/tmp/judge15/base.pkl python scripts/judge14_lab.py cache   # base features
    OMP_NUM_THREADS=1 python scripts/judge15_lab.py gloss      # gloss features of every cached pair
    OMP_NUM_THREADS=1 python scripts/judge15_lab.py extra      # unmatched gloss terms + soft matches
    OMP_NUM_THREADS=1 python scripts/judge15_lab.py compare    # out of author, base vs base + gloss subsets
    OMP_NUM_THREADS=1 J15_LOAO="base=;+soft=soft_pairs,soft_disjoint,soft_shared,soft_disjoint_subj" \
        python scripts/judge15_lab.py loao                     # leave-one-author-out, variants
    OMP_NUM_THREADS=1 python scripts/judge15_lab.py latency    # CPU ms a write spends on the gloss view

Only the fit + choose kinds of the 27 fitting authors are fitted or scored here (5 folds by author, as
tune_judge chooses its threshold; the test kinds, the blind set and every unscored held-out author are
not read). Model: tune_judge's at the shipped size (depth 3, 300 trees, unrelated weight .1). Figures at
the one threshold tune_judge's rule gives (at most 3.75% of distinct pairs merged out of author, overall
and in each write-time language, and 1% of unrelated pairs), so every variant is compared at equal
false merges.
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
os.environ.setdefault("OMP_NUM_THREADS", "1")

from memctl import tune_judge as tj  # noqa: E402

BASE = Path(os.environ.get("J14_CACHE", "/tmp/judge15/base.pkl"))
GLOSS = BASE.parent / "gloss.pkl"
CFG = (3, 300, 0.1)
TARGET = 0.0375


def gloss_cache() -> None:
    from memctl.judge_gloss import GLOSS_FEATURES, gloss_features
    from memory.policy.paraphrase import get_paraphrase_scorer

    d = pickle.loads(BASE.read_bytes())
    para = get_paraphrase_scorer("all-MiniLM-L6-v2")
    t0 = time.time()
    out = {}
    for name in ("pairs", "unrelated"):
        rows = []
        for p in d[name]:
            f = gloss_features(p["existing"], p["incoming"], para, 0.0, 0.0)
            rows.append([f[k] for k in GLOSS_FEATURES])
        out[name] = np.array(rows, dtype=float)
        print(f"{name}: {len(rows)} in {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    GLOSS.write_bytes(pickle.dumps({"features": GLOSS_FEATURES, **out}))


def extra_cache() -> None:
    """More columns under test, into extra.pkl (read by compare / loao after the gloss columns): the
    gloss terms each side leaves unmatched (subject / value part) and the soft matches checked through
    CC-CEDICT (memctl.judge_gloss.soft_features, the judge's encoder)."""
    from memory.policy import gloss as gl
    from memory.policy.judge import FEATURES, PairJudge, TreeModel

    d = pickle.loads(BASE.read_bytes())
    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}))

    def unmatched(a: str, b: str) -> list[float]:
        ga, gb = gl.gloss(a), gl.gloss(b)
        usa, usb = len(ga.subject - gb.terms), len(gb.subject - ga.terms)
        ura, urb = len(ga.rest - gb.terms), len(gb.rest - ga.terms)
        return [min(usa, 5), min(usb, 5), min(ura, 5), min(urb, 5), min(usa + usb, 8), float(ura > 0 and urb > 0),
                float(usa == 0 and usb == 0)]

    out: dict[str, Any] = {"features": ("g_un_subj_a", "g_un_subj_b", "g_un_rest_a", "g_un_rest_b", "g_un_subj",
                                        "g_new_value_both", "g_subj_matched") + gl.SOFT_FEATURES}
    for name in ("pairs", "unrelated"):
        judge.prime([t for p in d[name] for t in (p["existing"], p["incoming"])])
        rows = []
        for p in d[name]:
            f = gl.soft_features(p["existing"], p["incoming"], judge._embed)
            rows.append(unmatched(p["existing"], p["incoming"]) + [f[k] for k in gl.SOFT_FEATURES])
        out[name] = np.array(rows, dtype=float)
    (BASE.parent / "extra.pkl").write_bytes(pickle.dumps(out))


def _load() -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ["J14_CACHE"] = str(BASE)
    import judge14_lab as j14

    j14.CACHE = BASE
    d = j14.load()
    g = pickle.loads(GLOSS.read_bytes())
    d["gnames"], d["g"], d["gu"] = g["features"], g["pairs"], g["unrelated"]
    extra = BASE.parent / "extra.pkl"  # more gloss-view columns under test (J15_EXTRA), same pair order
    if extra.exists():
        e = pickle.loads(extra.read_bytes())
        d["gnames"] = tuple(d["gnames"]) + tuple(e["features"])
        d["g"], d["gu"] = np.hstack([d["g"], e["pairs"]]), np.hstack([d["gu"], e["unrelated"]])
    return d


def oof(d: dict[str, Any], x: np.ndarray, xu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """5-fold by author scores of the fit + choose corpus pairs (tune_judge.run's oof)."""
    pairs = d["pairs"]
    dev_m, dev_u = d["part"] != "test", d["part_u"] != "test"
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    corpus_u = np.array([p["of"] == "corpus" for p in d["unrelated"]])
    author, author_u = d["author"], d["author_u"]
    folds = tj._folds(pairs, sorted(set(author[dev_m & corpus])))
    depth, iters, w = CFG
    s, su = np.full(len(pairs), np.nan), np.full(len(d["unrelated"]), np.nan)
    for fa in folds:
        out, out_u = np.isin(author, list(fa)), np.isin(author_u, list(fa))
        held, held_u = corpus & dev_m & out, corpus_u & dev_u & out_u
        tr, tr_u = dev_m & ~out, dev_u & ~out_u
        xt, yt, wt = tj._train(x[tr], d["y"][tr], xu[tr_u], w)
        clf = tj.fit_both(xt, np.vstack([d["v"][tr], d["vu"][tr_u]]), yt, wt, depth, iters)
        s[held], su[held_u] = tj.scores(clf, x[held], d["v"][held]), tj.scores(clf, xu[held_u], d["vu"][held_u])
    return s, su


def report(d: dict[str, Any], name: str, s: np.ndarray, su: np.ndarray) -> dict[str, Any]:
    pairs = d["pairs"]
    ev = ~np.isnan(s)
    ev_u = ~np.isnan(su)
    ev_pairs = [p for p, k in zip(pairs, ev, strict=True) if k]
    langs = tj.write_langs(ev_pairs)
    t = tj.choose_thresholds(s[ev], d["y"][ev], langs, su[ev_u], TARGET, tj.MAX_UNRELATED_MERGE)["single"]
    r = tj._slice(ev_pairs, s[ev], t)
    nested = tj.nested_by_author(ev_pairs, s[ev], su[ev_u], d["author_u"][ev_u], "single", TARGET,
                                 tj.MAX_UNRELATED_MERGE)
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score(d["y"][ev], s[ev])
    langs_s = " ".join(f"{lg} {x['duplicate_merge_rate']}/{x['conflict_resolution_rate']}/"
                       f"{x['distinct_false_merge_rate']}" for lg, x in r["by_lang"].items())
    nl = " ".join(f"{lg} {x['duplicate_merge_rate']}/{x['conflict_resolution_rate']}/"
                  f"{x['distinct_false_merge_rate']}" for lg, x in nested["by_lang"].items())
    print(f"{name:34s} t={t:.4f} AUC {auc:.4f} oof {r['duplicate_merge_rate']}/{r['conflict_resolution_rate']}/"
          f"{r['distinct_false_merge_rate']} | {langs_s}\n{'':34s} nested {nested['duplicate_merge_rate']}/"
          f"{nested['conflict_resolution_rate']}/{nested['distinct_false_merge_rate']} | {nl}", flush=True)
    return {"t": t, "auc": auc, "oof": r, "nested": nested}


def compare() -> None:
    d = _load()
    names = list(d["gnames"])
    variants = {"base": []}
    want = os.environ.get("J15_VARIANTS", "all,para,overlap")
    if "all" in want:
        variants["+gloss all"] = names
    if "para" in want:
        variants["+gloss_para,masked"] = ["gloss_para", "gloss_para_masked"]
    if "overlap" in want:
        variants["+gloss overlap"] = ["gloss_jaccard", "gloss_contain", "gloss_subject_jaccard", "gloss_rest_jaccard"]
    if "nomask" in want:
        variants["+gloss all but masked"] = [n for n in names if n != "gloss_para_masked"]
    for spec in os.environ.get("J15_CUSTOM", "").split(";"):  # name=col,col;...
        if "=" in spec:
            name, cols = spec.split("=")
            variants[name] = cols.split(",")
    if "nobase" in want:
        variants.pop("base")
    out = {}
    for name, cols in variants.items():
        idx = [names.index(c) for c in cols]
        x = np.hstack([d["x"], d["g"][:, idx]])
        xu = np.hstack([d["xu"], d["gu"][:, idx]])
        t0 = time.time()
        s, su = oof(d, x, xu)
        out[name] = report(d, name, s, su)
        np.savez(BASE.parent / f"oof_{name.replace(' ', '_').replace(',', '_')}.npz", s=s, su=su)
        print(f"  ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)


def loao() -> None:
    """Leave-one-author-out as tune_judge reports it: each corpus author's pairs (fit + choose + test
    kinds) scored by a model fitted on every other pair (older sets included), judged at the threshold
    the 5-fold-by-author choice gives that variant (J15_LOAO: name=cols;... as J15_CUSTOM, "base" = none)."""
    d = _load()
    names = list(d["gnames"])
    pairs = d["pairs"]
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    corpus_u = np.array([p["of"] == "corpus" for p in d["unrelated"]])
    for spec in os.environ.get("J15_LOAO", "base=").split(";"):
        name, cols = spec.split("=")
        idx = [names.index(c) for c in cols.split(",") if c]
        x, xu = np.hstack([d["x"], d["g"][:, idx]]), np.hstack([d["xu"], d["gu"][:, idx]])
        s_cv, su_cv = oof(d, x, xu)
        ev, ev_u = ~np.isnan(s_cv), ~np.isnan(su_cv)
        ev_pairs = [p for p, k in zip(pairs, ev, strict=True) if k]
        t = tj.choose_thresholds(s_cv[ev], d["y"][ev], tj.write_langs(ev_pairs), su_cv[ev_u], TARGET,
                                 tj.MAX_UNRELATED_MERGE)["single"]
        depth, iters, w = CFG
        s = np.full(len(pairs), np.nan)
        for a in sorted(set(d["author"][corpus])):
            held, held_u = corpus & (d["author"] == a), corpus_u & (d["author_u"] == a)
            xt, yt, wt = tj._train(x[~held], d["y"][~held], xu[~held_u], w)
            clf = tj.fit_both(xt, np.vstack([d["v"][~held], d["vu"][~held_u]]), yt, wt, depth, iters)
            s[held] = tj.scores(clf, x[held], d["v"][held])
        m = ~np.isnan(s)
        sel = [p for p, k in zip(pairs, m, strict=True) if k]
        r = tj._slice(sel, s[m], t)
        wl = tj.write_langs(sel)
        by_wl = {lg: tj.rates(o for o, k in zip(tj.outcomes(s[m], t, sel), wl == lg, strict=True) if k)
                 for lg in ("en", "zh", "mixed")}
        np.save(BASE.parent / f"loao_{name}.npy", s)
        fmt = lambda x: f"{x['duplicate_merge_rate']}/{x['conflict_resolution_rate']}/{x['distinct_false_merge_rate']}"  # noqa: E731
        print(f"LOAO {name:24s} t={t:.6f} n={r['n']} {fmt(r)} | file lang: "
              + " ".join(f"{lg} {fmt(x)}" for lg, x in r["by_lang"].items())
              + " | write-time lang: " + " ".join(f"{lg} {fmt(x)}" for lg, x in by_wl.items()), flush=True)


def latency() -> None:
    """CPU ms the gloss view adds to one write: the incoming text's rendering (cold) and its two MiniLM
    runs (gloss and masked gloss; an English text's own gloss vector is already computed for cos_para,
    so only its masked form is new), over the first 200 corpus texts of each language. A stored
    neighbour's gloss and vectors were computed by its own write (the judge primes them)."""
    from memory.lru import VectorLRU
    from memory.policy import gloss as gl
    from memory.policy.paraphrase import ParaphraseScorer

    d = pickle.loads(BASE.read_bytes())
    para = ParaphraseScorer()
    para.similarity("warm up", "warm up")
    gl.gloss("预热一下词典")
    by: dict[str, list[float]] = {}
    for p in d["pairs"]:
        lg, t = p["lang"], p["incoming"]
        if len(by.get(lg, [])) >= 200 or p["source"] != "corpus":
            continue
        gl._CACHE.clear()
        para._cache = VectorLRU(4096)
        if gl._HAN.search(t) is None:
            para.embed(t)  # computed anyway for cos_para
        t0 = time.process_time()
        g = gl.gloss(t)
        para.embed(g.text)
        para.embed(g.masked)
        by.setdefault(lg, []).append((time.process_time() - t0) * 1000)
    for lg, xs in by.items():
        a = np.array(xs)
        print(f"{lg}: n={len(a)} CPU ms/write p50 {np.percentile(a, 50):.2f} p95 {np.percentile(a, 95):.2f} "
              f"mean {a.mean():.2f}")


if __name__ == "__main__":
    {"gloss": gloss_cache, "compare": compare, "latency": latency, "loao": loao, "extra": extra_cache}[sys.argv[1]]()
