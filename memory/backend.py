"""The ``MemoryBackend`` protocol: a handful of primitives every store implements.

Everything else (embedding, scoring, policy) lives above the backend and works with any of
them. Score contract: backends return raw relevance where **higher is better** —
``vector_score`` is cosine similarity, ``keyword_score`` is BM25 (>= 0). The conformance
suite checks it.

Async twins follow one rule: ``a<name>`` runs the sync primitive in a worker thread
(:class:`AsyncMixin`). A backend with a native async client may override them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memory.namespace import Namespace
from memory.records import MemoryQuery, MemoryRecord, ScoredMemory


@runtime_checkable
class MemoryBackend(Protocol):
    """Storage for memory records with their vectors.

    A backend is bound to one embedding model (``embedding_model``, ``dim``); opening an
    existing store with another model raises :class:`memory.errors.SchemaMismatch`.
    """

    embedding_model: str
    dim: int
    supports_keyword: bool

    def upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Insert or replace records by id (idempotent). ``vectors`` is (len(records), dim)."""

    def get(self, ids: Sequence[str]) -> list[MemoryRecord]:
        """Records with these ids, in the given order; unknown ids are left out."""

    def query(self, q: MemoryQuery) -> list[ScoredMemory]:
        """Candidates within ``q.namespaces`` by vector and/or keywords, filtered, unexpired."""

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        namespace: Namespace | None = None,
        filter: dict[str, Any] | None = None,
        include_expired: bool = True,
    ) -> int:
        """Delete by ids, or everything under a namespace prefix matching a filter. Returns the count.

        Expired records are deleted too unless ``include_expired`` is False (the TTL sweeper
        relies on it)."""

    def scroll(
        self,
        namespace: Namespace | None = None,
        *,
        filter: dict[str, Any] | None = None,
        limit: int = 100,
        offset: int = 0,
        include_expired: bool = False,
    ) -> list[MemoryRecord]:
        """Records under a namespace prefix, newest first (``updated_at``), paginated.
        Expired records are left out unless ``include_expired``."""

    def count(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
              include_expired: bool = False) -> int:
        """Number of live records under a namespace prefix (all namespaces when None)."""

    def namespaces(self) -> list[tuple[Namespace, int]]:
        """Every namespace holding records, with its record count."""

    def close(self) -> None:
        """Release files and connections. Idempotent."""


def check_upsert(records: Sequence[MemoryRecord], vectors: np.ndarray, *, dim: int,
                 model: str) -> tuple[list[MemoryRecord], np.ndarray]:
    """Validate an upsert before anything is written (shared by every backend).

    Raises:
        SchemaMismatch: vectors of the wrong shape for this store's model.
        InvalidInput: NaN/inf vectors, non-record items, or one id twice.
    """
    from memory.errors import InvalidInput, SchemaMismatch

    records = list(records)
    vecs = np.asarray(vectors, dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape != (len(records), dim):
        raise SchemaMismatch(
            f"expected vectors of shape ({len(records)}, {dim}) for model "
            f"{model!r}, got {tuple(vecs.shape)}; nothing was written"
        )
    if not np.isfinite(vecs).all():
        raise InvalidInput("vectors contain NaN or infinity; nothing was written")
    for r in records:
        if not isinstance(r, MemoryRecord):
            raise InvalidInput(f"upsert takes MemoryRecord objects, got {type(r).__name__}")
    if len({r.id for r in records}) != len(records):
        raise InvalidInput("the same id appears twice in one upsert; nothing was written")
    return records, vecs


def check_query(q: MemoryQuery, *, dim: int, model: str) -> tuple[dict[str, Any] | None, np.ndarray | None]:
    """Validate a query (shared by every backend): the normalised filter and the query vector.

    Raises:
        InvalidFilter / InvalidInput: bad filter, no namespace, NaN/inf vector.
        SchemaMismatch: a vector that is not one ``dim``-long row.
    """
    from memory.errors import InvalidInput, SchemaMismatch
    from memory.filters import validate_filter

    flt = validate_filter(q.filter)
    if not q.namespaces:
        raise InvalidInput("query needs at least one namespace")
    qvec: np.ndarray | None = None
    if q.vector is not None:
        qvec = np.asarray(q.vector, dtype=np.float32)
        if qvec.ndim != 1 or qvec.shape[0] != dim:
            raise SchemaMismatch(
                f"query vector has dimension {qvec.shape[-1] if qvec.ndim else 0} (shape {tuple(qvec.shape)}), "
                f"the store holds {dim}-d vectors of {model!r}"
            )
        if not np.isfinite(qvec).all():
            raise InvalidInput("query vector contains NaN or infinity")
    return flt, qvec


class AsyncMixin:
    """Async twins of the primitives: each runs its sync twin in a worker thread."""

    async def aupsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        await asyncio.to_thread(self.upsert, records, vectors)  # type: ignore[attr-defined]

    async def aget(self, ids: Sequence[str]) -> list[MemoryRecord]:
        return await asyncio.to_thread(self.get, ids)  # type: ignore[attr-defined]

    async def aquery(self, q: MemoryQuery) -> list[ScoredMemory]:
        return await asyncio.to_thread(self.query, q)  # type: ignore[attr-defined]

    async def adelete(self, ids: Sequence[str] | None = None, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.delete, ids, **kwargs)  # type: ignore[attr-defined]

    async def ascroll(self, namespace: Namespace | None = None, **kwargs: Any) -> list[MemoryRecord]:
        return await asyncio.to_thread(self.scroll, namespace, **kwargs)  # type: ignore[attr-defined]

    async def acount(self, namespace: Namespace | None = None, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.count, namespace, **kwargs)  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)  # type: ignore[attr-defined]
