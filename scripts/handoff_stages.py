"""Where a handoff's time goes: per-stage wall and CPU time of the Supervisor's memory nodes.

    HF_HUB_OFFLINE=1 python scripts/handoff_stages.py [--size 100000] [--handoffs 300] [--inline]

Runs :func:`memctl.bench_handoff.handoff_overhead` as ``memctl bench --systems handoff`` does
(write-behind, 50 ms of simulated model time per node; ``--inline`` without write-behind) with
timers wrapped, from outside, around the stages of the pre-node and post-node. Only the thread
that runs the nodes is timed per stage (the background writer's own work shows up as the
foreground's waits, GC pauses and slower stages; ``other threads during pre`` is the CPU the
rest of the process spent while a pre-node ran). Stages nest (``search`` holds
``embed_query``, ``backend.query``, ``score``, ``rerank.learned`` ...), so rows do not add up.
GC pauses are timed with ``gc.callbacks`` (collections that ran on the timed thread). Each
background write is also timed on the worker thread that runs it (wall and thread CPU, its
queue wait excluded; the paraphrase model's own thread is not in its CPU).

Prints the mean per stage over the slowest 5% of timed handoffs (by pre + post + end-of-turn
wait) next to the mean over all of them, the writes' p50/p95 and the bench's own summary;
``--json`` keeps every handoff's stages. Timings only: results are not printed.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import memctl.bench_handoff as bh
import memory.backends.sqlite as sqlite_mod
import memory.embeddings as emb_mod
import memory.policy.manager as manager_mod
import memory.backends.sqlite_query as sqlite_query_mod
import memory.backends.vector_index as vector_index_mod
import memory.rerank as rerank_mod
import memory.service as service_mod
import supervisor.journal as journal_mod
import supervisor.nodes as nodes_mod
import supervisor.writebehind as wb_mod

_main = threading.main_thread().ident
_rows: list[defaultdict[str, list[float]]] = [defaultdict(lambda: [0.0, 0.0])]  # per handoff: stage -> [wall, cpu] ms


def _timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def inner(*a: Any, **k: Any) -> Any:
        if threading.get_ident() != _main:
            return fn(*a, **k)
        w, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            acc = _rows[-1][label]
            acc[0] += (time.perf_counter() - w) * 1000
            acc[1] += (time.thread_time() - c) * 1000

    return inner


def _wrap(obj: Any, name: str, label: str) -> None:
    setattr(obj, name, _timed(getattr(obj, name), label))


_gc_t = [0.0, 0.0]


def _gc_cb(phase: str, info: dict[str, Any]) -> None:
    if threading.get_ident() != _main:
        return
    if phase == "start":
        _gc_t[0], _gc_t[1] = time.perf_counter(), time.thread_time()
    else:
        acc = _rows[-1][f"gc.gen{info.get('generation')}"]
        acc[0] += (time.perf_counter() - _gc_t[0]) * 1000
        acc[1] += (time.thread_time() - _gc_t[1]) * 1000


def _instrument() -> None:
    # pre-node
    _wrap(manager_mod.MemoryManager, "route", "route")
    _wrap(wb_mod.WriteBehind, "barrier", "wait.barrier")
    _wrap(wb_mod.WriteBehind, "collect", "wait.collect")
    _wrap(nodes_mod, "_recall", "recall(all searches)")
    _wrap(service_mod.MemoryService, "search", "search")
    _wrap(manager_mod.MemoryManager, "recall", "recall(one ns, +audit)")
    _wrap(sqlite_mod.SqliteBackend, "query", "backend.query")
    _wrap(sqlite_mod.SqliteBackend, "_kw_stats", "backend.kw_stats(df)")
    _wrap(sqlite_mod.SqliteBackend, "_plan", "backend.plan")
    _wrap(sqlite_mod.SqliteBackend, "_fetch_rids", "backend.fetch_rows")
    _wrap(sqlite_mod.SqliteBackend, "_sync", "backend.sync")
    _wrap(service_mod.scoring, "score_candidates", "score")
    _wrap(service_mod, "rerank", "rerank.rules")
    _wrap(service_mod, "plan_query", "plan_query")
    _wrap(rerank_mod, "apply", "rerank.learned")
    # finer stages of the three largest (stop 34)
    _wrap(service_mod.scoring, "bridge_coverage", "score.bridge")
    _wrap(service_mod.scoring, "impute_keywords", "score.impute")
    _wrap(rerank_mod, "candidate_features", "rerank.features")
    _wrap(rerank_mod, "supersede_matrix", "rerank.features.supersede")
    _wrap(rerank_mod.RerankModel, "log_odds", "rerank.log_odds")
    _wrap(sqlite_query_mod.QueryMixin, "_keyword_arrays", "backend.keyword")
    _wrap(vector_index_mod.VectorIndex, "search", "backend.vector_search")
    _wrap(sqlite_query_mod, "row_to_record", "backend.parse_rows")
    _wrap(nodes_mod, "_inject", "inject")
    _wrap(emb_mod.CachedEmbedder, "embed_query", "embed_query(cached)")
    _wrap(emb_mod.FastEmbedEmbedder, "embed_query", "embed_query(model)")
    # post-node
    _wrap(journal_mod.WriteJournal, "add", "journal.add")
    _wrap(bh, "finish_writes", "wait.drain(end of turn)")
    gc.callbacks.append(_gc_cb)


_writes: list[tuple[float, float]] = []  # per background write: (wall, thread CPU) ms, queue wait excluded
_first_timed_write = [0]  # index in _writes of the first timed handoff's first write


def _wrap_writes() -> None:
    """Time each write on the thread that runs it (the write-behind worker)."""
    apply = nodes_mod.apply_entry

    def timed(*a: Any, **k: Any) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        try:
            return apply(*a, **k)
        finally:
            _writes.append(((time.perf_counter() - w) * 1000, (time.thread_time() - c) * 1000))

    nodes_mod.apply_entry = timed  # type: ignore[assignment]


def _wrap_nodes() -> None:
    """Each handoff's pre-node, post-node (and end-of-turn drain) as one row of stages."""
    make_pre, make_post = bh.make_pre_node, bh.make_post_node

    def pre_node(*a: Any, **k: Any) -> Callable[..., Any]:
        node = make_pre(*a, **k)

        def run(*x: Any) -> Any:
            _rows.append(defaultdict(lambda: [0.0, 0.0]))  # a new handoff starts here
            if len(_rows) == bh.WARMUP_HANDOFFS + 2:  # the first timed one (the warm-up drained its writes)
                _first_timed_write[0] = len(_writes)
            t, c, p = time.perf_counter(), time.thread_time(), time.process_time()
            try:
                return node(*x)
            finally:
                row = _rows[-1]
                row["pre"] = [(time.perf_counter() - t) * 1000, (time.thread_time() - c) * 1000]
                # CPU the process spent on other threads meanwhile (the writer, model threads)
                row["other threads during pre"] = [0.0, (time.process_time() - p) * 1000 - row["pre"][1]]
        return run

    def post_node(*a: Any, **k: Any) -> Callable[..., Any]:
        node = make_post(*a, **k)

        def run(*x: Any) -> Any:
            t = time.perf_counter()
            try:
                return node(*x)
            finally:
                _rows[-1]["post"] = [(time.perf_counter() - t) * 1000, 0.0]
        return run

    bh.make_pre_node, bh.make_post_node = pre_node, post_node  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--handoffs", type=int, default=300)
    ap.add_argument("--inline", action="store_true", help="without write-behind")
    ap.add_argument("--json", help="also write the per-handoff rows here")
    a = ap.parse_args()
    _instrument()
    _wrap_nodes()
    _wrap_writes()
    out = bh.handoff_overhead(a.size, a.handoffs, write_behind=not a.inline, agent_ms=0.0 if a.inline else 50.0)
    # The last `handoffs` rows are the timed ones (the warm-up ran first); a row holds its
    # handoff's pre-node, post-node and (every third) the end-of-turn drain after it.
    rows = _rows[-a.handoffs:]
    for r in rows:
        r["total"] = [r["pre"][0] + r["post"][0] + r.get("wait.drain(end of turn)", [0.0])[0], 0.0]
    rows.sort(key=lambda r: -r["total"][0])
    top = rows[: max(1, len(rows) // 20)]
    stages = sorted({k for r in rows for k in r}, key=lambda k: -statistics.fmean(r.get(k, [0, 0])[0] for r in top))
    print(f"load {os.getloadavg()[0]:.2f}; handoffs {len(rows)}; slowest 5%: {len(top)}")
    print(f"{'stage':34s} {'top5% wall':>10s} {'cpu':>7s} {'all wall':>9s} {'cpu':>7s} {'p95 all':>8s}")
    for k in stages:
        tw = statistics.fmean(r.get(k, [0, 0])[0] for r in top)
        tc = statistics.fmean(r.get(k, [0, 0])[1] for r in top)
        aw = [r.get(k, [0, 0])[0] for r in rows]
        ac = statistics.fmean(r.get(k, [0, 0])[1] for r in rows)
        print(f"{k:34s} {tw:10.2f} {tc:7.2f} {statistics.fmean(aw):9.2f} {ac:7.2f} "
              f"{sorted(aw)[int(0.95 * len(aw))]:8.2f}")
    # The writes of the timed handoffs (the warm-up's came first); the model threads' CPU
    # (the paraphrase worker, the vector scan's) is not in a write's thread CPU.
    ws = _writes[_first_timed_write[0]:]
    walls, cpus = sorted(w for w, _ in ws), sorted(c for _, c in ws)
    print(f"writes {len(ws)}: wall p50 {walls[len(walls) // 2]:.1f} p95 {walls[int(.95 * len(walls))]:.1f} ms; "
          f"thread CPU p50 {cpus[len(cpus) // 2]:.1f} p95 {cpus[int(.95 * len(cpus))]:.1f} ms")
    keep = ("total_p50_ms", "total_p95_ms", "pre_p50_ms", "pre_p95_ms", "post_p50_ms", "post_p95_ms",
            "write_p50_ms", "write_p95_ms")
    print(json.dumps({k: round(out[k], 2) for k in keep if k in out}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": {k: out[k] for k in keep if k in out}, "rows": rows}, f)


if __name__ == "__main__":
    main()
