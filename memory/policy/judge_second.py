"""The judge's second opinion: a model that also reads multilingual-e5-small's cosines
(:mod:`memory.policy.e5_view`), asked only about the pairs the first model is unsure of.

e5 raised out-of-fold duplicates merged and updates resolved, above all in Chinese and
cross-language pairs, but it costs ~10-30 ms a text here against ~1 ms for USE-m3: run on every
write it would break the write-latency budget (p95 <= 25 ms). So the first model (the usual
features) decides the pairs it is sure of, and the pairs within ``gate_band`` log-odds of its
threshold are decided by the second model (the same features + e5's), with its own threshold.
``memctl.tune_judge`` fits both and chooses the band so that the share of pairs asked stays small
(it reports the share). Split from :mod:`memory.policy.judge`; numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.policy.e5_view import E5_FEATURES


@dataclass(frozen=True)
class SecondOpinion:
    """The second model (a :class:`memory.policy.judge.TreeModel` over the first model's features
    + :data:`E5_FEATURES`) and the band, in log-odds around the first model's threshold, of the
    pairs it is asked about."""

    model: Any  # TreeModel (not imported: judge imports this module)
    gate_band: float

    def asks(self, p_first: float, first_threshold: float) -> bool:
        return abs(_logit(p_first) - _logit(first_threshold)) < self.gate_band

    def to_json(self) -> dict[str, Any]:
        return {"gate_band": self.gate_band, "model": self.model.to_json()}

    @classmethod
    def from_json(cls, obj: dict[str, Any], model_from_json: Any, first_features: tuple[str, ...]) -> SecondOpinion:
        model = model_from_json(obj["model"], known=first_features + E5_FEATURES)
        if tuple(model.features) != tuple(first_features) + E5_FEATURES:
            raise ValueError("the second opinion must read the first model's features followed by "
                             f"{list(E5_FEATURES)}")
        return cls(model, float(obj["gate_band"]))


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return float(np.log(p / (1 - p)))
