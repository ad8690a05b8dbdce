"""``memctl``: ids and prefixes, ``--type`` values, ``audit`` counting CLI searches, flag help.

In-process (Typer's ``CliRunner``) on a real SQLite file with the real model; ``test_cli.py``
runs the console script in subprocesses.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from memctl.cli import app
from memory import MemorySettings
from memory.policy.manager import MemoryManager

runner = CliRunner()


@pytest.fixture
def db(tmp_path, embedder):
    path = str(tmp_path / "cli.sqlite")
    mm = MemoryManager.from_settings(MemorySettings(path=path), embedder=embedder)
    ids = [mm.remember(t, "user_profile/u1").id for t in
           ("User prefers bar charts", "User lives in Hangzhou", "以后报表金额都用万元为单位")]
    mm.close()
    return path, ids


def run(path: str, *args: str):
    res = runner.invoke(app, ["--path", path, *args])
    return res.exit_code, res.stdout, res.stderr


def unique_prefix(ids: list[str], i: int) -> str:
    n = 1
    while sum(x.startswith(ids[i][:n]) for x in ids) > 1:
        n += 1
    return ids[i][:n]


def test_tables_ids_are_accepted_everywhere(db):
    path, ids = db
    code, out, _ = run(path, "list", "--ns", "user_profile/u1")
    assert code == 0
    short = re.findall(r"\b[0-9a-f]{12}\b", out)
    assert sorted(short) == sorted(i[:12] for i in ids)  # what the table shows ...
    for s, full in zip(sorted(short), sorted(ids), strict=True):  # ... get and history take
        code, out, err = run(path, "get", s, "--json")
        assert code == 0, err
        assert json.loads(out)["id"] == full
        code, out, err = run(path, "history", s, "--json")
        assert code == 0 and json.loads(out)[0]["memory_id"] == full, err
    one = unique_prefix(ids, 0)  # the shortest unique prefix works too
    code, out, _ = run(path, "get", one, "--json")
    assert code == 0 and json.loads(out)["id"] == ids[0]
    # delete by a table id, then restore by the same short id
    code, out, err = run(path, "delete", ids[1][:12], "--json")
    assert code == 0 and json.loads(out) == {"deleted": 1}, err
    code, _, err = run(path, "get", ids[1][:12])
    assert code == 2 and "no memory" in err
    code, out, err = run(path, "restore", ids[1][:12])
    assert code == 0 and ids[1] in out, err
    code, out, _ = run(path, "get", ids[1], "--json")  # the full id still works
    assert code == 0 and json.loads(out)["content"] == "User lives in Hangzhou"


def test_ambiguous_empty_and_unknown_prefixes(db):
    path, ids = db
    code, _, err = run(path, "get", "")
    assert code == 2 and "id is empty" in err
    code, _, err = run(path, "get", "zzzz")
    assert code == 2 and "no memory with an id starting with 'zzzz'" in err
    # every uuid hex shares no fixed prefix; make one ambiguous on purpose
    mm = MemoryManager.from_settings(MemorySettings(path=path))
    mm.service.write("a", "notes/x", id="abc123")
    mm.service.write("b", "notes/x", id="abc456")
    mm.close()
    code, _, err = run(path, "get", "abc")
    assert code == 2 and "matches several memories (abc123, abc456)" in err
    code, out, _ = run(path, "get", "abc4", "--json")
    assert code == 0 and json.loads(out)["id"] == "abc456"
    code, out, err = run(path, "delete", "abc", "--json")  # nothing deleted on an ambiguous prefix
    assert code == 2 and "several" in err
    code, out, err = run(path, "restore", "abc1")
    assert code == 2 and "no memory in the trash" in err


def test_unknown_type_is_rejected_with_the_allowed_values(db):
    path, _ = db
    for cmd in (["search", "charts", "--ns", "user_profile/u1", "--type", "bogus"],
                ["add", "x", "--ns", "notes/x", "--type", "bogus"]):
        code, out, err = run(path, *cmd)
        assert code == 2
        assert "'bogus' is not one of" in err and "'user_profile'" in err and "'domain_facts'" in err
    code, out, _ = run(path, "search", "charts", "--ns", "user_profile/u1", "--type", "user_profile", "--json")
    assert code == 0 and json.loads(out)[0]["content"] == "User prefers bar charts"


def test_audit_counts_cli_searches_and_has_json(db):
    path, _ = db
    for q in ("charts", "where does the user live", "nothing like this at all"):
        assert run(path, "search", q, "--ns", "user_profile/u1")[0] == 0
    code, out, _ = run(path, "audit", "--json", "--action", "search")
    data = json.loads(out)
    assert code == 0 and data["stats"]["searches"] == 3
    assert [e["actor"] for e in data["events"]] == ["memctl"] * 3
    assert data["events"][-1]["reason"] == "charts" and data["events"][-1]["details"]["hits"] >= 1
    code, out, _ = run(path, "audit")
    assert code == 0 and "searches: 3" in out and "{" not in out.splitlines()[-1]


def test_boolean_flags_show_as_flag_no_flag(db):
    path, _ = db
    for cmd in ("search", "list", "delete", "audit", "add"):
        res = runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "120"})
        assert "<bool>" not in res.stdout
        assert re.search(r"--json\s+--no-json", res.stdout), res.stdout
