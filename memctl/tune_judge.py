"""Fit the write-path judge (``memory/policy/judge_model.json``) and report it honestly.

    python -m memctl.tune_judge            # fit, choose, report; writes the model file
    python -m memctl.tune_judge --check    # refit and report; write nothing
    python -m memctl.tune_judge --json     # the whole report as JSON

Data: ``tests/data/dedupe_corpus/author_*.jsonl`` — 1,188 pairs written by nine independent
authors over 30 kinds of memory, en / zh / mixed — and the two older sets
(``dedupe_pairs.jsonl``, ``dedupe_dev.jsonl``). ``tests/data/dedupe_corpus/split.json``, drawn at
random before the pairs were read, assigns each kind to

* **fit**: the trees are fitted on these kinds (plus the two older sets);
* **choose**: the model size and the merge threshold are chosen on these kinds (threshold: the
  lowest P(same) that merges at most 3% of their distinct pairs; target is 5%);
* **test**: reported only.

The labelled distinct pairs are all *alike* (the hard case, on purpose); a real write is also
compared with unrelated memories of the same user. So the fit also sees **unrelated pairs**:
each labelled pair's existing text against two texts drawn (seeded) from other kinds, weighted
down (the weight is chosen with the model size); the threshold must also merge at most 1% of
the choose kinds' unrelated pairs.

Besides the test kinds, leave-one-kind-out (each kind predicted by a model fitted on every
other pair) and leave-one-author-out show over-fitting to a kind or to one author's phrasing;
``tests/data/dedupe_blind.jsonl`` (a tenth author, the nine kinds of the independent set) is
scored last, as totals only, by the shipped model. Needs scikit-learn (a test extra): the
shipped model is plain JSON, evaluated with numpy.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory.policy.judge import FEATURES, MODEL_FILE, PairJudge, TreeModel
from memory.policy.paraphrase import get_paraphrase_scorer

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "dedupe_corpus"
BLIND = ROOT / "tests" / "data" / "dedupe_blind.jsonl"
OLD_SETS = (ROOT / "tests" / "data" / "dedupe_pairs.jsonl", ROOT / "tests" / "data" / "dedupe_dev.jsonl")
GRID = [(depth, iters, w) for depth in (2, 3, 4) for iters in (150, 300, 500) for w in (0.1, 0.4)]
MAX_FALSE_MERGE = 0.02  # on the choose kinds: unseen kinds ran ~1.5-2x higher in leave-one-kind-out; target .05
MAX_UNRELATED_MERGE = 0.01  # on the choose kinds' unrelated pairs
UNSURE_BAND = 1.0  # log-odds either side of the threshold: the pairs an LLM is asked about


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_corpus() -> list[dict[str, Any]]:
    pairs: list[dict[str, Any]] = []
    for f in sorted(CORPUS.glob("author_*.jsonl")):
        for p in _read(f):
            p.setdefault("kind", str(p["namespace"]).split("/")[0])
            p["source"] = "corpus"
            pairs.append(p)
    for f in OLD_SETS:
        for p in _read(f):
            p["kind"] = "old:" + str(p["namespace"]).split("/")[0]
            p["author"] = "old"
            p["source"] = f.stem
            pairs.append(p)
    return pairs


def unrelated_pairs(pairs: Sequence[dict[str, Any]], per_pair: int = 2, seed: int = 0) -> list[dict[str, Any]]:
    """Distinct pairs of unrelated memories: a pair's existing text against texts of other kinds."""
    rng = random.Random(seed)
    by_kind: dict[str, list[str]] = defaultdict(list)
    for p in pairs:
        by_kind[p["kind"].removeprefix("old:")] += [p["existing"], p["incoming"]]
    kinds = sorted(by_kind)
    out = []
    for p in pairs:
        own = p["kind"].removeprefix("old:")
        for _ in range(per_pair):
            other = rng.choice([k for k in kinds if k != own])
            out.append({"existing": p["existing"], "incoming": rng.choice(by_kind[other]), "label": "distinct",
                        "kind": p["kind"], "source": "unrelated", "of": p["source"], "lang": p["lang"],
                        "author": p.get("author")})
    return out


