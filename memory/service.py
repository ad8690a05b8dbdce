"""``MemoryService``: the facade the Supervisor, the CLI and the evaluations use.

It validates input at the boundary, embeds, calls a backend and ranks with
:mod:`memory.scoring`. Policy (routing, dedupe/merge, TTL per type) builds on top of it.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from pydantic import ValidationError

from memory import scoring
from memory.backend import MemoryBackend
from memory.backends import open_backend
from memory.embeddings import Embedder, get_embedder
from memory.errors import InvalidContent, InvalidInput, NotFound
from memory.filters import validate_filter
from memory.lru import VectorLRU
from memory.namespace import NamespaceLike, parse_namespace, parse_namespaces
from memory.query import RerankWeights, merge_candidates, plan_query, rerank, window_filter
from memory.records import (
    MemoryMetadata,
    MemoryQuery,
    MemoryRecord,
    SearchHit,
    as_now,
    new_id,
)
from memory.settings import MemorySettings
from memory.text import is_blank

MAX_TTL_DAYS = 36_500  # a century: longer means "forever", which is the default anyway
# The most results one call returns: larger values only overflowed SQLite's 64-bit integers
# (OverflowError) or asked a backend for more than it could hold.
MAX_RESULTS = 1_000_000
MAX_SQL_INT = 2**62  # SQLite integers are 64-bit: a larger LIMIT / OFFSET raised OverflowError


def check_count(name: str, value: object, *, minimum: int = 0, maximum: int = MAX_RESULTS) -> int:
    """An integer argument such as ``limit`` / ``offset`` / ``top_k`` within ``[minimum, maximum]``.

    Raises:
        InvalidInput: naming the argument and the allowed range.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        what = "a positive integer" if minimum == 1 else f"an integer from {minimum}"
        raise InvalidInput(f"{name} must be {what} to {maximum}, got {value!r:.40}")
    return value


def check_threshold(name: str, value: object) -> float | None:
    """An optional score threshold (``min_score`` / ``min_sim``): None or a finite number.

    NaN compared False with every score and emptied the answer as if nothing matched; a string
    raised a bare TypeError deep in ranking.

    Raises:
        InvalidInput: naming the argument.
    """
    if value is None:
        return None
    # -inf is "no floor" (the retrieval evaluation ranks every candidate with it).
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not (math.isfinite(value) or value == -math.inf)):
        raise InvalidInput(f"{name} must be a finite number (-inf: no floor; None: the configured one), "
                           f"got {value!r:.40}")
    return float(value)


def _now(value: object) -> datetime:
    """An explicit ``now`` (datetime, ISO string or epoch seconds), or the wall clock."""
    return as_now(value)


