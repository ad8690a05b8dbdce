"""Loaded partitions that every process maps instead of copying: ``<store>.partitions``.

Why: a process that had loaded every partition of a 100k store held ~800 MB of its own (195 MB
of vectors gathered into its heap, ~57 MB of keyword postings as Python objects, and ~390 MB of
interpreter heap the load's short-lived objects left fragmented), so four independent processes
(``uvicorn --workers``, MCP clients, several ``langgraph dev`` workers) held four copies. This
file holds the same data in the layout a loaded index uses, and processes map it read-only:
its pages live once in the OS page cache, whoever maps them.

Layout (every array page-aligned; a JSON header says where): the rows of the store sorted by
namespace, then row id, so each namespace is one contiguous run. Per row (a *slot*): vector
(float32 x dim), row id, BM25 document length, namespace code. Per namespace: first slot.
``rid_slot``: row id -> slot (-1: not in the file). With a two-stage basis saved for the store:
the basis and each row's projection onto it and left-out norm, so the first large search of a
process does not compute (and keep privately) its own. Keyword postings in CSR form: terms sorted
by a 64-bit hash of their UTF-8 bytes (stable across processes, unlike ``hash()``), each with
its run of (slot int32, term frequency float32); the term's bytes are kept too, so a lookup
never trusts the hash alone.

SQLite stays the truth. The header ties the file to the store's tag (as ``<store>.vectors``)
and to ``seq``, the write sequence it mirrors. Rows written or deleted after ``seq`` make their
namespaces *dirty* (:meth:`SharedBase.dirty`): those are loaded as before, from SQLite and the
vector file, into private memory; clean ones are views of this file. Writes after a namespace
was loaded from here go to private memory (the index copies a block before its first change;
the keyword index kills the row's slot here and indexes it again in its in-heap part), so they
are visible exactly as before. A missing, foreign, truncated or corrupt file (header, sizes,
spot checks of rows against SQLite) is not used, and rebuilt by the next large load
(:func:`build`, under the vector file's lock, written aside and renamed into place, so a
process that has the old file mapped keeps reading the old, complete file; one builder at a time,
under ``<file>.lock``). ``scrub`` (after
forget-user or a hard delete) removes it: it holds the text's terms and vectors.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import mmap
import os
import sqlite3
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from memory.backends.vector_arena import register_projection
from memory.backends.vector_file import VectorFile, db_seq
from memory.backends.vector_index import _rest_norm

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
from memory.namespace import Namespace

MAGIC = b"MEMPART1"
VERSION = 2  # 2: with the two-stage basis, projections and left-out norms
HEADER = 16_384  # magic, JSON length, JSON (array offsets); arrays start page-aligned after it
PAGE = 4096
SPOT_CHECKS = 8  # rows compared with SQLite when the file is opened
CHUNK = 8_192  # rows read per step while building
STALE_SHARE = 0.05  # rebuilt by a large load once this share of its rows changed since


def partitions_path(db_path: str) -> str | None:
    """Where the shared partitions of a SQLite store live (None for ``:memory:``)."""
    if db_path == ":memory:":
        return None
    return os.path.expanduser(db_path) + ".partitions"


def term_hashes(terms: list[str]) -> np.ndarray:
    """64-bit hashes of ``terms`` (blake2b of UTF-8): the same in every process."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
                        for t in terms), dtype=np.uint64, count=len(terms))


