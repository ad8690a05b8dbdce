"""An in-memory exact vector index, partitioned by namespace.

Vectors of one namespace sit in one contiguous float32 matrix, so a search scans only the
namespaces it is allowed to see (one BLAS mat-vec per namespace, no copies) and a tenant's
query cost does not grow with other tenants' data. Deletes swap the last row into the hole.

The scan runs with one BLAS thread. A mat-vec is bound by memory bandwidth, so a second thread
gains little on an idle machine, and on a busy one (2 cores, an LLM client, a server) waiting
for the second thread to be scheduled cost 5-10x: 10 namespaces x 10k rows took 76-120 ms with
OpenBLAS' default 2 threads and 16-23 ms with one, measured in the same process under load.
Large scans (``SPLIT_MIN_FLOATS``) are instead split in two halves, one on a worker thread: numpy
releases the GIL, and a Python thread blocks instead of spinning, so a busy core delays the
search by a time slice at worst. Same 10 x 10k under load: p50 13 ms split vs 17-19 ms single.

Large scans are also two-stage, and still exact. Sentence embeddings keep most of their energy
in a few directions (90% of it lies in the top 64 of 512 principal directions on the bench
corpus, 192 on LoCoMo conversation turns), so each block keeps a projection of its rows onto
those directions (12-38% more memory) plus the norm of what the projection leaves out. The
first stage scans the projections (that share of the bytes); the best candidates are then
scored exactly on the full vectors. Cauchy-Schwarz bounds what the left-out part can add
(|v_rest . q_rest| <= |v_rest| |q_rest|), so every other row whose bound could still beat the
k-th exact score is scored exactly too: the result is the exact top-k whatever the data. On
data without such directions the bound admits many rows and the search falls back to the
plain full scan. The directions are found by the first large search (0.9-1.7 s at 100k rows,
once; again after the index grows REFIT_GROWTH-fold); how many are kept: see fit_basis.

At 1M rows in 3,000 namespaces the per-namespace bookkeeping, not the arithmetic, was most of a
search: a mat-vec per namespace, a full-length argpartition and concatenations per search, the
exact pass a mask per namespace. Now the candidates' threshold comes from a sample of the
first-stage scores, the left-out norms and row ids of a selection are concatenated once and
kept while no block changes (:class:`~memory.backends.vector_arena.Selection`), and namespaces
loaded together are scanned as one matrix (:mod:`memory.backends.vector_arena`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable

import numpy as np

from memory.backends import vector_arena
from memory.backends.vector_arena import Selection as _Selection
from memory.backends.vector_arena import top_m as _top_m
from memory.backends.vector_rows import MappedRows, RowMap
from memory.namespace import Namespace
from memory.worker import LazyWorker

try:
    from threadpoolctl import ThreadpoolController

    _limit_blas = ThreadpoolController().limit  # discovers the BLAS libraries once
except Exception:  # pragma: no cover - threadpoolctl is a dependency; degrade to the default
    _limit_blas = None


SPLIT_MIN_FLOATS = 20_000 * 512  # below this a thread hand-off (~0.1 ms) costs more than it saves
TWO_STAGE_MIN_ROWS = 20_000  # below this the full scan is a few ms and the second stage's
#                              gathers and bookkeeping would eat most of the gain
# Share of the vectors' energy the first stage keeps (see _ensure_basis). Measured at 100k rows,
# p50/p95 ms of the scan alone: LoCoMo turns (x17 with noise) .85: 6.6/10.8, .90: 7.0/10.9,
# .93: 8.9/13.2 (full scan 11.4/16.5); bench corpus .85: 4.7/7.7, .90: 4.3/6.1, .93: 4.5/5.6.
HEAD_ENERGY = 0.90
HEAD_KNEE = 3.0  # ... but not past the directions holding 3x the median one's energy (fit_basis)
# Changes whenever fit_basis would choose differently: a basis saved beside a store under
# another rule is fitted again (see memory.backends.sqlite_partitions.load_basis).
FIT_RULE = 2
FIT_SAMPLE = 8_000  # rows sampled to find the principal directions (~0.1 s, once)
REFIT_GROWTH = 8  # find them again once the index has grown this many times over
_serials = itertools.count()
# The second half of a two-stage scan runs here while the caller scans the first.
SCAN_WORKER = LazyWorker("memory-vector-scan")


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


def _top(rids: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if k < len(sims):
        part = np.argpartition(-sims, k - 1)[:k]
        sims, rids = sims[part], rids[part]
    order = np.argsort(-sims, kind="stable")
    return rids[order], sims[order]


def _rest_norm(v: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Norm of what projecting rows ``v`` onto ``basis`` leaves out, rounded up.

    Computed in float64 with slack (the 1e-7 under the root covers rounding in |v|^2 - |p|^2,
    which float32 would get wrong by ~1e-6 for unit vectors): the bound may only be too wide.
    """
    v64 = np.atleast_2d(v).astype(np.float64)
    p64 = v64 @ basis.astype(np.float64)
    left = np.einsum("ij,ij->i", v64, v64) - np.einsum("ij,ij->i", p64, p64)
    return (np.sqrt(np.maximum(left, 0.0) + 1e-7) * (1 + 1e-6)).astype(np.float32)


