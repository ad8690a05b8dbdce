"""Bad input on the surfaces stop 30 swept: the Supervisor's memory tools called by a (scripted)
model, ``MemoryStore``'s ``index`` / ``ttl`` config, ``memctl import MEMORY.md`` with a hand-edited
file, ``memctl transcript tail``, ``memctl migrate`` onto a newer store, ``memctl eval retrieval``
with a malformed data folder, ``memctl delete`` with unknown ids and the MCP server's tools.

Each case: a clear error that says what to do (or the documented "memory is off" answer), and
what was stored before the bad call still there, unchanged (count and content), on a real SQLite
file with the packaged embedder.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memctl.cli import app
from memory.policy.manager import MemoryManager
from memory.policy.tools import OFF, make_memory_tools
from memory.settings import MemorySettings
from supervisor.shared import run_memory_tool


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("MEMORY_")]:
        monkeypatch.delenv(key)


def rows(path: Path) -> list[tuple[str, str, str]]:
    """(id, namespace, content) of every stored memory, read with plain sqlite3."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT id, ns, content FROM memories ORDER BY id").fetchall()
    finally:
        con.close()


def run(store: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["--path", str(store), *args], input=input)
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"{args}: {type(res.exception).__name__}: {res.exception}")
    return res.exit_code, res.output


def call_tool(tools: dict[str, Any], name: str, args: dict[str, Any], config: dict[str, Any]) -> str:
    """One tool call as the Supervisor graph runs it (supervisor.shared.run_memory_tool)."""
    msg = run_memory_tool(tools[name], {"name": name, "args": args, "id": "call-1"}, config)
    return str(msg.content)


# ------------------------------------------------------------------ memory tools (scripted LLM calls)
@pytest.mark.parametrize("config", [{"configurable": {"thread_id": "t1"}}, {"configurable": {}}, {}],
                         ids=["thread-only", "no-ids", "no-configurable"])
def test_steering_tools_respect_memory_off(config: dict[str, Any], tmp_path: Path, embedder: Any) -> None:
    """policy.anonymous 'off' and no user id: memory_list / memory_share / memory_restore answer that
    memory is off, like the other tools, and write nothing (memory_share wrote a thread's team memory,
    and without any id the three answered with a namespace error about a None label)."""
    path = tmp_path / "m.sqlite"
    settings = MemorySettings(path=str(path), policy={"anonymous": "off"})
    with MemoryManager.from_settings(settings, embedder=embedder) as mm:
        rid = mm.remember("The user prefers bar charts", "user_profile/u1").id
        mm.delete(rid)
        tools = {t.name: t for t in make_memory_tools(mm)}
        before = rows(path)
        for name, args in [("memory_share", {"content": "The team reports in yuan"}), ("memory_list", {}),
                           ("memory_restore", {"memory_id": rid})]:
            assert call_tool(tools, name, args, config) == OFF, name
        assert rows(path) == before
        assert mm.service.backend.count() == 0  # the deleted memory stayed in the trash


def test_steering_tools_without_any_id_say_memory_is_off(tmp_path: Path, embedder: Any) -> None:
    """Default policy (per-thread memory) but neither user nor thread id: the documented answer,
    not "namespace ('user_profile', None): label None is a NoneType"."""
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
        tools = {t.name: t for t in make_memory_tools(mm)}
        before = rows(path)
        for name, args in [("memory_share", {"content": "The team reports in yuan"}), ("memory_list", {})]:
            assert call_tool(tools, name, args, {"configurable": {"user_id": "  "}}) == OFF, name
        assert rows(path) == before


# ------------------------------------------------------------------ memctl import MEMORY.md (hand-edited)
@pytest.fixture
def exported(tmp_path: Path, embedder: Any) -> tuple[Path, Path]:
    """A store with three memories of user_profile/u1 and its fresh MEMORY.md export."""
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
        mm.remember("Reports go out on Mondays", "user_profile/u1")
        mm.remember("Revenue is net of refunds", "user_profile/u1", {"type": "domain_facts"})
    md = tmp_path / "MEMORY.md"
    code, out = run(path, "export", "--ns", "user_profile/u1", "--out", str(md))
    assert code == 0, out
    return path, md


