"""Where each row of a :class:`~memory.backends.vector_index.VectorIndex` sits: row id ->
(namespace, position in its block).

Why not one dict: a dict entry per row (an int key, a tuple, an int position) is ~150 bytes, so
a process that had loaded every partition of a 100k store held 15 MB of them, private to the
process, even when the vectors themselves were views of the shared ``<store>.partitions`` file.
A block loaded as such a view (*mapped*) keeps the file's order: the file's rows are sorted by
namespace, then row id, and its ``rid_slot`` array maps a row id to its slot. So a mapped
block's rows need no entry at all: a row's slot minus the block's first slot is its position,
as long as the block is unchanged. The first change of a mapped block (a write, a delete, a row
moving in or out) gives its rows dict entries (:meth:`RowMap.own`, one namespace's rows), after
which it is a private block like any other. Rows of private blocks (loaded from SQLite and the
vector file, or written in this process) have dict entries, as before.

Invariant: a row id is in at most one place, either the dict or an unchanged mapped block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from memory.namespace import Namespace

if TYPE_CHECKING:
    from memory.backends.vector_index import _Block


class MappedRows(Protocol):
    """What a mapped file offers for lookups (:class:`~memory.backends.shared_base.SharedBase`)."""

    rid_slot: np.ndarray  # row id -> slot (-1: not in the file)
    slot_ns: np.ndarray  # slot -> namespace code
    ns_list: list[Namespace]  # namespace code -> namespace
    ns_code: dict[Namespace, int]  # namespace -> code


class RowMap:
    """Row id -> (namespace, position); see the module docstring."""

    def __init__(self, blocks: dict[Namespace, _Block]) -> None:
        self.rows: dict[int, tuple[Namespace, int]] = {}  # rows of private blocks
        self._blocks = blocks  # the index's own dict (read here, never changed)
        self.base: MappedRows | None = None  # the file every unchanged mapped block is a view of
        self.starts: dict[Namespace, int] = {}  # unchanged mapped block -> its first slot
        self.mapped_rows = 0  # rows in those blocks

    def __len__(self) -> int:
        return len(self.rows) + self.mapped_rows

    def __contains__(self, rid: int) -> bool:
        return self.get(rid) is not None

    def get(self, rid: int) -> tuple[Namespace, int] | None:
        loc = self.rows.get(rid)
        if loc is not None or not self.starts:
            return loc
        base = self.base
        assert base is not None
        if not 0 <= rid < len(base.rid_slot):
            return None
        slot = int(base.rid_slot[rid])
        if slot < 0:
            return None
        ns = base.ns_list[int(base.slot_ns[slot])]
        start = self.starts.get(ns)
        if start is None:
            return None
        pos = slot - start
        block = self._blocks[ns]
        if not 0 <= pos < block.n or int(block.rids[pos]) != rid:
            return None
        return ns, pos

    def own(self, ns: Namespace) -> None:
        """Before ``ns``'s block changes: its rows get dict entries (a no-op for private blocks)."""
        start = self.starts.pop(ns, None)
        if start is None:
            return
        block = self._blocks[ns]
        self.mapped_rows -= block.n
        self.rows.update(zip(block.rids[: block.n].tolist(), ((ns, p) for p in range(block.n)), strict=True))

    def add_mapped(self, ns: Namespace, base: MappedRows, start: int) -> list[int]:
        """``ns``'s block (just added) is rows ``start``.. of ``base``, in the file's order.

        Returns the rows that were already located elsewhere (another block, in the dict): the
        caller removes them from there first; call again afterwards."""
        if base is not self.base:
            for other in list(self.starts):  # blocks of an older file: private from now on
                self.own(other)
            self.base = base
        block = self._blocks[ns]
        if self.rows:
            elsewhere = [r for r in block.rids[: block.n].tolist() if r in self.rows and self.rows[r][0] != ns]
            if elsewhere:
                return elsewhere
        self.starts[ns] = start
        self.mapped_rows += block.n
        return []

    def in_mapped(self, ns: Namespace, rids: np.ndarray) -> list[int]:
        """Rows of ``rids`` that sit in an unchanged mapped block other than ``ns``'s."""
        if not self.starts:
            return []
        base = self.base
        assert base is not None
        rids = np.asarray(rids, dtype=np.int64)
        inside = (rids >= 0) & (rids < len(base.rid_slot))
        slots = np.full(len(rids), -1, dtype=np.int64)
        slots[inside] = base.rid_slot[rids[inside]]
        codes = np.asarray([base.ns_code[m] for m in self.starts if m != ns], dtype=np.int64)
        hit = np.flatnonzero(slots >= 0)
        hit = hit[np.isin(base.slot_ns[slots[hit]], codes)]  # file rows of unchanged mapped blocks
        return [r for r in rids[hit].tolist() if (loc := self.get(r)) is not None and loc[0] != ns]

    def forget(self, ns: Namespace, block: _Block) -> None:
        """``ns``'s block is dropped: its rows are no longer located anywhere."""
        if self.starts.pop(ns, None) is not None:
            self.mapped_rows -= block.n
            return
        rows = self.rows
        for rid in block.rids[: block.n].tolist():
            if rows.get(rid, (None,))[0] == ns:
                del rows[rid]


__all__ = ["MappedRows", "RowMap"]