class _Block:
    __slots__ = ("vecs", "rids", "n", "proj", "rest", "projected", "version", "rest_max", "serial")

    def __init__(self, dim: int, cap: int = 16):
        self.vecs = np.zeros((cap, dim), dtype=np.float32)
        self.rids = np.zeros(cap, dtype=np.int64)
        self.n = 0
        # Two-stage scan state (see the module docstring): rows [0, projected) have their
        # projection in `proj` and the norm of the left-out part in `rest`. Filled lazily by
        # the first large search after rows were added, so writes never pay for it.
        self.proj: np.ndarray | None = None
        self.rest: np.ndarray | None = None
        self.projected = 0
        # Bumped by every change of n, rows or projections: VectorIndex caches per-selection
        # arrays built from blocks (see VectorIndex._selection) and checks them against it.
        self.version = 0
        self.rest_max = 0.0  # >= every rest[:projected] (may stay high after a delete: a bound)
        self.serial = next(_serials)  # never reused (id() is, once a dropped block is freed)

    def own(self) -> None:
        """Private, writable rows before a change: a block loaded as a view of the mapped
        ``<store>.partitions`` file (read-only, shared by every process) is copied on its
        first write, so the write stays in this process and the file is never changed."""
        if not self.vecs.flags.writeable:
            self.vecs = self.vecs.copy()
            self.version += 1
        if not self.rids.flags.writeable:
            self.rids = self.rids.copy()
        if self.proj is not None and not self.proj.flags.writeable:
            self.proj, self.rest = self.proj.copy(), self.rest.copy()  # type: ignore[union-attr]

    def append(self, rid: int, vec: np.ndarray) -> int:
        self.own()
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
        self.version += 1
        return self.n - 1

    def refresh(self, pos: int, basis: np.ndarray | None) -> None:
        """Row `pos` holds another vector now: redo its projection if it had one."""
        if pos < self.projected and basis is not None:
            self._project_rows(pos, pos + 1, basis)

    def project(self, basis: np.ndarray) -> None:
        """Project rows [projected, n) onto `basis` (dim x h)."""
        if self.projected >= self.n:
            return
        if self.proj is not None and not self.proj.flags.writeable:
            self.proj = self.rest = None  # the mapped file's (another basis): computed here instead
            self.projected = 0
        if self.proj is None or len(self.proj) < self.n or self.proj.shape[1] != basis.shape[1]:
            cap = len(self.rids)
            proj = np.zeros((cap, basis.shape[1]), dtype=np.float32)
            rest = np.zeros(cap, dtype=np.float32)
            if self.proj is not None and self.proj.shape[1] == basis.shape[1]:
                proj[: self.projected] = self.proj[: self.projected]
                rest[: self.projected] = self.rest[: self.projected]  # type: ignore[index]
            else:
                self.projected = 0
                self.rest_max = 0.0
            self.proj, self.rest = proj, rest
        if self.projected == 0:
            self.rest_max = 0.0  # every row is projected again (maybe onto a new basis)
        self._project_rows(self.projected, self.n, basis)
        self.projected = self.n

    def _project_rows(self, lo: int, hi: int, basis: np.ndarray) -> None:
        assert self.proj is not None and self.rest is not None
        v = self.vecs[lo:hi]
        self.proj[lo:hi] = v @ basis
        self.rest[lo:hi] = _rest_norm(v, basis)
        if hi > lo:
            self.rest_max = max(self.rest_max, float(self.rest[lo:hi].max()))
        self.version += 1


