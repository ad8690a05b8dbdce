"""Memory of several processes searching one store, and in-process open / warm figures.

Run: ``python -m memctl.bench_procs STORE.sqlite [--procs 4] [--searches 50] [--floor] [--detail]`` (a store built by
``memctl bench --cold``, e.g. ``~/.cache/langgraph-memory/bench/cold-100000/memory.sqlite``).

* ``open``: in-process seconds to open the store (``SqliteBackend.__init__``), to the first scoped
  and unscoped search, then warm p50/p95 of scoped and unscoped ``MemoryService.search``.
* ``procs``: N worker processes each run scoped searches over random users' namespaces; while
  they are all alive, each one's RSS, PSS and USS (private) are read from ``/proc/PID/smaps_rollup``.
  Two start modes: ``spawn`` (independent processes, like separate CLI or MCP clients) and
  ``fork`` (a preloading server: the parent runs :func:`memory.forking.prefork` and forks the
  workers; the parent is counted with them). One process alone is measured the same way for the
  ratio; ``procs_fork.pss_vs_standalone`` is the whole server (parent + N workers) against ONE
  spawned process doing the same searches (issue 13's target: < 2).
* ``--steady``: the same with every partition loaded, the state of long-lived processes: one
  spawned process that loaded them all vs ``prefork(preload_index=True)`` + N workers, and vs N
  spawned processes that each loaded them all (``spawned``, ``spawned_pss_ratio``). With
  ``--unscoped N`` every steady worker first runs N searches over the whole store: with the
  mapped ``<store>.partitions`` file a loaded partition's pages are read in when searched, so
  the scoped searches alone leave most of it unread.
* ``--detail``: what a worker still holds privately: its ``Private_Dirty`` by mapping
  (``/proc/PID/smaps``), and, for a lone worker, the Python heap it allocated itself
  (tracemalloc, started in the worker after the fork; not in the counted runs, as it adds its
  own heap). With ``--steady`` also a lone spawned worker that loaded every partition
  (``detail_spawn_steady_1``): what a long-lived independent process keeps of its own.
* ``pss_by_kind``: each measurement's PSS (summed over its processes) by kind of mapping: the
  processes' own anonymous memory (``anon``), the store's files (``store_files``: the mapped
  ``<store>.partitions``; pages only one process maps count whole to it), the packaged model's
  files (``model``) and libraries (``libs``). The in-process ``open`` figures run in a process
  of their own (``--skip-open`` skips them), so this process maps nothing while others are measured.
* ``--union``: also ``union_mb``, the memory a group of processes maps together with each physical
  page counted once (from ``/proc/PID/pagemap``; needs root): unlike PSS it does not depend on
  unrelated processes mapping the same model or library files; for one process it is its RSS.
  ``procs_fork.union_vs_standalone``: the server's against one spawned process's.
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


def _kind(mapping: str) -> str:
    """What a mapping is, for the PSS breakdown: the process's own anonymous memory (heap, Python
    arenas, stacks), the store's own files (``<store>.partitions``, ``.vectors``, the SQLite file),
    the packaged model's files, or code and data of libraries and the interpreter."""
    if mapping.startswith("["):
        return "anon"
    if "/models/" in mapping:
        return "model"
    if ".sqlite" in mapping:
        return "store_files"
    return "libs"


def _pss_by_kind(pid: int) -> dict[str, float]:
    """A process's PSS (MB) by :func:`_kind` of mapping, from ``/proc/PID/smaps``."""
    out = {"anon": 0.0, "store_files": 0.0, "model": 0.0, "libs": 0.0}
    kind = "anon"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if not head:
            continue
        if "-" in head[0] and not head[0].endswith(":"):
            kind = _kind(head[5] if len(head) > 5 else "[anon]")
        elif head[0] == "Pss:":
            out[kind] += int(head[1]) / 1024
    return out


def _sum_kinds(kinds: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(sum(d[k] for d in kinds), 1) for k in kinds[0]}


# Run by ``_union_mb`` in a process of its own (its own pages are not among those counted).
_UNION_CODE = """
import sys
import numpy as np
pfns = []
for pid in sys.argv[1:]:
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pm:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo >= 1 << 47:
                continue  # [vsyscall]
            pm.seek(lo // 4096 * 8)
            e = np.frombuffer(pm.read((hi - lo) // 4096 * 8), dtype=np.uint64)
            e = e[(e >> np.uint64(63)) == 1] & np.uint64((1 << 55) - 1)
            pfns.append(e)
u = np.unique(np.concatenate(pfns)) if pfns else np.zeros(0, dtype=np.uint64)
print(-1 if len(u) and not u.any() else len(u) * 4096 / 2**20)
"""


