"""Backends under test. Every backend must pass tests/conformance unchanged.

Add a backend here and the whole suite runs against it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memory.backend import MemoryBackend
from memory.backends.sqlite import SqliteBackend

DIM = 8
MODEL = "conformance/unit-vectors"

Factory = Callable[[], MemoryBackend]


def _sqlite_file(tmp_path: Path) -> Factory:
    return lambda: SqliteBackend(tmp_path / "store.sqlite", embedding_model=MODEL, dim=DIM)


def _sqlite_memory(tmp_path: Path) -> Factory:
    return lambda: SqliteBackend(":memory:", embedding_model=MODEL, dim=DIM)


FACTORIES: dict[str, Callable[[Path], Factory]] = {
    "sqlite_file": _sqlite_file,
    "sqlite_memory": _sqlite_memory,
}
# Backends whose data lives in a file several processes (or a reopen) can see.
PERSISTENT = {"sqlite_file"}
MULTIPROCESS = {"sqlite_file"}


@pytest.fixture(params=sorted(FACTORIES))
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Factory]]:
    yield request.param, FACTORIES[request.param](tmp_path)


@pytest.fixture
def backend(backend_factory: tuple[str, Factory]) -> Iterator[MemoryBackend]:
    b = backend_factory[1]()
    yield b
    b.close()
