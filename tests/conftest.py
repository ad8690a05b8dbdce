"""Shared fixtures. Real SQLite files, real packaged embeddings; no network anywhere."""

from __future__ import annotations

import os

import pytest

# Nothing in this project may reach a model hub; make any accidental attempt fail fast.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def embedder():
    """The default packaged model (USE multilingual), loaded once per test session."""
    from memory.embeddings import get_embedder
    from memory.settings import EmbeddingSettings

    return get_embedder(EmbeddingSettings().model)


@pytest.fixture
def service(tmp_path, embedder):
    from memory import MemoryService, MemorySettings

    svc = MemoryService.from_settings(MemorySettings(path=str(tmp_path / "memory.sqlite")), embedder=embedder)
    yield svc
    svc.close()


@pytest.fixture
def manager(tmp_path, embedder):
    """A policy manager over a fresh store file (test modules with other needs define their own)."""
    from memory import MemorySettings
    from memory.policy.manager import MemoryManager

    mm = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "memory.sqlite")), embedder=embedder)
    yield mm
    mm.close()
