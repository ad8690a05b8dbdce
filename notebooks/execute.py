"""Execute the notebooks in place on the small configuration (what is committed).

    .venv/bin/python notebooks/execute.py [name.ipynb ...]

``SMALL=1`` (one LoCoMo conversation per split, 40 dedupe pairs, tiny benchmark sizes), offline,
plots inline (``%matplotlib inline``: the PNGs are saved in the notebook). Unset ``SMALL`` in a
notebook's environment for the full figures the README and MEASUREMENTS.md quote.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NB_DIR = Path(__file__).resolve().parent


def execute(name: str) -> None:
    os.environ.update(SMALL="1", HF_HUB_OFFLINE="1")
    os.environ.pop("MPLBACKEND", None)
    os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="nb-")
    path = NB_DIR / name
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(NB_DIR.parent)}}).execute()
    nbformat.write(nb, path)
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    print(f"{name}: executed, {images} inline image(s)")


if __name__ == "__main__":
    for n in sys.argv[1:] or ["evaluation.ipynb", "benchmark.ipynb"]:
        execute(n)
