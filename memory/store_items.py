"""How LangGraph store items map onto memory records, and LangGraph's filter semantics.

Pure functions used by :class:`memory.store.MemoryStore` (see its module docstring for the
mapping): record ids of items, LangGraph's and our namespace rules, value filters with
``$eq/$ne/$gt/$gte/$lt/$lte``, the text embedded for an item, TTLs in minutes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import InvalidNamespaceError, Item, MatchCondition, SearchItem, get_text_at_path
from pydantic_core import to_jsonable_python

from memory.errors import InvalidContent, InvalidFilter, InvalidInput, InvalidNamespace
from memory.namespace import Namespace, parse_namespace
from memory.records import MemoryRecord, as_utc, non_finite, utcnow
from memory.service import MAX_TTL_DAYS

SOURCE = "langgraph_store"
UNINDEXED = "\u2205"  # "∅": no keyword terms; the record still needs non-empty content
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_FILTER_KEY = re.compile(r"^[\w.-]+\Z")


class StoreNamespaceError(InvalidNamespaceError, InvalidNamespace):
    """A namespace LangGraph or our namespace rules reject (catchable as either error)."""


def item_id(namespace: Sequence[str], key: str) -> str:
    """The record id of a LangGraph item: sha1 hex of ``[namespace, key]`` as JSON."""
    raw = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()


# ---------------------------------------------------------------- namespace labels
# LangGraph accepts any non-empty label without '.' or NUL; our namespaces (memory.namespace) also
# refuse '/', '\\', surrounding whitespace and control/invisible characters, because the CLI, the
# audit log and the SQLite file key namespaces by their '/'-joined form. Labels the store accepts
# and ours do not are stored percent-escaped (one label in, one label out), so ("users", "alice\n")
# is its own namespace, prefix matching stays on label boundaries, and every label that is
# already valid for us (all the Supervisor's) is stored unchanged.
_HEX = "0123456789abcdefABCDEF"


def _needs_escape(label: str, i: int, ch: str) -> bool:
    if ch in "/\\" or unicodedata.category(ch) in {"Cc", "Cs", "Cf", "Zl", "Zp"}:
        return True
    if ch.isspace() and (not label[:i].strip() or not label[i + 1 :].strip()):
        return True  # leading or trailing whitespace
    return ch == "%" and len(label) > i + 2 and label[i + 1] in _HEX and label[i + 2] in _HEX


def encode_label(label: str) -> str:
    """A LangGraph label as one of our labels (identity for labels we accept without '%XX')."""
    out: list[str] = []
    for i, ch in enumerate(label):
        if _needs_escape(label, i, ch):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


_ESCAPED = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def decode_label(label: str) -> str:
    """Inverse of :func:`encode_label`."""
    if "%" not in label:
        return label

    def unescape(m: re.Match[str]) -> str:
        raw = bytes.fromhex(m.group(0).replace("%", ""))
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return m.group(0)

    return _ESCAPED.sub(unescape, label)


def decode_namespace(ns: Sequence[str]) -> tuple[str, ...]:
    return tuple(decode_label(label) for label in ns)


def check_labels(namespace: Any) -> tuple[Any, ...]:
    """LangGraph's label rules (``_validate_namespace_labels``) with messages that say what to do."""
    if isinstance(namespace, str | bytes) or not isinstance(namespace, Iterable):
        raise StoreNamespaceError(
            f"namespace must be a tuple of strings like ('memories', 'u1'), got {type(namespace).__name__} "
            f"{namespace!r:.60}"
        )
    ns = tuple(namespace)
    for label in ns:
        if not isinstance(label, str):
            raise StoreNamespaceError(
                f"Invalid namespace label {label!r} in {ns}: labels must be strings, got {type(label).__name__}"
            )
        if not label:
            raise StoreNamespaceError(f"Invalid namespace {ns}: labels cannot be empty strings")
        if "." in label:
            raise StoreNamespaceError(
                f"Invalid namespace label {label!r} in {ns}: labels cannot contain periods ('.'); "
                "split it into two labels"
            )
        if "\x00" in label:
            raise StoreNamespaceError(f"Invalid namespace label {label!r} in {ns}: labels cannot contain NUL bytes")
    return ns


