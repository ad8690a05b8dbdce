"""What separates the handoff bench's slowest pre-nodes from its median ones (issue 16).

    HF_HUB_OFFLINE=1 python scripts/handoff_tail.py [--size 100000] [--handoffs 300] [--json OUT]

Runs :func:`memctl.bench_handoff.handoff_overhead` as ``memctl bench --systems handoff`` does (write-behind,
50 ms of simulated model time per node) and records, for each timed pre-node (wrapped from outside):

* ``wall``, ``cpu`` (the node thread's CPU);
* ``barrier`` (wall inside ``WriteBehind.barrier``: waiting for pending writes into the namespaces read, the
  question's embedding overlapped with it included) and ``prefetch`` (that embedding, inside the barrier);
* ``worker_cpu``: CPU the write-behind worker thread used while the pre-node ran
  (``time.pthread_getcpuclockid``), ``other_cpu``: CPU of every thread but the node's (worker and the
  models' native threads) meanwhile; ``busy_at_start``: a write was running when the pre-node began,
  ``queued_at_start``: writes queued then;
* ``gc_main`` / ``gc_other``: GC pauses (``gc.callbacks``) on the node's thread / on another Python thread
  while the pre-node ran (either stops the node: a collection holds the GIL), with ``gc_n`` per generation;
* ``cands``: per search, the candidates scored (``score_candidates``' input) and ``search_ms``.

Prints, per agent, the mean of each over its slowest 5% of pre-nodes, over its middle 20% (40th-60th
percentile) and over all; then the same over all agents. Timings only: results are not printed.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import re
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import memctl.bench_handoff as bh
import memory.embeddings as emb_mod
import memory.service as service_mod
import supervisor.writebehind as wb_mod

_main = threading.main_thread().ident
_rows: list[dict[str, Any]] = []  # one per pre-node (warm-up included; the last `handoffs` are timed)
_cur: list[dict[str, Any] | None] = [None]  # the pre-node running now
_in_barrier = [False]
_search_label = [""]
_worker: list[int | None] = [None]  # the write-behind worker's pthread id, once it exists


def _worker_cpu() -> float:
    if _worker[0] is None:
        for t in threading.enumerate():
            if t.name.startswith("memory-write-behind"):
                _worker[0] = t.ident
    if _worker[0] is None:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(_worker[0])) * 1000
    except OSError:  # the thread ended
        return 0.0


def _task_cpu() -> dict[int, float]:
    """CPU ms of every thread of this process, Python's or native (``/proc/self/task/*/schedstat``, ns)."""
    out: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e6
        except OSError:
            pass
    return out


def _thread_names() -> dict[int, str]:
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) not in names:
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names[int(tid)] = "native:" + f.read().strip()
            except OSError:
                pass
    return names


_gc_start: dict[int, float] = {}
_in_post = [False]
_timed = [False]  # set at the first timed pre-node
_gc_where: dict[str, list[float]] = {}  # where a collection ran -> [count, ms], timed part only


def _gc_cb(phase: str, info: dict[str, Any]) -> None:
    tid = threading.get_ident()
    if phase == "start":
        _gc_start[tid] = time.perf_counter()
        return
    if tid not in _gc_start:
        return
    ms = (time.perf_counter() - _gc_start.pop(tid)) * 1000
    row = _cur[0]
    if _timed[0]:
        where = ("pre-node" if row is not None else "post-node" if _in_post[0] else "between nodes") \
            if tid == _main else "worker" if tid == _worker[0] else "other thread"
        acc = _gc_where.setdefault(f"{where} gen{info.get('generation')}", [0, 0.0])
        acc[0] += 1
        acc[1] += ms
    if row is None:
        return
    row["gc_main" if tid == _main else "gc_other"] += ms
    row["gc_n"][info.get("generation", -1)] = row["gc_n"].get(info.get("generation", -1), 0) + 1


