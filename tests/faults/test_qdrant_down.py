"""Faults: the primary (qdrant-client local mode behind a fault switch) goes down during
``remember`` and comes back: the write is acknowledged as "queued" (no error), a caller's retry
is not stored twice, and the outbox keeps the memory text only while it is pending (0600)."""

from __future__ import annotations

import numpy as np

from memctl.faults_paths import qdrant_down
from memory.backends.outbox import Outbox
from memory.records import MemoryRecord


def test_remember_with_primary_down_is_queued_and_replayed_once(tmp_path, embedder):
    r = qdrant_down(tmp_path, embedder=embedder)
    assert r["first_status"] == "added"
    assert r["errors_while_down"] == []
    assert r["statuses_while_down"] == ["queued", "queued"]
    assert r["retry_same_id"] and r["outbox_pending_while_down"] == 1
    assert r["outbox_left_after_replay"] == 0
    assert r["copies_after_replay"] == 1 and r["stored_id_is_acknowledged_id"]
    assert r["outbox_file_mode"] == "0o600"
    assert r["text_in_outbox_while_queued"] and not r["text_in_outbox_after_replay"]


def _rec(id: str, content: str) -> MemoryRecord:
    return MemoryRecord(id=id, namespace="user_profile/u1", content=content)


def test_outbox_queues_a_retry_once_but_keeps_updates_of_the_same_id(tmp_path):
    ob = Outbox(tmp_path / "ob.sqlite")
    v = np.ones((1, 4), dtype=np.float32)
    first = ob.append_upsert([_rec("a", "likes  green tea")], v)
    assert ob.append_upsert([_rec("b", "Likes green tea")], v) == first  # retry, new id: same op
    assert ob.ids_of(first) == ["a"]
    ob.append_upsert([_rec("a", "likes green tea")], v)  # same id again: an update, kept in order
    ob.append_upsert([_rec("c", "likes coffee")], v)
    assert [op.records[0].id for op in ob.pending()] == ["a", "a", "c"]
    ob.close()


def test_outbox_file_is_private_and_purged_after_replay(tmp_path):
    path = tmp_path / "ob.sqlite"
    path.touch(mode=0o644)
    path.chmod(0o644)  # an outbox created before: tightened on open
    ob = Outbox(path)
    assert path.stat().st_mode & 0o777 == 0o600
    ob.append_upsert([_rec("a", "secret-ish memory text 42")], np.ones((1, 4), dtype=np.float32))
    applied: list[str] = []
    assert ob.drain(lambda op: applied.append(op.records[0].id)) == (1, 0)
    assert applied == ["a"]
    for f in (path, tmp_path / "ob.sqlite-wal"):
        assert not f.exists() or b"secret-ish memory text 42" not in f.read_bytes()
    ob.close()
