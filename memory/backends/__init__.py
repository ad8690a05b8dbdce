"""The backend registry: settings pick a backend by name; no code change to switch."""

from __future__ import annotations

from collections.abc import Callable

from memory.backend import MemoryBackend
from memory.backends.sqlite import SqliteBackend
from memory.settings import MemorySettings


def _sqlite(settings: MemorySettings, embedding_model: str, dim: int) -> MemoryBackend:
    return SqliteBackend(settings.path, embedding_model=embedding_model, dim=dim)


BACKENDS: dict[str, Callable[[MemorySettings, str, int], MemoryBackend]] = {"sqlite": _sqlite}


def open_backend(settings: MemorySettings, embedding_model: str, dim: int) -> MemoryBackend:
    return BACKENDS[settings.backend](settings, embedding_model, dim)


__all__ = ["BACKENDS", "SqliteBackend", "open_backend"]
