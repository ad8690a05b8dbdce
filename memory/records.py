"""Typed records at the boundary: what goes into a backend and what comes back.

Backends return these types, never driver rows. Timestamps are timezone-aware UTC.
"""

from __future__ import annotations


import math
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from memory.errors import InvalidInput
from memory.namespace import Namespace, NamespaceLike, parse_namespace

# Well-known memory types (seed 004). Any other short label is allowed too.
MEMORY_TYPES = ("user_profile", "domain_facts", "task_traces", "tool_effects", "conversation", "note")


def utcnow() -> datetime:
    return datetime.now(UTC)


# Timestamps must fit a datetime with room for TTL and date-window arithmetic on top (a
# century of TTL, query windows of years): epoch seconds beyond datetime's range raised
# OverflowError / OSError (errno 75) deep inside the backends before. An explicit ``now`` is held
# to a narrower range (MAX_NOW) so that now + the longest TTL still reads back.
MIN_TIME = datetime(1000, 1, 1, tzinfo=UTC)
# Control characters (code points below 32) refused in ids: a regex, not a per-character
# generator (that took ~8 us of every record built, ~0.16 s of a 20k-line bulk import).
_CONTROL = re.compile(r"[\x00-\x1f]")
MAX_TIME = datetime(9900, 1, 1, tzinfo=UTC)
MAX_NOW = datetime(9700, 1, 1, tzinfo=UTC)


def as_utc(value: datetime | float | int | str) -> datetime:
    """Normalise a timestamp: naive datetimes and ISO strings without offset are taken as UTC.

    Raises:
        InvalidInput: (a ``ValueError``) for anything that is not a finite timestamp between
            year 1000 and year 9900 — NaN, infinities, epoch seconds out of range, bools, other types.
    """
    try:
        if isinstance(value, bool):
            raise ValueError("a timestamp cannot be a bool")
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError("it is not a finite number")
            value = datetime.fromtimestamp(float(value), UTC)
        elif isinstance(value, str):
            value = datetime.fromisoformat(value)
        if not isinstance(value, datetime):
            raise ValueError(f"a {type(value).__name__} is not a timestamp")
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except InvalidInput:
        raise
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise InvalidInput(
            f"not a timestamp: {value!r:.60} ({exc}); pass a datetime, an ISO-8601 string or epoch seconds"
        ) from exc
    if not MIN_TIME <= value < MAX_TIME:
        raise InvalidInput(
            f"timestamp {value.isoformat()} is out of range; use a time between year 1000 and year 9900"
        )
    return value


def as_now(value: object) -> datetime:
    """An explicit ``now`` (datetime, ISO string or epoch seconds), or the wall clock for None.

    Raises:
        InvalidInput: not a timestamp, or later than year 9700 (``now`` plus the longest TTL must
            still be a timestamp).
    """
    if value is None:
        return utcnow()
    now = as_utc(value)  # type: ignore[arg-type]
    if now >= MAX_NOW:
        raise InvalidInput(f"now={now.isoformat()} is too far in the future; pass a time before year 9700")
    return now


def new_id() -> str:
    return uuid.uuid4().hex


def non_finite(value: Any, path: str = "extra") -> str | None:
    """The path of the first NaN/inf float inside a JSON-like value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        for k, v in value.items():
            found = non_finite(v, f"{path}.{k}")
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = non_finite(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


class MemoryMetadata(BaseModel):
    """Typed metadata. ``extra`` holds anything else (JSON values only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = Field(default="note", min_length=1, max_length=64)
    source: str = Field(default="user", min_length=1, max_length=128)
    tags: tuple[str, ...] = ()
    agent: str | None = Field(default=None, max_length=128)
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: Any) -> Any:
        if isinstance(v, str):
            return (v,)
        return v

    @field_validator("extra")
    @classmethod
    def _finite(cls, v: dict[str, JsonValue]) -> dict[str, JsonValue]:
        # JSON has no NaN or infinity: they were written as null and read back changed.
        bad = non_finite(v)
        if bad is not None:
            raise ValueError(f"metadata value at {bad!r} is NaN or infinite, which JSON cannot store; "
                             "store a number, a string or null")
        return v


