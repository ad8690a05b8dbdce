"""The store's ``index`` config: which model embeds items, which paths of a value are embedded.

LangGraph's ``IndexConfig`` (and ``SqliteIndexConfig``) is honoured:

* ``embed`` — a LangChain ``Embeddings``, a sync or async function ``list[str] -> list[list[float]]``,
  an ``init_embeddings`` string (``"openai:text-embedding-3-small"``), or one of our packaged model
  names (``"local/use-multilingual-v3"``, ``"local/wordllama-l2-supercat"``, ``+``-combinations).
  Unset: the model configured in ``MemorySettings.embedding`` (offline, packaged).
* ``dims`` — checked against what the model produces.
* ``fields`` (or SqliteStore's ``text_fields``) — the paths embedded, default ``["$"]``.

The store file records its embedding model's name: opening it with another model fails with
:class:`memory.errors.SchemaMismatch` rather than mixing vectors of two models.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from memory.embeddings import PACKAGED_DIMS, CachedEmbedder, Embedder, LangChainEmbedder, get_embedder
from memory.errors import InvalidConfig, InvalidInput, nearest
from memory.settings import MemorySettings


class EmbedderEmbeddings(Embeddings):
    """Our :class:`~memory.embeddings.Embedder` as a LangChain ``Embeddings`` (``store.embeddings``)."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed_documents(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.embed_query(text).tolist()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EmbedderEmbeddings) and other.embedder.name == self.embedder.name

    def __hash__(self) -> int:
        return hash(self.embedder.name)

    def __repr__(self) -> str:
        return f"EmbedderEmbeddings({self.embedder.name!r})"


class _SyncOrAsync(LangChainEmbedder):
    """A LangChain ``Embeddings`` whose sync methods may be missing (an async-only function).

    The store embeds in its own thread (``abatch`` runs ``batch`` in a worker thread), where no
    event loop runs, so the async twin can be driven with ``asyncio.run``.
    """

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            rows = self._emb.embed_documents(list(texts))
        except (NotImplementedError, ValueError):
            rows = _run(self._emb.aembed_documents(list(texts)))
        return self._checked(_unit(rows))

    def embed_query(self, text: str) -> np.ndarray:
        try:
            row = self._emb.embed_query(text)
        except (NotImplementedError, ValueError):
            row = _run(self._emb.aembed_query(text))
        return self._checked(_unit([row]))[0]

    def _checked(self, m: np.ndarray) -> np.ndarray:
        if m.shape[1] != self.dim:
            raise ValueError(f"index dims={self.dim} but the embedding model returned {m.shape[1]}-d vectors; "
                             "fix IndexConfig['dims']")
        return m


def _run(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(
        "this embedding function is async-only: call the store's async methods (aput, asearch) "
        "or pass a sync function"
    )


def _unit(rows: Any) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float32)
    if m.ndim != 2:
        raise ValueError(f"the embedding function returned {m.ndim}-d output; expected one vector per text")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def _name(embed: Any) -> str:
    """A stable name for a user-supplied model (recorded in the store file)."""
    if isinstance(embed, str):
        return embed
    if isinstance(embed, Embeddings):
        model = getattr(embed, "model", None) or getattr(embed, "model_name", None)
        return f"langchain/{type(embed).__name__}" + (f"/{model}" if isinstance(model, str) else "")
    return f"langchain/{getattr(embed, '__module__', '?')}.{getattr(embed, '__qualname__', type(embed).__name__)}"


def _is_ours(name: str) -> bool:
    return all(part.strip().partition(":")[0] in PACKAGED_DIMS for part in name.split("+"))