def _union_mb(pids: list[int]) -> float | None:
    """Memory the processes ``pids`` map together, each physical page counted once whoever else
    maps it (pages shared with processes outside the group count whole, unlike PSS; a lone
    process's figure is its RSS). Needs the page frame numbers of ``/proc/PID/pagemap`` (root,
    CAP_SYS_ADMIN): None without them."""
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", _UNION_CODE, *map(str, pids)], capture_output=True, text=True,
                             timeout=120, check=True).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    mb = float(out)
    return None if mb < 0 else round(mb, 1)


def _service(path: str) -> Any:
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    return MemoryService.from_settings(MemorySettings(path=path))


def _namespaces(svc: Any) -> list[str]:
    return sorted("/".join(ns) for ns, _ in svc.backend.namespaces())


def _load_all(svc: Any) -> None:
    """Every namespace's partition loaded: the state of a long-lived process that has searched
    every namespace at least twice (what ``prefork(preload_index=True)`` loads in the parent)."""
    b = svc.backend
    with b._lock:
        kinds = sorted({ns[:1] for ns, _ in b.namespaces()})
        b._matching(kinds)


def _worker(path: str, searches: int, seed: int, ready: Any, done: Any, svc: Any = None,
            trace: str | None = None, steady: bool = False, unscoped: int = 0) -> None:
    if trace:  # what this worker allocates itself (started after the fork: the parent's heap is not counted)
        import tracemalloc

        tracemalloc.start(8)
    if svc is None:
        svc = _service(path)
        if steady:
            _load_all(svc)
    names = [n for n in _namespaces(svc) if n.startswith("user_profile/")]
    rng = random.Random(seed)
    kinds = sorted({n.split("/")[0] for n in _namespaces(svc)}) if unscoped else []
    for i in range(unscoped):  # searches over the whole store: every vector read at least once
        svc.search(QUERIES[i % len(QUERIES)], kinds, top_k=5)
    for i in range(searches):
        svc.search(QUERIES[i % len(QUERIES)], rng.choice(names), top_k=5)
    if trace:
        snap = tracemalloc.take_snapshot()
        Path(trace).write_text(json.dumps(_top_allocs(snap)))
    ready.set()
    done.wait(600)


def _top_allocs(snap: Any, n: int = 12) -> dict[str, Any]:
    """Python heap a worker added, by module and by line (tracemalloc), largest first."""
    by_file: dict[str, int] = {}
    for st in snap.statistics("filename"):
        f = st.traceback[0].filename
        key = f.split("site-packages/")[-1] if "site-packages/" in f else f.split("/wt/")[-1]
        by_file[key] = by_file.get(key, 0) + st.size
    lines = [{"where": f"{st.traceback[0].filename.split('/')[-1]}:{st.traceback[0].lineno}",
              "mb": round(st.size / 2**20, 2), "blocks": st.count} for st in snap.statistics("lineno")[:n]]
    files = sorted(by_file.items(), key=lambda kv: -kv[1])[:n]
    return {"total_mb": round(sum(by_file.values()) / 2**20, 2),
            "by_file": [{"file": f, "mb": round(b / 2**20, 2)} for f, b in files], "by_line": lines}


def _dirty_by_mapping(pid: int, n: int = 10) -> list[dict[str, Any]]:
    """A process's Private_Dirty per mapping (``/proc/PID/smaps``), anonymous ones as [heap] /
    [anon], largest first: what a worker has copied or allocated for itself."""
    out: dict[str, int] = {}
    name = "?"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if not head:
            continue
        if "-" in head[0] and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anon]"
            name = name.split("site-packages/")[-1]
        elif head[0] == "Private_Dirty:":
            out[name] = out.get(name, 0) + int(head[1])
    top = sorted(out.items(), key=lambda kv: -kv[1])[:n]
    return [{"mapping": k, "private_dirty_mb": round(v / 1024, 1)} for k, v in top if v]


_PRELOADED: Any = None


def _idle_worker(path: str, searches: int, seed: int, ready: Any, done: Any, trace: str | None = None,
                 unscoped: int = 0) -> None:
    from memory.service import MemoryService  # noqa: F401 - imported to be measured
    from memory.settings import MemorySettings  # noqa: F401

    ready.set()
    done.wait(600)


def _spawn_worker(path: str, searches: int, seed: int, ready: Any, done: Any, trace: str | None = None,
                  unscoped: int = 0) -> None:
    _worker(path, searches, seed, ready, done, None, trace, unscoped=unscoped)


def _spawn_steady_worker(path: str, searches: int, seed: int, ready: Any, done: Any,
                         trace: str | None = None, unscoped: int = 0) -> None:
    _worker(path, searches, seed, ready, done, None, trace, steady=True, unscoped=unscoped)


