"""Latency benchmark: our backends against baselines, same corpus, same embedder, one process.

Systems (each searched with query embedding included in the timing):

* ``memory-sqlite`` — our embedded default (SQLite file + in-memory index + FTS5), full
  ``MemoryService.search`` path (hybrid, scoring, records).
* ``numpy-floor`` — a float32 matrix scan with argpartition: the floor for exact search.
* ``langgraph-inmemory`` — LangGraph's ``InMemoryStore(index=...)`` with the same embedder.

The corpus is generated (zh/en memory-like sentences, seeded). Vectors are embedded once and
shared by all systems, so the load phase does not dominate; write throughput is measured
separately, end to end (embedding included), on fresh memories.
"""

from __future__ import annotations

import gc
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memory.embeddings import Embedder
from memory.records import MemoryRecord
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings

_EN_SUBJ = ["the user", "Alice", "Bob", "the finance team", "our CFO", "the sales lead", "the analyst", "Carol"]
_EN_VERB = ["prefers", "asked for", "defined", "reported", "wants", "stopped using", "approved", "rejected"]
_EN_OBJ = ["bar charts", "weekly revenue by region", "GMV excluding refunds", "active users in 30 days",
           "a churn dashboard", "CSV exports", "the Q3 forecast", "SQL with CTEs", "median order value",
           "cohort retention", "reports in USD", "the north region", "daily active users", "refund rate",
           "margin by product line", "the marketing budget", "conversion funnels", "pie charts"]
_EN_TAIL = ["for the board meeting", "every Monday", "since last quarter", "in the Shanghai office",
            "for project Falcon", "before the audit", "with two decimals", "in the dashboard", ""]
_ZH_SUBJ = ["用户", "张伟", "财务部", "销售总监", "分析师", "李娜", "运营团队"]
_ZH_VERB = ["偏好", "要求", "定义了", "汇报了", "不再使用", "确认了", "关注"]
_ZH_OBJ = ["柱状图", "按地区的周营收", "不含退款的GMV", "近30天活跃用户", "流失看板", "万元为单位的报表",
           "第三季度预测", "客单价中位数", "留存分析", "退款率", "各产品线毛利", "转化漏斗", "饼图"]
_ZH_TAIL = ["用于董事会", "每周一", "从上季度开始", "在上海办公室", "针对猎鹰项目", "审计之前", ""]