class MemoryRecord(BaseModel):
    """One memory. ``namespace`` accepts 'a/b' or ('a', 'b') and is stored as a tuple."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default_factory=new_id, min_length=1, max_length=128)
    namespace: Namespace
    content: str
    metadata: MemoryMetadata = Field(default_factory=MemoryMetadata)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None

    @field_validator("namespace", mode="before")
    @classmethod
    def _ns(cls, v: NamespaceLike) -> Namespace:
        return parse_namespace(v)

    @field_validator("created_at", "updated_at", "expires_at", mode="before")
    @classmethod
    def _ts(cls, v: Any) -> Any:
        return None if v is None else as_utc(v)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if v != v.strip() or _CONTROL.search(v):
            raise ValueError("id must not contain whitespace padding or control characters")
        return v

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """What a backend is asked for: candidates by vector and/or keywords inside namespaces.

    ``namespaces`` are prefixes (label boundaries respected). ``filter`` is validated by
    :func:`memory.filters.validate_filter`. Expired records (``expires_at <= now``) are never
    returned. ``limit`` is the number of candidates wanted from each channel.
    """

    namespaces: tuple[Namespace, ...]
    vector: np.ndarray | None = None
    text: str | None = None
    filter: dict[str, Any] | None = None
    limit: int = 50
    now: datetime = field(default_factory=utcnow)


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A backend candidate with its raw relevance signals (higher is better for both).

    ``vector_score`` is the cosine similarity in [-1, 1] (None when no vector was queried).
    ``keyword_score`` is the BM25 score, >= 0 (0 when no query term matched; None when no
    text was queried). Ranking happens above the backend, in :mod:`memory.scoring`.
    """

    record: MemoryRecord
    vector_score: float | None
    keyword_score: float | None


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    """Why a hit scored what it did: ``score = alpha*sim + beta*decay + gamma*boost + query``.

    ``query`` is the bonus the question itself gave this memory (:func:`memory.query.rerank`:
    written in the date window the question names, by the speaker it names, ...); 0 otherwise.
    """

    sim: float
    vector: float
    keyword: float
    decay: float
    boost: float
    score: float
    query: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 6) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class SearchHit:
    record: MemoryRecord
    breakdown: ScoreBreakdown

    @property
    def score(self) -> float:
        return self.breakdown.score

    def as_dict(self) -> dict[str, Any]:
        return {**record_to_dict(self.record), "score": self.breakdown.as_dict()}


CONTENT_TERM_WEIGHT = 3  # see index_text
# Bump whenever index_text or memory.text.keyword_terms changes the terms a record is indexed under:
# the SQLite backend re-tokenizes a file written under another version when it opens it, so old
# and new rows are scored on the same terms. 2: content repeated CONTENT_TERM_WEIGHT times.
# 3: Chinese unigrams next to the bigrams (memory.text.keyword_terms).
INDEX_TEXT_VERSION = 3


def index_text(r: MemoryRecord) -> str:
    """The text that is keyword-indexed for a record (vectors: ``MemoryService.embed_records``).

    It is the content, preceded by retrieval context when the writer put some in
    ``metadata.extra["context"]`` (e.g. the previous turn of a conversation, which often holds
    what "this" or "it" refers to). The context helps find the memory; it is not part of it.

    The content is repeated ``CONTENT_TERM_WEIGHT`` times: BM25 has no field weights here, so
    term frequency carries them. With equal weight a turn and the turn after it (whose context
    it is) matched the same words equally and the answer lost its rank to its neighbour. On the
    LoCoMo tuning half (one previous turn as context) MRR went .468 (x1) -> .506 (x2) -> .517 (x3),
    R@10 .757 -> .774 -> .772; the zh/en set stayed level (R@10 .952 -> .958, MRR .669 -> .685).
    """
    ctx = r.metadata.extra.get("context")
    parts = [r.content] * CONTENT_TERM_WEIGHT
    # Repeated with or without context, so a memory without one is not shorter-weighted by BM25.
    return "\n".join([ctx, *parts] if isinstance(ctx, str) and ctx.strip() else parts)


def record_to_dict(r: MemoryRecord) -> dict[str, Any]:
    """JSON-ready form used by the CLI's --json output."""
    return {
        "id": r.id,
        "namespace": "/".join(r.namespace),
        "content": r.content,
        "metadata": r.metadata.model_dump(mode="json"),
        "created_at": r.created_at.isoformat(),
        "updated_at": r.updated_at.isoformat(),
        "expires_at": r.expires_at.isoformat() if r.expires_at else None,
    }
