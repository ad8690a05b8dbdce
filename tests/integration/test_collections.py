"""Markdown collections on a real SQLite file with the real packaged model: incremental indexing,
search citing file:line, filters, and the folder never written to."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from memory.collections import Collections, citation
from memory.errors import InvalidInput, NotFound
from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings

NOTES = {
    "wiki/gmv.md": "# GMV\n\n## Definition\n\nGMV counts paid orders. Delivery fees are not part of GMV.\n\n"
                   "## History\n\nDefined in June 2024 by the metrics council.\n",
    "people/lin.md": "# 林薇\n\n## 工作习惯\n\n周二和周四下午是她的专注时间，不约会议。\n",
    "daily/2025-01-07.md": "# 2025-01-07\n\n- Cleaned temp tables on Greenplum, freed 1.2 TB.\n",
    ".obsidian/workspace.md": "# tool state\n\nnot a note\n",
}


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "notes"
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def mm(tmp_path, embedder):
    m = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "memory.sqlite")), embedder=embedder)
    yield m
    m.close()


def _touch_later(p: Path) -> None:
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_index_search_cite_and_filter(mm, folder):
    before = _tree(folder)
    with Collections(mm.service, mm.audit) as docs:
        docs.add("notes", folder)
        (rep,) = docs.index("notes")
        assert sorted(rep.added) == ["daily/2025-01-07.md", "people/lin.md", "wiki/gmv.md"]  # hidden folder skipped
        assert rep.chunks_written == 4 and not rep.errors
        hit = mm.service.search("Is the delivery fee included in GMV?", "docs/notes")[0]
        rec = hit.record
        assert rec.namespace == ("docs", "notes") and rec.metadata.source == "markdown" and rec.metadata.type == "doc"
        ex = rec.metadata.extra
        where = (ex["path"], ex["heading"], ex["line_start"], ex["line_end"])
        assert where == ("wiki/gmv.md", "GMV › Definition", 5, 5)
        assert citation(rec) == f"{folder / 'wiki/gmv.md'}:5"
        assert rec.created_at.timestamp() == pytest.approx((folder / "wiki/gmv.md").stat().st_mtime, abs=1e-3)
        # cross-language, and the store's filters work on chunks like on any memory
        zh = mm.service.search("When does Lin Wei not take meetings?", "docs/notes", top_k=1)
        assert zh and zh[0].record.metadata.extra["path"] == "people/lin.md"
        only = mm.service.search("GMV", "docs/notes", filter={"extra.path": "daily/2025-01-07.md"}, min_sim=0)
        assert {h.record.metadata.extra["path"] for h in only} == {"daily/2025-01-07.md"}
        assert mm.service.search("GMV", "docs/notes", filter={"type": "user_profile"}) == []
        assert docs.list()[0].as_dict()["files"] == 3
    assert _tree(folder) == before  # Markdown is read, never written
    assert mm.audit.events(action="index", limit=10)[0].namespace == "docs/notes"


def test_incremental_index_edits_deletes_and_stable_ids(mm, folder):
    with Collections(mm.service, mm.audit) as docs:
        docs.add("notes", folder)
        docs.index()
        ids = {r.metadata.extra["heading"]: r.id for r in mm.service.list("docs/notes", limit=100)}
        # nothing changed: no file is re-chunked; a touched file with the same bytes is not either
        _touch_later(folder / "wiki/gmv.md")
        (rep,) = docs.index("notes")
        assert (rep.unchanged, rep.added, rep.changed, rep.chunks_written) == (3, [], [], 0)
        # edit one section: only that file is rewritten; the other section keeps its id and text
        gmv = folder / "wiki/gmv.md"
        gmv.write_text(NOTES["wiki/gmv.md"].replace("Delivery fees are not part of GMV.",
                                                     "Delivery fees and packaging fees are not part of GMV."),
                       encoding="utf-8")
        _touch_later(gmv)
        (rep,) = docs.index("notes")
        assert rep.changed == ["wiki/gmv.md"] and rep.unchanged == 2 and rep.chunks_written == 2
        after = {r.metadata.extra["heading"]: r for r in mm.service.list("docs/notes", limit=100)}
        assert {k: r.id for k, r in after.items()} == ids
        assert "packaging" in after["GMV › Definition"].content
        # a section removed from a file and a deleted file leave the index
        gmv.write_text("# GMV\n\n## Definition\n\nGMV counts paid orders.\n", encoding="utf-8")
        _touch_later(gmv)
        (folder / "daily/2025-01-07.md").unlink()
        (rep,) = docs.index("notes")
        assert rep.removed == ["daily/2025-01-07.md"] and rep.chunks_deleted == 2
        left = {r.metadata.extra["heading"] for r in mm.service.list("docs/notes", limit=100)}
        assert left == {"GMV › Definition", "林薇 › 工作习惯"}
        assert all(h.record.metadata.extra["path"] != "daily/2025-01-07.md"
                   for h in mm.service.search("Greenplum temp tables", "docs/notes", min_sim=0))
        # --full re-chunks everything, with the same ids
        (rep,) = docs.index("notes", full=True)
        assert rep.chunks_written == 2 and sorted(rep.changed) == ["people/lin.md", "wiki/gmv.md"]


def test_registry_survives_reopening_and_watch_picks_up_edits(tmp_path, embedder, folder):
    path = str(tmp_path / "memory.sqlite")
    with MemoryManager.from_settings(MemorySettings(path=path), embedder=embedder) as mm, \
            Collections(mm.service, mm.audit) as docs:
        docs.add("notes", folder)
        docs.index()
    (folder / "new.md").write_text("# New\n\nA note added while nobody was watching.\n", encoding="utf-8")
    with MemoryManager.from_settings(MemorySettings(path=path), embedder=embedder) as mm, \
            Collections(mm.service, mm.audit) as docs:
        assert [c.name for c in docs.list()] == ["notes"]
        seen = []
        docs.watch("notes", interval=0.01, rounds=2, on_report=seen.append)
        assert [r.added for r in seen] == [["new.md"]]  # the second pass found nothing new
        assert mm.service.count("docs/notes") == 5


def test_bad_input_and_unreadable_files_lose_nothing(mm, folder, tmp_path):
    with Collections(mm.service, mm.audit) as docs:
        for bad in ("a/b", "", " x"):
            with pytest.raises(InvalidInput):
                docs.add(bad, folder)
        with pytest.raises(InvalidInput, match="not a folder"):
            docs.add("x", tmp_path / "missing")
        with pytest.raises(InvalidInput, match="inside the folder"):
            docs.add("x", folder, glob="../*.md")
        with pytest.raises(NotFound):
            docs.index("nope")
        docs.add("notes", folder)
        assert docs.add("notes", folder).name == "notes"  # same folder again: no-op
        with pytest.raises(InvalidInput, match="already indexes"):
            docs.add("notes", tmp_path)
        docs.index()
        n = mm.service.count("docs/notes")
        (folder / "people/lin.md").write_bytes(b"# \xff\xfe broken\n")  # not UTF-8
        _touch_later(folder / "people/lin.md")
        (rep,) = docs.index("notes")
        assert rep.errors and "not UTF-8" in rep.errors[0]
        assert mm.service.count("docs/notes") == n  # its previous chunks are kept
        (folder / "wiki/gmv.md").write_text("# GMV\n\nA NUL \x00 inside.\n", encoding="utf-8")  # store refuses it
        (folder / "fine.md").write_text("# Fine\n\nA normal note.\n", encoding="utf-8")
        _touch_later(folder / "wiki/gmv.md")
        (rep,) = docs.index("notes")
        assert rep.added == ["fine.md"] and any("wiki/gmv.md" in e and "NUL" in e for e in rep.errors)
        assert mm.service.count("docs/notes") == n + 1
        n += 1
        # removing the collection drops its chunks only; the files stay
        before = _tree(folder)
        mm.remember("User likes bar charts", "user_profile/u1")
        assert docs.remove("notes") == n
        assert mm.service.count("docs/notes") == 0 and mm.service.count("user_profile/u1") == 1
        assert _tree(folder) == before and docs.list() == []


def test_index_of_the_evaluation_folder_is_fast_when_nothing_changed(mm):
    """220 notes: the no-change pass only stats files (timing asserted loosely: shared machine)."""
    src = Path(__file__).resolve().parents[1] / "data" / "markdown_notes" / "notes"
    with Collections(mm.service) as docs:
        docs.add("eval", src)
        (rep,) = docs.index("eval")
        assert rep.files == 220 and len(rep.added) == 220 and not rep.errors
        t = time.perf_counter()
        (again,) = docs.index("eval")
        assert again.unchanged == 220 and again.chunks_written == 0
        assert time.perf_counter() - t < 2.0


@pytest.mark.parametrize("module", ["memory.collections", "memory.disclosure"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
