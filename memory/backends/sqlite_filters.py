"""Filter conditions of :class:`~memory.backends.sqlite.SqliteBackend` turned into SQL, so a
search can be confined to the rows that can pass before any record is read."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.backends.sqlite_schema import TIME_COLS, ns_clause
from memory.namespace import Namespace


class FilterSqlMixin:
    """Row preselection for filtered searches; needs the backend's connection."""

    _conn: sqlite3.Connection

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
            clause, p = ns_clause(ns)
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
            json_cond = self._json_condition(key, op, val) if key not in ("type", *TIME_COLS) else None
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
            elif key in TIME_COLS:
                if op in ("$gt", "$gte", "$eq"):
                    conds.append(f"{key} >= ?")
                    params.append(val.timestamp() - 1e-3)
                if op in ("$lt", "$lte", "$eq"):
                    conds.append(f"{key} <= ?")
                    params.append(val.timestamp() + 1e-3)
            indexed = indexed or (len(conds) > before and key in ("type", "created_at", "updated_at"))
        return conds, params, indexed