def _fork_worker(path: str, searches: int, seed: int, ready: Any, done: Any, trace: str | None = None,
                 unscoped: int = 0) -> None:
    _worker(path, searches, seed, ready, done, _PRELOADED, trace, unscoped=unscoped)


def procs(path: str, n: int, searches: int, mode: str, detail: bool = False, unscoped: int = 0,
          union: bool = False) -> dict[str, Any]:
    """Memory of ``n`` processes searching one store. ``fork``: workers forked from this process
    after :func:`memory.forking.prefork` (a preloading server), and this parent is counted too.
    ``detail``: worker 0 also reports its Private_Dirty by mapping and, when it is the only
    worker, its own Python allocations (tracemalloc adds its own heap, so not with n > 1)."""
    global _PRELOADED
    ctx = mp.get_context("fork" if mode.startswith("fork") else "spawn")
    if mode.startswith("fork"):
        from memory.forking import prefork
        from memory.settings import MemorySettings

        _PRELOADED = prefork(MemorySettings(path=path), preload_index=mode == "fork-steady")
    target = {"fork": _fork_worker, "fork-steady": _fork_worker, "floor": _idle_worker,
              "spawn-steady": _spawn_steady_worker}.get(mode, _spawn_worker)
    done = ctx.Event()
    readies = [ctx.Event() for _ in range(n)]
    trace = None
    if detail and n == 1:
        import tempfile

        trace = tempfile.mktemp(prefix="bench_procs_trace_", suffix=".json")
    ps = [ctx.Process(target=target, args=(path, searches, i, readies[i], done, trace if i == 0 else None, unscoped))
          for i in range(n)]
    for p in ps:
        p.start()
    for r in readies:
        r.wait(900)
    mems = [_mem(p.pid) for p in ps]  # type: ignore[arg-type]
    parent = _mem(os.getpid()) if mode.startswith("fork") else None
    kinds = [_pss_by_kind(p.pid) for p in ps] + ([_pss_by_kind(os.getpid())] if parent else [])  # type: ignore[arg-type]
    dirty = _dirty_by_mapping(ps[0].pid) if detail else None  # type: ignore[arg-type]
    together = _union_mb([p.pid for p in ps] + ([os.getpid()] if parent else [])) if union else None  # type: ignore[misc]
    done.set()
    for p in ps:
        p.join(60)
    _PRELOADED = None
    tot = {k: round(sum(m[k] for m in mems), 1) for k in mems[0]}
    res: dict[str, Any] = {"procs": n, "mode": mode, "per_process": mems, "total": tot,
                           "pss_by_kind": _sum_kinds(kinds)}
    if parent is not None:
        res["parent"] = parent
        res["total"] = {k: round(tot[k] + parent[k], 1) for k in tot}  # the server: parent + workers
        res["workers"] = tot
    if dirty is not None:
        res["worker_private_dirty"] = dirty
    if together is not None:
        res["union_mb"] = together
    if trace and os.path.exists(trace):
        res["worker_allocations"] = json.loads(Path(trace).read_text())
        os.unlink(trace)
    return res


def _driver(path: str, n: int, searches: int, mode: str, detail: bool, out: Any, unscoped: int = 0,
            union: bool = False) -> None:
    out.put(procs(path, n, searches, mode, detail, unscoped, union))


