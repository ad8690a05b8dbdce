"""How memories become Qdrant points, and back: ids, payloads, keyword (sparse) vectors, filters.

Pure functions of records, texts and filters (no client); :mod:`memory.backends.qdrant` and
:mod:`memory.backends.qdrant_collection` build on them. The sparse vectors are BM25's document
side with FTS5's constants, from the same :func:`memory.text.keyword_terms` the SQLite backend feeds
to FTS5, so both backends score keywords alike.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from qdrant_client import models as qm

from memory.namespace import Namespace, ancestors, ns_key
from memory.records import MemoryMetadata, MemoryRecord, as_utc
from memory.text import keyword_terms

DENSE = "dense"
SPARSE = "keywords"
SCHEMA_VERSION = 1
# FTS5's bm25() constants, so keyword scores match SqliteBackend's.
BM25_K1 = 1.2
BM25_B = 0.75
# Points per upsert request: keeps one request well under the server's 32 MB body limit.
UPSERT_CHUNK = 256
_ID_NAMESPACE = uuid.UUID("5b0f3a52-6f1e-4c1e-9a53-4d2f6c0b7a11")  # fixed forever: ids depend on it
_SAFE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def collection_name(prefix: str, embedding_model: str, dim: int) -> str:
    """``{prefix}__{slug}-{hash}__{dim}``: readable, and distinct for distinct models.

    The hash keeps "a/b" and "a-b" apart although they slug alike.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", embedding_model.lower()).strip("-")[:48] or "model"
    digest = hashlib.blake2b(embedding_model.encode(), digest_size=3).hexdigest()
    return f"{prefix}__{slug}-{digest}__{dim}"


def point_id(memory_id: str) -> str:
    """Qdrant accepts only uint64 or UUID point ids; ours are free strings, so map them stably."""
    return str(uuid.uuid5(_ID_NAMESPACE, memory_id))


def _fold(term: str) -> str:
    # FTS5's unicode61 tokenizer removes diacritics from Latin letters ("café" == "cafe");
    # do the same so both backends see the same terms.
    if term.isascii():
        return term
    return "".join(c for c in unicodedata.normalize("NFKD", term) if not unicodedata.combining(c))


def term_index(term: str) -> int:
    """A stable uint32 for a term (collisions are rare: ~1 pair per 100k distinct terms)."""
    return int.from_bytes(hashlib.blake2b(_fold(term).encode(), digest_size=4).digest(), "little")


def term_counts(text: str) -> tuple[dict[int, int], int]:
    """Term frequencies by sparse index, and the document length in terms."""
    terms = keyword_terms(text)
    return dict(Counter(term_index(t) for t in terms)), len(terms)


def doc_sparse(tf: dict[int, int], length: int, avgdl: float) -> qm.SparseVector:
    """BM25's per-document factor; Qdrant's IDF modifier supplies the other one at query time."""
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / max(avgdl, 1e-9))
    idx = sorted(tf)
    return qm.SparseVector(indices=idx, values=[tf[i] * (BM25_K1 + 1.0) / (tf[i] + norm) for i in idx])


def query_sparse(text: str | None) -> qm.SparseVector | None:
    """Distinct query terms with weight 1 (FTS5 ORs distinct terms), or None if there are none."""
    if not text:
        return None
    idx = sorted({term_index(t) for t in keyword_terms(text)})
    return qm.SparseVector(indices=idx, values=[1.0] * len(idx)) if idx else None


def _ts(dt: Any) -> float | None:
    return None if dt is None else as_utc(dt).timestamp()


def to_payload(r: MemoryRecord) -> dict[str, Any]:
    """The point payload of a record (see the backend docstring for the fields)."""
    m = r.metadata
    return {
        "id": r.id,
        "ns": ns_key(r.namespace),
        "ns_labels": list(r.namespace),
        "ns_prefixes": [ns_key(a) for a in ancestors(r.namespace)],
        "content": r.content,
        # The JSON string is what we read back (exact round trip); the fields below exist
        # only so that filters can be pushed down to Qdrant.
        "metadata": m.model_dump_json(),
        "type": m.type,
        "source": m.source,
        "agent": m.agent,
        "tags": list(m.tags),
        "extra": m.extra,
        "created_at": _ts(r.created_at),
        "updated_at": _ts(r.updated_at),
        "expires_at": _ts(r.expires_at),
    }


