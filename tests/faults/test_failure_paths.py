"""Faults: a full disk, a read-only file and a damaged file give a clear error of our tree,
keep the in-memory indexes equal to the rows, and damage nothing further."""

from __future__ import annotations

import numpy as np
import pytest

from memctl.faults import index_agreement
from memctl.faults_paths import corrupted, disk_full_pagecount, disk_full_tmpfs, read_only
from memctl.faults_workers import DIM, MODEL, content_for, vector_for
from memory.backends.sqlite import SqliteBackend
from memory.errors import StoreFull
from memory.records import MemoryRecord


def _rec(mid: str, pad: int = 0) -> MemoryRecord:
    return MemoryRecord(id=mid, namespace="faults/u1", content=content_for(mid) + " pad" * pad)


def test_failed_insert_reports_the_real_error_and_leaves_no_phantom(tmp_path):
    b = SqliteBackend(str(tmp_path / "full.sqlite"), embedding_model=MODEL, dim=DIM)
    recs = [_rec(f"f-{i}") for i in range(20)]
    b.upsert(recs, np.stack([vector_for(r.id) for r in recs]))
    (pages,) = b._conn.execute("PRAGMA page_count").fetchone()
    b._conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreFull, match="database or disk is full") as err:
        b.upsert([_rec("big", pad=5000)], vector_for("big")[None, :])
    assert "cannot rollback" not in str(err.value)
    assert b.get(["big"]) == []
    agree = index_agreement(b)
    assert agree["agree"] and agree["vectors"] == agree["rows"] == 20
    b._conn.execute(f"PRAGMA max_page_count = {pages * 100}")  # space again: the store works
    b.upsert([_rec("after")], vector_for("after")[None, :])
    assert index_agreement(b)["rows"] == 21
    b.close()


def test_disk_full_by_page_limit(tmp_path):
    r = disk_full_pagecount(tmp_path)
    assert r["insert_error"] == "StoreFull" and r["insert_reports_real_error"]
    assert not r["phantom_after_failed_insert"]
    assert r["delete_reports_real_error"] and r["deleted_memory_consistent"]
    assert r["index_agrees"] and r["integrity"] == "ok"


def test_disk_full_on_a_real_tiny_filesystem(tmp_path):
    """A 1 MiB tmpfs: here the failed delete fails at COMMIT, after the index was updated — the
    case that said "cannot rollback" and then lost a still-stored memory from search."""
    r = disk_full_tmpfs(tmp_path)
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["insert_error"] == "StoreFull" and r["insert_reports_real_error"]
    assert not r["phantom_after_failed_insert"]
    assert r["delete_reports_real_error"], r
    assert r["deleted_memory_consistent"] and r["index_agrees"] and r["integrity"] == "ok"


def test_read_only_file_fails_clearly_and_stays_unchanged(tmp_path):
    r = read_only(tmp_path)
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["write_refused"] and r["errors_in_tree"] and r["read_only_error"], r
    assert r["file_unchanged"] and r["integrity"] == "ok"


def test_corrupted_file_fails_clearly_and_is_not_damaged_further(tmp_path):
    r = corrupted(tmp_path)
    assert r["detected"] and r["errors_in_tree"] and r["corrupt_error"], r
    assert r["file_unchanged"] and r["integrity_after_same"]
