"""The README's "Add memory to your own graph" block is meant to be pasted and run: run it as written.

A block that used undefined names (`model`, `tools`, `saver`) failed with NameError for every user who
copied it; this keeps the published example runnable (offline, scripted models, a real SQLite file).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _own_graph_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Add memory to your own graph", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README: the 'Add memory to your own graph' section lost its python block"
    return match.group(1)


def test_readme_own_graph_example_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_own_graph_block(), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("MEMORY_")}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "Q3 GMV grew 12%."
    # The first app's preference was written to the file the example names.
    assert (tmp_path / "memory.sqlite").exists()
