"""memctl.tune_rerank: the ship gate compares with the shipped model's own out-of-set ranks."""

from __future__ import annotations

import numpy as np

from memctl.tune_rerank import LOCOMO_TUNE, ZH_DIRS, Query, narrow, summary
from memory.rerank import FEATURES


def _sets() -> dict[str, list[Query]]:
    x = np.arange(2 * len(FEATURES), dtype=float).reshape(2, -1)
    y = np.array([0.0, 1.0])
    sets = {k: [Query(k, "single-hop", x, y, 2)] for k in LOCOMO_TUNE}
    sets.update({k: [Query(k, "en-en", x, y, 2), Query(k, "zh-zh", x, y, 2)] for k in ZH_DIRS})
    return sets


def test_gate_needs_a_locomo_gain_over_the_reference_and_no_zh_direction_loss():
    sets = _sets()
    ref = {k: [2] * len(qs) for k, qs in sets.items()}  # the shipped model: evidence second everywhere
    same = summary(sets, ref, ref)
    assert same["locomo"]["base"]["MRR"] == 0.5 and not same["gate"]  # no gain: not shipped
    better = {k: ([1] if k in LOCOMO_TUNE else [2, 2]) for k in sets}
    assert summary(sets, better, ref)["gate"]
    # LoCoMo gains, but zh-zh falls from rank 2 to rank 3 in every zh/en set: -.167 MRR.
    worse_zh = {k: ([1] if k in LOCOMO_TUNE else [2, 3]) for k in sets}
    res = summary(sets, worse_zh, ref)
    assert res["zh_direction_mrr_change"]["zh-zh"] < -0.005 and not res["gate"]
    # A small LoCoMo gain is not enough: 100 LoCoMo questions, one moves from second to first (+.005).
    many = {k: qs * 20 if k in LOCOMO_TUNE else qs for k, qs in sets.items()}
    ref_many = {k: [2] * len(qs) for k, qs in many.items()}
    small = {k: ([1] + [2] * 19 if k == "conv-26" else [2] * len(qs)) for k, qs in many.items()}
    res = summary(many, small, ref_many)
    assert res["locomo"]["new"]["MRR"] > res["locomo"]["base"]["MRR"] and not res["gate"]
    # Without a reference the base is each question's own base rank (the linear ranking).
    assert summary(sets, better)["locomo"]["base"]["MRR"] == 0.5


def test_narrow_keeps_a_prefix_of_the_features():
    sets = narrow(_sets(), 38)
    q = sets["conv-26"][0]
    assert q.x.shape == (2, 38) and q.x[1, 0] == len(FEATURES)
