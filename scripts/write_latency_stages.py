"""Where a write's time goes: per-stage CPU time of the slowest writes of ``memctl eval dedupe``.

    HF_HUB_OFFLINE=1 python scripts/write_latency_stages.py PAIRS.jsonl [--top 10] [--wall]

Runs :func:`memctl.evaluation.run_dedupe_eval` on a fresh in-memory store (both writes of each
pair, as ``memctl eval dedupe --pairs PAIRS`` does) with timers wrapped, from outside, around the
stages of ``MemoryManager.remember``. Per write: wall time, the process's CPU time (all threads)
and, per stage, the CPU time of the thread that ran it (``--wall``: wall time instead); stages
nest (``views.prime`` holds ``view_texts``/``read`` and the encoder, ``pair_view`` the feature
functions), so rows do not add up. ``minilm`` runs on the paraphrase worker thread, beside the
encoder. Prints the mean per stage over the slowest 5% of writes by CPU time (writes over 250 ms
CPU are the process's one-time model loads: listed apart) and over all writes; ``--top N`` also
prints the N slowest writes. Timings only: outcomes and labels are not printed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import memory.policy.audit as audit_mod
import memory.policy.judge as judge_mod
import memory.policy.manager as manager_mod
import memory.policy.paraphrase as paraphrase_mod
import memory.policy.view_cache as view_cache_mod
from memctl.evaluation import run_dedupe_eval
from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings

ONE_TIME_MS = 250.0
_stage: dict[str, float] = defaultdict(float)
_clock: Callable[[], float] = time.thread_time


def _timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def inner(*a: Any, **k: Any) -> Any:
        t = _clock()
        try:
            return fn(*a, **k)
        finally:
            _stage[label] += (_clock() - t) * 1000

    return inner


def _wrap(obj: Any, name: str, label: str) -> None:
    setattr(obj, name, _timed(getattr(obj, name), label))


def _instrument(mm: MemoryManager) -> None:
    for fn in ("read", "pair_features", "align_features", "name_features", "static_features"):
        _wrap(judge_mod, fn, fn)
    _wrap(judge_mod.PairJudge, "_embed", "encoder")
    _wrap(judge_mod.PairJudge, "pair_view", "pair_view")
    judge_mod.PairJudge._views = staticmethod(_timed(judge_mod.PairJudge._views, "view_texts"))
    _wrap(judge_mod.TreeModel, "p_same", "model")
    _wrap(view_cache_mod.JudgeViews, "prime", "views.prime")
    _wrap(paraphrase_mod.ParaphraseScorer, "_embed_locked", "minilm")
    _wrap(manager_mod.MemoryManager, "_enforce_capacity", "capacity")
    _wrap(audit_mod.AuditLog, "record", "audit")
    backend = type(mm.service.backend)
    _wrap(backend, "query", "backend.query")
    if hasattr(backend, "upsert_if_unchanged"):
        _wrap(backend, "upsert_if_unchanged", "upsert")


def main() -> None:
    global _clock
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs")
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--wall", action="store_true", help="stage wall time instead of thread CPU time")
    a = ap.parse_args()
    if a.wall:
        _clock = time.perf_counter
    mm = MemoryManager.from_settings(MemorySettings.load(None, path=":memory:"))
    _instrument(mm)
    rows: list[dict[str, Any]] = []
    remember = mm.remember

    def timed_remember(*args: Any, **kw: Any) -> Any:
        _stage.clear()
        c = time.process_time()
        t = time.perf_counter()
        out = remember(*args, **kw)
        wall = (time.perf_counter() - t) * 1000
        rows.append({"wall": wall, "cpu": (time.process_time() - c) * 1000, "chars": len(args[0]), **_stage})
        return out

    mm.remember = timed_remember  # type: ignore[method-assign]
    load = os.getloadavg()[0]
    res = run_dedupe_eval(mm, a.pairs)
    mm.close()
    print(json.dumps({"pairs": a.pairs, "timing": res["timing"], "load_1min": [round(load, 2),
                                                                               round(os.getloadavg()[0], 2)]}))
    rows.sort(key=lambda r: -r["cpu"])
    once = [r for r in rows if r["cpu"] > ONE_TIME_MS]
    rest = [r for r in rows if r["cpu"] <= ONE_TIME_MS]
    tail = rest[: max(1, len(rows) // 20)]
    print(f"one-time loads (writes over {ONE_TIME_MS:.0f} ms CPU): {[round(r['cpu']) for r in once]}")
    print(f"slowest 5% (n={len(tail)}, CPU {tail[-1]['cpu']:.1f}-{tail[0]['cpu']:.1f} ms) vs all writes, mean ms:")
    keys = sorted({k for r in rows for k in r} - {"chars"})
    for k in keys:
        print(f"  {k:16s} {statistics.mean(r.get(k, 0.0) for r in tail):8.2f} "
              f"{statistics.mean(r.get(k, 0.0) for r in rows):8.2f}")
    for r in rows[: a.top]:
        print(json.dumps({k: round(v, 1) for k, v in r.items()}))


if __name__ == "__main__":
    main()
