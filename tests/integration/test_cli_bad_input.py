"""``memctl`` on bad arguments: one ``error:`` line and exit code 2, never a traceback, and read
commands never create a store. In-process through Typer's CliRunner (no subprocess start-up)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memctl.cli import app
from memory import MemorySettings
from memory.service import MemoryService

BAD = "u\udcff7"  # what Python makes of the undecodable byte 0xff in an argument (PEP 383)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    for k in [k for k in os.environ if k.startswith("MEMORY_")]:
        os.environ.pop(k)
    path = tmp_path_factory.mktemp("cli") / "m.sqlite"
    with MemoryService.from_settings(MemorySettings(path=str(path))) as svc:
        rid = svc.write("Prefers bar charts", "user_profile/u1").id
    yield path, rid


def _run(path: Path | str, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["--path", str(path), *args])
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), (
        f"{args}: {type(res.exception).__name__}: {res.exception}")
    return res.exit_code, res.output


@pytest.mark.parametrize("args", [
    ["get", BAD], ["delete", BAD], ["restore", BAD], ["search", BAD, "--ns", "user_profile/u1"],
    ["forget-user", BAD, "--yes"], ["history", BAD], ["list", "--ns", f"user_profile/{BAD}"],
    ["add", "x", "--ns", "user_profile/u1", "--id", BAD],
])
def test_undecodable_arguments_get_a_clear_error(store: tuple[Path, str], args: list[str]) -> None:
    path, rid = store
    code, out = _run(path, *args)
    assert code == 2, out
    assert "error:" in out and "Traceback" not in out
    assert "not valid text" in out or "control or invisible" in out, out
    code, out = _run(path, "get", rid)
    assert code == 0 and "Prefers bar charts" in out  # nothing changed


@pytest.mark.parametrize("args", [["audit", "--limit", "99999999999999999999999"],
                                  ["list", "--ns", "user_profile", "--limit", "99999999999999999999999"],
                                  ["list", "--ns", "user_profile", "--offset", "-1"]])
def test_huge_limits_get_a_clear_error(store: tuple[Path, str], args: list[str]) -> None:
    code, out = _run(store[0], *args)
    assert code == 2 and "must be an integer from 0 to" in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("args", [["stats"], ["list", "--ns", "user_profile"], ["get", "abc"],
                                  ["search", "charts", "--ns", "user_profile/u1"], ["audit"], ["history", "abc"],
                                  ["export", "--ns", "user_profile", "--out", "OUT"]])
def test_read_commands_never_create_a_store(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "nonexistent" / "dir" / "x.sqlite"
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    code, out = _run(path, *args)
    assert code == 2 and "no memory store at" in out, out
    assert not path.parent.parent.exists()
    assert not (tmp_path / "out").exists()


def test_add_id_of_another_namespace_is_refused(store: tuple[Path, str]) -> None:
    path, rid = store
    code, out = _run(path, "add", "moved?", "--ns", "user_profile/u12", "--id", rid)
    assert code == 2 and "already used by a memory in another namespace" in out, out
    code, out = _run(path, "get", rid, "--json")
    assert '"namespace": "user_profile/u1"' in out and "Prefers bar charts" in out


def _foreign_db(path: Path) -> bytes:
    """A database another program made (the tables LangGraph's SqliteStore creates), with a row."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE store (prefix TEXT, key TEXT, value TEXT, PRIMARY KEY (prefix, key));"
        "CREATE TABLE store_migrations (v INTEGER PRIMARY KEY);"
        "INSERT INTO store VALUES ('user.u1', 'k1', '{\"pref\": \"dark mode\"}');")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("args", [["search", "dark mode", "--ns", "user_profile/u1"], ["list", "--ns", "user_profile"],
                                  ["stats"], ["add", "likes tea", "--ns", "user_profile/u1"], ["audit"]])
def test_another_programs_database_is_refused_untouched(tmp_path: Path, args: list[str]) -> None:
    """Pointed by mistake at another program's SQLite file (e.g. LangGraph's own SqliteStore),
    memctl used to add its tables to it and answer "no memories matched"."""
    import sqlite3

    path = tmp_path / "langgraph.sqlite"
    before = _foreign_db(path)
    code, out = _run(path, *args)
    assert code != 0, out
    assert "another program" in out and "MEMORY_PATH" in out and "Traceback" not in out, out
    assert path.read_bytes() == before  # not a byte written (no tables, no WAL switch)
    assert not Path(str(path) + "-wal").exists()
    conn = sqlite3.connect(path)
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} == {
        "store", "store_migrations"}
    conn.close()


def test_api_refuses_another_programs_database_and_keeps_own_stores_open(tmp_path: Path) -> None:
    import sqlite3

    from memory.errors import StoreCorrupt
    from memory.policy.audit import AuditLog

    foreign = tmp_path / "other.sqlite"
    before = _foreign_db(foreign)
    with pytest.raises(StoreCorrupt, match="another program"):
        MemoryService.from_settings(MemorySettings(path=str(foreign)))
    with pytest.raises(StoreCorrupt, match="another program"):
        AuditLog(str(foreign))
    assert foreign.read_bytes() == before
    # A store of ours with a table of the user's own beside it still opens, and keeps both.
    own = tmp_path / "own.sqlite"
    with MemoryService.from_settings(MemorySettings(path=str(own))) as svc:
        svc.write("Prefers bar charts", "user_profile/u1")
    conn = sqlite3.connect(own)
    conn.execute("CREATE TABLE my_notes (t TEXT)")
    conn.commit()
    conn.close()
    with MemoryService.from_settings(MemorySettings(path=str(own))) as svc:
        assert [r.content for r in svc.list("user_profile/u1")] == ["Prefers bar charts"]


