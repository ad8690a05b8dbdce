"""memory.rerank_supersede's change group (CHANGE_FEATURES, stop 33): does a later candidate announce a change to
this one's slot? The old value of a slot was the default's most common rank-1 turn where dense-only ranked a listed
turn first (scripts/rank1_diag.py)."""

from __future__ import annotations

import numpy as np
import pytest

from memory.query import plan_query
from memory.rerank import _CHG, _SCR, _SUP, FEATURES, candidate_features
from memory.rerank_context import ABSENT
from memory.rerank_supersede import CHANGE_FEATURES, change_matrix, says_change
from tests.unit.test_rerank import DAY2, NOW, col, hit, vector_group_order

OLD_EN = "Zhou Hao: The TA is Wang Ting. Her office hours are Wednesday afternoons, 2 to 4, in room 217."
NEW_EN = "Zhou Hao: Oh and Wang Ting moved her office hours to Friday mornings, 9 to 11, same room."
OLD_ZH = "Xu Man: 我们每周五下午四点开语音例会，用飞书。"
NEW_ZH = "Xu Man: 例会时间改了，周五下午大家都在跑客户，改到周四晚上九点，还是飞书。"
OTHER = "Zhou Hao: we went camping with the kids, it was lovely"


def test_says_change_reads_both_languages_and_not_the_speaker_name():
    assert says_change(NEW_EN) == says_change(NEW_ZH) == 1.0
    assert says_change("assistant: Updated: the rent is now due on the 1st") == 1.0
    assert says_change(OLD_EN) == says_change(OLD_ZH) == says_change(OTHER) == 0.0
    # A speaker whose name is a cue word states nothing changed.
    assert says_change("Changed: we went camping with the kids") == 0.0


@pytest.fixture(scope="module")
def vectors(embedder):
    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    return embed


def _hits() -> list:
    return [hit("old", OLD_EN, 0.9, vector=0.8), hit("new", NEW_EN, 0.6, vector=0.5, created=DAY2),
            hit("other", OTHER, 0.5, vector=0.2, created=DAY2), hit("same", NEW_ZH, 0.4, vector=0.1)]


def test_change_matrix_columns(vectors):
    hits = _hits()
    stamps = [h.record.created_at.timestamp() for h in hits]
    v = vectors([h.record.content for h in hits])
    x = change_matrix(v, hits, stamps)
    assert x.shape == (4, len(CHANGE_FEATURES))
    assert list(x[:, 0]) == [0.0, 1.0, 0.0, 1.0]  # says_change
    # The old statement: the later update is its only later change (the Chinese update was written with it, DAY1).
    assert x[0, 1] > 0.2 and x[0, 2] == pytest.approx(float(v[0] @ v[1]), rel=1e-5) and x[0, 3] == pytest.approx(0.3)
    assert x[3, 2] == pytest.approx(float(v[3] @ v[1]), rel=1e-5)  # the same-day Chinese turn: the English update
    # Nothing later announces a change to the DAY2 turns.
    assert list(x[1]) == [1.0, 0.0, -1.0, ABSENT] and list(x[2]) == [0.0, 0.0, -1.0, ABSENT]
    # Without vectors: no cosine; the gap follows the most alike by terms.
    y = change_matrix(None, hits, stamps)
    assert (y[:, [0, 1, 3]] == x[:, [0, 1, 3]]).all() and (y[:, 2] == -1.0).all()


def test_the_group_follows_the_superseded_one_and_the_shipped_prefix_neither_computes_nor_fetches_it(vectors):
    assert FEATURES[_SCR:_CHG] == CHANGE_FEATURES and _SUP == 49  # the script group (stop 34) sits between them
    hits = _hits()[:2]
    plan = plan_query("When can I catch Wang Ting for office hours?", NOW)
    v = vectors([h.record.content for h in hits])
    assert candidate_features(hits, plan, {}, width=_SUP, vectors=v).shape == (2, _SUP)
    x = candidate_features(hits, plan, {}, width=_CHG, vectors=v)
    assert list(col(x, "says_change")) == [0.0, 1.0] and col(x, "change_cos")[0] > 0.5
    # A model reading the group ranks by it: a one-split tree on change_cos puts the update first.
    assert vector_group_order(hits, plan, v, "change_cos", _CHG) == ["new", "old"]
