"""Issue 16 diagnosis: for the zh/en fitting sets' ``current`` questions, what ranks above the evidence?

    python scripts/current_diag.py load   # candidates of the fitting sets, cached (embeddings in --cache)
    python scripts/current_diag.py diag [--show N]   # per set: kinds of rank-1 misses, does the supersede reading fire
    python scripts/current_diag.py diag --all [--model m.json]   # MRR per set and category under a reranker file

(a 53-feature model file, stop 31's change-wording features, loads only with commit ea0cc1b's memory/rerank*.py)

Fitting sets only (tests/data/zh_en, zh_en_2 ... zh_en_13, as in stop 31; zh_en_14 became a fitting set in stop 32,
scripts/slot_pair_lab.py loads it separately, zh_en_15 in stop 33, zh_en_16 in stop 34, zh_en_17 in stop 35, zh_en_18
in stop 36); never the LoCoMo held-out half or the held-out zh/en set (zh_en_19 since stop 36).
Each question is ranked as search ranks it (fused score, question rules, shipped reranker).
Kinds of the best-ranked non-evidence hit above the evidence (rank > 1):
  old     written in an earlier session than every evidence turn and same slot by a loose reading
          (content-term Dice >= .1 with an evidence turn, the write policy's same_slot, or embedding
          cosine >= COS_SAME)
  restate in an evidence turn's session (its question, or a restatement / acknowledgement)
  other   anything else (an unrelated turn, or a later turn)
  out     evidence not in the top 50
"""
from __future__ import annotations

import argparse
import pickle
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memctl.evaluation import load_dataset  # noqa: E402
from memctl.tune_rerank import dice  # noqa: E402
from memctl.tune_retrieval import DiskCachedEmbedder, candidates  # noqa: E402
from memory import MemorySettings, scoring  # noqa: E402
from memory.query import RerankWeights, plan_query, rerank, same_slot  # noqa: E402
from memory.rerank import FEATURES, RerankModel, apply, candidate_features, default_model  # noqa: E402
from memory.settings import ScoringSettings  # noqa: E402

SETS = ("zh_en", *(f"zh_en_{i}" for i in range(2, 14)))
CANDS = Path("/tmp/cur19_cands.pkl")
# Embedding cosine (the packaged multilingual model) from which an earlier turn counts as the same slot
# stated in other words or another language; checked by reading the printed pairs (--show).
COS_SAME = 0.5


def load(cache: Path) -> None:
    from memory.embeddings import get_embedder
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), cache)
    cw = MemorySettings(path=":memory:").context_weight
    out = {}
    for s in SETS:
        out[s] = candidates(ROOT / "tests" / "data" / s, None, emb, 2, cw, fixed_ids=True)
        print(s, len(out[s]), flush=True)
    CANDS.write_bytes(pickle.dumps(out))


def rank_all(cands, model: RerankModel | None = None):
    cfg = ScoringSettings()
    w = RerankWeights.from_scoring(cfg)
    for q, now, cs in cands:
        plan = plan_query(q.question, now)
        hits = rerank(scoring.score_candidates(cs, now, cfg, q.question), plan, w)
        hits = apply(hits, plan, {c.record.id: c.keyword_score for c in cs}, model or default_model())
        yield q, plan, hits