def _wrap_pre() -> None:
    make_pre = bh.make_pre_node

    def pre_node(mm: Any, agent: str, budget: int, write_behind: Any = None, **k: Any) -> Callable[..., Any]:
        node = make_pre(mm, agent, budget, write_behind=write_behind, **k)

        def run(*x: Any) -> Any:
            if len(_rows) == bh.WARMUP_HANDOFFS:  # the warm-up's pre-nodes are done
                _timed[0] = True
            row: dict[str, Any] = {"agent": agent, "barrier": 0.0, "prefetch": 0.0, "gc_main": 0.0, "gc_other": 0.0,
                                   "gc_n": {}, "cands": [], "search_ms": []}
            if write_behind is not None:
                with write_behind._lock:  # a diagnostic read of the worker's state
                    row["busy_at_start"] = write_behind._running is not None
                    row["queued_at_start"] = len(write_behind._queue)
                    row["running_ns"] = write_behind._running[0] if write_behind._running else ""
                    row["queued_ns"] = [q.namespace[0] for q, _ in write_behind._queue]
            tasks0 = _task_cpu()
            wcpu, t, c, p = _worker_cpu(), time.perf_counter(), time.thread_time(), time.process_time()
            _cur[0] = row
            try:
                return node(*x)
            finally:
                _cur[0] = None
                _windows.append((t, time.perf_counter(), agent))
                row["wall"] = (time.perf_counter() - t) * 1000
                row["cpu"] = (time.thread_time() - c) * 1000
                row["other_cpu"] = (time.process_time() - p) * 1000 - row["cpu"]
                row["worker_cpu"] = _worker_cpu() - wcpu
                a0 = row.pop("_after", None) or (t, c, p, wcpu)
                row["after_wall"] = (time.perf_counter() - a0[0]) * 1000
                row["after_cpu"] = (time.thread_time() - a0[1]) * 1000
                row["after_other_cpu"] = (time.process_time() - a0[2]) * 1000 - row["after_cpu"]
                row["after_worker_cpu"] = _worker_cpu() - a0[3]
                tasks1, names = _task_cpu(), _thread_names()
                by: dict[str, float] = {}
                for tid, ms in tasks1.items():
                    d = ms - tasks0.get(tid, 0.0)
                    if d > 0.05 and tid != threading.main_thread().native_id:
                        key = re.sub(r"_\d+$", "", names.get(tid, "?"))
                        by[key] = round(by.get(key, 0.0) + d, 2)
                row["threads"] = by
                _rows.append(row)
        return run

    bh.make_pre_node = pre_node  # type: ignore[assignment]
    make_post = bh.make_post_node

    def post_node(*a: Any, **k: Any) -> Callable[..., Any]:
        node = make_post(*a, **k)

        def run(*x: Any) -> Any:
            _in_post[0] = True
            t = time.perf_counter()
            try:
                return node(*x)
            finally:
                _in_post[0] = False
                if _rows:
                    _rows[-1]["post_wall"] = (time.perf_counter() - t) * 1000
        return run

    bh.make_post_node = post_node  # type: ignore[assignment]
    finish = bh.finish_writes

    def drain(*a: Any, **k: Any) -> Any:  # the end-of-turn wait, after every third post-node
        t = time.perf_counter()
        try:
            return finish(*a, **k)
        finally:
            if _rows:
                _rows[-1]["drain_wall"] = (time.perf_counter() - t) * 1000

    bh.finish_writes = drain  # type: ignore[assignment]


