"""Faults: dedupe is atomic across processes. Two managers on one file (two connections, as two
processes have) remember the same text; the second one's neighbour read happens before the
first one's insert — the interleaving that stored 326 rows for 100 texts with 4 processes."""

from __future__ import annotations

import pytest

from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings

TEXT = "The user wants every revenue chart in thousands of yuan"


@pytest.fixture
def managers(tmp_path, embedder):
    path = str(tmp_path / "race.sqlite")
    a = MemoryManager.from_settings(MemorySettings(path=path), embedder=embedder)
    b = MemoryManager.from_settings(MemorySettings(path=path), embedder=embedder)
    yield a, b
    a.close()
    b.close()


def _interleave(a: MemoryManager, b: MemoryManager, text_b: str) -> list[str]:
    """``a`` reads its neighbours; before it writes, ``b`` stores ``text_b``."""
    real_query = a.service.backend.query
    done: list[str] = []

    def query_then_other_writes(q):
        hits = real_query(q)
        if not done:
            done.append(b.remember(text_b, "user_profile/u1").status)
        return hits

    a.service.backend.query = query_then_other_writes  # type: ignore[method-assign]
    try:
        done.append(a.remember(TEXT, "user_profile/u1").status)
    finally:
        a.service.backend.query = real_query  # type: ignore[method-assign]
    return done


def test_same_text_written_meanwhile_by_another_process_is_not_stored_twice(managers):
    a, b = managers
    statuses = _interleave(a, b, TEXT)
    rows = a.service.list("user_profile/u1")
    assert statuses == ["added", "skipped"]
    assert [r.content for r in rows] == [TEXT]


def test_distinct_text_written_meanwhile_does_not_block_the_write(managers):
    a, b = managers
    statuses = _interleave(a, b, "The user's team meets on Thursdays at 10")
    assert statuses == ["added", "added"]
    assert len(a.service.list("user_profile/u1")) == 2
