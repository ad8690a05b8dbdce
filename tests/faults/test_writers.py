"""Faults: kill -9 of a writer process, concurrent writer processes, and the bounded wait for
the write lock. The full sizes run with ``memctl faults --json``; these are the CI sizes."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from memctl.faults import SMALL, concurrent_writers, kill9
from memctl.faults_workers import DIM, MODEL, content_for, vector_for
from memory.backends import sqlite_sync
from memory.backends.sqlite import SqliteBackend
from memory.errors import BackendUnavailable
from memory.records import MemoryRecord


def test_kill9_at_random_points_loses_no_acknowledged_memory(tmp_path):
    r = kill9(tmp_path, points=SMALL["kill_points"], per_child=SMALL["kill_per_child"])
    assert r["first_disagreement"] is None
    assert r["acknowledged"] > r["kills"]  # the children really wrote before being killed
    assert r["lost_acknowledged"] == 0
    assert r["deleted_memories_back"] == 0
    assert r["integrity_failures"] == 0
    assert r["index_disagreements_after_reopen"] == 0


def test_concurrent_writer_processes_store_everything_once(tmp_path):
    r = concurrent_writers(tmp_path, procs=SMALL["procs"], per_proc=SMALL["per_proc"])
    assert r["worker_errors"] == 0
    assert r["present"] == r["expected"] == r["rows"]
    assert r["duplicates"] == 0
    assert r["integrity"] == "ok" and r["index_agrees"]


def _hold_write_lock(path, seconds: float, started: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    started.set()
    threading.Event().wait(seconds)  # not time.sleep: a test records those of the backend
    conn.execute("COMMIT")
    conn.close()


def _rec(mid: str) -> MemoryRecord:
    return MemoryRecord(id=mid, namespace="faults/u1", content=content_for(mid))


def test_write_lock_is_retried_with_short_jittered_sleeps(tmp_path, monkeypatch):
    """A writer waiting for another process's transaction polls every few ms (not SQLite's
    busy handler, which sleeps up to 100 ms and let waiters miss the gaps for seconds)."""
    path = str(tmp_path / "lock.sqlite")
    b = SqliteBackend(path, embedding_model=MODEL, dim=DIM)
    sleeps: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(sqlite_sync.time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
    started = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(path, 0.3, started))
    holder.start()
    started.wait(5)
    t0 = time.monotonic()
    b.upsert([_rec("w-1")], vector_for("w-1")[None, :])
    waited = time.monotonic() - t0
    holder.join()
    assert b.get(["w-1"])[0].id == "w-1"
    assert sleeps, "the wait for the write lock did not go through the jittered retry"
    assert max(sleeps) <= sqlite_sync.SqliteFileMixin.BUSY_SLEEP_MAX_S
    assert 0.2 <= waited < 5.0
    b.close()


def test_write_lock_wait_is_bounded(tmp_path):
    path = str(tmp_path / "bounded.sqlite")
    b = SqliteBackend(path, embedding_model=MODEL, dim=DIM, timeout_s=0.3)
    started = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(path, 1.5, started))
    holder.start()
    started.wait(5)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable, match="locked"):
        b.upsert([_rec("w-2")], vector_for("w-2")[None, :])
    assert time.monotonic() - t0 < 1.2
    holder.join()
    b.upsert([_rec("w-2")], vector_for("w-2")[None, :])  # the store still works afterwards
    assert [r.id for r in b.get(["w-2"])] == ["w-2"]
    b.close()
