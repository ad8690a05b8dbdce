"""Keep the caller's flow going while the primary backend (a Qdrant server) is down.

:class:`ResilientBackend` wraps any :class:`~memory.backend.MemoryBackend`:

* **Retries** — only :class:`BackendUnavailable` (the backends translate connection
  failures, timeouts and 5xx into it), with exponential backoff and full jitter, at most
  ``retry_attempts`` tries, and never starting a try that could not finish within
  ``retry_max_s`` of the call's start. 4xx, validation and schema errors go straight to the
  caller. After a failed call the primary is left alone for ``cooldown_s``, so an outage
  costs each later call nothing until the next probe.
* **Writes are never lost** — an upsert or delete the primary cannot take is appended to a
  durable outbox (a small SQLite file, committed before the call returns) and acknowledged.
  Once the primary answers again, the outbox is replayed in order, one op per transaction,
  before any newer write; replays are idempotent (upsert by id, delete by ids/filter), so an
  op replayed twice after a crash leaves the same state. While ops are pending, new writes
  queue behind them, which keeps the order.
* **Searches degrade** — with ``dual_write`` a local :class:`SqliteBackend` mirror receives
  every acknowledged write and answers reads while the primary is down; without it a search
  returns ``[]``, and the degradation is logged and counted (``degraded_searches``,
  ``warnings``). Other reads without a mirror raise :class:`BackendUnavailable`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from memory.backend import AsyncMixin, MemoryBackend, check_upsert
from memory.backends.outbox import Outbox, OutboxOp
from memory.errors import BackendUnavailable, InvalidInput, MemoryBackendError, SchemaMismatch
from memory.filters import validate_filter
from memory.namespace import Namespace
from memory.records import MemoryQuery, MemoryRecord, ScoredMemory
from memory.settings import MemorySettings

T = TypeVar("T")
log = logging.getLogger("memory.resilient")


@dataclass
class _Budget:
    """One call's time budget: the first try of the primary always starts; a later one only if
    it can finish (``attempt_timeout_s``) before the deadline. So no call waits on the primary
    for longer than max(retry_max_s, attempt_timeout_s)."""

    deadline: float
    attempt_timeout_s: float
    started: bool = False

    def may_start(self, sleep_first: float = 0.0) -> bool:
        if not self.started:
            self.started = True
            return True
        return time.monotonic() + sleep_first + self.attempt_timeout_s <= self.deadline


class ResilientBackend(AsyncMixin):
    """Retries, a durable outbox and an optional local mirror around a primary backend.

    Example:
        >>> import numpy as np
        >>> from memory.backends.resilient import ResilientBackend
        >>> from memory.backends.sqlite import SqliteBackend
        >>> from memory.records import MemoryRecord
        >>> b = ResilientBackend(SqliteBackend(":memory:", embedding_model="demo", dim=2), outbox_path=":memory:")
        >>> b.upsert([MemoryRecord(id="m1", namespace="n/u1", content="likes tea")], np.eye(2, dtype=np.float32)[:1])
        >>> b.count(), b.outbox_pending
        (1, 0)
        >>> b.close()

    Args:
        primary: the backend to protect (any :class:`MemoryBackend`).
        outbox_path: the durable outbox file.
        mirror: a local backend receiving every acknowledged write and serving reads while
            the primary is down (``dual_write``); None to degrade searches to ``[]``.
        retry_attempts: tries per call on :class:`BackendUnavailable`.
        retry_max_s: time budget of one call, retries included.
        attempt_timeout_s: the longest one try of the primary can take (its request timeout);
            a retry is only started if it can finish within the budget.
        cooldown_s: how long to leave the primary alone after a call failed (default:
            ``retry_max_s``).
    """

    def __init__(
        self,
        primary: MemoryBackend,
        *,
        outbox_path: str | Path,
        mirror: MemoryBackend | None = None,
        retry_attempts: int = 3,
        retry_max_s: float = 10.0,
        attempt_timeout_s: float = 5.0,
        cooldown_s: float | None = None,
    ):
        if retry_attempts < 1 or retry_max_s <= 0 or attempt_timeout_s <= 0:
            raise InvalidInput("retry_attempts must be >= 1 and the time limits positive")
        if mirror is not None and (mirror.embedding_model, mirror.dim) != (primary.embedding_model, primary.dim):
            raise SchemaMismatch("the mirror must use the same embedding model and dimension as the primary")
        self.primary = primary
        self.mirror = mirror
        self.embedding_model = primary.embedding_model
        self.dim = primary.dim
        self.supports_keyword = primary.supports_keyword
        self.retry_attempts = retry_attempts
        self.retry_max_s = retry_max_s
        self.attempt_timeout_s = attempt_timeout_s
        self.cooldown_s = retry_max_s if cooldown_s is None else cooldown_s
        self.outbox = Outbox(outbox_path, busy_timeout_s=max(30.0, 2 * attempt_timeout_s))
        self._wlock = threading.RLock()  # one writer at a time: keeps outbox and primary in order
        self._local = threading.local()  # per thread: was this thread's last upsert queued?
        self._down_until = 0.0
        self._closed = False
        # Observable degradation, for operators and tests.
        self.degraded_searches = 0
        self.degraded_reads = 0
        self.queued_writes = 0
        self.replayed_writes = 0
        self.dead_letters = 0
        self.mirror_failures = 0
        self.warnings: deque[str] = deque(maxlen=100)

    # ------------------------------------------------------------------ plumbing
    @property
    def call_bound_s(self) -> float:
        """The longest a call waits on the primary: the budget, or one try if that is longer."""
        return max(self.retry_max_s, self.attempt_timeout_s)

    @property
    def outbox_pending(self) -> int:
        return len(self.outbox)

    @property
    def last_write_queued(self) -> bool:
        """Whether this thread's last upsert went to the outbox (the primary was down)."""
        return bool(getattr(self._local, "queued", False))

    @property
    def last_queued_ids(self) -> list[str]:
        """The ids the outbox holds for this thread's last queued upsert. They differ from the
        upsert's ids when it was a retry of a pending write (stored once, under the first ids)."""
        return list(getattr(self._local, "queued_ids", []))

    @property
    def primary_down(self) -> bool:
        return time.monotonic() < self._down_until

    def _warn(self, msg: str) -> None:
        log.warning(msg)
        self.warnings.append(msg)

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryBackendError("this backend is closed; open a new one")

    def _budget(self) -> _Budget:
        return _Budget(time.monotonic() + self.retry_max_s, self.attempt_timeout_s)

    def _call(self, fn: Callable[[], T], budget: _Budget) -> T:
        """``fn()`` with bounded, jittered retries of BackendUnavailable only."""
        if self.primary_down:
            raise BackendUnavailable("the primary backend failed recently; not retrying until the cooldown ends")
        if not budget.may_start():
            raise BackendUnavailable("no time left in this call's retry budget")

        def out_of_time(rs: RetryCallState) -> bool:
            return not budget.may_start(rs.upcoming_sleep or 0.0)

        retrying = Retrying(
            retry=retry_if_exception_type(BackendUnavailable),
            stop=stop_after_attempt(self.retry_attempts) | out_of_time,
            wait=wait_random_exponential(multiplier=0.05, max=max(0.05, self.retry_max_s / 4)),
            reraise=True,
        )
        try:
            return retrying(fn)
        except BackendUnavailable:
            self._down_until = time.monotonic() + self.cooldown_s
            raise

    def _drain(self, budget: _Budget) -> bool:
        """Replay pending writes; True when the outbox is empty afterwards."""
        if not len(self.outbox):
            return True
        if self.primary_down:
            return False
        with self._wlock:
            try:
                # One try per op (no backoff): a failure means the primary is still down.
                applied, dead = self.outbox.drain(lambda op: op.apply(self.primary), may_start=budget.may_start)
            except BackendUnavailable as exc:
                self._down_until = time.monotonic() + self.cooldown_s
                log.info("outbox replay paused, primary still unavailable: %s", exc)
                return False
            self.replayed_writes += applied
            if dead:
                self.dead_letters += dead
                self._warn(f"{dead} queued write(s) were rejected by the primary; see Outbox.dead_letters()")
            if applied:
                log.info("replayed %d queued write(s) to the primary", applied)
            return not len(self.outbox)

    def flush(self, timeout_s: float | None = None) -> int:
        """Try to replay the outbox now (ignores the cooldown); returns how many ops are left."""
        self._check_open()
        self._down_until = 0.0
        budget = _Budget(time.monotonic() + (self.retry_max_s if timeout_s is None else timeout_s),
                         self.attempt_timeout_s)
        self._drain(budget)
        return len(self.outbox)

    def _mirror_write(self, fn: Callable[[MemoryBackend], Any]) -> Any:
        if self.mirror is None:
            return None
        try:
            return fn(self.mirror)
        except BackendUnavailable as exc:  # the primary (or outbox) holds the write; mirror lags
            self.mirror_failures += 1
            self._warn(f"local mirror missed a write: {exc}")
            return None

    def _write(self, direct: Callable[[], T], enqueue: Callable[[], int], what: str) -> tuple[T | None, bool]:
        """Apply a write to the primary, or queue it. Returns (primary result, queued?)."""
        budget = self._budget()
        with self._wlock:
            self._check_open()
            if self._drain(budget):
                try:
                    return self._call(direct, budget), False
                except BackendUnavailable as exc:
                    self._warn(f"primary unavailable, {what} queued in the outbox: {exc}")
            enqueue()
            self.queued_writes += 1
            return None, True

    def _read(self, fn: Callable[[MemoryBackend], T], what: str) -> T:
        budget = self._budget()
        self._check_open()
        # A mirror is fresher than a primary that still misses queued writes.
        if self._drain(budget) or self.mirror is None:
            try:
                return self._call(lambda: fn(self.primary), budget)
            except BackendUnavailable as exc:
                if self.mirror is None:
                    raise
                self._warn(f"primary unavailable, {what} served by the local mirror: {exc}")
        assert self.mirror is not None
        self.degraded_reads += 1
        return fn(self.mirror)

    # ------------------------------------------------------------------ writes
    def upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        # Validated before anything is written (a queued write must be one the primary accepts).
        records, vecs = check_upsert(records, vectors, dim=self.dim, model=self.embedding_model)
        self._local.queued, self._local.queued_ids = False, []
        if not records:
            return
        queued_seq: list[int] = []

        def enqueue() -> int:
            queued_seq.append(self.outbox.append_upsert(records, vecs))
            return queued_seq[-1]

        _, queued = self._write(lambda: self.primary.upsert(records, vecs), enqueue, f"upsert of {len(records)}")
        if queued:
            pending = self.outbox.ids_of(queued_seq[-1])
            self._local.queued, self._local.queued_ids = True, pending or [r.id for r in records]
            if pending and pending != [r.id for r in records]:
                return  # a retry of a pending write: the mirror already holds it too
        self._mirror_write(lambda m: m.upsert(records, vecs))

    def delete(self, ids: Sequence[str] | None = None, *, namespace: Namespace | None = None,
               filter: dict[str, Any] | None = None) -> int:
        """Returns the primary's count; when queued, the mirror's count (0 without a mirror)."""
        validate_filter(filter)
        if ids is None and namespace is None and not filter:
            raise InvalidInput("delete needs ids, a namespace or a filter; refusing to delete everything")
        id_list = None if ids is None else list(ids)
        n, queued = self._write(lambda: self.primary.delete(id_list, namespace=namespace, filter=filter),
                                lambda: self.outbox.append_delete(id_list, namespace, filter), "delete")
        mirrored = self._mirror_write(lambda m: m.delete(id_list, namespace=namespace, filter=filter))
        if queued:
            return int(mirrored or 0)
        return int(n or 0)

    # ------------------------------------------------------------------ reads
    def query(self, q: MemoryQuery) -> list[ScoredMemory]:
        validate_filter(q.filter)
        if not q.namespaces:
            raise InvalidInput("query needs at least one namespace")
        try:
            return self._read(lambda b: b.query(q), "search")
        except BackendUnavailable as exc:
            # No mirror: the flow goes on with no memories rather than an error.
            self.degraded_searches += 1
            self._warn(f"primary unavailable and no local mirror, search returned nothing: {exc}")
            return []

    def get(self, ids: Sequence[str]) -> list[MemoryRecord]:
        return self._read(lambda b: b.get(ids), "get")

    def get_vectors(self, ids: Sequence[str]) -> np.ndarray:
        return self._read(lambda b: b.get_vectors(ids), "get_vectors")  # type: ignore[attr-defined]

    def scroll(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
               limit: int = 100, offset: int = 0, **kwargs: Any) -> list[MemoryRecord]:
        return self._read(lambda b: b.scroll(namespace, filter=filter, limit=limit, offset=offset, **kwargs),
                          "scroll")

    def count(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
              **kwargs: Any) -> int:
        return self._read(lambda b: b.count(namespace, filter=filter, **kwargs), "count")

    def namespaces(self) -> list[tuple[Namespace, int]]:
        return self._read(lambda b: b.namespaces(), "namespaces")

    def stats(self) -> dict[str, Any]:
        base: dict[str, Any] = {}
        inner = getattr(self.primary, "stats", None)
        if callable(inner):
            try:
                base.update(self._call(inner, self._budget()))
            except BackendUnavailable as exc:
                base["primary_error"] = str(exc)
        base.update({
            "outbox_path": self.outbox.path, "outbox_pending": len(self.outbox),
            "mirror": getattr(self.mirror, "path", None), "queued_writes": self.queued_writes,
            "replayed_writes": self.replayed_writes, "dead_letters": self.dead_letters,
            "degraded_searches": self.degraded_searches, "degraded_reads": self.degraded_reads,
        })
        return base

    def close(self) -> None:
        if self._closed:
            return
        with self._wlock:
            if self._closed:
                return
            if len(self.outbox) and not self.primary_down:
                try:  # best effort: whatever is left is replayed by the next process
                    self._drain(self._budget())
                except Exception as exc:
                    log.warning("outbox not drained at close: %s", exc)
            self._closed = True
            for part in (self.primary, self.mirror):
                if part is not None:
                    part.close()
            self.outbox.close()

    def __enter__(self) -> ResilientBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_outbox_path(settings: MemorySettings) -> str:
    """``qdrant.outbox_path``, else next to the SQLite file (in memory when that is ``:memory:``)."""
    if settings.qdrant.outbox_path:
        return settings.qdrant.outbox_path
    if settings.path == ":memory:":
        return ":memory:"
    return str(Path(settings.path).expanduser()) + ".qdrant-outbox"


def open_resilient(primary: MemoryBackend, settings: MemorySettings) -> ResilientBackend:
    """Wrap ``primary`` as configured by ``settings.qdrant`` (retries, outbox, dual_write mirror)."""
    import math

    from memory.backends.sqlite import SqliteBackend

    qs = settings.qdrant
    outbox = default_outbox_path(settings)
    if outbox == ":memory:":
        log.warning("the Qdrant outbox is in memory (MEMORY_PATH=':memory:'): queued writes die with "
                    "the process; set MEMORY_QDRANT__OUTBOX_PATH to make them durable")
    mirror = SqliteBackend(settings.path, embedding_model=primary.embedding_model, dim=primary.dim) \
        if qs.dual_write else None
    return ResilientBackend(
        primary, outbox_path=outbox, mirror=mirror, retry_attempts=qs.retry_attempts,
        retry_max_s=qs.retry_max_s,
        # qdrant-client rounds its request timeout up to whole seconds.
        attempt_timeout_s=float(math.ceil(qs.timeout_s)),
    )


__all__ = ["Outbox", "OutboxOp", "ResilientBackend", "default_outbox_path", "open_resilient"]
