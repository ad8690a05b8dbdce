"""memory.query_adapter: the learned per-dimension scale of the question vector and how search applies it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest

from memory.errors import InvalidConfig
from memory.query_adapter import ADAPTER_PATH, QueryAdapter, adapt, read, shipped

NOW = datetime(2023, 10, 22, 12, 0, tzinfo=UTC)


def test_shipped_adapter_is_for_the_packaged_model_and_rescales_the_query():
    from memory.settings import EmbeddingSettings

    a = shipped()
    assert a.model == EmbeddingSettings().model and a.scale.size == 512
    obj = json.loads(ADAPTER_PATH.read_text(encoding="utf-8"))
    assert "conv-44" not in obj["fitted_on"] and "zh_en_7" not in obj["fitted_on"]  # held-out sets never fitted on
    rng = np.random.default_rng(0)
    q = rng.normal(size=512).astype(np.float32)
    q /= np.linalg.norm(q)
    out = adapt(q, a.model)
    assert np.linalg.norm(out) == pytest.approx(1.0, abs=1e-5)
    expected = q * a.scale
    np.testing.assert_allclose(out, expected / np.linalg.norm(expected), atol=1e-6)
    assert float(out @ q) < 0.99  # it does move the vector


def test_other_models_and_sizes_are_left_alone():
    a = QueryAdapter("local/use-multilingual-v3", np.full(4, 2.0, dtype=np.float32))
    q = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    assert adapt(q, "some/other-model", a) is q
    assert adapt(np.ones(8, dtype=np.float32), "local/use-multilingual-v3", a).tolist() == [1.0] * 8


@pytest.mark.parametrize("body", ["not json", '{"model": "m", "dim": 2}', '{"model": "m", "dim": 3, "scale": [1, 2]}',
                                  '{"model": "m", "dim": 2, "scale": [0, 0]}',
                                  '{"model": "m", "dim": 2, "scale": [1, NaN]}'])
def test_a_broken_adapter_file_is_a_config_error_that_says_what_to_do(tmp_path, body):
    p = tmp_path / "query_adapter.json"
    p.write_text(body, encoding="utf-8")
    with pytest.raises(InvalidConfig, match="MEMORY_SCORING__QUERY_ADAPTER=false"):
        read(p)


def test_search_scores_the_vector_channel_with_the_adapted_query_only_when_switched_on(service):
    texts = ["Caroline: I went to a LGBTQ support group yesterday and it was powerful.",
             "Melanie: We took the kids camping at the lake last weekend.",
             "Caroline: I am saving up to study counselling next year."]
    for t in texts:
        service.write(t, ("eval", "c"), {"type": "conversation"}, now=NOW)
    question = "When did Caroline go to the support group?"
    raw = service.embedder.embed_query(question)
    stored = {r.content: v for r, v in zip(service.list(("eval", "c")),
                                           service.embed_records(service.list(("eval", "c"))), strict=True)}

    def vector_scores(on: bool) -> dict[str, float]:
        cfg = service.settings.scoring.model_copy(update={"query_adapter": on, "rerank": False})
        service.settings = service.settings.model_copy(update={"scoring": cfg})
        hits = service.search(question, ("eval", "c"), top_k=3, min_score=float("-inf"), min_sim=0.0, now=NOW)
        return {h.record.content: h.breakdown.vector for h in hits}

    q_on = adapt(raw, service.embedder.name)
    for content, v in vector_scores(True).items():
        assert v == pytest.approx(max(0.0, float(stored[content] @ q_on)), abs=1e-4)
    for content, v in vector_scores(False).items():
        assert v == pytest.approx(max(0.0, float(stored[content] @ raw)), abs=1e-4)


def test_without_speakers_drops_only_the_named_speakers_whole_words():
    from memory.query_adapter import without_speakers

    assert without_speakers("What did Caroline paint for the shelter?", {"Caroline", "Melanie", None}) == \
        "What did paint for the shelter?"
    assert without_speakers("What is caroline's identity?", ["Caroline"]) == "What is identity?"
    assert without_speakers("What does John like?", ["Jon", "Gina"]) is None  # "Jon" is not in "John"
    assert without_speakers("王芳现在负责什么？", ["王芳", "Assistant"]) == "现在负责什么？"
    assert without_speakers("Caroline", ["Caroline"]) is None  # nothing would be left to embed
    assert without_speakers("Where did they go?", ["Caroline"]) is None


def test_search_embeds_the_question_without_speaker_names_only_when_switched_on(service):
    for speaker, text in (("Caroline", "Hey Melanie! I went to a LGBTQ support group yesterday."),
                          ("Melanie", "Caroline, that is great! We went camping with the kids."),
                          ("Caroline", "I am saving up to study counselling next year.")):
        service.write(f"{speaker}: {text}", ("eval", "c"), {"type": "conversation", "extra": {"speaker": speaker}},
                      now=NOW)
    question = "When did Caroline go to the support group?"
    recs = service.list(("eval", "c"))
    stored = {r.content: v for r, v in zip(recs, service.embed_records(recs), strict=True)}

    def vector_scores(on: bool) -> dict[str, float]:
        cfg = service.settings.scoring.model_copy(update={"strip_speakers": on, "rerank": False})
        service.settings = service.settings.model_copy(update={"scoring": cfg})
        hits = service.search(question, ("eval", "c"), top_k=3, min_score=float("-inf"), min_sim=0.0, now=NOW)
        return {h.record.content: h.breakdown.vector for h in hits}

    bare = service.embedder.embed_query("When did go to the support group?")
    raw = service.embedder.embed_query(question)
    assert float(bare @ raw) < 0.99
    for content, v in vector_scores(True).items():
        assert v == pytest.approx(max(0.0, float(stored[content] @ bare)), abs=1e-4)
    for content, v in vector_scores(False).items():
        assert v == pytest.approx(max(0.0, float(stored[content] @ raw)), abs=1e-4)


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("false", False), ("latin", "latin"),
                                                 (" Latin ", "latin"), ("0", False)])
def test_switch_modes_read_from_the_environment(monkeypatch, value, expected):
    from memory.settings import MemorySettings

    monkeypatch.setenv("MEMORY_SCORING__QUERY_ADAPTER", value)
    monkeypatch.setenv("MEMORY_SCORING__STRIP_SPEAKERS", value)
    s = MemorySettings(path=":memory:").scoring
    assert s.query_adapter == expected and s.strip_speakers == expected


@pytest.mark.parametrize("value", ["latn", "han", "2", ""])
def test_a_bad_switch_mode_is_refused_with_the_values_it_takes(monkeypatch, value):
    from memory.settings import MemorySettings

    monkeypatch.setenv("MEMORY_SCORING__QUERY_ADAPTER", value)
    with pytest.raises(InvalidConfig, match=r'MEMORY_SCORING__QUERY_ADAPTER.*true, false or "latin"'):
        MemorySettings(path=":memory:")


def test_latin_mode_adapts_and_strips_only_questions_without_han_characters(service):
    from memory.namespace import parse_namespaces
    from memory.query_adapter import has_han, switch_applies

    assert has_han("Fang 保存的 query 覆盖哪段日期？") and not has_han("Which café did Zoë pick?")
    assert switch_applies("latin", "When did Caroline paint?") and not switch_applies("latin", "王芳现在负责什么？")
    assert switch_applies(True, "王芳现在负责什么？") and not switch_applies(False, "When did Caroline paint?")
    for speaker, text in (("Caroline", "I went to a LGBTQ support group yesterday."), ("王芳", "我现在负责前台的排班。")):
        service.write(f"{speaker}: {text}", ("eval", "c"), {"type": "conversation", "extra": {"speaker": speaker}},
                      now=NOW)
    cfg = service.settings.scoring.model_copy(update={"query_adapter": "latin", "strip_speakers": "latin"})
    service.settings = service.settings.model_copy(update={"scoring": cfg})
    ns = tuple(parse_namespaces(("eval", "c")))
    en, zh = "When did Caroline go to the support group?", "王芳现在负责什么？"
    vec_en, _ = service._candidates(en, ns, None, 10, NOW)
    vec_zh, _ = service._candidates(zh, ns, None, 10, NOW)
    name = service.embedder.name
    # English: adapted, and embedded without the speaker's name; Chinese: the raw question, name kept.
    np.testing.assert_allclose(vec_en, adapt(service.embedder.embed_query("When did go to the support group?"), name),
                               atol=1e-6)
    np.testing.assert_allclose(vec_zh, service.embedder.embed_query(zh), atol=1e-6)
    assert float(vec_zh @ adapt(service.embedder.embed_query(zh), name)) < 0.99