BAD_BULLETS = {
    # name: (replace, with, what the error must say); every case also edits an earlier bullet
    "oversized_new_bullet": (None, "- " + "x" * 30_000, ("line 14", "30000 characters")),
    "nul_in_new_bullet": (None, "- Reports\x00 go out", ("line 14", "NUL")),
    "type_heading_too_long": ("## domain_facts", "## " + "t" * 80, ("line 13", "type", "at most 64 characters")),
}


@pytest.mark.parametrize("name", list(BAD_BULLETS))
def test_import_checks_every_bullet_before_writing_any(name: str, exported: tuple[Path, Path]) -> None:
    """A bullet the write path refuses (too long, NUL, a type heading longer than 64 characters)
    was found only when its turn came: the edits before it were already applied (and then showed
    as conflicts when the fixed file was imported again). Now every bullet is checked first, the
    error names its line, nothing is written, and --dry-run reports it too."""
    path, md = exported
    old, new, hints = BAD_BULLETS[name]
    text = md.read_text(encoding="utf-8").replace("The user prefers bar charts", "The user prefers line charts")
    text = text.rstrip("\n") + "\n" + new.replace("\\x00", "\x00") + "\n" if old is None else text.replace(old, new)
    md.write_text(text, encoding="utf-8")
    before = rows(path)
    for dry in (["--dry-run"], []):
        code, out = run(path, "import", str(md), *dry)
        assert code == 2, out
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "nothing was imported" in out, out
        for h in hints:
            assert h.lower() in out.lower(), (h, out)
        assert rows(path) == before
    code, out = run(path, "audit", "--action", "update", "--json")
    assert code == 0 and json.loads(out)["events"] == []


def test_import_accepts_a_file_saved_with_a_utf8_bom(exported: tuple[Path, Path]) -> None:
    """Windows Notepad saves UTF-8 with a byte-order mark: the export header was not recognised
    ("the file has no memctl:export header; say where its memories go with --ns")."""
    path, md = exported
    text = md.read_text(encoding="utf-8").replace("Reports go out on Mondays", "Reports go out on Tuesdays")
    md.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    before = rows(path)
    code, out = run(path, "import", str(md), "--json")
    assert code == 0, out
    res = json.loads(out)
    assert len(res["updated"]) == 1 and res["removed"] == [] and res["unchanged"] == 2
    after = {r[2] for r in rows(path)}
    assert after == {c for _, _, c in before} - {"Reports go out on Mondays"} | {"Reports go out on Tuesdays"}


# ------------------------------------------------------------------ MemoryStore index= / ttl= config
STORE_CONFIGS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # name: (MemoryStore kwargs, what the error must say)
    "index_fields_typo": ({"index": {"feilds": ["content"]}}, ("'feilds'", "'fields'")),
    "index_dims_typo": ({"index": {"dim": 512}}, ("'dim'", "'dims'")),
    "index_unknown_key": ({"index": {"fields": ["content"], "model": "x"}}, ("'model'", "embed")),
    "ttl_not_a_dict": ({"ttl": 60}, ("ttl must be a dict", "default_ttl")),
    "ttl_key_typo": ({"ttl": {"default_tll": 60}}, ("'default_tll'", "'default_ttl'")),
    "ttl_default_negative": ({"ttl": {"default_ttl": -5}}, ("default_ttl", "positive")),
    "ttl_default_text": ({"ttl": {"default_ttl": "60"}}, ("default_ttl", "number of minutes")),
    "ttl_refresh_not_bool": ({"ttl": {"refresh_on_read": "no"}}, ("refresh_on_read", "True or False")),
    "ttl_sweep_zero": ({"ttl": {"sweep_interval_minutes": 0}}, ("sweep_interval_minutes", "positive")),
}