def featurize(pairs: Sequence[dict[str, Any]], judge: PairJudge) -> np.ndarray:
    judge.prime([t for p in pairs for t in (p["existing"], p["incoming"])])
    rows = [judge.features(p["existing"], p["incoming"]) for p in pairs]
    return np.array([[r[f] for f in FEATURES] for r in rows], dtype=float)


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None, depth: int, iters: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_depth=depth, learning_rate=0.05, max_iter=iters,
                                          l2_regularization=1.0, random_state=0).fit(x, y, sample_weight=weight)


def export(clf: Any, threshold: float, info: dict[str, Any]) -> TreeModel:
    """The fitted ensemble as a :class:`TreeModel` (checked to predict what sklearn predicts)."""
    trees = []
    for (pred,) in clf._predictors:  # binary: one tree per iteration
        n = pred.nodes
        trees.append(np.column_stack([np.where(n["is_leaf"], -1, n["feature_idx"]), n["num_threshold"],
                                      n["left"], n["right"], n["value"]]).astype(float))
    return TreeModel(FEATURES, float(np.ravel(clf._baseline_prediction)[0]), tuple(trees), round(threshold, 6),
                     UNSURE_BAND, info)


def scores(model: Any, x: np.ndarray) -> np.ndarray:
    if isinstance(model, TreeModel):
        return np.array([model.p_same(row) for row in x])
    return model.predict_proba(x)[:, 1]


def threshold_for(s: np.ndarray, y: np.ndarray, max_false: float) -> float:
    """The lowest threshold that merges at most ``max_false`` of the distinct pairs (y == 0)."""
    dist = np.sort(s[y == 0])[::-1]
    k = int(np.floor(max_false * len(dist)))
    return float(min(dist[k] + 1e-6, 0.999)) if k < len(dist) else 0.5


