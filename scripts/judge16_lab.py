"""Judge16 (issue 11): whole-vector interaction features (the InferSent / SNLI recipe) stacked into
the write judge's trees, and the four scored authors af..ai as fitting data.

    OMP_NUM_THREADS=1 J14_CACHE=/tmp/judge15/base.pkl python scripts/judge14_lab.py cache   # 27 authors
    OMP_NUM_THREADS=1 python scripts/judge16_lab.py cache31     # + af, ag, ah, ai (31 authors)
    OMP_NUM_THREADS=1 python scripts/judge16_lab.py minilm      # MiniLM vectors of every English text
    OMP_NUM_THREADS=1 J16_SET=27 J16_VARIANTS=base,ix,ixm python scripts/judge16_lab.py compare
    OMP_NUM_THREADS=1 J16_SET=27 J16_VARIANTS=base,ix python scripts/judge16_lab.py loao
    OMP_NUM_THREADS=1 J16_VARIANT=ix J16_CS=0.1,0.3,1,3 python scripts/judge16_lab.py cvc   # C by author CV
    OMP_NUM_THREADS=1 J16_T_base=0.983128 J16_T_ixm=0.987278 python scripts/judge16_lab.py test  # test kinds, blind
    OMP_NUM_THREADS=1 python scripts/judge16_lab.py cost        # CPU a write would add

Variants: ``base`` (main's features), ``ix`` (stacked LR over the USE-m3 pair vector), ``ixm`` (+ MiniLM's
pair vector for English pairs), ``mlp`` / ``mlpm`` (an MLP instead), ``bs`` (BERTScore-style token
alignment from MiniLM's last_hidden_state), ``ix+bs``. J16_C = the regression's C (1 was chosen by
``cvc``), J16_SEED = another assignment of authors to folds. Results (none shipped): the judge16 entry of
``memctl/tune_judge_history.py``.

The interaction model: a multinomial logistic regression (duplicate / update / distinct) over the
pair vector the judge already computes (``memory.policy.judge_linear.pair_vector``: |u-v| and u*v of
the USE-m3 vectors of the two texts and of their value-masked forms; variant ``ixm`` adds |u-v|, u*v
of MiniLM's vectors for pairs with no CJK on either side, zeros otherwise). Its two log-ratios
log P(dup)/P(distinct) and log P(update)/P(distinct) are fed to the trees as stacked features, made
**out of author** at every level: a training row's value comes from a regression fitted on folds of
authors that exclude the row's author (inner 4 folds by author inside each training set), a scored
row's from a regression fitted on the whole training set, which never holds the scored author.

Only fit + choose kinds are fitted or scored by ``compare`` (5 folds by author, tune_judge's folds and
threshold rule at the shipped size: depth 3, 300 trees, unrelated weight .1, one threshold at the
3.75% target). ``loao`` = tune_judge's leave-one-author-out (every pair of the held-out author, test
kinds included, at the threshold ``compare``'s choice gives that variant). Unscored held-out authors
are never read.
"""

from __future__ import annotations

import json
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

BASE27 = Path(os.environ.get("J14_CACHE", "/tmp/judge15/base.pkl"))
OUT = Path("/tmp/judge16")
C31 = OUT / "c31.pkl"
MINILM = OUT / "minilm.pkl"
NEW_AUTHORS = ("af", "ag", "ah", "ai")  # scored once in stop 27; may be fitting data now
CFG = (3, 300, 0.1)
TARGET = 0.0375
IX_C = float(os.environ.get("J16_C", "0.3"))
INNER = 4
if os.environ.get("J16_SEED"):  # another assignment of authors to the 5 folds (noise of the comparison)
    tj.CV_SEED = int(os.environ["J16_SEED"])
SEED_TAG = f"_s{os.environ['J16_SEED']}" if os.environ.get("J16_SEED") else ""


