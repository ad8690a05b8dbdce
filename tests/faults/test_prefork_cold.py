"""Faults: what ``memory.prefork`` does so that cold forked workers keep little of their own.
Real processes, real SQLite file, the mapped ``<store>.partitions`` file, real packaged embedder.

* the parent maps ``<store>.partitions`` and runs one search before the fork, and forgets the
  selection count that search added (workers decide what to load exactly as before);
* each worker's connection gets the small page cache (``FORKED_CACHE_KIB``), and the worker
  returns its freed heap to the OS after its first search and every ``TRIM_EVERY`` after;
* the workers' results (scoped and whole-store searches) are the parent's and a fresh
  unprepared service's, id for id and score for score.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from memory import MemoryService, MemorySettings
from memory.backends import sqlite_fork
from memory.backends import sqlite_partitions as sp
from memory.forking import prefork

FORK = mp.get_context("fork")
USERS = {"u1": 3, "u2": 6, "u3": 9}  # rows per user_profile namespace: u1 is the smallest
FACTS = ["the user prefers bar charts for weekly reports", "the user drinks green tea every morning",
         "用户喜欢柱状图", "the quarterly budget is due on friday", "the east region sales report is late",
         "refunds go through the customer desk", "the user lives in Lisbon", "the user's manager is Ana",
         "the user asked for a summary every monday"]
QUERIES = [("which chart style does the user prefer", "user_profile/u2"), ("用户喜欢什么图表", "user_profile/u3"),
           ("budget deadline", "user_profile"), ("tea", "user_profile/u1"), ("weekly report", "user_profile")]


@pytest.fixture
def store(tmp_path: Any, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A store with a valid ``<store>.partitions`` file (built by a load of every partition,
    with the build threshold lowered to this store's size)."""
    path = str(tmp_path / "memory.sqlite")
    svc = MemoryService.from_settings(MemorySettings(path=path), embedder=embedder)
    for user, n in USERS.items():
        for i in range(n):
            svc.write(f"{FACTS[i]} ({user})", f"user_profile/{user}")
    monkeypatch.setattr(sp, "ARENA_MIN_ROWS", 1)
    with svc.backend._lock:  # type: ignore[attr-defined]
        svc.backend._matching([("user_profile",)])  # type: ignore[attr-defined]
    assert svc.backend._parts.base_builds == 1  # type: ignore[attr-defined]
    svc.close()
    yield path
    gc.unfreeze()  # prefork froze the test session's objects: let the collector have them back


def _hits(svc: MemoryService) -> list[list[tuple[str, float]]]:
    return [[(h.record.id, round(h.score, 6)) for h in svc.search(q, ns, top_k=10)] for q, ns in QUERIES]


def _worker(svc: MemoryService, out: Any) -> None:
    try:
        b: Any = svc.backend
        cache = b._conn.execute("PRAGMA cache_size").fetchone()[0]
        got = _hits(svc) + _hits(svc) + _hits(svc)  # the third round is served from loaded partitions
        out.put((cache, b._forked_searches, b._parts.mapped_loads, got))
    except BaseException:
        out.put((None, None, None, traceback.format_exc()))


def test_parent_maps_partitions_and_warms_before_forking(store: str, embedder: Any) -> None:
    fresh = MemoryService.from_settings(MemorySettings(path=store), embedder=embedder)
    try:
        expected = _hits(fresh)  # an unprepared, unforked service's results
    finally:
        fresh.close()
    svc = MemoryService.from_settings(MemorySettings(path=store), embedder=embedder)
    b: Any = svc.backend
    assert b._parts.base is None and not b._records
    prefork(svc)
    assert b._parts.base is not None  # mapped (and spot-checked) once, here
    # The warm-up searched the smallest namespace (its records were parsed here) ...
    assert {r.namespace for r in b._records.values()} == {("user_profile", "u1")}
    assert b._parts.large_searches == {}  # ... and the count it added is forgotten
    assert b._conn.execute("PRAGMA cache_size").fetchone()[0] == -2000  # the parent keeps SQLite's default
    out = FORK.Queue()
    p = FORK.Process(target=_worker, args=(svc, out))
    p.start()
    cache, searches, mapped, got = out.get(timeout=120)
    p.join(30)
    assert cache is not None, got
    assert cache == -sqlite_fork.FORKED_CACHE_KIB
    assert searches == 3 * len(QUERIES)
    assert mapped > 0  # partitions loaded in the worker are views of the parent's mapped file
    assert got == expected * 3
    assert _hits(svc) == expected  # and the parent still answers the same
    svc.close()


def _count_trims(svc: MemoryService, n: int, out: Any) -> None:
    try:
        for i in range(n):
            svc.search("which chart style does the user prefer", f"user_profile/u{1 + i % 3}", top_k=3)
        out.put(sqlite_fork._TRIM.calls)  # type: ignore[union-attr]
    except BaseException:
        out.put(traceback.format_exc())


class _Trim:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, pad: int) -> int:
        self.calls += 1
        return 1


def test_forked_worker_trims_after_its_first_search_and_every_trim_every(
        store: str, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = MemoryService.from_settings(MemorySettings(path=store), embedder=embedder)
    monkeypatch.setattr(sqlite_fork, "_TRIM", _Trim())  # stands in for glibc's malloc_trim
    prefork(svc)
    assert sqlite_fork._TRIM.calls == 1  # type: ignore[attr-defined] # the parent, before gc.freeze
    sqlite_fork._TRIM.calls = 0  # type: ignore[attr-defined]
    for _ in range(3):  # the parent itself does not trim per search
        svc.search("tea", "user_profile/u1", top_k=1)
    assert sqlite_fork._TRIM.calls == 0  # type: ignore[attr-defined]
    searches = sqlite_fork.TRIM_EVERY + 3
    out = FORK.Queue()
    p = FORK.Process(target=_count_trims, args=(svc, searches, out))
    p.start()
    got = out.get(timeout=120)
    p.join(30)
    # Trimmed as search 2 and search TRIM_EVERY + 2 started (after 1 and TRIM_EVERY + 1 done).
    assert got == 2, got
    svc.close()


def test_release_free_heap_uses_glibc_malloc_trim() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    sqlite_fork._TRIM = None
    assert sqlite_fork.release_free_heap() is True
    assert sqlite_fork._TRIM is not None and sqlite_fork._TRIM is not False
