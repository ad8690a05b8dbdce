"""Where the judge's view vectors are kept: each distinct vector once per namespace.

Used by :mod:`memory.policy.view_cache` (which decides what to read and store). Layout, in the
SQLite file of ``settings.path``, three tables, every row keyed by its namespace:

* ``judge_view_blocks (id, ns, data)``: vectors packed into blocks (key, checksum, length,
  float32 bytes per entry; at most ``BLOCK_ENTRIES`` a block). One 2 KB vector per row cost
  ~4 KB of file (two do not fit a 4 KB page); packed, they fill their pages.
* ``judge_view_keys (ns, key, block)``: which block holds the vector of a view key. A key is a
  hash of (model tag, view text), so the vector of a word, a value or a subject that many
  memories of a namespace share is stored once, not once per memory (the first layout stored
  every memory's 12–16 views in its own row: 25–60 KB a memory).
* ``judge_view_owners (ns, owner, keys)``: for each memory text (its owner hash), the keys of its
  views. A vector is kept while a memory text of its namespace lists its key: a hard delete
  drops the deleted texts' owner rows, then every vector of the namespace no live owner lists
  (so a word used only by a deleted memory goes, one another memory uses stays), and
  ``forget_user`` drops the namespaces' rows in all three tables.

There is deliberately no table shared across namespaces: a vector key left behind by a forgotten
user would tell which words that user's memories held. The connection uses ``secure_delete``
(deleted and rewritten blocks are zeroed in the file) and the caller's scrub truncates the WAL.

Reads and cache writes never fail (an error is logged: the judge computes the vectors itself);
deletes raise from the documented error tree (a privacy guarantee, not a cache miss).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import BackendUnavailable, MemoryBackendError
from memory.namespace import Namespace, ns_key

_log = logging.getLogger("memory.policy.view_cache")

_CHUNK = 400  # keys per SELECT (SQLite's default variable limit is far above; keeps statements small)
BLOCK_ENTRIES = 16  # vectors per block: ~33 KB of 512-d vectors, a chain of full overflow pages
_HEAD = 16 + 8 + 4  # key, digest, byte length of the vector


def view_key(tag: str, text: str) -> bytes:
    return hashlib.blake2b(f"{tag}\x00{text}".encode(), digest_size=16).digest()


def owner_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16, person=b"memory-owner").digest()


def _digest(key: bytes, vec: bytes) -> bytes:
    return hashlib.blake2b(key + vec, digest_size=8).digest()


def _pack(entries: dict[bytes, bytes]) -> bytes:
    """``{view key: float32 bytes}`` as one blob: per entry key, digest, length, vector."""
    return b"".join(k + _digest(k, v) + len(v).to_bytes(4, "little") + v for k, v in entries.items())


def _pack_raw(entries: dict[bytes, tuple[bytes, bytes]]) -> bytes:
    """Entries as read (digest kept: a damaged entry stays detectably damaged)."""
    return b"".join(k + d + len(v).to_bytes(4, "little") + v for k, (d, v) in entries.items())


def _unpack(blob: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    """``{view key: (digest, float32 bytes)}``; a truncated tail is dropped."""
    out: dict[bytes, tuple[bytes, bytes]] = {}
    i = 0
    while i + _HEAD <= len(blob):
        key, digest, n = blob[i: i + 16], blob[i + 16: i + 24], int.from_bytes(blob[i + 24: i + 28], "little")
        if i + _HEAD + n > len(blob):
            break
        out[bytes(key)] = (bytes(digest), bytes(blob[i + _HEAD: i + _HEAD + n]))
        i += _HEAD + n
    return out


def _split_keys(blob: bytes) -> list[bytes]:
    return [bytes(blob[i: i + 16]) for i in range(0, len(blob) - len(blob) % 16, 16)]


def _in(n: int) -> str:
    return ",".join("?" * n)


# ---------------------------------------------------------------------------- table access
# Functions of a connection, shared by ViewStore and the migration that converts the first
# layout. Callers hold a write transaction for the writing ones.

def _key_blocks(db: sqlite3.Connection, nsk: str, keys: Sequence[bytes]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for i in range(0, len(keys), _CHUNK):
        chunk = list(keys[i: i + _CHUNK])
        for k, b in db.execute(f"SELECT key, block FROM judge_view_keys WHERE ns = ? AND key IN ({_in(len(chunk))})",
                               [nsk, *chunk]):
            out[bytes(k)] = int(b)
    return out


def _blocks(db: sqlite3.Connection, ids: Iterable[int]) -> dict[int, dict[bytes, tuple[bytes, bytes]]]:
    ids = sorted(set(ids))
    out: dict[int, dict[bytes, tuple[bytes, bytes]]] = {}
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i: i + _CHUNK]
        for bid, data in db.execute(f"SELECT id, data FROM judge_view_blocks WHERE id IN ({_in(len(chunk))})", chunk):
            out[int(bid)] = _unpack(bytes(data))
    return out


def _owners(db: sqlite3.Connection, nsk: str, owners: Sequence[bytes]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for i in range(0, len(owners), _CHUNK):
        chunk = list(owners[i: i + _CHUNK])
        for o, keys in db.execute(f"SELECT owner, keys FROM judge_view_owners WHERE ns = ? AND owner IN "
                                  f"({_in(len(chunk))})", [nsk, *chunk]):
            out[bytes(o)] = _split_keys(bytes(keys))
    return out


def _rewrite(db: sqlite3.Connection, bid: int, entries: dict[bytes, tuple[bytes, bytes]], drop: set[bytes]) -> None:
    """Block ``bid`` without the entries ``drop`` (deleted when nothing is left)."""
    keep = {k: e for k, e in entries.items() if k not in drop}
    if keep:
        db.execute("UPDATE judge_view_blocks SET data = ? WHERE id = ?", (_pack_raw(keep), bid))
    else:
        db.execute("DELETE FROM judge_view_blocks WHERE id = ?", (bid,))


def _store_vectors(db: sqlite3.Connection, nsk: str, vectors: dict[bytes, bytes]) -> int:
    """Store ``{key: float32 bytes}`` under ``nsk``: a key already stored with these very bytes is
    left alone; one stored otherwise (damaged, another length) is replaced. Returns how many were written."""
    have = _key_blocks(db, nsk, list(vectors))
    stored = _blocks(db, set(have.values()))
    drop: dict[int, set[bytes]] = {}
    new: dict[bytes, bytes] = {}
    for k, v in vectors.items():
        b = have.get(k)
        if b is not None:
            d, old = stored.get(b, {}).get(k, (b"", b""))
            if old == v and d == _digest(k, v):
                continue
            drop.setdefault(b, set()).add(k)
        new[k] = v
    for b, keys in drop.items():
        _rewrite(db, b, stored.get(b, {}), keys)
    items = list(new.items())
    for i in range(0, len(items), BLOCK_ENTRIES):
        part = dict(items[i: i + BLOCK_ENTRIES])
        bid = db.execute("INSERT INTO judge_view_blocks (ns, data) VALUES (?, ?) RETURNING id",
                         (nsk, _pack(part))).fetchone()[0]
        db.executemany("INSERT INTO judge_view_keys (ns, key, block) VALUES (?, ?, ?) ON CONFLICT (ns, key) "
                       "DO UPDATE SET block = excluded.block", [(nsk, k, bid) for k in part])
    return len(new)


def _list_keys(db: sqlite3.Connection, nsk: str, owned: dict[bytes, list[bytes]]) -> None:
    """Add keys to owners' lists (an owner row is created on first use)."""
    cur = _owners(db, nsk, list(owned))
    for owner, keys in owned.items():
        old = cur.get(owner, [])
        add = [k for k in dict.fromkeys(keys) if k not in set(old)]
        if add:
            db.execute("INSERT INTO judge_view_owners (ns, owner, keys) VALUES (?, ?, ?) ON CONFLICT (ns, owner) "
                       "DO UPDATE SET keys = excluded.keys", (nsk, owner, b"".join(old + add)))