@pytest.fixture(scope="module")
def store_file(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    from memory.store import MemoryStore

    path = tmp_path_factory.mktemp("store") / "m.sqlite"
    with MemoryStore(path=str(path), index={"fields": ["content"]}) as store:
        store.put(("memories", "u1"), "tea", {"content": "User drinks green tea every morning"})
    return path


@pytest.mark.parametrize("name", list(STORE_CONFIGS))
def test_store_config_typos_are_refused(name: str, store_file: Path) -> None:
    """A misspelt key of LangGraph's IndexConfig / TTLConfig was ignored: ``{"feilds": [...]}``
    embedded the whole value, ``{"default_tll": 60}`` kept items for ever, and ``ttl=60`` (not a
    dict) failed at the first put with ``AttributeError: 'int' object has no attribute 'get'``."""
    from memory.errors import InvalidConfig
    from memory.store import MemoryStore

    kwargs, hints = STORE_CONFIGS[name]
    before = rows(store_file)
    with pytest.raises(InvalidConfig) as exc:
        with MemoryStore(path=str(store_file), **kwargs) as store:
            store.put(("memories", "u1"), "new", {"content": "User lives in Hangzhou"})
    for h in hints:
        assert h in str(exc.value), (h, str(exc.value))
    assert rows(store_file) == before


def test_store_accepts_langgraph_index_and_ttl_configs(store_file: Path, tmp_path: Path) -> None:
    """What LangGraph's own stores take still works: fields / text_fields, dims, embed, the
    Postgres-only keys, an index_config copied from another store, every TTLConfig key."""
    import shutil

    from memory.store import MemoryStore

    path = tmp_path / "copy.sqlite"
    shutil.copyfile(store_file, path)
    index = {"dims": 512, "text_fields": ["content"], "distance_type": "cosine", "ann_index_config": {},
             "__tokenized_fields": []}
    ttl = {"default_ttl": 60, "refresh_on_read": True, "sweep_interval_minutes": 5, "omit_expired": True}
    with MemoryStore(path=str(path), index=index, ttl=ttl) as store:  # type: ignore[arg-type]
        store.put(("memories", "u1"), "city", {"content": "User lives in Hangzhou"})
        assert store.get(("memories", "u1"), "tea").value == {"content": "User drinks green tea every morning"}
        assert len(store.search(("memories",))) == 2


# ------------------------------------------------------------------ memctl transcript tail
def test_transcript_tail_does_not_create_a_misspelt_file(tmp_path: Path, embedder: Any) -> None:
    """``tail --file`` with a typo created an empty SQLite file there and said "(no messages)";
    now it says the file does not exist and creates nothing. Without --file and no store yet, tail
    still answers "(no messages)", without creating the store."""
    path = tmp_path / "m.sqlite"
    code, out = run(path, "transcript", "append", "Quarterly numbers are in", "--sender", "u1", "--id", "m1")
    assert code == 0, out
    typo = tmp_path / "m.sqlit"
    code, out = run(path, "transcript", "tail", "--file", str(typo))
    assert code == 2 and out.startswith("error:") and "--file" in out and "append" in out, out
    assert not typo.exists()
    code, out = run(path, "transcript", "tail", "--json")
    assert code == 0 and [m["text"] for m in json.loads(out)] == ["Quarterly numbers are in"]
    fresh = tmp_path / "none" / "m.sqlite"
    code, out = run(fresh, "transcript", "tail")
    assert code == 0 and "(no messages)" in out, out
    code, out = run(fresh, "transcript", "tail", "--json")
    assert code == 0 and json.loads(out) == []
    assert not fresh.parent.exists()


# ------------------------------------------------------------------ memctl migrate onto / from a newer store
@pytest.mark.parametrize("newer", ["source", "destination"])
def test_migrate_names_the_newer_store_and_does_not_suggest_a_rerun(newer: str, tmp_path: Path,
                                                                    embedder: Any) -> None:
    """A store written by a newer version: the error said "this store ... or use another
    MEMORY_PATH (re-run the same command to resume)" — neither which of the two stores, nor a
    remedy that works (re-running fails the same way). Both stores stay as they were."""
    paths = {role: tmp_path / f"{role}.sqlite" for role in ("source", "destination")}
    for role, path in paths.items():
        with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
            mm.remember(f"The {role} store holds this fact", "user_profile/u1")
    con = sqlite3.connect(paths[newer])
    con.execute("INSERT INTO schema_migrations VALUES (99)")
    con.commit()
    con.close()
    before = {role: rows(p) for role, p in paths.items()}
    code, out = run(paths["source"], "migrate", "--from", f"sqlite:{paths['source']}",
                    "--to", f"sqlite:{paths['destination']}")
    assert code == 1, out
    flat = "".join(out.split())  # rich wraps long lines anywhere, paths included
    assert f"the{newer}sqlite:{paths[newer]}" in flat and "newerversion" in flat, out
    assert "resume" not in flat and "MEMORY_PATH" not in flat, flat
    assert ("--from" if newer == "source" else "--to") in flat, flat
    assert {role: rows(p) for role, p in paths.items()} == before


# ------------------------------------------------------------------ memctl eval retrieval --data (malformed)
TURN = {"conversation_id": "c1", "session_id": 1, "session_date": "2025-03-03T10:15", "dia_id": "D1:1",
        "speaker": "Fang", "text": "I lead the growth analytics team at the mall."}
QUESTION = {"conversation_id": "c1", "question_id": "c1:q0", "question": "Which team does Fang lead?",
            "category": "en-en", "evidence": ["D1:1"]}
BAD_DATA: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # name: (file, the malformed second line, what the error must say)
    "evidence_is_a_string": ("questions.jsonl", {**QUESTION, "evidence": "D1:1"}, ("questions.jsonl:2", "evidence",
                                                                                     "list")),
    "evidence_is_a_number": ("questions.jsonl", {**QUESTION, "evidence": 3}, ("questions.jsonl:2", "evidence")),
    "turn_without_text": ("turns.jsonl", {k: v for k, v in TURN.items() if k != "text"}, ("turns.jsonl:2", "'text'")),
    "question_without_question": ("questions.jsonl", {k: v for k, v in QUESTION.items() if k != "question"},
                                  ("questions.jsonl:2", "'question'")),
    "bad_session_date": ("turns.jsonl", {**TURN, "session_date": "last spring"}, ("turns.jsonl:2", "session_date")),
}


