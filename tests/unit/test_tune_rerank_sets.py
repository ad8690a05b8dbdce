"""memctl.tune_rerank's fitting sets: zh_en ... zh_en_18 and the LoCoMo tuning half, never a held-out set."""

from __future__ import annotations

from memctl.tune_rerank import LOCOMO_TUNE, ZH_DIRS, ZH_NAMES

HELD_OUT_LOCOMO = ("conv-44", "conv-47", "conv-48", "conv-49", "conv-50")  # README: scored only as totals
HELD_OUT_ZH = ("zh_en_19",)  # the lead scores it once (zh_en_18 became a fitting set at stop 36)


def test_fitting_sets_are_zh_en_to_zh_en_18_and_exist():
    assert ZH_NAMES == ("zh_en", *(f"zh_en_{i}" for i in range(2, 19)))
    for name, d in ZH_DIRS.items():
        assert (d / "turns.jsonl").is_file() and (d / "questions.jsonl").is_file(), name


def test_no_held_out_set_is_a_fitting_set():
    assert not set(HELD_OUT_ZH) & set(ZH_NAMES) and not set(HELD_OUT_LOCOMO) & set(LOCOMO_TUNE)
