"""Serving one SQLite store from forked worker processes (a preloading server).

A server that preloads (gunicorn ``--preload``, a ``multiprocessing`` pool with the ``fork``
start method) opens the store and loads the model once, then forks its workers: what the parent
loaded is shared with them copy-on-write instead of being built again in each. Two things must
not be shared, though:

* **The SQLite connection.** A connection carried across ``fork()`` shares the parent's file
  descriptors and the lock state SQLite keeps about them; using it in the child is the way the
  SQLite documentation lists for corrupting a file ("howtocorrupt", 2.6). A prepared backend
  therefore closes its connection just before every fork (holding its lock, so no operation is
  half done) and opens a fresh one in the parent and in the child just after.
* **The vector file's descriptor.** Its ``flock`` belongs to the open file description, which a
  forked child shares with its parent: both would hold the "exclusive" lock at once. The child
  opens its own (the shared mapping of the file stays: its pages are the OS page cache's).

A backend that was *not* prepared refuses every operation in a forked child with
:class:`~memory.errors.StoreForked`, before touching the connection, and never closes the
inherited connection (closing is a use of it too).

What a forked worker keeps of its own is most of what a preloading server costs (100k store,
four cold workers of 50 scoped searches, ``python -m memctl.bench_procs``: ~23 MB of anonymous
memory each, ~19.5 MB with what follows): pages of the parent's heap it wrote to (Python 3.11
writes the reference count of every object it touches: ~8 MB whatever is done), its parsed
records and caches (~4.5 MB), its SQLite page cache, and heap its searches freed but malloc
kept. So a
prepared backend also: opens ``<store>.partitions`` in the parent (its spot checks and lookup
arrays are read once, not in every worker), runs one search there before the fork (what the
first search creates lazily, modules it imports, is then shared), gives each worker's
connection a smaller SQLite page cache (FORKED_CACHE_KIB: the OS page cache holds the file
for every process already) and returns freed heap to the OS every TRIM_EVERY searches.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable
from typing import Any

from memory.errors import InvalidConfig

log = logging.getLogger(__name__)
# Backends prepared for fork in this process. Weak: a backend closed and dropped needs no hook.
_PREPARED: weakref.WeakSet[Any] = weakref.WeakSet()
_HOOKS_REGISTERED = False
_HOOKS_LOCK = threading.Lock()
# Connections inherited from a parent process: kept referenced, never closed (see module doc).
_ABANDONED: list[sqlite3.Connection] = []
# A forked worker's SQLite page cache, KiB (SQLite's default is 2,000 per connection). Its pages
# are copies of what the OS page cache already holds for every process; a worker's searches
# re-read few pages (row lookups, FTS5 terms), each a ~2 us copy from the OS cache when missing.
FORKED_CACHE_KIB = 256
# A forked worker hands the heap its searches freed back to the OS every this many searches
# (glibc ``malloc_trim``: ~0.2-0.3 ms on a worker's heap at 100k).
TRIM_EVERY = 16
_TRIM: Any = None  # the C function once looked up (False: not glibc)


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``); False where there is
    no such call (another C library). Freed memory stays mapped and counted otherwise: a worker's
    searches free their temporaries, but malloc keeps the pages for the next allocation."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM is False:
        return False
    _TRIM(0)
    return True


def abandon(conn: sqlite3.Connection) -> None:
    """Keep an inherited connection alive and unused: its finaliser would close it."""
    _ABANDONED.append(conn)


def _before_fork() -> None:
    for b in list(_PREPARED):
        b._fork_before()


def _after_fork_parent() -> None:
    for b in list(_PREPARED):
        b._fork_after(child=False)


def _after_fork_child() -> None:
    for b in list(_PREPARED):
        b._fork_after(child=True)


def _register_hooks() -> None:
    global _HOOKS_REGISTERED
    with _HOOKS_LOCK:
        if not _HOOKS_REGISTERED:  # os.register_at_fork cannot unregister: once per process
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                                after_in_child=_after_fork_child)
            _HOOKS_REGISTERED = True


class ForkMixin:
    """``prepare_for_fork`` and the fork hooks of :class:`~memory.backends.sqlite.SqliteBackend`."""

    path: str
    _pid: int
    _closed: bool
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _vf: Any
    _forking = False  # True between _fork_before and _fork_after: the lock is held, no connection
    _forked_searches = -1  # searches run in a forked worker (-1: not a prepared, forked child)

    def prepare_for_fork(self, *, preload_index: bool = False,
                         warm: Callable[[str], object] | None = None) -> None:
        """Load what every forked worker reads the same way, and reopen per process at fork.

        Loaded here, in the parent, so workers share the pages: the namespace catalogue (one
        int32 per row), the vector file's mapping (kept up to date) and the two-stage scan's
        saved basis. With ``preload_index``, every namespace's partition too (vectors, keyword
        postings): a worker then loads nothing of its own, where without it each long-lived
        worker ends up holding a private copy of every partition it searched twice. Otherwise
        partitions, postings and parsed records stay per worker. The mapped ``<store>.partitions``
        file is opened (and spot-checked) here too, once for all workers. ``warm``: a search of
        one namespace (``"kind/id"``), run once on the smallest one, so that what a first search
        creates lazily exists before the fork; the selection counts it added are forgotten, so
        workers decide what to load exactly as without it. Idempotent.

        Raises:
            InvalidConfig: an in-memory store (``":memory:"``) cannot be shared by processes, or
                the whole index would not fit in ``index_memory_mb``.
        """
        from memory.backends import vector_index

        if self.path == ":memory:":
            raise InvalidConfig("an in-memory store (path ':memory:') cannot be shared by forked workers: "
                                "each child would get a private copy; set MEMORY_PATH to a file")
        with self._lock, self._translate():  # type: ignore[attr-defined]
            self._check_open()  # type: ignore[attr-defined]
            self._sync()  # type: ignore[attr-defined]
            cat = self._catalogue()  # type: ignore[attr-defined]
            self._vector_file().catch_up(self._conn)  # type: ignore[attr-defined]
            if len(cat) >= vector_index.TWO_STAGE_MIN_ROWS:
                self._basis_now()  # type: ignore[attr-defined]
            if preload_index:
                parts = self._parts  # type: ignore[attr-defined]
                need = parts.partition_bytes(len(cat))
                if need > parts.budget_bytes:
                    raise InvalidConfig(
                        f"preloading the whole index of {self.path!r} needs ~{need / 2**20:.0f} MB, more than "
                        f"index_memory_mb={parts.budget_bytes / 2**20:.0f}; raise MEMORY_INDEX_MEMORY_MB, or "
                        "prefork without preload_index (workers then load what they search)")
                kinds = sorted({ns[:1] for i, ns in enumerate(cat.ns_list) if cat.counts[i] > 0})
                self._matching(kinds)  # type: ignore[attr-defined]
            self._shared(0)  # type: ignore[attr-defined]  # maps <store>.partitions (never builds it)
            live = [(int(cat.counts[i]), ns) for i, ns in enumerate(cat.ns_list) if cat.counts[i] > 0]
        if warm is not None and live:
            _, smallest = min(live)
            warm("/".join(smallest))
            with self._lock:
                self._parts.large_searches.clear()  # type: ignore[attr-defined]
        _register_hooks()
        _PREPARED.add(self)

    def _fork_before(self) -> None:
        if self._closed or self._pid != os.getpid():
            return
        if self._lock._is_owned():  # type: ignore[attr-defined]
            # Forked from inside one of this backend's own operations (a callback): its
            # connection is in use and stays open here; the child gets StoreForked instead.
            return
        # Held across the fork: no other thread is inside an operation (or a transaction) when
        # the connection is closed, and none starts one before it is reopened.
        self._lock.acquire()
        self._forking = True
        self._conn.close()

    def _fork_after(self, *, child: bool) -> None:
        if not self._forking:
            return
        self._forking = False
        if child:
            # Threads do not survive a fork; a fresh lock cannot be left held by one of them.
            self._lock = threading.RLock()
            self._pid = os.getpid()
            if self._vf is not None:
                try:
                    self._vf.reopen()
                except OSError as exc:  # opened again (or reported) by the next search that needs it
                    log.error("could not reopen the vector file of %r after fork: %s", self.path, exc)
                    self._vf = None
            self._conn = self._reopen()
            try:
                self._conn.execute(f"PRAGMA cache_size = -{FORKED_CACHE_KIB}")
            except sqlite3.Error:
                pass  # a connection that could not be reopened: its next use reports that
            self._forked_searches = 0
            return
        try:
            self._conn = self._reopen()
        finally:
            self._lock.release()

    def _forked_search_starts(self) -> None:
        """Called as each search starts: in a forked worker, after the first search and every
        TRIM_EVERY after it, the heap freed since is returned to the OS (release_free_heap)."""
        done = self._forked_searches
        if done < 0:
            return
        self._forked_searches = done + 1
        if done % TRIM_EVERY == 1:
            release_free_heap()

    def _reopen(self) -> sqlite3.Connection:
        try:
            return self._connect()  # type: ignore[attr-defined,no-any-return]
        except Exception as exc:
            log.error("could not reopen the store %r after fork: %s", self.path, exc)
            # A hook cannot raise to the caller of fork(): leave a closed connection, so the next
            # operation fails with a translated error instead of running on a stale one.
            conn = sqlite3.connect(":memory:")
            conn.close()
            return conn


__all__ = ["FORKED_CACHE_KIB", "TRIM_EVERY", "ForkMixin", "abandon", "release_free_heap"]
