"""How LangGraph store items map onto memory records, and LangGraph's filter semantics.

Pure functions used by :class:`memory.store.MemoryStore` (see its module docstring for the
mapping): record ids of items, LangGraph's and our namespace rules, value filters with
``$eq/$ne/$gt/$gte/$lt/$lte``, the text embedded for an item, TTLs in minutes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import InvalidNamespaceError, Item, MatchCondition, SearchItem, get_text_at_path
from pydantic_core import to_jsonable_python

from memory.errors import InvalidInput, InvalidNamespace
from memory.namespace import Namespace, parse_namespace
from memory.records import MemoryRecord, as_utc, utcnow
from memory.service import MAX_TTL_DAYS

SOURCE = "langgraph_store"
UNINDEXED = "\u2205"  # "∅": no keyword terms; the record still needs non-empty content
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class StoreNamespaceError(InvalidNamespaceError, InvalidNamespace):
    """A namespace LangGraph or our namespace rules reject (catchable as either error)."""


def item_id(namespace: Sequence[str], key: str) -> str:
    """The record id of a LangGraph item: sha1 hex of ``[namespace, key]`` as JSON."""
    raw = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()


def check_namespace(namespace: Any, *, allow_empty: bool = False) -> Namespace:
    """LangGraph's label rules ('.', NUL, empty, non-str), then ours; one error type for both."""
    if not isinstance(namespace, tuple | list):
        raise StoreNamespaceError(
            f"namespace must be a tuple of strings, got {type(namespace).__name__}"
        )
    ns = tuple(namespace)
    if not ns:
        if allow_empty:
            return ns
        raise StoreNamespaceError("Namespace cannot be empty.")
    for label in ns:
        if not isinstance(label, str):
            raise StoreNamespaceError(
                f"Invalid namespace label {label!r} in {ns}: labels must be strings, "
                f"got {type(label).__name__}"
            )
        if "." in label:
            raise StoreNamespaceError(
                f"Invalid namespace label {label!r} in {ns}: labels cannot contain periods ('.')"
            )
    try:
        return parse_namespace(ns)
    except InvalidNamespace as exc:
        raise StoreNamespaceError(str(exc)) from exc


def check_pattern(path: Sequence[str]) -> tuple[str, ...]:
    """A list_namespaces prefix/suffix: labels checked like namespaces, '*' allowed."""
    if not isinstance(path, tuple | list):
        raise StoreNamespaceError(
            f"namespace pattern must be a tuple of strings, got {type(path).__name__}"
        )
    labels = tuple(path)
    concrete = [label for label in labels if label != "*"]
    if concrete:
        check_namespace(concrete)
    return labels


def does_match(cond: MatchCondition, ns: Namespace) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    if cond.match_type == "prefix":
        pairs = zip(ns, path, strict=False)
    elif cond.match_type == "suffix":
        pairs = zip(reversed(ns), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {cond.match_type!r}")
    return all(p == "*" or label == p for label, p in pairs)


def check_filter(flt: Any) -> dict[str, Any] | None:
    """Reject what LangGraph's stores cannot evaluate, before touching any item."""
    if flt is None:
        return None
    if not isinstance(flt, Mapping):
        raise ValueError(f"filter must be a dict like {{'color': 'red'}}, got {type(flt).__name__}")

    def walk(cond: Any) -> None:
        if isinstance(cond, Mapping):
            for k, v in cond.items():
                if isinstance(k, str) and k.startswith("$"):
                    if k not in OPERATORS:
                        raise ValueError(
                            f"Unsupported operator: {k}; use one of {', '.join(OPERATORS)}"
                        )
                else:
                    walk(v)

    for key, cond in flt.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"filter keys must be non-empty strings, got {key!r}")
        walk(cond)
    return dict(flt)


