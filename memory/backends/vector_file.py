"""A memory-mapped float32 copy of the SQLite file's vectors, beside it (``<file>.vectors``).

Why: parsing every vector blob out of SQLite on open cost seconds at 100k rows and a private
copy per process. The matrix here is indexed by row id (row ``rid`` holds that row's vector;
rids are never reused), so loading one namespace's partition is a gather of its rows (``pread``
of just those rows), and processes reading the same file share its pages through the OS page
cache. The file is mapped only while rows are written into it.

SQLite stays the truth. The 4 KiB header ties the matrix to the SQLite state it mirrors: a
magic, the dimension, a tag stored in the SQLite file's ``meta`` table (a file beside another
database is not used) and ``synced_seq``, the write sequence number up to which every
committed row has been copied. :meth:`VectorFile.catch_up` copies the rows written since
(``seq > synced_seq``, read in one snapshot) under an exclusive ``flock``; deleted rows just
stay unused. A missing, foreign, truncated or corrupt file (the header does not match, or a
spot check of rows against SQLite fails) is rebuilt from SQLite. The file is grown, never
shrunk: another process may have it mapped, and touching a mapping past a truncated end
raises SIGBUS.

Only committed rows are ever copied (catch-up never runs inside a write transaction), so a
rolled-back write cannot leave a vector here that SQLite does not have.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import sqlite3
import struct
import uuid
from collections.abc import Iterator
import contextlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; one process per file there
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("memory.vector_file")

MAGIC = b"MEMVEC01"
HEADER = 4096  # rows start page-aligned
# magic, dim, (pad), synced_seq, capacity (rows), tag (16 bytes)
_FMT = "<8sIIqq16s"
SPOT_CHECKS = 8  # rows compared with SQLite when a file is opened
CATCH_UP_BATCH = 20_000  # rows read from SQLite per step while catching up
SPAN_CHUNK = 8192  # rows per read when gathering a dense set of rows (16 MB at 512 dims)


def file_tag(conn: sqlite3.Connection) -> bytes:
    """The SQLite file's vector-file tag (created on first use, in its own transaction)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'vector_file_tag'").fetchone()
    if row is None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('vector_file_tag', ?)", (uuid.uuid4().hex,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        row = conn.execute("SELECT value FROM meta WHERE key = 'vector_file_tag'").fetchone()
    return bytes.fromhex(row[0])


def db_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])


