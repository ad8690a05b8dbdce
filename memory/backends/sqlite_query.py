"""Search over the SQLite backend: record cache, keyword scoring and the hybrid ``query``.

A mixin of :class:`memory.backends.sqlite.SqliteBackend` (moved out of ``sqlite.py`` to keep
modules small; no behaviour of its own). It relies on the backend's connection, lock, indexes
and partition planning (:mod:`memory.backends.sqlite_partitions`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.backend import check_query
from memory.backends.keyword_index import KeywordIndex
from memory.backends.sqlite_schema import COLS, row_to_record
from memory.backends.sqlite_stream import fts_keyword
from memory.backends.vector_index import VectorIndex
from memory.filters import matches
from memory.namespace import Namespace
from memory.records import MemoryQuery, MemoryRecord, ScoredMemory
from memory.text import keyword_terms


class QueryMixin:
    """``query`` and its helpers for :class:`~memory.backends.sqlite.SqliteBackend`."""

    dim: int
    embedding_model: str
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _records: OrderedDict[int, MemoryRecord]
    _index: VectorIndex
    _kw: KeywordIndex

    # Parsed records kept per row id (LRU). Searches keep reading the same hot memories (a
    # user's profile and definitions are candidates of nearly every search), and parsing a
    # row (JSON metadata, timestamps) costs more than finding it. Entries are dropped whenever
    # the row changes here or in another process (see _sync), so the cache is never stale.
    # A parsed record costs ~3 KB of private heap, so 8,192 of them hold ~24 MB in every
    # process of a long-lived worker pool. Single searches at 100k were as fast with 1,024, but the
    # Supervisor's pre node (several namespaces per handoff, the same users again and again) was
    # not: handoff p95 at 100k 26.9-35.5 ms with 1,024 vs 18.3-20.3 ms with 8,192 (same code, runs
    # alternated, load ~0.9), so latency wins over the 21 MB.
    RECORD_CACHE = 8192

    def _fetch_rids(self, rids: Sequence[int] | set[int], now: float) -> dict[int, MemoryRecord]:
        out: dict[int, MemoryRecord] = {}
        cache = self._records
        missing: list[int] = []
        for rid in rids:
            rec = cache.get(rid)
            if rec is None:
                missing.append(rid)
                continue
            cache.move_to_end(rid)
            if rec.expires_at is None or rec.expires_at.timestamp() > now:
                out[rid] = rec
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            for row in self._conn.execute(
                f"SELECT {COLS} FROM memories WHERE rid IN ({','.join('?' * len(chunk))})", chunk
            ):
                rec = row_to_record(row)
                cache[row[0]] = rec
                if rec.expires_at is None or rec.expires_at.timestamp() > now:
                    out[row[0]] = rec
        while len(cache) > self.RECORD_CACHE:
            cache.popitem(last=False)
        return out

    # Above this many rows, query terms that occur in more than PRUNE_DF of them are dropped
    # from the keyword match (at least PRUNE_KEEP rarest terms are kept). Such a term adds almost
    # nothing to BM25 (its IDF is near zero) but its postings are the longest to score.
    PRUNE_MIN_ROWS = 20_000
    PRUNE_DF = 0.02
    PRUNE_KEEP = 2

    def _query_terms(self, text: str) -> tuple[list[str], dict[str, int]]:
        """Distinct query terms worth scoring, and their document frequencies."""
        terms = list(dict.fromkeys(keyword_terms(text)))
        df, total, _ = self._kw_stats(terms)
        if total >= self.PRUNE_MIN_ROWS and len(terms) > self.PRUNE_KEEP:
            present = sorted((t for t in terms if t in df), key=lambda t: df[t])
            keep = [t for i, t in enumerate(present) if i < self.PRUNE_KEEP or df[t] <= self.PRUNE_DF * total]
            terms = keep or terms
        return terms, df

    def _keyword_arrays(self, blocks: list[Namespace], text: str, *, stream: bool = False,
                        prefixes: Sequence[Namespace] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Every keyword match in ``blocks``: (rids, BM25) as arrays, best first.

        Kept as arrays: a query with common terms matches thousands of rows at 100k, and a
        Python tuple per match made the garbage collector a visible part of the p95.
        """
        terms, df = self._query_terms(text)
        if stream:  # partitions not loaded: FTS5 scores the same rows the same way
            rids, scores = fts_keyword(self._conn, prefixes, [t for t in terms if t in df])
        else:
            _, n_docs, total_len = self._kw_stats(terms)
            rids, scores = self._kw.search(blocks, terms, df=df, n_docs=n_docs, total_len=total_len)
        order = np.lexsort((rids, -scores))  # ties by rid, so the order is deterministic
        return rids[order], scores[order]

    def _keyword(self, blocks: list[Namespace], text: str) -> list[tuple[int, float]]:
        """Every keyword match in ``blocks`` as (rid, BM25), best first (for inspection)."""
        self._ensure_loaded(blocks)
        rids, scores = self._keyword_arrays(blocks, text)
        return list(zip(rids.tolist(), scores.tolist(), strict=True))

    def query(self, q: MemoryQuery) -> list[ScoredMemory]:
        flt, qvec = check_query(q, dim=self.dim, model=self.embedding_model)
        if q.limit <= 0:
            return []
        self._forked_search_starts()  # type: ignore[attr-defined]  # a forked worker's heap upkeep
        now = q.now.timestamp()
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            blocks, stream = self._plan(q.namespaces)
            index: Any = stream if stream is not None else self._index
            total = index.size(blocks)
            allowed = self._prefilter(q.namespaces, flt, now, json_only=False) if flt and blocks else None
            # Only unindexed (JSON) conditions: scanning for them costs ~3 us a row (~0.3 s at
            # 100k), more than a common filter's whole search, so first try reading candidates.
            deferred = False
            if flt and blocks and allowed is None:
                conds, _, indexed = self._filter_sql(flt)
                deferred = bool(conds) and not indexed
            if allowed is not None:
                total = len(allowed)
            if q.text and blocks:
                kw_rids, kw_scores = self._keyword_arrays(blocks, q.text, stream=stream is not None,
                                                          prefixes=q.namespaces)
                if allowed is not None:
                    keep = np.isin(kw_rids, allowed)
                    kw_rids, kw_scores = kw_rids[keep], kw_scores[keep]
            else:
                kw_rids, kw_scores = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            fetch = q.limit
            # Expired or filtered-out rows are only found when their record is read, so read
            # the top `fetch` of each list and widen until `limit` survive or nothing is left.
            while True:
                vec_hits: list[tuple[int, float]] = []
                if qvec is not None and allowed is not None:
                    r, s = index.search_rids(allowed, qvec, fetch)
                    vec_hits = list(zip(r.tolist(), s.tolist(), strict=True))
                elif qvec is not None and blocks:
                    r, s = index.search(blocks, qvec, fetch)
                    vec_hits = list(zip(r.tolist(), s.tolist(), strict=True))
                kw_hits = list(zip(kw_rids[:fetch].tolist(), kw_scores[:fetch].tolist(), strict=True))
                records = self._fetch_rids({r for r, _ in vec_hits} | {r for r, _ in kw_hits}, now)
                if flt:
                    records = {rid: rec for rid, rec in records.items() if matches(rec, flt)}
                vec_kept = [(r, s) for r, s in vec_hits if r in records][: q.limit]
                kw_kept = [(r, s) for r, s in kw_hits if r in records][: q.limit]
                vec_done = len(vec_kept) >= q.limit or len(vec_hits) < fetch
                kw_done = len(kw_kept) >= q.limit or len(kw_rids) <= fetch
                if (vec_done and kw_done) or fetch >= total:
                    break
                if deferred and fetch >= self.DEFER_JSON_FETCH:
                    deferred = False  # a rare filter: select its rows in SQL after all
                    found = self._prefilter(q.namespaces, flt, now)
                    if found is not None:
                        allowed, total, fetch = found, len(found), q.limit
                        keep = np.isin(kw_rids, allowed)
                        kw_rids, kw_scores = kw_rids[keep], kw_scores[keep]
                        continue
                fetch = min(total, fetch * 4)
            vec_score = dict(vec_kept)
            chosen = list(dict.fromkeys([r for r, _ in vec_kept] + [r for r, _ in kw_kept]))
            kw_score = self._lookup(kw_rids, kw_scores, chosen)
            if qvec is not None:
                for r, _ in kw_kept:
                    if r not in vec_score:
                        v = index.vector(r)
                        vec_score[r] = float(v @ qvec) if v is not None else 0.0
            out = []
            for rid in chosen:
                out.append(ScoredMemory(
                    record=records[rid],
                    vector_score=vec_score.get(rid) if qvec is not None else None,
                    keyword_score=kw_score.get(rid, 0.0) if q.text else None,
                ))
            return out


    @staticmethod
    def _lookup(rids: np.ndarray, scores: np.ndarray, wanted: list[int]) -> dict[int, float]:
        """Scores of the ``wanted`` rids among (rids, scores); absent rids are left out."""
        if not len(rids) or not wanted:
            return {}
        order = np.argsort(rids, kind="stable")
        srt = rids[order]
        w = np.asarray(wanted, dtype=np.int64)
        pos = np.minimum(np.searchsorted(srt, w), len(srt) - 1)
        hit = srt[pos] == w
        return dict(zip(w[hit].tolist(), scores[order][pos[hit]].tolist(), strict=True))