class VectorIndex:
    def __init__(self, dim: int, head_dims: int | None = None):
        self.dim = dim
        self._blocks: dict[Namespace, _Block] = {}
        # rid -> (namespace, position): a dict entry for rows of private blocks, none for rows of
        # blocks that are unchanged views of the mapped partitions file (see vector_rows).
        self._where = RowMap(self._blocks)
        self._fixed_head = head_dims  # None: chosen from the data (see _ensure_basis)
        self._basis: np.ndarray | None = None  # dim x head, found by the first large search
        self._fit_rows = 0
        self._sel_cache: tuple[list[tuple[int, int]], _Selection] | None = None  # see _selection
        self._arenas = vector_arena.Members()  # rows of each arena still held by blocks (eviction)
        self.last_plan = ""  # "full", "two-stage" or "two-stage->full": for tests and profiling
        # Where the two-stage basis comes from when the owner manages it (None: fitted here).
        self.basis_source: Callable[[], np.ndarray | None] | None = None

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, rid: int) -> bool:
        return rid in self._where

    def add(self, rid: int, ns: Namespace, vec: np.ndarray) -> None:
        loc = self._where.get(rid)
        if loc is not None:
            old_ns, pos = loc
            if old_ns == ns:
                self._where.own(ns)
                self._blocks[ns].own()
                self._blocks[ns].vecs[pos] = vec
                self._blocks[ns].version += 1
                self._blocks[ns].refresh(pos, self._basis)
                return
            self.remove(rid)
        block = self._blocks.get(ns)
        if block is None:
            block = self._blocks[ns] = _Block(self.dim)
        self._where.own(ns)
        self._where.rows[rid] = (ns, block.append(rid, vec))

    def remove(self, rid: int) -> None:
        loc = self._where.get(rid)
        if loc is None:
            return
        ns, pos = loc
        self._where.own(ns)
        del self._where.rows[rid]
        block = self._blocks[ns]
        block.own()
        last = block.n - 1
        if pos != last:
            moved = int(block.rids[last])
            block.vecs[pos] = block.vecs[last]
            block.rids[pos] = moved
            self._where.rows[moved] = (ns, pos)
            if pos < block.projected:
                if last < block.projected:
                    block.proj[pos] = block.proj[last]  # type: ignore[index]
                    block.rest[pos] = block.rest[last]  # type: ignore[index]
                else:
                    block.refresh(pos, self._basis)
        block.n = last
        block.projected = min(block.projected, last)
        block.version += 1
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
        """Top-k (rids, cosine) across the given namespaces, best first. Exact."""
        blocks = [self._blocks[ns] for ns in namespaces if ns in self._blocks]
        if not blocks or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if _limit_blas is None:
            return self._search(blocks, vec, k)
        with _limit_blas(limits=1, user_api="blas"):
            return self._search(blocks, vec, k)

    def _search(self, blocks: list[_Block], vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        total = sum(b.n for b in blocks)
        if total >= TWO_STAGE_MIN_ROWS and self._ensure_basis() is not None:
            found = self._two_stage(blocks, vec, k, total)
            if found is not None:
                self.last_plan = "two-stage"
                return found
            self.last_plan = "two-stage->full"
        else:
            self.last_plan = "full"
        parts = [(b.vecs[: b.n], b.rids[: b.n]) for b in blocks]
        sims = self._scan(parts, vec)
        s = np.concatenate(sims) if len(sims) > 1 else sims[0]
        r = np.concatenate([r for _, r in parts]) if len(parts) > 1 else parts[0][1]
        return _top(r, s, k)

    def _two_stage(self, blocks: list[_Block], vec: np.ndarray, k: int,
                   total: int) -> tuple[np.ndarray, np.ndarray] | None:
        basis = self._basis
        assert basis is not None
        vector_arena.project_arenas(blocks, basis, _rest_norm)
        for b in blocks:
            b.project(basis)
        sel = self._selection(blocks)
        qh = vec @ basis
        q_rest = float(_rest_norm(vec, basis)[0])
        if sel.plan is not None:
            # The arena's projection in one scan; then its rows in this selection, in block order.
            scores = self._scan([(sel.plan.proj, np.broadcast_to(np.int64(0), (len(sel.plan.proj),)))], qh)
            heads = [np.concatenate(scores)[sel.plan.pos]]
        else:
            heads = []
        heads += self._scan([(b.proj[: b.n], b.rids[: b.n]) for b in sel.outside], qh) if sel.outside else []  # type: ignore[index]
        hs = np.concatenate(heads) if len(heads) > 1 else heads[0]
        cand = _top_m(hs, min(total, max(4 * k, 256)), k)
        c_rids, c_sims = sel.exact(cand, vec)
        kk = min(k, len(c_sims))
        kth = np.partition(c_sims, len(c_sims) - kk)[len(c_sims) - kk]
        # Rows the first stage left out that could still reach the k-th exact score: their
        # first-stage score plus what the left-out part can add (Cauchy-Schwarz) must reach it.
        # The 1e-5 covers the float32 rounding of the first-stage scores. Rows that cannot pass
        # even with the largest left-out norm are dropped first, without reading `rest`.
        slack = 1e-5
        rest_max = max(b.rest_max for b in blocks)
        pre = np.flatnonzero(hs >= kth - q_rest * rest_max - slack)
        pre = pre[hs[pre] + q_rest * sel.rest[pre] + slack >= kth]
        extra = np.setdiff1d(pre, cand, assume_unique=True)
        if len(extra) > total // 4:
            return None  # no dominant directions in this data: the plain scan is cheaper
        if len(extra):
            e_rids, e_sims = sel.exact(extra, vec)
            c_rids, c_sims = np.concatenate([c_rids, e_rids]), np.concatenate([c_sims, e_sims])
        return _top(c_rids, c_sims, k)

    def _selection(self, blocks: list[_Block]) -> _Selection:
        """The blocks' rows as one numbering (see _Selection), kept while no block changes.

        Building it for 3,000 namespaces takes ~10 ms at 1M rows; a server searching the same
        selection again (every namespace, one kind) reuses it.
        """
        key = [(b.serial, b.version) for b in blocks]
        cached = self._sel_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        sel = _Selection(blocks)
        self._sel_cache = (key, sel)
        return sel

    def _ensure_basis(self) -> np.ndarray | None:
        """Principal directions of the stored vectors (uncentred: they serve dot products).

        With a ``basis_source`` (the SQLite backend: fitted on the whole store, persisted) the
        basis comes from it; otherwise it is fitted here on the loaded rows (see
        :func:`fit_basis`), again after the index grows REFIT_GROWTH-fold.
        """
        if self.basis_source is not None:
            basis = self.basis_source()
            if basis is not self._basis:
                self._basis = basis
                for b in self._blocks.values():
                    b.projected = 0
            return self._basis
        rows = len(self._where)
        if self._fit_rows and rows < REFIT_GROWTH * self._fit_rows:
            return self._basis
        rng = np.random.default_rng(0)  # a fixed sample: the same data gives the same basis
        take = min(rows, FIT_SAMPLE)
        picks = []
        for b in self._blocks.values():
            want = int(round(take * b.n / rows))
            if want:
                picks.append(b.vecs[rng.choice(b.n, size=min(want, b.n), replace=False)])
        self._fit_rows = rows
        for b in self._blocks.values():
            b.projected = 0
        self._basis = fit_basis(np.concatenate(picks), self.dim, self._fixed_head)
        return self._basis

    def add_block(self, ns: Namespace, rids: np.ndarray, vecs: np.ndarray,
                  mapped: tuple[MappedRows, int] | None = None) -> None:
        """Load a whole namespace at once (rows ``rids``, vectors ``vecs``); replaces its block.
        ``mapped``: (file, first slot) when ``rids``/``vecs`` are that file's rows from that slot
        on, in its order: the rows are then located through the file (no entry per row)."""
        self.drop_block(ns)
        # Rows that moved here from a mapped block (one file's namespaces never share a row, and
        # add_mapped turns the blocks of an older file private, so mapped loads skip this).
        for rid in self._where.in_mapped(ns, rids) if mapped is None else ():
            self.remove(rid)
        block = _Block(self.dim, cap=0)
        # Adopted, not copied (a partition load hands over fresh arrays); append() reallocates.
        block.vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        # A read-only view (of the mapped partitions file) is kept as one; Block.own copies it.
        block.rids = rids if not rids.flags.writeable and rids.dtype == np.int64 else np.array(rids, dtype=np.int64)
        block.n = len(rids)
        self._blocks[ns] = block
        self._arenas.joined(block.vecs)
        if mapped is not None:
            while moved := self._where.add_mapped(ns, *mapped):
                for rid in moved:  # rows that moved here from another loaded (private) block
                    self.remove(rid)
            return
        where = self._where.rows
        for pos, rid in enumerate(rids.tolist()):
            old = where.get(rid)
            if old is not None and old[0] != ns:  # the row moved here from another loaded block
                self.remove(rid)
            where[rid] = (ns, pos)

    def drop_block(self, ns: Namespace) -> None:
        """Forget a namespace's rows (eviction); they are loaded again on demand."""
        block = self._blocks.pop(ns, None)
        if block is None:
            return
        self._sel_cache = None  # it may hold the arena this block was a view of: let it go
        self._where.forget(ns, block)
        # Most of its arena is gone: free the rest of it (a mapped, read-only arena costs no
        # private memory, and copying its views out would).
        if self._arenas.left(block.vecs) and block.vecs.base.flags.writeable:
            vector_arena.copy_out(self._blocks.values(), block.vecs.base)

    def has_block(self, ns: Namespace) -> bool:
        return ns in self._blocks

    def search_rids(self, rids: np.ndarray, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (rids, cosine) among the given rows only (rows not indexed are skipped)."""
        found = [(int(r), loc) for r in rids.tolist() if (loc := self._where.get(r)) is not None]
        if not found:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        mat = np.stack([self._blocks[ns].vecs[pos] for _, (ns, pos) in found])
        r = np.asarray([rid for rid, _ in found], dtype=np.int64)
        return _top(r, mat @ vec, k)

    @staticmethod
    def _scan(parts: list[tuple[np.ndarray, np.ndarray]], vec: np.ndarray) -> list[np.ndarray]:
        """One mat-vec per (matrix, rids) part; big scans in two halves on two threads."""
        if sum(m.size for m, _ in parts) < SPLIT_MIN_FLOATS or (os.cpu_count() or 1) < 2:
            return [m @ vec for m, _ in parts]
        first, second = _halves(parts)
        later = SCAN_WORKER.submit(lambda: [m @ vec for m, _ in second])
        sims = [m @ vec for m, _ in first]
        sims.extend(later.result())
        return sims

    def size(self, namespaces: list[Namespace]) -> int:
        return sum(self._blocks[ns].n for ns in namespaces if ns in self._blocks)


def fit_basis(sample: np.ndarray, dim: int, head: int | None = None) -> np.ndarray | None:
    """The fewest principal directions of ``sample`` holding HEAD_ENERGY of its energy, cut
    where the spectrum turns flat (HEAD_KNEE).

    The bound's slack is what they leave out. On the bench corpus that is 64 of 512 dims; on
    LoCoMo conversation turns 192, where ~6% of rows then need an exact check. Data that needs
    more than half the dims for HEAD_ENERGY gets no basis (None): the plain scan is as fast.

    The knee: directions whose energy is under HEAD_KNEE x the median direction's are the flat
    (noise-like) part of the spectrum. Each one adds a column to the first stage, i.e. 4 bytes
    per row read by every search, and tightens the bound by little, because flat energy is
    spread over all of them. The 1M bench store (the 100k corpus x 10 with sigma 0.02 noise)
    holds 90% of its energy in 224 directions but only 73 above 3x the median: measured at 1M
    rows in 3,000 namespaces (scan alone, same process, load ~4), head 224: p50 113 ms; 128:
    75; 96: 69; 80 and 64: about the same as 96. The clean 100k corpus keeps 64 (its knee is at
    130 directions): 48 there took p50 9.9 vs 8.9 ms, 32 fell back to the full scan.
    """
    s64 = sample.astype(np.float64)
    if _limit_blas is None:
        energy, vecs = np.linalg.eigh(s64.T @ s64)
    else:
        # One BLAS thread: on the busy 2-core host OpenBLAS's second thread spun, and a 20k x 512
        # fit took 3.2-7.3 s wall (2.2-4.2 s CPU) instead of 0.29-0.34 s (load ~5). It ran at
        # the end of every bulk import that first crossed TWO_STAGE_MIN_ROWS.
        with _limit_blas(limits=1, user_api="blas"):
            energy, vecs = np.linalg.eigh(s64.T @ s64)
    energy, vecs = energy[::-1], vecs[:, ::-1]
    if head is None:
        share = np.cumsum(energy) / max(float(energy.sum()), 1e-12)
        by_energy = int(np.searchsorted(share, HEAD_ENERGY)) + 1
        if by_energy > dim // 2:
            return None
        above_knee = int((energy > HEAD_KNEE * float(np.median(energy))).sum())
        head = -(-max(1, min(by_energy, above_knee)) // 16) * 16
    if head > dim // 2:
        return None
    return np.ascontiguousarray(vecs[:, :head], dtype=np.float32)
