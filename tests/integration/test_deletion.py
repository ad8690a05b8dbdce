"""Deletes that delete: after ``forget_user`` or a hard delete, the user's text is nowhere in the
store's bytes — not in rows, the audit log, the FTS shadow tables, freed pages, or the WAL.

Real SQLite file, real packaged embedder. The check reads the files like ``strings`` would.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory import MemorySettings
from memory.errors import InvalidInput
from memory.policy.manager import Actor, MemoryManager

NOW = datetime(2025, 6, 1, tzinfo=UTC)
# Distinctive texts of user u7: none of these words occurs anywhere else in the store.
U7_TEXTS = {
    "user_profile/u7": "Zorblax prefers quokkamarmalade dashboards every Tuesday",
    "domain_facts/u7": "我的宠物鹦鹉叫翠花雀跃",
    "memories/u7/preferences": "Vintrexia reports must use plumbergrey colours",
    "analysis_memories/u7": "Kelptopia cohort churned after the glimmerquack launch",
}
U7_SEARCHES = ("where is the xylospindle invoice", "谁负责榴莲饼预算")
U7_WORDS = ("Zorblax", "quokkamarmalade", "翠花雀跃", "Vintrexia", "plumbergrey", "Kelptopia",
            "glimmerquack", "xylospindle", "榴莲饼", "Hyperwombat")
OTHER = {"user_profile/u2": "Prefers bar charts for the weekly revenue report",
         "memories/u2/preferences": "u2 wants amounts in units of ten thousand yuan"}


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _leaks(path: Path) -> list[str]:
    data = _file_bytes(path)
    return [w for w in U7_WORDS if w.encode() in data or w.lower().encode() in data]


def _view_vectors(mm: MemoryManager, texts: list[str], others: list[str]) -> list[bytes]:
    """The float32 bytes of the judge's views of ``texts`` (encoder views and the paraphrase
    vector) that no text of ``others`` shares: derived data of the texts, which a delete must remove."""
    judge, para = mm.pair_judge, mm.pair_judge.paraphrase
    shared = {v for t in others for v in judge.view_texts(t)}
    out = [judge.cached(v) for t in texts for v in judge.view_texts(t) if v not in shared]
    out += [para.cached(t) for t in texts]  # type: ignore[union-attr]
    return [v.tobytes() for v in out if v is not None]


def _vector_leaks(path: Path, vectors: list[bytes]) -> int:
    """How many of ``vectors`` the files still hold: a vector counts when any of four 64-byte
    windows 512 bytes apart is found (a vector may straddle two pages, which splits one window)."""
    data = _file_bytes(path)
    return sum(any(v[o: o + 64] in data for o in range(0, len(v) - 63, 512)) for v in vectors)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[MemoryManager, Path]]:
    for k in [k for k in os.environ if k.startswith("MEMORY_")]:
        os.environ.pop(k)
    path = tmp_path / "m.sqlite"
    mm = MemoryManager.from_settings(MemorySettings(path=str(path)))
    yield mm, path
    mm.close()


def _fill(mm: MemoryManager) -> dict[str, str]:
    ids = {ns: mm.remember(text, ns, now=NOW).id for ns, text in {**U7_TEXTS, **OTHER}.items()}
    # An update keeps the old text in the event's "before" and in the trash.
    mm.update(ids["user_profile/u7"], "Zorblax prefers quokkamarmalade dashboards every Wednesday", now=NOW)
    gone = mm.remember("Hyperwombat budget draft for Q3", "task_traces/u7", now=NOW)
    mm.delete(gone.id, now=NOW)  # soft: the text is in the trash; task_traces/u7 now holds no memory
    mm.recall(U7_SEARCHES[0], ["user_profile/u7", "domain_facts/u2"], now=NOW)  # logged with a NULL namespace
    mm.recall(U7_SEARCHES[1], "scratch/u7", now=NOW)  # a namespace that never held a memory
    mm.recall("revenue report", "user_profile/u2", now=NOW)
    return ids


def test_forget_user_leaves_no_text_in_the_file(store: tuple[MemoryManager, Path]) -> None:
    mm, path = store
    ids = _fill(mm)
    assert _leaks(path), "the test's words must be in the file before forgetting"
    # The judge's view vectors of the user's texts are stored beside the memories (view_cache).
    vectors = _view_vectors(mm, [*U7_TEXTS.values(), "Hyperwombat budget draft for Q3"], list(OTHER.values()))
    assert len(vectors) >= 12 and _vector_leaks(path, vectors) >= 12
    before = {(e.seq, e.action, e.memory_id, e.ts) for e in mm.audit.events(limit=10_000)}

    # An operator (the access rules let it reach every agent's private memory) forgets the user.
    rep = mm.forget_user("u7", actor=Actor(agent="operator:test"), now=NOW)

    assert rep.clean, rep.residue
    assert rep.deleted == 4
    assert set(rep.namespaces) >= {"user_profile/u7", "task_traces/u7", "scratch/u7", "memories/u7/preferences"}
    # Other users untouched, including the one whose namespace has a label "preferences".
    assert sorted(r.content for ns in OTHER for r in mm.service.list(ns)) == sorted(OTHER.values())
    # Ids, actions and times stay; the text does not.
    after = {(e.seq, e.action, e.memory_id, e.ts) for e in mm.audit.events(limit=10_000)}
    assert before <= after
    for e in mm.audit.events(limit=10_000):
        if e.memory_id in ids.values() and e.memory_id not in (ids["user_profile/u2"], ids["memories/u2/preferences"]):
            assert e.before is None and e.after is None and e.namespace is None, e
    assert mm.audit.history(ids["user_profile/u7"])  # the memory's events are still listed
    assert mm.audit.stats()["searches"] == 3
    mm.close()
    with sqlite3.connect(path) as con:
        vocab = {t for (t,) in con.execute("SELECT term FROM memories_vocab")}
        assert not {"zorblax", "vintrexia", "kelptopia"} & vocab
        fts = b"".join(bytes(b) for (b,) in con.execute("SELECT block FROM memories_fts_data") if b)
        assert b"zorblax" not in fts and b"plumbergrey" not in fts
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert _leaks(path) == []
    assert _vector_leaks(path, vectors) == 0
    assert rep.residue["judge_views"] == 0


def test_hard_delete_removes_the_text_but_keeps_the_events(store: tuple[MemoryManager, Path]) -> None:
    mm, path = store
    keep = mm.remember("Prefers bar charts for the weekly revenue report", "user_profile/u2", now=NOW)
    rec = mm.remember("Zorblax prefers quokkamarmalade dashboards every Tuesday", "user_profile/u7", now=NOW)
    mm.update(rec.id, "Zorblax prefers quokkamarmalade dashboards on Vintrexia days", now=NOW)
    other = mm.remember("Prefers line charts for the monthly cost report", "user_profile/u7", now=NOW)
    vectors = _view_vectors(mm, [rec.record.content], [keep.record.content, other.record.content])
    assert len(vectors) >= 4 and _vector_leaks(path, vectors) == len(vectors)
    kept = _view_vectors(mm, [other.record.content], [rec.record.content, keep.record.content])
    assert mm.delete(rec.id, hard=True, now=NOW) == 1
    actions = [e.action for e in mm.audit.history(rec.id)]
    assert actions == ["add", "update", "delete"]
    assert all(e.before is None and e.after is None for e in mm.audit.history(rec.id))
    assert mm.audit.trash_get(rec.id) is None
    assert mm.service.get(keep.id).content.startswith("Prefers bar charts")
    mm.close()
    assert _leaks(path) == []
    assert _vector_leaks(path, vectors) == 0  # the deleted text's views went with it
    assert _vector_leaks(path, kept) == len(kept)  # a live memory's views in the namespace stay


def test_forget_user_matches_the_label_at_its_position_only(store: tuple[MemoryManager, Path]) -> None:
    mm, _ = store
    mm.remember("u2 wants amounts in units of ten thousand yuan", "memories/u2/preferences", now=NOW)
    mm.remember("a fact about user preferences", "user_profile/preferences", now=NOW)
    rep = mm.forget_user("preferences", now=NOW)
    assert rep.namespaces == ("user_profile/preferences",) and rep.deleted == 1
    assert [r.content for r in mm.service.list("memories/u2")] == ["u2 wants amounts in units of ten thousand yuan"]
    assert mm.forget_user("u2", position=2, now=NOW).deleted == 0  # memories/u2/preferences: u2 is at 1
    with pytest.raises(InvalidInput):
        mm.forget_user("u2", position=0)
    with pytest.raises(InvalidInput):
        mm.forget_user("a/b")


def test_audit_history_escapes_like_wildcards(store: tuple[MemoryManager, Path]) -> None:
    mm, _ = store
    a = mm.remember("Prefers bar charts for the weekly revenue report", "user_profile/u2", now=NOW)
    mm.remember("Uses the East China region for sales questions", "user_profile/u2", now=NOW)
    mm.delete(a.id, now=NOW)
    assert mm.audit.history("%") == []
    assert mm.audit.history("_" * len(a.id)) == []
    assert [e.action for e in mm.audit.history(a.id)] == ["add", "delete"]


def test_forget_user_drops_the_users_pending_journal_writes(store: tuple[MemoryManager, Path]) -> None:
    """Writes the Supervisor journaled but had not applied (a crash, a store that was down) would
    come back on the next replay: forget-user drops them, and their text leaves the journal file."""
    from memory.journal import JournalEntry, WriteJournal

    mm, path = store
    journal = WriteJournal.for_store(str(path))
    journal.add([JournalEntry(("user_profile", "u7"), "Zorblax prefers quokkamarmalade dashboards", {}),
                 JournalEntry(("memories", "u2", "u7"), "u2's note about a u7 label deeper down", {}),
                 JournalEntry(("user_profile", "u2"), "Prefers bar charts for the weekly revenue report", {})])
    journal.close()
    mm.forget_user("u7", now=NOW)
    journal = WriteJournal.for_store(str(path))
    assert sorted(e["content"] for e in journal.pending()) == [
        "Prefers bar charts for the weekly revenue report", "u2's note about a u7 label deeper down"]
    journal.close()
    pending = Path(f"{path}.pending")
    data = b"".join(p.read_bytes() for p in (pending, Path(f"{pending}-wal")) if p.exists())
    assert b"Zorblax" not in data and b"quokkamarmalade" not in data
