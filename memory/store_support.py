"""What :class:`memory.store.MemoryStore` adds around LangGraph's ``BaseStore`` methods.

* Namespace checks before ``BaseStore``'s own: it iterates a namespace before the store sees it,
  so ``store.put(5, ...)`` or ``store.get("memories/u1", ...)`` would fail with a bare
  ``TypeError`` or address the labels ``("m", "e", ...)``; here they raise
  :class:`~memory.store_items.StoreNamespaceError` saying how to write one.
* Listing: items newest first with value filters, and ``list_namespaces`` over the namespaces
  that hold live memories.
* TTL: refresh on read, sweeping expired items (once, or periodically in a thread).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langgraph.store.base import NOT_PROVIDED, BaseStore, ListNamespacesOp

from memory.errors import NotFound
from memory.namespace import Namespace
from memory.records import MemoryRecord, utcnow
from memory.store_items import SOURCE, check_labels, decode_namespace, does_match, is_item, item_value, value_matches

_PAGE = 256


class StoreSupport(BaseStore):
    """Mixin for :class:`memory.store.MemoryStore` (needs ``service``, ``_lock``, ``_sweeper*``)."""

    service: Any
    _lock: Any
    _sweeper: threading.Thread | None
    _sweeper_stop: threading.Event

    # ------------------------------------------------------------------ namespace checks
    def get(self, namespace: Any, key: str, *, refresh_ttl: bool | None = None) -> Any:
        return super().get(check_labels(namespace), key, refresh_ttl=refresh_ttl)

    async def aget(self, namespace: Any, key: str, *, refresh_ttl: bool | None = None) -> Any:
        return await super().aget(check_labels(namespace), key, refresh_ttl=refresh_ttl)

    def search(self, namespace_prefix: Any, /, **kwargs: Any) -> Any:
        return super().search(check_labels(namespace_prefix), **kwargs)

    async def asearch(self, namespace_prefix: Any, /, **kwargs: Any) -> Any:
        return await super().asearch(check_labels(namespace_prefix), **kwargs)

    def put(self, namespace: Any, key: str, value: Any, index: Any = None, *, ttl: Any = NOT_PROVIDED) -> None:
        return super().put(check_labels(namespace), key, value, index, ttl=ttl)

    async def aput(self, namespace: Any, key: str, value: Any, index: Any = None, *,
                   ttl: Any = NOT_PROVIDED) -> None:
        return await super().aput(check_labels(namespace), key, value, index, ttl=ttl)

    def delete(self, namespace: Any, key: str) -> None:
        return super().delete(check_labels(namespace), key)

    async def adelete(self, namespace: Any, key: str) -> None:
        return await super().adelete(check_labels(namespace), key)

    def list_namespaces(self, *, prefix: Any = None, suffix: Any = None, **kwargs: Any) -> Any:
        return super().list_namespaces(prefix=_pattern(prefix), suffix=_pattern(suffix), **kwargs)

    async def alist_namespaces(self, *, prefix: Any = None, suffix: Any = None, **kwargs: Any) -> Any:
        return await super().alist_namespaces(prefix=_pattern(prefix), suffix=_pattern(suffix), **kwargs)

    # ------------------------------------------------------------------ listing
    def _listed(self, prefix: Namespace, flt: dict[str, Any] | None, offset: int, limit: int,
                keep: Any = None) -> list[MemoryRecord]:
        """Newest first (``updated_at``), value filters (and ``keep``) applied before offset/limit."""
        backend = self.service.backend
        ns = prefix or None
        if not flt and keep is None:
            return backend.scroll(ns, limit=limit, offset=offset)
        out: list[MemoryRecord] = []
        skipped = page = 0
        while True:
            recs = backend.scroll(ns, limit=_PAGE, offset=page * _PAGE)
            for r in recs:
                if (keep is not None and not keep(r)) or not value_matches(item_value(r), flt):
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

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conds = tuple(op.match_conditions or ())
        namespaces = [ns for ns in (decode_namespace(n) for n in self._live_namespaces())
                      if all(does_match(c, ns) for c in conds)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(namespaces)
        return namespaces[op.offset: op.offset + op.limit]

    def _live_namespaces(self) -> list[Namespace]:
        """Namespaces holding at least one live memory.

        ``backend.namespaces()`` lists every namespace with rows, expired included; counts are
        per prefix, so an exact count is the prefix count minus the prefix counts of the nearest
        namespaces below it.
        """
        backend = self.service.backend
        cands = {ns for ns, _ in backend.namespaces()}
        below = {ns: backend.count(ns) for ns in cands}
        nested = dict.fromkeys(cands, 0)
        for ns in cands:
            for i in range(len(ns) - 1, 0, -1):
                if ns[:i] in cands:
                    nested[ns[:i]] += below[ns]
                    break
        return [ns for ns in cands if below[ns] - nested[ns] > 0]

    # ------------------------------------------------------------------ TTL
    def _refresh(self, records: Sequence[MemoryRecord]) -> None:
        """Extend ``expires_at`` by each item's ttl (items put with a ttl only)."""
        read = {r.id: r for r in records if is_item(r) and r.metadata.extra.get("ttl_minutes")}
        if not read:
            return
        now = utcnow()
        backend = self.service.backend
        # Re-read under our lock and skip items changed since they were read, so a refresh
        # never writes back an older version over a concurrent put.
        fresh = [r for r in backend.get(list(read)) if r.updated_at == read[r.id].updated_at]
        if not fresh:
            return
        updated = [r.model_copy(update={"expires_at": now + timedelta(minutes=float(r.metadata.extra["ttl_minutes"]))})  # type: ignore[arg-type]
                   for r in fresh]
        get_vectors = getattr(backend, "get_vectors", None)
        try:
            vectors = get_vectors([r.id for r in updated]) if callable(get_vectors) else None
        except NotFound:
            vectors = None
        if vectors is None:
            vectors = self.service.embedder.embed_documents([r.content for r in updated])
        backend.upsert(updated, vectors)

    def sweep_ttl(self) -> int:
        """Delete this adapter's expired items; returns how many."""
        with self._lock:
            return self.service.backend.delete(
                filter={"source": SOURCE, "expires_at": {"$lte": utcnow()}}
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



def _pattern(path: Any) -> Any:
    return None if path is None else check_labels(path)


__all__ = ["StoreSupport"]
