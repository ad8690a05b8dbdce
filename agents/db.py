"""The sample sales database and read-only SQL execution.

Every query runs on a connection opened with ``mode=ro`` *and* an authorizer that allows only
reads, after a lexical check that it is exactly one ``SELECT``/``WITH`` statement. Any one of
the three would stop a write; together they also give a clear error message for the model.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

MAX_ROWS = 1000
TIMEOUT_S = 5.0


class UnsafeSQL(ValueError):
    """The statement is not a single read-only SELECT; nothing was executed."""


class SQLExecutionError(RuntimeError):
    """A read-only SELECT failed in SQLite (bad column, syntax error, timeout, ...)."""


def sample_db_path() -> Path:
    """The packaged sample sales database (see :mod:`agents.data.generate`)."""
    return Path(str(resources.files("agents.data").joinpath("sales.sqlite")))


@dataclass(frozen=True)
class QueryResult:
    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool = False
    elapsed_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, max_rows: int | None = None) -> dict[str, Any]:
        rows = self.rows if max_rows is None else self.rows[:max_rows]
        return {"sql": self.sql, "columns": list(self.columns), "rows": [list(r) for r in rows],
                "row_count": len(self.rows), "truncated": self.truncated or len(rows) < len(self.rows)}


_COMMENT = re.compile(r"--[^\n]*|/\*.*?(?:\*/|$)", re.S)
_LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]")
_FORBIDDEN = re.compile(
    r"\b(insert|update|delete|drop|create|alter|attach|detach|pragma|vacuum|reindex|replace\s+into"
    r"|begin|commit|rollback|savepoint|release)\b", re.I)


def _strip(sql: str) -> str:
    """The statement without comments and with literals blanked (keeps keyword positions)."""
    out = _COMMENT.sub(" ", sql)
    return _LITERAL.sub("''", out)


def check_readonly(sql: str) -> str:
    """Return the statement (trailing ';' removed) if it is one SELECT/WITH; else raise UnsafeSQL."""
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeSQL("empty SQL; write one SELECT statement")
    text = sql.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    bare = _strip(text).strip()
    if ";" in bare:
        raise UnsafeSQL("more than one statement; send exactly one SELECT")
    first = re.match(r"\(*\s*(\w+)", bare)
    if not first or first.group(1).lower() not in ("select", "with"):
        raise UnsafeSQL(f"the database is read-only: only SELECT (or WITH ... SELECT) is allowed, got {bare[:20]!r}")
    bad = _FORBIDDEN.search(bare)
    if bad:
        raise UnsafeSQL(f"{bad.group(1).upper()} is not allowed: this database is read-only")
    return text


_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                    getattr(sqlite3, "SQLITE_RECURSIVE", 33)}


def _authorizer(action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
    if action in _ALLOWED_ACTIONS:
        if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in ("load_extension", "readfile", "writefile"):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    p = Path(path).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"database {p} does not exist; run `python -m agents.data.generate`")
    con = sqlite3.connect(f"file:{p.as_posix()}?mode=ro", uri=True, check_same_thread=False)
    con.execute("PRAGMA query_only = ON")
    con.set_authorizer(_authorizer)
    return con


def run_readonly(path: str | Path, sql: str, *, max_rows: int = MAX_ROWS, timeout_s: float = TIMEOUT_S) -> QueryResult:
    """Execute one read-only SELECT and return its columns and (at most ``max_rows``) rows.

    Raises:
        UnsafeSQL: not a single SELECT; nothing ran.
        SQLExecutionError: SQLite rejected or aborted the query.
    """
    stmt = check_readonly(sql)
    con = connect_readonly(path)
    deadline = time.monotonic() + timeout_s
    con.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    t = time.perf_counter()
    try:
        cur = con.execute(stmt)
        cols = tuple(d[0] for d in cur.description or ())
        rows = cur.fetchmany(max_rows + 1)
    except sqlite3.DatabaseError as exc:
        msg = str(exc)
        if "not authorized" in msg:
            raise UnsafeSQL(f"rejected by the read-only guard: {msg}") from exc
        if "interrupted" in msg:
            msg = f"query took longer than {timeout_s:g}s and was stopped"
        raise SQLExecutionError(msg) from exc
    except sqlite3.Warning as exc:  # e.g. "You can only execute one statement at a time."
        raise UnsafeSQL(str(exc)) from exc
    finally:
        con.close()
    truncated = len(rows) > max_rows
    return QueryResult(stmt, cols, tuple(tuple(r) for r in rows[:max_rows]), truncated,
                       (time.perf_counter() - t) * 1000)


def describe_schema(path: str | Path) -> str:
    """CREATE TABLE statements plus a few facts the model needs (value sets, date range)."""
    con = connect_readonly(path)
    try:
        ddl = [r[0] for r in con.execute("SELECT sql FROM sqlite_master WHERE type='table' ORDER BY rowid")]
        regions = ", ".join(f"{r[0]}={r[1]}/{r[2]}" for r in con.execute(
            "SELECT region_id, name_zh, name_en FROM regions ORDER BY region_id"))
        lo, hi = con.execute("SELECT min(order_date), max(order_date) FROM orders").fetchone()
    except sqlite3.DatabaseError:
        return "\n".join(ddl) if "ddl" in locals() else ""
    finally:
        con.close()
    notes = (f"-- regions: {regions}\n-- orders.order_date is 'YYYY-MM-DD' text, from {lo} to {hi}\n"
             "-- orders.status: paid | refunded | cancelled; money in CNY yuan; goods_amount excludes shipping")
    return "\n".join(ddl) + "\n" + notes
