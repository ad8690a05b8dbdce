"""A LangGraph ``BaseStore`` over :class:`~memory.service.MemoryService`.

``graph.compile(store=MemoryStore(...))``, ``get_store()``, ``runtime.store`` and langmem's
memory tools then read and write our backends (SQLite or Qdrant) and rank with our hybrid
scoring. Semantics follow LangGraph's own stores (``InMemoryStore``, ``SqliteStore``):
put is an upsert, search without a query lists newest first, value filters with
``$eq/$ne/$gt/$gte/$lt/$lte``, ``list_namespaces`` with ``*`` wildcards, TTL in minutes with
refresh on read.

How an item maps onto a record:

* ``id`` = sha1 of ``[namespace, key]`` (stable, so ``put`` replaces);
* ``namespace`` = the item's namespace, checked by LangGraph's rules *and* ours
  (:func:`memory.namespace.parse_namespace`); violations raise :class:`StoreNamespaceError`,
  which is both LangGraph's ``InvalidNamespaceError`` and our ``InvalidNamespace``;
* ``metadata.extra`` = ``{"key", "value", "indexed", "ttl_minutes"}``; ``metadata.source`` =
  ``"langgraph_store"`` marks adapter records, and the adapter only ever sees those;
* ``content`` = the text that is embedded and keyword-indexed: the ``index`` paths of the
  value (``IndexConfig["fields"]``, default ``["$"]`` = the whole value, or ``index=[...]`` per
  put). Items put with ``index=False`` (or whose paths are all missing) get the placeholder
  content ``"∅"`` and ``indexed=False``: listing and filter-only search return them, a search
  with a query never does (as in ``SqliteStore``, whose vector search joins on the vectors).

Deliberate differences from LangGraph's stores:

* One text per item. LangGraph embeds each index path separately and max-pools; we join the
  paths' texts with newlines, and render dicts/lists as their leaf values rather than JSON
  (wrapping a sentence as ``{"content": ...}`` drops its similarity to a query from .72 to .54
  with the packaged USE model).
* ``SearchItem.score`` is our final score (``alpha*sim + beta*decay + gamma*boost``), not a
  raw cosine. By default nothing is cut off (``min_sim=0``), like LangGraph, which ranks every
  item in the prefix; pass ``min_sim`` to drop unrelated hits.
* Expired items are never returned (LangGraph's ``omit_expired=True``); ``sweep_ttl`` deletes them.
* Namespaces obey our limits too: at most 8 labels of at most 128 characters, no '/', '\\',
  surrounding whitespace or control characters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from memory.errors import InvalidInput, NotFound
from memory.namespace import Namespace
from memory.records import MemoryMetadata, MemoryRecord, utcnow
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings
from memory.store_items import (
    SOURCE,
    UNINDEXED,
    StoreNamespaceError,
    check_filter,
    check_namespace,
    check_pattern,
    does_match,
    is_item,
    item_id,
    item_text,
    json_value,
    to_item,
    to_search_item,
    ttl_minutes,
    value_matches,
)

_SOURCE_FILTER = {"source": SOURCE}
_PAGE = 256


class MemoryStore(BaseStore):
    """LangGraph ``BaseStore`` adapter over a :class:`MemoryService`.

    Args:
        service: the memory service to store items in (its backend, embedder and scoring).
        index: LangGraph ``IndexConfig``; only ``fields`` is used (default ``["$"]``). The
            service's embedder does the embedding, so ``embed`` must not be given and ``dims``,
            if given, must match it.
        ttl: LangGraph ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
            ``sweep_interval_minutes``).
        memory_type: ``metadata.type`` of the records (drives our type boost).
        min_sim: drop query hits less relevant than this; 0 ranks every item, like LangGraph.
        owns_service: close the service when the store is closed.

    Example:
        >>> from memory import MemorySettings
        >>> from memory.store import MemoryStore
        >>> store = MemoryStore.from_settings(MemorySettings(path=":memory:"))
        >>> store.put(("memories", "u1"), "tea", {"content": "User drinks green tea every morning"})
        >>> store.put(("memories", "u1"), "city", {"content": "User lives in Hangzhou"})
        >>> store.get(("memories", "u1"), "tea").value
        {'content': 'User drinks green tea every morning'}
        >>> store.search(("memories",), query="what does the user drink?", limit=1)[0].key
        'tea'
        >>> store.list_namespaces()
        [('memories', 'u1')]
        >>> store.close()
    """

    supports_ttl = True

    def __init__(
        self,
        service: MemoryService,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        memory_type: str = "note",
        min_sim: float = 0.0,
        owns_service: bool = False,
    ):
        self.service = service
        index = dict(index or {})
        if index.get("embed") is not None:
            raise ValueError(
                "MemoryStore embeds with its MemoryService's embedder; configure the model in "
                "MemorySettings.embedding instead of IndexConfig['embed']"
            )
        if index.get("dims") is not None and index["dims"] != service.embedder.dim:
            raise ValueError(
                f"IndexConfig dims={index['dims']} but the service's embedder "
                f"{service.embedder.name!r} produces {service.embedder.dim}-d vectors"
            )
        fields = index.get("fields") or ["$"]
        if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
            raise ValueError(f"IndexConfig fields must be a list of paths, got {fields!r}")
        self.index_config: IndexConfig = {"dims": service.embedder.dim, "fields": list(fields)}
        self.ttl_config = ttl
        MemoryMetadata(type=memory_type)  # validate early
        self.memory_type = memory_type
        if not 0.0 <= min_sim <= 1.0:
            raise ValueError(f"min_sim must be in [0, 1], got {min_sim!r}")
        self.min_sim = min_sim
        self._owns = owns_service
        self._lock = threading.RLock()
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    @classmethod
    def from_settings(
        cls,
        settings: MemorySettings | None = None,
        *,
        embedder: Any = None,
        **kwargs: Any,
    ) -> MemoryStore:
        """Build the service from settings (default: ``MemorySettings.load()``); owns it."""
        service = MemoryService.from_settings(settings or MemorySettings.load(), embedder=embedder)
        return cls(service, owns_service=True, **kwargs)

    # ------------------------------------------------------------------ batch
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ops in order. Consecutive puts/deletes are written together (one embedding call)."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        pending: list[PutOp] = []
        with self._lock:
            for i, op in enumerate(ops):
                if isinstance(op, PutOp):
                    pending.append(op)
                    continue
                if pending:
                    self._write(pending)
                    pending = []
                if isinstance(op, GetOp):
                    results[i] = self._get(op)
                elif isinstance(op, SearchOp):
                    results[i] = self._search(op)
                elif isinstance(op, ListNamespacesOp):
                    results[i] = self._list_namespaces(op)
                else:
                    raise ValueError(f"Unknown operation type: {type(op).__name__}")
            if pending:
                self._write(pending)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # ------------------------------------------------------------------ writes
    def _write(self, ops: Sequence[PutOp]) -> None:
        now = utcnow()
        final: dict[str, tuple[Namespace, PutOp]] = {}
        for op in ops:  # the last op on a key wins, as in LangGraph's stores
            ns = check_namespace(op.namespace)
            final[item_id(ns, str(op.key))] = (ns, op)
        to_delete = [rid for rid, (_, op) in final.items() if op.value is None]
        puts = {rid: v for rid, v in final.items() if v[1].value is not None}
        records: list[MemoryRecord] = []
        if puts:
            # Keep created_at of items being replaced (SqliteStore/PostgresStore do too).
            existing = {r.id: r for r in self.service.backend.get(list(puts))}
            for rid, (ns, op) in puts.items():
                records.append(self._record(rid, ns, op, now, existing.get(rid)))
        if to_delete:
            self.service.backend.delete(to_delete)
        if records:
            vectors = self.service.embedder.embed_documents([r.content for r in records])
            self.service.backend.upsert(records, vectors)

    def _record(
        self, rid: str, ns: Namespace, op: PutOp, now: datetime, old: MemoryRecord | None
    ) -> MemoryRecord:
        if not isinstance(op.value, Mapping):
            raise InvalidInput(f"value must be a dict, got {type(op.value).__name__}")
        value = json_value(op.value)
        ttl = ttl_minutes(op.ttl)
        if op.index is False:
            text = ""
        else:
            if op.index is not None and (
                isinstance(op.index, str) or not isinstance(op.index, list | tuple)
            ):
                raise InvalidInput(f"index must be False or a list of paths, got {op.index!r}")
            text = item_text(
                value, list(op.index) if op.index is not None else self.index_config["fields"]
            )
        # The index text is derived data: make it acceptable to clean_content instead of failing.
        text = text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8").strip()
        text = text[: self.service.settings.max_content_chars].strip()
        indexed = bool(text)
        meta = MemoryMetadata(
            type=self.memory_type,
            source=SOURCE,
            extra={"key": str(op.key), "value": value, "indexed": indexed, "ttl_minutes": ttl},
        )
        rec = self.service.build_record(
            NewMemory(text if indexed else UNINDEXED, ns, meta, id=rid), now
        )
        return rec.model_copy(
            update={
                "created_at": old.created_at if old is not None else now,
                "updated_at": now,
                # LangGraph's ttl (or none) decides, not MemorySettings.default_ttl_days.
                "expires_at": now + timedelta(minutes=ttl) if ttl is not None else None,
            }
        )

    # ------------------------------------------------------------------ reads
    def _get(self, op: GetOp) -> Item | None:
        ns = check_namespace(op.namespace)
        found = self.service.backend.get([item_id(ns, str(op.key))])
        if not found or not is_item(found[0]) or found[0].namespace != ns:
            return None
        if op.refresh_ttl:
            self._refresh(found)
        return to_item(found[0])

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = check_namespace(op.namespace_prefix, allow_empty=True)
        flt = check_filter(op.filter)
        for name in ("limit", "offset"):
            v = getattr(op, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidInput(f"search {name} must be an integer >= 0, got {v!r}")
        if op.limit == 0:
            return []
        query = op.query.strip() if isinstance(op.query, str) else None
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidInput(f"query must be a string, got {type(op.query).__name__}")
        if query:
            found = self._ranked(query, prefix, flt, op.offset + op.limit)[op.offset :]
        else:
            found = [(r, None) for r in self._listed(prefix, flt, op.offset, op.limit)]
        if op.refresh_ttl:
            self._refresh([r for r, _ in found])
        return [to_search_item(r, s) for r, s in found]

    def _ranked(
        self, query: str, prefix: Namespace, flt: dict[str, Any] | None, want: int
    ) -> list[tuple[MemoryRecord, float]]:
        """Hybrid search, then value filters; widen the candidate pool until ``want`` survive."""
        if prefix:
            prefixes: list[Namespace] = [prefix]
        else:  # our service searches within namespaces: use every top-level label
            prefixes = sorted({ns[:1] for ns, _ in self.service.backend.namespaces()})
            if not prefixes:
                return []
        n = max(want, self.service.settings.scoring.candidates)
        while True:
            hits = self.service.search(
                query, prefixes, top_k=n, filter=_SOURCE_FILTER, min_sim=self.min_sim
            )
            kept = [
                (h.record, h.score)
                for h in hits
                if is_item(h.record)
                and h.record.metadata.extra.get("indexed", True)
                and value_matches(h.record.metadata.extra["value"], flt)
            ]
            if len(kept) >= want or len(hits) < n:
                return kept[:want]
            n *= 4

    def _listed(
        self, prefix: Namespace, flt: dict[str, Any] | None, offset: int, limit: int
    ) -> list[MemoryRecord]:
        """Newest first (``updated_at``), value filters applied before offset/limit."""
        backend = self.service.backend
        ns = prefix or None
        if not flt:
            recs = backend.scroll(ns, filter=_SOURCE_FILTER, limit=limit, offset=offset)
            return [r for r in recs if is_item(r)]
        out: list[MemoryRecord] = []
        skipped = 0
        page = 0
        while True:
            recs = backend.scroll(ns, filter=_SOURCE_FILTER, limit=_PAGE, offset=page * _PAGE)
            for r in recs:
                if not is_item(r) or not value_matches(r.metadata.extra["value"], flt):
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                out.append(r)
                if len(out) >= limit:
                    return out
            if len(recs) < _PAGE:
                return out
            page += 1

    def _refresh(self, records: Sequence[MemoryRecord]) -> None:
        """Extend ``expires_at`` by each item's ttl (items put with a ttl only)."""
        read = {r.id: r for r in records if r.metadata.extra.get("ttl_minutes")}
        if not read:
            return
        now = utcnow()
        backend = self.service.backend
        # Re-read under our lock and skip items changed since they were read, so a refresh
        # never writes back an older version over a concurrent put.
        fresh = [r for r in backend.get(list(read)) if r.updated_at == read[r.id].updated_at]
        if not fresh:
            return
        updated = [
            r.model_copy(
                update={
                    "expires_at": now + timedelta(minutes=float(r.metadata.extra["ttl_minutes"]))
                }
            )  # type: ignore[arg-type]
            for r in fresh
        ]
        get_vectors = getattr(backend, "get_vectors", None)
        try:
            vectors = get_vectors([r.id for r in updated]) if callable(get_vectors) else None
        except NotFound:
            vectors = None
        if vectors is None:
            vectors = self.service.embedder.embed_documents([r.content for r in updated])
        backend.upsert(updated, vectors)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conds = tuple(op.match_conditions or ())
        for c in conds:
            check_pattern(c.path)
        if op.max_depth is not None and (
            isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1
        ):
            raise InvalidInput(f"max_depth must be a positive integer, got {op.max_depth!r}")
        if op.limit < 0 or op.offset < 0:
            raise InvalidInput("limit and offset must be >= 0")
        namespaces = [
            ns for ns in self._live_namespaces() if all(does_match(c, ns) for c in conds)
        ]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(namespaces)
        return namespaces[op.offset : op.offset + op.limit]

    def _live_namespaces(self) -> list[Namespace]:
        """Namespaces holding at least one live item of this adapter (not other records).

        ``backend.namespaces()`` lists every namespace with rows of any kind, expired included;
        counts are per prefix, so an exact count is the prefix count minus the prefix counts of
        the nearest namespaces below it.
        """
        backend = self.service.backend
        cands = {ns for ns, _ in backend.namespaces()}
        below = {ns: backend.count(ns, filter=_SOURCE_FILTER) for ns in cands}
        nested = dict.fromkeys(cands, 0)
        for ns in cands:
            for i in range(len(ns) - 1, 0, -1):
                if ns[:i] in cands:
                    nested[ns[:i]] += below[ns]
                    break
        return [ns for ns in cands if below[ns] - nested[ns] > 0]

    # ------------------------------------------------------------------ TTL sweeping
    def sweep_ttl(self) -> int:
        """Delete this adapter's expired items; returns how many."""
        with self._lock:
            return self.service.backend.delete(
                filter={**_SOURCE_FILTER, "expires_at": {"$lte": utcnow()}}
            )

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items periodically in a daemon thread (default: TTLConfig or 5 minutes)."""
        interval = (
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        )
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._sweeper is not None and self._sweeper.is_alive():
            done.set_result(None)
            return done
        self._sweeper_stop.clear()

        def run() -> None:
            try:
                while not self._sweeper_stop.wait(float(interval) * 60.0):
                    self.sweep_ttl()
            finally:
                done.set_result(None)

        self._sweeper = threading.Thread(target=run, name="memory-store-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it has stopped."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the sweeper; close the service if this store built it."""
        self.stop_ttl_sweeper(timeout=5)
        if self._owns:
            self.service.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_store() -> MemoryStore:
    """Store factory for LangGraph Server / Studio.

    ``langgraph.json``: ``"store": {"path": "./memory/store.py:make_store"}``. langgraph-api
    calls a factory and accepts a ``BaseStore`` instance back (it also accepts context
    managers and coroutines). Settings come from ``MemorySettings.load()``: ``MEMORY_*``
    environment variables and the YAML file named by ``MEMORY_CONFIG``.
    """
    return MemoryStore.from_settings(MemorySettings.load())


__all__ = [
    "MemoryStore",
    "SOURCE",
    "StoreNamespaceError",
    "item_text",
    "item_id",
    "make_store",
    "value_matches",
]