def resolve_embedder(index: dict[str, Any], settings: MemorySettings) -> tuple[Embedder, Embeddings]:
    """The embedder the store writes with and its LangChain face (``store.embeddings``)."""
    embed = index.get("embed")
    dims = index.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise ValueError(f"index dims must be a positive integer, got {dims!r}")
    if embed is None:
        emb = get_embedder(settings.embedding.model, threads=settings.embedding.threads,
                           batch_size=settings.embedding.batch_size, cache_dir=settings.embedding.cache_dir)
        return emb, EmbedderEmbeddings(emb)
    if isinstance(embed, str) and _is_ours(embed):
        emb = get_embedder(embed, threads=settings.embedding.threads, batch_size=settings.embedding.batch_size,
                           cache_dir=settings.embedding.cache_dir)
        return emb, EmbedderEmbeddings(emb)
    if not (isinstance(embed, str | Embeddings) or callable(embed)):
        raise ValueError(
            f"index embed must be an Embeddings, a function list[str] -> list[list[float]], or a model name "
            f"like 'openai:text-embedding-3-small' or 'local/use-multilingual-v3', got {type(embed).__name__}"
        )
    from langgraph.store.base.embed import ensure_embeddings

    try:
        lc = ensure_embeddings(embed)
    except Exception as exc:  # unknown provider, missing package or API key
        raise ValueError(f"cannot start embedding model {embed!r}: {type(exc).__name__}: {exc}") from exc
    if dims is None:
        if inspect.iscoroutinefunction(embed):
            raise ValueError("index dims is required with an async embedding function")
    emb = CachedEmbedder(_SyncOrAsync(lc, name=_name(embed), dim=dims))
    return emb, lc


# IndexConfig's keys (SqliteStore adds ``text_fields``; PostgresStore ``ann_index_config`` and
# ``distance_type``, accepted so one config serves both, without effect here). Keys starting with
# "__" are a store's own derived entries (``__tokenized_fields``), present when a config is copied
# from another store's ``index_config``.
INDEX_KEYS = ("dims", "embed", "fields", "text_fields", "ann_index_config", "distance_type")
TTL_KEYS = ("default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired")


def unknown_key(what: str, key: object, known: Sequence[str]) -> InvalidConfig:
    """The error for a key LangGraph's config does not have (a typo would be silently ignored)."""
    near = nearest(str(key), known)
    hint = f"did you mean {near!r}? " if near else ""
    return InvalidConfig(f"{what} has no key {key!r}; {hint}use {', '.join(known)}")


def check_index_keys(index: Mapping[str, Any]) -> None:
    for key in index:
        if not (isinstance(key, str) and key.startswith("__")) and key not in INDEX_KEYS:
            raise unknown_key("index", key, INDEX_KEYS)


def check_ttl_config(ttl: object) -> None:
    """LangGraph's ``TTLConfig``: checked when the store is built, not at the first put."""
    from memory.store_items import ttl_minutes

    if ttl is None:
        return
    if not isinstance(ttl, Mapping):
        raise InvalidConfig(f"ttl must be a dict like {{'default_ttl': 60}} (minutes), got {ttl!r:.60}")
    for key, value in ttl.items():
        if key not in TTL_KEYS:
            raise unknown_key("ttl", key, TTL_KEYS)
        if key == "default_ttl" and value is not None:
            try:
                ttl_minutes(value)
            except InvalidInput as exc:
                raise InvalidConfig(f"ttl['default_ttl']: {exc}") from None
        elif key in ("refresh_on_read", "omit_expired") and not isinstance(value, bool):
            raise InvalidConfig(f"ttl[{key!r}] must be True or False, got {value!r:.40}")
        elif key == "sweep_interval_minutes" and value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf")):
            raise InvalidConfig(f"ttl['sweep_interval_minutes'] must be a positive number of minutes, got {value!r:.40}")


def resolve_fields(index: dict[str, Any]) -> list[str]:
    """``fields`` or SqliteStore's ``text_fields``; default ``["$"]`` (the whole value)."""
    fields = index.get("fields")
    if fields is None:
        fields = index.get("text_fields")
    fields = ["$"] if fields is None else fields
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not all(
            isinstance(f, str) and f for f in fields) or not fields:
        raise ValueError(f"index fields must be a non-empty list of paths like ['content'], got {fields!r}")
    return list(fields)


def check_dims(emb: Embedder, dims: Any) -> None:
    if dims is not None and dims != emb.dim:
        raise ValueError(f"index dims={dims} but the embedding model {emb.name!r} produces {emb.dim}-d vectors")


__all__ = ["INDEX_KEYS", "TTL_KEYS", "EmbedderEmbeddings", "check_dims", "check_index_keys", "check_ttl_config",
           "resolve_embedder", "resolve_fields"]
