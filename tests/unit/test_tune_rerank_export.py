"""memctl.tune_rerank.model_text: the file a fit writes evaluates exactly as the fitted scikit-learn model."""

from __future__ import annotations

import json

import numpy as np

import memctl.tune_rerank as tr
from memory.rerank import RerankModel


def test_model_text_round_trips_to_the_same_log_odds(tmp_path):
    width = tr.WIDTH_49
    rng = np.random.default_rng(0)
    queries = []
    for _ in range(40):
        x = rng.random((20, width))
        y = np.zeros(20, dtype=bool)
        y[rng.integers(20)] = True
        queries.append(tr.Query("zh_en", "en-en", x, y, 1))
    clf = tr.fit(queries, (3, 20, 0.1, 5))
    x = np.vstack([q.x for q in queries])
    model, text = tr.model_text(clf, {"grid_point": {"max_depth": 3}}, width, x)
    assert json.loads(text)["info"]["grid_point"] == {"max_depth": 3}
    path = tmp_path / "model.json"
    path.write_text(text, encoding="utf-8")
    loaded = RerankModel.load(path)
    assert np.allclose(loaded.log_odds(x), clf._raw_predict(x)[:, 0], atol=1e-9)
    assert len(loaded.trees) == len(model.trees) == 20
