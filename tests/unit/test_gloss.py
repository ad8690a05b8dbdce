"""The gloss view (memctl/judge_gloss.py): Chinese rendered in CC-CEDICT English glosses, English
kept, values kept (canonical inside Chinese) or masked, subject and value parts apart."""

from __future__ import annotations

import pytest

from memctl import judge_gloss as gl


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    gl._CACHE.clear()


def test_chinese_words_become_their_english_glosses() -> None:
    g = gl.gloss("以后报表金额都用万元为单位")
    words = g.text.split()
    # 报表 -> report, 金额 -> sum/money, 单位 -> unit (CC-CEDICT's first senses); no Han left
    # but names the dictionary does not know.
    assert {"report", "unit"} <= set(words)
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in g.text)
    # 万元 is a value (currency + scale): kept as its canonical form, masked as one placeholder.
    assert "cny" in words and "1e4" in words
    assert "cny" not in g.masked.split() and gl.MASK in g.masked.split()


def test_english_is_its_own_gloss() -> None:
    text = "Exports are CSV files, two decimals"
    g = gl.gloss(text)
    assert g.text == text  # unchanged: the paraphrase model's vector of the text is reused
    assert "csv" not in g.masked.lower().split()


def test_negation_is_kept_and_function_words_dropped() -> None:
    g = gl.gloss("我不喜欢深色的背景")
    words = g.text.split()
    assert "not" in words and "background" in words
    assert "的" not in g.text and "我" not in g.text


def test_unknown_words_stay_as_names() -> None:
    # A name CC-CEDICT does not list is kept as written, so the same name on both sides still matches.
    g = gl.gloss("报销找财务王晓丽")
    assert "王晓丽" in g.text.split() and "financial" in g.text.split()


def test_subject_and_value_parts_are_apart() -> None:
    g = gl.gloss("华东区 GMV 是 120 万")
    assert "gmv" in g.subject
    assert g.terms == g.subject | g.rest


def test_cross_language_pair_overlaps_through_the_glosses() -> None:
    para_calls: list[tuple[str, str]] = []

    def para(a: str, b: str) -> float:
        para_calls.append((a, b))
        return 0.5

    f = gl.gloss_features("报表金额用万元为单位", "Report amounts in units of ten thousand yuan", para, 0.1, 0.2)
    # The Chinese side reaches the paraphrase model in English: without the gloss view it would
    # read the raw Chinese (MiniLM's unknown tokens).
    assert para_calls and all(not any("\u4e00" <= ch <= "\u9fff" for ch in a) for a, _ in para_calls)
    assert f["gloss_jaccard"] > 0 and f["gloss_contain"] > 0
    assert f["gloss_para"] == 0.5 and f["gloss_para_gap"] == pytest.approx(0.5 - f["gloss_jaccard"])
    assert set(f) == set(gl.GLOSS_FEATURES)


def test_without_a_paraphrase_model_the_encoder_cosines_stand_in() -> None:
    f = gl.gloss_features("报表用 PDF", "报告导出成 PDF", None, 0.7, 0.6)
    assert (f["gloss_para"], f["gloss_para_masked"]) == (0.7, 0.6)


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gl, "_CACHE_SIZE", 3)
    for k in range(6):
        gl.gloss(f"text number {k}")
    assert len(gl._CACHE) == 3


@pytest.fixture(scope="module")
def encoder_embed():  # type: ignore[no-untyped-def]
    """The judge's own encoder (packaged USE-m3), cached per text as the judge does."""
    from memory.policy.judge import FEATURES, PairJudge, TreeModel

    return PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}))._embed


@pytest.mark.parametrize("a, b", [("Meetings begin at nine", "Meetings start at nine"),
                                  ("We purchase paper from Acme", "We buy paper from Acme")])
def test_soft_match_of_synonyms_shares_a_translation(encoder_embed, a: str, b: str) -> None:  # type: ignore[no-untyped-def]
    f = gl.soft_features(a, b, encoder_embed)
    assert f["soft_pairs"] == 1.0 and f["soft_shared"] == 1.0 and f["soft_disjoint"] == 0.0


def test_soft_match_of_look_alike_entities_shares_none(encoder_embed) -> None:  # type: ignore[no-untyped-def]
    # The encoder pairs "frontend" with "backend"; CC-CEDICT lists 后端 for one and nothing shared.
    f = gl.soft_features("Frontend repo: 2-space indentation.",
                         "In the backend monorepo we indent with four spaces", encoder_embed)
    assert f["soft_pairs"] >= 1.0 and f["soft_disjoint"] == 1.0 and f["soft_shared"] == 0.0


def test_same_words_are_no_soft_match(encoder_embed) -> None:  # type: ignore[no-untyped-def]
    f = gl.soft_features("Exports are CSV files", "CSV files are the exports", encoder_embed)
    assert f == dict.fromkeys(gl.SOFT_FEATURES, 0.0)
