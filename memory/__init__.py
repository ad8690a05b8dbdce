"""Long-term memory for LangGraph supervisor apps (offline by default).

The public names below are imported on first use (a PEP 562 module ``__getattr__``), so
``import memory`` and the imports of its light modules (``memory.errors``, ``memory.settings``)
do not load the backends, numpy or the embedding runtime; ``from memory import MemoryService``
works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "MemoryBackend": "memory.backend",
    "SqliteBackend": "memory.backends.sqlite",
    "Embedder": "memory.embeddings",
    "LangChainEmbedder": "memory.embeddings",
    "get_embedder": "memory.embeddings",
    "AccessDenied": "memory.errors",
    "BackendUnavailable": "memory.errors",
    "InvalidConfig": "memory.errors",
    "InvalidContent": "memory.errors",
    "InvalidFilter": "memory.errors",
    "InvalidInput": "memory.errors",
    "InvalidNamespace": "memory.errors",
    "MemoryBackendError": "memory.errors",
    "MemoryLayerError": "memory.errors",
    "NotFound": "memory.errors",
    "SchemaMismatch": "memory.errors",
    "StoreCorrupt": "memory.errors",
    "StoreForked": "memory.errors",
    "StoreFull": "memory.errors",
    "StoreReadOnly": "memory.errors",
    "parse_namespace": "memory.namespace",
    "MemoryMetadata": "memory.records",
    "MemoryQuery": "memory.records",
    "MemoryRecord": "memory.records",
    "ScoreBreakdown": "memory.records",
    "ScoredMemory": "memory.records",
    "SearchHit": "memory.records",
    "prefork": "memory.forking",
    "MemoryService": "memory.service",
    "NewMemory": "memory.service",
    "MemorySettings": "memory.settings",
}

__all__ = [
    "AccessDenied",
    "BackendUnavailable",
    "Embedder",
    "InvalidConfig",
    "InvalidContent",
    "InvalidFilter",
    "InvalidInput",
    "InvalidNamespace",
    "LangChainEmbedder",
    "MemoryBackend",
    "MemoryBackendError",
    "MemoryLayerError",
    "MemoryMetadata",
    "MemoryQuery",
    "MemoryRecord",
    "MemoryService",
    "MemorySettings",
    "NewMemory",
    "NotFound",
    "SchemaMismatch",
    "ScoreBreakdown",
    "ScoredMemory",
    "SearchHit",
    "SqliteBackend",
    "StoreCorrupt",
    "StoreForked",
    "StoreFull",
    "StoreReadOnly",
    "get_embedder",
    "parse_namespace",
    "prefork",
]

if TYPE_CHECKING:  # type checkers and IDEs see the eager imports
    from memory.backend import MemoryBackend
    from memory.backends.sqlite import SqliteBackend
    from memory.embeddings import Embedder, LangChainEmbedder, get_embedder
    from memory.errors import (
        AccessDenied,
        BackendUnavailable,
        InvalidConfig,
        InvalidContent,
        InvalidFilter,
        InvalidInput,
        InvalidNamespace,
        MemoryBackendError,
        MemoryLayerError,
        NotFound,
        SchemaMismatch,
        StoreCorrupt,
        StoreForked,
        StoreFull,
        StoreReadOnly,
    )
    from memory.forking import prefork
    from memory.namespace import parse_namespace
    from memory.records import MemoryMetadata, MemoryQuery, MemoryRecord, ScoreBreakdown, ScoredMemory, SearchHit
    from memory.service import MemoryService, NewMemory
    from memory.settings import MemorySettings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # Not an export: `from memory import scoring` then falls back to the submodule.
        raise AttributeError(f"module 'memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
