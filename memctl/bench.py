"""Latency benchmark: our backends against baselines, same corpus, same embedder, one process.

Systems (each searched with query embedding included in the timing):

* ``memory-sqlite`` — our embedded default (SQLite file + in-memory vector and BM25 indexes),
  full ``MemoryService.search`` path (hybrid, scoring, query rules, records).
* ``numpy-floor`` — a float32 matrix scan with argpartition: the floor for a plain exact scan.
  Our index's two-stage scan (still exact, see ``memory.backends.vector_index``) can go below
  it, more so on this generated corpus, whose vectors are more concentrated in a few
  directions than real conversation turns (90% of the energy in 64 vs 192 of 512 dims): at
  100k the scan alone takes p50 4.3 vs 7.0 ms (full scan ~11 ms).
* ``memory-qdrant-local`` — the same service on our Qdrant backend in qdrant-client's local mode.
* ``langgraph-inmemory`` — LangGraph's ``InMemoryStore(index=...)`` with the same embedder.
* ``langgraph-sqlite-vec`` — LangGraph's ``SqliteStore`` with its sqlite-vec index (through
  ``pysqlite3``, since this Python's ``sqlite3`` cannot load extensions).
* handoff overhead — the Supervisor's memory pre+post nodes per handoff (``memctl.bench_handoff``),
  with inline writes and with write-behind (queued writes, given 50 ms of simulated model time
  per node), ``queries`` handoffs per mode after two untimed turns, with the heap frozen
  (``gc.freeze``) as a server's after start-up. ``handoff_overhead_p95_ms`` reports the mode
  ``policy.write_behind`` selects by default, named in ``handoff_overhead_mode``; both are always
  reported.

The corpus is generated (zh/en memory-like sentences, seeded). Vectors are embedded once and
shared by all systems, so the load phase does not dominate; write throughput is measured
separately, end to end (embedding included), on fresh memories.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memctl.bench_corpus import embed_corpus, make_corpus, make_queries
from memory.embeddings import Embedder, get_embedder
from memory.records import MemoryRecord
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings


@dataclass
class Result:
    system: str
    n: int
    search_p50_ms: float
    search_p95_ms: float
    write_per_s: float | None
    queries: int
    rss_mb: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _rss_mb() -> float:
    """Current resident set size of this process (Linux), in MiB.

    Callers take a delta around a store's load and clamp it at 0: a store that keeps its data on
    disk (sqlite-vec) grows RSS by about nothing, and memory the previous system freed can make
    the raw delta negative (-30 MiB at 100k before the clamp).
    """
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return float("nan")


def _time_searches(fn: Callable[[str], Any], queries: list[str]) -> list[float]:
    fn(queries[0])  # warm caches and lazy loads outside the timing
    out = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t) * 1000)
    return out


Progress = Callable[[str, int, int], None] | None


def _bench_ours(backend: str, settings: MemorySettings, emb: Embedder, texts: list[str], vecs: np.ndarray,
                qs: list[str], write_sample: int, progress: Progress) -> Result:
    """Our stack end to end: MemoryService.search (hybrid + scoring) on the chosen backend."""
    from memory.backends import open_backend

    n = len(texts)
    gc.collect()
    rss0 = _rss_mb()
    svc = MemoryService(open_backend(settings, emb.name, emb.dim), emb, settings)
    for i in range(0, n, 5000):
        recs = [MemoryRecord(id=f"m{j}", namespace=("bench", f"u{j % 10}"), content=texts[j])
                for j in range(i, min(n, i + 5000))]
        svc.backend.upsert(recs, vecs[i : i + len(recs)])
        if progress:
            progress(f"{backend} load {n}", min(n, i + 5000), n)
    rss = max(0.0, _rss_mb() - rss0)
    lat = _time_searches(lambda q: svc.search(q, "bench", top_k=10), qs)
    t = time.perf_counter()
    svc.write_many(NewMemory(f"new memory {k}: {texts[k % n]}", ("bench", "new")) for k in range(write_sample))
    w = write_sample / (time.perf_counter() - t)
    svc.close()
    return Result(f"memory-{backend}", n, statistics.median(lat), _pct(lat, 0.95), w, len(qs), rss)


def _cached_embed(emb: Embedder, texts: list[str], vecs: np.ndarray
                  ) -> tuple[Callable[[list[str]], list[list[float]]], dict[str, np.ndarray]]:
    """An embed function for LangGraph stores: corpus texts use the shared vectors (the load is
    not what we measure); anything else (queries, new writes) is embedded for real."""
    known = dict(zip(texts, vecs, strict=True))
    # LangGraph's SqliteStore hands the whole JSON value to the embedder, not the "text" field.
    for t, v in zip(texts, vecs, strict=True):
        known[json.dumps({"text": t})] = v
        known[json.dumps({"text": t}, ensure_ascii=False)] = v

    def embed(batch: list[str]) -> list[list[float]]:
        missing = [t for t in batch if t not in known]
        fresh = dict(zip(missing, emb.embed_documents(missing), strict=True)) if missing else {}
        return [(known.get(t) if t in known else fresh[t]).tolist() for t in batch]  # type: ignore[union-attr]

    return embed, known


def _bench_langgraph(kind: str, emb: Embedder, texts: list[str], vecs: np.ndarray, qs: list[str],
                     write_sample: int, tmp: str, progress: Progress) -> Result | None:
    from langgraph.store.base import PutOp

    embed, _ = _cached_embed(emb, texts, vecs)
    n = len(texts)
    gc.collect()
    rss0 = _rss_mb()
    if kind == "inmemory":
        from langgraph.store.memory import InMemoryStore

        store: Any = InMemoryStore(index={"dims": emb.dim, "embed": embed, "fields": ["text"]})
    else:
        try:  # this Python's sqlite3 cannot load extensions; sqlite-vec needs pysqlite3
            import pysqlite3.dbapi2 as sqlite3_ext  # type: ignore[import-not-found]
            from langgraph.store.sqlite import SqliteStore
        except ImportError:
            return None
        conn = sqlite3_ext.connect(str(Path(tmp) / f"lg-{n}.sqlite"), check_same_thread=False,
                                   isolation_level=None)
        store = SqliteStore(conn, index={"dims": emb.dim, "embed": embed, "fields": ["text"]})
        store.setup()
    for i in range(0, n, 2000):
        store.batch([PutOp(("bench", f"u{j % 10}"), f"m{j}", {"text": texts[j]}) for j in range(i, min(n, i + 2000))])
        if progress:
            progress(f"langgraph-{kind} load {n}", min(n, i + 2000), n)
    rss = max(0.0, _rss_mb() - rss0)
    lat = _time_searches(lambda q: store.search(("bench",), query=q, limit=10), qs)
    m = min(write_sample, 200)
    t = time.perf_counter()
    for k in range(m):
        store.put(("bench", "new"), f"w{k}", {"text": f"new memory {k}: {texts[k % n]}"})
    w = m / (time.perf_counter() - t)
    name = "langgraph-inmemory" if kind == "inmemory" else "langgraph-sqlite-vec"
    return Result(name, n, statistics.median(lat), _pct(lat, 0.95), w, len(qs), rss)


HANDOFF_AGENT_MS = 50.0  # write-behind run: untimed model time after each memory node


def run_bench(
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000),
    *,
    queries: int = 200,
    slow_queries: int = 10,
    write_sample: int = 300,
    systems: tuple[str, ...] = ("sqlite", "qdrant", "numpy", "inmemory", "langgraph-sqlite", "handoff"),
    cache_dir: Path | None = None,
    progress: Progress = None,
) -> dict[str, Any]:
    """Every system on the same corpus and queries, in this process. See the module docstring."""
    settings = MemorySettings(path=":memory:")
    results: list[Result] = []
    handoff: dict[str, Any] = {}
    handoff_wb: dict[str, Any] = {}
    qs_all = make_queries(queries)
    base = get_embedder(settings.embedding.model)
    # Real query embedding everywhere: no LRU cache in front of the model.
    emb: Embedder = getattr(base, "inner", base)
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            texts = make_corpus(n)
            vecs = embed_corpus(emb, texts, cache_dir, (lambda d, t: progress("embed", d, t)) if progress else None)
            if "sqlite" in systems:
                s = settings.model_copy(update={"path": str(Path(tmp) / f"bench-{n}.sqlite")})
                results.append(_bench_ours("sqlite", s, emb, texts, vecs, qs_all, write_sample, progress))
            if "qdrant" in systems:
                s = settings.model_copy(update={"backend": "qdrant"})
                # Qdrant's local mode is a test double (notes: ~160 ms per query at 100k).
                qs = qs_all if n <= 10_000 else qs_all[: max(slow_queries * 3, 10)]
                results.append(_bench_ours("qdrant-local", s, emb, texts, vecs, qs, min(write_sample, 100), progress))
            if "numpy" in systems:
                mat = np.ascontiguousarray(vecs)

                def floor(q: str, mat: np.ndarray = mat) -> Any:
                    s = mat @ emb.embed_query(q)
                    return np.argpartition(-s, 10)[:10]

                lat = _time_searches(floor, qs_all)
                results.append(Result("numpy-floor", n, statistics.median(lat), _pct(lat, 0.95), None, len(qs_all),
                                      vecs.nbytes / 2**20))
            if "inmemory" in systems:
                qs = qs_all if n <= 10_000 else qs_all[:slow_queries]
                results.append(_bench_langgraph("inmemory", emb, texts, vecs, qs, write_sample, tmp, progress))
            if "langgraph-sqlite" in systems:
                qs = qs_all if n <= 10_000 else qs_all[: slow_queries * 3]
                r = _bench_langgraph("sqlite", emb, texts, vecs, qs, write_sample, tmp, progress)
                if r is not None:
                    results.append(r)
            if "handoff" in systems:
                # Imported here: it loads the Supervisor app (LangGraph), which only this system needs.
                from memctl.bench_handoff import handoff_overhead

                # --queries handoffs per mode (it was always 100: a p95 was then the 6th-slowest
                # handoff, and runs of the same code differed by ±5-30 ms)
                handoff[str(n)] = handoff_overhead(n, queries, cache_dir=cache_dir)
                # 50 ms of simulated model time per node: real LLM calls take 0.5-5 s
                handoff_wb[str(n)] = handoff_overhead(n, queries, cache_dir=cache_dir, write_behind=True,
                                                      agent_ms=HANDOFF_AGENT_MS)
            gc.collect()
    inline_p95 = max((h["total_p95_ms"] for h in handoff.values()), default=None)
    wb_p95 = max((h["total_p95_ms"] for h in handoff_wb.values()), default=None)
    default_wb = settings.policy.write_behind
    return {
        "results": [r.as_dict() for r in results],
        # The headline is the Supervisor as configured by default (policy.write_behind), worst
        # size; both modes are reported in full below.
        "handoff_overhead_p95_ms": wb_p95 if default_wb else inline_p95,
        "handoff_overhead_mode": "write-behind" if default_wb else "inline",
        "handoff_overhead_inline_p95_ms": inline_p95,
        "handoff_overhead": handoff,
        # policy.write_behind=true: post-node writes queued (see memctl.bench_handoff for the method)
        "handoff_overhead_write_behind_p95_ms": wb_p95,
        "handoff_overhead_write_behind": handoff_wb,
        "handoff_write_behind_agent_ms": HANDOFF_AGENT_MS,
        "ratios": _ratios(results),
        "config": {"embedding_model": settings.embedding.model, "sizes": list(sizes), "queries": queries,
                   "cpu_count": os.cpu_count()},
    }


def _ratios(results: list[Result]) -> dict[str, dict[str, float]]:
    """p95 of memory-sqlite relative to each baseline, per size (lower is better for us)."""
    out: dict[str, dict[str, float]] = {}
    by = {(r.system, r.n): r for r in results}
    for (system, n), r in by.items():
        ours = by.get(("memory-sqlite", n))
        if ours is None or system == "memory-sqlite" or r.search_p95_ms <= 0:
            continue
        out.setdefault(str(n), {})[f"memory-sqlite_p95_over_{system}"] = round(ours.search_p95_ms / r.search_p95_ms, 3)
    return out


def plot(result: dict[str, Any], path: Path) -> Any:
    """Latency (p50 and p95) against corpus size, log-log, one line per system; returns the figure.

    A bare ``Figure`` (no pyplot): it renders to the file on any backend and leaves the caller's
    backend alone (a notebook keeps showing its plots inline)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    systems = sorted({r["system"] for r in result["results"]})
    for sysname in systems:
        rows = sorted((r for r in result["results"] if r["system"] == sysname), key=lambda r: r["n"])
        xs = [r["n"] for r in rows]
        line, = ax.plot(xs, [r["search_p50_ms"] for r in rows], marker="o", label=f"{sysname} p50")
        ax.plot(xs, [r["search_p95_ms"] for r in rows], marker="x", linestyle="--", color=line.get_color(), alpha=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("memories")
    ax.set_ylabel("search latency, ms (incl. query embedding); dashed = p95")
    ax.set_title("Search latency vs store size (same corpus, same embedder, one process)")
    ax.grid(True, which="both", alpha=0.3)
    if systems:  # a handoff-only run has no search lines (a legend of nothing warns)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig
