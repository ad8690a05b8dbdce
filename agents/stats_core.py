"""Statistics on query rows: pure functions over columns and rows (numpy).

``compute()`` is what the Statistics agent's tool runs. It never guesses silently: the columns
it used, and why, are part of the result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_TIME_NAME = re.compile(r"(date|day|month|year|week|quarter|period|time|月|日|年|季)", re.I)
_TIME_VALUE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$|^\d{4}-?Q[1-4]$")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return None if isinstance(v, float) and math.isnan(v) else float(v)
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return None


def describe(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, sum, mean, median, std (sample, ddof=1), min, max, p25, p75 of finite values."""
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if a.size == 0:
        return {"count": 0, "sum": 0.0, "mean": None, "median": None, "std": None, "min": None,
                "max": None, "p25": None, "p75": None}
    return {
        "count": int(a.size),
        "sum": float(a.sum()),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "min": float(a.min()),
        "max": float(a.max()),
        "p25": float(np.percentile(a, 25)),
        "p75": float(np.percentile(a, 75)),
    }


def growth_rates(values: Sequence[float]) -> list[float | None]:
    """Period-over-period growth ``(v[i] - v[i-1]) / |v[i-1]|``; None where the base is 0."""
    out: list[float | None] = []
    for prev, cur in zip(values, values[1:], strict=False):
        out.append(None if prev == 0 else (cur - prev) / abs(prev))
    return out


def cagr(first: float, last: float, periods: int) -> float | None:
    """Compound growth per period between the first and last value (None if undefined)."""
    if periods <= 0 or first <= 0 or last < 0:
        return None
    return (last / first) ** (1 / periods) - 1


def column_kinds(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, str]:
    """'time' | 'numeric' | 'category' per column, from names and values."""
    kinds: dict[str, str] = {}
    for j, c in enumerate(columns):
        vals = [r[j] for r in rows if r[j] is not None]
        if vals and all(isinstance(v, str) and _TIME_VALUE.match(v) for v in vals):
            kinds[c] = "time"
        elif vals and all(_num(v) is not None for v in vals) and not all(isinstance(v, str) for v in vals):
            kinds[c] = "time" if _TIME_NAME.search(c) and all(isinstance(v, int) and 1900 < v < 2200 for v in vals) else "numeric"
        else:
            kinds[c] = "category"
    return kinds


def compute(columns: Sequence[str], rows: Sequence[Sequence[Any]], measure: str | None = None,
            time_column: str | None = None, group_column: str | None = None) -> dict[str, Any]:
    """Describe ``measure``; with a time column, growth per period; with a group, shares per group.

    Columns not given are inferred (first numeric column that is not an id, first time column,
    first category column); the result says which were used.

    Raises:
        ValueError: no usable numeric column, or a named column does not exist.
    """
    cols = list(columns)
    for name in (measure, time_column, group_column):
        if name is not None and name not in cols:
            raise ValueError(f"column {name!r} is not in the result; columns are {cols}")
    kinds = column_kinds(cols, rows)
    if measure is None:
        numeric = [c for c in cols if kinds[c] == "numeric" and not c.lower().endswith("id")]
        if not numeric:
            raise ValueError(f"no numeric column to describe among {cols}")
        measure = numeric[-1]
    if time_column is None:
        time_column = next((c for c in cols if kinds[c] == "time"), None)
    if group_column is None:
        group_column = next((c for c in cols if kinds[c] == "category" and c != time_column), None)
    mi = cols.index(measure)
    values = [_num(r[mi]) for r in rows]
    out: dict[str, Any] = {"measure": measure, "time_column": time_column, "group_column": group_column,
                           "rows": len(rows), "overall": describe([v for v in values if v is not None])}

    def series(sub: Sequence[Sequence[Any]]) -> dict[str, Any]:
        ti = cols.index(time_column)  # type: ignore[arg-type]
        per: dict[Any, float] = {}
        for r in sub:
            v = _num(r[mi])
            if v is not None:
                per[r[ti]] = per.get(r[ti], 0.0) + v
        periods = sorted(per)
        vals = [per[p] for p in periods]
        g = growth_rates(vals)
        valid = [x for x in g if x is not None]
        best = max(range(len(g)), key=lambda i: g[i] if g[i] is not None else -math.inf) if valid else None
        worst = min(range(len(g)), key=lambda i: g[i] if g[i] is not None else math.inf) if valid else None
        return {
            "periods": [str(p) for p in periods],
            "values": vals,
            "growth": g,
            "mean_growth": float(np.mean(valid)) if valid else None,
            "total_growth": (vals[-1] - vals[0]) / abs(vals[0]) if len(vals) > 1 and vals[0] else None,
            "cagr": cagr(vals[0], vals[-1], len(vals) - 1) if len(vals) > 1 else None,
            "best_period": periods[best + 1] if best is not None else None,
            "best_growth": g[best] if best is not None else None,
            "worst_period": periods[worst + 1] if worst is not None else None,
            "worst_growth": g[worst] if worst is not None else None,
            "peak_period": periods[int(np.argmax(vals))] if vals else None,
            "trough_period": periods[int(np.argmin(vals))] if vals else None,
        }

    if time_column is not None:
        out["trend"] = series(rows)
    if group_column is not None:
        gi = cols.index(group_column)
        totals: dict[Any, float] = {}
        for r, v in zip(rows, values, strict=True):
            if v is not None:
                totals[r[gi]] = totals.get(r[gi], 0.0) + v
        grand = sum(totals.values())
        out["groups"] = {
            str(k): {"sum": s, "share": s / grand if grand else None}
            for k, s in sorted(totals.items(), key=lambda kv: -kv[1])
        }
        if time_column is not None and len(totals) <= 12:
            out["trend_by_group"] = {str(k): series([r for r in rows if r[gi] == k]) for k in totals}
    return out


def format_number(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if unit == "%":
        return f"{x * 100:+.1f}%"
    return f"{x:,.2f}"
