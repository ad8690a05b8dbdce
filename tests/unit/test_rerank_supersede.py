"""memory.rerank_supersede: does a newer candidate state the same slot, does a turn echo the one before it."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memory.query import plan_query
from memory.records import MemoryMetadata, MemoryRecord, ScoreBreakdown, SearchHit
from memory.rerank import FEATURES, candidate_features
from memory.rerank_supersede import ABSENT, asks_before

NOW = datetime(2025, 7, 1, tzinfo=UTC)
MARCH = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
APRIL = datetime(2025, 4, 21, 9, 0, tzinfo=UTC)


def hit(rid: str, content: str, score: float, *, created: datetime, vector: float = 0.5,
        context: str | None = None) -> SearchHit:
    extra = {"context": context} if context else {}
    rec = MemoryRecord(id=rid, namespace=("eval", "c"), content=content, created_at=created, updated_at=created,
                       metadata=MemoryMetadata(type="conversation", extra=extra))
    return SearchHit(rec, ScoreBreakdown(sim=score, vector=vector, keyword=0.0, decay=1.0, boost=0.0, score=score,
                                         query=0.0))


def col(x: np.ndarray, name: str) -> np.ndarray:
    return x[:, FEATURES.index(name)]


OLD = "Zhou Min: The implant consultation deposit is 200 yuan, deducted from the fee on arrival."
NEW = "Zhou Min: Update: the implant consultation deposit is now 300 yuan, still deducted from the fee."
ECHO = "Assistant: Noted, the implant consultation deposit is now 300 yuan, still deducted from the fee."
OTHER = "Zhou Min: Reminder texts go out one day before the appointment."


def test_an_older_statement_of_the_slot_knows_a_newer_one_exists():
    hits = [hit("old", OLD, 0.9, created=MARCH, vector=0.7), hit("new", NEW, 0.6, created=APRIL, vector=0.5),
            hit("other", OTHER, 0.4, created=APRIL)]
    x = candidate_features(hits, plan_query("How much is the implant consultation deposit?", NOW), {})
    # The old statement has a near-duplicate written seven weeks later; the update and the unrelated turn have none.
    assert col(x, "sup_dice")[0] >= 0.25 and list(col(x, "sup_dice")[1:]) == [0.0, 0.0]
    assert list(col(x, "sup_newer")) == [1.0, 0.0, 0.0] and list(col(x, "sup_older")) == [0.0, 1.0, 0.0]
    assert col(x, "sub_dice")[1] == pytest.approx(col(x, "sup_dice")[0])  # the update supersedes the old one
    assert col(x, "sup_gap")[0] == pytest.approx(0.3) and col(x, "sup_vec_gap")[0] == pytest.approx(0.2)
    assert col(x, "sup_gap")[1] == ABSENT and col(x, "sup_age")[1] == -1.0
    assert col(x, "sup_age")[0] == pytest.approx(1.0)  # the whole span of the candidates
    assert list(col(x, "dup_recency")) == [1.0, 0.0, -1.0]  # 1: every near-duplicate is newer; -1: none


def test_the_same_session_carries_no_order_and_a_speaker_prefix_is_no_overlap():
    # Written the same morning: not "newer" (one session); two turns of one speaker share only the prefix.
    hits = [hit("old", OLD, 0.9, created=APRIL), hit("new", NEW, 0.6, created=APRIL),
            hit("a", "Zhou Min: We close at nine.", 0.5, created=MARCH),
            hit("b", "Zhou Min: The parking lot is full.", 0.4, created=APRIL)]
    x = candidate_features(hits, plan_query("How much is the deposit?", NOW), {})
    assert list(col(x, "sup_newer")) == [0.0] * 4 and list(col(x, "sup_older")) == [0.0] * 4
    assert col(x, "sup_dice")[2] == 0.0  # "Zhou Min" alone does not make two turns alike


def test_an_echo_of_the_turn_before_is_marked_on_both():
    hits = [hit("echo", ECHO, 0.9, created=APRIL, context=NEW), hit("new", NEW, 0.8, created=APRIL),
            hit("other", OTHER, 0.5, created=APRIL, context=ECHO)]
    x = candidate_features(hits, plan_query("How much is the implant deposit now?", NOW), {})
    assert col(x, "echo_prev")[0] > 0.5 and col(x, "echo_next")[1] == pytest.approx(col(x, "echo_prev")[0])
    assert col(x, "echo_prev")[1] == 0.0 and col(x, "echo_next")[0] < 0.2  # OTHER repeats nothing of it


def test_past_questions_in_words_the_originally_rule_does_not_read():
    assert asks_before("What was the deposit before the change in April?") == 1.0
    assert asks_before("首班船最开始几点开?") == 1.0 and asks_before("当时押金是多少?") == 1.0
    assert asks_before("How much is the deposit now?") == 0.0 and asks_before("押金现在多少?") == 0.0


def test_a_model_reading_the_first_38_features_computes_no_superseded_ones():
    hits = [hit("old", OLD, 0.9, created=MARCH), hit("new", NEW, 0.6, created=APRIL)]
    plan = plan_query("How much is the deposit?", NOW)
    full = candidate_features(hits, plan, {})
    short = candidate_features(hits, plan, {}, width=FEATURES.index("sup_dice"))
    assert short.shape == (2, 38) and np.array_equal(short, full[:, :38])