def load_31() -> list[dict[str, Any]]:
    """tune_judge.load_corpus as if af..ai were listed under split.json's retired_heldout."""
    pairs = tj.load_corpus()
    old = [p for p in pairs if p["source"] != "corpus"]
    corpus = [p for p in pairs if p["source"] == "corpus"]
    for a in NEW_AUTHORS:
        for p in tj._read(tj.HELDOUT / f"author_{a}.jsonl"):
            p.setdefault("kind", str(p["namespace"]).split("/")[0])
            p["source"] = "corpus"
            corpus.append(p)
    return corpus + old


def cache31() -> None:
    from memory.policy.judge import FEATURES, PairJudge, TreeModel
    from memory.policy.paraphrase import get_paraphrase_scorer

    os.environ["TUNE_JUDGE_FEATURES"] = str(BASE27)  # pairs already featurized are read from there
    t0 = time.time()
    pairs = load_31()
    unrelated = tj.unrelated_pairs(pairs)
    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}), paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    x, v = tj.featurize(pairs, judge)
    xu, vu = tj.featurize(unrelated, judge)
    OUT.mkdir(parents=True, exist_ok=True)
    C31.write_bytes(pickle.dumps({"pairs": pairs, "unrelated": unrelated, "x": x, "v": v, "xu": xu, "vu": vu,
                                  "features": tj.MODEL_FEATURES}))
    print(f"cached {len(pairs)} pairs, {len(unrelated)} unrelated in {time.time() - t0:.0f}s", file=sys.stderr)


def _latin(a: str, b: str) -> bool:
    from memory.policy import dedupe

    return not (dedupe._CJK.search(a) or dedupe._CJK.search(b))


def minilm() -> None:
    """MiniLM of every text of an English pair (both sides without CJK), both caches: the pooled
    vector (as ParaphraseScorer.embed computes it) and the token outputs (last_hidden_state, rows
    L2-normalised, [CLS] / [SEP] dropped; float16) for the BERTScore-style alignment."""
    from memory.policy.paraphrase import get_paraphrase_scorer

    para = get_paraphrase_scorer("all-MiniLM-L6-v2")
    assert para is not None
    para.load()
    texts: set[str] = set()
    for path in (BASE27, C31):
        if path.exists():
            d = pickle.loads(path.read_bytes())
            for p in d["pairs"] + d["unrelated"]:
                if _latin(p["existing"], p["incoming"]):
                    texts |= {p["existing"], p["incoming"]}
    t0 = time.time()
    vecs, toks = {}, {}
    for t in sorted(texts):
        vecs[t], toks[t] = _minilm_tokens(para, t)
    MINILM.write_bytes(pickle.dumps(vecs))
    (OUT / "minilm_tokens.pkl").write_bytes(pickle.dumps(toks))
    print(f"{len(vecs)} texts in {time.time() - t0:.0f}s", file=sys.stderr)


def _minilm_tokens(para: Any, text: str) -> tuple[np.ndarray, np.ndarray]:
    enc = para._tokenizer.encode(text)
    ids = np.array([enc.ids], dtype=np.int64)
    mask = np.array([enc.attention_mask], dtype=np.int64)
    hidden = para._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                      "token_type_ids": np.zeros_like(ids)})[0][0]
    pooled = hidden.sum(axis=0) / max(1, len(enc.ids))
    tok = hidden[1:-1] if len(hidden) > 2 else hidden
    tok = tok / np.maximum(np.linalg.norm(tok, axis=1, keepdims=True), 1e-9)
    return (pooled / (np.linalg.norm(pooled) or 1.0)).astype(np.float32), tok.astype(np.float16)


BS_FEATURES = ("bs_f", "bs_lo", "bs_hi", "bs_worst")


def bertscore(ta: np.ndarray, tb: np.ndarray) -> list[float]:
    """Greedy token matching (BERTScore without idf): precision / recall as the mean best match
    of each side's tokens, their F1, the lower / higher of the two, and the worst-matched token of
    either side (a token with no counterpart: another entity or a new value)."""
    sim = ta.astype(np.float32) @ tb.astype(np.float32).T
    ra, rb = sim.max(axis=1), sim.max(axis=0)
    p, r = float(ra.mean()), float(rb.mean())
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return [f, min(p, r), max(p, r), float(min(ra.min(), rb.min()))]


