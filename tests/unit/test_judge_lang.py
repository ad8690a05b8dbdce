"""Per-language merge thresholds of the write-path judge (issue 11, judge14): the write-time
language read from the texts, the model applying its language's threshold, and tune_judge's rule
that chooses them out of author."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from memory.policy.judge import FEATURES, PairJudge, TreeModel, default_model
from memory.policy.judge_lang import pair_lang, text_lang


def test_the_write_time_language_is_read_from_the_texts():
    assert text_lang("Prefers CSV exports") == "en"
    assert text_lang("导出用 CSV 格式") == "zh"
    assert text_lang("Weekly sync with the Shanghai team 周一") == "mixed"
    assert pair_lang("Prefers CSV", "Wants CSV exports") == "en"
    assert pair_lang("喜欢 CSV 格式", "导出用 CSV") == "zh"
    assert pair_lang("Prefers CSV", "导出用 CSV") == "mixed"  # cross-language


def test_a_pair_is_held_to_its_languages_threshold_never_below_the_floor(tmp_path):
    m = replace(default_model(), merge_threshold=0.90, lang_thresholds=(("en", 0.99), ("zh", 0.95)))
    f = dict.fromkeys(FEATURES, 0.0)
    assert m.threshold("en") == 0.99 and m.threshold("zh") == 0.95
    assert m.threshold("mixed") == 0.90 and m.threshold(None) == 0.90  # unlisted / unknown: the floor
    assert not m.decide(0.97, f, "en").merge and m.decide(0.97, f, "zh").merge and m.decide(0.97, f).merge
    assert "(en)" in m.decide(0.97, f, "en").reason
    # The unsure band is around the threshold actually applied.
    assert m.decide(0.985, f, "en").unsure and not m.decide(0.999, f, "zh").unsure
    # A caller's stricter floor (the deferred write threshold) still applies to every language.
    strict = replace(m, merge_threshold=0.995)
    assert strict.threshold("zh") == 0.995 and strict.threshold("en") == 0.995
    p = tmp_path / "m.json"
    p.write_text(json.dumps(m.to_json()))
    again = TreeModel.load(p)
    assert again.lang_thresholds == m.lang_thresholds and again.merge_threshold == 0.90


def test_a_model_without_language_thresholds_keeps_one_threshold(tmp_path):
    m = replace(default_model(), lang_thresholds=())
    assert "lang_thresholds" not in m.to_json()
    assert m.threshold("en") == m.threshold("zh") == m.merge_threshold


def test_the_judge_applies_the_pairs_language():
    base = PairJudge(replace(default_model(), lang_thresholds=()))
    en = ("The user prefers CSV exports.", "Exports should be CSV files, the user says.")
    zh = ("报表金额用万元为单位", "以后报表金额改成用元为单位")
    assert base(*en).merge and base(*zh).merge
    p_en = base(*en).p_same
    # An English threshold above this pair's P(same) keeps it apart; the Chinese pair is untouched.
    m = replace(default_model(), merge_threshold=0.5, lang_thresholds=(("en", min(p_en + 1e-4, 1.0)), ("zh", 0.5)))
    j = PairJudge(m)
    assert not j(*en).merge and j(*zh).merge


def test_the_rule_keeps_each_language_within_the_target():
    from memctl.tune_judge_eval import choose_thresholds, threshold_for

    rng = np.random.default_rng(0)
    langs = np.array(["en"] * 400 + ["zh"] * 400 + ["mixed"] * 200)
    y = rng.integers(0, 2, size=1000)
    # English look-alikes score higher than Chinese ones: one threshold must follow English.
    z = rng.normal(0.0, 1.0, 1000) + 2.0 * y + np.where(langs == "en", 1.0, 0.0) * (y == 0)
    s = 1.0 / (1.0 + np.exp(-z))
    su = rng.uniform(0, 0.5, 500)
    out = choose_thresholds(s, y, langs, su, 0.04, 0.01)
    per, single = out["per_lang"], out["single"]
    for lg in ("en", "zh", "mixed"):
        m = (langs == lg) & (y == 0)
        assert np.mean(s[m] >= per[lg]) <= 0.04 and np.mean(s[m] >= single) <= 0.04
        assert per[lg] <= single + 1e-12
    assert single == pytest.approx(max(per.values())) and per["zh"] < per["en"]
    assert np.mean(s[y == 0] >= single) <= 0.04
    assert threshold_for(s[langs == "en"], y[langs == "en"], 0.04) == pytest.approx(per["en"])