@pytest.mark.parametrize("name", list(BAD_DATA))
def test_eval_retrieval_names_the_bad_line(name: str, tmp_path: Path, embedder: Any) -> None:
    """Evidence written as one string ("D1:1") was read character by character and every such
    question scored as a miss, silently; a line lacking a field was reported without its line."""
    store = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(store)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
    before = rows(store)
    data = tmp_path / "data"
    data.mkdir()
    file, bad, hints = BAD_DATA[name]
    good = {"turns.jsonl": [TURN, {**TURN, "dia_id": "D1:2", "text": "We report GMV net of refunds."}],
            "questions.jsonl": [QUESTION, QUESTION]}
    good[file] = [good[file][0], bad]
    for f, lines in good.items():
        (data / f).write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    code, out = run(store, "eval", "retrieval", "--data", str(data), "--json")
    assert code == 2, out
    flat = "".join(out.split())
    assert out.strip().startswith("error:"), out
    for h in hints:
        assert "".join(h.split()) in flat, (h, out)
    assert rows(store) == before


# ------------------------------------------------------------------ the MCP server's tools
def mcp_calls(path: Path, embedder: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
    """(is_error, text) of each tool call, through the official SDK's client on the server
    object itself (in process: the same tool layer as stdio / HTTP)."""
    import asyncio

    pytest.importorskip("mcp")
    from mcp import Client

    from memctl.mcp_server import ScopedMemory, build_server

    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        server = build_server(ScopedMemory(mm, ["user_profile/u1"]))

        async def main() -> list[tuple[bool, str]]:
            async with Client(server) as client:
                out = []
                for name, args in calls:
                    res = await client.call_tool(name, args)
                    out.append((bool(res.is_error), "\n".join(getattr(c, "text", "") for c in res.content)))
                return out

        return asyncio.run(main())


@pytest.fixture
def mcp_store(tmp_path: Path, embedder: Any) -> Path:
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts over pie charts", "user_profile/u1", {"tags": ["charts"]})
    return path


def test_mcp_save_refuses_a_flood_of_tags(mcp_store: Path, embedder: Any) -> None:
    """A model's save with 100,000 tags, or one tag of 100,000 characters, was stored as is (a
    500 KB metadata blob on one memory); tags are now capped on every write path, as source and
    agent already were, and the server answers with an error it can act on."""
    before = rows(mcp_store)
    res = mcp_calls(mcp_store, embedder, [
        ("save", {"content": "The user drinks green tea", "tags": ["tea"] * 100_000}),
        ("save", {"content": "The user drinks coffee", "tags": ["t" * 100_000]}),
        ("save", {"content": "The user drinks water", "tags": ["drinks", "water"]}),
    ])
    assert res[0][0] and "at most 64" in res[0][1] and len(res[0][1]) < 300, res[0]
    assert res[1][0] and "at most 128" in res[1][1] and len(res[1][1]) < 300, res[1]
    assert not res[2][0] and json.loads(res[2][1])["status"] == "added"
    after = rows(mcp_store)
    assert len(after) == len(before) + 1 and set(before) <= set(after)
    with MemoryManager.from_settings(MemorySettings(path=str(mcp_store)), embedder=embedder) as mm:
        tags = sorted(r.metadata.tags for r in mm.service.list("user_profile/u1"))
    assert tags == [("charts",), ("drinks", "water")]


def test_mcp_errors_say_what_is_wrong_and_stay_short(mcp_store: Path, embedder: Any) -> None:
    """timeline(date="0001-01-01") answered "is not YYYY-MM-DD" (it is; it is out of range), and an
    unknown id of 100,000 characters was echoed whole in the error of timeline and forget."""
    before = rows(mcp_store)
    res = mcp_calls(mcp_store, embedder, [
        ("timeline", {"date": "0001-01-01"}),
        ("timeline", {"date": "yesterday"}),
        ("timeline", {"id": "a" * 100_000}),
        ("forget", {"id": "b" * 100_000}),
    ])
    assert all(err for err, _ in res), res
    assert "year 1000" in res[0][1] and "not YYYY-MM-DD" not in res[0][1], res[0]
    assert "YYYY-MM-DD" in res[1][1], res[1]
    for _, text in res[2:]:
        assert "no memory" in text and "search" in text and len(text) < 300, text[:400]
    assert rows(mcp_store) == before


# ------------------------------------------------------------------ memctl delete / history with unknown ids
def test_delete_names_the_ids_it_did_not_find(tmp_path: Path, embedder: Any) -> None:
    """``memctl delete ID zzz`` printed "deleted 1" and exited 1 without saying which id was not
    found; now it names it (stderr) and says where the ids are. The known one is deleted, the
    other memory is untouched."""
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        keep = mm.remember("The user prefers bar charts", "user_profile/u1").id
        drop = mm.remember("Reports go out on Mondays", "user_profile/u1").id
    code, out = run(path, "delete", drop[:12], "zzz", "--json")
    assert code == 1, out
    assert json.loads(out[out.index("{"):out.rindex("}") + 1]) == {"deleted": 1}
    assert "zzz" in out and "not found" in out and "memctl list" in out, out
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        assert [r.id for r in mm.service.list("user_profile/u1")] == [keep]
        assert mm.service.get(keep).content == "The user prefers bar charts"
    code, out = run(path, "history", "zzz")
    assert code == 2 and "zzz" in out and "memctl list" in out, out


# ------------------------------------------------------------------ MemoryStore.search(filter=...) errors
BAD_FILTERS = {
    "unknown_operator": {"content": {"$regex": "tea"}},
    "not_a_dict": "content=tea",
    "bad_key": {"content; drop": "x"},
    "operator_mixed_with_a_field": {"meta": {"$gt": 1, "city": "Hangzhou"}},
}


@pytest.mark.parametrize("name", list(BAD_FILTERS))
def test_store_search_bad_filter_is_a_memory_error(name: str, store_file: Path) -> None:
    """A bad filter raised a bare ValueError (not a MemoryLayerError, so callers that handle the
    memory layer's errors — tools, the MCP server — did not catch it); an operator mixed with a
    plain field in one condition was found only while items were being compared."""
    from memory.errors import InvalidFilter, MemoryLayerError
    from memory.store import MemoryStore

    before = rows(store_file)
    with MemoryStore(path=str(store_file), index={"fields": ["content"]}) as store:
        with pytest.raises(InvalidFilter) as exc:
            store.search(("memories",), filter=BAD_FILTERS[name])  # type: ignore[arg-type]
        assert isinstance(exc.value, MemoryLayerError) and isinstance(exc.value, ValueError)
        assert [i.key for i in store.search(("memories",), filter={"content": {"$ne": "x"}})] == ["tea"]
    assert rows(store_file) == before


# ------------------------------------------------------------------ memctl forget-user (unknown / escaped ids)
@pytest.mark.parametrize("user", ["team/alice", "a%41", "x" * 300])
def test_forget_user_points_from_an_app_user_id_to_its_stored_label(user: str, tmp_path: Path,
                                                                    embedder: Any) -> None:
    """The graph stores a user id as an escaped label (``team/alice`` -> ``team%2Falice``, a long id
    -> a prefix and its hash). ``forget-user`` with the id the app used failed with "is not a
    namespace label" (no way to find the label), or — for an id that is itself a valid label,
    like ``a%41`` — forgot an empty namespace and reported "deleted 0 ... clean" while the user's
    memories stayed. Now it names the label to pass and forgets nothing until then."""
    from memory.policy.identity import user_label

    path = tmp_path / "m.sqlite"
    label = user_label(user)
    assert label != user
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", ("user_profile", label))
        mm.remember("Someone else likes pie charts", "user_profile/u2")
    before = rows(path)
    code, out = run(path, "forget-user", user, "--yes")
    assert code == 2, out
    assert label in "".join(out.split()), out
    assert rows(path) == before
    code, out = run(path, "forget-user", label, "--yes", "--json")
    assert code == 0 and json.loads(out)["deleted"] == 1, out
    assert [r[2] for r in rows(path)] == ["Someone else likes pie charts"]


def test_forget_user_of_nobody_says_nothing_was_stored(tmp_path: Path, embedder: Any) -> None:
    """A user id with nothing stored (a typo): "deleted 0 memories ... left: {...}" read like a
    successful erasure; now a note says no memory of that id was found and where ids are listed."""
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
    before = rows(path)
    code, out = run(path, "forget-user", "u11", "--yes")
    assert code == 0, out
    assert "no memories" in out and "memctl stats" in out, out
    assert rows(path) == before


def test_import_refuses_a_daily_note(exported: tuple[Path, Path], tmp_path: Path) -> None:
    """A daily note (``memctl export --daily``) given to ``memctl import``: the error said the file
    had no memctl header; with the --ns it asked for, each "- 15:51 add (memctl): TEXT · `id`" line
    was read as an edit of that memory — its content overwritten with the log line and its type
    set to the section's namespace. Now the file is refused as a daily note, with or without --ns."""
    path, _ = exported
    code, out = run(path, "export", "--daily", str(tmp_path / "daily"))
    assert code == 0, out
    (note,) = (tmp_path / "daily").glob("*.md")
    before = rows(path)
    for extra in ([], ["--ns", "user_profile/u1"]):
        code, out = run(path, "import", str(note), *extra)
        assert code == 2, out
        assert "daily note" in out and "export --ns" in out, out
        assert rows(path) == before


# ------------------------------------------------------------------ the Supervisor graph (no model) on odd input
def test_supervisor_answer_lists_a_repeated_statement_once(tmp_path: Path, embedder: Any) -> None:
    """A user message repeating one preference 2,000 times: one memory is stored (dedupe), but the
    offline Supervisor's reply listed the sentence 2,000 times ("好的，已记住：X；X；X；..."). Empty,
    odd and non-text conversations still get a plain answer and leave the store as it was."""
    from agents import default_agents
    from supervisor import ScriptedChatModel, build_supervisor_graph

    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
        graph = build_supervisor_graph(default_agents(ScriptedChatModel(), reports_dir=tmp_path), mm)
        cfg = {"configurable": {"user_id": "u1"}}
        before = rows(path)
        for state in ({"messages": []}, {}, {"messages": [("ai", "hello")]}, {"messages": [("user", "   ")]},
                      {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                                   "image_url": {"url": "data:,"}}]}]}):
            out = graph.invoke(state, cfg)
            assert out["messages"][-1].content in ("OK.", "好的。"), state
        assert rows(path) == before
        out = graph.invoke({"messages": [("user", "以后报表都用柱状图。" * 2000)]}, cfg)
        answer = out["messages"][-1].content
        assert answer == "好的，已记住：以后报表都用柱状图。", answer[:200]
        assert [r.content for r in mm.service.list("user_profile/u1")].count("以后报表都用柱状图。") == 1
        assert set(before) <= set(rows(path)) and len(rows(path)) == len(before) + 1