def check_query_size(query: str, max_chars: int) -> None:
    """Refuse a query longer than the longest memory before any work on it (a 1M-character query
    spent 68 s in tokenising, BM25 and embedding)."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidContent(f"query is not valid Unicode text (unpaired surrogate at position {exc.start}); "
                             "it probably came from undecodable bytes") from None
    if len(query) > max_chars:
        raise InvalidContent(
            f"query has {len(query)} characters, more than max_content_chars={max_chars}; "
            "search with the question or a few keywords (or raise MEMORY_MAX_CONTENT_CHARS)"
        )


def check_content_size(content: object, max_chars: int) -> None:
    """Refuse oversized text before any work on it (PII redaction of 10 MB took 5–14 s before the
    length check ran). Only the size: :func:`clean_content` validates the rest afterwards."""
    if isinstance(content, str) and len(content) > max_chars and len(content.strip()) > max_chars:
        raise InvalidContent(
            f"content has {len(content.strip())} characters, more than max_content_chars={max_chars}; "
            "summarise or split it, or raise MEMORY_MAX_CONTENT_CHARS"
        )


def check_id(id: object) -> str:
    """A memory id as the caller gave it: a non-empty string that is valid Unicode text.

    Raises:
        InvalidInput: saying what an id looks like.
    """
    if not isinstance(id, str) or not id:
        raise InvalidInput(f"id must be a non-empty string, got {id!r:.60}; `memctl list --ns NS` shows the ids")
    try:
        id.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: SQLite and the audit log cannot store them
        raise InvalidInput(f"id {id!r:.60} is not valid Unicode text (unpaired surrogate); "
                           "it probably came from undecodable bytes") from None
    return id


def check_ids(ids: object) -> list[str]:
    """One id or a non-empty list of ids, each checked by :func:`check_id`."""
    if isinstance(ids, str):
        return [check_id(ids)]
    if not isinstance(ids, Sequence | set | frozenset) or isinstance(ids, bytes | bytearray):
        raise InvalidInput(f"pass an id string or a list of id strings, got {ids!r:.60}")
    out = [check_id(i) for i in ids]
    if not out:
        raise InvalidInput("no id given; pass at least one memory id")
    return out


def clean_content(content: object, max_chars: int) -> str:
    """Validate memory text: a non-empty, valid UTF-8 ``str`` of sane length.

    Raises:
        InvalidContent: saying what is wrong and what to pass instead.
    """
    if isinstance(content, bytes | bytearray):
        try:
            content = bytes(content).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidContent(
                f"content is not valid UTF-8 (bad byte at position {exc.start}); "
                "decode it with the right encoding first"
            ) from exc
    if not isinstance(content, str):
        raise InvalidContent(f"content must be text, got {type(content).__name__}")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates, e.g. from surrogateescape decoding
        raise InvalidContent(
            f"content is not valid Unicode text (unpaired surrogate at position {exc.start}); "
            "it probably came from undecodable bytes"
        ) from exc
    if "\x00" in content:
        raise InvalidContent("content contains NUL characters; strip them first")
    text = content.strip()
    if is_blank(text):  # empty, or nothing visible (zero-width, bidi marks)
        raise InvalidContent("content is empty; pass the text to remember")
    if len(text) > max_chars:
        raise InvalidContent(
            f"content has {len(text)} characters, more than max_content_chars={max_chars}; "
            "summarise or split it, or raise MEMORY_MAX_CONTENT_CHARS"
        )
    return text


MAX_TAGS = 64  # per memory, checked on writes (rows stored before still read back)
MAX_TAG_CHARS = 128


def coerce_metadata(metadata: MemoryMetadata | Mapping[str, Any] | None) -> MemoryMetadata:
    """Caller metadata (a record, a dict or None) as a :class:`MemoryMetadata`, the way every write
    path reads it (the Markdown import checks its bullets with it before writing anything).

    Raises:
        InvalidInput: metadata or its ``extra`` is not a dict, or a field has a bad value.
    """
    if metadata is None:
        return MemoryMetadata()
    if isinstance(metadata, MemoryMetadata):
        return metadata
    if not isinstance(metadata, Mapping):
        raise InvalidInput(f"metadata must be a dict, got {type(metadata).__name__}")
    known = set(MemoryMetadata.model_fields)
    # Unknown keys go to `extra` rather than failing, so callers can attach their own fields.
    data = {k: v for k, v in metadata.items() if k in known}
    raw_extra = data.pop("extra", None) or {}
    if not isinstance(raw_extra, Mapping):
        raise InvalidInput(f"metadata['extra'] must be a dict, got {type(raw_extra).__name__}")
    extra = dict(raw_extra)
    extra.update({k: v for k, v in metadata.items() if k not in known})
    tags = data.get("tags")
    # Checked here, on writes, not in MemoryMetadata: rows stored before must still read back.
    listed = (tags,) if isinstance(tags, str) else tags if isinstance(tags, list | tuple) else ()
    if any(isinstance(t, str) and is_blank(t) for t in listed):
        raise InvalidInput("invalid metadata: tags must not be empty or blank; drop the empty tag "
                           "(memctl add --tag TEXT)")
    # Bounded like source and agent: a model's tool call could attach 100,000 tags to one memory.
    if len(listed) > MAX_TAGS:
        raise InvalidInput(f"invalid metadata: {len(listed)} tags, at most {MAX_TAGS}; keep the few worth filtering by")
    long = next((t for t in listed if isinstance(t, str) and len(t) > MAX_TAG_CHARS), None)
    if long is not None:
        raise InvalidInput(f"invalid metadata: a tag of {len(long)} characters, at most {MAX_TAG_CHARS}; "
                           "a tag is a short label")
    try:
        return MemoryMetadata(**data, extra=extra)
    except ValidationError as exc:  # one line per problem, without pydantic's URL and input dump
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'metadata'}: {e['msg']}"
                             for e in exc.errors())
        raise InvalidInput(f"invalid metadata: {problems}") from exc
    except ValueError as exc:
        raise InvalidInput(f"invalid metadata: {exc}") from exc


@dataclass
class NewMemory:
    """One item for :meth:`MemoryService.write_many`."""

    content: str
    namespace: NamespaceLike
    metadata: MemoryMetadata | Mapping[str, Any] | None = None
    id: str | None = None
    created_at: datetime | None = None
    ttl_days: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class MemoryService:
    """Write, search, get, update and delete memories.

    Example:
        >>> from memory import MemoryService, MemorySettings
        >>> svc = MemoryService.from_settings(MemorySettings(path=":memory:"))
        >>> rec = svc.write("User prefers bar charts", "user_profile/u1", {"type": "user_profile"})
        >>> svc.search("which chart style?", "user_profile/u1")[0].record.id == rec.id
        True
        >>> svc.close()
    """

    def __init__(self, backend: MemoryBackend, embedder: Embedder, settings: MemorySettings | None = None):
        self.backend = backend
        self.embedder = embedder
        self.settings = settings or MemorySettings(path=":memory:")
        # Stored vectors the reranker's same-slot reading read, by id and update time (a memory's vector changes only
        # with its content, which moves updated_at): a warm search reads its head from here, not 50 SQL blobs
        # (~.6 ms). Bounded (4,096 x 2 KB); the lock because one service serves several threads.
        self._vectors_seen = VectorLRU(4096)
        self._vectors_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: MemorySettings | None = None, embedder: Embedder | None = None) -> MemoryService:
        settings = settings or MemorySettings.load()
        emb = embedder or get_embedder(
            settings.embedding.model,
            threads=settings.embedding.threads,
            batch_size=settings.embedding.batch_size,
            cache_dir=settings.embedding.cache_dir,
        )
        return cls(open_backend(settings, emb.name, emb.dim), emb, settings)

    # ------------------------------------------------------------------ writes
    def build_record(self, item: NewMemory, now: datetime) -> MemoryRecord:
        """Validate one item into a record (no I/O). Raises InvalidInput subclasses."""
        return self._build(item, now)

    def _build(self, item: NewMemory, now: datetime) -> MemoryRecord:
        text = clean_content(item.content, self.settings.max_content_chars)
        ns = parse_namespace(item.namespace)
        created = _now(item.created_at) if item.created_at is not None else now
        ttl = item.ttl_days if item.ttl_days is not None else self.settings.default_ttl_days
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)
                                or not 0 < ttl <= MAX_TTL_DAYS):
            raise InvalidInput(f"ttl_days must be a positive number of days, at most {MAX_TTL_DAYS}, got {ttl!r}; omit it to keep forever")
        try:
            return MemoryRecord(
                id=item.id or new_id(),
                namespace=ns,
                content=text,
                metadata=coerce_metadata(item.metadata),
                created_at=created,
                updated_at=created,
                expires_at=created + timedelta(days=ttl) if ttl is not None else None,
            )
        except InvalidInput:  # already says what is wrong (e.g. the metadata's field)
            raise
        except ValueError as exc:
            raise InvalidInput(f"invalid memory: {exc}") from exc

    def _check_ids_stay(self, records: Sequence[MemoryRecord]) -> None:
        """An explicit id may replace a memory of its own namespace only, never move another one.

        ``write(..., id=<an id of u1>)`` into ``user_profile/u12`` used to move u1's memory into
        u12. The message does not name the other namespace: it may be another user's.
        """
        if not records:
            return
        claimed: dict[str, tuple[str, ...]] = {}
        for r in records:
            if claimed.setdefault(r.id, r.namespace) != r.namespace:
                raise InvalidInput(f"id {r.id!r} is given twice, for two namespaces; give each memory its own id")
        for old in self.backend.get(list(claimed)):
            if old.namespace != claimed[old.id]:
                raise InvalidInput(
                    f"id {old.id!r} is already used by a memory in another namespace; nothing was stored. "
                    "Omit the id (a new one is generated) or choose another one"
                )

    def embed_records(self, records: Sequence[MemoryRecord], embedder: Embedder | None = None) -> np.ndarray:
        """One vector per record: its content, nudged towards its retrieval context if it has one.

        ``embedder`` replaces the service's own for this call (bulk import passes the same model's
        cached forward pass, :mod:`memory.use_bulk`).

        ``v = normalise(embed(content) + context_weight * embed(context))``. Embedding the
        concatenated text instead let a long previous turn drown the memory itself (zh/en set
        MRR .70 -> .49); a weighted sum keeps the content dominant (MRR .67) while LoCoMo still
        gains most of the context's recall (R@10 .68 -> .76 on the tuning conversations).
        """
        return self._embed_texts([r.content for r in records], [r.metadata.extra.get("context") for r in records],
                                 embedder)

    def _embed_texts(self, contents: Sequence[str], ctx: Sequence[object],
                     embedder: Embedder | None = None) -> np.ndarray:
        """:meth:`embed_records` on the two texts it reads (bulk import sends only these to its
        workers: pickling whole records cost ~20 us each way per memory)."""
        emb = embedder or self.embedder
        vecs = emb.embed_documents(list(contents))
        w = self.settings.context_weight
        idx = [i for i, c in enumerate(ctx) if isinstance(c, str) and c.strip()]
        if idx and w > 0:
            vecs = np.array(vecs, dtype=np.float32)
            vecs[idx] += w * emb.embed_documents([ctx[i] for i in idx])  # type: ignore[misc]
            vecs[idx] /= np.linalg.norm(vecs[idx], axis=1, keepdims=True)
        return vecs

    def write_many(self, items: Iterable[NewMemory], *, now: datetime | None = None,
                   batch_size: int | None = None, dedupe: bool = False, workers: int | None = None,
                   progress: Callable[[int, int], None] | None = None) -> list[MemoryRecord]:
        """Validate all items first, then embed and upsert; returns the records written.

        Without ``batch_size``: one transaction, all-or-nothing. With it (bulk loads): batches of
        that many, one transaction each, embedded in ``workers`` processes (default: one per
        core) ahead of the writes, ``progress(done, total)`` after each batch
        (:func:`memory.bulk.write_batches`). ``dedupe`` leaves out items whose namespace already
        holds the same content (whitespace-normalised), in the store or earlier in ``items``.
        """
        now = _now(now)
        items = list(items)
        records = [self._build(it, now) for it in items]
        # An explicit id must not move another namespace's memory (checked before any work).
        self._check_ids_stay([r for r, it in zip(records, items, strict=True) if it.id is not None])
        if dedupe and records:
            from memory.bulk import drop_duplicates

            records, _ = drop_duplicates(self, records)
        if not records:
            return []
        if batch_size is None:
            vectors = self.embed_records(records)
            self.backend.upsert(records, vectors)
        else:
            from memory.bulk import write_batches

            write_batches(self, records, batch_size=batch_size, workers=workers, progress=progress)
        return records

    def write(
        self,
        content: str,
        namespace: NamespaceLike,
        metadata: MemoryMetadata | Mapping[str, Any] | None = None,
        *,
        id: str | None = None,
        ttl_days: float | None = None,
        now: datetime | None = None,
    ) -> MemoryRecord:
        """Store one memory (replacing any memory with the same ``id``)."""
        return self.write_many(
            [NewMemory(content, namespace, metadata, id=id, created_at=now, ttl_days=ttl_days)], now=now
        )[0]

    def update(
        self,
        id: str,
        content: str | None = None,
        metadata: MemoryMetadata | Mapping[str, Any] | None = None,
        *,
        now: datetime | None = None,
    ) -> MemoryRecord:
        """Change a memory's content and/or metadata; keeps id and created_at.

        Raises:
            NotFound: no live memory has this id.
        """
        old = self.get(id)
        now = _now(now)
        text = clean_content(content, self.settings.max_content_chars) if content is not None else old.content
        meta = coerce_metadata(metadata) if metadata is not None else old.metadata
        new = old.model_copy(update={"content": text, "metadata": meta, "updated_at": now})
        vec = self.embed_records([new])
        self.backend.upsert([new], vec)
        return new

    def delete(self, ids: str | Sequence[str]) -> int:
        """Delete memories by id; returns how many existed."""
        return self.backend.delete(check_ids(ids))

    def delete_namespace(self, namespace: NamespaceLike, *, filter: Mapping[str, Any] | None = None) -> int:
        """Delete everything under a namespace prefix (optionally only what matches a filter)."""
        validate_filter(filter)
        return self.backend.delete(namespace=parse_namespace(namespace), filter=dict(filter) if filter else None)

    # ------------------------------------------------------------------ reads
    def get(self, id: str) -> MemoryRecord:
        """Raises NotFound when no live memory has this id."""
        found = self.backend.get([check_id(id)])
        if not found:
            raise NotFound(f"no memory with id {id!r}; `memctl list --ns NS` shows the ids")
        return found[0]

    def search(
        self,
        query: str,
        namespaces: NamespaceLike | Iterable[NamespaceLike],
        *,
        top_k: int | None = None,
        filter: Mapping[str, Any] | None = None,
        min_score: float | None = None,
        min_sim: float | None = None,
        now: datetime | None = None,
        use_reranker: bool | None = None,
    ) -> list[SearchHit]:
        """Hybrid search inside namespace prefixes; each hit explains its score.

        ``use_reranker``: None follows ``scoring.rerank``; False leaves the learned reranker out of this
        call (the question rules still apply), as the Supervisor's pre-node does for an agent's
        own memories (``policy.rerank_agent_memories``)."""
        if not isinstance(query, str) and query is not None:
            raise InvalidInput(f"query must be text, got {type(query).__name__}; decode bytes first")
        if query is None or is_blank(query):
            raise InvalidInput("query is empty; pass the question or keywords to search for")
        check_query_size(query, self.settings.max_content_chars)
        if use_reranker is not None and not isinstance(use_reranker, bool):  # "no" would be truthy
            raise InvalidInput(f"use_reranker must be True, False or None (follow scoring.rerank), got "
                               f"{use_reranker!r:.40}")
        cfg = self.settings.scoring
        k = check_count("top_k", cfg.top_k if top_k is None else top_k, minimum=1)
        min_score, min_sim = check_threshold("min_score", min_score), check_threshold("min_sim", min_sim)
        ns = tuple(parse_namespaces(namespaces))
        validate_filter(filter)
        flt = dict(filter) if filter else None
        now = _now(now)
        vec, cands = self._candidates(query, ns, flt, max(k, cfg.candidates), now)
        plan = plan_query(query, now)
        # A question naming a date also gets the best few memories written in that window.
        wflt = window_filter(plan, flt) if cfg.window_candidates else None
        if wflt is not None:
            cands = merge_candidates(cands, self.backend.query(
                MemoryQuery(namespaces=ns, vector=vec, text=query, filter=wflt,
                            limit=cfg.window_candidates, now=now)))
        hits = scoring.score_candidates(cands, now, cfg, query)
        # Dates, "when"/"now" and named speakers in the question re-rank the candidates (< 0.2 ms).
        hits = rerank(hits, plan, RerankWeights.from_scoring(cfg))
        # the learned reranker re-orders the best fused candidates (memory.rerank)
        if cfg.rerank if use_reranker is None else use_reranker:
            from memory.rerank import apply as learned_rerank

            hits = learned_rerank(hits, plan, {c.record.id: c.keyword_score for c in cands},
                                  raw_cos=lambda head: self._raw_cosines(query, vec, [h.record.id for h in head]),
                                  vectors=self._stored_vectors)
        return scoring.select(hits, k, cfg.min_score if min_score is None else min_score,
                              cfg.min_sim if min_sim is None else min_sim)

    def _candidates(self, query: str, ns: tuple[tuple[str, ...], ...], flt: dict[str, Any] | None, limit: int,
                    now: datetime) -> tuple[np.ndarray, list[Any]]:
        """(question vector, the backend's candidates): both channels' best ``limit`` (the tuning tools call
        this too, so a reranker is fitted on the candidates search sees)."""
        from memory.query_adapter import switch_applies

        cfg = self.settings.scoring
        adapted = switch_applies(cfg.query_adapter, query)
        vec = self._query_vector(query, adapted)
        cands = self.backend.query(MemoryQuery(namespaces=ns, vector=vec, text=query, filter=flt, limit=limit, now=now))
        if switch_applies(cfg.strip_speakers, query):  # the vector channel again, without the speakers' names it mentions
            from memory.query_adapter import without_speakers

            bare = without_speakers(query, {c.record.metadata.extra.get("speaker") for c in cands})
            if bare is not None:
                vec = self._query_vector(bare, adapted)
                cands = self.backend.query(MemoryQuery(namespaces=ns, vector=vec, text=query, filter=flt,
                                                       limit=limit, now=now))
        return vec, cands

    def _raw_cosines(self, query: str, vec: np.ndarray, ids: Sequence[str]) -> dict[str, float] | None:
        """Cosines of the question's own vector (no adapter, speakers kept) with the records ``ids``, when the dense
        channel searched with another vector ``vec`` (a switch applied); None when it did not (the reranker then
        reads the dense channel's cosines) or the backend cannot return stored vectors."""
        raw = self._query_vector(query, False)  # the embedder's query cache: no second encoding
        get_vectors = getattr(self.backend, "get_vectors", None)
        if np.array_equal(raw, vec) or not callable(get_vectors) or not ids:
            return None
        from memory.rerank import raw_cosines

        return raw_cosines(get_vectors(ids), ids, raw)

    def _stored_vectors(self, hits: Sequence[SearchHit]) -> np.ndarray | None:
        """The hits' stored vectors, row i for ``hits[i]`` (the reranker's same-slot reading); None when the backend
        cannot return them or one was deleted since the search read it (the reranker then reads "no pair")."""
        keys = [(h.record.id, h.record.updated_at) for h in hits]
        with self._vectors_lock:
            got = [self._vectors_seen.get(k) for k in keys]
        missing = [i for i, v in enumerate(got) if v is None]
        if missing:
            get_vectors = getattr(self.backend, "get_vectors", None)
            if not callable(get_vectors):
                return None
            try:
                fetched = get_vectors([hits[i].record.id for i in missing])
            except NotFound:
                return None
            with self._vectors_lock:
                for i, v in zip(missing, fetched, strict=True):
                    got[i] = self._vectors_seen.put(keys[i], v)
        return np.stack(got) if got else None

    def _query_vector(self, text: str, adapted: bool) -> np.ndarray:
        """The dense channel's question vector, through the learned query adapter when ``adapted``."""
        vec = self.embedder.embed_query(text.strip())
        if adapted:  # a per-dimension scale of the question vector
            from memory.query_adapter import adapt

            vec = adapt(vec, self.embedder.name)
        return vec

    def list(self, namespace: NamespaceLike, *, limit: int = 100, offset: int = 0,
             filter: Mapping[str, Any] | None = None) -> list[MemoryRecord]:
        """Current memories under a namespace prefix, newest first."""
        # Up to SQLite's integer range: callers page through everything with limit=10**9.
        check_count("limit", limit, maximum=MAX_SQL_INT)
        check_count("offset", offset, maximum=MAX_SQL_INT)
        validate_filter(filter)
        return self.backend.scroll(parse_namespace(namespace), filter=dict(filter) if filter else None,
                                   limit=limit, offset=offset)

    def count(self, namespace: NamespaceLike | None = None) -> int:
        return self.backend.count(parse_namespace(namespace) if namespace is not None else None)

    def stats(self) -> dict[str, Any]:
        base: dict[str, Any] = {"backend": self.settings.backend, "embedding_model": self.embedder.name,
                                "dim": self.embedder.dim}
        extra = getattr(self.backend, "stats", None)
        if callable(extra):
            base.update(extra())
        base["namespaces"] = {"/".join(ns): n for ns, n in self.backend.namespaces()}
        base["memories"] = self.backend.count()
        return base

    # ------------------------------------------------------------------ async twins
    async def awrite(self, *args: Any, **kwargs: Any) -> MemoryRecord:
        return await asyncio.to_thread(self.write, *args, **kwargs)

    async def asearch(self, *args: Any, **kwargs: Any) -> list[SearchHit]:
        return await asyncio.to_thread(self.search, *args, **kwargs)

    async def aget(self, id: str) -> MemoryRecord:
        return await asyncio.to_thread(self.get, id)

    async def aupdate(self, *args: Any, **kwargs: Any) -> MemoryRecord:
        return await asyncio.to_thread(self.update, *args, **kwargs)

    async def adelete(self, ids: str | Sequence[str]) -> int:
        return await asyncio.to_thread(self.delete, ids)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


