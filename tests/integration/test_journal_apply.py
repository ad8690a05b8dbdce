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


def test_a_write_the_store_refuses_as_bad_input_leaves_the_journal(mm: MemoryManager) -> None:
    """A user message with a NUL (or any text the write path refuses as InvalidInput) used to stay
    in the journal "for a retry" and fail again at every later turn and every graph build: a
    retry cannot make bad input valid. It is reported once and dropped; a transient failure
    still keeps its row."""
    from memory.errors import BackendUnavailable, InvalidContent

    jr = WriteJournal.for_store(mm.settings.path)
    [bad] = jr.add([_entry("以后\x00报表都用元")])
    with pytest.raises(InvalidContent, match="NUL"):
        jr.apply(bad, mm)  # the write-behind thread's attempt: reported to the caller
    assert len(jr) == 0 and jr.replay(mm) == []
    # A store that is down is worth retrying: the row stays and the next replay stores it.
    [ok] = jr.add([_entry("SELECT 1 FROM orders")])
    real = mm.remember

    def down(*a: object, **k: object) -> object:
        raise BackendUnavailable("store down")

    mm.remember = down  # type: ignore[method-assign]
    try:
        with pytest.raises(BackendUnavailable):
            jr.apply(ok, mm)
    finally:
        mm.remember = real  # type: ignore[method-assign]
    assert len(jr) == 1
    [(jid, res, exc)] = jr.replay(mm)
    assert jid == ok and exc is None and res is not None and res.status == "added" and len(jr) == 0
    assert [r.content for r in mm.service.list(NS)] == ["SELECT 1 FROM orders"]
    jr.close()
