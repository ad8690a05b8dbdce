"""Faults: one store served by workers forked from a prepared parent (``memory.prefork``), as a
preloading server (gunicorn ``--preload``, a ``fork`` pool) runs it. Real processes, real SQLite
file, real packaged embedder.

* every worker writes and searches; every write is visible to every other worker and to the
  parent, and the file passes SQLite's integrity check;
* a store opened without ``prefork`` and used in a forked child refuses with ``StoreForked``
  (nothing read or written), and the parent's store is unharmed;
* a prepared child's vector file has its own ``flock`` (a shared descriptor would let two
  processes hold the "exclusive" lock at once).
"""

from __future__ import annotations

import fcntl
import gc
import multiprocessing as mp
import sqlite3
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from memory import MemoryService, MemorySettings
from memory.errors import InvalidConfig, StoreForked
from memory.forking import prefork

FORK = mp.get_context("fork")
WORKERS = 3
PER_WORKER = 4


@pytest.fixture
def store(tmp_path: Any, embedder: Any) -> Iterator[MemoryService]:
    svc = MemoryService.from_settings(MemorySettings(path=str(tmp_path / "memory.sqlite")), embedder=embedder)
    svc.write("the team reports revenue in thousands of dollars", "domain_facts/acme")
    yield svc
    svc.close()
    gc.unfreeze()  # prefork froze the test session's objects: let the collector have them back


def _fact(worker: int, i: int) -> str:
    return f"worker {worker} fact {i}: the {['red', 'green', 'blue', 'amber'][i]} dashboard belongs to team {worker}"


def _serve(svc: MemoryService, worker: int, wrote: Any, go: Any, out: Any) -> None:
    """A worker: write its facts, wait until every worker wrote, then find every other one's."""
    try:
        ids = [svc.write(_fact(worker, i), f"user_profile/w{worker}").id for i in range(PER_WORKER)]
        shared = svc.write(f"worker {worker} joined the shared board", "shared_context/all").id
        wrote.put((worker, ids + [shared]))
        go.wait(60)
        seen = {}
        for other in range(WORKERS):
            hits = svc.search(f"which dashboard belongs to team {other}", f"user_profile/w{other}", top_k=PER_WORKER)
            seen[other] = sorted(h.record.content for h in hits)
        seen["shared"] = svc.count("shared_context/all")
        seen["acme"] = [h.record.content for h in svc.search("revenue units", "domain_facts/acme", top_k=1)]
        out.put((worker, seen))
    except BaseException:
        wrote.put((worker, None))  # unblocks the parent if the failure came before the writes
        out.put((worker, traceback.format_exc()))


