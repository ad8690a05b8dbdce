"""A second, cheap view of meaning for the write-path judge: WordLlama ``l2_supercat`` static
embeddings (packaged in the ``wordllama`` wheel, 256-d, ~0.1 ms a text).

USE-m3 (the judge's encoder) and MiniLM (English paraphrases) are contextual models; a static
token-average model weighs words differently — a changed name or number moves it more, shared
content words hold it up across paraphrases — and out of fold over the fit + choose kinds (5-fold
by kind) its cosines of the texts and of their value-masked forms raised duplicates merged and
conflicts resolved at the same false-merge rate (see ``memctl.tune_judge``); masking names as well
as values (:mod:`memory.policy.names`) gives the slot without its value when the value is a name.

Vectors are cached per text (LRU, thread-safe), so a stored memory met by many writes is embedded
once. The model loads on first use (~0.15 s); nothing is downloaded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import InvalidConfig


class StaticViewUnavailable(InvalidConfig):
    """The ``wordllama`` package (the judge's static view) is missing or unreadable."""


class StaticView:
    """Cosines under WordLlama, cached per text.

    Example:
        >>> v = StaticView()
        >>> v.cosine("Exports should be CSV files.", "Exports should be CSV files!") > 0.9
        True
    """

    def __init__(self, cache_size: int = 16384):
        self._model: Any = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _load_locked(self) -> Any:
        if self._model is None:
            try:
                import wordllama
                from wordllama import WordLlama

                # WordLlama.load() looks for its tokenizer in the wrong folder and then tries a
                # download; the wheel's own folder has it (as memory.packaged_models does).
                self._model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent)
            except Exception as exc:  # noqa: BLE001 - missing package, unreadable weights
                raise StaticViewUnavailable(
                    f"the dedupe judge needs the packaged 'wordllama' model: {exc}; reinstall the package "
                    "(pip install -e .)") from exc
        return self._model

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if missing:
                rows = self._load_locked().embed(missing, norm=True)
                for t, v in zip(missing, rows, strict=True):
                    self._cache[t] = np.asarray(v, dtype=np.float64)
            out = []
            for t in texts:
                v = self._cache[t]
                self._cache.move_to_end(t)
                out.append(v)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return out

    def cosine(self, a: str, b: str) -> float:
        va, vb = self.vectors([a, b])
        return float(va @ vb)


# The static model's cosines of the texts, of their value-masked forms, and of those with names masked
# too (the slot without its value). The encoder's cosine of the name-masked forms did as well out of
# fold but cost one more encoder string per write.
STATIC_FEATURES: tuple[str, ...] = ("cos_wl", "cos_wl_masked", "cos_wl_nmask")


def static_features(view: StaticView, existing: str, incoming: str) -> dict[str, float]:
    """The static view's features of one pair (each text's vectors cached by ``view``)."""
    from memory.policy.names import mask_names
    from memory.policy.reading import read

    wa, wb, wma, wmb, wna, wnb = view.vectors([existing, incoming, read(existing).masked, read(incoming).masked,
                                              mask_names(existing), mask_names(incoming)])
    return {"cos_wl": float(wa @ wb), "cos_wl_masked": float(wma @ wmb), "cos_wl_nmask": float(wna @ wnb)}


_SHARED: StaticView | None = None
_SHARED_LOCK = threading.Lock()


def static_view() -> StaticView:
    """The process-wide static view (lazy: nothing loads until the first pair needs it)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = StaticView()
        return _SHARED
