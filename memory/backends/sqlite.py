"""The embedded default backend: one SQLite file is the source of truth.

* Rows, vectors (float32 blobs) and an FTS5 keyword index live in one file (WAL mode), or in
  RAM with ``":memory:"``. Schema changes are numbered, append-only migrations.
* Vectors are served from an in-memory exact index (:mod:`memory.backends.vector_index`), and
  keyword scores from an in-memory BM25 index (:mod:`memory.backends.keyword_index`) that mirrors
  the FTS5 table and scores like its ``bm25()``; FTS5 keeps the terms durable.
* Several processes may share a file. Every write transaction bumps a sequence number stored
  in the file and stamps the rows it touched (deletions go to a log); before each operation a
  backend compares the file's sequence with the one its index has applied and loads only the
  difference. A write by one process is therefore visible to the next search of another.
* Keywords: FTS5 cannot segment Chinese, so :mod:`memory.text` tokenizes and the FTS column
  stores space-separated terms. Namespace prefixes are indexed as hashed terms in a second
  column, so FTS5 can count or delete a namespace's keyword entries without the rows.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from memory.backend import AsyncMixin, check_query, check_upsert
from memory.backends.keyword_index import KeywordIndex
from memory.backends.vector_index import VectorIndex
from memory.errors import BackendUnavailable, InvalidInput, MemoryBackendError, SchemaMismatch
from memory.filters import matches, validate_filter
from memory.namespace import Namespace, ancestors, ns_key
from memory.records import (
    INDEX_TEXT_VERSION,
    MemoryMetadata,
    MemoryQuery,
    MemoryRecord,
    ScoredMemory,
    as_utc,
    index_text,
    utcnow,
)
from memory.text import fts_document, tokenize

T = TypeVar("T")

MIGRATIONS: list[str] = [
    # 1: records, vectors, change log, keyword index
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta (key, value) VALUES ('seq', '0');
    CREATE TABLE memories (
        rid INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: the change log refers to it
        id TEXT NOT NULL UNIQUE,
        ns TEXT NOT NULL,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL,
        type TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        expires_at REAL,
        vector BLOB NOT NULL,
        seq INTEGER NOT NULL
    );
    CREATE INDEX memories_ns ON memories (ns);
    CREATE INDEX memories_seq ON memories (seq);
    CREATE INDEX memories_updated ON memories (updated_at);
    CREATE TABLE deletions (seq INTEGER NOT NULL, rid INTEGER NOT NULL);
    CREATE INDEX deletions_seq ON deletions (seq);
    CREATE VIRTUAL TABLE memories_fts USING fts5 (nsk, terms, tokenize = 'unicode61');
    """,
    # 2: per-column document frequencies, used to prune very common query terms at scale
    #    (no longer read: the in-memory KeywordIndex counts them; kept, migrations are append-only)
    """
    CREATE VIRTUAL TABLE memories_vocab USING fts5vocab (memories_fts, 'col');
    """,
    # 3: column conditions of filters select their rows before any record is read (_prefilter)
    """
    CREATE INDEX memories_created ON memories (created_at);
    CREATE INDEX memories_type ON memories (type);
    """,
]


def apply_migrations(conn: sqlite3.Connection, table: str, migrations: Sequence[str]) -> None:
    """Apply numbered, append-only migrations once each, safely across processes.

    ``table`` records the applied versions; each migration runs in its own IMMEDIATE
    transaction and is re-checked under the lock, since another process may have applied it
    between our read and our lock. Statements are split on ';' (no ';' inside SQL comments).
    """
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER PRIMARY KEY)")
    done = {r[0] for r in conn.execute(f"SELECT version FROM {table}")}
    for version, sql in enumerate(migrations, start=1):
        if version in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not conn.execute(f"SELECT 1 FROM {table} WHERE version = ?", (version,)).fetchone():
                for stmt in sql.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"INSERT INTO {table} (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _ns_term(ns: Namespace) -> str:
    return "n" + hashlib.blake2b(ns_key(ns).encode(), digest_size=10).hexdigest()


def _ns_terms(ns: Namespace) -> str:
    return " ".join(_ns_term(a) for a in ancestors(ns))


