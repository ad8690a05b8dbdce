"""Namespaces loaded together and searched together: one matrix instead of thousands of blocks.

A search over every namespace of a 1M-row store (3,000 namespaces) spent most of its time in
per-namespace bookkeeping, not in arithmetic: 3,000 first-stage mat-vecs, then ~2,500 gathers
for the rows the bound leaves to check exactly (~10 us of Python and numpy overhead each).
When the SQLite backend loads many namespaces in one go (``load_partitions``), their vectors
already arrive as one matrix (the *arena*), in namespace order; their blocks keep views into it
instead of private copies, and their projections are computed for the whole arena at once into
views of one projection matrix. A large search whose blocks are mostly views of one arena then
scans the arena's projection in one mat-vec (two threads) and gathers the rows to check with
one fancy index. Blocks that left the arena (grown past their rows by a write, which moves them
to private arrays) or never were in one are searched block by block, as before, in the same
search; the result is the same exact top-k either way.

The cost: an evicted namespace's rows stay in memory while other namespaces are views of the
same arena (numpy frees a matrix with its last view). Once the namespaces left hold under
ARENA_MIN_SHARE of it, they get private copies and the arena is freed (:class:`Members`), so
what stays loaded is at most ~2x what the eviction budget counts. Arenas are made only by loads
of at least ``ARENA_MIN_ROWS`` rows, which are the searches over most of a store.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from memory.backends.vector_index import _Block

ARENA_MIN_ROWS = 20_000  # loads at least this large keep views into one matrix (load_partitions)
ARENA_MIN_SHARE = 0.5  # search via the arena when the selection holds at least this share of it
PROJECT_CHUNK = 65_536  # rows projected per step (the norm of the rest is computed in float64)
EXACT_CHUNK = 2_048  # rows gathered at a time for the exact pass over an arena (4 MB at 512 dims)


def arena_of(vecs: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(arena matrix, first row) when ``vecs`` is a run of whole rows of a 2-D C-contiguous matrix."""
    base = vecs.base
    if (not isinstance(base, np.ndarray) or base.ndim != 2 or not base.flags.c_contiguous
            or base.dtype != vecs.dtype or base.shape[1:] != vecs.shape[1:] or not vecs.flags.c_contiguous):
        return None
    row = base.strides[0]
    off = vecs.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if off < 0 or off % row or off // row + len(vecs) > len(base):
        return None
    return base, off // row


# Arenas whose projection onto a basis was computed ahead (the mapped <store>.partitions file
# holds one): id(arena) -> weak refs to (arena, basis, projection, left-out norms). Weak: the
# owner (SharedBase) keeps them, and a closed store's mapping must not outlive it here.
_PROJECTED: dict[int, tuple[weakref.ref[np.ndarray], ...]] = {}
_projected_lock = threading.Lock()


def register_projection(arena: np.ndarray, basis: np.ndarray, proj: np.ndarray, rest: np.ndarray) -> None:
    """``proj``/``rest``: ``arena``'s rows projected onto ``basis`` and the norms of what that
    leaves out (rounded up as ``rest_norm`` does); used instead of computing them again while
    the caller keeps all four alive."""
    with _projected_lock:  # backends in several threads may open stores at once
        for k in [k for k, v in _PROJECTED.items() if any(r() is None for r in v)]:
            del _PROJECTED[k]  # freed since (ids are reused)
        _PROJECTED[id(arena)] = tuple(weakref.ref(x) for x in (arena, basis, proj, rest))


