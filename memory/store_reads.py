"""The read side of :class:`memory.store.MemoryStore`: get, search with max pooling over
index paths, LangGraph's raw cosine scores.

A mixin (moved out of ``store.py`` to keep modules small; no behaviour of its own): it relies on
the store's ``service``, ``min_sim`` and the helpers of :class:`memory.store_support.StoreSupport`
and ``MemoryStore`` (``_existing``, ``_listed``, ``_refresh``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from langgraph.store.base import GetOp, Item, SearchOp

from memory import scoring
from memory.errors import NotFound
from memory.namespace import Namespace
from memory.records import SearchHit
from memory.service import MemoryService
from memory.store_items import (
    MemorySearchItem,
    is_item,
    is_searchable,
    item_value,
    to_item,
    to_search_item,
    unpack_vectors,
    value_matches,
)


class StoreReads:
    """``_get`` and ``_search`` of :class:`~memory.store.MemoryStore`."""

    service: MemoryService
    min_sim: float

    def _get(self, ns: Namespace, op: GetOp) -> Item | None:
        rec = self._existing([(ns, str(op.key))]).get((ns, str(op.key)))
        if rec is None:
            return None
        if op.refresh_ttl:
            self._refresh([rec])
        return to_item(rec)

    def _search(self, op: SearchOp, checked: tuple[Namespace, dict[str, Any] | None]) -> list[MemorySearchItem]:
        prefix, flt = checked
        if op.limit == 0:
            return []
        query = op.query.strip() if op.query else ""
        if not query:
            records = self._listed(prefix, flt, op.offset, op.limit)
            out = [to_search_item(r, None) for r in records]
        else:
            ranked, complete = self._ranked(query, prefix, flt, op.offset + op.limit)
            page = self._cosines(ranked[op.offset: op.offset + op.limit], query)
            records = [h.record for h, _ in page]
            out = [to_search_item(h.record, cos, h.breakdown.score, h.breakdown.as_dict()) for h, cos in page]
            if complete and len(out) < op.limit:
                # Items put with index=False come after every ranked one, score None (InMemoryStore).
                rest = self._listed(prefix, flt, max(0, op.offset - len(ranked)), op.limit - len(out),
                                    keep=lambda r: not is_searchable(r))
                records += rest
                out += [to_search_item(r, None) for r in rest]
        if op.refresh_ttl:
            self._refresh(records)
        return out

    def _ranked(self, query: str, prefix: Namespace, flt: dict[str, Any] | None,
                want: int) -> tuple[list[tuple[SearchHit, float | None]], bool]:
        """Hybrid search, value filters, max pooling over index paths, in our order; and whether
        that is every indexed item under the prefix."""
        backend = self.service.backend
        prefixes = [prefix] if prefix else sorted({ns[:1] for ns, _ in backend.namespaces()})
        if not prefixes:
            return [], True
        n = max(want, self.service.settings.scoring.candidates)
        while True:  # widen the candidate pool until enough hits survive the value filter
            hits = self.service.search(query, prefixes, top_k=n, min_sim=self.min_sim, min_score=0.0)
            kept = [h for h in hits if is_searchable(h.record) and value_matches(item_value(h.record), flt)]
            if len(kept) >= want or len(hits) < n:
                break
            n *= 4
        qv = self.service.embedder.embed_query(query)
        pooled = [self._pool(h, qv) for h in kept]
        pooled.sort(key=lambda hc: (-hc[0].breakdown.score, -hc[0].record.updated_at.timestamp(), hc[0].record.id))
        return pooled, len(hits) < n and self.min_sim == 0

    def _cosines(self, page: list[tuple[SearchHit, float | None]], query: str) -> list[tuple[SearchHit, float]]:
        """The backend's vector score is clipped at 0 for ranking; LangGraph reports raw cosine."""
        unknown = [h.record.id for h, c in page if c is None]
        raw: dict[str, float] = {}
        if unknown:
            qv = self.service.embedder.embed_query(query)
            try:
                vecs = self.service.backend.get_vectors(unknown)  # type: ignore[attr-defined]
                raw = dict(zip(unknown, (vecs @ qv).tolist(), strict=True))
            except (AttributeError, NotFound):
                raw = {}
        return [(h, c if c is not None else raw.get(h.record.id, h.breakdown.vector)) for h, c in page]

    def _pool(self, h: SearchHit, qv: np.ndarray) -> tuple[SearchHit, float | None]:
        """An item with several index texts scores by its best one (LangGraph's max pooling)."""
        vecs = unpack_vectors(h.record.metadata.extra.get("vectors"), self.service.embedder.dim) \
            if is_item(h.record) else None
        if vecs is None:
            return h, (h.breakdown.vector if h.breakdown.vector > 0 else None)
        cos = float(np.max(vecs @ qv))
        cfg = self.service.settings.scoring
        b = h.breakdown
        sim = scoring.similarity(max(0.0, cos), b.keyword, cfg.vector_weight, cfg.vector_floor)
        b = replace(b, vector=max(0.0, cos), sim=sim, score=b.score + cfg.alpha * (sim - b.sim))
        return SearchHit(h.record, b), cos
