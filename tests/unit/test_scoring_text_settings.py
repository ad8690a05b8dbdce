"""Pure modules: scoring, tokenizer, namespaces, settings."""

from __future__ import annotations

import doctest
import importlib
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from memory import scoring
from memory.errors import InvalidConfig, InvalidNamespace
from memory.namespace import is_prefix, parse_namespace, parse_namespaces
from memory.records import MemoryMetadata, MemoryRecord, ScoredMemory
from memory.settings import MemorySettings, ScoringSettings
from memory.text import fts_document, fts_query, keyword_terms, tokenize

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 6, 1, tzinfo=UTC)


def _rec(id: str, days_old: float = 0, type: str = "note", source: str = "user") -> MemoryRecord:
    t = NOW - timedelta(days=days_old)
    return MemoryRecord(id=id, namespace="n/x", content=id, metadata=MemoryMetadata(type=type, source=source),
                        created_at=t, updated_at=t)


def test_decay_formula():
    assert scoring.decay(0, 0.01) == 1.0
    assert scoring.decay(69.3147, 0.01) == pytest.approx(0.5, abs=1e-4)
    assert scoring.decay(-5, 0.01) == 1.0  # clock skew never boosts above 1
    assert scoring.decay(10, 0.0) == 1.0


def test_score_formula_and_breakdown():
    cfg = ScoringSettings(alpha=0.7, beta=0.2, gamma=0.1, decay_lambda=0.05, vector_weight=0.6, bm25_k=1.0,
                          type_boosts={"user_profile": 0.8}, source_boosts={"supervisor": 0.5})
    cands = [
        ScoredMemory(_rec("a", days_old=10, type="user_profile", source="supervisor"), 0.9, 3.0),
        ScoredMemory(_rec("b", days_old=0), 0.2, 1.0),
    ]
    hits = {h.record.id: h.breakdown for h in scoring.score_candidates(cands, NOW, cfg)}
    a = hits["a"]
    kw = (3.0 / 4.0) * 1.0
    assert a.keyword == pytest.approx(kw)
    assert a.sim == pytest.approx(0.6 * 0.9 + 0.4 * kw)
    assert a.decay == pytest.approx(math.exp(-0.05 * 10))
    assert a.boost == 1.0  # 0.8 + 0.5 clipped
    assert a.score == pytest.approx(0.7 * a.sim + 0.2 * a.decay + 0.1 * 1.0)
    b = hits["b"]
    assert b.keyword == pytest.approx((1.0 / 2.0) * (1.0 / 3.0))
    assert b.boost == 0.0 and b.decay == 1.0


def test_ranking_order_recency_and_threshold():
    cfg = ScoringSettings(beta=0.5, gamma=0.0)
    cands = [ScoredMemory(_rec("old", days_old=300), 0.5, None), ScoredMemory(_rec("new", days_old=1), 0.5, None)]
    hits = scoring.score_candidates(cands, NOW, cfg)
    assert [h.record.id for h in hits] == ["new", "old"]
    assert hits[0].breakdown.sim == pytest.approx(0.5)  # vector carries all sim without keywords
    assert [h.record.id for h in scoring.select(hits, 5, hits[0].score - 1e-9)] == ["new"]
    assert scoring.select(hits, 1, -1) == hits[:1]


def test_negative_cosine_is_clipped():
    hits = scoring.score_candidates([ScoredMemory(_rec("a"), -0.7, 0.0)], NOW, ScoringSettings())
    assert hits[0].breakdown.vector == 0.0 and hits[0].breakdown.sim == 0.0


def test_tokenizer_english_and_chinese():
    assert tokenize("The reports were running") == ["report", "run"]
    assert tokenize("我喜欢喝咖啡") == ["我喜", "喜欢", "欢喝", "喝咖", "咖啡"]
    assert tokenize("GMV口径") == ["gmv", "口径"]
    assert tokenize("的") == []  # lone function character
    assert tokenize("猫") == ["猫"]
    assert "咖啡" in tokenize("把咖啡 revenue 按 region 汇总")


def test_keyword_terms_add_chinese_unigrams_to_the_bigrams():
    # The keyword index (FTS5 documents and queries, Qdrant's sparse vectors) also holds the
    # content characters of each CJK run, so "周六几点开门" meets "星期六九点营业" on 六 and 点.
    assert keyword_terms("我喜欢喝咖啡") == ["我喜", "喜欢", "欢喝", "喝咖", "咖啡", "喜", "欢", "喝", "咖", "啡"]
    assert keyword_terms("The reports were running") == tokenize("The reports were running")
    assert keyword_terms("猫") == ["猫"]  # a lone character is already a unigram
    assert "六" in keyword_terms("周六几点开门") and "六" in keyword_terms("星期六九点营业")
    assert '"六"' in fts_query("周六几点开门") and fts_document("GMV口径").split() == ["gmv", "口径", "口", "径"]


def test_fts_query_quotes_everything():
    assert fts_query('AND OR NEAR "x"') is not None
    assert '"near"' in fts_query("NEAR")
    assert fts_query("the of and") is None
    assert fts_query("tea tea tea") == '"tea"'


@pytest.mark.parametrize("raw,expected", [("user_profile/u1", ("user_profile", "u1")),
                                          (("a", "b"), ("a", "b")), (["用户", "张三"], ("用户", "张三"))])
def test_namespace_parse(raw, expected):
    assert parse_namespace(raw) == expected


def test_namespace_prefix_respects_labels():
    assert is_prefix(("u1",), ("u1", "x"))
    assert not is_prefix(("u1",), ("u12",))
    assert not is_prefix(("foo",), ("foobar", "x"))
    assert parse_namespaces("a/b") == [("a", "b")]
    assert parse_namespaces(["a/b", ("c",)]) == [("a", "b"), ("c",)]
    with pytest.raises(InvalidNamespace):
        parse_namespaces([])


def test_default_yaml_mirrors_settings_defaults():
    data = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    defaults = MemorySettings().model_dump()
    defaults.pop("path")  # machine-specific: under the user's data directory
    assert data == defaults
    loaded = MemorySettings.load(ROOT / "configs" / "default.yaml")
    assert loaded.model_dump() == MemorySettings().model_dump()


def test_precedence_args_env_yaml(tmp_path, monkeypatch):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("path: from-yaml.sqlite\nscoring:\n  alpha: 0.3\n  beta: 0.4\n")
    s = MemorySettings.load(cfg)
    assert (s.path, s.scoring.alpha, s.scoring.beta) == ("from-yaml.sqlite", 0.3, 0.4)
    monkeypatch.setenv("MEMORY_SCORING__ALPHA", "0.9")
    monkeypatch.setenv("MEMORY_PATH", "from-env.sqlite")
    s = MemorySettings.load(cfg)
    assert (s.path, s.scoring.alpha, s.scoring.beta) == ("from-env.sqlite", 0.9, 0.4)
    s = MemorySettings.load(cfg, path=":memory:")
    assert s.path == ":memory:"
    monkeypatch.setenv("MEMORY_CONFIG", str(cfg))
    assert MemorySettings.load().scoring.beta == 0.4


def test_bad_yaml_is_a_clear_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("scoring: [unclosed\n")
    with pytest.raises(InvalidConfig):
        MemorySettings.load(cfg)
    cfg.write_text("scoring:\n  alpah: 1\n")
    with pytest.raises(InvalidConfig, match="alpah"):
        MemorySettings.load(cfg)


@pytest.mark.parametrize("module", ["memory.backends.sqlite", "memory.service"])
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
