"""Namespaces: tuples of labels, LangGraph style.

``("user_profile", "u1")`` and the string ``"user_profile/u1"`` are the same namespace.
Prefix matching compares whole labels, so ``("u1",)`` is a prefix of ``("u1", "x")`` but
never of ``("u12",)``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import TypeAlias

from memory.errors import InvalidNamespace

SEPARATOR = "/"
MAX_LABEL_CHARS = 128
MAX_DEPTH = 8

Namespace: TypeAlias = tuple[str, ...]
NamespaceLike: TypeAlias = str | Sequence[str]


# Labels already found valid. Validity is a property of the string alone, and a bulk import
# checks the same few hundred labels tens of thousands of times (the per-character category
# scan was ~20 us a record). Exact str only (a subclass could compare equal to a valid label).
# Bounded: cleared when full.
_VALID_LABELS: set[str] = set()
_VALID_LABELS_MAX = 4096


def _check_label(label: object, raw: object) -> str:
    if type(label) is str and label in _VALID_LABELS:
        return label
    if not isinstance(label, str):
        raise InvalidNamespace(
            f"namespace {raw!r}: label {label!r} is a {type(label).__name__}; labels must be strings"
        )
    if not label:
        raise InvalidNamespace(
            f"namespace {raw!r} has an empty label; write it like 'user_profile/u1'"
        )
    if label != label.strip():
        raise InvalidNamespace(f"namespace {raw!r}: label {label!r} has surrounding whitespace")
    if SEPARATOR in label or "\\" in label:
        raise InvalidNamespace(
            f"namespace {raw!r}: label {label!r} contains a separator ('/' or '\\'); "
            "pass a tuple of labels or a '/'-joined string"
        )
    if len(label) > MAX_LABEL_CHARS:
        raise InvalidNamespace(
            f"namespace {raw!r}: label of {len(label)} characters is longer than {MAX_LABEL_CHARS}"
        )
    if any(unicodedata.category(ch) in {"Cc", "Cs", "Cf"} for ch in label):
        raise InvalidNamespace(
            f"namespace {raw!r}: label {label!r} contains control or invisible characters"
        )
    if type(label) is str:
        if len(_VALID_LABELS) >= _VALID_LABELS_MAX:
            _VALID_LABELS.clear()
        _VALID_LABELS.add(label)
    return label


def parse_namespace(ns: NamespaceLike) -> Namespace:
    """Validate and normalise a namespace given as a tuple/list of labels or a '/'-joined string.

    Raises:
        InvalidNamespace: with a message that says how to write a valid one.
    """
    if isinstance(ns, bytes):
        raise InvalidNamespace("namespace must be text, not bytes; decode it first")
    if isinstance(ns, str):
        if not ns.strip():
            raise InvalidNamespace("namespace is empty; write it like 'user_profile/u1'")
        labels: Sequence[object] = ns.split(SEPARATOR)
    elif isinstance(ns, Sequence):
        labels = list(ns)
    else:
        raise InvalidNamespace(
            f"namespace must be a string like 'user_profile/u1' or a tuple of labels, "
            f"got {type(ns).__name__}"
        )
    if not labels:
        raise InvalidNamespace("namespace is empty; write it like 'user_profile/u1'")
    if len(labels) > MAX_DEPTH:
        raise InvalidNamespace(f"namespace {ns!r} has {len(labels)} labels; at most {MAX_DEPTH}")
    return tuple(_check_label(label, ns) for label in labels)


def parse_namespaces(namespaces: NamespaceLike | Iterable[NamespaceLike]) -> list[Namespace]:
    """Accept one namespace or several; a bare string or a tuple of strings is one namespace."""
    if isinstance(namespaces, bytes | bytearray):
        raise InvalidNamespace("namespace must be text, not bytes; decode it first")
    if namespaces is None or not isinstance(namespaces, str | Iterable):
        raise InvalidNamespace(
            f"namespaces must be a string like 'user_profile/u1' or a list of them, got {type(namespaces).__name__}"
        )
    if isinstance(namespaces, str) or (
        isinstance(namespaces, tuple) and all(isinstance(x, str) for x in namespaces)
    ):
        return [parse_namespace(namespaces)]  # type: ignore[arg-type]
    out = [parse_namespace(ns) for ns in namespaces]  # type: ignore[union-attr]
    if not out:
        raise InvalidNamespace("no namespace given; pass at least one, e.g. 'user_profile/u1'")
    return out


def ns_key(ns: Namespace) -> str:
    """The '/'-joined string form (labels cannot contain '/', so this is reversible)."""
    return SEPARATOR.join(ns)


def is_prefix(prefix: Namespace, ns: Namespace) -> bool:
    """True when ``prefix`` equals ``ns`` or is an ancestor of it, comparing whole labels."""
    return len(prefix) <= len(ns) and ns[: len(prefix)] == prefix


def ancestors(ns: Namespace) -> list[Namespace]:
    """Every prefix of ``ns`` including itself: ('a','b') -> [('a',), ('a','b')]."""
    return [ns[:i] for i in range(1, len(ns) + 1)]