def diag(show: int, cache: Path, model: RerankModel | None = None) -> None:
    from memory.embeddings import get_embedder
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), cache)

    def cos(a: str, b: str) -> float:
        v = emb.embed_documents([a, b])
        return float(v[0] @ v[1] / ((v[0] @ v[0]) ** 0.5 * (v[1] @ v[1]) ** 0.5))

    cands = pickle.loads(CANDS.read_bytes())
    kinds_all = Counter()
    sup = defaultdict(Counter)
    shown = 0
    sid = FEATURES.index("sup_dice")
    for s in SETS:
        turns = load_dataset(ROOT / "tests" / "data" / s)[0]
        by_id = {c: {t.dia_id: t for t in ts} for c, ts in turns.items()}
        kinds = Counter()
        rr = []
        for q, plan, hits in rank_all([c for c in cands[s] if c[0].category == "current"], model):
            ev = set(q.evidence)
            ids = [h.record.metadata.extra.get("dia_id") for h in hits]
            r = next((i for i, d in enumerate(ids, 1) if d in ev), None)
            rr.append(1 / r if r else 0.0)
            if r == 1:
                kinds["hit"] += 1
                continue
            if r is None:
                kinds["out"] += 1
                continue
            tt = by_id[q.conversation_id][ids[0]]
            evt = [by_id[q.conversation_id][e] for e in q.evidence if e in by_id[q.conversation_id]]
            same_sess = any(tt.session_date == e.session_date for e in evt)
            earlier = all(tt.session_date < e.session_date for e in evt)
            d = max(dice(tt.content, e.content) for e in evt)
            ss = any(same_slot(tt.content, e.content) for e in evt)
            c = max(cos(tt.content, e.content) for e in evt)
            if same_sess:
                k = "restate"
            elif earlier and (d >= 0.1 or ss or c >= COS_SAME):
                k = "old"
            else:
                k = "other"
            kinds[k] += 1
            if k == "old":
                e = hits[r - 1]
                cross = (any("\u4e00" <= ch <= "\u9fff" for ch in tt.content)
                         != any("\u4e00" <= ch <= "\u9fff" for ch in e.record.content))
                x = candidate_features(hits[:50], plan, {}, hits)
                sup[s]["old"] += 1
                sup[s]["cross_lang"] += cross
                sup[s]["dice>=.25"] += d >= 0.25
                sup[s]["same_slot"] += ss
                sup[s]["top_sup_dice>=.25"] += x[0, sid] >= 0.25
                sup[s]["wants_current"] += plan.wants_current
            if shown < show and k in ("old", "other"):
                shown += 1
                print(f"--- {s} {q.question_id} [{k}] cos={c:.2f} r={r} wc={plan.wants_current} Q: {q.question}")
                print(f"  TOP {tt.dia_id} {tt.session_date:%m-%d} {tt.content[:150]}")
                for e in evt:
                    print(f"  EV  {e.dia_id} {e.session_date:%m-%d} {e.content[:150]}  dice={dice(tt.content, e.content):.2f}")
        kinds_all.update(kinds)
        n = sum(kinds.values())
        print(f"{s:9s} n={n:3d} MRR={sum(rr) / max(1, n):.3f} " + " ".join(f"{k}={kinds[k]}" for k in
              ("hit", "old", "restate", "other", "out")), dict(sup[s]) if sup[s] else "")
    print("all", dict(kinds_all))
    tot = Counter()
    for c in sup.values():
        tot.update(c)
    print("old-pairs", dict(tot))


def add_set(name: str, rr: dict[str, list[float]], per: dict[str, list[float]]) -> None:
    """Print one set's MRR overall and per category (``rr``: reciprocal ranks by category) and add
    them to ``per`` (category -> one MRR per set; ``_set_mean`` the sets' overall MRR)."""
    m = {c: sum(v) / len(v) for c, v in sorted(rr.items())}
    for c, v in m.items():
        per[c].append(v)
    allq = [x for v in rr.values() for x in v]
    per["_set_mean"].append(sum(allq) / len(allq))
    print(name, f"all {sum(allq) / len(allq):.4f}", " ".join(f"{c} {v:.4f}" for c, v in m.items()), flush=True)


def by_cat(model: RerankModel | None) -> None:
    """MRR (listed evidence) per set and category, and the per-category mean over the sets."""
    cands = pickle.loads(CANDS.read_bytes())
    per: dict[str, list[float]] = defaultdict(list)
    for s in SETS:
        rr: dict[str, list[float]] = defaultdict(list)
        for q, _, hits in rank_all(cands[s], model):
            r = next((i for i, h in enumerate(hits, 1) if h.record.metadata.extra.get("dia_id") in set(q.evidence)), None)
            rr[q.category].append(1 / r if r else 0.0)
        add_set(s, rr, per)
    print("mean over sets:", " ".join(f"{c} {sum(v) / len(v):.4f} (n {len(v)})" for c, v in sorted(per.items())))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("load", "diag"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/cur19_emb.pkl"))
    ap.add_argument("--show", type=int, default=0)
    ap.add_argument("--model", type=Path, default=None, help="a reranker model file (default: the packaged one)")
    ap.add_argument("--all", action="store_true", help="diag: MRR per set and category for every question")
    a = ap.parse_args()
    m = RerankModel.load(a.model) if a.model else None
    if a.what == "load":
        load(a.cache)
    elif a.all:
        by_cat(m)
    else:
        diag(a.show, a.cache, m)