def make_corpus(n: int, seed: int = 7) -> list[str]:
    """Memory-like sentences, ~1/3 Chinese, each made unique by a numbered detail."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.33:
            s = f"{rng.choice(_ZH_SUBJ)}{rng.choice(_ZH_VERB)}{rng.choice(_ZH_OBJ)}{rng.choice(_ZH_TAIL)}，编号{i}"
        else:
            s = f"{rng.choice(_EN_SUBJ)} {rng.choice(_EN_VERB)} {rng.choice(_EN_OBJ)} {rng.choice(_EN_TAIL)} (item {i})"
        out.append(" ".join(s.split()))
    return out


def make_queries(n: int, seed: int = 11) -> list[str]:
    """Distinct questions (a repeated one would hit the query-embedding cache)."""
    rng = random.Random(seed)
    qs: dict[str, None] = {}
    while len(qs) < n:
        if rng.random() < 0.33:
            q = f"谁{rng.choice(_ZH_VERB)}{rng.choice(_ZH_OBJ)}{rng.choice(_ZH_TAIL)}？"
        else:
            q = f"who {rng.choice(_EN_VERB)} {rng.choice(_EN_OBJ)} {rng.choice(_EN_TAIL)}?"
        qs[" ".join(q.split()) + ("" if len(qs) < 400 else f" #{len(qs)}")] = None
    return list(qs)


@dataclass
class Result:
    system: str
    n: int
    search_p50_ms: float
    search_p95_ms: float
    write_per_s: float | None
    queries: int

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _time_searches(fn: Callable[[str], Any], queries: list[str]) -> list[float]:
    fn(queries[0])  # warm caches and lazy loads outside the timing
    out = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t) * 1000)
    return out


def embed_corpus(embedder: Embedder, texts: list[str], cache_dir: Path | None, progress: Callable[[int, int], None] | None) -> np.ndarray:
    """Embed once; cache on disk keyed by model and corpus size (the corpus is seeded)."""
    cache = None
    if cache_dir is not None:
        safe = embedder.name.replace("/", "_").replace(":", "_")
        cache = cache_dir / f"{safe}-{len(texts)}.npy"
        if cache.is_file():
            return np.load(cache)
    vecs = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for i in range(0, len(texts), 1024):
        vecs[i : i + 1024] = embedder.embed_documents(texts[i : i + 1024])
        if progress:
            progress(min(i + 1024, len(texts)), len(texts))
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, vecs)
    return vecs


def run_bench(
    sizes: tuple[int, ...] = (10_000, 100_000),
    *,
    queries: int = 200,
    slow_queries: int = 5,
    inmemory_max: int = 100_000,
    write_sample: int = 500,
    cache_dir: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    settings = MemorySettings(path=":memory:")
    results: list[Result] = []
    qs = make_queries(queries)
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            texts = make_corpus(n)
            svc = MemoryService.from_settings(settings.model_copy(update={"path": str(Path(tmp) / f"bench-{n}.sqlite")}))
            # Measure real query embedding in every system: no LRU cache in front of the model.
            emb = svc.embedder = getattr(svc.embedder, "inner", svc.embedder)
            vecs = embed_corpus(emb, texts, cache_dir, (lambda d, t: progress("embed", d, t)) if progress else None)
            # --- ours: load rows with precomputed vectors, then the full search path
            ns = [("bench", f"u{i % 10}") for i in range(n)]
            for i in range(0, n, 5000):
                recs = [MemoryRecord(id=f"m{j}", namespace=ns[j], content=texts[j]) for j in range(i, min(n, i + 5000))]
                svc.backend.upsert(recs, vecs[i : i + len(recs)])
                if progress:
                    progress(f"load {n}", min(n, i + 5000), n)
            lat = _time_searches(lambda q: svc.search(q, "bench", top_k=10), qs)
            t = time.perf_counter()
            svc.write_many(NewMemory(f"new memory {k}: {texts[k]}", ("bench", "new")) for k in range(write_sample))
            w = write_sample / (time.perf_counter() - t)
            results.append(Result("memory-sqlite", n, statistics.median(lat), _pct(lat, 0.95), w, len(qs)))
            svc.close()
            # --- numpy floor: query embedding + exact scan
            mat = np.ascontiguousarray(vecs)

            def floor(q: str) -> Any:
                s = mat @ emb.embed_query(q)
                return np.argpartition(-s, 10)[:10]

            lat = _time_searches(floor, qs)
            results.append(Result("numpy-floor", n, statistics.median(lat), _pct(lat, 0.95), None, len(qs)))
            # --- LangGraph InMemoryStore with the same embedder (vectors precomputed for the load)
            if n <= inmemory_max:
                results.append(_bench_inmemory(emb, texts, vecs, qs if n <= 10_000 else qs[:slow_queries], write_sample, progress))
            gc.collect()
    return {
        "results": [r.as_dict() for r in results],
        "config": {"embedding_model": settings.embedding.model, "sizes": list(sizes), "queries": queries},
    }


def _bench_inmemory(emb: Embedder, texts: list[str], vecs: np.ndarray, qs: list[str], write_sample: int,
                    progress: Callable[[str, int, int], None] | None) -> Result:
    from langgraph.store.memory import InMemoryStore

    known = {t: v for t, v in zip(texts, vecs, strict=True)}

    def embed(batch: list[str]) -> list[list[float]]:
        missing = [t for t in batch if t not in known]
        if missing:
            for t, v in zip(missing, emb.embed_documents(missing), strict=True):
                known[t] = v
        return [known[t].tolist() for t in batch]

    store = InMemoryStore(index={"dims": emb.dim, "embed": embed, "fields": ["text"]})
    n = len(texts)
    from langgraph.store.base import PutOp

    for i in range(0, n, 5000):
        store.batch([PutOp(("bench", f"u{j % 10}"), f"m{j}", {"text": texts[j]}) for j in range(i, min(n, i + 5000))])
        if progress:
            progress(f"inmemory load {n}", min(n, i + 5000), n)

    def search(q: str) -> Any:
        known.pop(q, None)  # queries are embedded for real each time
        return store.search(("bench",), query=q, limit=10)

    lat = _time_searches(search, qs)
    t = time.perf_counter()
    for k in range(min(write_sample, 200)):
        store.put(("bench", "new"), f"w{k}", {"text": f"new memory {k}: {texts[k]}"})
    w = min(write_sample, 200) / (time.perf_counter() - t)
    return Result("langgraph-inmemory", n, statistics.median(lat), _pct(lat, 0.95), w, len(qs))