def load(which: str) -> dict[str, Any]:
    from judge14_lab import annotate  # scripts/ is on sys.path when this file runs

    d = annotate(pickle.loads((BASE27 if which == "27" else C31).read_bytes()))
    d["y3"] = np.array([{"distinct": 0, "duplicate": 1, "conflict": 2}[p["label"]] for p in d["pairs"]])
    d["corpus"] = np.array([p["source"] == "corpus" for p in d["pairs"]])
    d["corpus_u"] = np.array([p["of"] == "corpus" for p in d["unrelated"]])
    if MINILM.exists():
        mv = pickle.loads(MINILM.read_bytes())

        def mpv(ps: list[dict[str, Any]]) -> np.ndarray:
            out = np.zeros((len(ps), 768), dtype=float)
            for i, p in enumerate(ps):
                a, b = mv.get(p["existing"]), mv.get(p["incoming"])
                if a is not None and b is not None and _latin(p["existing"], p["incoming"]):
                    out[i] = np.concatenate([np.abs(a - b), a * b])
            return out

        d["m"], d["mu"] = mpv(d["pairs"]), mpv(d["unrelated"])
    tokf = OUT / "minilm_tokens.pkl"
    if tokf.exists():
        toks = pickle.loads(tokf.read_bytes())

        def bs(ps: list[dict[str, Any]]) -> np.ndarray:
            out = np.full((len(ps), len(BS_FEATURES)), -1.0)  # not an English pair: -1 (no missing values in
            for i, p in enumerate(ps):                          # the exported trees)
                a, b = toks.get(p["existing"]), toks.get(p["incoming"])
                if a is not None and b is not None and _latin(p["existing"], p["incoming"]):
                    out[i] = bertscore(a, b)
            return out

        d["bs"], d["bsu"] = bs(d["pairs"]), bs(d["unrelated"])
    return d


# ---- the interaction model -------------------------------------------------------------------------

def _ix_inputs(d: dict[str, Any], variant: str, rows: np.ndarray, rows_u: np.ndarray) -> np.ndarray:
    z = np.vstack([d["v"][rows], d["vu"][rows_u]])
    if variant.endswith("m"):
        z = np.hstack([z, np.vstack([d["m"][rows], d["mu"][rows_u]])])
    return z


MLP_HIDDEN = int(os.environ.get("J16_HIDDEN", "64"))
MLP_ALPHA = float(os.environ.get("J16_ALPHA", "1.0"))
KIND = "lr"  # set by the variant: "lr" (ix*) or "mlp" (mlp*)


def _fit_ix(z: np.ndarray, y3: np.ndarray, w: np.ndarray) -> Any:
    if KIND == "mlp":
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        m = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(MLP_HIDDEN,), alpha=MLP_ALPHA,
                                                          max_iter=60, tol=1e-3, random_state=0))
        return m.fit(z, y3, mlpclassifier__sample_weight=w)
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=IX_C, max_iter=500, tol=1e-3).fit(z, y3, sample_weight=w)


def _ratios(lr: Any, z: np.ndarray) -> np.ndarray:
    """log P(dup)/P(distinct), log P(update)/P(distinct) (classes 0, 1, 2)."""
    if KIND == "mlp":
        s = np.log(np.clip(lr.predict_proba(z), 1e-9, 1.0))
    else:
        s = lr.decision_function(z)
    return np.column_stack([s[:, 1] - s[:, 0], s[:, 2] - s[:, 0]])