def _fresh_procs(path: str, n: int, searches: int, mode: str, detail: bool = False,
                 unscoped: int = 0, union: bool = False) -> dict[str, Any]:
    """:func:`procs` run from a fresh interpreter. Forked workers share their parent's pages, so
    a parent that had just run ``open_and_warm`` (every partition loaded, then freed into its
    heap) made a forked worker's PSS depend on what that heap kept: 455 MB RSS per worker in one
    run, 663 MB in the next. Each measurement's parent now holds only its preload."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    driver = ctx.Process(target=_driver, args=(path, n, searches, mode, detail, out, unscoped, union))
    driver.start()
    res = out.get(timeout=1800)
    driver.join(60)
    return res  # type: ignore[no-any-return]


def _call(fn: Any, args: tuple[Any, ...], out: Any) -> None:
    out.put(fn(*args))


def _fresh_call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a fresh spawned interpreter (its result must pickle)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_call, args=(fn, args, out))
    p.start()
    res = out.get(timeout=1800)
    p.join(60)
    return res


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
    ap.add_argument("--skip-open", action="store_true", help="skip the in-process open / warm figures")
    ap.add_argument("--floor", action="store_true", help="also: processes that only import the library")
    ap.add_argument("--steady", action="store_true",
                    help="also: every partition loaded (prefork(preload_index=True) vs one process that loaded them)")
    ap.add_argument("--unscoped", type=int, default=0,
                    help="--steady: each worker also runs this many searches over the whole store first")
    ap.add_argument("--union", action="store_true",
                    help="also: the pages each group of processes maps together, each counted once (union_mb; root)")
    ap.add_argument("--detail", action="store_true",
                    help="also: a worker's Private_Dirty by mapping and its own allocations (tracemalloc)")
    a = ap.parse_args()
    res: dict[str, Any] = {"store": a.store, "load_avg_before": os.getloadavg()}
    if not a.skip_open:
        # In a process of its own: this one would keep the model mapped (get_embedder caches it),
        # and a page mapped here too counts half in a measured process's PSS: one spawned
        # process's model pages counted ~10.6 MB instead of ~21 MB, the server's 5 processes
        # only 1/6 less, which made the ratios depend on the benchmark's own process.
        res["open"] = _fresh_call(open_and_warm, a.store, a.queries)
    if not a.skip_procs:
        for mode in ("spawn", "fork") + (("floor",) if a.floor else ()):
            one = _fresh_procs(a.store, 1, a.searches, mode, union=a.union)
            many = _fresh_procs(a.store, a.procs, a.searches, mode, union=a.union)
            res[f"procs_{mode}"] = {"one": one["total"], "many": many["total"], "n": a.procs,
                                    "pss_ratio": round(many["total"]["pss_mb"] / one["total"]["pss_mb"], 2),
                                    "uss_ratio": round(many["total"]["uss_mb"] / one["total"]["uss_mb"], 2),
                                    "pss_by_kind": {"one": one["pss_by_kind"], "many": many["pss_by_kind"]},
                                    "union_mb": {"one": one.get("union_mb"), "many": many.get("union_mb")},
                                    "per_process": many["per_process"]}
            if mode == "fork":
                # The target of issue 13: the whole server (parent + N workers) against ONE
                # standalone process doing the same searches.
                alone = res["procs_spawn"]["one"]
                res["procs_fork"].update(
                    parent=many["parent"], workers=many["workers"],
                    pss_vs_standalone=round(many["total"]["pss_mb"] / alone["pss_mb"], 2),
                    union_vs_standalone=(round(many["union_mb"] / res["procs_spawn"]["union_mb"]["one"], 2)
                                         if a.union and res["procs_spawn"]["union_mb"]["one"] else None),
                    rss_vs_standalone=round(many["total"]["rss_mb"] / alone["rss_mb"], 2))
        if a.steady:
            # A long-lived server: every partition loaded. Standalone: one spawned process that
            # loaded them itself; server: prefork(preload_index=True) + N workers, parent counted.
            alone = _fresh_procs(a.store, 1, a.searches, "spawn-steady", unscoped=a.unscoped)
            server = _fresh_procs(a.store, a.procs, a.searches, "fork-steady", unscoped=a.unscoped)
            # N independent processes that each loaded every partition (uvicorn --workers, MCP
            # clients): what the mapped <store>.partitions file lets them share.
            spawned = _fresh_procs(a.store, a.procs, a.searches, "spawn-steady", unscoped=a.unscoped)
            res["procs_steady"] = {"standalone": alone["total"], "server": server["total"], "parent": server["parent"],
                                   "workers": server["workers"], "n": a.procs,
                                   "pss_vs_standalone": round(server["total"]["pss_mb"] / alone["total"]["pss_mb"], 2),
                                   "per_process": server["per_process"], "spawned": spawned["total"],
                                   "spawned_pss_ratio": round(spawned["total"]["pss_mb"] / alone["total"]["pss_mb"], 2),
                                   "pss_by_kind": {"standalone": alone["pss_by_kind"], "server": server["pss_by_kind"],
                                                   "spawned": spawned["pss_by_kind"]},
                                   "spawned_per_process": spawned["per_process"], "unscoped": a.unscoped}
        if a.detail:
            res["detail_fork_1"] = _fresh_procs(a.store, 1, a.searches, "fork", detail=True)
            res["detail_fork_n"] = {k: v for k, v in _fresh_procs(a.store, a.procs, a.searches, "fork",
                                                                  detail=True).items() if k != "per_process"}
            res["detail_spawn_1"] = _fresh_procs(a.store, 1, a.searches, "spawn", detail=True)
            if a.steady:  # a long-lived independent process: every partition loaded, scoped searches
                res["detail_spawn_steady_1"] = _fresh_procs(a.store, 1, a.searches, "spawn-steady", detail=True,
                                                            unscoped=a.unscoped)
    res["load_avg_after"] = os.getloadavg()
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
