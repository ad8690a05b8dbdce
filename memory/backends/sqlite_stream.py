"""Searching namespaces that are not loaded: straight from the vector file and FTS5.

See :meth:`memory.backends.sqlite_partitions.PartitionMixin._plan` for when this is used.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from memory.backends.vector_file import VectorFile
from memory.namespace import Namespace

if TYPE_CHECKING:
    from memory.backends.sqlite_catalogue import NsCatalogue


class StreamIndex:
    """A search over namespaces that are not loaded, straight from the vector file.

    The same interface as :class:`VectorIndex` where ``SqliteBackend.query`` uses it. A fresh
    process's first search over most of a store (a CLI call, an MCP client) scanned the file
    once instead of loading every partition first (100k rows: 15 s and 1 GB RSS for the load on
    a busy 2-core machine). The scan is exact: every selected row is scored. A scoped search
    reads only its rows (by row id); nothing of it stays in this process, so processes that
    search different users do not each keep private copies of what they searched once.
    """

    def __init__(self, vf: VectorFile, cat: NsCatalogue, blocks: list[Namespace], dim: int):
        self.vf, self.cat, self.blocks, self.dim = vf, cat, blocks, dim
        self._sims: tuple[np.ndarray, np.ndarray] | None = None
        self.last_plan = "stream"

    def size(self, namespaces: list[Namespace]) -> int:
        return self.cat.size(namespaces)

    # Up to this many selected rows they are read by row id (a scoped search: a few hundred
    # rows, ~1 ms), above it the file is scanned in chunks (most of the store).
    GATHER_MAX_ROWS = 50_000

    def _all(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._sims is None and self.cat.size(self.blocks) <= self.GATHER_MAX_ROWS:
            parts = [self.cat.rids_of(ns) for ns in self.blocks]
            rids = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
            sims = self.vf.rows(rids) @ vec if len(rids) else np.zeros(0, dtype=np.float32)
            self._sims = (rids.astype(np.int64), np.asarray(sims, dtype=np.float32))
        if self._sims is None:
            wanted = np.zeros(len(self.cat.ns_list) + 1, dtype=bool)
            for ns in self.blocks:
                wanted[self.cat.ids[ns]] = True
            code = self.cat.code
            rids_all: list[np.ndarray] = []
            sims_all: list[np.ndarray] = []
            for lo, mat in self.vf.chunks(len(code)):
                sel = code[lo : lo + len(mat)]
                keep = np.flatnonzero(wanted[sel])  # code -1 indexes the spare last slot: False
                if len(keep):
                    rids_all.append(keep + lo)
                    sims_all.append(mat[keep] @ vec)
            rids = np.concatenate(rids_all) if rids_all else np.zeros(0, dtype=np.int64)
            sims = np.concatenate(sims_all) if sims_all else np.zeros(0, dtype=np.float32)
            self._sims = (rids.astype(np.int64), sims.astype(np.float32))
        return self._sims

    def search(self, namespaces: list[Namespace], vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        rids, sims = self._all(vec)
        if k < len(sims):
            part = np.argpartition(-sims, k - 1)[:k]
            rids, sims = rids[part], sims[part]
        order = np.lexsort((rids, -sims))
        return rids[order], sims[order]

    def search_rids(self, rids: np.ndarray, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        code = self.cat.code
        rids = np.asarray([r for r in rids.tolist() if r < len(code) and code[r] >= 0], dtype=np.int64)
        if not len(rids):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        sims = self.vf.rows(rids) @ vec
        order = np.lexsort((rids, -sims))[:k]
        return rids[order], sims[order]

    def vector(self, rid: int) -> np.ndarray | None:
        return self.vf.rows(np.asarray([rid], dtype=np.int64))[0]


def fts_keyword(conn: sqlite3.Connection, prefixes: Iterable[Namespace], terms: list[str]
                ) -> tuple[np.ndarray, np.ndarray]:
    """(rids, BM25) of rows under ``prefixes`` matching any of ``terms``, scored by FTS5 itself.

    What the in-memory index computes (it mirrors this ``bm25()``), without loading postings.
    """
    from memory.backends.sqlite_schema import ns_term

    if not terms:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    quoted = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    nss = " OR ".join(ns_term(p) for p in prefixes)
    rows = conn.execute(
        "SELECT rowid, bm25(memories_fts, 0.0, 1.0) FROM memories_fts WHERE memories_fts MATCH ?",
        (f"nsk : ({nss}) AND terms : ({quoted})",)).fetchall()
    rids = np.fromiter((r for r, _ in rows), dtype=np.int64, count=len(rows))
    scores = np.fromiter((-s for _, s in rows), dtype=np.float32, count=len(rows))
    keep = scores > 0
    return rids[keep], scores[keep]


__all__ = ["StreamIndex", "fts_keyword"]
