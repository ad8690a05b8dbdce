"""Every cache keyed by a memory's text is bounded by one setting, memory.text.TEXT_CACHE (issue 16).

At 65,536 entries each, the reader caches of scoring, the query rules and the reranker held ~218 MB in a
long-running process (stop 34, tracemalloc); a new cache keyed by a text must not bring that back.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil

import memory
import memory.cedict as cedict
from memory.text import TEXT_CACHE

# Keyed by something other than one memory text: a question, a word, a model name, a pair of value sets.
_NOT_PER_TEXT = {"memory.query.plan_query", "memory.rerank_supersede.asks_before"}


def _text_caches() -> dict[str, functools._lru_cache_wrapper]:
    out = {}
    for info in pkgutil.walk_packages(memory.__path__, "memory."):
        try:
            mod = importlib.import_module(info.name)
        except Exception:  # an optional dependency missing: its caches are not loaded either
            continue
        for name, obj in vars(mod).items():
            if not isinstance(obj, functools._lru_cache_wrapper) or obj.__module__ != mod.__name__:
                continue
            params = list(inspect.signature(obj.__wrapped__).parameters)
            if params[:1] == ["text"] and f"{mod.__name__}.{name}" not in _NOT_PER_TEXT:
                out[f"{mod.__name__}.{name}"] = obj
    return out


def test_every_cache_keyed_by_a_text_is_bounded_by_text_cache() -> None:
    caches = _text_caches()
    # the readers search uses on every candidate are among them (so the walk above finds what it must)
    assert {"memory.scoring.han_share", "memory.rerank._content", "memory.rerank_context.terms",
            "memory.rerank_supersede._slot_words", "memory.query.asks", "memory.query.states_time"} <= set(caches)
    too_big = {k: f.cache_info().maxsize for k, f in caches.items()
               if f.cache_info().maxsize is None or f.cache_info().maxsize > TEXT_CACHE}
    assert not too_big
    assert cedict._MAX_TEXTS == TEXT_CACHE


def test_a_full_cache_keeps_text_cache_entries() -> None:
    from memory.scoring import han_share

    han_share.cache_clear()
    for i in range(TEXT_CACHE + 100):
        han_share(f"memory {i} 第{i}条")
    assert han_share.cache_info().currsize == TEXT_CACHE
    han_share.cache_clear()
