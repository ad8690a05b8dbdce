"""Language-aware fusion (memory.scoring): keyword evidence only judges memories in the query's script."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory import scoring
from memory.records import MemoryMetadata, MemoryRecord, ScoredMemory
from memory.settings import ScoringSettings

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def _rec(id: str, content: str) -> MemoryRecord:
    return MemoryRecord(id=id, namespace="n/x", content=content, metadata=MemoryMetadata(type="note"),
                        created_at=NOW, updated_at=NOW)


def test_han_share_reads_the_script_not_the_speaker():
    assert scoring.han_share("Fang: 以后报表里的金额都用人民币万元为单位") == pytest.approx(1.0)
    assert scoring.han_share("Emily: Please use UTC for all timestamps") == 0.0
    mixed = scoring.han_share("channel 字段里 app 的取值是 APP_IOS")
    assert 0.2 < mixed < 0.8
    assert scoring.han_share("2025 !!") == 0.5  # neither script: unknown
    assert scoring.keyword_visibility(0.0, 1.0) == 0.0 and scoring.keyword_visibility(1.0, 1.0) == 1.0


def test_imputed_keyword_part_follows_the_vector_rank_among_visible_memories():
    # Visible memories (vis 1) keep their keyword part; an invisible one (vis 0) gets the keyword
    # part of the visible ones at its vector quantile: between two of them, linearly.
    out = scoring.impute_keywords([0.1, 0.3, 0.2], [0.0, 0.75, 0.0], [1.0, 1.0, 0.0])
    assert out == pytest.approx([0.0, 0.75, 0.375])
    # Beyond the visible ones the map goes on at slope 1 (capped at 1); no visible memory: nothing.
    assert scoring.impute_keywords([0.3, 0.05], [0.5, 0.0], [1.0, 0.0]) == pytest.approx([0.5, 0.25])
    assert scoring.impute_keywords([0.1, 0.3, 0.6], [0.0, 0.75, 0.0], [1.0, 1.0, 0.0])[2] == 1.0
    assert scoring.impute_keywords([0.4, 0.05], [0.0, 0.0], [0.0, 0.0]) == [0.0, 0.0]


def test_memories_the_keywords_cannot_see_are_ranked_with_the_full_vector_difference():
    # Two Chinese memories above every English one by vector score: the step map gave both the
    # best English keyword part, so only .6 of their vector gap was left against decay and
    # boosts. Now their fused sims differ by the whole vector gap, as dense-only ranks them.
    vis = [1.0, 1.0, 0.0, 0.0]
    kws = scoring.impute_keywords([0.10, 0.15, 0.27, 0.25], [0.2, 0.6, 0.0, 0.0], vis)
    sims = [scoring.similarity(v, k, 0.6) for v, k in zip([0.10, 0.15, 0.27, 0.25], kws, strict=True)]
    assert sims[2] - sims[3] == pytest.approx(0.02)
    # Between two sparse visible memories too: a flat stretch of the map (keyword parts .20 and
    # .25 at vector .1 and .5) no longer shrinks the gap, so decay cannot reorder them.
    vis = [1.0, 1.0, 0.0, 0.0]
    vecs = [0.1, 0.5, 0.30, 0.25]
    kws = scoring.impute_keywords(vecs, [0.20, 0.25, 0.0, 0.0], vis)
    assert kws[2] - kws[3] == pytest.approx(0.05)  # linear interpolation gave .00625
    sims = [scoring.similarity(v, k, 0.6) for v, k in zip(vecs, kws, strict=True)]
    assert sims[2] - sims[3] == pytest.approx(0.05)
    # And the map never reverses the vector order of invisible memories.
    refs = ([0.1, 0.2, 0.21, 0.5], [0.0, 0.1, 0.9, 0.95])
    grid = [i / 100 for i in range(0, 80)]
    mapped = [scoring.quantile_keyword(v, *refs) for v in grid]
    assert all(b >= a for a, b in zip(mapped, mapped[1:], strict=False))


def _cands() -> list[ScoredMemory]:
    return [
        # The answer, in Chinese: a good vector match, invisible to English keywords.
        ScoredMemory(_rec("zh", "Fang: 以后报表里的金额都用人民币万元为单位，保留两位小数。"), 0.6, 0.0),
        # An English memory that merely shares a word of the question: the best BM25 score.
        ScoredMemory(_rec("en_weak", "Fang: The report deadline moved to Friday."), 0.3, 6.0),
        ScoredMemory(_rec("en_other", "Fang: I like hiking on weekends."), 0.1, 0.0),
    ]


def test_cross_language_vector_match_is_not_buried_by_a_weak_keyword_match():
    q = "How should money amounts be shown in the report?"
    aware = scoring.score_candidates(_cands(), NOW, ScoringSettings(), q)
    assert aware[0].record.id == "zh"
    plain = scoring.score_candidates(_cands(), NOW, ScoringSettings(language_fusion=False), q)
    assert plain[0].record.id == "en_weak"  # what plain fusion did (zh/en set en->zh MRR .55)
    # Without the question text the fusion stays plain (callers that score without a query).
    assert scoring.score_candidates(_cands(), NOW, ScoringSettings())[0].record.id == "en_weak"


def test_one_script_store_is_scored_exactly_as_plain_fusion():
    cands = [ScoredMemory(_rec("a", "Caroline: I went to a support group"), 0.5, 3.0),
             ScoredMemory(_rec("b", "Melanie: Painting calms me down"), 0.7, 0.0)]
    q = "What did Caroline do?"
    aware = scoring.score_candidates(cands, NOW, ScoringSettings(), q)
    plain = scoring.score_candidates(cands, NOW, ScoringSettings(language_fusion=False), q)
    assert [(h.record.id, h.breakdown.sim) for h in aware] == [(h.record.id, h.breakdown.sim) for h in plain]


def test_keyword_only_search_imputes_nothing():
    # vector_weight 0 is a BM25-only search: the Chinese memory must not borrow keyword evidence
    # from its vector score.
    hits = scoring.score_candidates(_cands(), NOW, ScoringSettings(vector_weight=0.0, vector_floor=0.0), "amounts?")
    by_id = {h.record.id: h.breakdown for h in hits}
    assert by_id["zh"].keyword == 0.0 and by_id["zh"].sim == 0.0
    assert hits[0].record.id == "en_weak"


def test_mixed_script_candidates_shift_weight_to_vectors_and_cap_keywords():
    # Every candidate visible (a one-script store): nothing changes.
    assert scoring.mixed_script_fusion(0.6, [1.0, 1.0], 0.75, 0.15) == (0.6, None)
    assert scoring.mixed_script_fusion(0.6, [], 0.75, 0.15) == (0.6, None)
    # Half the candidates invisible: vector_weight moves .75 * .5 of the way to 1, and a cap.
    wv, cap = scoring.mixed_script_fusion(0.6, [1.0, 0.0, 1.0, 0.0], 0.75, 0.15)
    assert wv == pytest.approx(0.6 + 0.4 * 0.375) and cap == 0.15
    assert scoring.mixed_script_fusion(0.6, [1.0, 0.0], 0.0, 0.15) == (0.6, 0.15)


def test_weak_keyword_match_cannot_pass_a_strong_vector_match_in_a_mixed_store():
    # A Chinese question in a zh/en store. The answer (vector .58) shares one bigram with it; a
    # Chinese memory about something else shares many (vector .30, the best BM25 by far). Plain
    # weights let the keyword match win (sim .55 vs the answer's vector floor .464); with a third
    # of the candidates in English the vector weight rises to .7 (.487) and keywords lift sim at
    # most .15 above the vector score (.45), so the vector order stands.
    q = "现在报表里的金额用什么单位？"
    cands = [ScoredMemory(_rec("answer", "Fang: 以后金额改成人民币百万元，保留一位小数。"), 0.58, 1.0),
             ScoredMemory(_rec("zh_noise", "Fang: 报表里的金额栏要加粗，单位栏放在右边。"), 0.30, 12.0),
             ScoredMemory(_rec("en", "Fang: I go hiking on weekends."), 0.20, 0.0)]
    hits = scoring.score_candidates(cands, NOW, ScoringSettings(), q)
    assert hits[0].record.id == "answer"
    by_id = {h.record.id: h.breakdown for h in hits}
    assert by_id["zh_noise"].sim == pytest.approx(0.30 + 0.15)
    assert by_id["answer"].sim == pytest.approx(0.8 * 0.58)  # vector_floor
    # Either constant off (cap 1 = none, shift 0 = vector_weight as set): the keyword match wins.
    assert scoring.score_candidates(cands, NOW, ScoringSettings(keyword_cap=1.0), q)[0].record.id == "zh_noise"
    plain = ScoringSettings(keyword_cap=1.0, vector_shift=0.0)
    assert scoring.score_candidates(cands, NOW, plain, q)[0].record.id == "zh_noise"
    # One script only (no English candidate): neither applies.
    same = scoring.score_candidates(cands[:2], NOW, ScoringSettings(), q)
    assert same[0].record.id == "zh_noise"