class SharedBase:
    """One mapped ``<store>.partitions`` file (read-only views into it)."""

    def __init__(self, path: str, mm: mmap.mmap, head: dict[str, Any]):
        self.path = path
        self.seq = int(head["seq"])
        self.tag = bytes.fromhex(head["tag"])
        self.dim = int(head["dim"])
        self.rows = int(head["rows"])
        self._mm = mm
        a = {name: np.ndarray(tuple(shape), dtype=np.dtype(dt), buffer=mm, offset=off)
             for name, (off, dt, shape) in head["arrays"].items()}
        self.vecs: np.ndarray = a["vecs"]  # (rows, dim): its own base, so blocks are arena views
        self.rids: np.ndarray = a["rids"]
        self.doc_len: np.ndarray = a["doc_len"]
        self.slot_ns: np.ndarray = a["slot_ns"]
        self.ns_start: np.ndarray = a["ns_start"]
        self.rid_slot: np.ndarray = a["rid_slot"]
        self._term_hash: np.ndarray = a["term_hash"]
        self._term_ptr: np.ndarray = a["term_ptr"]
        self._text: np.ndarray = a["term_text"]
        self._text_ptr: np.ndarray = a["term_text_ptr"]
        self._post_slot: np.ndarray = a["post_slot"]
        self._post_tf: np.ndarray = a["post_tf"]
        names = bytes(a["ns_names"]).decode().split("\n") if len(a["ns_names"]) else []
        if a["basis"].shape[1] and len(a["proj"]) == self.rows:
            # The two-stage scan reads these instead of projecting the rows itself (as long as it
            # uses the same basis): see memory.backends.vector_arena.register_projection.
            self._projection = (a["basis"], a["proj"], a["rest"])  # kept alive by this object
            register_projection(self.vecs, *self._projection)
        self.ns_list: list[Namespace] = [tuple(n.split("/")) for n in names]
        self.ns_code: dict[Namespace, int] = {ns: i for i, ns in enumerate(self.ns_list)}
        self._dirty: tuple[int, set[Namespace] | None, int] | None = None  # (checked at seq, dirty, changed)

    # ------------------------------------------------------------------ reads
    def slots_of(self, ns: Namespace) -> slice | None:
        c = self.ns_code.get(ns)
        if c is None:
            return None
        return slice(int(self.ns_start[c]), int(self.ns_start[c + 1]))

    def slots_of_rids(self, rids: np.ndarray) -> np.ndarray:
        """Slots of ``rids`` (-1 where a row is not in the file)."""
        inside = rids < len(self.rid_slot)
        out = np.full(len(rids), -1, dtype=np.int64)
        out[inside] = self.rid_slot[rids[inside]]
        return out

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(slots, term frequencies) of ``term``, or None when no row of the file has it."""
        h = term_hashes([term])[0]
        i = int(np.searchsorted(self._term_hash, h))
        if i >= len(self._term_hash) or self._term_hash[i] != h:
            return None
        if bytes(self._text[self._text_ptr[i] : self._text_ptr[i + 1]]) != term.encode():
            return None  # another term with the same hash: this one is not in the file
        a, b = int(self._term_ptr[i]), int(self._term_ptr[i + 1])
        return self._post_slot[a:b], self._post_tf[a:b]

    def dirty(self, conn: sqlite3.Connection, at_seq: int) -> tuple[set[Namespace] | None, int]:
        """(namespaces whose rows changed since the file's ``seq``, rows changed); None: the
        file cannot tell (deletions it would need were pruned from the log, or the store is
        older than the file). Cached per ``at_seq`` (the caller's applied sequence)."""
        if self._dirty is not None and self._dirty[0] == at_seq:
            return self._dirty[1], self._dirty[2]
        dirty: set[Namespace] | None = set()
        changed = 0
        floor = conn.execute("SELECT value FROM meta WHERE key = 'deletions_floor'").fetchone()
        if db_seq(conn) < self.seq or (floor is not None and int(floor[0]) > self.seq):
            dirty, changed = None, self.rows
        else:
            assert dirty is not None
            gone = [r for (r,) in conn.execute("SELECT rid FROM deletions WHERE seq > ?", (self.seq,))]
            moved: list[int] = []
            for rid, ns in conn.execute("SELECT rid, ns FROM memories WHERE seq > ?", (self.seq,)):
                dirty.add(tuple(ns.split("/")))
                moved.append(rid)
            changed = len(gone) + len(moved)
            slots = self.slots_of_rids(np.asarray(gone + moved, dtype=np.int64))
            # A set, not np.unique: numpy 2.4's unique imports numpy.ma (~1.1 MB and ~8 ms per process).
            dirty.update(self.ns_list[c] for c in set(self.slot_ns[slots[slots >= 0]].tolist()))
        self._dirty = (at_seq, dirty, changed)
        return dirty, changed

    def stale(self, conn: sqlite3.Connection, at_seq: int) -> bool:
        """Worth rebuilding: unusable, or STALE_SHARE of its rows changed since it was built."""
        dirty, changed = self.dirty(conn, at_seq)
        return dirty is None or changed > STALE_SHARE * max(self.rows, 1)

    def check(self, conn: sqlite3.Connection) -> bool:
        """Spot checks: rows unchanged since ``seq`` hold SQLite's vector and document length."""
        if not self.rows:
            return True
        picks = sorted({int(self.rows * i / SPOT_CHECKS) for i in range(SPOT_CHECKS)} | {self.rows - 1})
        for slot in picks:
            rid = int(self.rids[slot])
            row = conn.execute("SELECT m.vector, m.seq, m.ns, f.c1 FROM memories AS m LEFT JOIN memories_fts_content"
                               " AS f ON f.id = m.rid WHERE m.rid = ?", (rid,)).fetchone()
            if row is None or row[1] > self.seq:
                continue  # deleted or changed since: dirty, never read from here
            if not (0 <= rid < len(self.rid_slot)) or int(self.rid_slot[rid]) != slot:
                return False
            ns = tuple(row[2].split("/"))
            if self.ns_list[int(self.slot_ns[slot])] != ns or self.vecs[slot].tobytes() != row[0]:
                return False
            if float(self.doc_len[slot]) != len((row[3] or "").split()) + len(ns):
                return False
        return True

    def close(self) -> None:
        """Drop this object's views; the mapping goes with the last view still held elsewhere."""
        self._mm = None  # type: ignore[assignment]


def open_base(path: str | None, tag: bytes, dim: int, conn: sqlite3.Connection) -> SharedBase | None:
    """The file at ``path`` mapped, or None when missing, foreign, truncated or corrupt."""
    if path is None or not os.path.exists(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.pread(fd, HEADER, 0)
        if len(raw) < 12 or raw[:8] != MAGIC:
            return None
        (n,) = struct.unpack("<I", raw[8:12])
        head = json.loads(raw[12 : 12 + n].decode())
        if (head.get("version") != VERSION or bytes.fromhex(head["tag"]) != tag or int(head["dim"]) != dim
                or int(head["seq"]) > db_seq(conn)):
            return None
        size = os.fstat(fd).st_size
        for off, dt, shape in head["arrays"].values():
            if off < HEADER or off + int(np.prod(shape)) * np.dtype(dt).itemsize > size:
                return None
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)  # the mapping keeps the file
    try:
        base = SharedBase(path, mm, head)
        ok = base.check(conn)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
        return None
    return base if ok else None


@contextmanager
def _writing(path: str) -> Iterator[str]:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        yield tmp
        os.replace(tmp, path)  # atomic: a reader maps the old complete file or the new one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def build_lock(path: str) -> Iterator[None]:
    """One builder at a time per store (``<file>.lock``, empty). Not the vector file's lock:
    a build takes seconds, and every search's catch-up takes that one."""
    if fcntl is None:  # pragma: no cover - Windows: one process per file there
        yield
        return
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def build(conn: sqlite3.Connection, vf: VectorFile, path: str, dim: int, basis: np.ndarray | None = None) -> None:
    """Write ``path`` from the store's committed state (one read snapshot). Call outside a
    transaction, holding :func:`build_lock`. With ``basis`` (the two-stage scan's), the rows'
    projections onto it and the norms of what it leaves out are written too."""
    for p in _leftovers(path):  # under build_lock no other builder is writing: a crashed one's
        os.unlink(p)
    conn.execute("BEGIN")
    try:
        seq = db_seq(conn)
        rows = conn.execute("SELECT rid, ns, seq FROM memories").fetchall()
        rid = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        names = sorted({r[1] for r in rows})
        code_of = {n: i for i, n in enumerate(names)}
        code = np.fromiter((code_of[r[1]] for r in rows), dtype=np.int32, count=len(rows))
        row_seq = np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))
        del rows
        order = np.lexsort((rid, code))
        rid, code, row_seq = rid[order], code[order], row_seq[order]
        n = len(rid)
        ns_start = np.searchsorted(code, np.arange(len(names) + 1)).astype(np.int64)
        rid_slot = np.full(int(rid.max()) + 1 if n else 0, -1, dtype=np.int32)
        rid_slot[rid] = np.arange(n, dtype=np.int32)
        ns_depth = np.asarray([len(x.split("/")) for x in names], dtype=np.float32)
        doc_len = ns_depth[code] if n else np.zeros(0, dtype=np.float32)
        # Keyword postings: token -> term id, a chunk of rows at a time (its Python strings are
        # freed before the next), the content table read in order (faster than id lookups).
        vocab: dict[str, int] = {}
        ids_from = itertools.count()  # one number per token: a new term keeps its first one
        keys: list[np.ndarray] = []
        cur = conn.execute("SELECT id, c1 FROM memories_fts_content")
        while True:
            got = cur.fetchmany(CHUNK)
            if not got:
                break
            ids = np.fromiter((r for r, _ in got), dtype=np.int64, count=len(got))
            inside = ids < len(rid_slot)
            slots = np.full(len(got), -1, dtype=np.int64)
            slots[inside] = rid_slot[ids[inside]]
            docs = [(t or "").split() if s >= 0 else [] for (_, t), s in zip(got, slots.tolist(), strict=True)]
            counts = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            doc_len[slots[slots >= 0]] += counts[slots >= 0]
            if counts.sum():
                t = np.fromiter(map(vocab.setdefault, itertools.chain.from_iterable(docs), ids_from),
                                dtype=np.int64, count=int(counts.sum()))
                keys.append(t * max(n, 1) + np.repeat(slots, counts))
        words = list(vocab)
        del vocab
        pair, tf = np.unique(np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64), return_counts=True)
        del keys
        p_term, p_slot = pair // max(n, 1), pair % max(n, 1)
        # Term ids grow with first sight (with gaps): their sorted order is `words`' order.
        seen_ids = np.unique(p_term)
        hashes = term_hashes(words)
        if len(np.unique(hashes)) != len(hashes):
            raise ValueError("two terms share a 64-bit hash")  # never seen; the caller keeps the old path
        rank = np.empty(len(hashes), dtype=np.int64)
        by_hash = np.argsort(hashes, kind="stable")
        rank[by_hash] = np.arange(len(hashes))
        dense = np.searchsorted(seen_ids, p_term)
        post_order = np.lexsort((p_slot, rank[dense]))
        counts = np.bincount(rank[dense], minlength=len(words))
        term_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        text = [words[i].encode() for i in by_hash.tolist()]
        text_ptr = np.concatenate([[0], np.cumsum([len(t) for t in text])]).astype(np.int64)
        head = 0 if basis is None else basis.shape[1]
        arrays: dict[str, np.ndarray | tuple[str, tuple[int, ...]]] = {
            "vecs": ("<f4", (n, dim)), "proj": ("<f4", (n if head else 0, head)), "rest": ("<f4", (n if head else 0,)),
            "basis": np.zeros((dim, 0), dtype="<f4") if basis is None else np.ascontiguousarray(basis, dtype="<f4"), "rids": rid, "doc_len": doc_len.astype(np.float32), "slot_ns": code,
            "ns_start": ns_start, "ns_names": np.frombuffer("\n".join(names).encode(), dtype=np.uint8),
            "rid_slot": rid_slot, "term_hash": hashes[by_hash], "term_ptr": term_ptr,
            "term_text": np.frombuffer(b"".join(text), dtype=np.uint8), "term_text_ptr": text_ptr,
            "post_slot": p_slot[post_order].astype(np.int32), "post_tf": tf[post_order].astype(np.float32)}
        layout: dict[str, tuple[int, str, tuple[int, ...]]] = {}
        off = HEADER
        for name, arr in arrays.items():
            dt, shape = arr if isinstance(arr, tuple) else (arr.dtype.str, arr.shape)
            layout[name] = (off, dt, shape)
            off += -(-int(np.prod(shape)) * np.dtype(dt).itemsize // PAGE) * PAGE
        header = json.dumps({"version": VERSION, "tag": vf.tag.hex(), "dim": dim, "seq": seq, "rows": n,
                           "arrays": layout}).encode()
        if 12 + len(header) > HEADER:
            raise ValueError("partitions header too large")
        with _writing(path) as tmp:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, max(off, HEADER))
                with mmap.mmap(fd, max(off, HEADER)) as mm:
                    for name, arr in arrays.items():
                        if not isinstance(arr, tuple):
                            o, dt, shape = layout[name]
                            np.ndarray(shape, dtype=dt, buffer=mm, offset=o)[...] = arr
                    vecs = np.ndarray((n, dim), dtype="<f4", buffer=mm, offset=layout["vecs"][0])
                    # Under the vector file's lock: no catch-up (or rebuild) rewrites its rows
                    # while they are copied. Rows it does not hold yet come from SQLite.
                    # The vector file is read in order and scattered to the slots (namespace
                    # order is random in row-id order: a gather would be a read per row).
                    with vf.locked():
                        seen = vf.synced_seq()
                        for lo, mat in vf.chunks(len(rid_slot)):
                            dst = rid_slot[lo : lo + len(mat)]
                            keep = dst >= 0
                            vecs[dst[keep]] = mat[: len(dst)][keep]
                    for r in rid[row_seq > seen].tolist():
                        (blob,) = conn.execute("SELECT vector FROM memories WHERE rid = ?", (r,)).fetchone()
                        vecs[rid_slot[r]] = np.frombuffer(blob, dtype="<f4")
                    if basis is not None:
                        proj = np.ndarray((n, head), dtype="<f4", buffer=mm, offset=layout["proj"][0])
                        rest = np.ndarray((n,), dtype="<f4", buffer=mm, offset=layout["rest"][0])
                        for lo in range(0, n, CHUNK):
                            proj[lo : lo + CHUNK] = vecs[lo : lo + CHUNK] @ basis
                            rest[lo : lo + CHUNK] = _rest_norm(vecs[lo : lo + CHUNK], basis)
                        del proj, rest
                    del vecs
                    mm.flush()
                os.pwrite(fd, MAGIC + struct.pack("<I", len(header)) + header, 0)  # last: a torn file has no magic
                os.fsync(fd)
            finally:
                os.close(fd)
    finally:
        conn.execute("COMMIT")


def _leftovers(path: str) -> list[str]:
    """Files a builder killed mid-write left (they may hold rows' terms and vectors)."""
    return glob.glob(glob.escape(path) + ".*.tmp")


def remove(path: str | None) -> None:
    """Delete the file and any half-written copy (scrub): processes that have it mapped keep
    their mapping until they drop it."""
    if path is not None:
        for p in [path, *_leftovers(path)]:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


__all__ = ["STALE_SHARE", "SharedBase", "build", "build_lock", "open_base", "partitions_path", "remove",
           "term_hashes"]
