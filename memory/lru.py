"""A bounded text (or any hashable key) → vector cache that forgets the least recently used entry.

The paraphrase model (:mod:`memory.policy.paraphrase`) and the consolidation judge's e5 vectors
(:mod:`memory.policy.consolidate_judge`) each keep the vectors of the texts they have seen, so a
text that is a neighbour in many writes is encoded once. Not thread-safe: each owner already
holds its own lock around the model call and the cache together.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import numpy as np


class VectorLRU:
    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict[Hashable, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, text: object) -> bool:
        return text in self._d

    def clear(self) -> None:
        self._d.clear()

    def get(self, text: Hashable) -> np.ndarray | None:
        v = self._d.get(text)
        if v is not None:
            self._d.move_to_end(text)
        return v

    def put(self, text: Hashable, vector: np.ndarray) -> np.ndarray:
        v = np.asarray(vector, dtype=np.float32)
        self._d[text] = v
        self._d.move_to_end(text)
        while len(self._d) > self.size:
            self._d.popitem(last=False)
        return v
