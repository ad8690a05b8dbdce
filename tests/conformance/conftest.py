"""Backends under test. Every backend must pass tests/conformance unchanged.

Add a backend here and the whole suite runs against it.
"""

from __future__ import annotations

import atexit
import os
import uuid
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


def _qdrant_local(tmp_path: Path) -> Factory:
    from memory.backends.qdrant import QdrantBackend

    return lambda: QdrantBackend(location=":memory:", embedding_model=MODEL, dim=DIM)


def _qdrant_path(tmp_path: Path) -> Factory:
    from memory.backends.qdrant import QdrantBackend

    return lambda: QdrantBackend(path=tmp_path / "qdrant", embedding_model=MODEL, dim=DIM)


QDRANT_SKIP = "QDRANT_URL not set: no Qdrant server on this machine"


def _qdrant_server(tmp_path: Path) -> Factory:
    url = os.environ.get("QDRANT_URL")
    if not url:
        # A visible skip (pytest -ra prints the reason) rather than a silently absent param.
        def skip() -> MemoryBackend:
            pytest.skip(QDRANT_SKIP)

        return skip
    from memory.backends.qdrant import QdrantBackend

    # A fresh collection per test (reopening within a test sees the same one).
    prefix = f"conformance{uuid.uuid4().hex[:10]}"

    def make() -> MemoryBackend:
        b = QdrantBackend(url=url, api_key=os.environ.get("QDRANT_API_KEY"), embedding_model=MODEL,
                          dim=DIM, collection_prefix=prefix)
        atexit.register(_drop_collection, url, b.collection)
        return b

    return make


def _drop_collection(url: str, name: str) -> None:
    from qdrant_client import QdrantClient

    try:
        QdrantClient(url=url, api_key=os.environ.get("QDRANT_API_KEY"), check_compatibility=False,
                     timeout=5).delete_collection(name)
    except Exception:
        pass


FACTORIES: dict[str, Callable[[Path], Factory]] = {
    "sqlite_file": _sqlite_file,
    "sqlite_memory": _sqlite_memory,
    "qdrant_local": _qdrant_local,
    "qdrant_path": _qdrant_path,
    "qdrant_server": _qdrant_server,
}
# Backends whose data lives in a file several processes (or a reopen) can see.
# qdrant_path survives a reopen too, but test_other_model_cannot_open_the_store opens
# tmp_path/"store.sqlite" with SqliteBackend whatever the backend, so it cannot be listed here;
# tests/integration/test_migrate.py checks its reopen instead.
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
