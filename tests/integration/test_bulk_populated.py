"""Bulk import into a store that already holds memories: what is stored equals a fresh write of
the same final contents (rows, keyword rows, bm25 scores, vectors), whether a batch inserts new
memories, replaces existing ones by id, or both; and an import stopped mid-way keeps every
committed batch whole and searchable.

The upsert skips the keyword-row DELETE for rows it inserts (a new AUTOINCREMENT rid cannot have
one) and inserts the keyword rows of a batch together (memory.backends.sqlite); these tests pin
that an update in the same batch still replaces its old keyword row.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.backends.sqlite import SqliteBackend
from memory.errors import InvalidInput
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings
from tests.integration.test_bulk_import import open_store, write_jsonl

T0 = "2026-01-05T12:00:00Z"
QUERIES = ["charts", "revenue", "营收", "obsolete", "updated", "region"]


def _pre() -> list[NewMemory]:
    """40 memories already in the store; p000-p009 get replaced by the import."""
    out = []
    for i in range(40):
        text = (f"obsolete wording about bar charts {i}" if i < 10
                else ("weekly revenue by region {i}", "张伟要求按地区的周营收 {i}")[i % 2].format(i=i))
        out.append(NewMemory(text, f"user_profile/u{i % 4}", {"source": "crm"}, id=f"p{i:03d}",
                             created_at=datetime(2026, 1, 1 + i % 20, 9, tzinfo=UTC)))
    return out


def _lines() -> list[dict[str, Any]]:
    """30 lines, updates (ids p000-p009, same namespace) interleaved with new memories."""
    out: list[dict[str, Any]] = []
    for i in range(30):
        if i % 3 == 0:
            k = i // 3
            line: dict[str, Any] = {"id": f"p{k:03d}", "namespace": f"user_profile/u{k % 4}",
                                    "content": f"updated: prefers line charts for revenue {k}"}
        else:
            line = {"id": f"n{i:03d}", "namespace": f"domain_facts/u{i % 3}",
                    "content": ("GMV excludes refunds in region {i}", "以后报表金额都用万元为单位 {i}")[i % 2].format(i=i)}
        line["created_at"] = T0
        if i % 5 == 0:
            line["metadata"] = {"context": f"the previous turn talked about region {i}"}
        out.append(line)
    return out


def _final(lines: list[dict[str, Any]]) -> list[NewMemory]:
    """What the store should hold after the import: the untouched pre-existing memories + the file."""
    replaced = {x["id"] for x in lines}
    kept = [m for m in _pre() if m.id not in replaced]
    return kept + [NewMemory(x["content"], x["namespace"], x.get("metadata"), id=x["id"],
                             created_at=datetime.fromisoformat(x["created_at"].replace("Z", "+00:00")))
                   for x in lines]


def _state(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")  # raises if torn
        rows = conn.execute("SELECT id, ns, content, metadata, type, created_at, updated_at, expires_at "
                            "FROM memories ORDER BY id").fetchall()
        vecs = {i: np.frombuffer(v, dtype="<f4") for i, v in conn.execute("SELECT id, vector FROM memories")}
        fts = conn.execute("SELECT m.id, f.nsk, f.terms FROM memories m JOIN memories_fts f ON f.rowid = m.rid "
                           "ORDER BY m.id").fetchall()
        n_fts = conn.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0]
        bm25 = {}
        for q in QUERIES:
            from memory.text import fts_document

            terms = fts_document(q).split()
            if not terms:
                continue
            match = " OR ".join(f'terms:"{t}"' for t in terms)
            bm25[q] = conn.execute(
                "SELECT m.id, bm25(memories_fts) FROM memories_fts f JOIN memories m ON m.rid = f.rowid "
                "WHERE memories_fts MATCH ? ORDER BY m.id", (match,)).fetchall()
    finally:
        conn.close()
    return {"rows": rows, "vecs": vecs, "fts": fts, "n_fts": n_fts, "bm25": bm25}


def test_import_into_a_populated_store_stores_what_a_fresh_write_stores(tmp_path: Path, embedder) -> None:
    from typer.testing import CliRunner

    from memctl.cli import app

    lines = _lines()
    f = write_jsonl(tmp_path / "mixed.jsonl", lines)

    store = tmp_path / "populated.sqlite"
    with open_store(store, embedder) as s:
        s.write_many(_pre())
    # Batches of 7 over lines alternating update / new / new: every batch mixes both kinds.
    r = CliRunner().invoke(app, ["--path", str(store), "import", str(f), "--no-dedupe", "--json",
                                 "--batch-size", "7", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["written"], json.loads(r.stdout)["batches"]) == (30, 5)

    fresh = tmp_path / "fresh.sqlite"
    with open_store(fresh, embedder) as s:
        s.write_many(_final(lines))

    got, want = _state(store), _state(fresh)
    assert len(got["rows"]) == 60 and got["n_fts"] == 60  # one keyword row per memory, none left over
    assert got["rows"] == want["rows"]
    assert got["fts"] == want["fts"]
    assert got["bm25"].keys() == want["bm25"].keys() and "obsolete" in got["bm25"]
    assert got["bm25"]["obsolete"] == []  # the replaced texts' terms are gone from the index
    for q, hits in want["bm25"].items():
        assert [i for i, _ in got["bm25"][q]] == [i for i, _ in hits], q
        assert np.allclose([b for _, b in got["bm25"][q]], [b for _, b in hits], rtol=0, atol=1e-9), q
    assert got["vecs"].keys() == want["vecs"].keys()
    diff = max(float(np.abs(got["vecs"][k] - want["vecs"][k]).max()) for k in got["vecs"])
    assert diff < 2e-6, diff  # the bulk forward pass: same vectors up to float32 rounding

    with MemoryService.from_settings(MemorySettings(path=str(store)), embedder=embedder) as s:
        hits = s.search("line charts for revenue", ("user_profile",), top_k=3)
        assert hits and hits[0].record.content.startswith("updated: ")


class _Poisoned:
    """The packaged model under another name (so bulk writes use it as is), failing on one text:
    an embedding worker that dies mid-import."""

    name = "poisoned-test-model"

    def __init__(self, inner: Any):
        self._inner = inner
        self.dim = inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if any("POISON" in t for t in texts):
            raise RuntimeError("embedding worker died")
        return np.asarray(self._inner.embed_documents(texts), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self._inner.embed_query(text), dtype=np.float32)


def test_an_interrupted_import_keeps_every_committed_batch_whole_and_searchable(tmp_path: Path,
                                                                                embedder) -> None:
    emb = _Poisoned(embedder)
    store = tmp_path / "cut.sqlite"
    settings = MemorySettings(path=str(store))
    items = [NewMemory(f"fact {i}: revenue of region {i} grew" if i != 12 else "POISON", f"domain_facts/u{i % 3}")
             for i in range(20)]
    with MemoryService(SqliteBackend(store, embedding_model=emb.name, dim=emb.dim), emb, settings) as s:
        s.write_many(_pre()[10:20])  # a populated store
        with pytest.raises(InvalidInput, match="stopped after 10 of 20 memories"):
            s.write_many(items, batch_size=5, workers=1)
    state = _state(store)  # FTS integrity-check included
    assert len(state["rows"]) == 20 and state["n_fts"] == 20  # 10 before + two whole batches
    assert {r[2] for r in state["rows"]} >= {f"fact {i}: revenue of region {i} grew" for i in range(10)}
    with MemoryService(SqliteBackend(store, embedding_model=emb.name, dim=emb.dim), emb, settings) as s:
        hits = s.search("revenue of region 7 grew", ("domain_facts",), top_k=1)
        assert hits and hits[0].record.content == "fact 7: revenue of region 7 grew"
        assert s.count(("domain_facts",)) == 10
