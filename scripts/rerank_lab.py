"""Reranker ablations of stop 28 (issue 16): feature groups, head depth, objective, LoCoMo weight.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/rerank_lab.py --locomo ../shared/data/locomo \
        [--cache /tmp/emb.pkl] [--depth 50] [--features old|all|listwise|+name,...] [--point 5,300,0.05,40]
        [--objective pointwise|lambdarank|rank_xendcg] [--locomo-weight 1]

Loads only the fitting sets (LoCoMo tuning conv-26/30/41/42/43, zh_en ... zh_en_6), exactly as
``python -m memctl.tune_retrieval --stage rerank`` does, and prints one line: out-of-set
(leave-one-set-out) R@5 / R@10 / MRR on the pooled LoCoMo tuning half, the zh/en sets' mean MRR,
MRR per LoCoMo category and per zh/en direction, and the per-direction MRR change against the
linear ranking. ``--features``: ``old`` = stop 27's 38 features, ``all`` = every feature,
``listwise`` = the 38, the superseded group and 8 listwise ones, ``+a,b`` = the 38 plus the named ones. ``lambdarank`` / ``rank_xendcg``
fit LightGBM's ranking objectives (``pip install lightgbm``; offline only, never shipped).
``--locomo-weight``: LoCoMo questions weigh this much more in the fit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memctl.tune_rerank as tr  # noqa: E402
from memory.rerank import FEATURES  # noqa: E402


def columns(spec: str) -> list[int]:
    own = FEATURES.index("sup_dice")  # stop 27's 38 features come first
    if spec == "old":
        return list(range(own))
    if spec == "all":
        return list(range(len(FEATURES)))
    if spec == "listwise":
        return list(range(FEATURES.index("sess_own_gap") + 8))
    if spec.startswith("+"):
        return list(range(own)) + [FEATURES.index(n) for n in spec[1:].split(",")]
    raise SystemExit(f"--features: old, all, listwise or +name,name (names: {', '.join(tr.CONTEXT_FEATURES)})")


def fit_rank(queries: list[tr.Query], objective: str, point: tuple[Any, ...], lw: float) -> Any:
    try:
        import lightgbm as lgb
    except ImportError as exc:
        raise SystemExit("--objective lambdarank/rank_xendcg needs LightGBM: pip install lightgbm") from exc
    depth, iters, lr, leaf = point
    use = [q for q in queries if 0 < q.y.sum() < len(q.y)]
    group_w = np.array([lw if q.set_name.startswith("conv") else 1.0 for q in use])
    m = lgb.LGBMRanker(objective=objective, max_depth=depth, num_leaves=2 ** depth, learning_rate=lr,
                       n_estimators=iters, min_child_samples=leaf, reg_lambda=1.0, deterministic=True,
                       num_threads=1, force_row_wise=True, verbose=-1, seed=0, lambdarank_truncation_level=20)
    return m.fit(np.vstack([q.x for q in use]), np.concatenate([q.y for q in use]), group=[len(q.y) for q in use],
                 sample_weight=np.concatenate([np.full(len(q.y), w) for q, w in zip(use, group_w, strict=True)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--depth", type=int, default=tr.DEPTH)
    ap.add_argument("--features", default="all")
    ap.add_argument("--point", default="5,300,0.05,40")
    ap.add_argument("--objective", choices=("pointwise", "lambdarank", "rank_xendcg"), default="pointwise")
    ap.add_argument("--locomo-weight", type=float, default=1.0)
    args = ap.parse_args()
    from memctl.tune_retrieval import DiskCachedEmbedder
    from memory.embeddings import get_embedder
    from memory.settings import MemorySettings

    a, b, c, d = args.point.split(",")
    point = (int(a), int(b), float(c), int(d))
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    sets = tr.load_sets(emb, args.locomo, args.depth)
    cols = columns(args.features)
    sets = {k: [tr.Query(q.set_name, q.category, q.x[:, cols], q.y, q.base_rank) for q in qs] for k, qs in sets.items()}
    t = time.time()
    if args.objective == "pointwise":
        if args.locomo_weight != 1.0:
            orig = tr._train_arrays

            def weighted(queries: Any) -> Any:
                x, y, w = orig(queries)
                f = np.concatenate([np.full(len(q.y), args.locomo_weight if q.set_name.startswith("conv") else 1.0)
                                    for q in queries if 0 < q.y.sum() < len(q.y)])
                return x, y, w * f
            tr._train_arrays = weighted  # type: ignore[assignment]
        ranks = tr.out_of_set(sets, point)
    else:
        ranks = {}
        for held in sets:
            m = fit_rank([q for k, qs in sets.items() if k != held for q in qs], args.objective, point,
                         args.locomo_weight)
            z = m.predict(np.vstack([q.x for q in sets[held]]), raw_score=True)
            out, i = [], 0
            for q in sets[held]:
                out.append(tr.new_rank(q, z[i:i + len(q.y)]))
                i += len(q.y)
            ranks[held] = out
    res = tr.summary(sets, ranks)
    print(f"depth {args.depth} features {args.features} ({len(cols)}) {args.objective} {point} "
          f"LoCoMo weight {args.locomo_weight}: LoCoMo {tr._fmt(res['locomo']['new'])} (linear "
          f"{tr._fmt(res['locomo']['base'])}), zh/en mean MRR {res['zh_mean_mrr']['new']:.4f}; MRR by LoCoMo category "
          f"{ {k: round(v['new']['MRR'], 3) for k, v in res['locomo_category'].items()} }, by zh/en direction "
          f"{ {k: round(v['new']['MRR'], 3) for k, v in res['zh_category'].items()} }; change vs linear "
          f"{json.dumps({k: round(v, 4) for k, v in res['zh_direction_mrr_change'].items()})} "
          f"[{time.time() - t:.0f} s]")


if __name__ == "__main__":
    main()
