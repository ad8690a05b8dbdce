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
* Keywords: the same :func:`memory.text.keyword_terms` the SQLite backend feeds to FTS5. Each term
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

import math
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.local.qdrant_local import QdrantLocal

from memory.backend import AsyncMixin, check_query, check_upsert
from memory.backends.qdrant_collection import QdrantCollectionMixin, list_collections
from memory.backends.qdrant_points import (
    DENSE,
    SPARSE,
    UPSERT_CHUNK,
    collection_name,
    cosine,
    doc_sparse,
    from_payload,
    point_id,
    query_sparse,
    term_counts,
    to_payload,
)
from memory.errors import BackendUnavailable, InvalidConfig, InvalidInput, NotFound, StoreReadOnly
from memory.filters import matches, validate_filter
from memory.namespace import Namespace
from memory.records import MemoryQuery, MemoryRecord, ScoredMemory, index_text, utcnow
from memory.settings import QdrantSettings


def _local_dir(path: Path) -> None:
    """Create local mode's storage directory; a path that is a file, or cannot be created, is
    refused with what to do (it raised FileExistsError / PermissionError from mkdir before)."""
    if path.exists() and not path.is_dir():
        raise InvalidConfig(f"Qdrant local path {str(path)!r} is a file, not a directory; point "
                            "MEMORY_QDRANT__PATH at a directory (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreReadOnly(f"cannot create the Qdrant local directory {str(path)!r}: {exc.strerror or exc}; "
                            "point MEMORY_QDRANT__PATH at a writable directory") from exc


class QdrantBackend(QdrantCollectionMixin, AsyncMixin):
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
                _local_dir(Path(path).expanduser())
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
            except ValueError as exc:  # a URL qdrant-client cannot use ("myhost:6333": scheme "myhost")
                raise InvalidConfig(f"Qdrant URL {url!r} cannot be used: {exc}; set MEMORY_QDRANT__URL to the "
                                    "server's address, like http://HOST:6333") from exc
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
                    payload=to_payload(r),
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
                    rec = from_payload(p.payload or {})
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

    # Keyword matches read per query (SQLite scores every match in memory): ids and scores only, so
    # vector candidates get their BM25 score from the same answer (no second query).
    KEYWORD_DEPTH = 1000

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
                    records.setdefault(str(p.id), from_payload(p.payload or {}))
                # A point sharing no term with the query is no keyword match (as in FTS5).
                kw_all = [(str(p.id), p.score) for p in res[-1].points if p.score > 0] if sparse is not None else []
                kw_hits = kw_all[:fetch]
                missing = [pid for pid, _ in kw_hits if pid not in records]
                if missing:
                    # Their payloads, and their dense vectors so they get a vector score too.
                    for p in self._client.retrieve(self.collection, ids=missing, with_payload=True,
                                                   with_vectors=[DENSE] if qvec is not None else False):
                        pid = str(p.id)
                        records[pid] = from_payload(p.payload or {})
                        if qvec is not None and p.vector:
                            v = p.vector[DENSE] if isinstance(p.vector, dict) else p.vector
                            vec_of[pid] = cosine(np.asarray(v, dtype=np.float32), qvec)

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
            rec = from_payload(p.payload or {})
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
                recs = [r for r in (from_payload(p.payload or {}) for p in points)
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
                yield [from_payload(p.payload or {}) for p in points]
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


# The point helpers stay importable from here, as before the split.
__all__ = ["DENSE", "SPARSE", "QdrantBackend", "collection_name", "list_collections", "point_id", "query_sparse",
           "term_counts"]
