"""The write journal's "applied before a crash?" look-up runs only where an earlier attempt may
have stored the row (memory.journal.WriteJournal.apply). Real SQLite files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory import MemorySettings
from memory.journal import JournalEntry, WriteJournal
from memory.policy.manager import MemoryManager

NOW = datetime(2025, 6, 1, tzinfo=UTC)
NS = ("text2sql_memories", "u1")


@pytest.fixture
def mm(tmp_path: Path) -> Iterator[MemoryManager]:
    for k in [k for k in os.environ if k.startswith("MEMORY_")]:
        os.environ.pop(k)
    m = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite")))
    yield m
    m.close()


def _entry(text: str) -> JournalEntry:
    return JournalEntry(NS, text, {"type": "text2sql", "source": "text2sql"}, now=NOW)


def _count_lookups(mm: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    inner = mm.service.list

    def spy(*a: object, **k: object) -> object:
        calls.append(k.get("filter"))
        return inner(*a, **k)

    monkeypatch.setattr(mm.service, "list", spy)
    return calls


def test_a_row_this_journal_just_added_is_applied_without_the_namespace_scan(
        mm: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> None:
    jr = WriteJournal.for_store(mm.settings.path)
    calls = _count_lookups(mm, monkeypatch)
    [jid] = jr.add([_entry("SELECT region FROM orders WHERE status = 'paid'")])
    assert jr.apply(jid, mm).status == "added"
    assert calls == []
    assert len(jr) == 0
    jr.close()


def test_a_replayed_row_already_stored_is_not_stored_twice(mm: MemoryManager,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    first = WriteJournal.for_store(mm.settings.path)
    [jid] = first.add([_entry("SELECT city FROM shops WHERE open = 1")])
    # A crash after the store committed the memory, before the journal row was deleted:
    res = mm.remember("SELECT city FROM shops WHERE open = 1", NS, {"type": "text2sql", "extra": {"journal": jid}},
                      now=NOW)
    assert res.status == "added"
    first.close()
    # The next process replays the row: the look-up finds the stored memory.
    later = WriteJournal.for_store(mm.settings.path)
    calls = _count_lookups(mm, monkeypatch)
    assert later.apply(jid, mm) is None
    assert calls == [{"extra.journal": jid}]
    assert [r.content for r in mm.service.list(NS)] == ["SELECT city FROM shops WHERE open = 1"]
    later.close()
