"""The vectorised reranker (stop 30) reproduces the row-by-row features and tree walk bit for bit.

Search latency work must not move a single ranking: every feature column, the log-odds and the
order :func:`memory.rerank.apply` gives are compared exactly (``==``, not approx) with the code they
replaced (:mod:`tests.unit.rerank_reference`) on random candidate lists that exercise every branch:
Chinese and English texts, speakers named or not, shared sessions with retrieval contexts that hold
the turn before, ties in every ranked column, keyword scores missing, date windows, "now" questions.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory.query import plan_query
from memory.records import MemoryMetadata, MemoryRecord, ScoreBreakdown, SearchHit
from memory.rerank import (
    _CHG, _OWN, _SCR, _SLOT, _SUP, FEATURES, SCRIPT_NO_BRIDGE, VECTOR_FEATURES, RerankModel, apply, candidate_features,
    default_model,
)
from memory.rerank_supersede import supersede_matrix
from tests.unit import rerank_reference as ref

NOW = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
SPEAKERS = ("Caroline", "Melanie", "周敏", None)
EN = ("the ferry ticket price for adults is 198 yuan", "ferry ticket is now 215", "I painted a sunset for the shelter",
      "we went camping last weekend with the kids", "What pet do you have?", "report amounts in yuan from now on",
      "the deposit is 200 yuan, deducted on arrival", "Update: the deposit is now 300 yuan")
ZH = ("以后报表里的金额都用万元为单位", "渡轮成人票价现在是215元", "上周我们去露营了", "押金是200元，到店抵扣",
      "押金现在改成300元了", "你养了什么宠物？")
QUESTIONS = ("What is the ferry ticket price now?", "When did Caroline paint the sunset?", "押金现在是多少？",
             "What did Melanie do in June 2023?", "报表金额用什么单位", "what pet", "How much was the deposit before?")


def _hits(rng: random.Random, n: int) -> tuple[list[SearchHit], dict[str, float | None]]:
    sessions = [NOW - timedelta(days=rng.choice((1, 3, 30, 90)), seconds=rng.choice((0, 0, 10))) for _ in range(6)]
    texts: list[str] = []
    hits, bm25 = [], {}
    for i in range(n):
        speaker = rng.choice(SPEAKERS)
        body = rng.choice(EN + ZH) + ("" if rng.random() < .6 else f" {rng.choice(EN + ZH)}")
        content = f"{speaker}: {body}" if speaker else body
        extra: dict[str, str] = {"speaker": speaker} if speaker else {}
        if texts and rng.random() < .4:  # its retrieval context holds an earlier candidate's turn
            extra["context"] = rng.choice(texts)
        texts.append(content)
        created = rng.choice(sessions)
        rec = MemoryRecord(id=f"m{i}", namespace=("eval", "c"), content=content, created_at=created,
                           updated_at=created, metadata=MemoryMetadata(type="conversation", extra=extra))
        # Coarse values, so every ranked column has ties.
        score, vector = rng.choice((0.2, 0.5, 0.5, 0.8, 0.0)), rng.choice((0.0, 0.3, 0.3, 0.9))
        hits.append(SearchHit(rec, ScoreBreakdown(sim=score, vector=vector, keyword=rng.choice((0.0, 0.4)),
                                                  decay=rng.random(), boost=0.0, score=score + rng.choice((0, .1)),
                                                  query=rng.choice((0.0, 0.0, -0.05, 0.3)))))
        if rng.random() < .6:
            bm25[rec.id] = rng.choice((None, 0.0, 1.5, 3.0, 3.0))
    hits.sort(key=lambda h: -h.breakdown.score)
    return hits, bm25


@pytest.mark.parametrize("seed", range(12))
def test_features_log_odds_and_order_equal_the_row_by_row_code(seed):
    rng = random.Random(seed)
    model = default_model()
    for n in (2, 7, 50, 60):
        hits, bm25 = _hits(rng, n)
        plan = plan_query(rng.choice(QUESTIONS), NOW)
        head = hits[:model.depth]
        for width in (_OWN, _SUP, _SUP + SCRIPT_NO_BRIDGE, _SCR, _CHG, _SLOT, None):
            got, want = candidate_features(head, plan, bm25, hits, width), ref.features(head, plan, bm25, hits, width)
            # The switch group (stop 31) is not in the reference: tests/unit/test_rerank_switch.py.
            names = [f for f in FEATURES[:width] if f not in VECTOR_FEATURES]
            got = got[:, [FEATURES.index(f) for f in names]]
            assert got.shape == want.shape == (len(head), len(names))
            mismatch = [names[c] for c in range(got.shape[1]) if not np.array_equal(got[:, c], want[:, c])]
            assert not mismatch, f"seed {seed}, n {n}: columns differ: {mismatch}"
        x = candidate_features(head, plan, bm25, hits, len(model.features))
        assert np.array_equal(model.log_odds(x), ref.log_odds(model, x))
        out = apply(hits, plan, bm25, model)
        z = ref.log_odds(model, ref.features(head, plan, bm25, hits, len(model.features)))
        assert [h.record.id for h in out[:len(head)]] == [head[i].record.id for i in
                                                         sorted(range(len(head)), key=lambda i: (-z[i], i))]


def test_supersede_rows_equal_the_reference_with_echoes():
    rng = random.Random(99)
    hits, _ = _hits(rng, 40)
    stamps = [h.record.created_at.timestamp() for h in hits]
    before = [[j for j in range(i) if rng.random() < .1] for i in range(len(hits))]
    rows = [tuple(r) for r in supersede_matrix(hits, "what was it before?", stamps, before).tolist()]
    assert rows == \
        ref.supersede_rows(hits, "what was it before?", stamps, before)


def test_a_deeper_unbalanced_forest_walks_like_the_json_trees():
    # Trees of depth 1 to 4 padded to one depth, thresholds on ties and on +-0: walked like the JSON.
    rng = random.Random(5)
    trees = []
    for depth in (1, 2, 3, 4, 0):
        nodes: list[list[float]] = []

        def grow(d: int) -> int:
            i = len(nodes)
            nodes.append([-1, 0, 0, 0, round(rng.uniform(-1, 1), 3)])
            if d > 0 and rng.random() < .85:
                f = rng.randrange(len(FEATURES))
                nodes[i][:2] = [f, rng.choice((0.0, -0.0, 0.3, 0.5, 1.0, 2.0))]
                left = grow(d - 1)
                nodes[i][2], nodes[i][3] = left, grow(d - 1)
            return i
        grow(depth)
        trees.append(np.array(nodes, dtype=float))
    model = RerankModel(FEATURES, 0.25, tuple(trees), 50, {})
    hits, bm25 = _hits(rng, 30)
    x = candidate_features(hits, plan_query("ferry ticket now", NOW), bm25)
    for rows in (x, x[:1], x[:2]):
        assert np.array_equal(model.log_odds(rows), ref.log_odds(model, rows))


def test_a_forest_of_single_leaves_and_one_row_walk_like_the_json_trees():
    # Depth 0 (no split anywhere: the walk takes no step) and a single row: the index arithmetic's edges.
    rng = random.Random(8)
    hits, bm25 = _hits(rng, 12)
    x = candidate_features(hits, plan_query("what pet", NOW), bm25)
    leaves = RerankModel(FEATURES, -0.5, tuple(np.array([[-1, 0, 0, 0, v]], dtype=float) for v in (0.1, -0.3, 0.7)),
                         50, {})
    shipped = default_model()
    for model in (leaves, shipped):
        for rows in (x, x[:1]):
            assert np.array_equal(model.log_odds(rows), ref.log_odds(model, rows))
    assert np.array_equal(leaves.log_odds(x), np.full(len(x), -0.5 + (0.1 - 0.3 + 0.7)))