def check_namespace(namespace: Any, *, allow_empty: bool = False) -> Namespace:
    """LangGraph's label rules, then our limits (depth, label length); returns the stored form."""
    ns = check_labels(namespace)
    if not ns:
        if allow_empty:
            return ()
        raise StoreNamespaceError("Namespace cannot be empty.")
    try:
        return parse_namespace(tuple(encode_label(label) for label in ns))
    except InvalidNamespace as exc:
        raise StoreNamespaceError(str(exc)) from exc


def check_pattern(path: Sequence[str]) -> tuple[str, ...]:
    """A list_namespaces prefix/suffix (LangGraph's label rules; '*' is a wildcard); matched decoded."""
    return check_labels(path)


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
    # InvalidFilter is a ValueError (what LangGraph's stores raise) and a MemoryLayerError (what
    # callers of the memory layer catch); the messages keep LangGraph's wording.
    if not isinstance(flt, Mapping):
        raise InvalidFilter(f"filter must be a dict like {{'color': 'red'}}, got {type(flt).__name__}")

    def walk(cond: Any) -> None:
        if isinstance(cond, Mapping):
            ops = [k for k in cond if isinstance(k, str) and k.startswith("$")]
            if ops and len(ops) != len(cond):  # compared as operators, the field would never match
                fields = [k for k in cond if k not in ops]
                raise InvalidFilter(f"a filter condition mixes operators {ops} with fields {fields}; "
                                    "write {'field': {'$op': value}} or {'field': {'nested': value}}, not both")
            for k, v in cond.items():
                if isinstance(k, str) and k.startswith("$"):
                    if k not in OPERATORS:
                        raise InvalidFilter(
                            f"Unsupported operator: {k}; use one of {', '.join(OPERATORS)}"
                        )
                else:
                    walk(v)

    for key, cond in flt.items():
        if not isinstance(key, str) or not _FILTER_KEY.match(key):
            # SqliteStore's rule (it builds SQL from keys; we do not, but a key outside this set
            # is a mistake or an attack either way), widened to non-ASCII letters and digits.
            raise InvalidFilter(
                f"Invalid filter key: {key!r}. Filter keys must contain only letters, digits, "
                "underscores, dots (nested fields: 'user.city') and hyphens."
            )
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


def item_texts(value: Mapping[str, Any], paths: Sequence[str]) -> list[str]:
    """The texts embedded for an item, one per match of each path (LangGraph path syntax).

    ``"$"`` is the whole value. Dicts and lists (found at a path, or the whole value) are
    rendered as their leaf values, one per line; numbers and booleans keep their field name.
    Empty and repeated texts are dropped; NULs and unpaired surrogates are made harmless (the
    texts are derived data, so they are cleaned rather than refused).
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
    cleaned = (p.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8").strip() for p in parts)
    return list(dict.fromkeys(p for p in cleaned if p))


def item_text(value: Mapping[str, Any], paths: Sequence[str]) -> str:
    """All of an item's index texts, one per line (what is keyword-indexed and shown)."""
    return "\n".join(item_texts(value, paths))


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
    bad = non_finite(out, "value")
    if bad is not None:  # JSON has no NaN/inf: it would be stored as null and read back changed
        raise InvalidContent(f"{bad} is NaN or infinite, which JSON cannot store; store a number, a string or None")
    return out


def is_item(rec: MemoryRecord) -> bool:
    """Whether a record is an item the adapter wrote (``put``), as opposed to a memory written by
    the Supervisor, the CLI or the Python API, which the store shows as a derived item."""
    extra = rec.metadata.extra
    return rec.metadata.source == SOURCE and isinstance(extra.get("value"), dict) and "key" in extra


