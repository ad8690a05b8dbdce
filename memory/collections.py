"""Markdown collections: folders of notes indexed as searchable memories, read-only.

A collection is a name, a folder and a glob (``**/*.md``). Indexing chunks every matching file
(:mod:`memory.markdown_chunks`) and stores each chunk as a memory in namespace
``("docs", NAME)`` with ``source: markdown``, type ``doc`` and, in ``metadata.extra``, the
file's ``path`` (relative to the folder), ``file`` (absolute), ``heading``, ``line_start`` /
``line_end``, the file's ``mtime`` and the chunk's retrieval ``context`` (title and heading
path). Chunks are found by the same hybrid search and filters as every other memory, and cite
``file:line`` (:func:`citation`).

Indexing is incremental: the registry (tables ``doc_collections`` / ``doc_files`` in the store's
SQLite file, next to the audit log) keeps each file's size, mtime and SHA-256. A file whose
size and mtime are unchanged is not read; one whose bytes are unchanged is not re-chunked; a
changed file's chunks are rewritten and the ones it no longer has are deleted; a deleted file's
chunks leave the index. Chunks are written raw (no dedupe, no PII redaction): they are the
user's own text, derived from files that stay the source of truth. Files are only ever read.

Example:
    >>> import tempfile, pathlib
    >>> from memory import MemoryService, MemorySettings
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "gmv.md").write_text("# GMV\\n\\n## Definition\\n\\nDelivery fees are not part of GMV.\\n")
    >>> svc = MemoryService.from_settings(MemorySettings(path=":memory:"))
    >>> docs = Collections(svc)
    >>> _ = docs.add("notes", d)
    >>> docs.index("notes")[0].chunks_written
    1
    >>> hit = svc.search("is the delivery fee in GMV?", "docs/notes")[0]
    >>> citation(hit.record).endswith("gmv.md:5")
    True
    >>> docs.close(); svc.close()
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from memory.errors import BackendUnavailable, InvalidInput, MemoryBackendError, NotFound
from memory.markdown_chunks import DEFAULT_MAX_CHARS, chunk_markdown
from memory.namespace import Namespace, ns_key, parse_namespace
from memory.records import CONTENT_TERM_WEIGHT, MemoryRecord, utcnow

DOCS = "docs"
DEFAULT_GLOB = "**/*.md"
# Bump when chunking or the stored metadata changes: files indexed under another version are
# re-chunked by the next `index` even though their bytes did not change.
CHUNKER_VERSION = 1
_BATCH = 256  # chunks embedded and written together
# Weight of a chunk's context (file title, heading path, file path as words) against its text,
# in both channels: the vector is normalise(embed(text) + CONTEXT_WEIGHT * embed(context)) and
# the keyword text holds the context as often as the text. In notes the title and headings name
# the topic a paragraph is about, and the (usually English) file name is a bridge between an
# English question and a Chinese note. On tests/data/markdown_notes (60 questions) equal
# weight took R@5 .783 -> .833 and MRR .627 -> .666 over chat memories' 0.4 / once; all of the
# gain was on cross-language questions (R@5 .35 -> .53; same-language stayed .95). Smaller
# chunks (one block each: R@5 .77) and a document-mean vector added to each chunk (.82) did worse.
CONTEXT_WEIGHT = 1.0

MIGRATIONS = [
    """
    CREATE TABLE doc_collections (
        name TEXT PRIMARY KEY,
        root TEXT NOT NULL,
        glob TEXT NOT NULL,
        created_at REAL NOT NULL,
        indexed_at REAL
    );
    CREATE TABLE doc_files (
        collection TEXT NOT NULL,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        version INTEGER NOT NULL,
        chunks TEXT NOT NULL,
        indexed_at REAL NOT NULL,
        PRIMARY KEY (collection, path)
    )
    """,
]


@dataclass(frozen=True)
class Collection:
    name: str
    root: str
    glob: str
    created_at: datetime
    indexed_at: datetime | None = None
    files: int = 0
    chunks: int = 0

    @property
    def namespace(self) -> Namespace:
        return (DOCS, self.name)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "namespace": ns_key(self.namespace), "root": self.root, "glob": self.glob,
                "created_at": self.created_at.isoformat(),
                "indexed_at": self.indexed_at.isoformat() if self.indexed_at else None,
                "files": self.files, "chunks": self.chunks}


@dataclass
class IndexReport:
    """What one ``index`` pass did to one collection."""

    collection: str
    files: int = 0
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    chunks_written: int = 0
    chunks_deleted: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"collection": self.collection, "files": self.files, "added": self.added, "changed": self.changed,
                "removed": self.removed, "unchanged": self.unchanged, "chunks_written": self.chunks_written,
                "chunks_deleted": self.chunks_deleted, "errors": self.errors, "seconds": round(self.seconds, 4)}


def citation(record: MemoryRecord) -> str | None:
    """``/abs/path/file.md:LINE`` for a chunk of a Markdown collection, else None."""
    ex = record.metadata.extra
    f, line = ex.get("file"), ex.get("line_start")
    if record.metadata.source != "markdown" or not isinstance(f, str):
        return None
    return f"{f}:{line}" if isinstance(line, int) else f


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidInput(f"collection name must be text, got {type(name).__name__}")
    parse_namespace((DOCS, name))  # a valid namespace label: no '/', no control characters
    return name


def _check_glob(glob: object) -> str:
    if not isinstance(glob, str) or not glob.strip():
        raise InvalidInput("--glob must be a pattern like '**/*.md'")
    p = PurePosixPath(glob)
    if p.is_absolute() or ".." in p.parts:
        raise InvalidInput(f"--glob {glob!r} must stay inside the folder (relative, no '..'), like '**/*.md'")
    return glob


def _ts(x: float | None) -> datetime | None:
    return None if x is None else datetime.fromtimestamp(x, UTC)


@dataclass
class _Pending:
    """A changed file whose chunks are waiting for the next batched write."""

    rel: str
    size: int
    mtime_ns: int
    sha: str
    ids: list[str]
    old_ids: list[str]
    records: list[MemoryRecord]
    new: bool


class Collections:
    """The registry of Markdown collections and their incremental indexer.

    Args:
        service: the store the chunks are written to (any backend).
        audit: when given, each file indexed or dropped is one ``index`` event.
        registry_path: SQLite file for the registry; default: the store's ``settings.path``
            (":memory:" keeps it in this process only).
        max_chars: chunk size (see :func:`memory.markdown_chunks.chunk_markdown`).
    """

    def __init__(self, service: Any, audit: Any = None, registry_path: str | None = None,
                 max_chars: int = DEFAULT_MAX_CHARS):
        from memory.backends.sqlite_schema import apply_migrations, open_side_db

        self.service = service
        self.audit = audit
        self.max_chars = max_chars
        self.path = str(registry_path or service.settings.path)
        self._lock = threading.RLock()
        try:
            self._conn = open_side_db(self.path)
            apply_migrations(self._conn, "doc_migrations", MIGRATIONS)
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open the collection registry at {self.path!r}: {exc}") from exc

    # ------------------------------------------------------------------ registry
    def _exec(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, tuple(params))
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"collection registry {self.path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            raise MemoryBackendError(f"collection registry {self.path!r}: {exc}") from exc

    def add(self, name: str, root: str | Path, glob: str = DEFAULT_GLOB) -> Collection:
        """Register a folder (nothing is indexed yet: call :meth:`index`).

        Adding the same name with the same folder and glob again is a no-op.

        Raises:
            InvalidInput: bad name or glob, the folder does not exist, or the name is taken by
                another folder.
        """
        _check_name(name)
        _check_glob(glob)
        if not isinstance(root, str | Path) or not str(root).strip():
            raise InvalidInput("give the folder of the collection, e.g. `memctl collection add notes ~/notes`")
        d = Path(root).expanduser().resolve()
        if not d.is_dir():
            raise InvalidInput(f"{str(root)!r} is not a folder; give the directory that holds the Markdown files")
        with self._lock:
            row = self._exec("SELECT root, glob FROM doc_collections WHERE name = ?", (name,)).fetchone()
            if row and (row[0], row[1]) != (str(d), glob):
                raise InvalidInput(f"collection {name!r} already indexes {row[0]} ({row[1]}); "
                                   f"`memctl collection remove {name}` first, or pick another name")
            if not row:
                self._exec("INSERT INTO doc_collections (name, root, glob, created_at) VALUES (?, ?, ?, ?)",
                           (name, str(d), glob, time.time()))
        return self.get(name)

    def get(self, name: str) -> Collection:
        _check_name(name)
        for c in self.list():
            if c.name == name:
                return c
        raise NotFound(f"no collection named {name!r}; `memctl collection list` shows them")

    def list(self) -> list[Collection]:
        with self._lock:
            rows = self._exec(
                "SELECT c.name, c.root, c.glob, c.created_at, c.indexed_at, COUNT(f.path),"
                " COALESCE(SUM(json_array_length(f.chunks)), 0)"
                " FROM doc_collections c LEFT JOIN doc_files f ON f.collection = c.name"
                " GROUP BY c.name ORDER BY c.name").fetchall()
        return [Collection(r[0], r[1], r[2], _ts(r[3]) or utcnow(), _ts(r[4]), r[5], r[6]) for r in rows]

    def remove(self, name: str) -> int:
        """Forget a collection: its chunks leave the store (the files are not touched).

        Returns:
            the number of chunks deleted.
        """
        col = self.get(name)
        n = self.service.backend.delete(namespace=col.namespace)
        with self._lock:
            self._exec("BEGIN IMMEDIATE")
            try:
                self._exec("DELETE FROM doc_files WHERE collection = ?", (name,))
                self._exec("DELETE FROM doc_collections WHERE name = ?", (name,))
                self._exec("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        self._audit("collection_remove", col, None, reason=f"removed collection {name!r} ({n} chunks)")
        return n

    # ------------------------------------------------------------------ indexing
    def index(self, name: str | None = None, *, full: bool = False) -> list[IndexReport]:
        """Bring the index of one collection (or of all) up to date with the files.

        Args:
            name: a collection; None indexes every collection.
            full: re-chunk and rewrite every file, changed or not.
        """
        cols = [self.get(name)] if name is not None else self.list()
        return [self._index_one(c, full) for c in cols]

    def watch(self, name: str | None = None, *, interval: float = 2.0, rounds: int | None = None,
              on_report: Callable[[IndexReport], None] | None = None) -> None:
        """Index, then re-index every ``interval`` seconds (``rounds`` passes; None: until interrupted).
        ``on_report`` gets the report of every pass that changed something."""
        if interval <= 0:
            raise InvalidInput("--interval must be a positive number of seconds")
        done = 0
        while rounds is None or done < rounds:
            for rep in self.index(name):
                if on_report is not None and (rep.added or rep.changed or rep.removed or rep.errors):
                    on_report(rep)
            done += 1
            if rounds is None or done < rounds:
                time.sleep(interval)

    def _files(self, col: Collection) -> Iterator[tuple[str, Path]]:
        root = Path(col.root)
        for p in sorted(root.glob(col.glob)):
            rel = p.relative_to(root).as_posix()
            # Hidden folders (.git, .obsidian, ...) hold tool state, not notes.
            if any(part.startswith(".") for part in PurePosixPath(rel).parts) or not p.is_file():
                continue
            yield rel, p

    def _index_one(self, col: Collection, full: bool) -> IndexReport:
        t0 = time.perf_counter()
        rep = IndexReport(col.name)
        root = Path(col.root)
        if not root.is_dir():
            rep.errors.append(f"folder {col.root} is missing; its chunks are kept until it is back or the "
                              f"collection is removed")
            rep.seconds = time.perf_counter() - t0
            return rep
        with self._lock:
            known = {r[0]: (r[1], r[2], r[3], r[4], json.loads(r[5])) for r in self._exec(
                "SELECT path, size, mtime_ns, sha256, version, chunks FROM doc_files WHERE collection = ?",
                (col.name,))}
        pending: list[_Pending] = []
        seen: set[str] = set()
        for rel, p in self._files(col):
            seen.add(rel)
            rep.files += 1
            try:
                st = p.stat()
                old = known.get(rel)
                if (not full and old and old[0] == st.st_size and old[1] == st.st_mtime_ns
                        and old[3] == CHUNKER_VERSION):
                    rep.unchanged += 1
                    continue
                data = p.read_bytes()
            except OSError as exc:
                rep.errors.append(f"{rel}: cannot read ({exc.strerror or exc}); its previous chunks are kept")
                continue
            sha = hashlib.sha256(data).hexdigest()
            if not full and old and old[2] == sha and old[3] == CHUNKER_VERSION:
                with self._lock:  # touched but not changed: remember the new mtime, skip the work
                    self._exec("UPDATE doc_files SET size = ?, mtime_ns = ? WHERE collection = ? AND path = ?",
                               (st.st_size, st.st_mtime_ns, col.name, rel))
                rep.unchanged += 1
                continue
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                rep.errors.append(f"{rel}: not UTF-8 (bad byte at {exc.start}); save it as UTF-8; "
                                  "its previous chunks are kept")
                continue
            chunked = self._chunk_records(col, rel, p, text, st.st_mtime_ns, rep)
            if chunked is None:
                continue
            records, ids = chunked
            pending.append(_Pending(rel, st.st_size, st.st_mtime_ns, sha, ids, old[4] if old else [], records,
                                    old is None))
            if sum(len(x.records) for x in pending) >= _BATCH:
                self._flush(col, pending, rep)
                pending = []
        self._flush(col, pending, rep)
        gone = sorted(set(known) - seen)
        if gone:
            stale = [i for rel in gone for i in known[rel][4]]
            if stale:
                self.service.backend.delete(stale)
            with self._lock:
                self._exec("BEGIN IMMEDIATE")
                try:
                    for rel in gone:
                        self._exec("DELETE FROM doc_files WHERE collection = ? AND path = ?", (col.name, rel))
                    self._exec("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            rep.removed += gone
            rep.chunks_deleted += len(stale)
            for rel in gone:
                self._audit("index", col, rel, reason=f"file removed: {rel}", chunks=0)
        with self._lock:
            self._exec("UPDATE doc_collections SET indexed_at = ? WHERE name = ?", (time.time(), col.name))
        rep.seconds = time.perf_counter() - t0
        return rep

    def _chunk_records(self, col: Collection, rel: str, p: Path, text: str, mtime_ns: int,
                       rep: IndexReport) -> tuple[list[MemoryRecord], list[str]] | None:
        """The file's chunks as validated records, or None (reported) when the store would
        refuse one of them (e.g. NUL characters): the file's previous chunks are then kept."""
        from memory.service import NewMemory

        mtime = datetime.fromtimestamp(mtime_ns / 1e9, UTC)
        limit = self.service.settings.max_content_chars
        now = utcnow()
        records, ids = [], []
        for c in chunk_markdown(text, rel, col.name, max_chars=self.max_chars):
            body = c.text
            if len(body) > limit:  # one enormous line: keep what the store accepts, say so
                rep.errors.append(f"{rel}:{c.line_start}: a line longer than max_content_chars={limit} was cut")
                body = body[:limit]
            ctx = c.context(rel)
            # BM25 has no field weights: the keyword index repeats a record's text
            # CONTENT_TERM_WEIGHT times (memory.records.index_text), so the context is repeated
            # as often to weigh as much as the text (see CONTEXT_WEIGHT for why).
            extra = {"collection": col.name, "path": rel, "file": str(p), "heading": c.heading,
                     "line_start": c.line_start, "line_end": c.line_end, "mtime": mtime.isoformat(),
                     "context": "\n".join([ctx] * CONTENT_TERM_WEIGHT)}
            try:
                records.append(self.service.build_record(NewMemory(
                    body, col.namespace, {"type": "doc", "source": "markdown", "extra": extra}, id=c.id,
                    created_at=mtime), now))
            except InvalidInput as exc:
                rep.errors.append(f"{rel}:{c.line_start}: {exc}; the file's previous chunks are kept")
                return None
            ids.append(c.id)
        return records, ids

    def _flush(self, col: Collection, pending: list[_Pending], rep: IndexReport) -> None:
        """Write the chunks of the pending files, drop the chunks they no longer have, then
        record them in the registry (in that order: a crash in between only repeats work)."""
        if not pending:
            return
        records = [r for x in pending for r in x.records]
        if records:
            self._write(records)
        stale = [i for x in pending for i in sorted(set(x.old_ids) - set(x.ids))]
        if stale:
            self.service.backend.delete(stale)
        now = time.time()
        with self._lock:
            self._exec("BEGIN IMMEDIATE")
            try:
                for x in pending:
                    self._exec(
                        "INSERT OR REPLACE INTO doc_files (collection, path, size, mtime_ns, sha256, version, chunks,"
                        " indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (col.name, x.rel, x.size, x.mtime_ns, x.sha, CHUNKER_VERSION, json.dumps(x.ids), now))
                self._exec("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        rep.chunks_written += len(records)
        rep.chunks_deleted += len(stale)
        for x in pending:
            (rep.added if x.new else rep.changed).append(x.rel)
            self._audit("index", col, x.rel, reason=f"file {'added' if x.new else 'changed'}: {x.rel}",
                        chunks=len(x.ids))

    def _write(self, records: list[MemoryRecord]) -> None:
        """Embed and upsert chunks: ``v = normalise(embed(text) + CONTEXT_WEIGHT * embed(context))``.

        Vectors are computed here rather than by ``MemoryService.write_many`` (whose context
        weight suits chat turns) because a chunk's title and heading path say as much about
        what it is about as its text does; see CONTEXT_WEIGHT.
        """
        import numpy as np

        emb = self.service.embedder
        vecs = np.asarray(emb.embed_documents([r.content for r in records]), dtype=np.float32)
        contexts = [str(r.metadata.extra["context"]).split("\n", 1)[0] for r in records]  # one copy of it
        vecs += CONTEXT_WEIGHT * np.asarray(emb.embed_documents(contexts), dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        self.service.backend.upsert(records, vecs)

    def _audit(self, action: str, col: Collection, rel: str | None, reason: str, **details: Any) -> None:
        if self.audit is None:
            return
        from memory.policy.audit import AuditEvent

        self.audit.record(AuditEvent(action, None, ns_key(col.namespace), actor="memctl:index", reason=reason,
                                     details={"path": rel, **details} if rel else details))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Collections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CHUNKER_VERSION", "DEFAULT_GLOB", "DOCS", "Collection", "Collections", "IndexReport", "citation"]
