"""The Qdrant backend: same protocol and semantics as :class:`~memory.backends.sqlite.SqliteBackend`.

* One collection per embedding model: ``{prefix}__{slug(model)}-{hash}__{dim}``, so two models
  never share one. The collection's metadata names the model and dimension; opening a
  collection whose metadata or vector config disagrees raises :class:`SchemaMismatch`.
* Points: id ``uuid5(our string id)``; a dense vector ``"dense"`` (cosine) and a sparse vector
  ``"keywords"`` with the IDF modifier; the payload holds our id, the namespace (``ns``, its
  labels, and ``ns_prefixes`` = every '/'-joined ancestor, so a prefix filter is one exact
  keyword match and ``u1`` never matches ``u12``), content, metadata (as JSON for an exact round
  trip, plus indexed copies of ``type``/``source``/``agent``/``tags``/``extra``) and timestamps
  as epoch floats.
* Keywords: the same :func:`memory.text.tokenize` the SQLite backend feeds to FTS5. Each term
  becomes a sparse index (blake2b, 4 bytes); the value is BM25's term-frequency part with
  FTS5's constants (k1=1.2, b=0.75) and a running average document length kept in the
  collection metadata (an estimate: replaced and deleted documents are not subtracted).
  Qdrant multiplies the query side by its IDF, and per-term query weights convert that IDF
  into FTS5's (:meth:`QdrantBackend._fts5_weights`), so the scores are SQLite's BM25 up to the
  length estimate and both backends rank alike (tests/integration/test_congruence.py).
* Filters are translated into Qdrant conditions that select a *superset* of the matches, then
  :func:`memory.filters.matches` decides in Python, so semantics are identical to SQLite's.
* Errors from qdrant-client/httpx are translated: connection failures, timeouts, 5xx and 429
  become :class:`BackendUnavailable` (retried by :mod:`memory.backends.resilient`); 4xx and
  validation errors become :class:`InvalidInput` / :class:`MemoryBackendError` (never retried).

Local mode (``location=":memory:"`` or ``path=``) is for tests and small stores; a path is
locked by one process. Servers are reached with ``url=`` (+ ``api_key``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
import unicodedata
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from qdrant_client.local.qdrant_local import QdrantLocal

from memory.backend import AsyncMixin, check_query, check_upsert
from memory.errors import (
    BackendUnavailable,
    InvalidInput,
    MemoryBackendError,
    MemoryLayerError,
    NotFound,
    SchemaMismatch,
)
from memory.filters import matches, validate_filter
from memory.namespace import Namespace, ancestors, ns_key
from memory.records import (
    INDEX_TEXT_VERSION,
    MemoryMetadata,
    MemoryQuery,
    MemoryRecord,
    ScoredMemory,
    as_utc,
    index_text,
    utcnow,
)
from memory.settings import QdrantSettings
from memory.text import tokenize

DENSE = "dense"
SPARSE = "keywords"
SCHEMA_VERSION = 1
# FTS5's bm25() constants, so keyword scores match SqliteBackend's.
BM25_K1 = 1.2
BM25_B = 0.75
# Points per upsert request: keeps one request well under the server's 32 MB body limit.
UPSERT_CHUNK = 256
_ID_NAMESPACE = uuid.UUID("5b0f3a52-6f1e-4c1e-9a53-4d2f6c0b7a11")  # fixed forever: ids depend on it
_SAFE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


# ---------------------------------------------------------------------- pure helpers
def collection_name(prefix: str, embedding_model: str, dim: int) -> str:
    """``{prefix}__{slug}-{hash}__{dim}``: readable, and distinct for distinct models.

    The hash keeps "a/b" and "a-b" apart although they slug alike.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", embedding_model.lower()).strip("-")[:48] or "model"
    digest = hashlib.blake2b(embedding_model.encode(), digest_size=3).hexdigest()
    return f"{prefix}__{slug}-{digest}__{dim}"


def point_id(memory_id: str) -> str:
    """Qdrant accepts only uint64 or UUID point ids; ours are free strings, so map them stably."""
    return str(uuid.uuid5(_ID_NAMESPACE, memory_id))


def _fold(term: str) -> str:
    # FTS5's unicode61 tokenizer removes diacritics from Latin letters ("café" == "cafe");
    # do the same so both backends see the same terms.
    if term.isascii():
        return term
    return "".join(c for c in unicodedata.normalize("NFKD", term) if not unicodedata.combining(c))