def stack(d: dict[str, Any], variant: str, tr: np.ndarray, tr_u: np.ndarray, sc: np.ndarray, sc_u: np.ndarray,
          w_u: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stacked columns for the training rows (tr, tr_u: out of author, inner folds) and for the
    scored rows (sc, sc_u: a regression fitted on all training rows)."""
    a_tr, a_tru = d["author"][tr], d["author_u"][tr_u]
    z = _ix_inputs(d, variant, tr, tr_u)
    y3 = np.concatenate([d["y3"][tr], np.zeros(int(tr_u.sum()), dtype=int)])
    w = np.concatenate([np.ones(int(tr.sum())), np.full(int(tr_u.sum()), w_u)])
    groups = np.concatenate([a_tr, a_tru])
    f_tr = np.zeros((len(z), 2))
    for fa in tj._folds([], sorted(set(groups)), INNER):
        out = np.isin(groups, list(fa))
        f_tr[out] = _ratios(_fit_ix(z[~out], y3[~out], w[~out]), z[out])
    lr = _fit_ix(z, y3, w)
    f_sc = _ratios(lr, _ix_inputs(d, variant, sc, sc_u))
    n = int(tr.sum())
    m = int(sc.sum())
    return f_tr[:n], f_tr[n:], f_sc[:m], f_sc[m:]


def fit_score(d: dict[str, Any], variant: str, tr: np.ndarray, tr_u: np.ndarray, sc: np.ndarray,
              sc_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    depth, iters, w = CFG
    x, xu = d["x"], d["xu"]
    xt_p, xt_u, xs_p, xs_u = x[tr], xu[tr_u], x[sc], xu[sc_u]
    if "bs" in variant:
        xt_p, xt_u = np.hstack([xt_p, d["bs"][tr]]), np.hstack([xt_u, d["bsu"][tr_u]])
        xs_p, xs_u = np.hstack([xs_p, d["bs"][sc]]), np.hstack([xs_u, d["bsu"][sc_u]])
        variant = variant.replace("+bs", "").replace("bs", "base")
    global KIND
    KIND = "mlp" if variant.startswith("mlp") else "lr"
    if variant != "base":
        f_tr, f_tru, f_sc, f_scu = stack(d, variant, tr, tr_u, sc, sc_u, w)
        xt_p, xt_u = np.hstack([xt_p, f_tr]), np.hstack([xt_u, f_tru])
        xs_p, xs_u = np.hstack([xs_p, f_sc]), np.hstack([xs_u, f_scu])
    xt, yt, wt = tj._train(xt_p, d["y"][tr], xt_u, w)
    clf = tj.fit_both(xt, np.vstack([d["v"][tr], d["vu"][tr_u]]), yt, wt, depth, iters)
    su = tj.scores(clf, xs_u, d["vu"][sc_u]) if sc_u.any() else np.zeros(0)
    return tj.scores(clf, xs_p, d["v"][sc]), su


def oof(d: dict[str, Any], variant: str) -> tuple[np.ndarray, np.ndarray]:
    """5 folds by author over the fit + choose corpus pairs (tune_judge.run's oof)."""
    pairs = d["pairs"]
    dev_m, dev_u = d["part"] != "test", d["part_u"] != "test"
    folds = tj._folds(pairs, sorted(set(d["author"][dev_m & d["corpus"]])))
    s, su = np.full(len(pairs), np.nan), np.full(len(d["unrelated"]), np.nan)
    for fa in folds:
        out, out_u = np.isin(d["author"], list(fa)), np.isin(d["author_u"], list(fa))
        held, held_u = d["corpus"] & dev_m & out, d["corpus_u"] & dev_u & out_u
        s[held], su[held_u] = fit_score(d, variant, dev_m & ~out, dev_u & ~out_u, held, held_u)
    return s, su


def _wl_line(pairs: list[dict[str, Any]], s: np.ndarray, t: float) -> str:
    wl = tj.write_langs(pairs)
    outs = tj.outcomes(s, t, pairs)
    parts = []
    for lg in ("en", "zh", "mixed"):
        r = tj.rates(o for o, k in zip(outs, wl == lg, strict=True) if k)
        parts.append(f"{lg} {r['duplicate_merge_rate']}/{r['conflict_resolution_rate']}/"
                     f"{r['distinct_false_merge_rate']}")
    return " ".join(parts)


def choose(d: dict[str, Any], s: np.ndarray, su: np.ndarray) -> tuple[float, dict[str, Any], str]:
    ev, ev_u = ~np.isnan(s), ~np.isnan(su)
    ev_pairs = [p for p, k in zip(d["pairs"], ev, strict=True) if k]
    t = tj.choose_thresholds(s[ev], d["y"][ev], tj.write_langs(ev_pairs), su[ev_u], TARGET,
                             tj.MAX_UNRELATED_MERGE)["single"]
    r = tj.rates(tj.outcomes(s[ev], t, ev_pairs))
    nested = tj.nested_by_author(ev_pairs, s[ev], su[ev_u], d["author_u"][ev_u], "single", TARGET,
                                 tj.MAX_UNRELATED_MERGE)
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score(d["y"][ev], s[ev])
    line = (f"t={t:.6f} AUC {auc:.4f} oof {r['duplicate_merge_rate']}/{r['conflict_resolution_rate']}/"
            f"{r['distinct_false_merge_rate']} | {_wl_line(ev_pairs, s[ev], t)}\n   nested "
            f"{nested['duplicate_merge_rate']}/{nested['conflict_resolution_rate']}/"
            f"{nested['distinct_false_merge_rate']}")
    return float(t), {"oof": r, "nested": {k: nested[k] for k in ("duplicate_merge_rate", "conflict_resolution_rate",
                                                               "distinct_false_merge_rate")}, "auc": auc}, line


def compare() -> None:
    which = os.environ.get("J16_SET", "27")
    d = load(which)
    res = {}
    for variant in os.environ.get("J16_VARIANTS", "base,ix").split(","):
        t0 = time.time()
        s, su = oof(d, variant)
        t, info, line = choose(d, s, su)
        res[variant] = {"threshold": t, **info}
        np.savez(OUT / f"oof_{which}_{variant}_C{IX_C}{SEED_TAG}.npz", s=s, su=su)
        print(f"[{which} authors{SEED_TAG}] {variant:5s} C={IX_C} {line}  ({time.time() - t0:.0f}s)", flush=True)
    (OUT / f"compare_{which}_C{IX_C}{SEED_TAG}.json").write_text(json.dumps(res, indent=1))


def cvc() -> None:
    """C of the interaction regression by 5-fold cross-validation by author over the fit + choose
    pairs (+ their unrelated pairs, weight .1): out-of-author log-loss of the three classes and AUC
    of duplicate-vs-rest / update-vs-rest on the labelled pairs."""
    from sklearn.metrics import log_loss, roc_auc_score

    d = load(os.environ.get("J16_SET", "27"))
    variant = os.environ.get("J16_VARIANT", "ix")
    dev, dev_u = d["part"] != "test", d["part_u"] != "test"
    z = _ix_inputs(d, variant, dev, dev_u)
    y3 = np.concatenate([d["y3"][dev], np.zeros(int(dev_u.sum()), dtype=int)])
    w = np.concatenate([np.ones(int(dev.sum())), np.full(int(dev_u.sum()), CFG[2])])
    groups = np.concatenate([d["author"][dev], d["author_u"][dev_u]])
    lab = np.concatenate([np.ones(int(dev.sum()), bool), np.zeros(int(dev_u.sum()), bool)])
    global IX_C, KIND, MLP_ALPHA
    KIND = "mlp" if variant.startswith("mlp") else "lr"
    for c in [float(c) for c in os.environ.get("J16_CS", "0.1,0.3,1,3").split(",")]:
        IX_C = MLP_ALPHA = c  # mlp: c is the L2 penalty alpha
        t0 = time.time()
        prob = np.zeros((len(z), 3))
        for fa in tj._folds([], sorted(set(groups))):
            out = np.isin(groups, list(fa))
            prob[out] = _fit_ix(z[~out], y3[~out], w[~out]).predict_proba(z[out])
        yl = y3[lab]
        print(f"C={c}: log-loss {log_loss(yl, prob[lab], labels=[0, 1, 2]):.4f} AUC dup-vs-rest "
              f"{roc_auc_score(yl == 1, prob[lab, 1]):.4f} update-vs-rest {roc_auc_score(yl == 2, prob[lab, 2]):.4f} "
              f"same-vs-distinct {roc_auc_score(yl > 0, 1 - prob[lab, 0]):.4f}  ({time.time() - t0:.0f}s)", flush=True)


def test() -> None:
    """The test kinds (every fitting author's) and the blind set, scored once per variant by a model
    fitted on the fit + choose kinds (+ older sets), at the threshold compare chose for it (J16_T_<variant>)."""
    from memory.policy.judge import FEATURES, PairJudge, TreeModel
    from memory.policy.paraphrase import get_paraphrase_scorer

    d = load(os.environ.get("J16_SET", "27"))
    para = get_paraphrase_scorer("all-MiniLM-L6-v2")
    judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}), paraphrase=para)
    blind = tj._read(tj.BLIND)
    for p in blind:
        p.update(author="blind", source="blind", kind="blind:" + str(p["namespace"]).split("/")[0])
    xb, vb = tj.featurize(blind, judge)
    mb = np.zeros((len(blind), 768))
    for i, p in enumerate(blind):
        if _latin(p["existing"], p["incoming"]):
            a, b = para.embed(p["existing"]), para.embed(p["incoming"])
            mb[i] = np.concatenate([np.abs(a - b), a * b])
    d["pairs"] = d["pairs"] + blind
    d["x"], d["v"], d["m"] = np.vstack([d["x"], xb]), np.vstack([d["v"], vb]), np.vstack([d["m"], mb])
    d["y"] = np.concatenate([d["y"], [0 if p["label"] == "distinct" else 1 for p in blind]])
    d["y3"] = np.concatenate([d["y3"], [{"distinct": 0, "duplicate": 1, "conflict": 2}[p["label"]] for p in blind]])
    d["part"] = np.concatenate([d["part"], ["blind"] * len(blind)])
    d["author"] = np.concatenate([d["author"], ["blind"] * len(blind)])
    d["corpus"] = np.concatenate([d["corpus"], np.zeros(len(blind), bool)])
    tr, tr_u = np.isin(d["part"], ["fit", "choose"]), d["part_u"] != "test"
    no_u = np.zeros(len(d["unrelated"]), bool)
    for variant in os.environ.get("J16_VARIANTS", "base,ixm").split(","):
        t = float(os.environ[f"J16_T_{variant}"])
        for name, sc in (("test kinds", d["part"] == "test"), ("blind", d["part"] == "blind")):
            s, _ = fit_score(d, variant, tr, tr_u, sc, no_u)
            sel = [p for p, k in zip(d["pairs"], sc, strict=True) if k]
            r = tj.rates(tj.outcomes(s, t, sel))
            print(f"{variant:5s} {name:10s} t={t} n={len(sel)} {r['duplicate_merge_rate']}/"
                  f"{r['conflict_resolution_rate']}/{r['distinct_false_merge_rate']} | {_wl_line(sel, s, t)}",
                  flush=True)


