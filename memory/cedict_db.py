"""The CC-CEDICT lexicon on disk: a SQLite file per user and data file, read by batched lookups.

Loading the whole lexicon (two dicts of ~110k headwords / English terms from a ``marshal`` cache)
cost every fresh process ~50-80 ms and ~16-22 MB of RSS the first time a search mixed scripts,
while a search looks up a few hundred keys: the question's terms and the 2-4 character
substrings of its candidates' Chinese runs (forward maximum matching needs nothing else). So the
parsed lexicon is written once per user into ``<user cache>/cedict-v<rules>-f<format>-<size>-
<mtime>.sqlite`` (two ``WITHOUT ROWID`` tables keyed by the headword / term, ~4.5 MB) and each
search sends its keys in ONE query (:meth:`LexiconDb.prefetch`); what a process has looked up is
remembered (answers and misses), so a warm search with known candidates asks nothing. The file is
opened read-only and immutable; its pages live in the OS page cache, shared by every process on
the machine, and each process copies only the b-tree pages its lookups touch into SQLite's page
cache (~0.6 MB for a fresh scoped search on the 100k bench store, at most SQLite's default 2 MB).
Reading through ``mmap`` instead was ~1.5 ms faster but mapped ~2.5 MB of the file into every
process's RSS (the kernel maps 64 KB around each faulting page).

The file is written to a temp name, fsynced and renamed, so a reader sees a whole file or none,
and two processes building at once each rename a complete file. It is keyed by the data file's
size and mtime, the parse rules' version and this format (in the name and in its ``meta``
table); a file that is missing, stale or unreadable is rebuilt; a query that fails on a damaged
file drops this process back to the parsed dicts (see :func:`memory.cedict.get_lexicon`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from urllib.parse import quote

FORMAT = 1
_IN_CHUNK = 900  # bound parameters per query where json_each is missing (old SQLite allows 999)
_MAX_SEEN = 1 << 15  # keys remembered per table (~125 B each with the key: ~8 MB at most), then dropped
_TABLES = ("zh", "en")


def db_path(root: Path, data: Path, rules_version: int) -> Path:
    st = data.stat()
    return root / f"cedict-v{rules_version}-f{FORMAT}-{st.st_size}-{int(st.st_mtime)}.sqlite"


def _stamp(data: Path, rules_version: int) -> dict[str, str]:
    st = data.stat()
    return {"rules": str(rules_version), "format": str(FORMAT), "size": str(st.st_size),
            "mtime": str(int(st.st_mtime))}


def build(path: Path, zh_en: Mapping[str, str], en_zh: Mapping[str, str], data: Path, rules_version: int) -> None:
    """Write the lexicon to ``path`` atomically (temp file, fsync, rename). Raises OSError /
    sqlite3.Error when the directory cannot be written; the caller then keeps the dicts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")  # a temp file: nothing to roll back to
            con.execute("PRAGMA synchronous=OFF")  # made durable by the fsync below
            con.execute("BEGIN")
            con.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
            for name, table in zip(_TABLES, (zh_en, en_zh), strict=True):
                con.execute(f"CREATE TABLE {name} (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
                # Sorted inserts fill the b-tree's pages left to right: a compact file, fast build.
                con.executemany(f"INSERT INTO {name} VALUES (?, ?)", sorted(table.items()))
            meta = {**_stamp(data, rules_version), "zh_rows": str(len(zh_en)), "en_rows": str(len(en_zh))}
            con.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
            con.execute("COMMIT")
        finally:
            con.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    for old in path.parent.glob("cedict-v*"):  # earlier versions' files (never others' temp files)
        if old != path and (old.suffix in (".sqlite", ".marshal")):
            old.unlink(missing_ok=True)


class StaleLexicon(Exception):
    """The file is not this data file's lexicon in this format (or not a lexicon at all)."""


class LexiconDb:
    """The on-disk lexicon, read-only, with what this process has already looked up."""

    def __init__(self, path: Path, data: Path, rules_version: int):
        # Immutable: the file is never changed once renamed into place (a rebuild renames a new one).
        self._uri = f"file:{quote(str(path))}?mode=ro&immutable=1"
        self._pid = os.getpid()
        try:
            self._con = self._connect()
            meta = dict(self._con.execute("SELECT k, v FROM meta").fetchall())
        except sqlite3.Error as e:  # missing (mode=ro does not create), not SQLite, no meta table
            raise StaleLexicon(str(e)) from e
        want = _stamp(data, rules_version)
        if any(meta.get(k) != v for k, v in want.items()) or "zh_rows" not in meta:
            self._con.close()
            raise StaleLexicon(f"{path.name}: {meta} is not {want}")
        self.path = path
        self._lock = threading.Lock()
        self._json_each = True
        # A query that fails on a damaged file (checked above only as far as the meta table)
        # swaps in the parsed dicts; set by memory.cedict.
        self.fallback: Callable[[], tuple[Mapping[str, str], Mapping[str, str]]] | None = None
        self._dicts: tuple[Mapping[str, str], Mapping[str, str]] | None = None
        self.zh, self.en = Table(self, 0), Table(self, 1)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._uri, uri=True, check_same_thread=False)

    def prefetch(self, zh_keys: Iterable[str], en_keys: Iterable[str]) -> None:
        """Look up every key not seen yet, both tables in one query."""
        need = [{k for k in keys if k not in t.seen} for t, keys in ((self.zh, zh_keys), (self.en, en_keys))]
        if not need[0] and not need[1]:
            return
        found = self.fetch(need)
        for t, keys, got in zip((self.zh, self.en), need, found, strict=True):
            if len(t.seen) + len(keys) > _MAX_SEEN:
                t.seen.clear()
            t.seen.update(dict.fromkeys(keys))
            t.seen.update(got)

    def fetch(self, need: list[set[str]]) -> list[dict[str, str]]:
        if self._dicts is not None:
            return [{k: d[k] for k in keys if k in d} for d, keys in zip(self._dicts, need, strict=True)]
        try:
            with self._lock:
                if os.getpid() != self._pid:  # a forked worker: SQLite connections must not cross fork
                    self._con, self._pid = self._connect(), os.getpid()
                return self._query(need)
        except sqlite3.DatabaseError:
            if self.fallback is None:
                raise
            self._dicts = self.fallback()
            try:  # the next process rebuilds it
                self.path.unlink(missing_ok=True)
            except OSError:
                pass
            return self.fetch(need)

    def _query(self, need: list[set[str]]) -> list[dict[str, str]]:
        out: list[dict[str, str]] = [{}, {}]
        if self._json_each:
            # The keys are the outer loop: one primary-key probe each, whatever the table size.
            sql = ("SELECT 0, k, v FROM json_each(?1) AS j JOIN zh ON zh.k = j.value UNION ALL "
                   "SELECT 1, k, v FROM json_each(?2) AS j JOIN en ON en.k = j.value")
            try:
                rows = self._con.execute(sql, [json.dumps(sorted(keys), ensure_ascii=False) for keys in need])
                for d, k, v in rows:
                    out[d][k] = v
                return out
            except sqlite3.OperationalError as e:
                if "json_each" not in str(e):
                    raise
                self._json_each = False  # SQLite built without JSON1
        for d, (name, keys) in enumerate(zip(_TABLES, need, strict=True)):
            ks = sorted(keys)
            for i in range(0, len(ks), _IN_CHUNK):
                part = ks[i : i + _IN_CHUNK]
                marks = ",".join("?" * len(part))
                out[d].update(self._con.execute(f"SELECT k, v FROM {name} WHERE k IN ({marks})", part))
        return out

    def close(self) -> None:
        self._con.close()


class Table:
    """One direction (0: zh headword -> glosses, 1: English term -> headwords) as a read-only
    mapping over the keys looked up so far; a key not prefetched costs a query of its own."""

    def __init__(self, db: LexiconDb, which: int):
        self._db, self._which = db, which
        self.seen: dict[str, str | None] = {}  # None: looked up, not in the lexicon

    def get(self, key: str, default: str | None = None) -> str | None:
        try:
            v = self.seen[key]
        except KeyError:
            need: list[set[str]] = [set(), set()]
            need[self._which].add(key)
            v = self._db.fetch(need)[self._which].get(key)
            self.seen[key] = v
        return default if v is None else v

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __getitem__(self, key: str) -> str:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v