def term_index(term: str) -> int:
    """A stable uint32 for a term (collisions are rare: ~1 pair per 100k distinct terms)."""
    return int.from_bytes(hashlib.blake2b(_fold(term).encode(), digest_size=4).digest(), "little")


def term_counts(text: str) -> tuple[dict[int, int], int]:
    """Term frequencies by sparse index, and the document length in terms."""
    terms = tokenize(text)
    return dict(Counter(term_index(t) for t in terms)), len(terms)


def doc_sparse(tf: dict[int, int], length: int, avgdl: float) -> qm.SparseVector:
    """BM25's per-document factor; Qdrant's IDF modifier supplies the other one at query time."""
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / max(avgdl, 1e-9))
    idx = sorted(tf)
    return qm.SparseVector(indices=idx, values=[tf[i] * (BM25_K1 + 1.0) / (tf[i] + norm) for i in idx])


def query_sparse(text: str | None) -> qm.SparseVector | None:
    """Distinct query terms with weight 1 (FTS5 ORs distinct terms), or None if there are none."""
    if not text:
        return None
    idx = sorted({term_index(t) for t in tokenize(text)})
    return qm.SparseVector(indices=idx, values=[1.0] * len(idx)) if idx else None


def _ts(dt: Any) -> float | None:
    return None if dt is None else as_utc(dt).timestamp()


def _payload(r: MemoryRecord) -> dict[str, Any]:
    m = r.metadata
    return {
        "id": r.id,
        "ns": ns_key(r.namespace),
        "ns_labels": list(r.namespace),
        "ns_prefixes": [ns_key(a) for a in ancestors(r.namespace)],
        "content": r.content,
        # The JSON string is what we read back (exact round trip); the fields below exist
        # only so that filters can be pushed down to Qdrant.
        "metadata": m.model_dump_json(),
        "type": m.type,
        "source": m.source,
        "agent": m.agent,
        "tags": list(m.tags),
        "extra": m.extra,
        "created_at": _ts(r.created_at),
        "updated_at": _ts(r.updated_at),
        "expires_at": _ts(r.expires_at),
    }


def _record(payload: dict[str, Any]) -> MemoryRecord:
    exp = payload.get("expires_at")
    return MemoryRecord.model_construct(
        id=payload["id"],
        namespace=tuple(payload["ns"].split("/")),
        content=payload["content"],
        metadata=MemoryMetadata.model_validate_json(payload["metadata"]),
        created_at=as_utc(payload["created_at"]),
        updated_at=as_utc(payload["updated_at"]),
        expires_at=None if exp is None else as_utc(exp),
    )


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def filter_conditions(flt: dict[str, Any] | None) -> tuple[list[qm.Condition], list[qm.Condition]]:
    """(must, must_not) conditions selecting a superset of what ``matches(record, flt)`` accepts.

    Only conditions whose Qdrant meaning contains the Python meaning are pushed down; the rest
    is left to :func:`memory.filters.matches`, which always runs afterwards.
    """
    must: list[qm.Condition] = []
    must_not: list[qm.Condition] = []
    for key, (op, val) in (flt or {}).items():
        if key in ("type", "source", "agent", "tags"):
            field = key
        elif key.startswith("extra.") and _SAFE_KEY.match(key[len("extra."):]):
            field = key  # nested payload path extra.<name>
        elif key in ("created_at", "updated_at"):
            field = key
        else:
            continue
        if key in ("created_at", "updated_at"):
            if op in ("$gt", "$gte", "$lt", "$lte"):
                ts = val.timestamp()
                # gt -> gte / lt -> lte: float rounding must never drop a true match.
                rng = qm.Range(gte=ts) if op in ("$gt", "$gte") else qm.Range(lte=ts)
                must.append(qm.FieldCondition(key=field, range=rng))
            continue
        if op == "$eq" and isinstance(val, str):
            must.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=val)))
        elif op in ("$ne", "$nin") and key.startswith("extra."):
            # An extra value may be a list: Python's ["a", "b"] != "a" holds, but Qdrant's
            # must_not would drop the point because one element matches. Leave it to Python.
            continue
        elif op == "$ne" and isinstance(val, str):
            must_not.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=val)))
        elif op == "$in" and _is_str_list(val) and val:
            must.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=val)))
        elif op == "$nin" and _is_str_list(val) and val:
            must_not.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=val)))
        elif (op in ("$gt", "$gte", "$lt", "$lte") and key.startswith("extra.")
              and isinstance(val, int | float) and not isinstance(val, bool)):
            # Python compares only numbers with numbers here (bools and strs never match).
            must.append(qm.FieldCondition(key=field, range=qm.Range(**{op[1:]: float(val)})))
    return must, must_not


