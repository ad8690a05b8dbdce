"""Bulk import (memory.bulk, ``MemoryService.write_many(batch_size=...)``, ``memctl import FILE.jsonl``):
every line validated before anything is written, one transaction per batch, optional dedupe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memory.backends.sqlite import SqliteBackend
from memory.bulk import validate_jsonl
from memory.errors import InvalidInput, InvalidNamespace
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings

_SCRIPT = Path(sys.executable).parent / "memctl"
MEMCTL: list[str] = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "memctl.cli"]


@pytest.fixture()
def svc(tmp_path, embedder):
    path = tmp_path / "bulk.sqlite"
    s = MemoryService(SqliteBackend(path, embedding_model=embedder.name, dim=embedder.dim), embedder,
                      MemorySettings(path=str(path)))
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