def outcomes(s: np.ndarray, t: float, pairs: Sequence[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Per pair (label, merged). The eval's meaning: duplicate/conflict ok = merged (the incoming
    statement then becomes current); distinct "ok" = wrongly merged."""
    return [(p["label"], bool(v >= t)) for p, v in zip(pairs, s, strict=True)]


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


def _slice(pairs: Sequence[dict[str, Any]], s: np.ndarray, t: float) -> dict[str, Any]:
    outs = outcomes(s, t, pairs)
    return {**rates(outs), "by_lang": _by(pairs, outs, "lang"), "by_kind": _by(pairs, outs, "kind"),
            "unsure_share": round(float(np.mean(np.abs(_logit(s) - _logit(t)) < UNSURE_BAND)), 3) if len(s) else 0.0}


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def _held_out(pairs: Sequence[dict[str, Any]], x: np.ndarray, y: np.ndarray, xu: np.ndarray,
              unrelated: Sequence[dict[str, Any]], cfg: tuple[int, int, float], t: float, key: str) -> dict[str, Any]:
    """Each group of the corpus predicted by a model fitted on every other pair (and the other
    groups' unrelated pairs)."""
    depth, iters, w = cfg
    s = np.full(len(pairs), np.nan)
    su = np.full(len(unrelated), np.nan)
    for g in sorted({str(p.get(key)) for p in pairs if p["source"] == "corpus"}):
        held = np.array([p["source"] == "corpus" and str(p.get(key)) == g for p in pairs])
        held_u = np.array([p["of"] == "corpus" and str(p.get(key)) == g for p in unrelated])
        clf = fit(*_train(x[~held], y[~held], xu[~held_u], w), depth, iters)
        s[held] = scores(clf, x[held])
        su[held_u] = scores(clf, xu[held_u])
    m = ~np.isnan(s)
    sel = [p for p, k in zip(pairs, m, strict=True) if k]
    return {**_slice(sel, s[m], t), "unrelated_merged": round(float(np.mean(su[~np.isnan(su)] >= t)), 4)}


def _train(x: np.ndarray, y: np.ndarray, xu: np.ndarray, w: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.vstack([x, xu]), np.concatenate([y, np.zeros(len(xu), dtype=int)]),
            np.concatenate([np.ones(len(x)), np.full(len(xu), w)]))


def run(write: bool = True) -> dict[str, Any]:
    pairs = load_corpus()
    split = json.loads((CORPUS / "split.json").read_text(encoding="utf-8"))
    part = {k: name for name in ("fit", "choose", "test") for k in split[name]}
    unknown = sorted({p["kind"] for p in pairs if p["source"] == "corpus" and p["kind"] not in part})
    if unknown:
        raise SystemExit(f"kinds missing from split.json: {unknown}")
    dummy = TreeModel(FEATURES, 0.0, (), 0.5, UNSURE_BAND, {})
    judge = PairJudge(dummy, paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    unrelated = unrelated_pairs(pairs)
    x, xu = featurize(pairs, judge), featurize(unrelated, judge)
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    where = np.array([part.get(p["kind"], "fit") for p in pairs])  # the older sets are fit data
    where_u = np.array([part.get(p["kind"], "fit") for p in unrelated])
    fit_m, cho_m, test_m = where == "fit", where == "choose", where == "test"
    cho_pairs = [p for p, m in zip(pairs, cho_m, strict=True) if m]

    def threshold(clf: Any) -> float:
        t = threshold_for(scores(clf, x[cho_m]), y[cho_m], MAX_FALSE_MERGE)
        su = scores(clf, xu[where_u == "choose"])
        return max(t, threshold_for(su, np.zeros(len(su), dtype=int), MAX_UNRELATED_MERGE))

    grid, best = [], None
    for depth, iters, w in GRID:
        clf = fit(*_train(x[fit_m], y[fit_m], xu[where_u == "fit"], w), depth, iters)
        t = threshold(clf)
        r = rates(outcomes(scores(clf, x[cho_m]), t, cho_pairs))
        score = (r["duplicate_merge_rate"] or 0) + (r["conflict_resolution_rate"] or 0)
        grid.append({"max_depth": depth, "max_iter": iters, "unrelated_weight": w, "threshold": round(t, 4), **r})
        if best is None or score > best[0]:
            best = (score, (depth, iters, w), clf, t)
    assert best is not None
    _, cfg, clf, t = best
    depth, iters, w = cfg
    info = {"max_depth": depth, "max_iter": iters, "learning_rate": 0.05, "unrelated_weight": w,
            "n_fit": int(fit_m.sum()), "n_unrelated_fit": int((where_u == "fit").sum()),
            "fitted_on": "fit kinds + dedupe_pairs.jsonl + dedupe_dev.jsonl + their unrelated pairs",
            "threshold_from": f"choose kinds: at most {MAX_FALSE_MERGE:.0%} of their distinct pairs and "
                              f"{MAX_UNRELATED_MERGE:.0%} of their unrelated pairs merged",
            "split": {k: split[k] for k in ("fit", "choose", "test")}}
    model = export(clf, t, info)
    if not np.allclose(scores(model, x[:50]), scores(clf, x[:50]), atol=1e-6):
        raise SystemExit("exported trees do not reproduce the fitted model")

    report: dict[str, Any] = {"grid": grid, "chosen": {"max_depth": depth, "max_iter": iters, "unrelated_weight": w,
                                                       "merge_threshold": model.merge_threshold}}
    for name, m in (("fit", fit_m), ("choose", cho_m), ("test", test_m)):
        sel = [p for p, k in zip(pairs, m, strict=True) if k]
        mu = where_u == name
        report[name] = {**_slice(sel, scores(model, x[m]), t),
                        "unrelated_merged": round(float(np.mean(scores(model, xu[mu]) >= t)), 4)}
    report["leave_one_kind_out"] = _held_out(pairs, x, y, xu, unrelated, cfg, t, "kind")
    report["leave_one_author_out"] = _held_out(pairs, x, y, xu, unrelated, cfg, t, "author")
    if BLIND.exists():
        blind = _read(BLIND)
        report["blind"] = _slice(blind, scores(model, featurize(blind, judge)), t)
    if write:
        MODEL_FILE.write_text(json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n",
                              encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--check", action="store_true", help="refit and report; write nothing")
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = ap.parse_args(argv)
    report = run(write=not args.check)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    for name in ("fit", "choose", "test", "leave_one_kind_out", "leave_one_author_out", "blind"):
        if name not in report:
            continue
        r = report[name]
        print(f"{name:22s} n={r['n']:4d} dup {r['duplicate_merge_rate']} conf {r['conflict_resolution_rate']} "
              f"false {r['distinct_false_merge_rate']} unsure {r['unsure_share']} "
              f"unrelated merged {r.get('unrelated_merged', '-')}")
        for lang, lr in r["by_lang"].items():
            print(f"    {lang:8s} n={lr['n']:4d} dup {lr['duplicate_merge_rate']} "
                  f"conf {lr['conflict_resolution_rate']} false {lr['distinct_false_merge_rate']}")
    print("chosen", report["chosen"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
