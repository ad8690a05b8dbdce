"""Turn search hits into a compact block for prompt injection, under a token budget.

Deterministic by default: near-duplicate hits are dropped, the rest are ranked by score and
written as bullets with date, type and source until the budget is used. With a chat model the
same block is condensed by the model (and the deterministic block is the fallback).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from functools import lru_cache
from typing import Any

from memory.records import SearchHit
from memory.text import count_tokens, tokenize


def _similar(a: Set[str], b: Set[str]) -> bool:
    return bool(a and b) and len(a & b) / len(a | b) >= 0.8


@lru_cache(maxsize=16384)
def _terms(content: str) -> frozenset[str]:
    """A memory's distinct terms, once per text: the pre-node summarises the same profile and
    definitions at every handoff."""
    return frozenset(tokenize(content))


def summarize(hits: Sequence[SearchHit], goal: str = "", max_tokens: int = 400) -> str:
    """A bullet list of the best distinct memories that fits in ``max_tokens`` (estimated)."""
    if max_tokens <= 0 or not hits:
        return ""
    header = f"Relevant long-term memories{f' for: {goal.strip()[:120]}' if goal.strip() else ''}:"
    lines = [header]
    used = count_tokens(header)
    kept: list[frozenset[str]] = []
    for h in sorted(hits, key=lambda h: -h.score):
        terms = _terms(h.record.content)
        if any(_similar(terms, k) for k in kept):
            continue
        meta = h.record.metadata
        line = f"- [{h.record.updated_at:%Y-%m-%d} · {meta.type} · {meta.source}] {h.record.content}"
        cost = count_tokens(line)
        if used + cost > max_tokens:
            continue  # a shorter, lower-ranked memory may still fit
        lines.append(line)
        used += cost
        kept.append(terms)
    return "\n".join(lines) if len(lines) > 1 else ""


def summarize_with_model(model: Any, hits: Sequence[SearchHit], goal: str = "", max_tokens: int = 400) -> str:
    """Condense with a chat model; falls back to :func:`summarize` on any failure."""
    block = summarize(hits, goal, max_tokens * 3)
    if not block:
        return ""
    try:
        msg = model.invoke(
            "Condense these memories into at most "
            f"{max_tokens} tokens of bullet points useful for the goal, keep dates and numbers, "
            f"drop anything irrelevant.\nGoal: {goal}\n{block}"
        )
        text = str(getattr(msg, "content", msg)).strip()
        if text and count_tokens(text) <= max_tokens * 1.2:
            return text
    except Exception:  # noqa: BLE001 - the deterministic block is always available
        pass
    return summarize(hits, goal, max_tokens)
