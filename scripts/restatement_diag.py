"""Does the reranker only learn the label convention? A diagnostic on the FITTING sets only.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/restatement_diag.py \
        [--cache /tmp/diag29_emb.pkl] [--sets-cache /tmp/diag29_sets.pkl] [--quick] [--no-prefix47]

On the fresh sets zh_en_10/11, whose authors list both the user's statement and the assistant's
restatement as evidence, stop 29's reranker gains MRR only when the first evidence turn counts. The
hypothesis: the fitting sets mostly label the statement alone, so the model learned to put the
statement above its restatement. This script re-scores the out-of-set ranks of the fitting sets
(memctl.tune_rerank's: LoCoMo tuning conv-26/30/41/42/43 and tests/data/zh_en ... zh_en_11 since stop 30,
when zh_en_10/11 became fitting sets; never the held-out sets) with "restatement-augmented" labels: the
evidence plus the turn right after an evidence turn in the same session when their content-term Dice
overlap (memory.rerank_supersede._slot_words) is >= .25 (memctl.tune_rerank.restatements / augment,
which the reranker is fitted on since stop 30). Since stop 32 the script reads tune_rerank's current rule
(restatements start at a user turn: the assistant's next turn at Dice >= .05, RESTATE_DICE), so its
figures differ from the ones recorded with the .25 rule.

Models (memctl.tune_rerank's fit / narrow, each set ranked by a model fitted without it; models are
fitted on the ORIGINAL labels, as shipped, and only the scoring labels change):
  a  stop 28's configuration: 38 features, fitted on its 11 sets (a set it never saw: all 11);
  b  stop 29's shipped configuration: 49 features, its 14 sets (zh_en_10/11: all 14);
  c  the 47-feature prefix of b (no echo_prev / echo_next), the same 14 sets.
``--quick``: hold out only the zh/en sets and conv-26 / conv-30 (every fit still uses all other sets).
Nothing is written to memory/.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memctl import tune_rerank as tr  # noqa: E402
from memctl.evaluation import load_dataset  # noqa: E402
from memory import scoring  # noqa: E402
from memory.query import RerankWeights, plan_query, rerank  # noqa: E402
from memory.rerank import FEATURES, candidate_features  # noqa: E402
from memory.settings import MemorySettings, ScoringSettings  # noqa: E402

STOP28_SETS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43",
               "zh_en", "zh_en_2", "zh_en_3", "zh_en_4", "zh_en_5", "zh_en_6")
STOP29_SETS = (*STOP28_SETS, "zh_en_7", "zh_en_8", "zh_en_9")
QUICK_HELD = ("conv-26", "conv-30") + tr.ZH_NAMES
WIDTH_38 = tr.WIDTH_49 - 11  # stop 27/28's 38
WIDTH_49 = tr.WIDTH_49
WIDTH_47 = WIDTH_49 - 2  # without echo_prev / echo_next (the last two superseded features)
assert FEATURES[WIDTH_47:WIDTH_49] == ("echo_prev", "echo_next"), FEATURES[WIDTH_47:WIDTH_49]


def augment(data: Path, convs: tuple[str, ...] | None) -> dict[tuple[str, str], frozenset[str]]:
    """(conversation, question id) -> evidence plus restating next turns (memctl.tune_rerank.augment)."""
    turns, questions = load_dataset(data)
    restated = {conv: tr.restatements(ts) for conv, ts in turns.items()}
    return {(q.conversation_id, q.question_id): tr.augment(q.evidence, restated[q.conversation_id])
            for q in questions if convs is None or q.conversation_id in convs}


def load(emb: Any, locomo: Path) -> dict[str, list[dict[str, Any]]]:
    """Per set, per question: features of the head (as tune_rerank.featurise) and both label vectors."""
    from memctl.tune_retrieval import candidates

    cfg = ScoringSettings()
    weights = RerankWeights.from_scoring(cfg)
    cw = MemorySettings(path=":memory:").context_weight
    sources: list[tuple[str, Path, tuple[str, ...] | None]] = [(c, locomo, (c,)) for c in tr.LOCOMO_TUNE]
    sources += [(k, d, None) for k, d in tr.ZH_DIRS.items()]
    lo = candidates(locomo, tr.LOCOMO_TUNE, emb, 2, cw, fixed_ids=True)
    sets: dict[str, list[dict[str, Any]]] = {}
    for name, data, convs in sources:
        aug = augment(data, convs)
        cands = [c for c in lo if c[0].conversation_id == name] if convs else candidates(data, None, emb, 2, cw,
                                                                                          fixed_ids=True)
        rows = []
        for q, now, cs in cands:
            plan = plan_query(q.question, now)
            hits = rerank(scoring.score_candidates(cs, now, cfg, q.question), plan, weights)
            head = hits[:tr.DEPTH]
            ids = [h.record.metadata.extra.get("dia_id") for h in head]
            ev, ev_aug = set(q.evidence), aug[(q.conversation_id, q.question_id)]
            x = candidate_features(head, plan, {c.record.id: c.keyword_score for c in cs}, hits)
            rows.append({"cat": q.category, "x": x, "y": np.array([i in ev for i in ids], dtype=float),
                         "y_aug": np.array([i in ev_aug for i in ids], dtype=float),
                         "gained": len(ev_aug) > len(ev), "n_ev": len(ev), "n_ev_aug": len(ev_aug)})
        sets[name] = rows
        print(f"loaded {name}: {len(rows)} questions, {sum(r['gained'] for r in rows)} gain an extra evidence turn",
              flush=True)
    return sets


def as_queries(sets: dict[str, list[dict[str, Any]]]) -> dict[str, list[tr.Query]]:
    return {k: [tr.Query(k, r["cat"], r["x"], r["y"], None) for r in rows] for k, rows in sets.items()}


def rank_of(z: np.ndarray, y: np.ndarray) -> int | None:
    order = sorted(range(len(z)), key=lambda i: (-z[i], i))
    return next((pos for pos, i in enumerate(order, 1) if y[i]), None)


def oos_scores(queries: dict[str, list[tr.Query]], width: int, train_on: tuple[str, ...] | None,
               held: tuple[str, ...], cache: dict[Any, Any]) -> dict[str, list[np.ndarray]]:
    """Per held set, each question's head scores from a model fitted on the other sets (of train_on)."""
    nq = tr.narrow(queries, width)
    out = {}
    for h in held:
        key = (width, frozenset(k for k in nq if k != h and (train_on is None or k in train_on)))
        if key not in cache:
            t0 = time.time()
            cache[key] = tr.fit([q for k in sorted(key[1]) for q in nq[k]], tr.GRID[0], 1.0)
            print(f"  fit width {width} without {h}: {time.time() - t0:.0f} s", flush=True)
        clf = cache[key]
        qs = nq[h]
        z = clf._raw_predict(np.vstack([q.x for q in qs]))[:, 0] if qs else np.zeros(0)
        parts, i = [], 0
        for q in qs:
            parts.append(z[i:i + len(q.y)])
            i += len(q.y)
        out[h] = parts
    return out