@pytest.mark.parametrize("schema", [
    # A table named like one of ours, with other columns: another memory tool's "memories".
    "CREATE TABLE memories (id INTEGER PRIMARY KEY, text TEXT, user TEXT);"
    "INSERT INTO memories (text, user) VALUES ('likes dark mode', 'u1');",
    # A Rails-style database: "schema_migrations" with text versions, and a key-value "meta".
    "CREATE TABLE schema_migrations (version VARCHAR NOT NULL PRIMARY KEY);"
    "CREATE TABLE meta (name TEXT, val TEXT);"
    "INSERT INTO schema_migrations VALUES ('20240101000000');",
], ids=["memories_table", "rails_migrations"])
def test_another_programs_database_with_a_table_named_like_ours_is_refused_untouched(
        tmp_path: Path, schema: str) -> None:
    """A foreign file was taken for a store when any of its table names was one of ours
    ("memories", "meta", "schema_migrations", ...): opening it created our migration table in it
    and failed with "SQLite error ...: table memories already exists"."""
    import sqlite3

    from memory.errors import StoreCorrupt

    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(schema)
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreCorrupt, match="another program"):
        MemoryService.from_settings(MemorySettings(path=str(path)))
    code, out = _run(path, "add", "likes tea", "--ns", "user_profile/u1")
    assert code == 1 and "another program" in out and "MEMORY_PATH" in out, out
    assert path.read_bytes() == before and not Path(str(path) + "-wal").exists()


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_search_min_score_must_be_finite(store: tuple[Path, str], value: str) -> None:
    """``--min-score nan`` answered "no memories matched" (exit 0): the filter compared False."""
    code, out = _run(store[0], "search", "bar charts", "--ns", "user_profile/u1", "--min-score", value)
    assert code == 2 and "min_score" in out and "finite number" in out and "Traceback" not in out, out


@pytest.mark.parametrize("cmd", [["add", "likes tea", "--ns", "user_profile/u1"],
                                 ["search", "tea", "--ns", "user_profile/u1"], ["stats"]])
def test_a_store_path_that_is_a_directory_or_under_a_file_says_so(tmp_path: Path, cmd: list[str]) -> None:
    """MEMORY_PATH naming a folder said "write a memory first" (read commands) or "cannot open
    SQLite file ...: unable to open database file" (add); a path under a regular file raised
    FileExistsError from mkdir, with a traceback."""
    from memory.errors import InvalidConfig

    folder = tmp_path / "data"
    folder.mkdir()
    code, out = _run(folder, *cmd)
    assert code == 2 and "is a directory" in out and "Traceback" not in out, out
    assert list(folder.iterdir()) == []
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    code, out = _run(blocker / "memory.sqlite", *cmd)
    assert code == 2 and "not a directory" in out and str(blocker) in out and "Traceback" not in out, out
    assert blocker.read_text() == "mine"
    for bad in (folder, blocker / "memory.sqlite"):
        with pytest.raises(InvalidConfig, match="MEMORY_PATH"):
            MemoryService.from_settings(MemorySettings(path=str(bad)))


def test_an_empty_tag_is_refused(store: tuple[Path, str]) -> None:
    code, out = _run(store[0], "add", "likes green tea", "--ns", "user_profile/u1", "--tag", "")
    assert code == 2 and "tags" in out and "empty" in out and "Traceback" not in out, out


def test_a_store_whose_first_open_stopped_after_its_migration_table_still_opens(tmp_path: Path) -> None:
    """Killed between creating ``schema_migrations`` and the first migration: still ours."""
    import sqlite3

    path = tmp_path / "m.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with MemoryService.from_settings(MemorySettings(path=str(path))) as svc:
        svc.write("Prefers bar charts", "user_profile/u1")
        assert [r.content for r in svc.list("user_profile/u1")] == ["Prefers bar charts"]


def test_search_table_keeps_content_readable_in_a_narrow_console(store: tuple[Path, str]) -> None:
    """An 80-column console (a pipe) used to get the ten-column breakdown with the content folded
    to a few characters a line; it now gets the score only (the breakdown stays in --json)."""
    from rich.console import Console

    from memctl.cli import _hits_table

    with MemoryService.from_settings(MemorySettings(path=str(store[0]))) as svc:
        hits = svc.search("bar charts", "user_profile/u1")
    assert hits
    for width, breakdown in ((80, False), (150, True)):
        con = Console(width=width, record=True)
        con.print(_hits_table(hits, con.width))
        text = con.export_text()
        assert "Prefers bar charts" in text, text  # on one line, not folded
        assert ("decay" in text) == breakdown, text


def test_audit_with_an_unknown_action_names_the_valid_ones(tmp_path: Path) -> None:
    """`memctl audit --action nope` listed nothing (as if no event matched); a typo must say so."""
    from typer.testing import CliRunner

    from memctl.cli import app

    store = tmp_path / "m.sqlite"
    runner = CliRunner()
    added = runner.invoke(app, ["--path", str(store), "add", "prefers metric units", "--ns", "user_profile/u1"])
    assert added.exit_code == 0, added.output
    bad = runner.invoke(app, ["--path", str(store), "audit", "--action", "nope"])
    assert bad.exit_code != 0
    assert "unknown audit action 'nope'" in bad.output and "add" in bad.output
    good = runner.invoke(app, ["--path", str(store), "audit", "--action", "add"])
    assert good.exit_code == 0 and "add" in good.output
