"""Load only what a search needs: per-namespace partitions of the SQLite backend's indexes.

Opening a store reads nothing but the schema. The first operation that needs to know which
namespaces exist builds a *catalogue* (row id -> namespace code, one int32 per row, grouped
over the ``memories_ns`` index) of the prefixes it asks about, extended on demand
(:mod:`memory.backends.sqlite_catalogue`). A search is first served straight from the files
(:class:`~memory.backends.sqlite_stream.StreamIndex`); once its selection of namespaces is
searched again (see ``PartitionMixin._plan``) it loads their partitions, and only those: their
vectors gathered from the vector file (:mod:`memory.backends.vector_file`) and their BM25
postings from the FTS5 table. Partitions are kept in LRU order and evicted once the loaded
ones exceed the memory budget (``MemorySettings.index_memory_mb``). A partition unchanged since
``<store>.partitions`` was written is loaded as a read-only view of that mapped file instead of
a private copy (:mod:`memory.backends.shared_base`; written by the first load of
ARENA_MIN_ROWS rows or more), so processes searching one store share its pages.

BM25 needs collection statistics over the *whole* store (row count, average length, each
term's document frequency), which a partial index cannot count. They are read from FTS5
itself, so scores stay equal to its ``bm25()``: the row count and total length from the
FTS5 "averages" record, document frequencies from the ``fts5vocab`` table (cached until the
file changes).

The two-stage scan's projection basis is fitted on a sample of the whole vector file and
saved beside it (``<file>.vectors.basis.npz``, tied to the store's tag); a process opening the
store reuses it instead of refitting, and refits (and overwrites it) once the store has grown
REFIT_GROWTH-fold since the fit.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

import numpy as np

from memory.backends import shared_base, vector_index
from memory.backends.keyword_index import KeywordIndex
from memory.backends.shared_base import SharedBase, open_base, partitions_path
from memory.backends.sqlite_catalogue import NsCatalogue
from memory.backends.sqlite_stream import StreamIndex
from memory.backends.vector_arena import ARENA_MIN_ROWS
from memory.backends.vector_file import VectorFile, file_tag, sidecar_path
from memory.backends.vector_index import FIT_RULE, FIT_SAMPLE, REFIT_GROWTH, VectorIndex, fit_basis
from memory.namespace import Namespace

log = logging.getLogger("memory.partitions")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """One SQLite varint (as FTS5 writes them) at ``pos``: (value, next position)."""
    v = 0
    for i in range(9):
        b = buf[pos + i]
        if i == 8:
            return (v << 8) | b, pos + 9
        v = (v << 7) | (b & 0x7F)
        if not b & 0x80:
            return v, pos + i + 1
    raise ValueError("bad varint")  # pragma: no cover - the loop always returns


def fts_totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens in all columns) of ``memories_fts``: FTS5's own BM25 statistics, read from
    its "averages" record (rowid 1 of the ``_data`` shadow table) instead of counting rows."""
    row = conn.execute("SELECT block FROM memories_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    n, pos = _varint(row[0], 0)
    total = 0
    for _ in range(2):  # columns nsk and terms
        if pos >= len(row[0]):
            break
        t, pos = _varint(row[0], pos)
        total += t
    return n, total


def fts_df(conn: sqlite3.Connection, terms: Iterable[str]) -> dict[str, int]:
    """Rows whose ``terms`` column contains each term (terms with none are left out)."""
    # One statement for all the terms (SQLite runs the IN list as one term lookup each): a write's
    # neighbour query and the next search after it re-read ~30 terms (the cache is dropped on every
    # change), one statement each: 0.8 vs 0.5 ms idle, and each statement is a GIL hand-over
    # while a background write and a foreground search run together.
    out: dict[str, int] = {}
    todo = list(dict.fromkeys(terms))
    for i in range(0, len(todo), 500):
        chunk = todo[i: i + 500]
        for t, doc in conn.execute(f"SELECT term, doc FROM memories_vocab WHERE col = 'terms' AND term IN "
                                   f"({','.join('?' * len(chunk))})", chunk):
            if doc:
                out[t] = int(doc)
    return out


# Terms FTS5's unicode61 tokenizer keeps exactly as they are: lowercase ASCII letters and digits,
# and CJK ideographs (no case, no diacritics, all token characters). A stored term made only of
# these is one vocabulary entry equal to itself; any other (an accented or other-script word,
# which unicode61 folds or splits its own way) may become another entry.
_PLAIN_TERM = re.compile(r"[a-z0-9\u3400-\u4dbf\u4e00-\u9fff]+")


def df_delta(added: Iterable[str], removed: Iterable[str]) -> dict[str, int] | None:
    """How the ``terms``-column document frequencies move when the FTS5 documents ``added`` are
    inserted and ``removed`` deleted (``terms`` column strings), or None when a term is not plain
    (:data:`_PLAIN_TERM`): we cannot then say which vocabulary entries it makes."""
    out: dict[str, int] = {}
    for docs, sign in ((added, 1), (removed, -1)):
        for doc in docs:
            for t in set(doc.split()):
                if t not in out and not _PLAIN_TERM.fullmatch(t):
                    return None
                out[t] = out.get(t, 0) + sign
    return out


def basis_path(vector_path: str | None) -> str | None:
    return None if vector_path is None else vector_path + ".basis.npz"


def load_basis(path: str | None, tag: bytes, dim: int) -> tuple[np.ndarray | None, int] | None:
    """A saved (basis, fit_rows) for this store, or None when missing, foreign or unreadable."""
    if path is None or not os.path.exists(path):
        return None
    try:
        with np.load(path) as z:
            if bytes(z["tag"]) != tag or int(z["dim"]) != dim:
                return None
            if (int(z["rule"]) if "rule" in z.files else 1) != FIT_RULE:
                return None  # fitted by an older rule (fit_basis): fit again, once
            basis = np.ascontiguousarray(z["basis"], dtype=np.float32)
            rows = int(z["fit_rows"])
    except (OSError, ValueError, KeyError, EOFError):
        return None
    if basis.ndim != 2 or basis.shape[0] != dim:
        return None
    return (basis if basis.shape[1] else None), rows


def save_basis(path: str | None, tag: bytes, dim: int, basis: np.ndarray | None, rows: int) -> None:
    if path is None:
        return
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
    b = basis if basis is not None else np.zeros((dim, 0), dtype=np.float32)
    np.savez(tmp, tag=np.frombuffer(tag, dtype=np.uint8), dim=dim, basis=b, fit_rows=rows, rule=FIT_RULE)
    os.replace(tmp, path)  # atomic: a reader sees the old basis or the new one


class PartitionState:
    """What one backend has loaded: catalogue, partitions (LRU), keyword stats, basis."""

    def __init__(self, dim: int, budget_bytes: int) -> None:
        self.dim = dim
        self.budget_bytes = budget_bytes
        self.catalogue: NsCatalogue | None = None
        self.loaded: OrderedDict[Namespace, int] = OrderedDict()  # namespace -> estimated bytes
        self.loads = 0  # partitions loaded so far (introspection for tests)
        self.evictions = 0
        self.df_cache: dict[str, int] = {}
        self.totals: tuple[int, int] | None = None
        self.basis: tuple[np.ndarray | None, int] | None = None  # (basis, rows it was fitted on)
        self.basis_fits = 0  # fits done by this process (tests: a persisted basis is reused)
        self.large_searches: dict[tuple[Namespace, ...], int] = {}  # searches per selection: see _plan
        self.base: SharedBase | None = None  # the mapped <store>.partitions file (see _shared)
        self.base_builds = 0  # times this process wrote it (tests)
        self.mapped_loads = 0  # partitions loaded as views of it (tests)

    def bytes_loaded(self) -> int:
        return sum(self.loaded.values())

    def partition_bytes(self, rows: int) -> int:
        # vectors + projection (~1/4) + keyword postings and bookkeeping (~200 B a row)
        return int(rows * (self.dim * 4 * 1.25 + 200))


def load_partitions(conn: sqlite3.Connection, vf: VectorFile, index: VectorIndex, kw: KeywordIndex,
                    parts: list[tuple[Namespace, np.ndarray]], store_rows: int) -> None:
    """Put namespaces (each with its rows) into the vector and keyword indexes.

    One gather from the vector file for all of them (rows of many namespaces interleave in rid
    order, so together they are dense enough to be read span by span), and one keyword build.
    Terms come from the FTS5 table's content table (a plain table: rowid lookups there cost a
    fraction of the FTS5 virtual table's), scanned whole when most of the store is wanted.
    """
    if not parts:
        return
    allr = np.concatenate([r for _, r in parts])
    vecs = vf.rows(allr)
    at = 0
    row_ns: dict[int, Namespace] = {}
    # A large load keeps the gather as one matrix its partitions are views of (an arena, see
    # memory.backends.vector_arena: the searches over most of a store scan it in one go). A
    # small one gives each partition its own copy, so that evicting it frees its memory.
    shared = len(parts) == 1 or len(allr) >= ARENA_MIN_ROWS
    for ns, rids in parts:
        if len(rids):
            part = vecs[at : at + len(rids)]
            index.add_block(ns, rids, part if shared else part.copy())
        at += len(rids)
        row_ns.update(dict.fromkeys(rids.tolist(), ns))
    got: list[int] = []
    docs: list[list[str]] = []
    if len(allr) * 4 >= store_rows:
        for rid, terms in conn.execute("SELECT id, c1 FROM memories_fts_content"):
            if rid in row_ns:
                got.append(rid)
                docs.append((terms or "").split())
    else:
        srt = np.sort(allr)
        for i in range(0, len(srt), 500):
            chunk = srt[i : i + 500].tolist()
            rows = conn.execute(
                f"SELECT id, c1 FROM memories_fts_content WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            got.extend(r for r, _ in rows)
            docs.extend((t or "").split() for _, t in rows)
    nss = [row_ns[r] for r in got]
    # FTS5's document length counts the namespace column too (one term per ancestor).
    kw.add_many(got, nss, docs, [len(d) + len(n) for d, n in zip(docs, nss, strict=True)])


def drop_partition(index: VectorIndex, kw: KeywordIndex, ns: Namespace, rids: Iterable[int]) -> None:
    index.drop_block(ns)
    for r in rids:
        kw.remove(int(r))


def sample_rows(cat: NsCatalogue, vf: VectorFile, take: int = FIT_SAMPLE) -> np.ndarray:
    """A fixed-seed sample of live vectors from the whole store (for the projection basis)."""
    live = cat.live_rids()
    rng = np.random.default_rng(0)
    pick = live if len(live) <= take else np.sort(rng.choice(live, size=take, replace=False))
    return vf.rows(pick)


def refit_due(basis: tuple[np.ndarray | None, int] | None, rows: int) -> bool:
    return basis is None or rows >= REFIT_GROWTH * max(basis[1], 1)


class PartitionMixin:
    """The lazy-loading side of :class:`~memory.backends.sqlite.SqliteBackend` (see the module
    docstring); ``SqliteBackend.__init__`` sets the state below. Callers hold ``_lock``."""

    path: str
    dim: int
    _conn: sqlite3.Connection
    _index: VectorIndex
    _kw: KeywordIndex
    _applied_seq: int
    _parts: PartitionState
    _vf: VectorFile | None

    def _vector_file(self) -> VectorFile:
        if self._vf is None:
            self._vf = VectorFile(sidecar_path(self.path), self.dim, file_tag(self._conn))
        return self._vf

    def _catalogue(self, prefixes: Iterable[Namespace] | None = None) -> NsCatalogue:
        """The namespace catalogue, covering at least the rows under ``prefixes`` (None: every
        row); built on first use (no partition is loaded before it), extended on demand."""
        cat = self._parts.catalogue
        if prefixes is not None:
            prefixes = tuple(prefixes)
        if cat is None:
            cat, seq = NsCatalogue.build(self._conn, prefixes)
            self._parts.catalogue = cat
            # The build saw every change up to `seq`; nothing is loaded that could lag behind.
            self._applied_seq = max(self._applied_seq, seq)
        elif not cat.covers(prefixes):
            cat.extend(self._conn, prefixes)
        return cat

    def _matching(self, prefixes: Iterable[Namespace]) -> list[Namespace]:
        """Namespaces with rows under ``prefixes``, their partitions loaded."""
        prefixes = tuple(prefixes)
        blocks = self._catalogue(prefixes).matching(prefixes)
        self._ensure_loaded(blocks)
        return blocks

    def _ensure_loaded(self, blocks: list[Namespace]) -> None:
        parts = self._parts
        missing = []
        for ns in blocks:
            if ns in parts.loaded:
                parts.loaded.move_to_end(ns)
            else:
                missing.append(ns)
        if not missing or self._conn.in_transaction:
            return
        cat = self._catalogue(missing)
        vf = self._vector_file()
        vf.catch_up(self._conn)
        todo = [(ns, cat.rids_of(ns)) for ns in missing]
        # Rows in the store: counted when the catalogue covers it all, else bounded by the
        # row ids (only chooses how the partitions' terms are read, not what is read).
        store_rows = len(cat) if cat.covered is None else len(cat.code)
        base = self._shared(sum(len(r) for _, r in todo))
        rest = todo if base is None else self._load_mapped(base, todo)
        load_partitions(self._conn, vf, self._index, self._kw, rest, store_rows)
        for ns, rids in todo:
            parts.loaded[ns] = parts.partition_bytes(len(rids))
            parts.loads += 1
        keep = set(blocks)
        while parts.bytes_loaded() > parts.budget_bytes:
            victim = next((ns for ns in parts.loaded if ns not in keep), None)
            if victim is None:
                break  # this search alone needs more than the budget: keep what it uses
            del parts.loaded[victim]
            drop_partition(self._index, self._kw, victim, cat.rids_of(victim))
            parts.evictions += 1

    def _shared(self, rows: int) -> SharedBase | None:
        """The mapped partitions file, opened when there is one; (re)built first by a load of
        ARENA_MIN_ROWS rows or more when it is missing, unusable or stale (see shared_base)."""
        parts = self._parts
        path = partitions_path(self.path)
        if path is None:
            return None
        vf = self._vector_file()
        if vf.fallback is not None:
            return None  # the vector file is not usable here: nothing to build from cheaply
        if parts.base is None:
            parts.base = open_base(path, vf.tag, self.dim, self._conn)
        base = parts.base
        if rows < ARENA_MIN_ROWS or self._kw.attached:
            return base  # rows already attached keep their base (it stays mapped while used)
        if base is not None and not base.stale(self._conn, self._applied_seq):
            return base
        try:
            with shared_base.build_lock(path):
                fresh = open_base(path, vf.tag, self.dim, self._conn)  # another process may have built it
                if fresh is None or fresh.stale(self._conn, self._applied_seq):
                    big = len(self._catalogue()) >= vector_index.TWO_STAGE_MIN_ROWS
                    shared_base.build(self._conn, vf, path, self.dim, self._basis_now() if big else None)
                    parts.base_builds += 1
                    fresh = open_base(path, vf.tag, self.dim, self._conn)
        except (OSError, ValueError) as exc:  # a read-only directory, a full disk: private copies
            log.warning("cannot write %s (%s): partitions are loaded into this process", path, exc)
            return base
        parts.base = fresh if fresh is not None else base
        return parts.base

    def _load_mapped(self, base: SharedBase, todo: list[tuple[Namespace, np.ndarray]]
                     ) -> list[tuple[Namespace, np.ndarray]]:
        """Load the partitions of ``todo`` that are unchanged since ``base`` was written as views
        of it; returns the others (loaded as before, into private memory)."""
        dirty, _ = base.dirty(self._conn, self._applied_seq)
        if dirty is None:
            return todo
        rest = []
        for ns, rids in todo:
            sl = base.slots_of(ns)
            if sl is None or ns in dirty or not np.array_equal(base.rids[sl], rids):
                rest.append((ns, rids))
                continue
            if len(rids):
                self._index.add_block(ns, base.rids[sl], base.vecs[sl], mapped=(base, sl.start))
            self._kw.attach(base, sl)
            self._parts.mapped_loads += 1
        return rest

    def _drop_shared(self) -> None:
        """Delete the partitions file (scrub: it holds deleted rows' terms and vectors). This
        process keeps what it has mapped; rows deleted since the file was written are never
        read from it, and the next large load writes a new one."""
        shared_base.remove(partitions_path(self.path))

    def flush_vectors(self, *, basis: bool = True) -> None:
        """Bring the memory-mapped vector file (and, with ``basis``, the saved projection basis)
        up to date.

        Call after a bulk load: otherwise the next process to search copies the new rows from
        SQLite itself (every process shares the result, but one of them pays for it). A bulk
        load also calls it with ``basis=False`` after each batch but the last, while its
        embedding workers are busy, so the copy is not all left for the end.
        """
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            self._vector_file().catch_up(self._conn)
            if not basis:
                return
            rows = self._row_count()
            if rows >= vector_index.TWO_STAGE_MIN_ROWS:
                self._basis_now(rows)

    def _row_count(self) -> int:
        """Rows in the store: the catalogue's count when it covers every row, else SQLite's.

        A bulk import ends with :meth:`flush_vectors` and had built the whole catalogue only to
        count it (GROUP BY ns over every row: 2.6 s at 1M rows); ``COUNT(*)`` walks the smallest
        index (0.01-0.1 s). Both count every row, expired or not.
        """
        cat = self._parts.catalogue
        if cat is not None and cat.covered is None:
            return len(cat)
        return int(self._conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])

    # A search over namespaces not loaded yet is served from the vector file and FTS5
    # (StreamIndex) instead of loading them, until the same selection has been searched enough
    # times in this process for loading to pay for itself: LOAD_AFTER times for a selection of
    # at least STREAM_MIN_ROWS rows (loading 100k rows took seconds), SMALL_LOAD_AFTER times
    # for a smaller one. Scoped selections used to load on first use, so every process kept a
    # private copy (vectors, postings) of each namespace it searched once: four processes
    # searching random users held 3.7x the memory of one. Streaming a scoped search costs less
    # than loading it (first search at 100k: ~45 ms vs 80-100 ms) and gives the same results;
    # a selection searched again is loaded then, and later searches are as fast as before.
    STREAM_MIN_ROWS = 20_000
    LOAD_AFTER = 3
    SMALL_LOAD_AFTER = 2

    def _plan(self, prefixes: Iterable[Namespace]) -> tuple[list[Namespace], StreamIndex | None]:
        """The namespaces a search sees, and a StreamIndex when it should not load them."""
        prefixes = tuple(prefixes)
        cat = self._catalogue(prefixes)
        blocks = cat.matching(prefixes)
        missing = [ns for ns in blocks if ns not in self._parts.loaded]
        if missing and not self._conn.in_transaction:
            need = self.LOAD_AFTER if cat.size(missing) >= self.STREAM_MIN_ROWS else self.SMALL_LOAD_AFTER
            counts = self._parts.large_searches
            if need > 1:
                if len(counts) > 1000:  # bounded: many distinct selections only restart their counts
                    counts.clear()
                seen = counts[prefixes] = counts.get(prefixes, 0) + 1
                if seen < need:
                    vf = self._vector_file()
                    vf.catch_up(self._conn)
                    return blocks, StreamIndex(vf, cat, blocks, self.dim)
        self._ensure_loaded(blocks)
        return blocks, None

    def _partition_loaded(self, ns: Namespace) -> bool:
        return ns in self._parts.loaded

    def _kw_stats(self, terms: list[str]) -> tuple[dict[str, int], int, int]:
        """(document frequencies, rows, total length) of the whole store, from FTS5."""
        parts = self._parts
        if parts.totals is None:
            parts.totals = fts_totals(self._conn)
        need = [t for t in terms if t not in parts.df_cache]
        if need:
            got = fts_df(self._conn, need)
            for t in need:
                parts.df_cache[t] = got.get(t, 0)
        return {t: parts.df_cache[t] for t in terms if parts.df_cache[t]}, *parts.totals

    def _changed(self, df_delta: Mapping[str, int] | None = None) -> None:
        """The file changed: statistics read from FTS5 are stale.

        ``df_delta``: how many rows containing each term the change added (minus those it
        removed), for every term it touched (an upsert of ours knows them, see
        :func:`df_delta`): the cached document frequencies are updated by it, exactly as FTS5's
        own moved. Reading them again cost ~0.27 ms a term at 100k (FTS5 walks each term's
        postings to count them), ~3 ms for the next search after every write. None drops them
        all (another process's write, a delete, a failed write). The totals are re-read either way
        (one small record).
        """
        self._parts.totals = None
        if df_delta is None:
            self._parts.df_cache.clear()
            return
        cache = self._parts.df_cache
        for t, d in df_delta.items():
            if t in cache:
                cache[t] += d

    def _basis_now(self, rows: int | None = None) -> np.ndarray | None:
        """The two-stage scan's basis: kept, else the saved one, else fitted and saved
        (``rows``: the store's row count, when the caller has it)."""
        parts = self._parts
        if rows is None:
            rows = len(self._catalogue())
        if parts.basis is not None and not refit_due(parts.basis, rows):
            return parts.basis[0]
        vf = self._vector_file()
        saved = load_basis(basis_path(vf.path), vf.tag, self.dim)
        if saved is not None and not refit_due(saved, rows):
            parts.basis = saved
            return saved[0]
        if self._conn.in_transaction:
            return None if parts.basis is None else parts.basis[0]
        vf.catch_up(self._conn)
        basis = fit_basis(sample_rows(self._catalogue(), vf), self.dim)
        parts.basis = (basis, rows)
        parts.basis_fits += 1
        try:
            save_basis(basis_path(vf.path), vf.tag, self.dim, basis, rows)
        except OSError:
            pass  # a read-only directory: every process fits its own, as before
        return basis


__all__ = ["NsCatalogue", "PartitionMixin", "PartitionState", "basis_path", "df_delta", "drop_partition", "fit_basis",
           "fts_df", "fts_totals", "load_basis", "load_partitions", "refit_due", "sample_rows", "save_basis"]