def _lookup(value: Mapping[str, Any], key: str) -> Any:
    """A value field; a dotted key walks into nested dicts when no top-level key has that name."""
    if key in value:
        return value[key]
    cur: Any = value
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _same(a: Any, b: Any) -> bool:
    """JSON equality: lists and tuples alike, ``True`` is not ``1``, NaN equals nothing."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _order(op: str, actual: Any, expected: Any) -> bool:
    num = (int, float)
    if isinstance(actual, bool) or isinstance(expected, bool):
        return False
    if isinstance(actual, num) and isinstance(expected, num):
        a, b = float(actual), float(expected)
    elif isinstance(actual, str) and isinstance(expected, str):
        a, b = actual, expected  # type: ignore[assignment]
    else:
        return False  # missing field, or a string against a number: never matches
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _compare(actual: Any, cond: Any) -> bool:
    if isinstance(cond, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in cond):
            return all(_apply(actual, op, v) for op, v in cond.items())
        # A plain dict matches a nested object that contains (at least) these fields.
        return isinstance(actual, Mapping) and all(
            _compare(actual.get(k), v) for k, v in cond.items()
        )
    return _same(actual, cond)


def _apply(actual: Any, op: str, expected: Any) -> bool:
    if op == "$eq":
        return _same(actual, expected)
    if op == "$ne":
        return not _same(actual, expected)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        return _order(op, actual, expected)
    raise ValueError(f"Unsupported operator: {op}")


def value_matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter semantics on an item's value (all conditions must hold)."""
    return not flt or all(_compare(_lookup(value, k), cond) for k, cond in flt.items())


def _leaves(obj: Any, key: str | None = None) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, bool | int | float):
        text = json.dumps(obj)
        yield f"{key}: {text}" if key else text
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _leaves(v, str(k))
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _leaves(v, key)


def _render(obj: Any) -> str:
    return "\n".join(t.strip() for t in _leaves(obj) if t and t.strip())


def item_text(value: Mapping[str, Any], paths: Sequence[str]) -> str:
    """The text embedded for an item: the texts at ``paths`` (LangGraph path syntax), joined.

    ``"$"`` is the whole value. Dicts and lists (found at a path, or the whole value) are
    rendered as their leaf values, one per line; numbers and booleans keep their field name.
    """
    parts: list[str] = []
    for path in paths:
        if path == "$":
            parts.append(_render(value))
            continue
        for text in get_text_at_path(value, path):
            if text[:1] in "{[":  # get_text_at_path returns dicts/lists as JSON
                try:
                    text = _render(json.loads(text))
                except ValueError:
                    pass
            parts.append(text)
    return "\n".join(p for p in (p.strip() for p in parts) if p)


def ttl_minutes(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        ttl = ttl.total_seconds() / 60.0
    elif isinstance(ttl, datetime):  # an absolute expiry, as newer LangGraph versions accept
        ttl = (as_utc(ttl) - utcnow()).total_seconds() / 60.0
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise InvalidInput(f"ttl must be a number of minutes, got {ttl!r}")
    if not 0 < ttl <= MAX_TTL_DAYS * 1440:
        raise InvalidInput(
            f"ttl must be positive and at most {MAX_TTL_DAYS} days in minutes, got {ttl!r}"
        )
    return float(ttl)


def json_value(value: Mapping[str, Any]) -> dict[str, Any]:
    """The value as plain JSON (datetimes to ISO strings, models to dicts), like SqliteStore."""
    try:
        out = to_jsonable_python(dict(value))
    except Exception as exc:  # pydantic_core raises its own error types
        raise InvalidInput(f"value is not JSON-serialisable: {exc}") from exc
    return out


def is_item(rec: MemoryRecord) -> bool:
    """Whether a record is an item the adapter wrote (other records share the namespaces)."""
    extra = rec.metadata.extra
    return (
        rec.metadata.source == SOURCE
        and isinstance(extra.get("value"), dict)
        and "key" in extra
    )

def to_item(rec: MemoryRecord) -> Item:
    """The LangGraph ``Item`` an adapter record holds."""
    return Item(
        value=dict(rec.metadata.extra["value"]),
        key=str(rec.metadata.extra["key"]),
        namespace=rec.namespace,
        created_at=rec.created_at,
        updated_at=rec.updated_at,
    )

def to_search_item(rec: MemoryRecord, score: float | None) -> SearchItem:
    """The LangGraph ``SearchItem`` of an adapter record (``score`` None when listed)."""
    return SearchItem(
        namespace=rec.namespace,
        key=str(rec.metadata.extra["key"]),
        value=dict(rec.metadata.extra["value"]),
        created_at=rec.created_at,
        updated_at=rec.updated_at,
        score=score,
    )


__all__ = [
    "OPERATORS", "SOURCE", "UNINDEXED", "StoreNamespaceError", "check_filter", "check_namespace", "check_pattern",
    "does_match", "is_item", "item_id", "item_text", "json_value", "to_item", "to_search_item", "ttl_minutes",
    "value_matches",
]
