"""Run LangGraph's own store test files against ``MemoryStore`` (a developer check, not in CI).

    .venv/bin/python tests/langgraph_store/run.py            # prints pass counts per file
    .venv/bin/python tests/langgraph_store/run.py -- -k embed  # extra pytest arguments after --

The files are LangGraph's (MIT, LangChain, Inc.), taken from the PyPI sdists of the versions
installed here (``langgraph-checkpoint``, ``langgraph-checkpoint-sqlite``), so tests and library
match; they are unpacked under ``.cache/langgraph-store-tests/`` and never committed. One line per
file is changed: the import of the store they build (``InMemoryStore``, ``SqliteStore``,
``AsyncSqliteStore``) becomes the same name from ``shim.py``, which builds a ``MemoryStore``
through its public constructors (``MemoryStore(path=":memory:", index=...)``,
``MemoryStore.from_conn_string``). Test bodies are not touched. Needs ``pytest-asyncio`` and
``pytest-mock`` (installed on first run).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache" / "langgraph-store-tests"
SUITES = {
    # package: (files, import line replaced, replacement)
    "langgraph-checkpoint": (
        ["__init__.py", "embed_test_utils.py", "test_store.py"],
        {"test_store.py": ("from langgraph.store.memory import InMemoryStore", "from shim import InMemoryStore")},
    ),
    "langgraph-checkpoint-sqlite": (
        ["__init__.py", "test_store.py", "test_async_store.py"],
        {"test_store.py": ("from langgraph.store.sqlite import SqliteStore", "from shim import SqliteStore"),
         "test_async_store.py": ("from langgraph.store.sqlite import AsyncSqliteStore",
                                 "from shim import AsyncSqliteStore")},
    ),
}


def _sdist(package: str) -> Path:
    version = md.version(package)
    dest = CACHE / "sdist"
    dest.mkdir(parents=True, exist_ok=True)
    stem = f"{package.replace('-', '_')}-{version}"
    tar = dest / f"{stem}.tar.gz"
    if not tar.exists():
        subprocess.run(["python3", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(dest),
                        f"{package}=={version}"], check=True)
    out = dest / stem
    if not out.exists():
        with tarfile.open(tar) as t:
            t.extractall(dest, filter="data")
    return out


def prepare(package: str) -> Path:
    files, edits = SUITES[package]
    src = _sdist(package)
    suite = CACHE / package
    if suite.exists():
        shutil.rmtree(suite)
    (suite / "tests").mkdir(parents=True)
    for name in files:
        text = (src / "tests" / name).read_text()
        if name in edits:
            old, new = edits[name]
            text, n = re.subn(rf"^{re.escape(old)}$", new, text, flags=re.M)
            assert n == 1, f"{package}/{name}: the store import line changed upstream; update run.py"
        (suite / "tests" / name).write_text(text)
    shutil.copy(src / "LICENSE", suite / "LICENSE")
    shutil.copy(HERE / "shim.py", suite / "shim.py")
    (suite / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
                                      "addopts = -p no:cacheprovider\n")
    return suite


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    try:
        import pytest_asyncio  # noqa: F401
        import pytest_mock  # noqa: F401
    except ImportError:
        subprocess.run(["python3", "-m", "uv", "pip", "install", "-q", "--python", sys.executable,
                        "pytest-asyncio", "pytest-mock"], check=True)
    worst = 0
    for package, (files, _) in SUITES.items():
        suite = prepare(package)
        for name in files:
            if not name.startswith("test_"):
                continue
            res = subprocess.run([sys.executable, "-m", "pytest", "-q", f"tests/{name}", *extra], cwd=suite,
                                 capture_output=True, text=True)
            summary = [line for line in res.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
            failed = [line for line in res.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
            print(f"{package} tests/{name}: {summary[-1] if summary else res.stdout[-500:]}")
            for line in failed:
                print("   ", line)
            worst = max(worst, res.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