def test_forked_workers_share_one_store(store: MemoryService) -> None:
    svc = prefork(store)
    assert svc is store
    wrote, out, go = FORK.Queue(), FORK.Queue(), FORK.Event()
    ps = [FORK.Process(target=_serve, args=(svc, w, wrote, go, out)) for w in range(WORKERS)]
    for p in ps:
        p.start()
    written = dict(wrote.get(timeout=120) for _ in ps)
    if None in written.values():
        go.set()
        pytest.fail(f"a worker failed:\n{out.get(timeout=30)[1]}")
    # The parent keeps serving between forks: its connection was closed and reopened at each one.
    parent_id = svc.write("the parent wrote this while its workers ran", "shared_context/all").id
    go.set()
    results = dict(out.get(timeout=120) for _ in ps)
    for p in ps:
        p.join(30)
        assert p.exitcode == 0
    for w, seen in results.items():
        assert isinstance(seen, dict), f"worker {w} failed:\n{seen}"
        for other in range(WORKERS):  # every worker finds every other worker's writes
            assert seen[other] == sorted(_fact(other, i) for i in range(PER_WORKER)), (w, other, seen[other])
        assert seen["shared"] >= WORKERS  # all workers' shared writes (the parent's may come later)
        assert seen["acme"] == ["the team reports revenue in thousands of dollars"]
    # The parent sees every worker's write, through the same (reopened) connection.
    all_ids = [i for ids in written.values() for i in ids] + [parent_id]
    assert {r.id for r in svc.backend.get(all_ids)} == set(all_ids)
    assert svc.count("shared_context/all") == WORKERS + 1
    hits = svc.search("which dashboard belongs to team 1", "user_profile/w1", top_k=1)
    assert hits and hits[0].record.content.startswith("worker 1 fact")
    conn = sqlite3.connect(svc.backend.path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        (rows,) = conn.execute("SELECT COUNT(*) FROM memories").fetchone()
        (fts,) = conn.execute("SELECT COUNT(*) FROM memories_fts").fetchone()
    finally:
        conn.close()
    assert rows == fts == 1 + WORKERS * (PER_WORKER + 1) + 1
    # A fresh process's view (a new backend) agrees.
    again = MemoryService.from_settings(MemorySettings(path=svc.backend.path), embedder=svc.embedder)
    try:
        assert again.count() == rows
    finally:
        again.close()


def _use_unprepared(svc: MemoryService, out: Any) -> None:
    try:
        svc.search("revenue units", "domain_facts/acme")
        out.put("searched")
    except StoreForked as exc:
        try:
            svc.write("a child should not write this", "domain_facts/acme")
            out.put("wrote")
        except StoreForked:
            svc.close()  # must not close (use) the inherited connection either
            out.put(f"refused: {exc}")
    except BaseException:
        out.put(traceback.format_exc())


def test_unprepared_store_refuses_in_a_forked_child(store: MemoryService) -> None:
    out = FORK.Queue()
    p = FORK.Process(target=_use_unprepared, args=(store, out))
    p.start()
    got = out.get(timeout=60)
    p.join(30)
    assert got.startswith("refused: "), got
    assert "forked" in got and "memory.prefork" in got  # says what happened and what to do
    # The parent's store is unharmed and still works.
    assert store.count("domain_facts/acme") == 1
    assert store.search("revenue units", "domain_facts/acme")[0].record.content.startswith("the team")
    conn = sqlite3.connect(store.backend.path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def _try_flock(svc: MemoryService, out: Any) -> None:
    from memory.backends import vector_index

    try:
        fcntl.flock(svc.backend._vf._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[attr-defined]
        out.put(("locked", not vector_index.SCAN_WORKER.started))
    except BlockingIOError:
        out.put(("blocked", not vector_index.SCAN_WORKER.started))


def test_prepared_child_has_its_own_vector_file_lock(store: MemoryService) -> None:
    from memory.backends import vector_index

    svc = prefork(store)
    vector_index.SCAN_WORKER.executor()  # the parent has a scan thread: a child must not inherit the executor
    vf = svc.backend._vf  # type: ignore[attr-defined]
    assert vf is not None and vf._fd is not None
    fcntl.flock(vf._fd, fcntl.LOCK_EX)
    try:
        out = FORK.Queue()
        p = FORK.Process(target=_try_flock, args=(svc, out))
        p.start()
        got = out.get(timeout=60)
        p.join(30)
    finally:
        fcntl.flock(vf._fd, fcntl.LOCK_UN)
    assert got == ("blocked", True)


def test_prefork_refuses_what_cannot_be_shared(embedder: Any) -> None:
    mem = MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=embedder)
    try:
        with pytest.raises(InvalidConfig, match="MEMORY_PATH"):
            prefork(mem)
    finally:
        mem.close()
    with pytest.raises(InvalidConfig, match="MemoryService or MemorySettings"):
        prefork("memory.sqlite")  # type: ignore[arg-type]


def _manager_worker(svc: MemoryService, out: Any) -> None:
    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager

    try:
        # The documented recipe: the policy layer (audit log, view cache, journal: connections of
        # their own) is built in the worker, around the service the parent prepared.
        mm = MemoryManager(svc, AuditLog(svc.backend.path))
        mm.remember("the user prefers bar charts for weekly reports", "user_profile/u1")
        hits = mm.recall("which chart style does the user like", "user_profile/u1")
        out.put([h.record.content for h in hits])
        mm.close()
    except BaseException:
        out.put(traceback.format_exc())


def test_worker_builds_its_manager_around_the_prepared_service(store: MemoryService) -> None:
    svc = prefork(store)
    out = FORK.Queue()
    p = FORK.Process(target=_manager_worker, args=(svc, out))
    p.start()
    got = out.get(timeout=120)
    p.join(30)
    assert got == ["the user prefers bar charts for weekly reports"], got
    assert [h.record.content for h in svc.search("chart style", "user_profile/u1")] == [got[0]]


def _search_twice(svc: MemoryService, out: Any) -> None:
    try:
        loads = svc.backend._parts.loads  # type: ignore[attr-defined]
        got = [[h.record.content for h in svc.search("revenue units", ns)] for ns in ("domain_facts/acme",) * 3]
        got += [[h.record.content for h in svc.search("chart style", "user_profile")] for _ in range(3)]
        out.put((svc.backend._parts.loads - loads, got))  # type: ignore[attr-defined]
    except BaseException:
        out.put((None, traceback.format_exc()))


def test_preload_index_leaves_workers_nothing_to_load(store: MemoryService) -> None:
    store.write("the user prefers bar charts", "user_profile/u1")
    expected = [[h.record.content for h in store.search("revenue units", "domain_facts/acme")]] * 3 + \
        [[h.record.content for h in store.search("chart style", "user_profile")]] * 3
    store.backend._reset_indexes()  # type: ignore[attr-defined] # nothing loaded before prefork
    svc = prefork(store, preload_index=True)
    assert set(svc.backend._parts.loaded) == {("domain_facts", "acme"), ("user_profile", "u1")}  # type: ignore[attr-defined]
    out = FORK.Queue()
    p = FORK.Process(target=_search_twice, args=(svc, out))
    p.start()
    loads, got = out.get(timeout=60)
    p.join(30)
    assert loads == 0, got  # every search served from the parent's (shared) partitions
    assert got == expected


def test_preload_index_must_fit_the_budget(tmp_path: Any, embedder: Any) -> None:
    settings = MemorySettings(path=str(tmp_path / "memory.sqlite"), index_memory_mb=0.001)
    svc = MemoryService.from_settings(settings, embedder=embedder)
    try:
        svc.write("the team reports revenue in thousands of dollars", "domain_facts/acme")
        with pytest.raises(InvalidConfig, match="MEMORY_INDEX_MEMORY_MB"):
            prefork(svc, preload_index=True)
    finally:
        svc.close()
