"""Warm search figures on a large store, in one fresh process: open, first searches, warm p50/p95, RSS.

Run: ``python -m memctl.bench_warm STORE.sqlite [--queries 100] [--unscoped-queries 100]`` (a store
built by ``memctl bench --cold``, e.g. ``~/.cache/langgraph-memory/bench/cold-1000000/memory.sqlite``),
or through ``memctl bench --cold --warm-queries N``, which runs it on every size's store.

Unlike :func:`memctl.bench_procs.open_and_warm` (which picks a random namespace per query, so at
1M nearly every scoped search meets a namespace it has not loaded), it separates the cases a
server meets, every search timed with its query embedding (the embedder's query cache is
bypassed, each query text is distinct):

* ``open_s``: ``SqliteBackend.__init__`` (the model is loaded before, outside the timing).
* ``scoped_new``: each search into a namespace this process has not searched before (streamed
  from the vector file and FTS5).
* ``scoped_loaded``: searches rotating over ``--users`` namespaces already searched enough times
  to be loaded (a server's active users).
* ``unscoped_first_s`` / ``unscoped_load_s``: the first search over every namespace (streamed),
  and the one that loads every partition (``PartitionMixin.LOAD_AFTER``); then ``unscoped``: warm
  p50 / p95 over every namespace, each checked to have used the loaded index, not the stream.
* ``rss_mb`` / ``hwm_mb``: this process's resident and peak resident memory at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from memctl.bench_corpus import make_queries


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _pcts(lat: list[float]) -> dict[str, float]:
    xs = sorted(lat)
    return {"p50_ms": round(statistics.median(xs), 2), "p95_ms": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 2),
            "n": len(xs)}


def warm(path: str, queries: int = 100, unscoped_queries: int = 100, users: int = 20, seed: int = 5
         ) -> dict[str, Any]:
    """The figures of the module docstring for the store at ``path``."""
    from memory.backends.sqlite import SqliteBackend
    from memory.embeddings import get_embedder
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    if queries < 1 or unscoped_queries < 1 or users < 1:
        raise ValueError("queries, unscoped_queries and users must be >= 1")
    if not Path(path).is_file():
        raise FileNotFoundError(f"no store at {path}; build one with `memctl bench --cold --sizes N`")
    s = MemorySettings(path=path)
    emb = get_embedder(s.embedding.model)
    emb.embed_query("warm the model")  # the model's load is not the store's open
    t = time.perf_counter()
    backend = SqliteBackend(path, embedding_model=emb.name, dim=emb.dim)
    out: dict[str, Any] = {"store": path, "open_s": round(time.perf_counter() - t, 4),
                           "load_avg_before": os.getloadavg()}
    svc = MemoryService(backend, getattr(emb, "inner", emb), s)  # real query embedding in every search
    texts = iter(make_queries(4 * queries + unscoped_queries + 10 * users + 20))
    names = sorted("/".join(ns) for ns, _ in backend.namespaces())
    kinds = sorted({n.split("/")[0] for n in names})
    rng = random.Random(seed)
    active = rng.sample(names, min(users, len(names)))
    fresh = [n for n in rng.sample(names, min(len(names), queries + users)) if n not in active][:queries]

    def timed(ns: str | list[str]) -> float:
        t0 = time.perf_counter()
        svc.search(next(texts), ns, top_k=10)
        return (time.perf_counter() - t0) * 1000

    # None when every namespace is among the active ones (a small store)
    out["scoped_new"] = _pcts([timed(n) for n in fresh]) if fresh else None
    for n in active:  # searched until loaded (SMALL_LOAD_AFTER), untimed
        for _ in range(3):
            timed(n)
    out["scoped_loaded"] = _pcts([timed(active[i % len(active)]) for i in range(queries)])
    out["unscoped_first_s"] = round(timed(kinds) / 1000, 3)
    parts = backend._parts  # type: ignore[attr-defined]
    loads = []
    while len(parts.loaded) < len(names) and len(loads) < 5:  # until the search loads every partition
        loads.append(timed(kinds) / 1000)
    out["unscoped_load_s"] = round(loads[-1], 3) if loads else 0.0
    out["unscoped_searches_to_load"] = len(loads) + 1
    lat = []
    plans: dict[str, int] = {}
    for _ in range(unscoped_queries):
        lat.append(timed(kinds))
        plan = backend._index.last_plan  # type: ignore[attr-defined]
        plans[plan] = plans.get(plan, 0) + 1
    out["unscoped"] = {**_pcts(lat), "plans": plans}
    out["loaded_partitions"] = len(backend._parts.loaded)  # type: ignore[attr-defined]
    out["rss_mb"] = _status_mb("VmRSS")
    out["hwm_mb"] = _status_mb("VmHWM")
    out["load_avg_after"] = os.getloadavg()
    svc.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--queries", type=int, default=100, help="timed scoped searches per case")
    ap.add_argument("--unscoped-queries", type=int, default=100, help="timed warm unscoped searches")
    ap.add_argument("--users", type=int, default=20, help="namespaces kept loaded for the scoped_loaded case")
    a = ap.parse_args()
    print(json.dumps(warm(a.store, a.queries, a.unscoped_queries, a.users), indent=2))


if __name__ == "__main__":
    main()