class VectorFile:
    """The vectors of one SQLite store as a rid-indexed float32 matrix; ``path=None``: in RAM."""

    def __init__(self, path: str | None, dim: int, tag: bytes):
        self.path = path
        self.dim = dim
        self.tag = tag
        self.rebuilds = 0  # times the file was found missing/stale/corrupt and rebuilt (for tests)
        self.rows_copied = 0  # rows copied from SQLite, in total (for tests and profiling)
        self._fd: int | None = None
        self._mm: mmap.mmap | None = None
        self._mat = np.zeros((0, dim), dtype=np.float32)
        self._ram_seq = 0  # synced_seq of the in-RAM variant
        self.fallback: str | None = None  # why this process stopped using the file, if it did
        if path is not None:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    # ------------------------------------------------------------------ header
    def _read_header(self) -> tuple[bytes, int, int, int, bytes] | None:
        assert self._fd is not None
        raw = os.pread(self._fd, struct.calcsize(_FMT), 0)
        if len(raw) < struct.calcsize(_FMT):
            return None
        magic, dim, _, seq, cap, tag = struct.unpack(_FMT, raw)
        return magic, dim, seq, cap, tag

    def _write_header(self, seq: int, cap: int) -> None:
        assert self._fd is not None
        os.pwrite(self._fd, struct.pack(_FMT, MAGIC, self.dim, 0, seq, cap, self.tag), 0)

    def synced_seq(self) -> int:
        if self._fd is None:
            return self._ram_seq
        h = self._read_header()
        return h[2] if h is not None else -1

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """This file's exclusive lock (catch-up holds it; so does writing <store>.partitions)."""
        return self._locked()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self._fd is None or fcntl is None:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _row_bytes(self) -> int:
        return self.dim * 4

    def _map(self, cap: int) -> None:
        """(Re)map the first ``cap`` rows."""
        assert self._fd is not None
        if self._mm is not None and len(self._mat) >= cap:
            return
        size = HEADER + cap * self._row_bytes()
        # Blocks are allocated, not just the length extended: a store through a mapping into a
        # hole of a sparse file on a full disk raises SIGBUS and kills the process, while
        # posix_fallocate fails cleanly with ENOSPC (catch_up then falls back to RAM).
        try:
            os.posix_fallocate(self._fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            if os.fstat(self._fd).st_size < size:  # a filesystem without fallocate
                os.ftruncate(self._fd, size)
        mm = mmap.mmap(self._fd, size)
        self._mm = mm  # the old map is released when no array views it any more
        self._mat = np.frombuffer(mm, dtype="<f4", count=cap * self.dim, offset=HEADER).reshape(cap, self.dim)

    def _grow(self, need_rows: int) -> int:
        """Make room for rows [0, need_rows); returns the capacity."""
        cap = len(self._mat)
        if need_rows <= cap:
            return cap
        new_cap = max(need_rows, 2 * cap, 1024)
        if self._fd is None:
            mat = np.zeros((new_cap, self.dim), dtype=np.float32)
            mat[:cap] = self._mat
            self._mat = mat
        else:
            self._map(new_cap)
        return new_cap

    # ------------------------------------------------------------------ validity
    def _valid(self, conn: sqlite3.Connection, seq_now: int) -> tuple[bool, int]:
        """(usable, synced_seq): the header matches this store and spot-checked rows match SQLite."""
        h = self._read_header()
        if h is None:
            return False, 0
        magic, dim, seq, cap, tag = h
        if magic != MAGIC or dim != self.dim or tag != self.tag or seq < 0 or seq > seq_now or cap < 0:
            return False, 0
        if os.fstat(self._fd).st_size < HEADER + cap * self._row_bytes():  # type: ignore[arg-type]
            return False, 0
        # Rows unchanged since the file's sequence must be byte-equal to SQLite's: the highest
        # rid and a few spread over the rid range (cheap rowid lookups).
        (hi,) = conn.execute("SELECT MAX(rid) FROM memories WHERE seq <= ?", (seq,)).fetchone()
        if hi is None:
            return True, seq
        if hi >= cap:
            return False, 0
        probes = {int(hi)} | {int(hi * (i + 1) / (SPOT_CHECKS + 1)) for i in range(SPOT_CHECKS)}
        for p in sorted(probes):
            row = conn.execute("SELECT rid, vector, seq FROM memories WHERE rid >= ? ORDER BY rid LIMIT 1",
                               (p,)).fetchone()
            if row is None or row[2] > seq:
                continue
            if row[0] >= cap or self._read(int(row[0]), 1) != row[1]:
                return False, 0
        return True, seq

    # ------------------------------------------------------------------ sync
    def catch_up(self, conn: sqlite3.Connection) -> int:
        """Copy every row committed since the file's sequence; returns the sequence now mirrored.

        Must not run inside a write transaction (it would copy uncommitted rows). When the file
        cannot be written (disk full, I/O error), this process keeps its vectors in RAM instead:
        the file is only a faster way to load them, SQLite has them all.
        """
        try:
            return self._catch_up(conn)
        except OSError as exc:
            if self._fd is None:
                raise
            log.warning("vector file %s unusable (%s): vectors are kept in memory for this process", self.path, exc)
            self.fallback = f"{type(exc).__name__}: {exc}"
            self._unmap()
            os.close(self._fd)
            self._fd = None
            self._ram_seq = 0
            return self._catch_up(conn)

    def _catch_up(self, conn: sqlite3.Connection) -> int:
        if conn.in_transaction:
            raise RuntimeError("VectorFile.catch_up inside a transaction")  # a bug, not bad input
        with self._locked():
            conn.execute("BEGIN")  # one read snapshot: the rows and the sequence agree
            try:
                now = db_seq(conn)
                if self._fd is None:
                    have = self._ram_seq
                    if have > now:
                        have = 0
                        self.rebuilds += 1
                else:
                    ok, have = self._valid(conn, now)
                    if not ok:
                        self.rebuilds += 1
                        have = 0
                    if have == now:
                        return now
                    # Map for writing only (every row is rewritten after a rebuild; the file
                    # keeps its size, it is never shrunk). Unmapped again below: pages touched
                    # through a mapping count in this process's RSS.
                    size = os.fstat(self._fd).st_size
                    self._map(max(0, (size - HEADER) // self._row_bytes()))
                if have == now:
                    return now
                floor = conn.execute("SELECT value FROM meta WHERE key = 'deletions_floor'").fetchone()
                if have and floor is not None and have < int(floor[0]):
                    have = 0  # deletions we would have to erase were pruned from the log: rewrite all
                    self.rebuilds += 1
                (hi,) = conn.execute("SELECT MAX(rid) FROM memories").fetchone()
                self._grow(int(hi or 0) + 1)
                # Deleted rows are erased, not just left unused: forgetting a user must not leave
                # their vectors in a file beside the store. A rebuild zeroes every row first.
                if have == 0:
                    self._mat[:] = 0
                else:
                    gone = [r for (r,) in conn.execute(
                        "SELECT rid FROM deletions WHERE seq > ? AND seq <= ?", (have, now)) if r < len(self._mat)]
                    if gone:
                        self._mat[np.asarray(gone, dtype=np.int64)] = 0
                for rows in (self._all_rows(conn, now) if have == 0 else self._changed_rows(conn, have, now)):
                    rids = np.fromiter((r for r, _ in rows), dtype=np.int64, count=len(rows))
                    self._mat[rids] = np.frombuffer(b"".join(b for _, b in rows), dtype="<f4").reshape(-1, self.dim)
                    self.rows_copied += len(rows)
                if self._fd is None:
                    self._ram_seq = now
                else:
                    self._write_header(now, len(self._mat))
                    self._unmap()
                return now
            finally:
                conn.execute("COMMIT")

    @staticmethod
    def _all_rows(conn: sqlite3.Connection, now: int) -> Iterator[list[tuple[int, bytes]]]:
        """Every row up to ``now`` (a rebuild), in rid order, CATCH_UP_BATCH at a time."""
        last = 0
        while True:
            rows = conn.execute("SELECT rid, vector FROM memories WHERE seq > 0 AND seq <= ? AND rid > ?"
                                " ORDER BY rid LIMIT ?", (now, last, CATCH_UP_BATCH)).fetchall()
            if not rows:
                return
            yield rows
            last = int(rows[-1][0])

    @staticmethod
    def _changed_rows(conn: sqlite3.Connection, have: int, now: int) -> Iterator[list[tuple[int, bytes]]]:
        """The rows written in (have, now], found through the ``memories_seq`` index.

        This used to be one query, ``WHERE seq > ? AND seq <= ? AND rid > ? ORDER BY rid``, which
        SQLite answers by walking the table in rid order from the start and testing ``seq`` on
        every row: the catch-up after a 20k-row import into a 1M store read the whole 4.8 GB
        table (2.1 s CPU with it in the page cache, 13-16 s wall when it was not). The index
        gives the changed rids (it holds the rid); a dense run of them (an import's new rows) is
        read as one rid range, scattered ones (updates) by rid.
        """
        found = np.fromiter((r for (r,) in conn.execute(
            "SELECT rid FROM memories INDEXED BY memories_seq WHERE seq > ? AND seq <= ?", (have, now))
        ), dtype=np.int64)
        found.sort()
        for a in range(0, len(found), CATCH_UP_BATCH):
            part = found[a : a + CATCH_UP_BATCH]
            lo, hi = int(part[0]), int(part[-1])
            if hi - lo < 2 * len(part):  # dense: one range of the table, rows in between skipped by seq
                yield conn.execute("SELECT rid, vector FROM memories NOT INDEXED WHERE rid >= ? AND rid <= ?"
                                   " AND seq > ? AND seq <= ?", (lo, hi, have, now)).fetchall()
                continue
            for b in range(0, len(part), 500):
                ids = part[b : b + 500].tolist()
                yield conn.execute(f"SELECT rid, vector FROM memories WHERE rid IN ({','.join('?' * len(ids))})",
                                   ids).fetchall()

    def _read(self, start: int, n: int) -> bytes:
        assert self._fd is not None
        size = n * self._row_bytes()
        data = os.pread(self._fd, size, HEADER + start * self._row_bytes())
        return data if len(data) == size else data + bytes(size - len(data))

    def rows(self, rids: np.ndarray) -> np.ndarray:
        """A private copy of rows ``rids`` (call :meth:`catch_up` first).

        Read with ``pread``, one call per run of consecutive rids, not through a mapping: on
        this kernel a fault maps a whole large folio of the page cache, so gathering 667 rows
        spread over a 100k store put +133 MB in RSS; reads touch only what they copy. The
        page cache itself is still shared by every process reading the file.
        """
        if self._fd is None:
            return self._mat[rids]
        if not len(rids):
            return np.zeros((0, self.dim), dtype=np.float32)
        order = np.argsort(rids, kind="stable")
        srt = rids[order]
        out = np.empty((len(rids), self.dim), dtype=np.float32)
        lo, hi = int(srt[0]), int(srt[-1]) + 1
        if len(srt) * 8 >= hi - lo:  # dense (an eighth of the span or more): read the span in chunks
            step = SPAN_CHUNK
            for a in range(lo, hi, step):
                sel = slice(int(np.searchsorted(srt, a)), int(np.searchsorted(srt, a + step)))
                if sel.start == sel.stop:
                    continue
                n = min(step, hi - a)
                block = np.frombuffer(self._read(a, n), dtype="<f4").reshape(n, self.dim)
                out[order[sel]] = block[srt[sel] - a]
            return out
        cuts = np.flatnonzero(np.diff(srt) != 1) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(srt)]])
        buf = b"".join(self._read(int(srt[a]), int(b - a)) for a, b in zip(starts.tolist(), ends.tolist(), strict=True))
        out[order] = np.frombuffer(buf, dtype="<f4").reshape(-1, self.dim)
        return out

    def chunks(self, rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first rid, matrix) for rows [0, rows) in SPAN_CHUNK pieces, read with pread."""
        if self._fd is None:
            for lo in range(0, min(rows, len(self._mat)), SPAN_CHUNK):
                yield lo, self._mat[lo : lo + SPAN_CHUNK]
            return
        for lo in range(0, rows, SPAN_CHUNK):
            n = min(SPAN_CHUNK, rows - lo)
            yield lo, np.frombuffer(self._read(lo, n), dtype="<f4").reshape(n, self.dim)

    def _unmap(self) -> None:
        self._mat = np.zeros((0, self.dim), dtype=np.float32)
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # pragma: no cover - no view outlives catch_up
                pass
            self._mm = None

    def nbytes_mapped(self) -> int:
        return int(self._mat.nbytes)

    def reopen(self) -> None:
        """Our own descriptor, in a process forked from the one that opened the file: ``flock``
        locks belong to the open file description, which parent and child would share (both
        would hold the exclusive lock at once). The mapping stays: it is the page cache's."""
        if self._fd is None:
            return
        old, self._fd = self._fd, os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # type: ignore[arg-type]
        os.close(old)  # the parent still holds its own: its locks are unaffected

    def close(self) -> None:
        if self._fd is not None:
            self._unmap()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def sidecar_path(db_path: str) -> str | None:
    """Where the vector file of a SQLite store lives (None for ``:memory:``)."""
    if db_path == ":memory:":
        return None
    return str(Path(db_path).expanduser()) + ".vectors"


__all__ = ["VectorFile", "db_seq", "file_tag", "sidecar_path"]
