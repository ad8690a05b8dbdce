"""Metadata filters: one validator and one matcher shared by every backend.

A filter is a dict ``{key: condition}``; all conditions must hold. Keys:

* ``type``, ``source``, ``agent`` — compared with the metadata field;
* ``tags`` — true when the record's tags contain the value (``$in``: any of the values);
* ``created_at``, ``updated_at``, ``expires_at`` — datetimes / ISO strings / epoch seconds, with comparisons;
* ``extra.<name>`` — a value inside ``metadata.extra``.

A condition is a plain value (equality) or one operator dict: ``{"$eq": v}``, ``{"$ne": v}``,
``{"$in": [..]}``, ``{"$nin": [..]}``, ``{"$gt"|"$gte"|"$lt"|"$lte": v}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory.errors import InvalidFilter
from memory.records import MemoryRecord, as_utc

FIELD_KEYS = ("type", "source", "agent", "tags", "created_at", "updated_at", "expires_at")
OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte")
_TIME_KEYS = ("created_at", "updated_at", "expires_at")


def validate_filter(flt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Check keys and operators; return a normalised copy (timestamps parsed).

    Raises:
        InvalidFilter: naming the bad key/operator and listing the allowed ones.
    """
    if flt is None:
        return None
    if not isinstance(flt, Mapping):
        raise InvalidFilter(f"filter must be a dict like {{'type': 'user_profile'}}, got {flt!r}")
    out: dict[str, Any] = {}
    for key, cond in flt.items():
        if not isinstance(key, str) or not (
            key in FIELD_KEYS or (key.startswith("extra.") and len(key) > len("extra."))
        ):
            raise InvalidFilter(
                f"unknown filter key {key!r}; use one of {', '.join(FIELD_KEYS)} or 'extra.<name>'"
            )
        if isinstance(cond, Mapping):
            if len(cond) != 1:
                raise InvalidFilter(f"filter on {key!r}: give exactly one operator, got {dict(cond)}")
            (op, val), = cond.items()
            if op not in OPERATORS:
                raise InvalidFilter(
                    f"filter on {key!r}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}"
                )
            if op in ("$in", "$nin") and not isinstance(val, list | tuple | set):
                raise InvalidFilter(f"filter on {key!r}: {op} needs a list of values")
        else:
            op, val = "$eq", cond
        scalars = val if op in ("$in", "$nin") else [val]
        for v in scalars:
            if isinstance(v, Mapping | list | tuple | set) and key not in _TIME_KEYS:
                raise InvalidFilter(
                    f"filter on {key!r}: {v!r} is not a plain value; compare with a string, number or "
                    "bool, or use {'$in': [...]} for several"
                )
        if key == "tags" and op not in ("$eq", "$ne", "$in", "$nin"):
            raise InvalidFilter(f"filter on 'tags': {op} is not supported; use $eq/$ne/$in/$nin")
        if key in _TIME_KEYS:
            try:
                val = [as_utc(v) for v in val] if op in ("$in", "$nin") else as_utc(val)
            except (TypeError, ValueError) as exc:
                raise InvalidFilter(f"filter on {key!r}: {val!r} is not a timestamp") from exc
        elif op in ("$in", "$nin"):
            val = list(val)
        out[key] = (op, val)
    return out


def _value(record: MemoryRecord, key: str) -> Any:
    if key.startswith("extra."):
        return record.metadata.extra.get(key[len("extra."):])
    if key in _TIME_KEYS:
        return getattr(record, key)
    return getattr(record.metadata, key)


def _cmp(op: str, actual: Any, expected: Any) -> bool:
    if op == "$eq":
        return bool(actual == expected)
    if op == "$ne":
        return bool(actual != expected)
    if op == "$in":
        return actual in expected
    if op == "$nin":
        return actual not in expected
    if actual is None or isinstance(actual, bool) != isinstance(expected, bool):
        return False
    try:
        if op == "$gt":
            return bool(actual > expected)
        if op == "$gte":
            return bool(actual >= expected)
        if op == "$lt":
            return bool(actual < expected)
        return bool(actual <= expected)
    except TypeError:  # comparing a str with a number never matches
        return False


def matches(record: MemoryRecord, normalised: dict[str, Any] | None) -> bool:
    """True when ``record`` satisfies a filter returned by :func:`validate_filter`."""
    if not normalised:
        return True
    for key, (op, expected) in normalised.items():
        actual = _value(record, key)
        if key == "tags":
            tags = set(actual)
            if op == "$eq":
                ok = expected in tags
            elif op == "$ne":
                ok = expected not in tags
            elif op == "$in":
                ok = bool(tags.intersection(expected))
            else:  # $nin (validate_filter allows nothing else on tags)
                ok = not tags.intersection(expected)
            if not ok:
                return False
        elif not _cmp(op, actual, expected):
            return False
    return True


__all__ = ["FIELD_KEYS", "OPERATORS", "matches", "validate_filter"]