def _m002_shared_vectors(db: sqlite3.Connection) -> None:
    """Migration 2: one row per (namespace, memory text) holding all its views -> each distinct
    vector once per namespace (blocks, key index, owner lists). Damaged entries are not carried
    over (they are recomputed when next needed); the old table is dropped (secure_delete zeroes it)."""
    db.execute("CREATE TABLE judge_view_blocks (id INTEGER PRIMARY KEY, ns TEXT NOT NULL, data BLOB NOT NULL)")
    db.execute("CREATE INDEX judge_view_blocks_ns ON judge_view_blocks (ns)")
    db.execute("CREATE TABLE judge_view_keys (ns TEXT NOT NULL, key BLOB NOT NULL, block INTEGER NOT NULL, "
               "PRIMARY KEY (ns, key)) WITHOUT ROWID")
    db.execute("CREATE TABLE judge_view_owners (id INTEGER PRIMARY KEY, ns TEXT NOT NULL, owner BLOB NOT NULL, "
               "keys BLOB NOT NULL)")
    db.execute("CREATE UNIQUE INDEX judge_view_owners_owner ON judge_view_owners (ns, owner)")
    for (nsk,) in db.execute("SELECT DISTINCT ns FROM judge_views").fetchall():
        vectors: dict[bytes, bytes] = {}
        owned: dict[bytes, list[bytes]] = {}
        for owner, blob in db.execute("SELECT owner, views FROM judge_views WHERE ns = ? ORDER BY id", (nsk,)):
            good = [(k, v) for k, (d, v) in _unpack(bytes(blob)).items() if _digest(k, v) == d]
            vectors.update(good)
            owned[bytes(owner)] = [k for k, _ in good]
        _store_vectors(db, nsk, vectors)
        _list_keys(db, nsk, owned)
    db.execute("DROP TABLE judge_views")