def from_payload(payload: dict[str, Any]) -> MemoryRecord:
    """The record a payload was written from (exact: metadata is read back from its JSON)."""
    exp = payload.get("expires_at")
    return MemoryRecord.model_construct(
        id=payload["id"],
        namespace=tuple(payload["ns"].split("/")),
        content=payload["content"],
        metadata=MemoryMetadata.model_validate_json(payload["metadata"]),
        created_at=as_utc(payload["created_at"]),
        updated_at=as_utc(payload["updated_at"]),
        expires_at=None if exp is None else as_utc(exp),
    )


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def filter_conditions(flt: dict[str, Any] | None) -> tuple[list[qm.Condition], list[qm.Condition]]:
    """(must, must_not) conditions selecting a superset of what ``matches(record, flt)`` accepts.

    Only conditions whose Qdrant meaning contains the Python meaning are pushed down; the rest
    is left to :func:`memory.filters.matches`, which always runs afterwards.
    """
    must: list[qm.Condition] = []
    must_not: list[qm.Condition] = []
    for key, (op, val) in (flt or {}).items():
        if key in ("type", "source", "agent", "tags"):
            field = key
        elif key.startswith("extra.") and _SAFE_KEY.match(key[len("extra."):]):
            field = key  # nested payload path extra.<name>
        elif key in ("created_at", "updated_at"):
            field = key
        else:
            continue
        if key in ("created_at", "updated_at"):
            if op in ("$gt", "$gte", "$lt", "$lte"):
                ts = val.timestamp()
                # gt -> gte / lt -> lte: float rounding must never drop a true match.
                rng = qm.Range(gte=ts) if op in ("$gt", "$gte") else qm.Range(lte=ts)
                must.append(qm.FieldCondition(key=field, range=rng))
            continue
        if op == "$eq" and isinstance(val, str):
            must.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=val)))
        elif op in ("$ne", "$nin") and key.startswith("extra."):
            # An extra value may be a list: Python's ["a", "b"] != "a" holds, but Qdrant's
            # must_not would drop the point because one element matches. Leave it to Python.
            continue
        elif op == "$ne" and isinstance(val, str):
            must_not.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=val)))
        elif op == "$in" and _is_str_list(val) and val:
            must.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=val)))
        elif op == "$nin" and _is_str_list(val) and val:
            must_not.append(qm.FieldCondition(key=field, match=qm.MatchAny(any=val)))
        elif (op in ("$gt", "$gte", "$lt", "$lte") and key.startswith("extra.")
              and isinstance(val, int | float) and not isinstance(val, bool)):
            # Python compares only numbers with numbers here (bools and strs never match).
            must.append(qm.FieldCondition(key=field, range=qm.Range(**{op[1:]: float(val)})))
    return must, must_not


def namespace_condition(namespaces: Sequence[Namespace]) -> qm.Condition:
    """Points under any of these namespace prefixes (label boundaries respected)."""
    return qm.FieldCondition(key="ns_prefixes", match=qm.MatchAny(any=[ns_key(n) for n in namespaces]))


def unexpired(now: float) -> qm.Condition:
    """Points with no expiry or one after ``now`` (epoch seconds)."""
    return qm.Filter(should=[
        qm.IsNullCondition(is_null=qm.PayloadField(key="expires_at")),
        qm.FieldCondition(key="expires_at", range=qm.Range(gt=now)),
    ])


def cosine(stored: np.ndarray, q: np.ndarray) -> float:
    """Cosine of a stored (unit) vector and a query vector."""
    # Qdrant keeps cosine-collection vectors normalised; normalise the query the same way.
    n = float(np.linalg.norm(q))
    return float(stored @ q) / n if n > 0 else 0.0


def error_detail(content: bytes | None) -> str:
    """The error message of a Qdrant error response body, shortened for our messages."""
    if not content:
        return ""
    try:
        return str(json.loads(content)["status"]["error"])[:300]
    except Exception:
        return content[:300].decode("utf-8", "replace")


__all__ = [
    "BM25_B", "BM25_K1", "DENSE", "SCHEMA_VERSION", "SPARSE", "UPSERT_CHUNK", "collection_name", "cosine",
    "doc_sparse", "error_detail", "filter_conditions", "from_payload", "namespace_condition", "point_id",
    "query_sparse", "term_counts", "term_index", "to_payload", "unexpired",
]
