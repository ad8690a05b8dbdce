"""One background worker thread per process, started on first use and never inherited by a fork.

The vector scan (:mod:`memory.backends.vector_index`) and the judge's paraphrase model
(:mod:`memory.policy.judge`) each overlap one piece of work with the calling thread. Importing
the package starts no thread; the first ``submit`` does. A forked child has no worker thread,
but an inherited executor would believe it had an idle one and never run the job, so the child
drops the inherited executor and makes its own on first use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class LazyWorker:
    """``submit`` runs ``fn`` on this process's single worker thread named ``name``."""

    def __init__(self, name: str):
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    @property
    def started(self) -> bool:
        return self._pool is not None

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
            return self._pool

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self.executor().submit(fn, *args)

    def _forget(self) -> None:
        # The lock may have been held by another thread at the fork: the child gets a new one.
        self._pool, self._lock = None, threading.Lock()