@pytest.mark.parametrize(("name", "args", "hints"), [
    ("memory_write", {"content": "likes tea", "memory_type": "bogus"}, ("memory_type", "'user_profile'")),
    ("memory_write", {"content": "likes tea"}, ("memory_type", "required")),
    ("memory_search", {"query": "charts", "top_k": "lots"}, ("top_k", "integer")),
    ("memory_delete", {"memory_id": 5}, ("memory_id", "string")),
])
def test_tool_calls_with_bad_arguments_get_a_short_answer(name: str, args: dict[str, Any], hints: tuple[str, ...],
                                                          tmp_path: Path, embedder: Any) -> None:
    """A model's call with a missing, unknown-valued or wrong-typed argument came back as pydantic's
    multi-line dump with its documentation URL; now one line per argument and what to do."""
    path = tmp_path / "m.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
        tools = {t.name: t for t in make_memory_tools(mm)}
        before = rows(path)
        msg = run_memory_tool(tools[name], {"name": name, "args": args, "id": "call-1"},
                              {"configurable": {"user_id": "u1", "thread_id": "t1"}})
        assert msg.status == "error"
        text = str(msg.content)
        assert text.startswith(f"ERROR: {name}: bad arguments") and "\n" not in text, text
        assert "pydantic.dev" not in text and "call it again" in text and len(text) < 300, text
        for h in hints:
            assert h in text, (h, text)
        assert rows(path) == before


