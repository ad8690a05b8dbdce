"""The collection side of :class:`~memory.backends.qdrant.QdrantBackend`: error translation,
creating and checking the collection, rewriting keyword vectors, FTS5-compatible query weights.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memory.backends.qdrant_points import (
    DENSE,
    SCHEMA_VERSION,
    SPARSE,
    UPSERT_CHUNK,
    doc_sparse,
    error_detail,
    filter_conditions,
    from_payload,
    namespace_condition,
    term_counts,
    unexpired,
)
from memory.errors import BackendUnavailable, InvalidInput, MemoryBackendError, MemoryLayerError, SchemaMismatch
from memory.namespace import Namespace
from memory.records import INDEX_TEXT_VERSION, index_text

# Payload indexes a server needs for our filters, scroll order and namespace facets.
_PAYLOAD_INDEXES: dict[str, qm.PayloadSchemaType] = {
    "ns_prefixes": qm.PayloadSchemaType.KEYWORD,  # namespace-prefix filter (label boundaries)
    "ns": qm.PayloadSchemaType.KEYWORD,  # namespaces() facet
    "type": qm.PayloadSchemaType.KEYWORD,
    "source": qm.PayloadSchemaType.KEYWORD,
    "agent": qm.PayloadSchemaType.KEYWORD,
    "tags": qm.PayloadSchemaType.KEYWORD,
    "updated_at": qm.PayloadSchemaType.FLOAT,  # scroll order (order_by needs a range index)
    "created_at": qm.PayloadSchemaType.FLOAT,
    "expires_at": qm.PayloadSchemaType.FLOAT,
}

class QdrantCollectionMixin:
    """Collection plumbing; ``QdrantBackend.__init__`` sets the state below."""

    embedding_model: str
    dim: int
    collection: str
    _client: QdrantClient
    _lock: threading.RLock
    _closed: bool
    _ready: bool
    _local: bool
    _target: str
    _kw_docs: int
    _kw_terms: int
    _kw_persisted: int
    _idf_cache: dict[int, float]
    _idf_cache_until: float

    # Server mode: how long FTS5 query weights are reused (other processes write too; local
    # mode has no other writer, so there they last until this backend writes).
    IDF_CACHE_S = 30.0

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except MemoryLayerError:
            raise
        except ResourceExhaustedResponse as exc:
            raise BackendUnavailable(f"Qdrant is rate limiting {what}: {exc}") from exc
        except UnexpectedResponse as exc:
            code = exc.status_code or 0
            detail = error_detail(exc.content)
            if code >= 500 or code in (408, 429):
                raise BackendUnavailable(f"Qdrant at {self._target} failed {what} ({code}): {detail}") from exc
            if code == 404:
                self._ready = False  # collection dropped under us: check it again next time
            if code in (400, 413, 422):
                raise InvalidInput(f"Qdrant rejected {what} ({code}): {detail}") from exc
            hint = "; check MEMORY_QDRANT__API_KEY" if code in (401, 403) else ""
            raise MemoryBackendError(f"Qdrant refused {what} ({code}): {detail}{hint}") from exc
        except ResponseHandlingException as exc:
            if isinstance(exc.source, httpx.TransportError):
                raise BackendUnavailable(
                    f"Qdrant at {self._target} is unreachable during {what}: {exc.source!r}"
                ) from exc
            raise MemoryBackendError(f"unexpected Qdrant response to {what}: {exc.source!r}") from exc
        except (httpx.TransportError, ConnectionError, TimeoutError) as exc:
            raise BackendUnavailable(f"Qdrant at {self._target} is unreachable during {what}: {exc!r}") from exc
        except (ValueError, RuntimeError, KeyError, TypeError) as exc:
            # Local mode reports bad requests and closed instances with builtin exceptions.
            raise MemoryBackendError(f"Qdrant {what} failed: {exc}") from exc

    @contextmanager
    def _op(self, what: str) -> Iterator[None]:
        """Lock, check open, translate errors, and make sure the collection exists."""
        with self._lock:
            if self._closed:
                raise MemoryBackendError("this backend is closed; open a new one")
            with self._translate(what):
                self._ensure()
                yield

    def _ensure(self) -> None:
        if self._ready:
            return
        with self._translate("opening the collection"):
            if not self._client.collection_exists(self.collection):
                try:
                    self._client.create_collection(
                        self.collection,
                        vectors_config={DENSE: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)},
                        sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
                        metadata={"embedding_model": self.embedding_model, "dim": self.dim,
                                  "schema_version": SCHEMA_VERSION, "kw_docs": 0, "kw_terms": 0,
                                  "index_text_version": INDEX_TEXT_VERSION},
                    )
                except (UnexpectedResponse, ValueError):
                    # Another process may have created it between our check and our create.
                    if not self._client.collection_exists(self.collection):
                        raise
            info = self._client.get_collection(self.collection)
            self._check_schema(info)
            if not self._local:  # local mode ignores payload indexes (and warns about them)
                have = set(info.payload_schema or {})
                for field, schema in _PAYLOAD_INDEXES.items():
                    if field not in have:
                        self._client.create_payload_index(self.collection, field, field_schema=schema, wait=True)
            meta = info.config.metadata or {}
            self._kw_docs = max(self._kw_docs, int(meta.get("kw_docs", 0)))
            self._kw_terms = max(self._kw_terms, int(meta.get("kw_terms", 0)))
            self._kw_persisted = self._kw_docs
            # Collections written before index_text_version existed are version 1.
            if int(meta.get("index_text_version", 1)) != INDEX_TEXT_VERSION:
                self._reindex_keywords()
        self._ready = True

    def _reindex_keywords(self) -> None:
        """Rewrite every point's sparse vector from its record's current ``index_text``.

        The keyword text of a record changed (records.INDEX_TEXT_VERSION), so collections written
        before keep stale keywords and would rank unlike SqliteBackend (which re-tokenizes its
        file once for the same reason). Dense vectors and payloads are left as they are. Safe to
        run twice (two processes opening at once): both write the same vectors.
        """
        counts: list[tuple[Any, dict[int, int], int]] = []
        for p in self._scan(None, payload=True):
            r = from_payload(p.payload or {})
            tf, n = term_counts(index_text(r))
            counts.append((p.id, tf, n + len(r.namespace)))  # as in upsert
        docs, terms = len(counts), sum(n for _, _, n in counts)
        avgdl = terms / docs if docs else 1.0
        for i in range(0, len(counts), UPSERT_CHUNK):
            self._client.update_vectors(self.collection, points=[
                qm.PointVectors(id=pid, vector={SPARSE: doc_sparse(tf, n, avgdl)})
                for pid, tf, n in counts[i : i + UPSERT_CHUNK]], wait=True)
        self._client.update_collection(self.collection, metadata={
            "kw_docs": docs, "kw_terms": terms, "index_text_version": INDEX_TEXT_VERSION})
        self._kw_docs = self._kw_persisted = docs
        self._kw_terms = terms
        self._idf_cache.clear()

    def _check_schema(self, info: qm.CollectionInfo) -> None:
        meta = info.config.metadata or {}
        vectors = info.config.params.vectors
        sparse = info.config.params.sparse_vectors or {}
        dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
        problems = []
        if meta.get("embedding_model") != self.embedding_model or meta.get("dim") != self.dim:
            problems.append(f"it was built with embedding model {meta.get('embedding_model')!r} "
                            f"(dim {meta.get('dim')})")
        if dense is None or dense.size != self.dim or dense.distance != qm.Distance.COSINE:
            problems.append(f"its dense vector is {dense!r}")
        if SPARSE not in sparse or sparse[SPARSE].modifier != qm.Modifier.IDF:
            problems.append(f"its sparse vectors are {sparse!r}")
        if problems:
            raise SchemaMismatch(
                f"Qdrant collection {self.collection!r} does not fit model {self.embedding_model!r} "
                f"(dim {self.dim}): {'; '.join(problems)}. Use another MEMORY_QDRANT__COLLECTION_PREFIX "
                "or migrate the data (memctl migrate)."
            )

    def _avgdl(self) -> float:
        return self._kw_terms / self._kw_docs if self._kw_docs else 1.0

    def _persist_kw_stats(self) -> None:
        # Persisting on every write would cost a collection update per upsert; the average
        # moves slowly, so refresh it when the corpus has grown by a tenth (and at close).
        grown = self._kw_docs - self._kw_persisted
        if grown and grown >= max(64, self._kw_persisted // 10):
            self._client.update_collection(
                self.collection, metadata={"kw_docs": self._kw_docs, "kw_terms": self._kw_terms})
            self._kw_persisted = self._kw_docs

    def _base_filter(self, namespaces: Sequence[Namespace] | None, flt: dict[str, Any] | None,
                     now: float | None) -> qm.Filter | None:
        must, must_not = filter_conditions(flt)
        if namespaces is not None:
            must.insert(0, namespace_condition(namespaces))
        if now is not None and not self._local:
            # Local mode evaluates payload filters in Python, point by point, and this nested
            # condition doubles the cost; every caller re-checks expiry in Python anyway.
            must.append(unexpired(now))
        if not must and not must_not:
            return None
        return qm.Filter(must=must or None, must_not=must_not or None)

    def _scan(self, flt: qm.Filter | None, *, payload: bool | list[str] = True,
              page: int = 1000) -> Iterator[qm.Record]:
        """Every point matching ``flt`` (id order), page by page."""
        offset: Any = None
        while True:
            points, offset = self._client.scroll(self.collection, scroll_filter=flt, limit=page,
                                                 offset=offset, with_payload=payload, with_vectors=False)
            yield from points
            if offset is None:
                return

    def _fts5_weights(self, sparse: qm.SparseVector) -> qm.SparseVector | None:
        """Query-term weights that turn Qdrant's IDF into FTS5's, so the scores are SQLite's BM25.

        Qdrant's IDF is ln(x + 1) and FTS5's is ln(x) (floored at 1e-6), with
        x = (N - df + 0.5) / (df + 0.5). The "+1" lifts frequent terms (a speaker's name in
        every turn) well above FTS5's near-zero weight and changes rankings, so each query
        term gets weight ln(x) / ln(x + 1). x comes from Qdrant itself: a one-term probe
        returns a point holding the term, and its score over its stored value is ln(x + 1).
        Terms no point holds are dropped (they match nothing). Weights are cached until this
        backend writes (and for a short while in server mode, where others write too).
        """
        now = time.monotonic()
        if self._idf_cache_until < now:
            self._idf_cache.clear()
            self._idf_cache_until = now + (math.inf if self._local else self.IDF_CACHE_S)
        todo = [t for t in sparse.indices if t not in self._idf_cache]
        if todo:
            probes = [qm.QueryRequest(query=qm.SparseVector(indices=[t], values=[1.0]), using=SPARSE, limit=1,
                                      with_payload=False, with_vector=[SPARSE]) for t in todo]
            for t, res in zip(todo, self._client.query_batch_points(self.collection, requests=probes),
                              strict=True):
                weight = 0.0
                if res.points:
                    p = res.points[0]
                    vec = p.vector[SPARSE] if isinstance(p.vector, dict) else None
                    value = dict(zip(vec.indices, vec.values, strict=True)).get(t) if vec else None
                    if value and p.score > 0:
                        idf_q = p.score / value
                        x = math.expm1(idf_q)
                        idf_fts = max(math.log(x), 1e-6) if x > 0 else 1e-6
                        weight = idf_fts / idf_q
                self._idf_cache[t] = weight
        kept = [(t, self._idf_cache[t]) for t in sparse.indices if self._idf_cache[t] > 0]
        if not kept:
            return None
        return qm.SparseVector(indices=[t for t, _ in kept], values=[w for _, w in kept])


def list_collections(client: QdrantClient, prefix: str) -> list[tuple[str, str, int]]:
    """(collection, embedding_model, dim) of every memory collection under ``prefix``."""
    out = []
    for c in client.get_collections().collections:
        if not c.name.startswith(prefix + "__"):
            continue
        meta = client.get_collection(c.name).config.metadata or {}
        if "embedding_model" in meta and "dim" in meta:
            out.append((c.name, str(meta["embedding_model"]), int(meta["dim"])))
    return out
