"""The write judge's linear part: a logistic regression over the encoder's view of a pair
(:func:`pair_vector`) and the standardised pair features, whose log-odds are added to the trees'
(:class:`memory.policy.judge.TreeModel`). Split from :mod:`memory.policy.judge`; numpy only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.errors import InvalidConfig


def pair_vector(va: np.ndarray, vb: np.ndarray, ma: np.ndarray, mb: np.ndarray) -> np.ndarray:
    """The encoder's view of a pair for :class:`LinearPart`: where the two texts' vectors differ
    and where they agree, for the texts and for their value-masked forms (symmetric in a, b)."""
    va, vb, ma, mb = (np.asarray(v, dtype=float) for v in (va, vb, ma, mb))
    return np.concatenate([np.abs(va - vb), va * vb, np.abs(ma - mb), ma * mb])


@dataclass(frozen=True)
class LinearPart:
    """A logistic regression over ``[pair_vector, feat_scale * standardised features]`` whose
    log-odds (times ``blend``) are added to the trees'. Exported from scikit-learn's
    ``LogisticRegression`` by ``memctl.tune_judge``."""

    weights: np.ndarray
    bias: float
    mean: np.ndarray  # of the features, over the fitting rows
    scale: np.ndarray
    feat_scale: float
    blend: float

    def log_odds(self, x: np.ndarray, pv: np.ndarray) -> float:
        z = np.concatenate([pv, self.feat_scale * (x - self.mean) / self.scale])
        if z.shape != self.weights.shape:
            raise InvalidConfig(f"the dedupe judge's linear part expects {self.weights.shape[0]} inputs, got "
                                f"{z.shape[0]} (another encoder?); refit it with python -m memctl.tune_judge")
        return self.blend * (float(self.weights @ z) + self.bias)

    def to_json(self) -> dict[str, Any]:
        return {"weights": [round(float(w), 8) for w in self.weights], "bias": round(self.bias, 8),
                "mean": [round(float(m), 8) for m in self.mean], "scale": [round(float(m), 8) for m in self.scale],
                "feat_scale": self.feat_scale, "blend": self.blend}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LinearPart:
        return cls(np.asarray(obj["weights"], dtype=float), float(obj["bias"]), np.asarray(obj["mean"], dtype=float),
                   np.asarray(obj["scale"], dtype=float), float(obj["feat_scale"]), float(obj["blend"]))


__all__ = ["LinearPart", "pair_vector"]