def test_supervisor_graph_bad_context(tmp_path: Path, embedder: Any, caplog: pytest.LogCaptureFixture) -> None:
    """``context={"userid": "u1"}`` failed with "SupervisorContext.__init__() got an unexpected keyword
    argument 'userid'"; ``context="u1"`` (a bare string) was read as no user, and with a thread id
    the user's preference went to that thread's namespace; ``now`` as an ISO string was ignored
    (wall clock). Now: a clear error for a misspelt key or a bad ``now``, memory off (logged, nothing
    written) for a context of the wrong type, and an ISO ``now`` is used."""
    from datetime import datetime, timezone

    from agents import default_agents
    from memory.errors import InvalidInput
    from supervisor import ScriptedChatModel, build_supervisor_graph

    path = tmp_path / "m.sqlite"
    pref = {"messages": [("user", "以后报表金额都用万元为单位")]}
    with MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder) as mm:
        mm.remember("The user prefers bar charts", "user_profile/u1")
        graph = build_supervisor_graph(default_agents(ScriptedChatModel(), reports_dir=tmp_path), mm)
        cfg = {"configurable": {"thread_id": "t1"}}
        before = rows(path)
        with pytest.raises(InvalidInput, match="user_id"):
            graph.invoke(pref, cfg, context={"userid": "u1"})
        with pytest.raises(InvalidInput, match="now"):
            graph.invoke(pref, cfg, context={"user_id": "u1", "now": 5})
        with caplog.at_level("WARNING"):
            graph.invoke(pref, cfg, context="u1")
        assert "context must be" in caplog.text
        assert rows(path) == before
        graph.invoke(pref, cfg, context={"user_id": "u1", "now": "2025-01-06T09:00:00+00:00"})
        (new,) = [r for r in mm.service.list("user_profile/u1") if "万元" in r.content]
        assert new.created_at == datetime(2025, 1, 6, 9, tzinfo=timezone.utc)
        assert set(before) <= set(rows(path)) and len(rows(path)) == len(before) + 1


# ------------------------------------------------------------------ memctl export --out onto the store
def test_export_never_overwrites_the_store_or_a_database(exported: tuple[Path, Path], tmp_path: Path) -> None:
    """``memctl export --out memory.sqlite`` said "not overwritten (edited by hand) ... or pass
    --force"; with --force the store file was replaced by Markdown and every memory was lost. The
    store, its side files and any SQLite database are now refused as --out, --force or not."""
    path, _ = exported
    other = tmp_path / "transcript.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    code, out = run(path, "transcript", "append", "hello", "--sender", "u1")  # creates the -wal side file
    before = rows(path)
    for target in (path, Path(f"{path}-wal"), other):
        for force in ([], ["--force"]):
            code, out = run(path, "export", "--ns", "user_profile/u1", "--out", str(target), *force)
            assert code == 2, (target, force, out)
            assert "choose another --out" in out and "edited by hand" not in out, out
    assert rows(path) == before
    assert other.read_bytes().startswith(b"SQLite format 3\x00")
