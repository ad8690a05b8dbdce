"""An in-memory exact vector index, partitioned by namespace.

Vectors of one namespace sit in one contiguous float32 matrix, so a search scans only the
namespaces it is allowed to see (one BLAS mat-vec per namespace, no copies) and a tenant's
query cost does not grow with other tenants' data. Deletes swap the last row into the hole.

The scan runs with one BLAS thread. A mat-vec is bound by memory bandwidth, so a second thread
gains little on an idle machine, and on a busy one (2 cores, an LLM client, a server) waiting
for the second thread to be scheduled cost 5-10x: 10 namespaces x 10k rows took 76-120 ms with
OpenBLAS' default 2 threads and 16-23 ms with one, measured in the same process under load.
Large scans (``SPLIT_MIN_ROWS``) are instead split in two halves, one on a worker thread: numpy
releases the GIL, and a Python thread blocks instead of spinning, so a busy core delays the
search by a time slice at worst. Same 10 x 10k under load: p50 13 ms split vs 17-19 ms single.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memory.namespace import Namespace

try:
    from threadpoolctl import ThreadpoolController

    _limit_blas = ThreadpoolController().limit  # discovers the BLAS libraries once
except Exception:  # pragma: no cover - threadpoolctl is a dependency; degrade to the default
    _limit_blas = None


SPLIT_MIN_ROWS = 20_000  # below this a thread hand-off (~0.1 ms) costs more than it saves
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _scan_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-vector-scan")
        return _pool


def _halves(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[tuple[np.ndarray, np.ndarray]], ...]:
    """Split (matrix, rids) parts into two runs of about equal rows, cutting one part if needed."""
    half = sum(len(r) for _, r in parts) // 2
    first: list[tuple[np.ndarray, np.ndarray]] = []
    second: list[tuple[np.ndarray, np.ndarray]] = []
    seen = 0
    for m, r in parts:
        if seen >= half:
            second.append((m, r))
        elif seen + len(r) <= half:
            first.append((m, r))
        else:
            cut = half - seen
            first.append((m[:cut], r[:cut]))
            second.append((m[cut:], r[cut:]))
        seen += len(r)
    return first, second


class _Block:
    __slots__ = ("vecs", "rids", "n")

    def __init__(self, dim: int, cap: int = 16):
        self.vecs = np.zeros((cap, dim), dtype=np.float32)
        self.rids = np.zeros(cap, dtype=np.int64)
        self.n = 0

    def append(self, rid: int, vec: np.ndarray) -> int:
        if self.n == len(self.rids):
            cap = max(16, 2 * self.n)
            vecs = np.zeros((cap, self.vecs.shape[1]), dtype=np.float32)
            vecs[: self.n] = self.vecs[: self.n]
            rids = np.zeros(cap, dtype=np.int64)
            rids[: self.n] = self.rids[: self.n]
            self.vecs, self.rids = vecs, rids
        self.vecs[self.n] = vec
        self.rids[self.n] = rid
        self.n += 1
        return self.n - 1


class VectorIndex:
    def __init__(self, dim: int):
        self.dim = dim
        self._blocks: dict[Namespace, _Block] = {}
        self._where: dict[int, tuple[Namespace, int]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, rid: int) -> bool:
        return rid in self._where

    def add(self, rid: int, ns: Namespace, vec: np.ndarray) -> None:
        if rid in self._where:
            old_ns, pos = self._where[rid]
            if old_ns == ns:
                self._blocks[ns].vecs[pos] = vec
                return
            self.remove(rid)
        block = self._blocks.get(ns)
        if block is None:
            block = self._blocks[ns] = _Block(self.dim)
        self._where[rid] = (ns, block.append(rid, vec))

    def remove(self, rid: int) -> None:
        loc = self._where.pop(rid, None)
        if loc is None:
            return
        ns, pos = loc
        block = self._blocks[ns]
        last = block.n - 1
        if pos != last:
            moved = int(block.rids[last])
            block.vecs[pos] = block.vecs[last]
            block.rids[pos] = moved
            self._where[moved] = (ns, pos)
        block.n = last
        if block.n == 0:
            del self._blocks[ns]

    def vector(self, rid: int) -> np.ndarray | None:
        loc = self._where.get(rid)
        if loc is None:
            return None
        ns, pos = loc
        return self._blocks[ns].vecs[pos]

    def matching(self, prefixes: Iterable[Namespace]) -> list[Namespace]:
        prefixes = list(prefixes)
        return [ns for ns in self._blocks if any(ns[: len(p)] == p for p in prefixes)]

    def search(self, namespaces: list[Namespace], vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (rids, cosine) across the given namespaces, best first."""
        sims: list[np.ndarray] = []
        rids: list[np.ndarray] = []
        if _limit_blas is None:
            self._scan(namespaces, vec, sims, rids)
        else:
            with _limit_blas(limits=1, user_api="blas"):
                self._scan(namespaces, vec, sims, rids)
        if not sims:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        s = np.concatenate(sims) if len(sims) > 1 else sims[0]
        r = np.concatenate(rids) if len(rids) > 1 else rids[0]
        if k < len(s):
            part = np.argpartition(-s, k - 1)[:k]
            s, r = s[part], r[part]
        order = np.argsort(-s, kind="stable")
        return r[order], s[order]

    def search_rids(self, rids: np.ndarray, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (rids, cosine) among the given rows only (rows not indexed are skipped)."""
        where = self._where
        present = [int(r) for r in rids.tolist() if r in where]
        if not present:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        mat = np.stack([self._blocks[where[r][0]].vecs[where[r][1]] for r in present])
        r = np.asarray(present, dtype=np.int64)
        s = mat @ vec
        if k < len(s):
            part = np.argpartition(-s, k - 1)[:k]
            s, r = s[part], r[part]
        order = np.argsort(-s, kind="stable")
        return r[order], s[order]

    def _scan(self, namespaces: list[Namespace], vec: np.ndarray, sims: list[np.ndarray],
              rids: list[np.ndarray]) -> None:
        parts = [(b.vecs[: b.n], b.rids[: b.n]) for b in (self._blocks[ns] for ns in namespaces)]
        if sum(len(r) for _, r in parts) < SPLIT_MIN_ROWS or (os.cpu_count() or 1) < 2:
            for m, r in parts:
                sims.append(m @ vec)
                rids.append(r)
            return
        first, second = _halves(parts)
        later = _scan_pool().submit(lambda: [m @ vec for m, _ in second])
        sims.extend(m @ vec for m, _ in first)
        sims.extend(later.result())
        rids.extend(r for _, r in first)
        rids.extend(r for _, r in second)

    def size(self, namespaces: list[Namespace]) -> int:
        return sum(self._blocks[ns].n for ns in namespaces)
