"""memory.rerank's script group (stop 34): each candidate's cosine read within its own script and against the question's."""

from __future__ import annotations

import numpy as np

from memory.query import plan_query
from memory import rerank
from memory.rerank import (
    _SCR, _SUP, FEATURES, SCRIPT_FEATURES, SCRIPT_NO_BRIDGE, RerankModel, apply, candidate_features, script_matrix,
)
from memory.rerank_context import ABSENT
from tests.unit.test_rerank import NOW, col, hit


def _hits():
    # An English question; two English turns and two Chinese ones, the Chinese ones lifted above the better English
    # cosine (as an imputed keyword part lifts them).
    return [hit("zh1", "我们的期中演示推迟到第九周周二了", 0.9, vector=0.20),
            hit("zh2", "成绩构成：期末项目占六成，期中演示两成", 0.8, vector=0.28),
            hit("en1", "Midterm demo went fine, we got 17 out of 20.", 0.7, vector=0.45),
            hit("en2", "The final project is due in week 16.", 0.6, vector=0.30)]


def test_the_group_reads_each_cosine_within_its_script_and_against_the_questions_script():
    assert FEATURES[_SUP:_SCR] == SCRIPT_FEATURES and _SUP == 49
    plan = plan_query("How many points did we get for the midterm presentation?", NOW)
    x = candidate_features(_hits(), plan, {}, width=_SUP + SCRIPT_NO_BRIDGE)
    assert x.shape == (4, _SUP + SCRIPT_NO_BRIDGE)
    assert list(col(x, "script_vec_rank")) == [1, 0, 0, 1]  # zh1 below zh2; en1 above en2
    assert np.allclose(col(x, "script_vec_gap"), [0.08, 0.0, 0.0, 0.15])
    assert np.allclose(col(x, "qscript_vec_gap"), [0.25, 0.17, 0.0, 0.15])  # against en1, the best English cosine
    assert np.allclose(col(x, "qscript_share"), 0.5)
    # A Chinese question reads the same turns against the best Chinese cosine (zh2's).
    y = candidate_features(_hits(), plan_query("期中演示我们拿了多少分?", NOW), {}, width=_SUP + SCRIPT_NO_BRIDGE)
    assert np.allclose(col(y, "qscript_vec_gap"), [0.08, 0.0, -0.17, -0.02])
    # No candidate in the question's script: the gap is ABSENT.
    only_zh = script_matrix(np.array([0.2, 0.3]), np.array([1.0, 1.0]), 0.0)
    assert (only_zh[:, 2] == ABSENT).all() and (only_zh[:, 3] == 0.0).all()


def test_a_model_reading_the_group_reorders_without_fetching_vectors_and_the_shipped_prefix_skips_it():
    plan = plan_query("How many points did we get for the midterm presentation?", NOW)
    hits = _hits()
    assert candidate_features(hits, plan, {}, width=_SUP).shape == (4, _SUP)
    calls: list[int] = []

    def fetch(head):
        calls.append(len(head))
        return None
    # One split: a turn within .1 of the best cosine in the question's script goes first.
    tree = np.array([[FEATURES.index("qscript_vec_gap"), 0.1, 1, 2, 0.0], [-1, 0, 0, 0, 1.0], [-1, 0, 0, 0, -1.0]])
    out = apply(hits, plan, {}, RerankModel(FEATURES[:_SCR], 0.0, (tree,), 50, {}), vectors=fetch)
    assert [h.record.id for h in out][0] == "en1" and calls == []  # the group needs no stored vector


def test_bridge_cov_reads_the_lexicon_only_for_a_model_that_reads_it(monkeypatch):
    plan = plan_query("What did Tariq ask about his air conditioner?", NOW)
    hits = [hit("zh", "他暑假不回国，问了住宿安排和空调的事。", 0.9, vector=0.40),
            hit("zh2", "然后暑假电费留校的学生免费额度提到20度", 0.8, vector=0.20),
            hit("en", "Dear Tariq, a technician will come to room 512 tomorrow.", 0.7, vector=0.36)]
    x = candidate_features(hits, plan, {}, width=_SCR)
    cov = col(x, "bridge_cov")
    assert cov[0] > cov[1] and cov[0] > 0 and cov[2] == 0  # 空调 = air conditioner; the English turn is not looked in

    def boom(*_a, **_k):
        raise AssertionError("looked up")
    monkeypatch.setattr(rerank, "bridge_coverage", boom)
    assert candidate_features(hits, plan, {}, width=_SUP + SCRIPT_NO_BRIDGE).shape == (3, _SUP + SCRIPT_NO_BRIDGE)
