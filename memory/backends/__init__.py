"""The backend registry: settings pick a backend by name; no code change to switch."""

from __future__ import annotations

from collections.abc import Callable

from memory.backend import MemoryBackend
from memory.backends.sqlite import SqliteBackend
from memory.settings import MemorySettings


def _sqlite(settings: MemorySettings, embedding_model: str, dim: int) -> MemoryBackend:
    return SqliteBackend(settings.path, embedding_model=embedding_model, dim=dim,
                         memory_budget_mb=settings.index_memory_mb)


def _qdrant(settings: MemorySettings, embedding_model: str, dim: int) -> MemoryBackend:
    from memory.backends.qdrant import QdrantBackend
    from memory.backends.resilient import open_resilient

    qs = settings.qdrant
    if not qs.url:
        # Local mode (location/path; ":memory:" when nothing is set) has no network to fail.
        return QdrantBackend.from_settings(qs, embedding_model=embedding_model, dim=dim)
    # A server: build without connecting, so the app starts even while Qdrant is down, and
    # wrap it in retries, the durable outbox and (with dual_write) the SQLite mirror.
    primary = QdrantBackend.from_settings(qs, embedding_model=embedding_model, dim=dim, connect=False)
    return open_resilient(primary, settings)


BACKENDS: dict[str, Callable[[MemorySettings, str, int], MemoryBackend]] = {
    "sqlite": _sqlite,
    "qdrant": _qdrant,
}


def open_backend(settings: MemorySettings, embedding_model: str, dim: int) -> MemoryBackend:
    return BACKENDS[settings.backend](settings, embedding_model, dim)


__all__ = ["BACKENDS", "SqliteBackend", "open_backend"]