def _projected(arena: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    refs = _PROJECTED.get(id(arena))
    got = None if refs is None else [r() for r in refs]
    if got is None or any(x is None for x in got) or got[0] is not arena or not np.array_equal(got[1], basis):
        return None
    return got[2], got[3]


def project_arenas(blocks: Iterable[_Block], basis: np.ndarray,
                   rest_norm: object) -> None:
    """Project, arena by arena, the blocks that have no projection yet and are views of an arena
    they fill at least ARENA_MIN_SHARE of: one matrix product per arena, views handed out."""
    groups: dict[int, tuple[np.ndarray, list[tuple[_Block, int]]]] = {}
    for b in blocks:
        if b.projected or b.n == 0 or len(b.vecs) != len(b.rids):
            continue
        found = arena_of(b.vecs)
        if found is not None:
            groups.setdefault(id(found[0]), (found[0], []))[1].append((b, found[1]))
    for arena, members in groups.values():
        saved = _projected(arena, basis)
        if saved is not None:
            proj, rest = saved  # read-only views of the mapped file: nothing computed
        elif sum(len(b.vecs) for b, _ in members) < ARENA_MIN_SHARE * len(arena):
            continue
        else:
            proj = np.empty((len(arena), basis.shape[1]), dtype=np.float32)
            rest = np.empty(len(arena), dtype=np.float32)
            for lo in range(0, len(arena), PROJECT_CHUNK):
                part = arena[lo : lo + PROJECT_CHUNK]
                proj[lo : lo + len(part)] = part @ basis
                rest[lo : lo + len(part)] = rest_norm(part, basis)  # type: ignore[operator]
        for b, off in members:
            cap = len(b.vecs)
            b.proj, b.rest = proj[off : off + cap], rest[off : off + cap]
            b.projected = b.n
            b.rest_max = float(b.rest[: b.n].max())
            b.version += 1


class Members:
    """Rows of each arena still held by the blocks that were loaded as its views.

    An evicted block's rows stay in memory while other blocks are views of the same arena; once
    the blocks left hold under ARENA_MIN_SHARE of it, :func:`copy_out` gives them private copies
    and the arena is freed, so eviction keeps what is loaded within ~2x what the budget counts.
    (A block that grew out of its arena still counts here: the arena is freed a little later.)
    """

    def __init__(self) -> None:
        self._live: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}

    def joined(self, vecs: np.ndarray) -> None:
        found = arena_of(vecs)
        if found is None:
            return
        arena = found[0]
        ref, rows = self._live.get(id(arena), (None, 0))
        if ref is None or ref() is not arena:  # a new arena (ids are reused once one is freed)
            ref, rows = weakref.ref(arena), 0
        self._live[id(arena)] = (ref, rows + len(vecs))

    def left(self, vecs: np.ndarray) -> bool:
        """Count ``vecs`` out of its arena; True when the arena should now be copied out."""
        found = arena_of(vecs)
        if found is None:
            return False
        arena = found[0]
        ref, rows = self._live.get(id(arena), (None, 0))
        if ref is None or ref() is not arena:
            return False
        rows -= len(vecs)
        if rows < ARENA_MIN_SHARE * len(arena):
            del self._live[id(arena)]
            return rows > 0  # 0: it was the only one (a one-namespace load), nothing to copy
        self._live[id(arena)] = (ref, rows)
        return False


def copy_out(blocks: Iterable[_Block], arena: np.ndarray) -> None:
    """Give every block that is a view of ``arena`` its own vectors and projections."""
    for b in blocks:
        found = arena_of(b.vecs)
        if found is None or found[0] is not arena:
            continue
        b.vecs = b.vecs.copy()
        if b.proj is not None and arena_of(b.proj) is not None:
            b.proj = b.proj.copy()
            b.rest = None if b.rest is None else b.rest.copy()
        b.version += 1


class ArenaPlan:
    """How one search reads its blocks: the arena's blocks first (rows ``pos`` of the arena, in
    block order), then the other blocks one by one."""

    __slots__ = ("arena", "proj", "pos", "inside", "outside")

    def __init__(self, arena: np.ndarray, proj: np.ndarray, pos: np.ndarray, inside: list[_Block],
                 outside: list[_Block]):
        self.arena, self.proj, self.pos, self.inside, self.outside = arena, proj, pos, inside, outside


def plan(blocks: list[_Block]) -> ArenaPlan | None:
    """An ArenaPlan when most of the selection's rows sit in one arena whose projection matrix
    their projections are views of; None: search block by block."""
    by_arena: dict[tuple[int, int], list[tuple[_Block, int]]] = {}
    arenas: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for b in blocks:
        if b.proj is None or b.projected < b.n:
            continue
        v = arena_of(b.vecs)
        p = arena_of(b.proj)
        if v is None or p is None or v[1] != p[1] or len(v[0]) != len(p[0]):
            continue
        key = (id(v[0]), id(p[0]))  # the same vectors may have been projected twice (two bases)
        by_arena.setdefault(key, []).append((b, v[1]))
        arenas[key] = (v[0], p[0])
    if not by_arena:
        return None
    key = max(by_arena, key=lambda a: sum(b.n for b, _ in by_arena[a]))
    arena, proj = arenas[key]
    members = by_arena[key]
    rows = sum(b.n for b, _ in members)
    if rows < ARENA_MIN_SHARE * len(arena):
        return None
    pos = np.concatenate([np.arange(off, off + b.n) for b, off in members])
    inside = {id(b) for b, _ in members}
    return ArenaPlan(arena, proj, pos, [b for b, _ in members], [b for b in blocks if id(b) not in inside])


