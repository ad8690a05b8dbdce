"""The write judge's view of a pair through the encoder's vectors: a linear part (a logistic
regression over :func:`pair_vector` and the standardised pair features, whose log-odds are added
to the trees' in :class:`memory.policy.judge.TreeModel`) and a projection of the pair vector onto
a few principal directions that the trees read beside the described features. Split from
:mod:`memory.policy.judge`; numpy only."""

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


@dataclass(frozen=True)
class Projection:
    """The pair vector's top principal components (fitted by ``memctl.tune_judge`` on the fitting
    rows), read by the trees as extra inputs after the named features.

    The linear part weighs each of the 2,048 dimensions on its own; the trees see only the
    described features. A few principal directions of where the two texts' vectors differ and
    agree let the trees combine the encoder's view with those features (a changed value *and* a
    difference along the direction that separates another entity from a new value): out of fold
    over the fit + choose kinds this raised updates resolved by ~.05 at the same false-merge rate
    (see ``memctl.tune_judge``)."""

    mean: np.ndarray  # (d,) the fitting rows' mean pair vector
    components: np.ndarray  # (k, d), unit rows

    def __call__(self, pv: np.ndarray) -> np.ndarray:
        pv = np.asarray(pv, dtype=float)
        if pv.shape != self.mean.shape:
            raise InvalidConfig(f"the dedupe judge's projection expects a pair vector of {self.mean.shape[0]}, got "
                                f"{pv.shape[0]} (another encoder?); refit it with python -m memctl.tune_judge")
        return self.components @ (pv - self.mean)

    def to_json(self) -> dict[str, Any]:
        return {"mean": [round(float(m), 8) for m in self.mean],
                "components": [[round(float(c), 8) for c in row] for row in self.components]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Projection:
        mean, comp = np.asarray(obj["mean"], dtype=float), np.asarray(obj["components"], dtype=float)
        if comp.ndim != 2 or comp.shape[1] != mean.shape[0]:
            raise ValueError("the projection's components do not match its mean")
        return cls(mean, comp)


__all__ = ["LinearPart", "Projection", "pair_vector"]
