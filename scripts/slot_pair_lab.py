"""Issue 16 lab (stop 32): how well does the cross-language "same slot, newer value" reading find old/new pairs?

    python scripts/slot_pair_lab.py [--cache /tmp/cur20_emb.pkl] [--context-weight W]

Reading (:func:`memory.rerank_supersede.slot_pairs`): stored-vector cosine >= t, both state values and they differ,
the newer one written at least an hour later. Labels, on the zh/en sets' ``current`` questions ranked as search
ranks them (shipped reranker), cur19's kinds (scripts/current_diag.py):
  positive  (the best-ranked non-evidence hit above the evidence, kind ``old``; the evidence turn in the head)
  negative  (an evidence turn in the head, any candidate written later): the evidence of a ``current`` question is
            the current value, so nothing later states its slot with another value
Precision = TP / (TP + FP), recall = TP / positives; fitting part zh_en ... zh_en_9 picks t, zh_en_10 ... zh_en_14
checks it. Candidates: /tmp/cur19_cands.pkl (zh_en ... zh_en_13) and /tmp/cur20_cands14.pkl (zh_en_14).
"""
from __future__ import annotations

import argparse
import pickle
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memctl.evaluation import load_dataset  # noqa: E402
from memctl.tune_rerank import dice, stored_vectors  # noqa: E402
from memctl.tune_retrieval import DiskCachedEmbedder  # noqa: E402
from memory import MemorySettings  # noqa: E402
from memory.query import same_slot  # noqa: E402
from memory.rerank_supersede import MIN_GAP, slot_values, values_differ  # noqa: E402
from current_diag import CANDS, COS_SAME, rank_all  # noqa: E402  (this folder is on sys.path)

FIT = ("zh_en", *(f"zh_en_{i}" for i in range(2, 10)))
CHECK = tuple(f"zh_en_{i}" for i in range(10, 15))
GRID = (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)


def pairs_of(s: str, cands, emb: DiskCachedEmbedder, weight: float) -> list[tuple[bool, float, bool, bool]]:
    """(positive?, cosine, values differ, cross-language) per labelled pair of one set."""
    turns = load_dataset(ROOT / "tests" / "data" / s)[0]
    by_id = {c: {t.dia_id: t for t in ts} for c, ts in turns.items()}
    out = []

    def cos_c(a: str, b: str) -> float:
        v = emb.embed_documents([a, b])
        return float(v[0] @ v[1] / np.sqrt((v[0] @ v[0]) * (v[1] @ v[1])))

    for q, _, hits in rank_all([c for c in cands if c[0].category == "current"]):
        head = hits[:50]
        ids = [h.record.metadata.extra.get("dia_id") for h in head]
        ev = [i for i, d in enumerate(ids) if d in set(q.evidence)]
        if not ev:
            continue
        v = stored_vectors(emb, head, weight)
        st = np.array([h.record.created_at.timestamp() for h in head])
        vals = [slot_values(h.record.content) for h in head]

        def han(t: str) -> bool:
            return any("\u4e00" <= ch <= "\u9fff" for ch in t)

        for e in ev:  # negatives: the evidence and anything later
            for j in np.flatnonzero(st - st[e] >= MIN_GAP):
                out.append((False, float(v[e] @ v[j]), values_differ(vals[e], vals[j]),
                            han(head[e].record.content) != han(head[j].record.content)))
        r = ev[0]
        if r == 0:
            continue
        conv = by_id[q.conversation_id]
        tt, evt = conv[ids[0]], [conv[d] for d in q.evidence if d in conv]
        if any(tt.session_date == x.session_date for x in evt) or not all(tt.session_date < x.session_date for x in evt):
            continue
        if not (max(dice(tt.content, x.content) for x in evt) >= 0.1 or any(same_slot(tt.content, x.content) for x in evt)
                or max(cos_c(tt.content, x.content) for x in evt) >= COS_SAME):
            continue
        if st[r] - st[0] >= MIN_GAP:
            out.append((True, float(v[0] @ v[r]), values_differ(vals[0], vals[r]),
                        han(head[0].record.content) != han(head[r].record.content)))
    return out


def report(name: str, rows: list[tuple[bool, float, bool, bool]]) -> None:
    pos = sum(1 for p, *_ in rows if p)
    neg = len(rows) - pos
    xl = sum(1 for p, _, _, x in rows if p and x)
    print(f"{name}: {pos} positive pairs ({xl} cross-language), {neg} negative pairs")
    for use_vals in (False, True):
        for t in GRID:
            fire = [(p, x) for p, c, d, x in rows if c >= t and (d or not use_vals)]
            tp = sum(1 for p, _ in fire if p)
            fp = len(fire) - tp
            txl = sum(1 for p, x in fire if p and x)
            prec = tp / max(1, tp + fp)
            rec = tp / max(1, pos)
            f1 = 2 * prec * rec / max(1e-9, prec + rec)
            print(f"  values {'differ' if use_vals else 'any   '} t {t:.2f}: TP {tp:3d} FP {fp:4d} "
                  f"precision {prec:.3f} recall {rec:.3f} (cross-language {txl}/{xl}) F1 {f1:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, default=Path("/tmp/cur20_emb.pkl"))
    ap.add_argument("--context-weight", type=float, default=None,
                    help="the vectors' context weight (default: the store's; 0: the contents' own vectors, which "
                    "search does not hold)")
    a = ap.parse_args()
    from memory.embeddings import get_embedder
    settings = MemorySettings(path=":memory:")
    emb = DiskCachedEmbedder(get_embedder(settings.embedding.model, threads=1), a.cache)
    cands = pickle.loads(CANDS.read_bytes()) | pickle.loads(Path("/tmp/cur20_cands14.pkl").read_bytes())
    rows: dict[str, list] = defaultdict(list)
    for part, sets in (("fit", FIT), ("check", CHECK)):
        for s in sets:
            got = pairs_of(s, cands[s], emb, settings.context_weight if a.context_weight is None else a.context_weight)
            rows[part] += got
            print(s, sum(p for p, *_ in got), "positive", flush=True)
    for part in ("fit", "check"):
        report(f"{part} ({', '.join(FIT if part == 'fit' else CHECK)})", rows[part])


if __name__ == "__main__":
    main()