def exact_rows(blocks: list[_Block], offsets: np.ndarray, idx: np.ndarray, vec: np.ndarray,
           rids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rids, exact cosine) of rows ``idx``, numbered across ``blocks`` as one concatenation
    (``rids``: the blocks' row ids concatenated the same way); in ascending ``idx`` order.

    Sorted positions come grouped by block, so each block costs one gather and one mat-vec:
    at 1M rows in 3,000 namespaces the bound can leave ~13k rows in ~2,500 blocks to check, and
    a mask per block (rows x blocks comparisons) or per-row bookkeeping was most of a search.
    """
    idx = np.sort(idx)
    if not len(idx):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    which = np.searchsorted(offsets, idx, side="right") - 1
    cuts = np.flatnonzero(np.diff(which)) + 1
    pos = idx - offsets[which]
    sims = [blocks[j].vecs[p] @ vec for j, p in zip(which[np.r_[0, cuts]].tolist(), np.split(pos, cuts), strict=True)]
    return rids[idx], np.concatenate(sims) if len(sims) > 1 else sims[0]


def top_m(hs: np.ndarray, m: int, k: int) -> np.ndarray:
    """Positions of about the ``m`` largest first-stage scores (at least ``k`` of them).

    Only seeds the k-th exact score the bound is checked against, so any ``k`` or more rows
    are correct here, good ones are just cheaper. Above ~64m rows the threshold comes from
    every 16th score (a full argpartition of 1M scores took 10-25 ms, this ~2 ms).
    """
    n = len(hs)
    if m >= n:
        return np.arange(n)
    if n >= 64 * m:
        sample = hs[::16]
        want = max(1, m // 16)
        t = np.partition(sample, len(sample) - want)[len(sample) - want]
        cand = np.flatnonzero(hs >= t)
        if max(k, m // 4) <= len(cand) <= 8 * m:
            return cand
    return np.argpartition(-hs, m - 1)[:m]


class Selection:
    """The rows of a list of blocks numbered as one concatenation: the blocks of one arena first
    (``plan``, see :mod:`memory.backends.vector_arena`), then the others (``outside``) in order;
    their left-out norms (``rest``) and row ids (``rids``) in that numbering."""

    __slots__ = ("plan", "outside", "offsets", "rest", "rids", "n_inside")

    def __init__(self, blocks: list[_Block]):
        self.plan = plan(blocks)
        order = blocks if self.plan is None else self.plan.inside + self.plan.outside
        self.outside = blocks if self.plan is None else self.plan.outside
        self.n_inside = 0 if self.plan is None else len(self.plan.pos)
        self.offsets = np.cumsum([0] + [b.n for b in self.outside])
        self.rest = np.concatenate([b.rest[: b.n] for b in order])  # type: ignore[index]
        self.rids = np.concatenate([b.rids[: b.n] for b in order])

    def exact(self, idx: np.ndarray, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rids, exact cosine) of rows ``idx`` of this numbering."""
        if self.plan is None:
            return exact_rows(self.outside, self.offsets, idx, vec, self.rids)
        inside = idx[idx < self.n_inside]
        out_r, out_s = exact_rows(self.outside, self.offsets, idx[idx >= self.n_inside] - self.n_inside, vec,
                              self.rids[self.n_inside :])
        rows = self.plan.pos[inside]
        inside, rows = inside[np.argsort(rows)], np.sort(rows)  # reads move forward through the arena
        # In pieces: one gather of 40k rows (80 MB) cost more in page faults than in reading.
        in_s = np.concatenate([np.zeros(0, dtype=np.float32)] + [
            self.plan.arena[rows[a : a + EXACT_CHUNK]] @ vec for a in range(0, len(rows), EXACT_CHUNK)])
        return np.concatenate([self.rids[inside], out_r]), np.concatenate([in_s, out_s])


__all__ = ["ARENA_MIN_ROWS", "ARENA_MIN_SHARE", "ArenaPlan", "Members", "Selection", "arena_of", "copy_out",
           "exact_rows", "plan", "project_arenas", "register_projection", "top_m"]
