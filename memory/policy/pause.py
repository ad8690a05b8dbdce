"""Pause points inside a memory write, for callers that run writes in the background.

A write (:meth:`memory.policy.manager.MemoryManager.remember`) takes tens of ms of CPU: the
judge's encoder, the paraphrase model, the judging, SQLite. Run on a background thread beside a
latency-sensitive read (the Supervisor's pre-node search, :mod:`supervisor.writebehind`), it
competes with it for the GIL and the two cores from start to end: holding writes back until the
read is over only works for writes that have not started yet. So the write calls
:func:`pause_point` between its phases; a background runner installs a hook for the duration of
the write (:func:`pausing`) that may wait there until the read is done. Without a hook (inline
writes, the CLI, the eval) a pause point does nothing.

The hook lives in a context variable: each thread has its own, so one worker's hook never pauses
another thread's write. A hook must not raise; it is called with no lock of the write held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_HOOK: ContextVar[Callable[[], None] | None] = ContextVar("memory_write_pause", default=None)


def pause_point() -> None:
    """Let the installed hook (if any) hold this write here until it may go on."""
    hook = _HOOK.get()
    if hook is not None:
        hook()


@contextmanager
def pausing(hook: Callable[[], None]) -> Iterator[None]:
    """Install ``hook`` for the writes this thread runs inside the block."""
    token = _HOOK.set(hook)
    try:
        yield
    finally:
        _HOOK.reset(token)


__all__ = ["pause_point", "pausing"]
