"""``memctl collection|index|export|import|eval collections`` through the real console script
(subprocesses, a real SQLite file, the real model)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings
from tests.integration.test_lazy_imports import _memctl

_SCRIPT = Path(sys.executable).parent / "memctl"
MEMCTL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "memctl.cli"]


def run(store: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(MEMORY_PATH=str(store), HF_HUB_OFFLINE="1")
    return subprocess.run([*MEMCTL, *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd)


@pytest.fixture
def notes(tmp_path):
    d = tmp_path / "notes"
    (d / "wiki").mkdir(parents=True)
    (d / "wiki" / "gmv.md").write_text("# GMV\n\n## Definition\n\nDelivery fees are not part of GMV.\n",
                                       encoding="utf-8")
    (d / "todo.md").write_text("# Todo\n\nAsk Priya about the staging naming.\n", encoding="utf-8")
    return d


def test_collection_commands(tmp_path, notes):
    store = tmp_path / "memory.sqlite"
    r = run(store, "collection", "add", "notes", str(notes), "--json")
    assert r.returncode == 0, r.stderr
    added = json.loads(r.stdout)
    assert added["collection"]["namespace"] == "docs/notes" and added["index"][0]["chunks_written"] == 2
    (notes / "todo.md").write_text("# Todo\n\nAsk Priya about the staging naming.\n\n## Later\n\nRotate keys.\n",
                                   encoding="utf-8")
    r = run(store, "index", "--json")
    assert r.returncode == 0, r.stderr
    (rep,) = json.loads(r.stdout)
    assert rep["changed"] == ["todo.md"] and rep["unchanged"] == 1 and rep["chunks_written"] == 2
    r = run(store, "search", "is the delivery fee part of GMV?", "--ns", "docs/notes", "--json")
    hit = json.loads(r.stdout)[0]
    assert hit["metadata"]["extra"]["path"] == "wiki/gmv.md" and hit["metadata"]["extra"]["line_start"] == 5
    r = run(store, "search", "is the delivery fee part of GMV?", "--ns", "docs/notes")
    assert "gmv.md:5" in r.stdout.replace("\n", "").replace("│", "").replace(" ", "")  # the table cites file:line
    listed = json.loads(run(store, "collection", "list", "--json").stdout)
    assert [(c["name"], c["files"], c["chunks"]) for c in listed] == [("notes", 2, 3)]
    bad = run(store, "collection", "add", "a/b", str(notes))
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "separator" in bad.stderr
    assert run(store, "index", "missing").returncode == 2
    bad = run(store, "index", "--watch", "--interval", "0")  # refused before the first pass, not after it
    assert bad.returncode == 2 and "--interval" in bad.stderr and not bad.stdout
    r = run(store, "collection", "add", "txt", str(notes), "--glob", "*.txt")  # nothing matches: say so
    assert r.returncode == 0 and "no file matches" in r.stdout
    assert run(store, "collection", "remove", "txt").returncode == 0
    r = run(store, "collection", "remove", "notes", "--json")
    assert json.loads(r.stdout) == {"removed": "notes", "chunks_deleted": 3}
    assert (notes / "wiki" / "gmv.md").exists() and json.loads(run(store, "collection", "list", "--json").stdout) == []


def test_export_edit_import_and_daily(tmp_path, embedder):
    store = tmp_path / "memory.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(store)), embedder=embedder) as mm:
        keep = mm.remember("以后报表金额都用万元为单位", "user_profile/u1").id
        drop = mm.remember("The user prefers pie charts", "user_profile/u1").id
        mm.remember("User u12 likes tables", "user_profile/u12")
    md = tmp_path / "MEMORY.md"
    r = run(store, "export", "--ns", "user_profile/u1", "--format", "md", "--out", str(md))
    assert r.returncode == 0, r.stderr
    text = md.read_text(encoding="utf-8")
    assert keep in text and drop in text and "u12" not in text
    edited = "\n".join(line for line in text.splitlines() if drop not in line) + "\n- Answer in English\n"
    md.write_text(edited, encoding="utf-8")
    dry = json.loads(run(store, "import", str(md), "--dry-run", "--json").stdout)
    assert dry["add"] == ["Answer in English"] and [x["id"] for x in dry["remove"]] == [drop]
    r = run(store, "import", str(md), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["removed"] == [drop] and [a["status"] for a in res["added"]] == ["added"]
    # the edited file is not overwritten by a new export unless forced
    r = run(store, "export", "--ns", "user_profile/u1", "--out", str(md))
    assert r.returncode == 2 and "edited by hand" in r.stderr and md.read_text(encoding="utf-8") == edited
    assert run(store, "export", "--ns", "user_profile/u1", "--out", str(md), "--force").returncode == 0
    assert "Answer in English" in md.read_text(encoding="utf-8") and drop not in md.read_text(encoding="utf-8")
    r = run(store, "export", "--daily", str(tmp_path / "daily"), "--ns", "user_profile/u1", "--json")
    files = json.loads(r.stdout)["files"]
    assert len(files) == 1 and set(files.values()) == {"written"}
    day = Path(next(iter(files))).read_text(encoding="utf-8")
    assert "Answer in English" in day and "delete" in day and "u12" not in day
    for args in (["export"], ["export", "--ns", "u1", "--format", "json"], ["import", str(tmp_path / "nope.md")],
                 ["import", str(tmp_path)], ["export", "--ns", "user_profile/u1", "--out", str(tmp_path), "--force"]):
        bad = run(store, *args)
        assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr, args
    assert tmp_path.is_dir() and md.read_text(encoding="utf-8").count("- ") >= 2  # nothing was clobbered


def test_eval_collections_command(tmp_path):
    data = tmp_path / "data"
    (data / "notes").mkdir(parents=True)
    for i, (topic, fact) in enumerate([("GMV", "Delivery fees are not part of GMV"),
                                       ("Retention", "Retention counts users ordering again within 28 days"),
                                       ("CAC", "CAC uses a 7-day click attribution window")]):
        (data / "notes" / f"n{i}.md").write_text(f"# {topic}\n\n## Definition\n\n{fact}.\n", encoding="utf-8")
    qs = [{"id": "a", "question": "Is the delivery fee in GMV?", "path": "n0.md", "answer": "Delivery fees"},
          {"id": "b", "question": "How long is the CAC attribution window?", "path": "n2.md", "answer": "7-day click"}]
    (data / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in qs) + "\n", encoding="utf-8")
    r = run(tmp_path / "unused.sqlite", "eval", "collections", "--data", str(data), "--edits", "2", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["overall"]["n"] == 2 and res["overall"]["R@5"] == 1.0
    assert res["timing"]["files"] == 3 and res["timing"]["reindex_one_edit_s"] is not None
    assert not (tmp_path / "unused.sqlite").exists()  # the evaluation never touches the user's store
    assert run(tmp_path / "unused.sqlite", "eval", "collections", "--data", str(tmp_path)).returncode == 2
    bad = run(tmp_path / "unused.sqlite", "eval", "collections", "--data", str(data), "--edits", "-1")
    assert bad.returncode == 2 and "--edits" in bad.stderr
    qs.append({"id": "c", "question": "Where is the roadmap?", "path": "roadmap.md", "answer": "Q3"})
    (data / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in qs) + "\n", encoding="utf-8")
    bad = run(tmp_path / "unused.sqlite", "eval", "collections", "--data", str(data))
    assert bad.returncode == 2 and "roadmap.md" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args", [["collection", "list", "--json"], ["index", "--json"]])
def test_light_collection_commands_load_no_model(tmp_path, notes, embedder, args):
    from memory.collections import Collections

    store = tmp_path / "memory.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(store)), embedder=embedder) as mm, \
            Collections(mm.service, mm.audit) as docs:
        docs.add("notes", notes)
        docs.index()
    rep, out = _memctl(store, tmp_path, *args)
    assert rep == {"code": 0, "heavy": []}, out
    assert json.loads(out)


def test_mcp_command_rejects_bad_options_before_serving(tmp_path):
    store = tmp_path / "memory.sqlite"
    for args, why in ((["mcp", "--ns", "user_profile//u1"], "empty label"),
                      (["mcp", "--ns", "u1", "--http", "0"], "port"), (["mcp"], "--ns")):
        r = run(store, *args)
        assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
    with socket.socket() as taken:  # a port someone else listens on: our error, before the store opens
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run(store, "mcp", "--ns", "u1", "--http", str(port))
        assert r.returncode == 2 and r.stderr.startswith("error: cannot listen"), r.stderr
    r = run(store, "mcp", "--ns", "u1", "--http", "8765", "--host", "no-such-host.invalid")
    assert r.returncode == 2 and "--host" in r.stderr, r.stderr
    assert not store.exists()
