"""memory.rerank's switch group (VECTOR_FEATURES): what the reranker reads about the dense-channel switches."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memory.query import plan_query
from memory.rerank import _SLOT, FEATURES, VECTOR_FEATURES, RerankModel, apply, candidate_features, default_model
from tests.unit.test_rerank import col, hit

NOW = datetime(2023, 10, 22, 12, 0, tzinfo=UTC)
HITS = [hit("a", "Melanie: we went camping.", 0.9, vector=0.5), hit("b", "Caroline: a sunset painting.", 0.7, vector=0.6),
        hit("c", "Caroline: it was lovely.", 0.2, vector=0.2)]


def test_the_switch_group_follows_the_same_slot_group_and_the_shipped_prefix_never_computes_it():
    width = len(default_model().features)
    assert width <= _SLOT and FEATURES[_SLOT:_SLOT + len(VECTOR_FEATURES)] == VECTOR_FEATURES
    x = candidate_features(HITS, plan_query("What did Caroline paint?", NOW), {}, width=width)
    assert x.shape == (3, width)


def test_without_a_switch_the_raw_columns_are_the_dense_channel_s_own():
    x = candidate_features(HITS, plan_query("What did Caroline paint?", NOW), {})
    assert list(col(x, "vector_raw")) == list(col(x, "vector")) == [0.5, 0.6, 0.2]
    assert list(col(x, "vector_raw_rank")) == list(col(x, "vector_rank")) == [1, 0, 2]
    assert list(col(x, "vector_raw_gap")) == list(col(x, "vector_gap"))
    assert list(col(x, "vector_rank_shift")) == [0, 0, 0] and list(col(x, "adapted")) == [0, 0, 0]


def test_with_a_switch_the_raw_columns_read_the_unadapted_cosines():
    # The adapted vector ranks b first; the question's own vector ranks c first, and a's cosine is negative.
    x = candidate_features(HITS, plan_query("What did Caroline paint?", NOW), {}, raw_cos={"a": -0.1, "b": 0.3, "c": 0.4})
    assert list(col(x, "vector_raw")) == [0.0, 0.3, 0.4]  # clipped at 0 as the breakdown's vector
    assert list(col(x, "vector_raw_rank")) == [2, 1, 0]
    assert col(x, "vector_raw_gap") == pytest.approx([0.4, 0.1, 0.0])
    assert list(col(x, "vector_rank_shift")) == [1, 1, -2]  # raw rank minus the adapted rank
    assert list(col(x, "adapted")) == [1, 1, 1]


def test_apply_asks_for_the_raw_cosines_only_when_the_model_reads_them():
    asked: list[list[str]] = []

    def raw_cos(head):
        asked.append([h.record.id for h in head])
        return {"a": 0.1, "b": 0.2, "c": 0.9}

    plan = plan_query("What did Caroline paint?", NOW)
    apply(HITS, plan, {}, default_model(), raw_cos)
    assert asked == []  # the shipped model reads a prefix without the switch group
    tree = np.array([[FEATURES.index("vector_raw"), 0.5, 1, 2, 0.0], [-1, 0, 0, 0, 0.0], [-1, 0, 0, 0, 1.0]])
    out = apply(HITS, plan, {}, RerankModel(FEATURES, 0.0, (tree,), 50, {}), raw_cos)
    assert asked == [["a", "b", "c"]] and [h.record.id for h in out] == ["c", "a", "b"]


def test_search_gives_the_reranker_the_unadapted_cosines_only_when_a_switch_changed_the_vector(service):
    for t in ["Caroline: I went to a LGBTQ support group yesterday and it was powerful.",
              "Melanie: We took the kids camping at the lake last weekend.",
              "Caroline: I am saving up to study counselling next year."]:
        service.write(t, ("eval", "c"), {"type": "conversation"}, now=NOW)
    question = "When did Caroline go to the support group?"
    ids = [r.id for r in service.list(("eval", "c"))]
    raw = service.embedder.embed_query(question)
    assert service._raw_cosines(question, raw, ids) is None  # no switch: the dense channel's cosines are these
    on = service.settings.scoring.model_copy(update={"query_adapter": True})
    service.settings = service.settings.model_copy(update={"scoring": on})
    vec, _ = service._candidates(question, (("eval", "c"),), None, 10, NOW)
    got = service._raw_cosines(question, vec, ids)
    stored = service.backend.get_vectors(ids)
    assert got is not None and list(got) == ids
    assert [got[i] for i in ids] == pytest.approx([float(v @ raw) for v in stored], abs=1e-6)
    assert [got[i] for i in ids] != pytest.approx([float(v @ vec) for v in stored], abs=1e-3)