def _namespace_condition(namespaces: Sequence[Namespace]) -> qm.Condition:
    return qm.FieldCondition(key="ns_prefixes", match=qm.MatchAny(any=[ns_key(n) for n in namespaces]))


def _unexpired(now: float) -> qm.Condition:
    return qm.Filter(should=[
        qm.IsNullCondition(is_null=qm.PayloadField(key="expires_at")),
        qm.FieldCondition(key="expires_at", range=qm.Range(gt=now)),
    ])


def _cosine(stored: np.ndarray, q: np.ndarray) -> float:
    # Qdrant keeps cosine-collection vectors normalised; normalise the query the same way.
    n = float(np.linalg.norm(q))
    return float(stored @ q) / n if n > 0 else 0.0


def _short(content: bytes | None) -> str:
    if not content:
        return ""
    try:
        return str(json.loads(content)["status"]["error"])[:300]
    except Exception:
        return content[:300].decode("utf-8", "replace")


class QdrantBackend(AsyncMixin):
    """Memories in a Qdrant collection (server, or local in-process mode).

    Example:
        >>> import numpy as np
        >>> from memory.backends.qdrant import QdrantBackend
        >>> from memory.records import MemoryRecord
        >>> b = QdrantBackend(location=":memory:", embedding_model="demo", dim=2)
        >>> b.upsert([MemoryRecord(id="m1", namespace="user_profile/u1", content="likes tea")],
        ...          np.array([[1.0, 0.0]], dtype=np.float32))
        >>> b.get(["m1"])[0].content
        'likes tea'
        >>> b.close()

    Args:
        client: an existing client (the caller keeps ownership); else one is built from
            ``url``/``api_key``, ``path`` or ``location``.
        connect: check or create the collection now. ``False`` defers that to the first
            call, so a backend can be built while the server is down (the resilient wrapper
            relies on this).
    """

    supports_keyword = True

    def __init__(
        self,
        client: QdrantClient | None = None,
        *,
        embedding_model: str,
        dim: int,
        url: str | None = None,
        api_key: str | None = None,
        path: str | Path | None = None,
        location: str | None = None,
        collection_prefix: str = "memories",
        timeout_s: float = 5.0,
        connect: bool = True,
    ):
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        self.embedding_model = embedding_model
        self.dim = dim
        self.collection = collection_name(collection_prefix, embedding_model, dim)
        self._lock = threading.RLock()
        self._closed = False
        self._ready = False
        self._owns_client = client is None
        if client is None:
            targets = [t for t in (url, path, location) if t]
            if len(targets) > 1:
                raise InvalidInput("give only one of url / path / location")
            if path:
                Path(path).expanduser().mkdir(parents=True, exist_ok=True)
            try:
                if url:
                    # check_compatibility would fire a request at construction; we connect lazily.
                    client = QdrantClient(url=url, api_key=api_key, timeout=math.ceil(timeout_s),
                                          check_compatibility=False)
                elif path:
                    # Worker threads (the async twins) use the client too: local mode's SQLite
                    # connection must allow that; our lock serialises the calls.
                    client = QdrantClient(path=str(Path(path).expanduser()),
                                          force_disable_check_same_thread=True)
                else:
                    client = QdrantClient(location=location or ":memory:")
            except RuntimeError as exc:  # path already locked by another client
                raise BackendUnavailable(
                    f"Qdrant local storage {str(path)!r} is in use by another process or client: {exc}. "
                    "Local mode is single-process; use a Qdrant server (MEMORY_QDRANT__URL) to share."
                ) from exc
        self._client = client
        self._local = isinstance(getattr(client, "_client", None), QdrantLocal)
        self._target = url or (str(path) if path else None) or location or "client"
        # BM25 length normalisation needs the average document length (see doc_sparse).
        self._kw_docs = 0
        self._kw_terms = 0
        self._kw_persisted = 0
        self._idf_cache: dict[int, float] = {}
        self._idf_cache_until = 0.0
        if connect:
            try:
                self._ensure()
            except BaseException:
                self.close()
                raise

    @classmethod
    def from_settings(cls, qs: QdrantSettings, *, embedding_model: str, dim: int,
                      connect: bool = True) -> QdrantBackend:
        """Build from :class:`~memory.settings.QdrantSettings`; local ``:memory:`` when nothing is set."""
        return cls(
            embedding_model=embedding_model, dim=dim, url=qs.url,
            api_key=qs.api_key.get_secret_value() if qs.api_key else None,
            path=qs.path, location=qs.location if (qs.location or qs.url or qs.path) else ":memory:",
            collection_prefix=qs.collection_prefix, timeout_s=qs.timeout_s, connect=connect,
        )

    # ------------------------------------------------------------------ plumbing
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
            detail = _short(exc.content)
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
            r = _record(p.payload or {})
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
            must.insert(0, _namespace_condition(namespaces))
        if now is not None and not self._local:
            # Local mode evaluates payload filters in Python, point by point, and this nested
            # condition doubles the cost; every caller re-checks expiry in Python anyway.
            must.append(_unexpired(now))
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

    # ------------------------------------------------------------------ primitives
    def upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        # Validated before anything is written (a queued write must be one the primary accepts).
        records, vecs = check_upsert(records, vectors, dim=self.dim, model=self.embedding_model)
        if not records:
            return
        with self._op("upsert"):
            # FTS5's bm25() measures a row's length over all its columns, and SqliteBackend's
            # rows hold one hashed term per namespace ancestor besides the content terms; count
            # those too so the length normalisation (and the scores) come out the same.
            counts = [(tf, n + len(r.namespace))
                      for r, (tf, n) in zip(records, map(term_counts, (index_text(r) for r in records)), strict=True)]
            docs = self._kw_docs + len(records)
            terms = self._kw_terms + sum(n for _, n in counts)
            avgdl = terms / docs  # includes this batch, so the first batch is normalised too
            points = [
                qm.PointStruct(
                    id=point_id(r.id),
                    vector={DENSE: v.tolist(), SPARSE: doc_sparse(tf, n, avgdl)},
                    payload=_payload(r),
                )
                for r, v, (tf, n) in zip(records, vecs, counts, strict=True)
            ]
            # Not atomic across chunks (Qdrant has no multi-request transaction); a failed
            # call is safe to repeat because upserts are idempotent by id.
            for i in range(0, len(points), UPSERT_CHUNK):
                self._client.upsert(self.collection, points=points[i : i + UPSERT_CHUNK], wait=True)
            self._kw_docs, self._kw_terms = docs, terms
            self._idf_cache.clear()
            self._persist_kw_stats()

    def get(self, ids: Sequence[str]) -> list[MemoryRecord]:
        ids = list(ids)
        if not ids:
            return []
        now = utcnow()
        with self._op("get"):
            found: dict[str, MemoryRecord] = {}
            uniq = list(dict.fromkeys(ids))
            for i in range(0, len(uniq), 1000):
                for p in self._client.retrieve(self.collection, ids=[point_id(x) for x in uniq[i : i + 1000]],
                                               with_payload=True, with_vectors=False):
                    rec = _record(p.payload or {})
                    if not rec.is_expired(now):
                        found[rec.id] = rec
        return [found[i] for i in ids if i in found]

    def get_vectors(self, ids: Sequence[str]) -> np.ndarray:
        """Stored vectors of ``ids`` (expired or not), row i for ids[i]; for migrations.

        Qdrant normalises vectors of a cosine collection on insert, so these are unit length.

        Raises:
            NotFound: some id is not stored.
        """
        ids = list(ids)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        if not ids:
            return out
        with self._op("get_vectors"):
            by_pid: dict[str, np.ndarray] = {}
            uniq = list(dict.fromkeys(ids))
            for i in range(0, len(uniq), 500):
                for p in self._client.retrieve(self.collection, ids=[point_id(x) for x in uniq[i : i + 500]],
                                               with_payload=False, with_vectors=[DENSE]):
                    vec = p.vector[DENSE] if isinstance(p.vector, dict) else p.vector
                    by_pid[str(p.id)] = np.asarray(vec, dtype=np.float32)
        missing = [x for x in ids if point_id(x) not in by_pid]
        if missing:
            raise NotFound(f"no stored vector for ids {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        for row, x in enumerate(ids):
            out[row] = by_pid[point_id(x)]
        return out

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

    # Keyword matches read per query (SQLite scores every match in memory): ids and scores only, so
    # vector candidates get their BM25 score from the same answer (no second query).
    KEYWORD_DEPTH = 1000
    IDF_CACHE_S = 30.0

    def query(self, q: MemoryQuery) -> list[ScoredMemory]:
        flt, qvec = check_query(q, dim=self.dim, model=self.embedding_model)
        if q.limit <= 0:
            return []
        sparse = query_sparse(q.text)
        now = q.now
        base = self._base_filter(q.namespaces, flt, now.timestamp())
        records: dict[str, MemoryRecord] = {}  # point id -> record
        vec_of: dict[str, float] = {}  # cosine of keyword-only candidates, computed here
        with self._op("query"):
            if sparse is not None:
                sparse = self._fts5_weights(sparse)
            fetch = q.limit
            while True:
                reqs: list[qm.QueryRequest] = []
                if qvec is not None:
                    reqs.append(qm.QueryRequest(query=qvec.tolist(), using=DENSE, filter=base,
                                                limit=fetch, with_payload=True))
                if sparse is not None:
                    reqs.append(qm.QueryRequest(query=sparse, using=SPARSE, filter=base,
                                                limit=max(fetch, self.KEYWORD_DEPTH), with_payload=False))
                res = self._client.query_batch_points(self.collection, requests=reqs) if reqs else []
                vec_hits = [(str(p.id), p.score) for p in res[0].points] if qvec is not None else []
                for p in res[0].points if qvec is not None else []:
                    records.setdefault(str(p.id), _record(p.payload or {}))
                # A point sharing no term with the query is no keyword match (as in FTS5).
                kw_all = [(str(p.id), p.score) for p in res[-1].points if p.score > 0] if sparse is not None else []
                kw_hits = kw_all[:fetch]
                missing = [pid for pid, _ in kw_hits if pid not in records]
                if missing:
                    # Their payloads, and their dense vectors so they get a vector score too.
                    for p in self._client.retrieve(self.collection, ids=missing, with_payload=True,
                                                   with_vectors=[DENSE] if qvec is not None else False):
                        pid = str(p.id)
                        records[pid] = _record(p.payload or {})
                        if qvec is not None and p.vector:
                            v = p.vector[DENSE] if isinstance(p.vector, dict) else p.vector
                            vec_of[pid] = _cosine(np.asarray(v, dtype=np.float32), qvec)

                def keep(pid: str) -> bool:
                    rec = records.get(pid)
                    return rec is not None and not rec.is_expired(now) and matches(rec, flt)

                vec_kept = [(pid, sc) for pid, sc in vec_hits if keep(pid)][: q.limit]
                kw_kept = [(pid, sc) for pid, sc in kw_hits if keep(pid)][: q.limit]
                vec_done = len(vec_kept) >= q.limit or len(vec_hits) < fetch
                kw_done = len(kw_kept) >= q.limit or len(kw_all) <= fetch
                if vec_done and kw_done:
                    break
                fetch *= 4  # filters or expiry dropped candidates: look further
        vec_score = {**vec_of, **dict(vec_kept)}
        kw_score = dict(kw_all)
        out = []
        for pid in dict.fromkeys([p for p, _ in vec_kept] + [p for p, _ in kw_kept]):
            out.append(ScoredMemory(
                record=records[pid],
                vector_score=vec_score.get(pid, 0.0) if qvec is not None else None,
                keyword_score=kw_score.get(pid, 0.0) if sparse is not None else (0.0 if q.text else None),
            ))
        return out

    def _matching_ids(self, namespace: Namespace | None, flt: dict[str, Any] | None,
                      include_expired: bool) -> list[str]:
        now = utcnow()
        base = self._base_filter(None if namespace is None else [namespace], flt,
                                 None if include_expired else now.timestamp())
        if not flt and (include_expired or not self._local):
            return [str(p.id) for p in self._scan(base, payload=False)]
        out = []
        for p in self._scan(base):
            rec = _record(p.payload or {})
            if matches(rec, flt) and (include_expired or not rec.is_expired(now)):
                out.append(str(p.id))
        return out

    def delete(self, ids: Sequence[str] | None = None, *, namespace: Namespace | None = None,
               filter: dict[str, Any] | None = None, include_expired: bool = True) -> int:
        flt = validate_filter(filter)
        if ids is None and namespace is None and not flt:
            raise InvalidInput("delete needs ids, a namespace or a filter; refusing to delete everything")
        with self._op("delete"):
            if ids is not None:
                uniq = list(dict.fromkeys(point_id(x) for x in ids))
                pids = []
                for i in range(0, len(uniq), 1000):
                    pids += [str(p.id) for p in self._client.retrieve(
                        self.collection, ids=uniq[i : i + 1000], with_payload=False, with_vectors=False)]
            else:
                pids = self._matching_ids(namespace, flt, include_expired)
            self._idf_cache.clear()
            for i in range(0, len(pids), 1000):
                self._client.delete(self.collection, points_selector=qm.PointIdsList(points=pids[i : i + 1000]),
                                    wait=True)
            return len(pids)

    def scroll(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
               limit: int = 100, offset: int = 0, include_expired: bool = False) -> list[MemoryRecord]:
        flt = validate_filter(filter)
        if limit < 0 or offset < 0:
            raise InvalidInput("limit and offset must be >= 0")
        if limit == 0:
            return []
        now = utcnow()
        base = self._base_filter(None if namespace is None else [namespace], flt,
                                 None if include_expired else now.timestamp())
        want = offset + limit
        n = want + 1
        order = qm.OrderBy(key="updated_at", direction=qm.Direction.DESC)
        with self._op("scroll"):
            while True:
                points, _ = self._client.scroll(self.collection, scroll_filter=base, limit=n,
                                                order_by=order, with_payload=True, with_vectors=False)
                recs = [r for r in (_record(p.payload or {}) for p in points)
                        if matches(r, flt) and (include_expired or not r.is_expired(now))]
                if len(points) < n:
                    break
                # Stop once we hold `want` matches and every point tied with the last of them
                # (ties are then ordered the same way on every page).
                lowest = points[-1].payload["updated_at"]  # type: ignore[index]
                if len(recs) >= want and lowest < recs[want - 1].updated_at.timestamp():
                    break
                n *= 4
        recs.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
        return recs[offset:want]

    def count(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
              include_expired: bool = False) -> int:
        flt = validate_filter(filter)
        with self._op("count"):
            if flt or (self._local and not include_expired):
                return len(self._matching_ids(namespace, flt, include_expired))
            base = self._base_filter(None if namespace is None else [namespace], None,
                                     None if include_expired else utcnow().timestamp())
            return int(self._client.count(self.collection, count_filter=base, exact=True).count)

    def namespaces(self) -> list[tuple[Namespace, int]]:
        limit = 10_000
        with self._op("namespaces"):
            hits = self._client.facet(self.collection, key="ns", limit=limit, exact=True).hits
            if len(hits) < limit:
                counts = {str(h.value): int(h.count) for h in hits}
            else:  # more namespaces than one facet answer holds
                counts = dict(Counter(str((p.payload or {})["ns"]) for p in self._scan(None, payload=["ns"])))
        return [(tuple(ns.split("/")), n) for ns, n in sorted(counts.items())]

    def iter_records(self, batch: int = 500) -> Iterator[list[MemoryRecord]]:
        """Every stored record (expired ones too), in pages, by a stable cursor (migrations).

        Unlike ``scroll(offset=...)``, which re-reads everything before the offset, this reads
        each point once.
        """
        offset: Any = None
        while True:
            with self._op("iter_records"):
                points, offset = self._client.scroll(self.collection, limit=batch, offset=offset,
                                                     with_payload=True, with_vectors=False)
            if points:
                yield [_record(p.payload or {}) for p in points]
            if offset is None:
                return

    def stats(self) -> dict[str, Any]:
        """Sizes for ``memctl stats``."""
        with self._op("stats"):
            n = int(self._client.count(self.collection, exact=True).count)
        return {"backend": "qdrant", "target": self._target, "collection": self.collection,
                "embedding_model": self.embedding_model, "dim": self.dim, "rows": n,
                "avg_doc_terms": round(self._avgdl(), 2)}

    def drop(self) -> None:
        """Delete this model's collection (tests and migrations); the backend stays usable."""
        with self._lock, self._translate("drop"):
            self._client.delete_collection(self.collection)
            self._ready = False
            self._kw_docs = self._kw_terms = self._kw_persisted = 0
            self._idf_cache.clear()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._ready and self._kw_docs != self._kw_persisted:
                    self._client.update_collection(
                        self.collection, metadata={"kw_docs": self._kw_docs, "kw_terms": self._kw_terms})
            except Exception:  # best effort: the statistic is an estimate anyway
                pass
            if self._owns_client:
                try:
                    self._client.close()
                except Exception:
                    pass

    def __enter__(self) -> QdrantBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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

__all__ = ["QdrantBackend", "collection_name", "list_collections", "point_id", "query_sparse", "term_counts"]
