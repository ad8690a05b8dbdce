"""Screen lexicon-bridge variants on the fusion-only ranking (no reranker), issue 16 / stop 35.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/bridge_screen.py --cache /tmp/emb.pkl \
        [--cands /tmp/cands.pkl] [--sets zh_en,zh_en_2,...]

The fused order (memory.scoring.score_candidates, then the question rules of memory.query.rerank) is what the
reranker reads, so a fusion variant is judged first here, quickly, on the FITTING zh/en sets only (zh_en ...
zh_en_18 since stop 36; the held-out zh_en_19 is never loaded), then with the reranker refitted on it
(``tune_retrieval --stage rerank``). Per variant and direction, pooled over the sets: R@5 / MRR of the listed
turns, and in the questions whose listed turns are all in the question's script, how many of the top 5 are in the
other script ("other-script occupants", retr21's diagnosis) and the median cosine of those occupants.
LoCoMo is not loaded: one script, every memory visible, the bridge never acts.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memctl.tune_rerank import HELD_OUT_ZH, ZH_NAMES, metrics, scoring_settings  # noqa: E402
from memctl.tune_retrieval import ZH_EN, DiskCachedEmbedder, candidates  # noqa: E402
from memory import MemorySettings, scoring  # noqa: E402
from memory.embeddings import get_embedder  # noqa: E402
from memory.query import RerankWeights, plan_query, rerank  # noqa: E402

CATS = ("current", "en->zh", "en-en", "mixed", "zh->en", "zh-zh")
# The variants screened (fixed before any out-of-set figure): the shipped bridge, a lower bonus, the bonus scaled
# by the candidate's cosine relative to the best one in the question's script, no bonus with bridge_weight refit.
VARIANTS: dict[str, dict[str, float]] = {
    "a shipped": {},
    "b bonus 1.5": {"bridge_bonus": 1.5},
    "b bonus 1.0": {"bridge_bonus": 1.0},
    "c relative 1": {"bridge_relative": 1.0},
    "c relative 2": {"bridge_relative": 2.0},
    "c relative 4": {"bridge_relative": 4.0},
    "c relative 8": {"bridge_relative": 8.0},
    "d bonus 0 w .3": {"bridge_bonus": 0.0},
    "d bonus 0 w 0": {"bridge_bonus": 0.0, "bridge_weight": 0.0},
    "d bonus 0 w .6": {"bridge_bonus": 0.0, "bridge_weight": 0.6},
    "dense only": {"vector_weight": 1.0, "language_fusion": False},
}


def is_han(text: str) -> bool:
    return scoring.han_share(text) >= 0.5


def screen(sets: Mapping[str, Sequence[Any]], over: Mapping[str, float]) -> dict[str, Any]:
    """Per direction: ranks of the first listed turn; the other-script occupants of the top 5 and their cosines."""
    cfg = scoring_settings(over)  # validated: a misspelt field is refused, not ignored
    weights = RerankWeights.from_scoring(cfg)
    ranks: dict[str, list[int | None]] = defaultdict(list)
    occ: dict[str, list[int]] = defaultdict(list)
    occ_cos: list[float] = []
    for qs in sets.values():
        for q, now, cs in qs:
            hits = rerank(scoring.score_candidates(cs, now, cfg, q.question), plan_query(q.question, now), weights)
            ev = set(q.evidence)
            ranks[q.category].append(next((i for i, h in enumerate(hits, 1)
                                           if h.record.metadata.extra.get("dia_id") in ev), None))
            by_id = {c.record.metadata.extra.get("dia_id"): c.record.content for c in cs}
            qz = is_han(q.question)
            listed = [by_id[e] for e in ev if e in by_id]
            if listed and all(is_han(t) == qz for t in listed):
                other = [h for h in hits[:5] if is_han(h.record.content) != qz]
                occ[q.category].append(len(other))
                occ_cos += [h.breakdown.vector for h in other]
    return {"ranks": ranks, "occ": occ, "occ_cos": occ_cos}


def line(name: str, res: Mapping[str, Any]) -> str:
    cells = []
    allr = []
    for c in CATS:
        m = metrics(res["ranks"][c])
        allr += res["ranks"][c]
        cells.append(f"{c} {m['R@5']:.3f}/{m['MRR']:.3f}")
    n_occ = sum(sum(v) for v in res["occ"].values())
    n_q = sum(len(v) for v in res["occ"].values())
    med = statistics.median(res["occ_cos"]) if res["occ_cos"] else float("nan")
    m = metrics(allr)
    return (f"{name:16s} all {m['R@5']:.3f}/{m['MRR']:.3f} | " + " ".join(cells)
            + f" | other-script top-5 occupants {n_occ} in {n_q} one-script questions (median cos {med:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help="embedding cache (DiskCachedEmbedder)")
    ap.add_argument("--cands", type=Path, default=None, help="pickle of the sets' candidates (reused if present)")
    ap.add_argument("--sets", default=",".join(ZH_NAMES))  # the reranker's fitting sets
    args = ap.parse_args()
    names = args.sets.split(",")
    if HELD_OUT_ZH in names:
        raise SystemExit(f"{HELD_OUT_ZH} is the held-out set: never screened")
    if args.cands and args.cands.exists():
        sets = pickle.loads(args.cands.read_bytes())
    else:
        emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
        cw = MemorySettings(path=":memory:").context_weight
        sets = {n: candidates(ZH_EN.parent / n, None, emb, 2, cw, fixed_ids=True) for n in names}
        emb.save()
        if args.cands:
            args.cands.write_bytes(pickle.dumps(sets))
    print(f"sets {', '.join(names)}: {sum(len(v) for v in sets.values())} questions; R@5/MRR pooled", flush=True)
    for name, over in VARIANTS.items():
        print(line(name, screen(sets, over)), flush=True)


if __name__ == "__main__":
    main()