def cost() -> None:
    """CPU per pair of what the candidates add at write time, on three corpus authors' pairs (J16_AUTHORS):
    the interaction features (one (3 x D) matrix product over the pair vector the judge already has,
    + MiniLM's pair vector for English pairs), the MiniLM token outputs (the same ONNX run as the pooled
    vector: measured as a full run per text, what a write pays for a text not in the process's cache)
    and the greedy token matching."""
    from memory.policy.paraphrase import get_paraphrase_scorer

    authors = os.environ.get("J16_AUTHORS", "a,b,c").split(",")
    pairs = [p for a in authors for p in tj._read(tj.CORPUS / f"author_{a}.jsonl")]
    eng = [p for p in pairs if _latin(p["existing"], p["incoming"])]
    para = get_paraphrase_scorer("all-MiniLM-L6-v2")
    assert para is not None
    para.load()
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 2048 + 768))
    t0 = time.process_time()
    for p in eng:
        _minilm_tokens(para, p["existing"]), _minilm_tokens(para, p["incoming"])
    run_ms = (time.process_time() - t0) * 1000 / (2 * len(eng))
    toks = [(_minilm_tokens(para, p["existing"])[1], _minilm_tokens(para, p["incoming"])[1]) for p in eng]
    reps = 20
    t0 = time.process_time()
    for _ in range(reps):
        for a, b in toks:
            bertscore(a, b)
    bs_ms = (time.process_time() - t0) * 1000 / (reps * len(toks))
    pv = rng.normal(size=2048)
    t0 = time.process_time()
    for _ in range(reps):
        for a, b in toks:
            va, vb = a.mean(axis=0), b.mean(axis=0)
            w @ np.concatenate([pv, np.abs(va - vb), va * vb])
    ix_ms = (time.process_time() - t0) * 1000 / (reps * len(toks))
    print(f"authors {authors}: {len(eng)} English pairs of {len(pairs)}; CPU ms: MiniLM run per text {run_ms:.2f}, "
          f"token matching per pair {bs_ms:.3f}, interaction features per pair {ix_ms:.3f}", flush=True)