MIGRATIONS: list[Any] = [
    # 1: one row per (namespace, memory text): every view vector of that text, packed (_pack).
    #    One 2 KB vector per row cost ~4.6 KB of file (two do not fit a 4 KB page, so each row
    #    took an overflow page); packed, a memory's views fill their pages.
    """
    CREATE TABLE judge_views (
        id INTEGER PRIMARY KEY,
        ns TEXT NOT NULL,
        owner BLOB NOT NULL,
        views BLOB NOT NULL
    );
    CREATE UNIQUE INDEX judge_views_owner ON judge_views (ns, owner)
    """,
    # 2: each distinct vector once per namespace (see the module docstring).
    _m002_shared_vectors,
]
_TABLES = ("judge_view_blocks", "judge_view_keys", "judge_view_owners")


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One IMMEDIATE transaction on an autocommit connection; rolled back on any error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class ViewStore:
    """The judge view tables of one SQLite file. Opened on first use; thread-safe.

    Reads and cache writes return normally on a database error (logged): it is a cache.
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._broken = False

    @classmethod
    def for_path(cls, path: str | Path) -> ViewStore | None:
        """The tables of a store file; None for ``":memory:"`` (one process: its own cache is enough)."""
        return None if str(path) == ":memory:" else cls(path)

    def _db(self) -> sqlite3.Connection | None:
        if self._conn is not None or self._broken:
            return self._conn
        from memory.backends.sqlite_schema import apply_migrations

        try:
            if self.path != ":memory:":
                Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 10000")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            # Deleted rows are zeroed in the file, as for the store and the audit log: the vector
            # of a forgotten text must not stay in free pages.
            conn.execute("PRAGMA secure_delete = ON")
            apply_migrations(conn, "judge_view_migrations", MIGRATIONS)
        except Exception as exc:  # noqa: BLE001 - a cache: the judge computes instead
            _log.warning("judge view cache unavailable at %s (%s); views are computed per process", self.path, exc)
            self._broken = True
            return None
        self._conn = conn
        return conn

    def lookup(self, namespace: Namespace, wanted: dict[bytes, set[bytes]], dims: dict[bytes, int]
               ) -> tuple[dict[tuple[bytes, bytes], np.ndarray], set[tuple[bytes, bytes]]]:
        """(vectors, listed) for the view keys ``wanted[owner]`` of owners under ``namespace``.

        ``vectors[(owner, key)]``: the stored vector of ``key`` in the namespace when it passes the
        checks (``dims[key]`` float32 values, checksum, finite) — a key names its content, so it
        serves every owner. ``listed``: the (owner, key) pairs the owner's row already lists.
        """
        found: dict[tuple[bytes, bytes], np.ndarray] = {}
        listed: set[tuple[bytes, bytes]] = set()
        if not wanted:
            return found, listed
        nsk = ns_key(namespace)
        keys = sorted({k for ks in wanted.values() for k in ks})
        with self._lock:
            db = self._db()
            if db is None:
                return found, listed
            try:
                where = _key_blocks(db, nsk, keys)
                blocks = _blocks(db, set(where.values()))
                owners = _owners(db, nsk, list(wanted))
            except sqlite3.Error as exc:
                _log.warning("judge view cache read failed (%s); computing the views", exc)
                return {}, set()
        vecs: dict[bytes, np.ndarray] = {}
        for k, b in where.items():
            hit = blocks.get(b, {}).get(k)
            if hit is None:
                continue
            digest, vec = hit
            if len(vec) != 4 * dims.get(k, -1) or _digest(k, vec) != digest:
                continue  # another dimension or a damaged entry: recompute
            v = np.frombuffer(vec, dtype=np.float32)
            if np.isfinite(v).all():
                vecs[k] = v.copy()
        for owner, ks in wanted.items():
            have = set(owners.get(owner, ()))
            for k in ks:
                if k in vecs:
                    found[(owner, k)] = vecs[k]
                if k in have:
                    listed.add((owner, k))
        return found, listed

    def get(self, namespace: Namespace, wanted: dict[bytes, set[bytes]],
            dims: dict[bytes, int]) -> dict[tuple[bytes, bytes], np.ndarray]:
        """``{(owner, key): vector}`` of :meth:`lookup`."""
        return self.lookup(namespace, wanted, dims)[0]

    def put(self, namespace: Namespace, rows: Iterable[tuple[bytes, bytes, np.ndarray | None]]) -> int:
        """Store ``(key, owner, vector)`` under ``namespace``: the vector once per key, the key in
        the owner's list (``vector=None``: only the listing, the vector is stored already).
        Returns how many vectors were written."""
        vectors: dict[bytes, bytes] = {}
        owned: dict[bytes, list[bytes]] = {}
        for key, owner, v in rows:
            owned.setdefault(owner, []).append(key)
            if v is not None:
                vectors[key] = np.ascontiguousarray(v, dtype=np.float32).tobytes()
        if not owned:
            return 0
        nsk = ns_key(namespace)
        with self._lock:
            db = self._db()
            if db is None:
                return 0
            try:
                with _immediate(db):  # read-modify-write: another process may add to the same rows
                    n = _store_vectors(db, nsk, vectors) if vectors else 0
                    _list_keys(db, nsk, owned)
            except sqlite3.Error as exc:
                _log.warning("judge view cache write failed (%s); the views will be computed again", exc)
                return 0
        return n

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """For deletes and their checks: an error is raised (from the documented tree), not hidden."""
        with self._lock:
            db = self._db()
            if db is None:
                return []
            try:
                return db.execute(sql, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                raise BackendUnavailable(f"judge view cache {self.path!r}: {exc}") from exc
            except sqlite3.Error as exc:
                raise MemoryBackendError(f"judge view cache {self.path!r}: {exc}") from exc

    def namespaces(self) -> list[str]:
        """The namespace keys that have rows."""
        return sorted({r[0] for t in _TABLES for r in self._query(f"SELECT DISTINCT ns FROM {t}")})

    def count(self, namespaces: Iterable[Namespace] | None = None) -> int:
        """Rows (owners, vector keys, blocks) under these namespaces (exactly), or in all."""
        if namespaces is None:
            return sum(int(r[0]) for t in _TABLES for r in self._query(f"SELECT COUNT(*) FROM {t}"))
        return sum(int(r[0]) for n in set(namespaces) for t in _TABLES
                   for r in self._query(f"SELECT COUNT(*) FROM {t} WHERE ns = ?", (ns_key(n),)))

    def vectors(self, namespaces: Iterable[Namespace] | None = None) -> int:
        """Distinct vectors stored under these namespaces, or in all."""
        if namespaces is None:
            return sum(int(r[0]) for r in self._query("SELECT COUNT(*) FROM judge_view_keys"))
        return sum(int(r[0]) for n in set(namespaces)
                   for r in self._query("SELECT COUNT(*) FROM judge_view_keys WHERE ns = ?", (ns_key(n),)))

    def forget_namespaces(self, namespaces: Iterable[Namespace]) -> int:
        """Drop every row of these namespaces (exact match); returns how many."""
        keys = [ns_key(n) for n in set(namespaces)]
        if not keys:
            return 0

        def run(db: sqlite3.Connection) -> int:
            return sum(db.execute(f"DELETE FROM {t} WHERE ns = ?", (k,)).rowcount for k in keys for t in _TABLES)
        return self._write(run)

    def purge(self, namespace: Namespace, live_owners: set[bytes]) -> int:
        """Drop the owner rows of ``namespace`` not among ``live_owners``, then every vector of the
        namespace no remaining owner lists; returns owner rows + vectors dropped."""
        nsk = ns_key(namespace)

        def run(db: sqlite3.Connection) -> int:
            rows = {bytes(o): bytes(k) for o, k in db.execute(
                "SELECT owner, keys FROM judge_view_owners WHERE ns = ?", (nsk,))}
            dead = [o for o in rows if o not in live_owners]
            for o in dead:
                db.execute("DELETE FROM judge_view_owners WHERE ns = ? AND owner = ?", (nsk, o))
            listed = {k for o, ks in rows.items() if o in live_owners for k in _split_keys(ks)}
            where = {bytes(k): int(b) for k, b in db.execute(
                "SELECT key, block FROM judge_view_keys WHERE ns = ?", (nsk,))}
            gone = [k for k in where if k not in listed]
            for k in gone:
                db.execute("DELETE FROM judge_view_keys WHERE ns = ? AND key = ?", (nsk, k))
            # Every block of the namespace is checked, not only those the dropped keys point to:
            # an entry nothing points to (a replaced or half-written one) must not outlive it either.
            for bid, data in db.execute("SELECT id, data FROM judge_view_blocks WHERE ns = ?", (nsk,)).fetchall():
                entries = _unpack(bytes(data))
                drop = {k for k in entries if k not in listed or where.get(k) != bid}
                if drop:
                    _rewrite(db, int(bid), entries, drop)
            return len(dead) + len(gone)
        return self._write(run)

    def _write(self, fn: Any) -> int:
        with self._lock:
            db = self._db()
            if db is None:
                return 0
            try:
                with _immediate(db):
                    return int(fn(db))
            # A delete that failed must be seen (a privacy guarantee, not a cache miss): raised
            # from the documented tree, like the audit log's errors.
            except sqlite3.OperationalError as exc:
                raise BackendUnavailable(f"judge view cache {self.path!r}: {exc}; the deleted memories' view "
                                         "vectors may remain: run the delete or forget-user again") from exc
            except sqlite3.Error as exc:
                raise MemoryBackendError(f"judge view cache {self.path!r}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["BLOCK_ENTRIES", "MIGRATIONS", "ViewStore", "owner_key", "view_key"]