def _ns_clause(prefix: Namespace | None) -> tuple[str, list[Any]]:
    if prefix is None:
        return "1", []
    key = ns_key(prefix)
    # '/' is 0x2F and '0' is 0x30: the range holds exactly the keys starting with key + '/'.
    return "(ns = ? OR (ns >= ? AND ns < ?))", [key, key + "/", key + "0"]


def _ts(dt: Any) -> float | None:
    return None if dt is None else as_utc(dt).timestamp()


_TIME_COLS = ("created_at", "updated_at", "expires_at")


class SqliteBackend(AsyncMixin):
    """InMemory+SQLite backend.

    Example:
        >>> import numpy as np
        >>> from memory.backends.sqlite import SqliteBackend
        >>> from memory.records import MemoryRecord
        >>> b = SqliteBackend(":memory:", embedding_model="demo", dim=2)
        >>> b.upsert([MemoryRecord(id="m1", namespace="user_profile/u1", content="likes tea")],
        ...          np.array([[1.0, 0.0]], dtype=np.float32))
        >>> b.get(["m1"])[0].content
        'likes tea'
        >>> b.close()
    """

    supports_keyword = True

    def __init__(self, path: str | Path, *, embedding_model: str, dim: int, timeout_s: float = 10.0):
        if dim <= 0:
            raise InvalidInput(f"vector dimension must be positive, got {dim}")
        self.path = str(path)
        self.embedding_model = embedding_model
        self.dim = dim
        self._lock = threading.RLock()
        self._closed = False
        self._index = VectorIndex(dim)
        self._kw = KeywordIndex()
        self._records: OrderedDict[int, MemoryRecord] = OrderedDict()
        self._applied_seq = 0
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=timeout_s, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open SQLite file {self.path!r}: {exc}") from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
            self._check_model()
            self._reindex_if_stale()
            self._sync()
        except BaseException:
            self._conn.close()
            raise

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            msg = str(exc)
            if "locked" in msg or "busy" in msg or "unable to open" in msg or "disk I/O" in msg:
                raise BackendUnavailable(f"SQLite store {self.path!r} is unavailable: {msg}") from exc
            raise MemoryBackendError(f"SQLite error on {self.path!r}: {msg}") from exc
        except sqlite3.DatabaseError as exc:
            raise MemoryBackendError(f"SQLite error on {self.path!r}: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryBackendError("this backend is closed; open a new one")

    def _write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """Run ``fn(conn, seq)`` in one IMMEDIATE transaction with a fresh sequence number."""
        with self._lock, self._translate():
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._sync()  # catch up with other writers before applying ours
                self._conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'seq'")
                seq = int(self._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])
                result = fn(self._conn, seq)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                # Our indexes may hold changes that were rolled back: rebuild them from the file.
                self._reset_indexes()
                self._sync()
                raise
            self._applied_seq = seq
            return result

    def _migrate(self) -> None:
        with self._translate():
            apply_migrations(self._conn, "schema_migrations", MIGRATIONS)

    def _check_model(self) -> None:
        with self._translate():
            rows = dict(self._conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')"
            ).fetchall())
            if not rows:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('embedding_model', ?), ('embedding_dim', ?)",
                    (self.embedding_model, str(self.dim)),
                )
                self._conn.execute("COMMIT")
                rows = dict(self._conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')"
                ).fetchall())
        if rows.get("embedding_model") != self.embedding_model or int(rows.get("embedding_dim", -1)) != self.dim:
            raise SchemaMismatch(
                f"the store {self.path!r} was built with embedding model {rows.get('embedding_model')!r} "
                f"(dim {rows.get('embedding_dim')}), but it was opened with {self.embedding_model!r} "
                f"(dim {self.dim}). Open it with the same model (MEMORY_EMBEDDING__MODEL), or use "
                "another MEMORY_PATH for the new model."
            )

    def _index_version(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'index_text_version'").fetchone()
        return None if row is None else int(row[0])

    def _reindex_if_stale(self) -> None:
        """Re-tokenize every row once when the file was indexed under another INDEX_TEXT_VERSION.

        Rows are re-stamped with the new sequence number, so other processes reload their terms.
        """
        with self._translate():
            if self._index_version(self._conn) == INDEX_TEXT_VERSION:
                return

        def do(conn: sqlite3.Connection, seq: int) -> None:
            if self._index_version(conn) == INDEX_TEXT_VERSION:  # another process just did it
                return
            rows = conn.execute(f"SELECT {self._COLS} FROM memories").fetchall()
            conn.executemany("UPDATE memories_fts SET terms = ? WHERE rowid = ?",
                             [(fts_document(index_text(self._row_to_record(row))), row[0]) for row in rows])
            conn.execute("UPDATE memories SET seq = ?", (seq,))
            conn.execute("INSERT INTO meta (key, value) VALUES ('index_text_version', ?)"
                         " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(INDEX_TEXT_VERSION),))

        self._write(do)
        self._reset_indexes()  # the write above synced the old terms into our indexes

    def _sync(self) -> None:
        """Bring the in-memory vector index up to the file's sequence number."""
        db_seq = int(self._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])
        if db_seq == self._applied_seq:
            return
        if db_seq < self._applied_seq:  # file replaced or restored from backup: start over
            self._reset_indexes()
        elif self._applied_seq:
            floor = self._conn.execute("SELECT value FROM meta WHERE key = 'deletions_floor'").fetchone()
            if floor is not None and self._applied_seq < int(floor[0]):
                # Deletions we have not applied were pruned from the log: rebuild from the rows.
                self._reset_indexes()
        for (rid,) in self._conn.execute("SELECT rid FROM deletions WHERE seq > ?", (self._applied_seq,)):
            self._index.remove(rid)
            self._kw.remove(rid)
            self._records.pop(rid, None)
        for rid, ns, blob, terms in self._conn.execute(
            "SELECT m.rid, m.ns, m.vector, f.terms FROM memories AS m"
            " LEFT JOIN memories_fts AS f ON f.rowid = m.rid WHERE m.seq > ?", (self._applied_seq,)
        ):
            namespace = tuple(ns.split("/"))
            self._records.pop(rid, None)
            self._index.add(rid, namespace, np.frombuffer(blob, dtype="<f4"))
            self._index_terms(rid, namespace, (terms or "").split())
        self._applied_seq = db_seq

    # The deletion log tells other processes which rows to drop from their indexes. It is cut
    # back to its newest DELETION_LOG_KEEP entries once it holds twice that many; a process that
    # was behind the cut (meta 'deletions_floor') rebuilds its indexes from the rows instead.
    DELETION_LOG_KEEP = 50_000

    def _prune_deletions(self, conn: sqlite3.Connection) -> None:
        (n,) = conn.execute("SELECT COUNT(*) FROM deletions").fetchone()
        if n <= 2 * self.DELETION_LOG_KEEP:
            return
        (cut,) = conn.execute("SELECT seq FROM deletions ORDER BY seq DESC LIMIT 1 OFFSET ?",
                              (self.DELETION_LOG_KEEP,)).fetchone()
        conn.execute("DELETE FROM deletions WHERE seq <= ?", (cut,))
        conn.execute("INSERT INTO meta (key, value) VALUES ('deletions_floor', ?) ON CONFLICT (key)"
                     " DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))", (cut,))

    def _reset_indexes(self) -> None:
        self._index = VectorIndex(self.dim)
        self._kw = KeywordIndex()
        self._records.clear()
        self._applied_seq = 0

    def _index_terms(self, rid: int, ns: Namespace, terms: list[str]) -> None:
        # FTS5's document length counts the namespace column's tokens too (one per ancestor).
        self._kw.add(rid, ns, terms, doc_len=len(terms) + len(ns))

    @staticmethod
    def _row_to_record(row: Sequence[Any]) -> MemoryRecord:
        rid_, id_, ns, content, meta, created, updated, expires = row
        return MemoryRecord.model_construct(
            id=id_,
            namespace=tuple(ns.split("/")),
            content=content,
            metadata=MemoryMetadata.model_validate_json(meta),
            created_at=as_utc(created),
            updated_at=as_utc(updated),
            expires_at=None if expires is None else as_utc(expires),
        )

    _COLS = "rid, id, ns, content, metadata, created_at, updated_at, expires_at"

    # ------------------------------------------------------------------ primitives
    def upsert(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        # Validated before anything is written (a queued write must be one the primary accepts).
        records, vecs = check_upsert(records, vectors, dim=self.dim, model=self.embedding_model)
        if not records:
            return

        def do(conn: sqlite3.Connection, seq: int) -> None:
            for r, v in zip(records, vecs, strict=True):
                rid = conn.execute(
                    """INSERT INTO memories (id, ns, content, metadata, type, created_at, updated_at,
                                             expires_at, vector, seq)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT (id) DO UPDATE SET ns = excluded.ns, content = excluded.content,
                         metadata = excluded.metadata, type = excluded.type,
                         created_at = excluded.created_at, updated_at = excluded.updated_at,
                         expires_at = excluded.expires_at, vector = excluded.vector, seq = excluded.seq
                       RETURNING rid""",
                    (
                        r.id, ns_key(r.namespace), r.content, r.metadata.model_dump_json(),
                        r.metadata.type, _ts(r.created_at), _ts(r.updated_at), _ts(r.expires_at),
                        v.astype("<f4").tobytes(), seq,
                    ),
                ).fetchone()[0]
                terms = fts_document(index_text(r))
                conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rid,))
                conn.execute(
                    "INSERT INTO memories_fts (rowid, nsk, terms) VALUES (?, ?, ?)",
                    (rid, _ns_terms(r.namespace), terms),
                )
                self._index.add(rid, r.namespace, v)
                self._index_terms(rid, r.namespace, terms.split())
                self._records.pop(rid, None)

        self._write(do)

    def get(self, ids: Sequence[str]) -> list[MemoryRecord]:
        ids = list(ids)
        if not ids:
            return []
        now = utcnow().timestamp()
        with self._lock, self._translate():
            self._check_open()
            found: dict[str, MemoryRecord] = {}
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                for row in self._conn.execute(
                    f"SELECT {self._COLS} FROM memories WHERE id IN ({','.join('?' * len(chunk))})"
                    " AND (expires_at IS NULL OR expires_at > ?)",
                    (*chunk, now),
                ):
                    rec = self._row_to_record(row)
                    found[rec.id] = rec
        return [found[i] for i in ids if i in found]

    def get_vectors(self, ids: Sequence[str]) -> np.ndarray:
        """Stored vectors of ``ids`` (expired or not), row i for ids[i]; for migrations.

        Raises:
            NotFound: some id is not stored.
        """
        from memory.errors import NotFound

        ids = list(ids)
        found: dict[str, np.ndarray] = {}
        with self._lock, self._translate():
            self._check_open()
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                for id_, blob in self._conn.execute(
                    f"SELECT id, vector FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk
                ):
                    found[id_] = np.frombuffer(blob, dtype="<f4")
        missing = [x for x in ids if x not in found]
        if missing:
            raise NotFound(f"no stored vector for ids {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for row, x in enumerate(ids):
            out[row] = found[x]
        return out

    # Parsed records kept per row id (LRU). Searches keep reading the same hot memories (a
    # user's profile and definitions are candidates of nearly every search), and parsing a
    # row (JSON metadata, timestamps) costs more than finding it. Entries are dropped whenever
    # the row changes here or in another process (see _sync), so the cache is never stale.
    RECORD_CACHE = 8192

    def _fetch_rids(self, rids: Sequence[int] | set[int], now: float) -> dict[int, MemoryRecord]:
        out: dict[int, MemoryRecord] = {}
        cache = self._records
        missing: list[int] = []
        for rid in rids:
            rec = cache.get(rid)
            if rec is None:
                missing.append(rid)
                continue
            cache.move_to_end(rid)
            if rec.expires_at is None or rec.expires_at.timestamp() > now:
                out[rid] = rec
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            for row in self._conn.execute(
                f"SELECT {self._COLS} FROM memories WHERE rid IN ({','.join('?' * len(chunk))})", chunk
            ):
                rec = self._row_to_record(row)
                cache[row[0]] = rec
                if rec.expires_at is None or rec.expires_at.timestamp() > now:
                    out[row[0]] = rec
        while len(cache) > self.RECORD_CACHE:
            cache.popitem(last=False)
        return out

    # Above this many rows, query terms that occur in more than PRUNE_DF of them are dropped
    # from the keyword match (at least PRUNE_KEEP rarest terms are kept). Such a term adds almost
    # nothing to BM25 (its IDF is near zero) but its postings are the longest to score.
    PRUNE_MIN_ROWS = 20_000
    PRUNE_DF = 0.02
    PRUNE_KEEP = 2

    def _query_terms(self, text: str) -> tuple[list[str], dict[str, int]]:
        """Distinct query terms worth scoring, and their document frequencies."""
        terms = list(dict.fromkeys(tokenize(text)))
        df = self._kw.df(terms)
        total = len(self._kw)
        if total >= self.PRUNE_MIN_ROWS and len(terms) > self.PRUNE_KEEP:
            present = sorted((t for t in terms if t in df), key=lambda t: df[t])
            keep = [t for i, t in enumerate(present) if i < self.PRUNE_KEEP or df[t] <= self.PRUNE_DF * total]
            terms = keep or terms
        return terms, df

    def _keyword_arrays(self, blocks: list[Namespace], text: str) -> tuple[np.ndarray, np.ndarray]:
        """Every keyword match in ``blocks``: (rids, BM25) as arrays, best first.

        Kept as arrays: a query with common terms matches thousands of rows at 100k, and a
        Python tuple per match made the garbage collector a visible part of the p95.
        """
        terms, df = self._query_terms(text)
        rids, scores = self._kw.search(blocks, terms, df=df)
        order = np.lexsort((rids, -scores))  # ties by rid, so the order is deterministic
        return rids[order], scores[order]

    def _keyword(self, blocks: list[Namespace], text: str) -> list[tuple[int, float]]:
        """Every keyword match in ``blocks`` as (rid, BM25), best first (for inspection)."""
        rids, scores = self._keyword_arrays(blocks, text)
        return list(zip(rids.tolist(), scores.tolist(), strict=True))

    def query(self, q: MemoryQuery) -> list[ScoredMemory]:
        flt, qvec = check_query(q, dim=self.dim, model=self.embedding_model)
        if q.limit <= 0:
            return []
        now = q.now.timestamp()
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            blocks = self._index.matching(q.namespaces)
            total = self._index.size(blocks)
            allowed = self._prefilter(q.namespaces, flt, now, json_only=False) if flt and blocks else None
            # Only unindexed (JSON) conditions: scanning for them costs ~3 us a row (~0.3 s at
            # 100k), more than a common filter's whole search, so first try reading candidates.
            deferred = False
            if flt and blocks and allowed is None:
                conds, _, indexed = self._filter_sql(flt)
                deferred = bool(conds) and not indexed
            if allowed is not None:
                total = len(allowed)
            if q.text and blocks:
                kw_rids, kw_scores = self._keyword_arrays(blocks, q.text)
                if allowed is not None:
                    keep = np.isin(kw_rids, allowed)
                    kw_rids, kw_scores = kw_rids[keep], kw_scores[keep]
            else:
                kw_rids, kw_scores = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            fetch = q.limit
            # Expired or filtered-out rows are only found when their record is read, so read
            # the top `fetch` of each list and widen until `limit` survive or nothing is left.
            while True:
                vec_hits: list[tuple[int, float]] = []
                if qvec is not None and allowed is not None:
                    r, s = self._index.search_rids(allowed, qvec, fetch)
                    vec_hits = list(zip(r.tolist(), s.tolist(), strict=True))
                elif qvec is not None and blocks:
                    r, s = self._index.search(blocks, qvec, fetch)
                    vec_hits = list(zip(r.tolist(), s.tolist(), strict=True))
                kw_hits = list(zip(kw_rids[:fetch].tolist(), kw_scores[:fetch].tolist(), strict=True))
                records = self._fetch_rids({r for r, _ in vec_hits} | {r for r, _ in kw_hits}, now)
                if flt:
                    records = {rid: rec for rid, rec in records.items() if matches(rec, flt)}
                vec_kept = [(r, s) for r, s in vec_hits if r in records][: q.limit]
                kw_kept = [(r, s) for r, s in kw_hits if r in records][: q.limit]
                vec_done = len(vec_kept) >= q.limit or len(vec_hits) < fetch
                kw_done = len(kw_kept) >= q.limit or len(kw_rids) <= fetch
                if (vec_done and kw_done) or fetch >= total:
                    break
                if deferred and fetch >= self.DEFER_JSON_FETCH:
                    deferred = False  # a rare filter: select its rows in SQL after all
                    found = self._prefilter(q.namespaces, flt, now)
                    if found is not None:
                        allowed, total, fetch = found, len(found), q.limit
                        keep = np.isin(kw_rids, allowed)
                        kw_rids, kw_scores = kw_rids[keep], kw_scores[keep]
                        continue
                fetch = min(total, fetch * 4)
            vec_score = dict(vec_kept)
            chosen = list(dict.fromkeys([r for r, _ in vec_kept] + [r for r, _ in kw_kept]))
            kw_score = self._lookup(kw_rids, kw_scores, chosen)
            if qvec is not None:
                for r, _ in kw_kept:
                    if r not in vec_score:
                        v = self._index.vector(r)
                        vec_score[r] = float(v @ qvec) if v is not None else 0.0
            out = []
            for rid in chosen:
                out.append(ScoredMemory(
                    record=records[rid],
                    vector_score=vec_score.get(rid) if qvec is not None else None,
                    keyword_score=kw_score.get(rid, 0.0) if q.text else None,
                ))
            return out

    # A filter is applied to records after they are read, widening the read until enough pass;
    # a filter few rows pass would read the whole namespace (seconds at 100k). Conditions are
    # therefore first turned into the set of rows that can pass, and the search is confined to
    # it when it is small: real columns (type; time ranges) through their indexes, equality on
    # source / agent / tags / extra.<name> through json_extract over the namespace's rows (no
    # index, but SQL reads a row in microseconds where building a record takes tens). The set
    # is a superset (time bounds get a millisecond of slack): `matches` still decides, so
    # results are unchanged.
    PREFILTER_MAX_ROWS = 20_000
    DEFER_JSON_FETCH = 500  # candidates read before a JSON-only filter is selected in SQL
    _EXTRA_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")

    @classmethod
    def _json_condition(cls, key: str, op: str, val: Any) -> tuple[str, list[Any]] | None:
        """SQL that every row passing ``key op val`` satisfies, for equality-like conditions."""
        vals = [val] if op == "$eq" else list(val) if op == "$in" and val else None
        if vals is None:
            return None
        marks = ",".join("?" * len(vals))
        if key in ("source", "agent", "tags"):
            if not all(isinstance(v, str) for v in vals):
                return None
            if key == "tags":
                return f"EXISTS (SELECT 1 FROM json_each(metadata, '$.tags') WHERE value IN ({marks}))", vals
            return f"json_extract(metadata, '$.{key}') IN ({marks})", vals
        name = key[len("extra."):]
        if not key.startswith("extra.") or not cls._EXTRA_NAME.fullmatch(name):
            return None
        # Strings and exactly representable numbers compare in SQL as in Python (a JSON true is
        # 1 there, as True == 1 here); anything else is left to `matches`.
        if not all(isinstance(v, str) or (isinstance(v, int | float) and abs(v) < 2**53) for v in vals):
            return None
        return f"json_extract(metadata, '$.extra.\"{name}\"') IN ({marks})", vals

    def _prefilter(self, namespaces: Sequence[Namespace], flt: dict[str, Any], now: float, *,
                   json_only: bool = True) -> np.ndarray | None:
        """Rows that can pass ``flt`` (a superset), or None when too many can (or, with
        ``json_only=False``, when only unindexed JSON conditions would select them)."""
        conds, params, indexed = self._filter_sql(flt)
        if not conds or (not indexed and not json_only):
            return None
        ns_sql, ns_params = [], []
        for ns in namespaces:
            clause, p = _ns_clause(ns)
            # unary +: keep the planner off the namespace index so it uses the filter's index
            ns_sql.append(clause.replace("ns ", "+ns ") if indexed else clause)
            ns_params += p
        rows = self._conn.execute(
            f"SELECT rid FROM memories WHERE ({' OR '.join(ns_sql)}) AND {' AND '.join(conds)}"
            f" AND (expires_at IS NULL OR expires_at > ?) LIMIT {self.PREFILTER_MAX_ROWS + 1}",
            (*ns_params, *params, now),
        ).fetchall()
        if len(rows) > self.PREFILTER_MAX_ROWS:
            return None  # many rows can pass: reading and filtering the top ones is cheaper
        return np.fromiter((r for (r,) in rows), dtype=np.int64, count=len(rows))

    def _filter_sql(self, flt: dict[str, Any]) -> tuple[list[str], list[Any], bool]:
        """SQL conditions implied by ``flt``, their parameters, and whether one is indexed."""
        conds: list[str] = []
        params: list[Any] = []
        indexed = False  # a condition on an indexed column: let the planner start from it
        for key, (op, val) in flt.items():
            json_cond = self._json_condition(key, op, val) if key not in ("type", *_TIME_COLS) else None
            if json_cond is not None:
                conds.append(json_cond[0])
                params += json_cond[1]
                continue
            before = len(conds)
            if key == "type" and op == "$eq" and isinstance(val, str):
                conds.append("type = ?")
                params.append(val)
            elif key == "type" and op == "$in" and val and all(isinstance(v, str) for v in val):
                conds.append(f"type IN ({','.join('?' * len(val))})")
                params += list(val)
            elif key in _TIME_COLS:
                if op in ("$gt", "$gte", "$eq"):
                    conds.append(f"{key} >= ?")
                    params.append(val.timestamp() - 1e-3)
                if op in ("$lt", "$lte", "$eq"):
                    conds.append(f"{key} <= ?")
                    params.append(val.timestamp() + 1e-3)
            indexed = indexed or (len(conds) > before and key in ("type", "created_at", "updated_at"))
        return conds, params, indexed

    @staticmethod
    def _lookup(rids: np.ndarray, scores: np.ndarray, wanted: list[int]) -> dict[int, float]:
        """Scores of the ``wanted`` rids among (rids, scores); absent rids are left out."""
        if not len(rids) or not wanted:
            return {}
        order = np.argsort(rids, kind="stable")
        srt = rids[order]
        w = np.asarray(wanted, dtype=np.int64)
        pos = np.minimum(np.searchsorted(srt, w), len(srt) - 1)
        hit = srt[pos] == w
        return dict(zip(w[hit].tolist(), scores[order][pos[hit]].tolist(), strict=True))

    def _select_rids(self, namespace: Namespace | None, flt: dict[str, Any] | None,
                     include_expired: bool) -> list[int]:
        where, params = _ns_clause(namespace)
        if not include_expired:
            where += " AND (expires_at IS NULL OR expires_at > ?)"
            params.append(utcnow().timestamp())
        if not flt:
            return [r for (r,) in self._conn.execute(f"SELECT rid FROM memories WHERE {where}", params)]
        return [
            row[0]
            for row in self._conn.execute(f"SELECT {self._COLS} FROM memories WHERE {where}", params)
            if matches(self._row_to_record(row), flt)
        ]

    def delete(self, ids: Sequence[str] | None = None, *, namespace: Namespace | None = None,
               filter: dict[str, Any] | None = None, include_expired: bool = True) -> int:
        flt = validate_filter(filter)
        if ids is None and namespace is None and not flt:
            raise InvalidInput("delete needs ids, a namespace or a filter; refusing to delete everything")

        def do(conn: sqlite3.Connection, seq: int) -> int:
            if ids is not None:
                id_list = list(ids)
                rids = []
                for i in range(0, len(id_list), 500):
                    chunk = id_list[i : i + 500]
                    rids += [r for (r,) in conn.execute(
                        f"SELECT rid FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk)]
            else:
                rids = self._select_rids(namespace, flt, include_expired)
            for i in range(0, len(rids), 500):
                chunk = rids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                conn.execute(f"DELETE FROM memories WHERE rid IN ({marks})", chunk)
                conn.execute(f"DELETE FROM memories_fts WHERE rowid IN ({marks})", chunk)
                conn.executemany("INSERT INTO deletions (seq, rid) VALUES (?, ?)", [(seq, r) for r in chunk])
            for r in rids:
                self._index.remove(r)
                self._kw.remove(r)
                self._records.pop(r, None)
            if rids:
                self._prune_deletions(conn)
            return len(rids)

        return self._write(do)

    def scroll(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
               limit: int = 100, offset: int = 0, include_expired: bool = False) -> list[MemoryRecord]:
        flt = validate_filter(filter)
        if limit < 0 or offset < 0:
            raise InvalidInput("limit and offset must be >= 0")
        where, params = _ns_clause(namespace)
        if not include_expired:
            where += " AND (expires_at IS NULL OR expires_at > ?)"
            params.append(utcnow().timestamp())
        with self._lock, self._translate():
            self._check_open()
            sql = f"SELECT {self._COLS} FROM memories WHERE {where} ORDER BY updated_at DESC, rid DESC"
            if not flt:
                rows = self._conn.execute(sql + " LIMIT ? OFFSET ?", (*params, limit, offset))
                return [self._row_to_record(r) for r in rows]
            out: list[MemoryRecord] = []
            skipped = 0
            for row in self._conn.execute(sql, params):
                rec = self._row_to_record(row)
                if not matches(rec, flt):
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                out.append(rec)
                if len(out) >= limit:
                    break
            return out

    def count(self, namespace: Namespace | None = None, *, filter: dict[str, Any] | None = None,
              include_expired: bool = False) -> int:
        flt = validate_filter(filter)
        with self._lock, self._translate():
            self._check_open()
            if flt:
                return len(self._select_rids(namespace, flt, include_expired))
            where, params = _ns_clause(namespace)
            if not include_expired:
                where += " AND (expires_at IS NULL OR expires_at > ?)"
                params.append(utcnow().timestamp())
            return int(self._conn.execute(f"SELECT COUNT(*) FROM memories WHERE {where}", params).fetchone()[0])

    def size_hint(self, namespace: Namespace) -> int:
        """Rows under a namespace prefix, expired ones included: an upper bound of ``count``
        from the in-memory index, without a query."""
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            return self._index.size(self._index.matching([namespace]))

    def namespaces(self) -> list[tuple[Namespace, int]]:
        with self._lock, self._translate():
            self._check_open()
            rows = self._conn.execute("SELECT ns, COUNT(*) FROM memories GROUP BY ns ORDER BY ns").fetchall()
        return [(tuple(ns.split("/")), int(n)) for ns, n in rows]

    def residue(self, namespace: Namespace) -> dict[str, int]:
        """What is left of a namespace prefix in rows, vectors and keyword entries (for forget-user)."""
        where, params = _ns_clause(namespace)
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            rows = int(self._conn.execute(f"SELECT COUNT(*) FROM memories WHERE {where}", params).fetchone()[0])
            kw = int(self._conn.execute(
                "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH ?", (f"nsk : {_ns_term(namespace)}",)
            ).fetchone()[0])
            vectors = self._index.size(self._index.matching([namespace]))
        return {"rows": rows, "vectors": vectors, "keyword_entries": kw}

    def stats(self) -> dict[str, Any]:
        """Sizes for ``memctl stats``: rows, keyword rows, indexed vectors, file size."""
        with self._lock, self._translate():
            self._check_open()
            self._sync()
            rows = int(self._conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])
            fts = int(self._conn.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0])
        size = 0
        if self.path != ":memory:":
            size = sum(p.stat().st_size for p in Path(self.path).parent.glob(Path(self.path).name + "*"))
        return {
            "backend": "sqlite", "path": self.path, "embedding_model": self.embedding_model,
            "dim": self.dim, "rows": rows, "keyword_rows": fts, "vectors": len(self._index),
            "file_bytes": size,
        }

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> SqliteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