def loao() -> None:
    which = os.environ.get("J16_SET", "27")
    d = load(which)
    pairs = d["pairs"]
    for variant in os.environ.get("J16_VARIANTS", "base,ix").split(","):
        t0 = time.time()
        f = OUT / f"oof_{which}_{variant}_C{IX_C}.npz"
        if f.exists():
            z = np.load(f)
            s_cv, su_cv = z["s"], z["su"]
        else:
            s_cv, su_cv = oof(d, variant)
        t = float(os.environ.get("J16_T", "0")) or choose(d, s_cv, su_cv)[0]
        s = np.full(len(pairs), np.nan)
        everyone, everyone_u = np.ones(len(pairs), bool), np.ones(len(d["unrelated"]), bool)
        for a in sorted(set(d["author"][d["corpus"]])):
            held, held_u = d["corpus"] & (d["author"] == a), d["corpus_u"] & (d["author_u"] == a)
            s[held], _ = fit_score(d, variant, everyone & ~held, everyone_u & ~held_u, held,
                                   np.zeros(len(d["unrelated"]), bool))
        m = ~np.isnan(s)
        sel = [p for p, k in zip(pairs, m, strict=True) if k]
        r = tj.rates(tj.outcomes(s[m], t, sel))
        if which == "31":  # the 27 authors both sets share, comparable with J16_SET=27
            m27 = m & ~np.isin(d["author"], list(NEW_AUTHORS))
            s27 = [p for p, k in zip(pairs, m27, strict=True) if k]
            r27 = tj.rates(tj.outcomes(s[m27], t, s27))
            print(f"   of which the 27 earlier authors n={len(s27)} {r27['duplicate_merge_rate']}/"
                  f"{r27['conflict_resolution_rate']}/{r27['distinct_false_merge_rate']} | {_wl_line(s27, s[m27], t)}",
                  flush=True)
        np.savez(OUT / f"loao_{which}_{variant}_C{IX_C}.npz", s=s)
        print(f"[{which} authors] LOAO {variant:5s} C={IX_C} t={t:.6f} n={len(sel)} {r['duplicate_merge_rate']}/"
              f"{r['conflict_resolution_rate']}/{r['distinct_false_merge_rate']} | {_wl_line(sel, s[m], t)}"
              f"  ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "compare"
    commands = {"cache31": cache31, "minilm": minilm, "compare": compare, "loao": loao, "cvc": cvc, "cost": cost,
                "test": test}
    commands[cmd]()
