"""Long-term memory for LangGraph supervisor apps (offline by default)."""

from memory.backend import MemoryBackend
from memory.backends.sqlite import SqliteBackend
from memory.embeddings import Embedder, LangChainEmbedder, get_embedder
from memory.errors import (
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
)
from memory.namespace import parse_namespace
from memory.records import MemoryMetadata, MemoryQuery, MemoryRecord, ScoreBreakdown, ScoredMemory, SearchHit
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings

__all__ = [
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
    "get_embedder",
    "parse_namespace",
]