def _wrap_barrier() -> None:
    barrier = wb_mod.WriteBehind.barrier

    @functools.wraps(barrier)
    def timed(self: Any, *a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        _in_barrier[0] = True
        try:
            return barrier(self, *a, **k)
        finally:
            _in_barrier[0] = False
            if _cur[0] is not None and threading.get_ident() == _main:
                _cur[0]["barrier"] += (time.perf_counter() - t) * 1000
                # what the rest of the pre-node (the searches) competes with starts here
                _cur[0]["_after"] = (time.perf_counter(), time.thread_time(), time.process_time(), _worker_cpu())
                _cur[0]["worker_at_search"] = _events[-1][0] if _events else ""  # its last mark then

    wb_mod.WriteBehind.barrier = timed  # type: ignore[method-assign]
    embed = emb_mod.CachedEmbedder.embed_query

    @functools.wraps(embed)
    def timed_embed(self: Any, *a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return embed(self, *a, **k)
        finally:
            if _in_barrier[0] and _cur[0] is not None and threading.get_ident() == _main:
                _cur[0]["prefetch"] += (time.perf_counter() - t) * 1000

    emb_mod.CachedEmbedder.embed_query = timed_embed  # type: ignore[method-assign]


def _wrap_search() -> None:
    search = service_mod.MemoryService.search

    @functools.wraps(search)
    def timed(self: Any, query: str, namespaces: Any, *a: Any, **k: Any) -> Any:
        if threading.get_ident() != _main or _cur[0] is None:
            return search(self, query, namespaces, *a, **k)
        nss = [namespaces] if isinstance(namespaces, tuple) and namespaces and isinstance(namespaces[0], str) \
            else list(namespaces)
        _search_label[0] = "+".join(n[0] for n in nss)
        t = time.perf_counter()
        try:
            return search(self, query, namespaces, *a, **k)
        finally:
            _cur[0]["search_ms"].append((_search_label[0], round((time.perf_counter() - t) * 1000, 2)))

    service_mod.MemoryService.search = timed  # type: ignore[method-assign]
    score = service_mod.scoring.score_candidates

    @functools.wraps(score)
    def counted(cands: Any, *a: Any, **k: Any) -> Any:
        if threading.get_ident() == _main and _cur[0] is not None:
            _cur[0]["cands"].append((_search_label[0], len(cands)))
        return score(cands, *a, **k)

    service_mod.scoring.score_candidates = counted  # type: ignore[assignment]


_events: list[tuple[str, float, float]] = []  # worker: (label, perf_counter, thread CPU) at each write's
# start, at each pause point (before and after its wait) and at its end
_windows: list[tuple[float, float, str]] = []  # the pre-nodes' (start, end, agent)


def _wrap_writes() -> None:
    """Mark each background write's phases (memory.policy.manager's pause points) on the worker."""
    import sys

    import memory.policy.manager as manager_mod
    import supervisor.nodes as nodes_mod

    pp, apply = manager_mod.pause_point, nodes_mod.apply_entry

    def point() -> None:
        line = sys._getframe(1).f_lineno
        _events.append((f"L{line}", time.perf_counter(), time.thread_time() * 1000))
        try:
            pp()
        finally:
            _events.append((f"L{line}.resume", time.perf_counter(), time.thread_time() * 1000))

    def timed(*a: Any, **k: Any) -> Any:
        _events.append(("start", time.perf_counter(), time.thread_time() * 1000))
        try:
            return apply(*a, **k)
        finally:
            _events.append(("end", time.perf_counter(), time.thread_time() * 1000))

    manager_mod.pause_point = point  # type: ignore[assignment]
    nodes_mod.apply_entry = timed  # type: ignore[assignment]


def _phases(t_first: float) -> None:
    """Per write phase (between pause points): its worker CPU, and the part of its wall time that fell
    inside a timed pre-node (the phase's CPU is counted pro rata)."""
    segs: list[tuple[str, float, float, float]] = []  # label, start, end, cpu
    prev: tuple[str, float, float] | None = None
    for lab, t, c in _events:
        if lab == "start":
            prev = ("start", t, c)
            continue
        if prev is None:
            continue
        if lab.endswith(".resume"):  # the wait at a pause point: not a phase
            segs.append(("wait@" + lab[:-7], prev[1], t, c - prev[2]))
            prev = (lab[:-7], t, c)
            continue
        segs.append((f"{prev[0]}->{lab}", prev[1], t, c - prev[2]))
        prev = (lab, t, c) if lab != "end" else None
    wins = [w for w in _windows if w[0] >= t_first]
    agg: dict[str, list[float]] = {}
    for lab, a, b, cpu in segs:
        if a < t_first:
            continue
        inside = sum(max(0.0, min(b, w1) - max(a, w0)) for w0, w1, _ in wins)
        frac = inside / (b - a) if b > a else 0.0
        acc = agg.setdefault(lab, [0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += (b - a) * 1000
        acc[2] += cpu
        acc[3] += inside * 1000
        acc[4] += cpu * frac
    n_pre = len(wins)
    print(f"\nwrite phases (timed part; {n_pre} pre-nodes): count, mean wall ms, mean CPU ms, "
          f"wall inside pre-nodes per pre-node, CPU inside pre-nodes per pre-node (pro rata)")
    for lab, (n, w, c, iw, ic) in sorted(agg.items(), key=lambda kv: -kv[1][4]):
        print(f"  {lab:22s} {int(n):5d} {w / n:7.2f} {c / n:7.2f} {iw / n_pre:7.2f} {ic / n_pre:7.2f}")


FIELDS = ("wall", "cpu", "barrier", "prefetch", "worker_cpu", "other_cpu", "after_wall", "after_cpu",
          "after_worker_cpu", "after_other_cpu", "gc_main", "gc_other",
          "busy_at_start", "queued_at_start", "n_cands")


def _mean(rows: list[dict[str, Any]], f: str) -> float:
    return statistics.fmean(float(r[f]) for r in rows) if rows else float("nan")


def _groups(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    s = sorted(rows, key=lambda r: -r["wall"])
    n = len(s)
    return s[: max(1, n // 20)], s[int(0.4 * n): int(0.6 * n)]


def _table(title: str, rows: list[dict[str, Any]]) -> None:
    top, mid = _groups(rows)
    print(f"\n{title}: {len(rows)} pre-nodes; slowest 5% = {len(top)}; p50 {statistics.median(r['wall'] for r in rows):.1f}"
          f" p95 {sorted(r['wall'] for r in rows)[int(.95 * len(rows))]:.1f} ms")
    print(f"  {'':16s} {'top5%':>8s} {'p40-60':>8s} {'all':>8s}")
    for f in FIELDS:
        print(f"  {f:16s} {_mean(top, f):8.2f} {_mean(mid, f):8.2f} {_mean(rows, f):8.2f}")
    for label, grp in (("top5%", top), ("p40-60", mid), ("all", rows)):
        gcs: dict[str, int] = {}
        for r in grp:
            for g, n in r["gc_n"].items():
                gcs[f"gen{g}"] = gcs.get(f"gen{g}", 0) + n
        per = {k: round(v / len(grp), 2) for k, v in sorted(gcs.items())}
        cand: dict[str, list[int]] = {}
        for r in grp:
            for lab, n in r["cands"]:
                cand.setdefault(lab, []).append(n)
        cm = {k: round(statistics.fmean(v), 1) for k, v in cand.items()}
        thr: dict[str, float] = {}
        for r in grp:
            for k, v in r.get("threads", {}).items():
                thr[k] = thr.get(k, 0.0) + v / len(grp)
        run: dict[str, int] = {}
        for r in grp:
            k = f"{r.get('running_ns', '')}|{','.join(r.get('queued_ns', []))}"
            run[k] = run.get(k, 0) + 1
        print(f"  {label:7s} running|queued writes' namespaces at start {run}")
        at: dict[str, int] = {}
        for r in grp:
            at[r.get("worker_at_search", "")] = at.get(r.get("worker_at_search", ""), 0) + 1
        print(f"  {label:7s} gc per pre-node {per}; candidates per search {cm}")
        print(f"  {label:7s} worker's last mark when the searches start {at}")
        print(f"  {label:7s} other threads' CPU ms per pre-node {({k: round(v, 2) for k, v in sorted(thr.items())})}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--handoffs", type=int, default=300)
    ap.add_argument("--agent-ms", type=float, default=50.0)
    ap.add_argument("--json", help="also write the per-pre-node rows here")
    a = ap.parse_args()
    _wrap_pre()
    _wrap_barrier()
    _wrap_search()
    _wrap_writes()
    gc.callbacks.append(_gc_cb)
    out = bh.handoff_overhead(a.size, a.handoffs, write_behind=True, agent_ms=a.agent_ms)
    rows = _rows[-a.handoffs:]
    _phases(_windows[-a.handoffs][0])
    for r in rows:
        r["n_cands"] = sum(n for _, n in r["cands"])
        r["busy_at_start"] = float(r.get("busy_at_start", 0))
        r["queued_at_start"] = float(r.get("queued_at_start", 0))
    print(f"load {os.getloadavg()}; handoff_overhead_write_behind_p95 (total_p95_ms) {out['total_p95_ms']:.1f}; "
          f"pre p50/p95 {out['pre_p50_ms']:.1f}/{out['pre_p95_ms']:.1f}; write p50/p95 "
          f"{out.get('write_p50_ms', 0):.1f}/{out.get('write_p95_ms', 0):.1f}")
    # What the bench's total p95 is made of: the slowest 5% of handoffs by pre + post + end-of-turn wait.
    tot = sorted(rows, key=lambda r: -(r["wall"] + r.get("post_wall", 0.0) + r.get("drain_wall", 0.0)))
    top = tot[: max(1, len(tot) // 20)]
    by_agent = {a: sum(r["agent"] == a for r in top) for a in bh.AGENTS}
    print(f"slowest 5% of handoffs by total: {by_agent}; mean pre {_mean(top, 'wall'):.1f}, post "
          f"{statistics.fmean(r.get('post_wall', 0.0) for r in top):.1f}, end-of-turn wait "
          f"{statistics.fmean(r.get('drain_wall', 0.0) for r in top):.1f} ms")
    print("GC collections in the timed part, by where they ran (count, total ms):",
          {k: (int(v[0]), round(v[1], 1)) for k, v in sorted(_gc_where.items())})
    for agent in bh.AGENTS:
        _table(agent, [r for r in rows if r["agent"] == agent])
    _table("all agents", rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": {k: v for k, v in out.items() if isinstance(v, (int, float))}, "rows": rows}, f)


if __name__ == "__main__":
    main()
