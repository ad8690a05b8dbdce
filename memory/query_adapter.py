"""A learned query-side map for the dense channel: ``q' = normalise(q * scale)`` (issue 16, stop 29).

The packaged encoder (USE-multilingual) puts an English chat question and the turn that answers it
far apart in a few directions that mostly say "this is a question" / "who speaks" rather than what
it is about; raw cosine ranks a LoCoMo question's evidence in the top 10 for only 46% of the tuning
questions. A per-dimension scale of the *query* vector, fitted with a softmax loss over each
question's 50 nearest turns (the hard negatives) on the LoCoMo tuning conversations and the zh/en
fitting sets, moves that to ~70% out of conversation (``scripts/dense_adapter_lab.py``). Only the
query changes: stored vectors, the index and every write stay as they are, so the adapter can be
switched off (``scoring.query_adapter``) without re-embedding anything.

The adapter is plain JSON (``query_adapter.json``, 512 numbers) and applies only to the model it
was fitted for (its ``model`` and ``dim``); any other embedder gets its query vector unchanged.
Fitted by ``python scripts/dense_adapter_lab.py --write`` (numpy only).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memory.errors import InvalidConfig
from memory.query import _mentions
from memory.scoring import has_han
from memory.settings import SwitchMode

ADAPTER_PATH = Path(__file__).with_name("query_adapter.json")


def switch_applies(mode: SwitchMode, query: str) -> bool:
    """Whether a dense-channel switch in ``mode`` acts on this question.

    "latin": only when the question has no Han character. Fitted on LoCoMo tuning and zh_en ... zh_en_11
    (scripts/switch_rule_lab.py): the adapter learned on mostly English questions moves Chinese and
    code-switched questions' vectors away from their evidence.
    """
    if mode == "latin":
        return not has_han(query)
    return bool(mode)


@dataclass(frozen=True)
class QueryAdapter:
    model: str  # the embedder name it was fitted for (Embedder.name)
    scale: np.ndarray  # per-dimension factor of the query vector

    def apply(self, vec: np.ndarray) -> np.ndarray:
        """The scaled query, unit length again (the backends score by dot product with unit vectors)."""
        out = np.asarray(vec, dtype=np.float32) * self.scale
        n = float(np.linalg.norm(out))
        return out / n if n > 0 else np.asarray(vec, dtype=np.float32)

    def to_json(self, **info: object) -> str:
        return json.dumps({"model": self.model, "dim": int(self.scale.size), "kind": "diagonal",
                           **info, "scale": [round(float(x), 6) for x in self.scale]})


def read(path: Path) -> QueryAdapter:
    """Parse an adapter file; a broken one is a configuration error that names the file."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        scale = np.asarray(obj["scale"], dtype=np.float32)
        model, dim = str(obj["model"]), int(obj["dim"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidConfig(f"{path}: not a readable query adapter ({exc}); restore it from git or set "
                            "MEMORY_SCORING__QUERY_ADAPTER=false") from exc
    # Factors may be negative (a direction that points away from the evidence is turned round), not all zero.
    if scale.ndim != 1 or scale.size != dim or not np.all(np.isfinite(scale)) or not np.any(scale):
        raise InvalidConfig(f"{path}: the scale must be {dim} finite numbers, not all zero; restore it from git "
                            "or set MEMORY_SCORING__QUERY_ADAPTER=false")
    return QueryAdapter(model, scale)


_LOADED: dict[Path, QueryAdapter] = {}
_LOCK = threading.Lock()


def shipped() -> QueryAdapter:
    """The packaged adapter, read once per process."""
    with _LOCK:
        if ADAPTER_PATH not in _LOADED:
            _LOADED[ADAPTER_PATH] = read(ADAPTER_PATH)
        return _LOADED[ADAPTER_PATH]


def adapt(vec: np.ndarray, model: str, adapter: QueryAdapter | None = None) -> np.ndarray:
    """``vec`` through the adapter when it was fitted for ``model`` and the sizes agree, else unchanged."""
    a = adapter or shipped()
    if a.model != model or a.scale.size != np.asarray(vec).size:
        return vec
    return a.apply(vec)


def without_speakers(query: str, speakers: Iterable[object]) -> str | None:
    """The question without the names of the given speakers it mentions (and their "'s"), or None.

    A speaker's name in a question ("What did Caroline paint?") pulls its vector towards every turn
    that greets or mentions that person rather than the turn about the painting; the keyword channel
    and the speaker rule (memory.query) still read the name. None: no speaker named, or nothing left.
    """
    low = query.casefold()
    names = sorted({s for s in speakers if isinstance(s, str) and s.strip() and _mentions(low, s.casefold())},
                   key=len, reverse=True)
    if not names:
        return None
    out = query
    for n in names:
        # ASCII names whole-word (as memory.query reads them), CJK names as substrings.
        pat = rf"(?<!\w){re.escape(n)}(?:'s|’s)?(?!\w)" if n.isascii() else re.escape(n)
        out = re.sub(pat, " ", out, flags=re.IGNORECASE)
    out = " ".join(out.split())
    return out if out and out != " ".join(query.split()) else None
