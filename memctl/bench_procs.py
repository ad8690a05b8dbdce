"""Memory of several processes searching one store, and in-process open / warm figures.

Run: ``python -m memctl.bench_procs STORE.sqlite [--procs 4] [--searches 50]`` (a store built by
``memctl bench --cold``, e.g. ``~/.cache/langgraph-memory/bench/cold-100000/memory.sqlite``).

* ``open``: in-process seconds to open the store (``SqliteBackend.__init__``), to the first scoped
  and unscoped search, then warm p50/p95 of scoped and unscoped ``MemoryService.search``.
* ``procs``: N worker processes each run scoped searches over random users' namespaces; while
  they are all alive, each one's RSS, PSS and USS (private) are read from ``/proc/PID/smaps_rollup``.
  Two start modes: ``spawn`` (independent processes, like separate CLI or MCP clients) and
  ``fork`` (workers forked from a parent that opened the store and loaded the model, like a
  preloading server). One process alone is measured the same way for the ratio.
* ``floor`` (``--floor``): the same ratio for spawned processes that only import the library
  (``memory.service``, ``memory.settings``: the interpreter, numpy, pydantic) and wait: no store,
  no model, no search. A process's private heap counts once per process and shared pages once in
  all, so a ratio under 2 needs each process's shared pages to outweigh twice its private heap;
  this shows where the interpreter alone stands (for one process, the shared libraries are
  partly paid by unrelated processes on the machine too: libpython, libc).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

QUERIES = ["which chart style does the user prefer", "用户喜欢什么图表", "weekly sales report for the east region",
           "deadline of the quarterly budget", "客户退款的流程", "what did the user say about coffee"]


def _mem(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0].rstrip(":") in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            out[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {"rss_mb": out["Rss"], "pss_mb": out["Pss"], "uss_mb": out["Private_Clean"] + out["Private_Dirty"]}


def _service(path: str) -> Any:
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    return MemoryService.from_settings(MemorySettings(path=path))


def _namespaces(svc: Any) -> list[str]:
    return sorted("/".join(ns) for ns, _ in svc.backend.namespaces())


def _worker(path: str, searches: int, seed: int, ready: Any, done: Any, svc: Any = None) -> None:
    svc = svc or _service(path)
    names = [n for n in _namespaces(svc) if n.startswith("user_profile/")]
    rng = random.Random(seed)
    for i in range(searches):
        svc.search(QUERIES[i % len(QUERIES)], rng.choice(names), top_k=5)
    ready.set()
    done.wait(600)


_PRELOADED: Any = None


def _idle_worker(path: str, searches: int, seed: int, ready: Any, done: Any) -> None:
    from memory.service import MemoryService  # noqa: F401 - imported to be measured
    from memory.settings import MemorySettings  # noqa: F401

    ready.set()
    done.wait(600)


def _fork_worker(path: str, searches: int, seed: int, ready: Any, done: Any) -> None:
    _worker(path, searches, seed, ready, done, _PRELOADED)


def procs(path: str, n: int, searches: int, mode: str) -> dict[str, Any]:
    global _PRELOADED
    ctx = mp.get_context("spawn" if mode == "floor" else mode)
    if mode == "fork":
        _PRELOADED = _service(path)
        _PRELOADED.search(QUERIES[0], "user_profile", top_k=1)  # model loaded, catalogue built
        _PRELOADED.backend._reset_indexes()  # type: ignore[attr-defined] # partitions are the workers' own
    target = _fork_worker if mode == "fork" else _idle_worker if mode == "floor" else _worker
    done = ctx.Event()
    readies = [ctx.Event() for _ in range(n)]
    ps = [ctx.Process(target=target, args=(path, searches, i, readies[i], done)) for i in range(n)]
    for p in ps:
        p.start()
    for r in readies:
        r.wait(900)
    mems = [_mem(p.pid) for p in ps]  # type: ignore[arg-type]
    done.set()
    for p in ps:
        p.join(60)
    _PRELOADED = None
    tot = {k: round(sum(m[k] for m in mems), 1) for k in mems[0]}
    return {"procs": n, "mode": mode, "per_process": mems, "total": tot}


def _driver(path: str, n: int, searches: int, mode: str, out: Any) -> None:
    out.put(procs(path, n, searches, mode))


def _fresh_procs(path: str, n: int, searches: int, mode: str) -> dict[str, Any]:
    """:func:`procs` run from a fresh interpreter. Forked workers share their parent's pages, so
    a parent that had just run ``open_and_warm`` (every partition loaded, then freed into its
    heap) made a forked worker's PSS depend on what that heap kept: 455 MB RSS per worker in one
    run, 663 MB in the next. Each measurement's parent now holds only its preload."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    driver = ctx.Process(target=_driver, args=(path, n, searches, mode, out))
    driver.start()
    res = out.get(timeout=1800)
    driver.join(60)
    return res  # type: ignore[no-any-return]


def open_and_warm(path: str, queries: int = 100) -> dict[str, Any]:
    from memory.backends.sqlite import SqliteBackend
    from memory.embeddings import get_embedder
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    s = MemorySettings(path=path)
    emb = get_embedder(s.embedding.model)
    emb.embed_query("warm the model")  # the model's load is not the store's open
    t = time.perf_counter()
    backend = SqliteBackend(path, embedding_model=emb.name, dim=emb.dim)
    open_s = time.perf_counter() - t
    svc = MemoryService(backend, emb, s)
    names = _namespaces(svc)
    kinds = sorted({n.split("/")[0] for n in names})
    t = time.perf_counter()
    svc.search(QUERIES[0], names[len(names) // 2], top_k=10)
    first_scoped = time.perf_counter() - t
    t = time.perf_counter()
    svc.search(QUERIES[0], kinds, top_k=10)
    first_unscoped = time.perf_counter() - t
    inner = getattr(emb, "inner", emb)  # real query embedding in every timed search
    svc.embedder = inner
    rng = random.Random(5)
    out: dict[str, Any] = {"open_s": round(open_s, 4), "first_scoped_s": round(first_scoped, 3),
                           "first_unscoped_s": round(first_unscoped, 3)}
    for label, pick in (("scoped", lambda: rng.choice(names)), ("unscoped", lambda: kinds)):
        lat = []
        for i in range(queries):
            ns = pick()
            t = time.perf_counter()
            svc.search(f"{QUERIES[i % len(QUERIES)]} #{i}", ns, top_k=10)
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        out[f"warm_{label}_p50_ms"] = round(statistics.median(lat), 2)
        out[f"warm_{label}_p95_ms"] = round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2)
    out["loaded_partitions"] = len(backend._parts.loaded)
    svc.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--searches", type=int, default=50)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--skip-procs", action="store_true")
    ap.add_argument("--floor", action="store_true", help="also: processes that only import the library")
    a = ap.parse_args()
    res: dict[str, Any] = {"store": a.store, "load_avg_before": os.getloadavg()}
    res["open"] = open_and_warm(a.store, a.queries)
    if not a.skip_procs:
        for mode in ("spawn", "fork") + (("floor",) if a.floor else ()):
            one = _fresh_procs(a.store, 1, a.searches, mode)
            many = _fresh_procs(a.store, a.procs, a.searches, mode)
            res[f"procs_{mode}"] = {"one": one["total"], "many": many["total"], "n": a.procs,
                                    "pss_ratio": round(many["total"]["pss_mb"] / one["total"]["pss_mb"], 2),
                                    "uss_ratio": round(many["total"]["uss_mb"] / one["total"]["uss_mb"], 2),
                                    "per_process": many["per_process"]}
    res["load_avg_after"] = os.getloadavg()
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
