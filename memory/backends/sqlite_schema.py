"""The SQLite file's layout: numbered migrations, the row <-> record codec, namespace SQL.

Shared by :class:`~memory.backends.sqlite.SqliteBackend` and its mixins, and by the audit log
(:mod:`memory.policy.audit`), which keeps its own migrations in the same file.
"""

from __future__ import annotations

import hashlib
import sqlite3
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memory.errors import InvalidConfig, SchemaMismatch, StoreCorrupt, StoreReadOnly
from memory.namespace import Namespace, ancestors, ns_key
from memory.records import MemoryMetadata, MemoryRecord, as_utc

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


def apply_migrations(conn: sqlite3.Connection, table: str,
                     migrations: Sequence[str | Callable[[sqlite3.Connection], None]]) -> None:
    """Apply numbered, append-only migrations once each, safely across processes.

    ``table`` records the applied versions; each migration runs in its own IMMEDIATE
    transaction and is re-checked under the lock, since another process may have applied it
    between our read and our lock. Statements are split on ';' (no ';' inside SQL comments).
    A migration may also be a function of the connection (data SQL cannot convert, e.g. packed
    blobs); it runs inside the same transaction, so it is applied whole or not at all.
    """
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER PRIMARY KEY)")
    done = {r[0] for r in conn.execute(f"SELECT version FROM {table}")}
    check_not_newer(table, max(done, default=0), len(migrations))
    for version, sql in enumerate(migrations, start=1):
        if version in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not conn.execute(f"SELECT 1 FROM {table} WHERE version = ?", (version,)).fetchone():
                if callable(sql):
                    sql(conn)
                else:
                    for stmt in sql.split(";"):
                        if stmt.strip():
                            conn.execute(stmt)
                conn.execute(f"INSERT INTO {table} (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (disk full): a second ROLLBACK would hide the error.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


# Every table a store file of this package may hold: the store, its audit log, collection
# registry, judge views and consolidation marks, their migration tables, and the tables that may
# be kept in the same file (the cross-process transcript, the write-behind journal, the outbox).
OWN_TABLES = frozenset({
    "meta", "memories", "deletions", "memories_fts", "memories_vocab", "schema_migrations",
    "audit_events", "audit_trash", "audit_migrations", "doc_collections", "doc_files", "doc_migrations",
    "judge_views", "judge_view_blocks", "judge_view_keys", "judge_view_owners", "judge_view_migrations",
    "consolidation_marks", "group_transcript", "pending_writes", "ops", "dead",
})


# Table names another program may well use too: such a table counts as ours only when its first
# columns are ours (name and declared type). A foreign "memories" table, or a Rails-style
# "schema_migrations" with text versions, made a foreign file look like a store: opening it then
# added our migration table to it and failed ("table memories already exists", or a TypeError).
_GENERIC: dict[str, tuple[tuple[str, str], ...]] = {
    "meta": (("key", "TEXT"), ("value", "TEXT")),
    "memories": (("rid", "INTEGER"), ("id", "TEXT"), ("ns", "TEXT"), ("content", "TEXT"), ("metadata", "TEXT")),
    "deletions": (("seq", "INTEGER"), ("rid", "INTEGER")),
    "schema_migrations": (("version", "INTEGER"),),
    "ops": (("seq", "INTEGER"), ("kind", "TEXT"), ("body", "TEXT")),
    "dead": (("seq", "INTEGER"), ("kind", "TEXT"), ("body", "TEXT")),
}


def _is_ours(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` (one of OWN_TABLES' names) has our layout, for the generic names."""
    want = _GENERIC.get(table)
    if want is None:
        return True
    cols = [(r[1], str(r[2]).upper()) for r in conn.execute(f'PRAGMA table_info("{table}")')]
    return tuple(cols[: len(want)]) == want


# Files this process has already found to be stores of ours: the backend and each side table
# (audit log, collections, consolidation marks) open the same file, and one peek is enough.
# Keyed by path and inode, so a file replaced under the same name is looked at again.
_VERIFIED: set[tuple[str, int, int]] = set()


def refuse_foreign(path: str) -> None:
    """Raise :class:`StoreCorrupt` when ``path`` is an SQLite database of another program.

    Opening a file creates our tables in it (and switches it to WAL). Pointed by mistake at, say,
    LangGraph's own ``SqliteStore`` or checkpointer file, a ``memctl search`` used to add a dozen
    tables to that database and answer "no memories matched". A file that exists, holds tables
    and none of ours (a table with a generic name of ours, "memories", "meta", ..., counts only with
    our columns) is refused before anything is written; an empty or new file, a store of ours
    (with or without tables of the user's own beside it) and a file that is no database at all
    (reported by the normal open as damaged) pass. Read-only peek: one connection, no write.
    """
    if path == ":memory:":
        return
    p = Path(path).expanduser()
    try:
        st = p.stat() if p.is_file() else None
        if st is None or st.st_size == 0:
            return
        real = str(p.resolve())
        key = (real, st.st_dev, st.st_ino)
        if key in _VERIFIED:
            return
        uri = f"file:{urllib.parse.quote(real)}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=10)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            ours = any(_is_ours(conn, n) for n in sorted(names & OWN_TABLES))
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return  # unreadable or not a database: the normal open says what is wrong
    tables = {n for n in names if not n.startswith("sqlite_")}
    if ours:
        _VERIFIED.add(key)
        return
    if not tables:
        return
    shown = ", ".join(sorted(tables)[:6]) + (", ..." if len(tables) > 6 else "")
    raise StoreCorrupt(
        f"{path!r} is an SQLite database of another program (tables: {shown}), not a memory store; "
        "nothing was written to it. Point MEMORY_PATH (or --path) at a new file, or at a store this "
        "package created."
    )


def check_store_path(path: str, *, create_parent: bool = True) -> None:
    """Refuse a store path that names a directory, or lies under a regular file, with what to do;
    create its missing parent directories (``create_parent``). A folder used to give "unable to
    open database file", a path under a file a FileExistsError traceback from mkdir.

    Raises:
        InvalidConfig: the path cannot be a file.
        StoreReadOnly: its directory cannot be created (permissions, a read-only mount).
    """
    if path == ":memory:":
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise InvalidConfig(f"store path {path!r} is a directory; point MEMORY_PATH (or --path) at a file, "
                            f"e.g. {str(p / 'memory.sqlite')!r}")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidConfig(f"store path {path!r}: {str(parent)!r} is a file, not a directory; point "
                                    "MEMORY_PATH (or --path) somewhere else")
            break
    if create_parent:
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreReadOnly(f"cannot create the store's directory {str(p.parent)!r}: {exc.strerror or exc}; "
                                "point MEMORY_PATH (or --path) at a writable place") from exc


def open_side_db(path: str, *, secure_delete: bool = False) -> sqlite3.Connection:
    """A connection for a table kept beside the store (audit log, collection registry, judge views,
    consolidation marks): autocommit, usable from the worker threads, waiting up to 10 s for
    another process's write lock. Files get WAL + ``synchronous = NORMAL`` as the store does (in WAL
    mode NORMAL cannot corrupt the file; it only skips an fsync per commit, so a power cut may lose
    the last events and a crash does not). ``secure_delete`` zeroes deleted rows in the file, for
    tables whose deletes promise the text is gone from the bytes on disk. Raises ``sqlite3.Error``:
    each caller says what it was opening; :class:`StoreCorrupt` for another program's database
    (:func:`refuse_foreign`)."""
    refuse_foreign(path)
    check_store_path(path)
    conn = sqlite3.connect(path, timeout=10, check_same_thread=False, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        if path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        if secure_delete:
            conn.execute("PRAGMA secure_delete = ON")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def check_not_newer(what: str, found: int, known: int) -> None:
    """Refuse a file written by a newer version of this package: opening it anyway would run old
    code over a layout it does not know (it re-tokenised newer keyword terms down, silently).

    Raises:
        SchemaMismatch: naming both versions and what to do.
    """
    if found > known:
        raise SchemaMismatch(
            f"this store was written by a newer version of langgraph-memory ({what} version {found}; this "
            f"version knows up to {known}); nothing was changed. Upgrade langgraph-memory to open it, "
            "or use another MEMORY_PATH"
        )


def ns_term(ns: Namespace) -> str:
    """The hashed keyword term marking a namespace in the FTS ``nsk`` column."""
    return "n" + hashlib.blake2b(ns_key(ns).encode(), digest_size=10).hexdigest()


def ns_terms(ns: Namespace) -> str:
    """``nsk`` column text: one term per ancestor, so a prefix matches every namespace below it."""
    return " ".join(ns_term(a) for a in ancestors(ns))


def ns_clause(prefix: Namespace | None) -> tuple[str, list[Any]]:
    """SQL (and parameters) selecting the rows under a namespace prefix (all rows for None)."""
    if prefix is None:
        return "1", []
    key = ns_key(prefix)
    # '/' is 0x2F and '0' is 0x30: the range holds exactly the keys starting with key + '/'.
    return "(ns = ? OR (ns >= ? AND ns < ?))", [key, key + "/", key + "0"]


def epoch(dt: Any) -> float | None:
    """A datetime (or None) as the epoch seconds stored in the time columns."""
    return None if dt is None else as_utc(dt).timestamp()


TIME_COLS = ("created_at", "updated_at", "expires_at")

# The columns every record read selects, in row_to_record's order.
COLS = "rid, id, ns, content, metadata, created_at, updated_at, expires_at"


# Parsed records are cached (up to 8,192 per process, see sqlite_query.QueryMixin.RECORD_CACHE), so
# their size is every worker's private memory: a record parsed the plain way took ~2.4 KB, of
# which ~1.5 KB were two 7- and 5-name sets (pydantic's "fields set", one per model instance), a
# metadata object identical to thousands of others, and the namespace tuple. Records and metadata
# are frozen models (no attribute is ever set on them, and model_copy copies the set before it
# updates it), so one set of names, one namespace tuple per namespace and one metadata object per
# distinct short JSON text can be shared by every record.
_RECORD_FIELDS = set(MemoryRecord.model_fields)
_META_FIELDS = set(MemoryMetadata.model_fields)
_SHARED_MAX = 4096  # distinct namespaces / metadata texts kept for sharing (then started afresh)
_SHARED_META_CHARS = 256  # longer metadata (contexts, user fields) is rarely repeated: not kept
_namespaces: dict[str, tuple[str, ...]] = {}
_metadata: dict[str, MemoryMetadata] = {}


def _namespace(ns: str) -> tuple[str, ...]:
    got = _namespaces.get(ns)
    if got is None:
        if len(_namespaces) >= _SHARED_MAX:
            _namespaces.clear()
        got = _namespaces[ns] = tuple(ns.split("/"))
    return got


def _meta(text: str) -> MemoryMetadata:
    got = _metadata.get(text)
    if got is not None:
        return got
    meta = MemoryMetadata.model_validate_json(text)
    if meta.__pydantic_fields_set__ == _META_FIELDS:
        object.__setattr__(meta, "__pydantic_fields_set__", _META_FIELDS)
    if len(text) <= _SHARED_META_CHARS:
        if len(_metadata) >= _SHARED_MAX:
            _metadata.clear()
        _metadata[text] = meta
    return meta


def row_to_record(row: Sequence[Any]) -> MemoryRecord:
    """A ``SELECT {COLS}`` row as a record (trusted data: no validation beyond the metadata JSON)."""
    rid_, id_, ns, content, meta, created, updated, expires = row
    return MemoryRecord.model_construct(
        _RECORD_FIELDS,
        id=id_,
        namespace=_namespace(ns),
        content=content,
        metadata=_meta(meta),
        created_at=as_utc(created),
        updated_at=as_utc(updated),
        expires_at=None if expires is None else as_utc(expires),
    )


__all__ = ["COLS", "MIGRATIONS", "TIME_COLS", "apply_migrations", "check_not_newer", "epoch", "ns_clause", "ns_term",
           "ns_terms",
           "row_to_record"]
