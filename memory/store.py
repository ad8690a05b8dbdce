"""A LangGraph ``BaseStore`` over :class:`~memory.service.MemoryService`.

``graph.compile(store=MemoryStore(path="memory.sqlite"))``, ``get_store()``, ``runtime.store`` and
langmem's memory tools then read and write our backends (SQLite or Qdrant). Semantics follow
LangGraph's own stores (``InMemoryStore``, ``SqliteStore``) and their test suites: put is an
upsert; ``batch`` runs its reads first and its writes last, puts return None; search without a
query lists newest first; value filters with ``$eq/$ne/$gt/$gte/$lt/$lte`` and dotted keys;
``list_namespaces`` with ``*`` wildcards; TTL in minutes with refresh on read; ``index`` as in
``IndexConfig`` (``embed``, ``dims``, ``fields`` / ``text_fields``, see :mod:`memory.store_index`).

Search with a query: ``SearchItem.score`` is the cosine similarity of the query and the item (the
best of its index texts: each path is embedded on its own and max-pooled), as in LangGraph. The
order is our hybrid ranking (vector + BM25 + recency + type boost + query rules), whose score and
breakdown each result carries as ``memory_score`` / ``breakdown`` (:class:`MemorySearchItem`).

One store, one memory: everything in the file is visible. Items put through the store are records
with ``metadata.source == "langgraph_store"`` (value and key in ``metadata.extra``, id = sha1 of
``[namespace, key]``); memories the Supervisor, the CLI or the Python API wrote appear under their
own namespaces with key = memory id and value ``{"content", "type", "source", ...}``
(:func:`memory.store_items.item_value`), so langmem's tools and the server's store API see them,
and the Supervisor's searches see the store's items.

What still differs from ``SqliteStore`` is listed in the README ("LangGraph store").
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
)

from memory.errors import InvalidInput
from memory.namespace import Namespace
from memory.records import MEMORY_TYPES, MemoryMetadata, MemoryRecord, utcnow
from memory.service import MAX_RESULTS, MemoryService, NewMemory, check_count, check_query_size
from memory.settings import MemorySettings
from memory.store_index import (EmbedderEmbeddings, check_dims, check_index_keys, check_ttl_config, resolve_embedder,
                                resolve_fields)
from memory.store_items import (
    SOURCE,
    UNINDEXED,
    MemorySearchItem,
    StoreNamespaceError,
    check_filter,
    check_namespace,
    check_pattern,
    is_item,
    item_id,
    item_text,
    item_texts,
    json_value,
    pack_vectors,
    ttl_minutes,
    value_matches,
)
from memory.store_reads import StoreReads
from memory.store_support import StoreSupport


class _Put(NamedTuple):
    """A validated PutOp: everything checked before the batch touches the store.

    (A NamedTuple, not a dataclass: LangGraph Server loads this file by path, outside
    ``sys.modules``, where ``@dataclass`` cannot resolve its own module.)
    """

    ns: Namespace
    key: str
    value: dict[str, Any] | None  # None: delete
    texts: list[str]
    ttl: float | None


def _check_key(key: object) -> str:
    """An item key as text (non-strings are stringified, as before); lone surrogates are refused:
    SQLite and the audit log cannot store them (they raised UnicodeEncodeError)."""
    text = str(key)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"key {text!r:.60} is not valid Unicode text (unpaired surrogate); "
                           "it probably came from undecodable bytes") from None
    return text


class MemoryStore(StoreReads, StoreSupport, BaseStore):
    """LangGraph ``BaseStore`` over our memory service (SQLite or Qdrant, hybrid search).

    Args:
        service: an open :class:`MemoryService` to use (not closed by the store). Omit it to
            open one from ``path`` / ``settings``.
        path: the SQLite file (``":memory:"`` for a throwaway store); default: ``settings.path``.
        index: LangGraph ``IndexConfig``: ``embed`` (Embeddings, function, ``"provider:model"``
            or a packaged model name; default: ``settings.embedding.model``), ``dims``,
            ``fields`` / ``text_fields`` (default ``["$"]``).
        ttl: LangGraph ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
            ``sweep_interval_minutes``).
        settings: :class:`MemorySettings` (default: ``MemorySettings.load()``: ``MEMORY_*``
            variables, ``MEMORY_CONFIG``).
        memory_type: ``metadata.type`` of put items; default: the namespace's first label when it
            names a memory type (``("user_profile", "u1")``), else ``"note"``.
        min_sim: drop query hits less relevant than this; 0 ranks every item, like LangGraph.
        owns_service: close the service with the store (default: when the store opened it).

    Example:
        >>> from memory.store import MemoryStore
        >>> store = MemoryStore(path=":memory:")
        >>> store.put(("memories", "u1"), "tea", {"content": "User drinks green tea every morning"})
        >>> store.put(("memories", "u1"), "city", {"content": "User lives in Hangzhou"})
        >>> store.get(("memories", "u1"), "tea").value
        {'content': 'User drinks green tea every morning'}
        >>> hit = store.search(("memories",), query="what does the user drink?", limit=1)[0]
        >>> hit.key, 0 < hit.score <= 1
        ('tea', True)
        >>> store.list_namespaces()
        [('memories', 'u1')]
        >>> store.close()
    """

    supports_ttl = True

    def __init__(
        self,
        service: MemoryService | None = None,
        *,
        path: str | None = None,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        settings: MemorySettings | None = None,
        memory_type: str | None = None,
        min_sim: float = 0.0,
        owns_service: bool | None = None,
    ):
        if index is not None and not isinstance(index, Mapping):
            raise ValueError(f"index must be a dict like {{'dims': 512, 'fields': ['content']}}, got {index!r:.60}")
        cfg: dict[str, Any] = dict(index or {})
        check_index_keys(cfg)  # a misspelt key would be ignored: {"feilds": [...]} embeds the whole value
        check_ttl_config(ttl)
        fields = resolve_fields(cfg)
        if service is not None:
            if path is not None or settings is not None:
                raise ValueError("pass either an open service or path/settings, not both")
            if cfg.get("embed") is not None:
                raise ValueError("the service embeds with its own model; pass index['embed'] without a service")
            self.embeddings: Any = EmbedderEmbeddings(service.embedder)
        else:
            if settings is None:
                settings = MemorySettings(path=path) if path is not None else MemorySettings.load()
            elif path is not None:
                settings = settings.model_copy(update={"path": path})
            emb, self.embeddings = resolve_embedder(cfg, settings)
            check_dims(emb, cfg.get("dims"))
            service = MemoryService.from_settings(settings, embedder=emb)
            owns_service = True if owns_service is None else owns_service
        check_dims(service.embedder, cfg.get("dims"))
        self.service = service
        self.index_config: IndexConfig = {**cfg, "dims": service.embedder.dim, "fields": fields}  # type: ignore[typeddict-item]
        self._fields = fields
        self.ttl_config = ttl
        if memory_type is not None:
            MemoryMetadata(type=memory_type)  # validate early
        self.memory_type = memory_type
        if isinstance(min_sim, bool) or not isinstance(min_sim, int | float) or not 0.0 <= min_sim <= 1.0:
            raise ValueError(f"min_sim must be in [0, 1], got {min_sim!r}")
        self.min_sim = float(min_sim)
        self._owns = bool(owns_service)
        self._lock = threading.RLock()
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._audit: Any = None  # opened by for_actor (denials are audited)

    @classmethod
    def from_settings(cls, settings: MemorySettings | None = None, *, embedder: Any = None,
                      **kwargs: Any) -> MemoryStore:
        """Open the service ``settings`` describe (default ``MemorySettings.load()``); the store owns it."""
        service = MemoryService.from_settings(settings or MemorySettings.load(), embedder=embedder)
        return cls(service, owns_service=True, **kwargs)

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: str, *, index: IndexConfig | None = None,
                         ttl: TTLConfig | None = None, **kwargs: Any) -> Iterator[MemoryStore]:
        """Like ``SqliteStore.from_conn_string``: a store on that SQLite file, closed on exit.

        Example:
            >>> with MemoryStore.from_conn_string(":memory:") as store:
            ...     store.setup()
            ...     store.put(("docs",), "a", {"text": "hello"})
            ...     store.get(("docs",), "a").value
            {'text': 'hello'}
        """
        store = cls(path=conn_string, index=index, ttl=ttl, **kwargs)
        try:
            yield store
        finally:
            store.close()

    def setup(self) -> None:
        """For ``SqliteStore`` parity: the file's tables and migrations are created when the store
        opens, so this only checks it is usable. Idempotent."""
        self.service.backend.count()

    async def asetup(self) -> None:
        await asyncio.to_thread(self.setup)

    # ------------------------------------------------------------------ batch
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ops like LangGraph's stores: every op is validated first (one bad op rejects the
        batch before anything runs), reads see the store as it was before the batch, writes are
        applied last (the last put of a key wins) and return None."""
        ops = list(ops)
        checked = [self._check(op) for op in ops]
        results: list[Result] = [None] * len(ops)
        puts: list[_Put] = []
        with self._lock:
            for i, (op, c) in enumerate(zip(ops, checked, strict=True)):
                if isinstance(op, PutOp):
                    puts.append(c)
                elif isinstance(op, GetOp):
                    results[i] = self._get(c, op)
                elif isinstance(op, SearchOp):
                    results[i] = self._search(op, c)
                else:
                    results[i] = self._list_namespaces(op)
            if puts:
                self._write(puts)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _check(self, op: Any) -> Any:
        if isinstance(op, GetOp):
            _check_key(op.key)
            return check_namespace(op.namespace)
        if isinstance(op, PutOp):
            return self._check_put(op)
        if isinstance(op, SearchOp):
            prefix = check_namespace(op.namespace_prefix, allow_empty=True)
            flt = check_filter(op.filter)
            for name in ("limit", "offset"):
                check_count(f"search {name}", getattr(op, name), maximum=MAX_RESULTS)
            if op.query is not None and not isinstance(op.query, str):
                raise InvalidInput(f"query must be a string, got {type(op.query).__name__}")
            if op.query:
                check_query_size(op.query, self.service.settings.max_content_chars)
            return prefix, flt
        if isinstance(op, ListNamespacesOp):
            for c in op.match_conditions or ():
                check_pattern(c.path)
                if c.match_type not in ("prefix", "suffix"):
                    raise ValueError(f"Unsupported match type: {c.match_type!r}; use 'prefix' or 'suffix'")
            if op.max_depth is not None and (
                    isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1):
                raise InvalidInput(f"max_depth must be a positive integer, got {op.max_depth!r}")
            for name in ("limit", "offset"):
                check_count(f"list_namespaces {name}", getattr(op, name), maximum=MAX_RESULTS)
            return None
        raise ValueError(f"Unknown operation type: {type(op).__name__}; expected GetOp, PutOp, SearchOp or "
                         "ListNamespacesOp")

    def _check_put(self, op: PutOp) -> _Put:
        ns = check_namespace(op.namespace)
        key = _check_key(op.key)
        if op.value is None:
            return _Put(ns, key, None, [], None)
        if not isinstance(op.value, Mapping):
            raise InvalidInput(f"value must be a dict, got {type(op.value).__name__}")
        value = json_value(op.value)
        ttl = ttl_minutes(op.ttl)
        if op.index is False:
            texts: list[str] = []
        else:
            if op.index is not None and (isinstance(op.index, str) or not isinstance(op.index, list | tuple)
                                         or not all(isinstance(p, str) for p in op.index)):
                raise InvalidInput(f"index must be False or a list of paths (strings), got {op.index!r:.80}")
            texts = item_texts(value, list(op.index) if op.index is not None else self._fields)
        limit = self.service.settings.max_content_chars
        if sum(len(t) + 1 for t in texts) > limit:  # keep the record's text within our limit
            kept, total = [], 0
            for t in texts:
                kept.append(t[: max(0, limit - total)].strip())
                total += len(t) + 1
                if total >= limit:
                    break
            texts = [t for t in kept if t]
        return _Put(ns, key, value, texts, ttl)

    # ------------------------------------------------------------------ writes
    def _type_for(self, ns: Namespace, old: MemoryRecord | None) -> str:
        if self.memory_type is not None:
            return self.memory_type
        if old is not None and not is_item(old):
            return old.metadata.type  # a Supervisor memory overwritten through the store stays what it was
        return ns[0] if ns[0] in MEMORY_TYPES else "note"

    def _existing(self, keys: Iterable[tuple[Namespace, str]]) -> dict[tuple[Namespace, str], MemoryRecord]:
        """The stored record each (namespace, key) addresses: the adapter's item, or a memory
        written elsewhere whose id is the key (langmem updates and deletes those by id)."""
        keys = list(keys)
        native = {k: _native_id(k) for _, k in keys}
        ids = {item_id(ns, k) for ns, k in keys} | {i for i in native.values() if i}
        found = {r.id: r for r in self.service.backend.get(sorted(ids))} if ids else {}
        out: dict[tuple[Namespace, str], MemoryRecord] = {}
        for ns, k in keys:
            r = found.get(item_id(ns, k))
            if r is not None and r.namespace == ns and is_item(r):
                out[(ns, k)] = r
                continue
            r = found.get(native[k] or "")
            if r is not None and r.namespace == ns and not is_item(r):
                out[(ns, k)] = r
        return out

    def _write(self, puts: Sequence[_Put]) -> None:
        now = utcnow()
        final = {(p.ns, p.key): p for p in puts}  # the last op on a key wins, as in LangGraph's stores
        existing = self._existing(final)
        to_delete = [existing[k].id for k, p in final.items() if p.value is None and k in existing]
        writes = [p for p in final.values() if p.value is not None]
        texts = [t for p in writes for t in (p.texts or [UNINDEXED])]
        vectors = self.service.embedder.embed_documents(texts) if texts else None
        records, rows, i = [], [], 0
        for p in writes:
            n = max(1, len(p.texts))
            part = np.asarray(vectors[i: i + n], dtype=np.float32)  # type: ignore[index]
            i += n
            old = existing.get((p.ns, p.key))
            records.append(self._record(p, old, now, pack_vectors(part) if n > 1 else None))
            vec = part.mean(axis=0) if n > 1 else part[0]
            rows.append(vec / (np.linalg.norm(vec) or 1.0))
        if to_delete:
            self.service.backend.delete(to_delete)
        if records:
            self.service.backend.upsert(records, np.stack(rows).astype(np.float32))

    def _record(self, p: _Put, old: MemoryRecord | None, now: datetime, packed: list[str] | None) -> MemoryRecord:
        indexed = bool(p.texts)
        extra: dict[str, Any] = {"key": p.key, "value": p.value, "indexed": indexed, "ttl_minutes": p.ttl}
        if packed:
            extra["vectors"] = packed
        meta = MemoryMetadata(type=self._type_for(p.ns, old), source=SOURCE, extra=extra)
        rid = old.id if old is not None else item_id(p.ns, p.key)
        content = "\n".join(p.texts) if indexed else UNINDEXED
        rec = self.service.build_record(NewMemory(content, p.ns, meta, id=rid), now)
        return rec.model_copy(update={
            "created_at": old.created_at if old is not None else now,  # as SqliteStore / PostgresStore
            "updated_at": now,
            # LangGraph's ttl (or none) decides, not MemorySettings.default_ttl_days.
            "expires_at": now + timedelta(minutes=p.ttl) if p.ttl is not None else None,
        })

    def for_actor(self, actor: Any) -> BaseStore:
        """A view of this store for one actor (``memory.policy.manager.Actor``) under the access
        rules of ``settings.acl``: another agent's private namespaces are refused (audited in this
        file's audit log). See :mod:`memory.store_acl`."""
        from memory.policy.access import AccessControl
        from memory.policy.audit import AuditLog
        from memory.store_acl import ActorStoreView

        if self._audit is None:
            self._audit = AuditLog(self.service.settings.path)
        return ActorStoreView(self, actor, AccessControl.from_settings(self.service.settings.acl, self._audit))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the sweeper; close the service if this store built it."""
        self.stop_ttl_sweeper(timeout=5)
        if self._audit is not None:
            self._audit.close()
            self._audit = None
        if self._owns:
            self.service.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _native_id(key: str) -> str | None:
    """The memory id a key may name: the key itself, or the hex of a UUID in any spelling
    (langmem passes ids back as ``str(uuid.UUID(id))``, with hyphens); None when it cannot be one."""
    if not (0 < len(key) <= 128 and key == key.strip() and all(ord(c) >= 32 for c in key)):
        return None
    if len(key) == 36 and key.count("-") == 4:
        try:
            return uuid.UUID(key).hex
        except ValueError:
            return key
    return key


def make_store() -> MemoryStore:
    """Store factory for LangGraph Server / Studio.

    ``langgraph.json``: ``"store": {"path": "./memory/store.py:make_store"}``. langgraph-api
    calls a factory and accepts a ``BaseStore`` instance back (it also accepts context
    managers and coroutines). Settings come from ``MemorySettings.load()``: ``MEMORY_*``
    environment variables and the YAML file named by ``MEMORY_CONFIG``.
    """
    return MemoryStore(settings=MemorySettings.load())


__all__ = [
    "MemorySearchItem",
    "MemoryStore",
    "SOURCE",
    "StoreNamespaceError",
    "item_text",
    "item_id",
    "make_store",
    "value_matches",
]
