"""The notebooks execute headless on a small configuration, so they cannot rot; their plots are
inline images (``%matplotlib inline``), in the test run and in the committed, executed files
(``notebooks/execute.py`` regenerates them)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("name", ["evaluation.ipynb", "benchmark.ipynb"])
def test_notebook_executes(name, monkeypatch, tmp_path):
    monkeypatch.setenv("SMALL", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nb = nbformat.read(NB_DIR / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NB_DIR.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any(o.get("output_type") == "stream" for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs), "no inline plot"


@pytest.mark.parametrize("name", ["evaluation.ipynb", "benchmark.ipynb"])
def test_committed_notebooks_are_executed_with_inline_plots(name):
    nb = nbformat.read(NB_DIR / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "commit the notebook executed (notebooks/execute.py)"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2
    assert not any('matplotlib.use("Agg")' in c.source for c in code)
