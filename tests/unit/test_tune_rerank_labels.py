"""memctl.tune_rerank's fitting labels: a restatement of an evidence turn counts as evidence (issue 16)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memctl.evaluation import Turn
from memctl.tune_rerank import (
    RESTATE_DICE, RESTATE_WEIGHT, WIDTH_49, Query, _task_file, _train_arrays, augment, dice, fit, fit_rows, narrow,
    out_of_set_many, ranks_of, restates, restatements, view,
)
from memory.errors import InvalidConfig

D1 = datetime(2025, 3, 3, 10, 15, tzinfo=UTC)
D2 = datetime(2025, 3, 9, 9, 0, tzinfo=UTC)


def _turn(dia_id: str, date: datetime, speaker: str, text: str) -> Turn:
    return Turn("c", dia_id, date, f"{speaker}: {text}", speaker)


def _turns() -> list[Turn]:
    return [
        _turn("D1:1", D1, "Mia", "our butter comes from the Deyang oil plant, Luo Jianguo handles the orders"),
        _turn("D1:2", D1, "assistant", "noted: butter supplier is the Deyang oil plant, contact Luo Jianguo"),
        # The assistant's turn followed by the user's reply about the same plant: not a restatement (an
        # assistant's turn never starts one).
        _turn("D1:3", D1, "Mia", "the Deyang plant also sells rapeseed oil, ask Luo Jianguo for a price"),
        _turn("D1:4", D1, "assistant", "sure, here is a short note for the customs broker"),
        # The next session opens with the same words as the assistant's last turn: another session.
        _turn("D2:1", D2, "Mia", "sure, a short note for the customs broker again"),
        _turn("D2:2", D2, "Liam", "the customs broker wants the note by Friday"),  # user after user: no
    ]


def test_the_assistants_turn_right_after_a_users_turn_restates_it_when_their_content_terms_overlap():
    ts = _turns()
    assert dice(ts[0].content, ts[1].content) >= RESTATE_DICE > dice(ts[2].content, ts[3].content)
    assert dice(ts[1].content, ts[2].content) >= RESTATE_DICE  # alike, but the assistant's turn comes first
    assert dice(ts[3].content, ts[4].content) >= 0.25  # alike, but D2 is another session
    assert dice(ts[4].content, ts[5].content) >= RESTATE_DICE  # alike, but both are users
    assert restatements(ts) == {"D1:1": "D1:2"}
    assert restatements(ts, threshold=0.0) == {"D1:1": "D1:2", "D1:3": "D1:4"}
    assert not restates(ts[1], ts[2], threshold=0.0) and not restates(ts[4], ts[5], threshold=0.0)
    # The speaker is read case-blind from the turn, not from the text's prefix.
    assert restates(ts[0], Turn("c", "D1:2", D1, ts[1].content, "Assistant"))
    assert not restates(ts[0], Turn("c", "D1:2", D1, ts[1].content, "Mia"))
    # The speaker prefix is not a content term: "Mia:" / "assistant:" alone overlap nothing.
    assert dice("Mia: ok", "Mia: fine") == 0.0


def test_two_people_talking_have_no_restatements():
    # LoCoMo: two people and no assistant, so no turn of theirs is labelled a restatement, however alike.
    ts = [_turn("D1:1", D1, "Caroline", "I went to the LGBTQ support group yesterday"),
          _turn("D1:2", D1, "Melanie", "the LGBTQ support group yesterday sounds great")]
    assert dice(ts[0].content, ts[1].content) >= 0.25 and restatements(ts, threshold=0.0) == {}


def test_a_cached_fit_names_the_restatement_rule_unless_it_reads_the_listed_evidence(monkeypatch, tmp_path):
    import memctl.tune_rerank as tr

    def name(labels: str) -> str:
        return _task_file(tmp_path, (0, (WIDTH_49, (5, 300, 0.05, 40), None, 1.0, labels),
                                     frozenset({"zh_en"}), ("zh_en_2",))).name

    before = {lab: name(lab) for lab in ("evidence", "restatement", "masked")}
    monkeypatch.setattr(tr, "RESTATE_DICE", tr.RESTATE_DICE + 0.1)
    after = {lab: name(lab) for lab in before}
    assert after["evidence"] == before["evidence"]
    assert after["restatement"] != before["restatement"] and after["masked"] != before["masked"]


def test_augment_adds_each_evidence_turns_restatement_only():
    restated = {"D1:1": "D1:2", "D3:4": "D3:5"}
    assert augment(("D1:1",), restated) == {"D1:1", "D1:2"}
    assert augment(("D1:2", "D2:7"), restated) == {"D1:2", "D2:7"}  # a restatement's own next turn is not added
    assert augment((), restated) == frozenset()


def _query() -> Query:
    x = np.arange(12, dtype=float).reshape(4, 3)
    y, y_aug = np.array([0.0, 1.0, 0.0, 0.0]), np.array([0.0, 1.0, 1.0, 0.0])
    return Query("zh_en", "en-en", x, y, 2, y_aug, 2)


def test_fit_rows_per_label_reading():
    q = _query()
    x, y = fit_rows(q, "evidence")
    assert y.tolist() == [0, 1, 0, 0] and len(x) == 4
    x, y = fit_rows(q, "restatement")
    assert y.tolist() == [0, 1, 1, 0] and len(x) == 4
    x, y = fit_rows(q, "masked")  # the restatement is left out: neither a positive nor a negative
    assert y.tolist() == [0, 1, 0] and x[:, 0].tolist() == [0, 3, 9]
    with pytest.raises(InvalidConfig, match="restatement"):
        fit_rows(q, "augmented")


def test_half_labels_weigh_a_restatement_below_the_listed_turn():
    q = _query()
    _, y, w = _train_arrays([q], labels="half")
    assert y.tolist() == [0, 1, 1, 0]
    # The positives' half (.5) split 1 : RESTATE_WEIGHT between the listed turn and its restatement.
    assert np.isclose(w[1] + w[2], 0.5) and np.isclose(w[2] / w[1], RESTATE_WEIGHT) and 0 < RESTATE_WEIGHT < 1
    assert np.isclose(w[0], 0.25) and np.isclose(w[3], 0.25)
    _, _, w_full = _train_arrays([q], labels="restatement")
    assert np.isclose(w_full[1], w_full[2])  # "restatement": both positives weigh the same


def test_view_scores_the_augmented_labels_and_the_ranks_follow():
    q = Query("zh_en", "en-en", np.zeros((4, 3)), np.array([0.0, 0.0, 1.0, 0.0]), 3,
              np.array([0.0, 1.0, 1.0, 0.0]), 2)
    sets = {"zh_en": [q]}
    z = {"zh_en": [np.array([0.9, 0.5, 0.1, 0.0])]}
    assert ranks_of(view(sets, "evidence"), z) == {"zh_en": [3]}
    assert ranks_of(view(sets, "restatement"), z) == {"zh_en": [2]}
    assert view(sets, "restatement")["zh_en"][0].base_rank == 2 and view(sets, "evidence") is sets
    # A query built without augmented labels reads the listed evidence under both.
    plain = Query("zh_en", "en-en", np.zeros((4, 3)), q.y, 3)
    assert plain.y_aug is plain.y and plain.base_aug == 3


def _synthetic() -> dict[str, list[Query]]:
    rng = np.random.default_rng(7)
    sets = {}
    for k in ("conv-26", "zh_en", "zh_en_2", "zh_en_3"):
        qs = []
        for _ in range(30):
            x = rng.normal(size=(10, 4))
            y = (np.arange(10) == int(np.argmax(x[:, 0]))).astype(float)  # the evidence: highest first feature
            y_aug = y.copy()
            y_aug[int(np.argsort(x[:, 0])[-2])] = 1.0  # and a "restatement": the second highest
            qs.append(Query(k, "en-en", x, y, 1, y_aug, 1))
        sets[k] = qs
    return sets


def test_out_of_set_fits_never_see_the_held_set_and_are_the_same_in_worker_processes():
    sets = _synthetic()
    point = (2, 10, 0.3, 5)
    configs = [(4, point, None, 1.0, "restatement"), (3, point, ("conv-26", "zh_en"), 1.0, "masked")]
    one = out_of_set_many(sets, configs, jobs=1)
    assert [list(o) for o in one] == [list(sets)] * 2
    # Fitted on the restatement labels, out of set: a labelled turn (the two highest first features) comes first.
    ranks = ranks_of(view(sets, "restatement"), one[0])
    assert all(np.mean([r == 1 for r in rs]) > 0.8 for rs in ranks.values())
    # train_on: zh_en_2 and zh_en_3 were never fitted on, so both are ranked by one fit on conv-26 + zh_en,
    # and conv-26 by a fit on zh_en alone, not on itself.
    three = narrow(sets, 3)
    both = fit([*three["conv-26"], *three["zh_en"]], point, 1.0, "masked")
    alone = fit(three["zh_en"], point, 1.0, "masked")
    for k, clf in (("zh_en_2", both), ("zh_en_3", both), ("conv-26", alone)):
        for q, z in zip(sets[k], one[1][k], strict=True):
            assert np.array_equal(z, clf._raw_predict(q.x[:, :3])[:, 0])
    # Worker processes (spawned) give the same scores.
    two = out_of_set_many(sets, configs[1:], jobs=2)[0]
    for k in sets:
        assert all(np.array_equal(u, v) for u, v in zip(one[1][k], two[k], strict=True))
