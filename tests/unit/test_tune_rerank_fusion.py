"""memctl.tune_rerank's fusion candidates (stop 35): a candidate's ScoringSettings overrides rank its sets before they
are featurised, name its cached fits, and a model file fitted on one names it, which search must then fuse with."""

from __future__ import annotations

import json

import pytest

import memctl.tune_rerank as tr
from memory.errors import InvalidConfig
from memory.rerank import MODEL_FILE
from memory.settings import ScoringSettings


def test_every_candidate_names_a_valid_fusion():
    for name, width, labels, fusion in tr.CANDIDATES:
        cfg = tr.scoring_settings(fusion)
        assert all(getattr(cfg, k) == v for k, v in fusion.items()), name
        assert labels in tr.LABELS and 0 < width <= len(tr.FEATURES)
    assert tr.scoring_settings(None) == tr.scoring_settings({}) == ScoringSettings()
    with pytest.raises(InvalidConfig, match="ScoringSettings"):
        tr.scoring_settings({"bridge_bonsu": 1.0})
    with pytest.raises(InvalidConfig, match="ScoringSettings"):
        tr.scoring_settings({"bridge_bonus": -1.0})


def test_a_fusion_names_its_fits_and_the_default_keeps_the_old_names(tmp_path):
    task = (0, (tr.WIDTH_49, tr.GRID[0], None, 1.0, "evidence"), frozenset({"zh_en", "conv-26"}), ("zh_en_2",))
    plain = tr._task_file(tmp_path, task)
    assert tr._task_file(tmp_path, task, {}) == tr._task_file(tmp_path, task, None) == plain
    one, two = tr._task_file(tmp_path, task, {"bridge_bonus": 1.0}), tr._task_file(tmp_path, task, {"bridge_bonus": 1.5})
    assert len({plain, one, two}) == 3


def test_the_shipped_model_was_fitted_on_the_fusion_search_uses():
    # The reranker reads the fused order and score: a model fitted on another fusion than the settings' defaults
    # would be read on features it never saw.
    info = json.loads(MODEL_FILE.read_text(encoding="utf-8"))["info"]
    assert tr.scoring_settings(info.get("fusion")) == ScoringSettings()
