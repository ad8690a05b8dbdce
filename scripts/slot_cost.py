"""Issue 16 (stop 32): CPU time of the learned reranker's apply() per search, warm, with and without the
same-slot group (memory.rerank_supersede.slot_matrix, which fetches the head's stored vectors).

    python scripts/slot_cost.py [--set zh_en_5] [--model m.json] [--reps 3]

A real SQLite file holding one fitting set's turns (embeddings from --cache), every question searched through
MemoryService.search; apply() is timed with time.thread_time_ns (CPU of this thread). Arms: the shipped model
(49 features: no vector fetch), and a model reading the same-slot group: --model, or by default the shipped
trees under a 53-feature header (the same tree walk; only the features and the vector fetch added).
Each arm runs every question once to warm the caches, then --reps more times; prints the median and mean.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import memory.rerank as rr  # noqa: E402
from memctl.evaluation import _ns, _turn_extra, load_dataset  # noqa: E402
from memctl.tune_retrieval import DiskCachedEmbedder  # noqa: E402
from memory import MemorySettings  # noqa: E402
from memory.rerank import FEATURES, RerankModel, _SLOT  # noqa: E402
from memory.service import MemoryService, NewMemory  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="zh_en_5")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/cur20_emb.pkl"))
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    from memory.embeddings import get_embedder
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), a.cache)
    turns, questions = load_dataset(ROOT / "tests" / "data" / a.set)
    shipped = RerankModel.load()
    wide = RerankModel.load(a.model) if a.model else RerankModel(FEATURES[:_SLOT], shipped.baseline, shipped.trees,
                                                                 shipped.depth, {})
    spent: list[int] = []
    inner = rr.apply

    def timed(*args, **kw):  # type: ignore[no-untyped-def]
        t = time.thread_time_ns()
        out = inner(*args, **kw)
        spent.append(time.thread_time_ns() - t)
        return out

    rr.apply = timed
    # Its two parts: the vector fetch (MemoryService._stored_vectors) and the features (memory.rerank.slot_matrix).
    parts: dict[str, list[int]] = {"fetch": [], "slot_matrix": []}

    def timing(name, fn):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kw):  # type: ignore[no-untyped-def]
            t = time.thread_time_ns()
            out = fn(*args, **kw)
            parts[name].append(time.thread_time_ns() - t)
            return out
        return wrapped

    MemoryService._stored_vectors = timing("fetch", MemoryService._stored_vectors)  # type: ignore[method-assign]
    rr.slot_matrix = timing("slot_matrix", rr.slot_matrix)
    with tempfile.TemporaryDirectory(prefix="cur20_cost_") as tmp:
        with MemoryService.from_settings(MemorySettings(path=str(Path(tmp) / "m.sqlite")), embedder=emb) as svc:  # type: ignore[arg-type]
            for conv, ts in turns.items():
                svc.write_many(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                                    "extra": _turn_extra(ts, j, 2)},
                                         created_at=ts[j].session_date) for j in range(len(ts)))
            as_of = {c: max(t.session_date for t in ts) for c, ts in turns.items()}
            for name, model in (("shipped 49", shipped), (f"{len(wide.features)} features", wide),
                                ("shipped 49 again", shipped)):
                rr.default_model = lambda m=model: m  # type: ignore[misc]
                for rep in range(a.reps + 1):
                    if rep == 1:
                        spent.clear()
                        for v in parts.values():
                            v.clear()
                    for q in questions:
                        svc.search(q.question, [_ns(q.conversation_id)], now=as_of[q.conversation_id])
                ms = [x / 1e6 for x in spent]
                print(f"{a.set} {name}: apply() CPU per search median {statistics.median(ms):.3f} ms, "
                      f"mean {statistics.fmean(ms):.3f} ms ({len(ms)} searches)" + "".join(
                          f"; {k} median {statistics.median(v) / 1e6:.3f} ms" for k, v in parts.items() if v), flush=True)


if __name__ == "__main__":
    main()
