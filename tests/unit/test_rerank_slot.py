"""memory.rerank_supersede's same-slot group (SLOT_FEATURES, stop 32): a later candidate whose stored vector is alike
and whose values differ states the same slot with another value, also across Chinese and English."""

from __future__ import annotations

import numpy as np
import pytest

from memory.query import plan_query
from memory.rerank import _CHG, _SLOT, FEATURES, candidate_features
from memory.rerank_supersede import (
    SLOT_COS, SLOT_FEATURES, slot_matrix, slot_pairs, slot_values, values_differ,
)
from tests.unit.test_rerank import DAY1, DAY2, NOW, col, hit, vector_group_order

OLD_ZH = "周敏: 押金是200元，到店抵扣"
NEW_EN = "Zhou Min: the deposit is now 300 yuan, deducted on arrival"  # cosine .57 with OLD_ZH
SAME_EN = "Zhou Min: the deposit is 200 yuan, deducted on arrival"
OTHER = "Zhou Min: we went camping with the kids, it was lovely"


def test_values_are_read_across_languages_and_numerals():
    assert slot_values("押金是两百元") == slot_values("the deposit is 200 yuan") == {("currency", "cny"), ("num", "200")}
    assert slot_values("会议改到周四") == slot_values("meeting moved to Thursday") == {("weekday", "thu")}
    assert slot_values("周敏: 押金是200元") == slot_values("押金是200元")  # the speaker's name is no value


def test_values_differ_needs_values_on_both_sides_and_another_value():
    a, b, none = slot_values(OLD_ZH), slot_values(NEW_EN), slot_values(OTHER)
    assert values_differ(a, b) and values_differ(b, a)
    assert not values_differ(a, slot_values(SAME_EN))  # a restatement in the other language
    assert not values_differ(a, none) and not values_differ(none, none)
    # No class in common (a weekday against an amount) reads as differing values.
    assert values_differ(slot_values("meeting on Thursday"), slot_values("meeting costs 300 yuan"))


@pytest.fixture(scope="module")
def vectors(embedder):
    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    return embed


def test_a_newer_english_value_pairs_with_the_older_chinese_statement(vectors):
    texts = [OLD_ZH, NEW_EN, SAME_EN, OTHER]
    v = vectors(texts)
    day1, day2 = DAY1.timestamp(), DAY2.timestamp()
    cos, pair = slot_pairs(v, texts, [day1, day2, day2, day2])
    assert cos[0, 1] == pytest.approx(float(v[0] @ v[1]), rel=1e-5) and cos[0, 1] >= SLOT_COS
    assert pair[0, 1] and not pair[1, 0]  # only the later one supersedes
    assert not pair[0, 2] and cos[0, 2] == -1.0  # the same value restated
    assert not pair[:, 3].any() and not pair[3].any()  # no value stated
    # Written together (one session), the two carry no order.
    assert not slot_pairs(v, texts, [day1, day1, day1, day1])[1].any()


def test_slot_matrix_columns_and_no_vectors(vectors):
    hits = [hit("a", OLD_ZH, 0.9, vector=0.8), hit("b", NEW_EN, 0.6, vector=0.5, created=DAY2),
            hit("c", OTHER, 0.5, vector=0.2, created=DAY2)]
    stamps = [h.record.created_at.timestamp() for h in hits]
    x = slot_matrix(vectors([h.record.content for h in hits]), hits, stamps)
    assert x.shape == (3, len(SLOT_FEATURES))
    assert x[0, 0] >= SLOT_COS and x[1, 0] == x[2, 0] == -1.0  # slot_cos
    assert list(x[:, 1]) == [1, 0, 0] and list(x[:, 2]) == [0, 1, 0]  # slot_newer, slot_older
    assert x[0, 3] == pytest.approx(0.3) and x[1, 3] == x[2, 3] == 2.0  # slot_gap (ABSENT when no pair)
    assert (slot_matrix(None, hits, stamps) == [[-1.0, 0.0, 0.0, 2.0]] * 3).all()


def test_the_group_follows_the_change_one_and_the_shipped_prefix_never_fetches_vectors(vectors):
    assert FEATURES[_CHG:_SLOT] == SLOT_FEATURES  # the change group (stop 33) sits between the superseded one and it
    hits = [hit("a", OLD_ZH, 0.9, vector=0.8), hit("b", NEW_EN, 0.6, vector=0.5, created=DAY2)]
    plan = plan_query("押金现在是多少？", NOW)
    v = vectors([h.record.content for h in hits])
    x = candidate_features(hits, plan, {}, width=_SLOT, vectors=v)
    assert x.shape == (2, _SLOT) and list(col(x, "slot_newer")) == [1, 0]
    # A model reading the group ranks by it: a one-split tree on slot_newer puts the newer value first.
    assert vector_group_order(hits, plan, v, "slot_newer", _SLOT) == ["b", "a"]


def test_search_reads_stored_vectors_once_per_version(service, monkeypatch):
    from memory.service import NewMemory

    old, new = service.write_many([NewMemory(OLD_ZH, "user_profile/u1", created_at=DAY1),
                                   NewMemory(NEW_EN, "user_profile/u1", created_at=DAY2)])
    stored = service.backend.get_vectors([old.id, new.id])
    calls = []
    inner = service.backend.get_vectors
    monkeypatch.setattr(service.backend, "get_vectors", lambda ids: calls.append(list(ids)) or inner(ids))
    hits = service.search("deposit", "user_profile/u1", now=NOW)
    assert {h.record.id for h in hits} == {old.id, new.id}
    got = service._stored_vectors(hits)
    assert np.array_equal(got, stored[[0 if h.record.id == old.id else 1 for h in hits]])
    n = len(calls)
    service._stored_vectors(hits)
    assert len(calls) == n  # the second read is served from the cache
    updated = service.update(new.id, content="Zhou Min: the deposit is now 350 yuan", now=NOW)
    again = service._stored_vectors([h if h.record.id != new.id else type(h)(updated, h.breakdown) for h in hits])
    assert calls[-1] == [new.id] and not np.array_equal(again, got)  # a new version is fetched again
    # A memory deleted between the search and the fetch: no vectors, the reranker reads "no pair".
    (gone,) = service.write_many([NewMemory(OTHER, "user_profile/u1", created_at=DAY2)])
    service.delete(gone.id)
    assert service._stored_vectors([hits[0], type(hits[0])(gone, hits[0].breakdown)]) is None
