"""Bulk import (memory.bulk, ``MemoryService.write_many(batch_size=...)``, ``memctl import FILE.jsonl``):
every line validated before anything is written, one transaction per batch, optional dedupe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.backends.sqlite import SqliteBackend
from memory.bulk import validate_jsonl
from memory.errors import InvalidInput, InvalidNamespace
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings

_SCRIPT = Path(sys.executable).parent / "memctl"
MEMCTL: list[str] = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "memctl.cli"]


def open_store(path: Path, embedder: Any) -> MemoryService:
    """A service over a real SQLite file at ``path`` (shared with test_bulk_populated)."""
    return MemoryService(SqliteBackend(path, embedding_model=embedder.name, dim=embedder.dim), embedder,
                         MemorySettings(path=str(path)))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def svc(tmp_path, embedder):
    s = open_store(tmp_path / "bulk.sqlite", embedder)
    yield s
    s.close()


def _seq(svc: MemoryService) -> int:
    return int(svc.backend._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])  # type: ignore[attr-defined]


def test_write_many_in_batches_is_one_transaction_per_batch_with_progress(svc: MemoryService) -> None:
    items = [NewMemory(f"fact {i}: revenue of region {i % 7} grew", ("domain_facts", f"u{i % 3}")) for i in range(23)]
    seen: list[int] = []
    before = _seq(svc)
    out = svc.write_many(items, batch_size=5, workers=1, progress=lambda done, total: seen.append(done))
    assert len(out) == 23 and svc.count() == 23
    assert _seq(svc) - before == 5  # ceil(23 / 5) write transactions
    assert seen == [5, 10, 15, 20, 23]
    hits = svc.search("revenue of region 3", ("domain_facts",), top_k=3)
    assert hits and "region 3" in hits[0].record.content


def test_write_many_dedupe_skips_content_already_in_the_namespace(svc: MemoryService) -> None:
    svc.write("User prefers bar charts", "user_profile/u1")
    items = [NewMemory("User  prefers bar charts ", "user_profile/u1"),  # same after whitespace
             NewMemory("User prefers bar charts", "user_profile/u2"),  # another namespace: kept
             NewMemory("likes tea", "user_profile/u1"), NewMemory("likes tea", "user_profile/u1")]
    out = svc.write_many(items, dedupe=True)
    assert [(r.content, "/".join(r.namespace)) for r in out] == [
        ("User prefers bar charts", "user_profile/u2"), ("likes tea", "user_profile/u1")]
    assert svc.count() == 3
    assert len(svc.write_many(items, dedupe=False)) == 4


def test_a_bad_line_names_itself_and_nothing_is_written(svc: MemoryService, tmp_path: Path) -> None:
    good = {"content": "ok", "namespace": "a/b"}
    cases = {
        "not json": (InvalidInput, "line 3: not valid JSON"),
        json.dumps({"content": "", "namespace": "a/b"}): (InvalidInput, "line 3: content is empty"),
        json.dumps({"content": "x", "namespace": "a//b"}): (InvalidNamespace, "line 3: namespace"),
        json.dumps({"content": "x", "namespace": "a/b", "colour": 1}): (InvalidInput, "line 3: unknown field"),
        json.dumps({"content": "x"}): (InvalidInput, "line 3: no namespace"),
        json.dumps({"content": "x", "namespace": "a/b", "created_at": "yesterday"}):
            (InvalidInput, "line 3: created_at"),
        json.dumps([1, 2]): (InvalidInput, "line 3: expected a JSON object"),
    }
    for i, (line, (exc, msg)) in enumerate(cases.items()):
        f = tmp_path / f"bad{i}.jsonl"
        f.write_text(json.dumps(good) + "\n\n" + line + "\n" + json.dumps(good) + "\n", encoding="utf-8")
        with pytest.raises(exc, match=msg):
            validate_jsonl(svc, f)
    assert svc.count() == 0


def test_memctl_import_jsonl_end_to_end(tmp_path: Path) -> None:
    store = tmp_path / "cli.sqlite"
    env = {"HF_HUB_OFFLINE": "1", "MEMORY_PATH": str(store), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    good = tmp_path / "m.jsonl"
    good.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in [
        {"content": "User prefers bar charts", "namespace": "user_profile/u1", "metadata": {"type": "user_profile"}},
        {"content": "用户喜欢柱状图"},  # namespace from --ns
        {"content": "User prefers bar charts", "namespace": "user_profile/u1"},  # duplicate of line 1
    ]) + "\n", encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text(encoding="utf-8") + '{"content": 5, "namespace": "x/y"}\n', encoding="utf-8")
    r = subprocess.run([*MEMCTL, "import", str(bad), "--ns", "user_profile/u2"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "bad.jsonl line 4" in r.stderr, r.stderr
    r = subprocess.run([*MEMCTL, "import", str(good), "--ns", "user_profile/u2", "--json"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert (rep["lines"], rep["written"], rep["skipped_duplicates"]) == (3, 2, 1)
    with SqliteBackend(store, embedding_model="local/use-multilingual-v3", dim=512) as b:
        assert b.count() == 2  # nothing from the bad file, one line of the good one deduped
    r = subprocess.run([*MEMCTL, "import", str(tmp_path / "MEMORY.md"), "--no-dedupe"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and ".jsonl files only" in r.stderr


# ---------------------------------------------------------------------------- same stored result
def _lines() -> list[dict]:
    """zh/en memories over 4 namespaces; some with retrieval context (embedded and indexed too)."""
    base = ["prefers bar charts for weekly revenue", "以后报表金额都用万元为单位", "asked for GMV excluding refunds",
            "张伟要求按地区的周营收", "Caroline went to a support group yesterday", "stopped using pie charts"]
    out = []
    for i in range(31):
        line = {"id": f"b{i:03d}", "content": f"{base[i % len(base)]} (item {i})",
                "namespace": f"{('user_profile', 'domain_facts')[i % 2]}/u{i % 3}",
                "created_at": f"2026-01-{1 + i % 28:02d}T12:00:00Z", "metadata": {"source": "crm"}}
        if i % 4 == 0:
            line["metadata"] = {"context": f"the previous turn talked about region {i}"}
        out.append(line)
    return out


def _stored(path: Path) -> tuple[list[tuple], dict[str, np.ndarray], list[tuple]]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, ns, content, metadata, type, created_at, updated_at, expires_at "
                            "FROM memories ORDER BY id").fetchall()
        vecs = {i: np.frombuffer(v, dtype="<f4") for i, v in conn.execute("SELECT id, vector FROM memories")}
        fts = conn.execute("SELECT m.id, f.nsk, f.terms FROM memories m JOIN memories_fts f ON f.rowid = m.rid "
                           "ORDER BY m.id").fetchall()
    finally:
        conn.close()
    return rows, vecs, fts


def test_bulk_import_stores_what_the_plain_path_stores(tmp_path: Path, embedder) -> None:
    """``memctl import`` with the embedding pipeline on (2 worker processes) and off (in-process),
    both through the bulk forward pass (memory.use_bulk), against ``write_many`` without batches
    (the service's own embedder, one transaction): the same rows, keyword postings and audit
    details; vectors equal within float32 rounding (max abs difference < 2e-6; not bit-identical:
    the bulk pass sums per-token products in another order)."""
    from typer.testing import CliRunner

    from memctl.cli import app
    from memory.policy.manager import MemoryManager

    lines = _lines()
    f = tmp_path / "same.jsonl"
    write_jsonl(f, lines)

    plain = tmp_path / "plain.sqlite"
    with open_store(plain, embedder) as s:
        s.write_many(validate_items(s, f))

    audits = {}
    for workers in (2, 1):
        store = tmp_path / f"w{workers}.sqlite"
        r = CliRunner().invoke(app, ["--path", str(store), "import", str(f), "--no-dedupe", "--json",
                                     "--batch-size", "7", "--workers", str(workers)])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["batches"] == 5
        mm = MemoryManager.from_settings(MemorySettings(path=str(store)), embedder=embedder)
        try:
            (ev,) = mm.audit.events(action="import")
        finally:
            mm.close()
        audits[workers] = (ev.action, ev.actor, ev.reason, {k: v for k, v in ev.details.items()
                                                           if k not in ("seconds", "memories_per_s")})
    assert audits[1] == audits[2]
    assert audits[1][3]["written"] == 31 and audits[1][3]["batches"] == 5

    p_rows, p_vecs, p_fts = _stored(plain)
    assert len(p_rows) == 31 and len(p_fts) == 31
    for workers in (2, 1):
        rows, vecs, fts = _stored(tmp_path / f"w{workers}.sqlite")
        assert rows == p_rows
        assert fts == p_fts
        assert vecs.keys() == p_vecs.keys()
        diff = max(float(np.abs(vecs[k] - p_vecs[k]).max()) for k in vecs)
        assert diff < 2e-6, (workers, diff)


def validate_items(svc: MemoryService, path: Path) -> list[NewMemory]:
    from memory.bulk import read_jsonl

    return [item for _, item in read_jsonl(path)]


def test_dedupe_reads_contents_like_scroll(svc: MemoryService) -> None:
    """The dedupe scan reads the namespace's texts (SqliteBackend.contents), not records; an expired
    memory is not a duplicate, exactly as with scroll (the path other backends take)."""
    from datetime import UTC, datetime

    from memory.bulk import drop_duplicates

    svc.write("User prefers bar charts", "user_profile/u1")
    svc.write("likes tea", "user_profile/u1", ttl_days=1, now=datetime(2020, 1, 1, tzinfo=UTC))  # expired
    svc.write("likes coffee", "user_profile/u1/sub")  # below the namespace, not in it
    assert svc.backend.contents(("user_profile", "u1")) == ["User prefers bar charts"]  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    recs = [svc.build_record(NewMemory(t, "user_profile/u1"), now)
            for t in (" User prefers  bar charts", "likes tea", "likes coffee", "likes tea")]
    fast = drop_duplicates(svc, recs)
    svc.backend.contents = None  # type: ignore[attr-defined] # the generic path: scroll
    slow = drop_duplicates(svc, recs)
    assert [r.content for r in fast[0]] == [r.content for r in slow[0]] == ["likes tea", "likes coffee"]
    assert fast[1] == slow[1] == 2


def test_an_explicit_id_of_another_namespace_names_its_line_and_moves_nothing(svc: MemoryService,
                                                                               tmp_path: Path) -> None:
    """``memctl import`` validates with validate_jsonl: an id already used in another namespace
    would move (overwrite) that memory, as ``write_many`` already refuses."""
    kept = svc.write("User prefers bar charts", "user_profile/u1", id="m-u1")
    f = tmp_path / "ids.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [
        {"content": "fine", "namespace": "user_profile/u2", "id": "new-1"},
        {"content": "takes u1's id", "namespace": "user_profile/u2", "id": "m-u1"},
    ]) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match="ids.jsonl line 2: id 'm-u1' is already used"):
        validate_jsonl(svc, f)
    assert svc.get("m-u1") == kept and svc.count() == 1
    f.write_text(json.dumps({"content": "an edit", "namespace": "user_profile/u1", "id": "m-u1"}) + "\n",
                 encoding="utf-8")
    assert [r.id for r in validate_jsonl(svc, f)] == ["m-u1"]  # its own namespace: a replacement


def test_ctrl_c_mid_import_says_what_was_written_and_a_rerun_finishes_it(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C in the middle of ``memctl import FILE.jsonl`` exited 130 with no word: how much
    was in, and whether running it again would duplicate, was left to guess. Now one line says
    how many memories (whole batches) were written and to run the same command again; the store
    holds exactly those batches, and the re-run stores the rest once."""
    import os
    import sqlite3

    from typer.testing import CliRunner

    from memctl.cli import app

    for k in [k for k in os.environ if k.startswith("MEMORY_")]:
        monkeypatch.delenv(k)
    store = tmp_path / "m.sqlite"
    src = write_jsonl(tmp_path / "in.jsonl", [{"content": f"warehouse {i} ships {i * 7} boxes on day {i % 28}",
                                               "namespace": f"domain_facts/w{i % 3}"} for i in range(50)])
    real = SqliteBackend.upsert
    calls = {"n": 0}

    def interrupted(self: SqliteBackend, *a: Any, **k: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:  # Ctrl-C while the third batch is being written
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(SqliteBackend, "upsert", interrupted)
    args = ["--path", str(store), "import", str(src), "--batch-size", "10", "--workers", "1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 130, res.output
    assert "interrupted" in res.output and "20 of 50" in res.output and "again" in res.output, res.output
    conn = sqlite3.connect(store)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT count(*) FROM memories").fetchone() == (20,)
    conn.close()
    monkeypatch.setattr(SqliteBackend, "upsert", real)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and "imported 30 memories" in res.output and "20 duplicates" in res.output, res.output
    with MemoryService.from_settings(MemorySettings(path=str(store))) as s:
        assert s.count() == 50
