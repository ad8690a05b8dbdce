"""Helpers of ``memctl.tune_judge`` for the judge's second opinion (memory.policy.judge_second):
e5's features of the corpus pairs (vectors cached between runs) and the gated decision."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory.policy.e5_view import E5_FEATURES, E5View, e5_features

# e5 vectors of the corpus texts, kept between runs (deterministic: a cache cannot change a figure).
E5_CACHE = Path(tempfile.gettempdir()) / "memctl_tune_judge_e5.pkl"


def featurize_e5(pairs: Sequence[dict[str, Any]]) -> np.ndarray:
    """e5's features (E5_FEATURES) of the pairs, the vectors cached in E5_CACHE."""
    view = E5View(cache_size=10**7)
    try:
        view._cache.update(pickle.loads(E5_CACHE.read_bytes()))
    except (OSError, pickle.PickleError, EOFError):
        pass
    n = len(view._cache)
    rows = [e5_features(view, p["existing"], p["incoming"]) for p in pairs]
    if len(view._cache) > n:
        E5_CACHE.write_bytes(pickle.dumps(dict(view._cache)))
    return np.array([[r[f] for f in E5_FEATURES] for r in rows], dtype=float).reshape(len(pairs), len(E5_FEATURES))


def combine(s1: np.ndarray, t1: float, s2: np.ndarray, t2: float, band: float) -> np.ndarray:
    """The gated judge's decision as a score with threshold 0.5: the second model's log-odds margin
    over its threshold where the first is within ``band`` of its own, else the first's margin."""
    m1, m2 = _logit(s1) - _logit(t1), _logit(s2) - _logit(t2)
    return 1.0 / (1.0 + np.exp(-np.where(np.abs(m1) < band, m2, m1)))


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))