def item_key(rec: MemoryRecord) -> str:
    """An adapter item's key; a native memory's key is its id."""
    return str(rec.metadata.extra["key"]) if is_item(rec) else rec.id


def item_value(rec: MemoryRecord) -> dict[str, Any]:
    """An adapter item's value as put; a native memory's value is derived from the record:
    ``{"content", "type", "source"}`` plus ``agent`` / ``tags`` when set (langmem reads
    ``value["content"]``)."""
    if is_item(rec):
        return dict(rec.metadata.extra["value"])  # type: ignore[arg-type]
    m = rec.metadata
    value: dict[str, Any] = {"content": rec.content, "type": m.type, "source": m.source}
    if m.agent:
        value["agent"] = m.agent
    if m.tags:
        value["tags"] = list(m.tags)
    return value


def is_searchable(rec: MemoryRecord) -> bool:
    """Adapter items put with ``index=False`` (or with no text at their paths) never match a query."""
    return not is_item(rec) or bool(rec.metadata.extra.get("indexed", True))


def to_item(rec: MemoryRecord) -> Item:
    """The LangGraph ``Item`` a record holds (namespace labels decoded)."""
    return Item(
        value=item_value(rec),
        key=item_key(rec),
        namespace=decode_namespace(rec.namespace),
        created_at=rec.created_at,
        updated_at=rec.updated_at,
    )


class MemorySearchItem(SearchItem):
    """A ``SearchItem`` that also says how our ranking scored it.

    ``score`` is what LangGraph's stores report: the cosine similarity of the query and the item
    (the best of its index paths). Results are ordered by ``memory_score``, our hybrid score
    (``alpha*sim + beta*decay + gamma*boost + query rules``), explained by ``breakdown``
    (:class:`memory.records.ScoreBreakdown` as a dict). Both are None for listings.
    """

    __slots__ = ("memory_score", "breakdown")

    def __init__(
        self,
        *args: Any,
        memory_score: float | None = None,
        breakdown: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.memory_score = memory_score
        self.breakdown = breakdown


def to_search_item(
    rec: MemoryRecord, score: float | None, memory_score: float | None = None,
    breakdown: dict[str, float] | None = None,
) -> MemorySearchItem:
    """The ``SearchItem`` of a record (``score`` None when listed)."""
    return MemorySearchItem(
        namespace=decode_namespace(rec.namespace),
        key=item_key(rec),
        value=item_value(rec),
        created_at=rec.created_at,
        updated_at=rec.updated_at,
        score=score,
        memory_score=memory_score,
        breakdown=breakdown,
    )


# ---------------------------------------------------------------- per-path vectors
# An item with several index texts (``fields=["title", "body"]``, ``"items[*].text"``) keeps one
# vector per text, as LangGraph's stores do, and is scored by the best of them (max pooling). The
# backend holds one vector per record (the normalised mean: it finds the item as a candidate); the
# per-text vectors ride along in ``metadata.extra["vectors"]`` as base64 float32.
def pack_vectors(vectors: Any) -> list[str]:
    import numpy as np

    return [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii") for v in vectors]


def unpack_vectors(packed: Any, dim: int) -> Any:
    """The per-text vectors of an item (None when it has only its record vector)."""
    import numpy as np

    if not isinstance(packed, list) or not packed:
        return None
    try:
        rows = [np.frombuffer(base64.b64decode(p), dtype="<f4") for p in packed]
    except (ValueError, TypeError):
        return None
    if any(r.shape != (dim,) for r in rows):
        return None
    return np.stack(rows)


__all__ = [
    "OPERATORS", "SOURCE", "UNINDEXED", "MemorySearchItem", "StoreNamespaceError", "check_filter", "check_labels",
    "check_namespace", "check_pattern", "decode_label", "decode_namespace", "does_match", "encode_label", "is_item",
    "is_searchable", "item_id", "item_key", "item_text", "item_texts", "item_value", "json_value", "pack_vectors",
    "to_item", "to_search_item", "ttl_minutes", "unpack_vectors", "value_matches",
]