def table(sets: dict[str, list[dict[str, Any]]], scores: dict[str, dict[str, list[np.ndarray]]],
          held: tuple[str, ...]) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for lab in ("y", "y_aug"):
        for cfg, sc in scores.items():
            per = {}
            pool_lo, pool_zh = [], []
            for h in held:
                ranks = [rank_of(z, r[lab]) for z, r in zip(sc[h], sets[h], strict=True)]
                per[h] = tr.metrics(ranks)
                (pool_lo if h in tr.LOCOMO_TUNE else pool_zh).extend(ranks)
            per["LoCoMo pooled"] = tr.metrics(pool_lo)
            per["zh/en pooled"] = tr.metrics(pool_zh)
            zh = [h for h in held if h in tr.ZH_DIRS]
            per["zh/en mean MRR"] = float(np.mean([per[h]["MRR"] for h in zh]))
            res[f"{cfg}|{lab}"] = per
    # On the questions that gained a restatement: how often the model puts a labelled (original) evidence turn
    # above every added restatement turn, both being in the head. The hypothesis predicts b > a here.
    for cfg, sc in scores.items():
        per = {}
        pooled: dict[str, list[float]] = {"LoCoMo pooled": [], "zh/en pooled": []}
        for h in held:
            first: list[float] = []
            for z, r in zip(sc[h], sets[h], strict=True):
                added = (r["y_aug"] > 0) & (r["y"] == 0)
                if not r["gained"] or not added.any() or not r["y"].any():
                    continue
                first.append(float(z[r["y"] > 0].max() > z[added].max()))
            per[h] = {"n": len(first), "statement_first": float(np.mean(first)) if first else float("nan")}
            pooled["LoCoMo pooled" if h in tr.LOCOMO_TUNE else "zh/en pooled"].extend(first)
        for k, first in pooled.items():
            per[k] = {"n": len(first), "statement_first": float(np.mean(first)) if first else float("nan")}
        res[f"{cfg}|statement_first"] = per
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--locomo", type=Path, default=ROOT.parents[1] / "shared" / "data" / "locomo")
    ap.add_argument("--cache", type=Path, default=None, help="embedding pickle (tune_retrieval's)")
    ap.add_argument("--sets-cache", type=Path, default=None, help="pickle of the featurised sets")
    ap.add_argument("--quick", action="store_true", help="hold out only zh/en sets + conv-26 / conv-30")
    ap.add_argument("--no-prefix47", action="store_true", help="skip configuration c")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not args.locomo.exists():
        args.locomo = Path("/work/shared/data/locomo")
    if args.sets_cache and args.sets_cache.exists():
        sets = pickle.loads(args.sets_cache.read_bytes())
    else:
        from memctl.tune_retrieval import DiskCachedEmbedder
        from memory.embeddings import get_embedder

        emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
        sets = load(emb, args.locomo)
        if args.sets_cache:
            args.sets_cache.write_bytes(pickle.dumps(sets))
    print("questions gaining an extra evidence turn (augmented labels), per set:")
    for k, rows in sets.items():
        print(f"  {k}: {sum(r['gained'] for r in rows)} of {len(rows)} "
              f"(evidence turns {sum(r['n_ev'] for r in rows)} -> {sum(r['n_ev_aug'] for r in rows)})")
    held = QUICK_HELD if args.quick else tuple(sets)
    queries = as_queries(sets)
    cache: dict[Any, Any] = {}
    configs = [("a38_stop28", WIDTH_38, STOP28_SETS), ("b49_stop29", WIDTH_49, STOP29_SETS)]
    if not args.no_prefix47:
        configs.append(("c47_noecho", WIDTH_47, STOP29_SETS))
    scores = {}
    for name, width, train_on in configs:
        print(f"config {name} ({width} features)", flush=True)
        scores[name] = oos_scores(queries, width, train_on, held, cache)
        res = table(sets, scores, held)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
    rows = list(held) + ["LoCoMo pooled", "zh/en pooled"]

    def fmt(m: dict[str, float]) -> str:
        return f"{m['R@5']:.3f}/{m['R@10']:.3f}/{m['MRR']:.3f}"

    for lab in ("y", "y_aug"):
        print(f"\nlabels: {'original' if lab == 'y' else 'augmented'} (R@5/R@10/MRR, out of set)")
        for r in rows:
            print(f"  {r:14s} n {res[f'a38_stop28|{lab}'][r]['n']:4d}  " + "  ".join(
                f"{c} {fmt(res[f'{c}|{lab}'][r])}" for c, _, _ in configs))
        print("  zh/en mean MRR " + "  ".join(f"{c} {res[f'{c}|{lab}']['zh/en mean MRR']:.3f}" for c, _, _ in configs))
    print("\nMRR advantage over a38 (b - a, and c - a), original -> augmented labels:")
    for r in rows + ["zh/en mean MRR"]:
        def mrr(c: str, lab: str) -> float:
            v = res[f"{c}|{lab}"][r]
            return v if isinstance(v, float) else v["MRR"]
        print(f"  {r:14s} " + "  ".join(
            f"{c}: {mrr(c, 'y') - mrr('a38_stop28', 'y'):+.3f} -> {mrr(c, 'y_aug') - mrr('a38_stop28', 'y_aug'):+.3f}"
            for c, _, _ in configs[1:]))
    print("\nquestions with both a labelled turn and an added restatement in the head: share where the model ranks "
          "a labelled turn above every added one")
    for h in [*held, "LoCoMo pooled", "zh/en pooled"]:
        v = res["a38_stop28|statement_first"][h]
        if v["n"]:
            print(f"  {h:14s} n {v['n']:4d}  " + "  ".join(
                f"{c} {res[f'{c}|statement_first'][h]['statement_first']:.3f}" for c, _, _ in configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
