"""Errors raised by the memory layer.

Every error says what went wrong and what to do about it. Backends translate driver
exceptions (sqlite3, qdrant-client, httpx) into this tree at their boundary, so callers
never need to import a driver to handle a failure::

    MemoryLayerError                 base of everything below
    ├── InvalidInput (ValueError)    the caller passed something unusable; nothing was stored
    │   ├── InvalidNamespace         empty/oversized label, separator inside a label, ...
    │   │   └── StoreNamespaceError  (memory.store) a LangGraph store namespace that is not a tuple
    │   │                            of labels, or breaks LangGraph's label rules; also LangGraph's
    │   │                            InvalidNamespaceError
    │   ├── InvalidContent           empty, too long, not UTF-8
    │   ├── InvalidFilter            unknown filter key or operator
    │   └── InvalidConfig            settings that cannot work together
    ├── NotFound (KeyError)          no memory with that id
    ├── AccessDenied                 the actor (an agent) may not read/write that namespace under
    │                                the access rules (settings.acl, memory.policy.acl); nothing
    │                                was read or written, and the denial is in the audit log
    ├── MemoryAccessDenied           (supervisor.guard; also PermissionError) a sub-agent used the
    │                                memory store; only the Supervisor's memory nodes may
    └── MemoryBackendError           the storage layer failed
        ├── BackendUnavailable       transient: retrying later may succeed
        ├── SchemaMismatch           the store was built for another embedding model / dimension
        ├── StoreReadOnly            the store file cannot be written (permissions, read-only mount)
        ├── StoreCorrupt             the store file is damaged or not a store at all
        ├── StoreFull                the disk (or a size limit) is full; nothing was written
        └── StoreForked              a store opened before os.fork() was used in the child; open it
                                     again there, or prepare it with memory.forking.prefork

The name ``MemoryLayerError`` is deliberate: ``MemoryError`` is a Python builtin.
"""

from __future__ import annotations

from collections.abc import Iterable


class MemoryLayerError(Exception):
    """Base class of every error raised by this package."""


class InvalidInput(MemoryLayerError, ValueError):
    """The caller passed an unusable value. Nothing was written."""


class InvalidNamespace(InvalidInput):
    """A namespace label is empty, too long, or contains a separator."""


class InvalidContent(InvalidInput):
    """Memory content is empty, too long, or not valid UTF-8 text."""


class InvalidFilter(InvalidInput):
    """A metadata filter uses an unknown key or operator."""


class InvalidConfig(InvalidInput):
    """Settings that cannot work (unknown backend, bad weights, unreadable file)."""


class NotFound(MemoryLayerError, KeyError):
    """No memory exists with the given id."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain message.
        return str(self.args[0]) if self.args else "not found"


class AccessDenied(MemoryLayerError):
    """An agent asked to read or write a namespace the access rules do not give it.

    ``decisions`` holds one :class:`memory.policy.acl.Decision` per denied namespace."""

    def __init__(self, message: str, decisions: tuple[object, ...] = ()):
        super().__init__(message)
        self.decisions = decisions


class MemoryBackendError(MemoryLayerError):
    """The storage backend failed."""


class BackendUnavailable(MemoryBackendError):
    """A transient failure (connection refused, timeout, locked database). Retry later."""


class SchemaMismatch(MemoryBackendError):
    """The store was created for a different embedding model or vector dimension."""


class StoreReadOnly(MemoryBackendError):
    """The store file cannot be written: its permissions, directory or mount are read-only."""


class StoreCorrupt(MemoryBackendError):
    """The store file is damaged (or not a store). Restore it from a backup; nothing was written."""


class StoreFull(MemoryBackendError):
    """The disk or a size limit is full. The failed write was rolled back; free space and retry."""


class StoreForked(MemoryBackendError):
    """A store opened in one process was used in a process forked from it.

    A SQLite connection must not cross a fork (the two processes would share one file handle
    and its locks). Nothing was read or written: open the store again in the child, or prepare
    the parent with :func:`memory.forking.prefork` so every child reopens it itself."""


__all__ = [
    "AccessDenied",
    "BackendUnavailable",
    "InvalidConfig",
    "InvalidContent",
    "InvalidFilter",
    "InvalidInput",
    "InvalidNamespace",
    "MemoryBackendError",
    "MemoryLayerError",
    "NotFound",
    "SchemaMismatch",
    "StoreCorrupt",
    "StoreForked",
    "StoreFull",
    "StoreReadOnly",
]


def nearest(word: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name a misspelt one most likely meant, for a "did you mean" hint (None: no close one)."""
    import difflib

    got = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return got[0] if got else None
