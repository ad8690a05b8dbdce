"""The CC-CEDICT lexicon on disk (memory.cedict_db) gives the bridge exactly what the parsed dicts give.

One parse per module (~2-4 s); every on-disk file is built from those dicts in tmp_path, and
``cedict._parse`` is replaced by a counter where a test checks whether a rebuild happened.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory import cedict, cedict_db

DATA = Path(__file__).resolve().parents[1] / "data"
# The zh/en fitting sets (zh_en_7 is held out and never read here).
SETS = ("zh_en", "zh_en_2", "zh_en_3", "zh_en_4", "zh_en_5", "zh_en_6")
Dicts = tuple[dict[str, str], dict[str, str]]


@pytest.fixture(scope="module")
def dicts() -> Dicts:
    return cedict._parse(cedict._data_file())


@pytest.fixture(autouse=True)
def _fresh_lexicon() -> Iterator[None]:
    cedict._install(None)
    yield
    cedict._install(None)


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        yield from (json.loads(line) for line in f if line.strip())


def _cases() -> list[tuple[str, list[str]]]:
    """Every question of the fitting sets with its conversation's turns as candidates (stored as
    ``memctl eval retrieval`` stores them: "<speaker>: <text>")."""
    out = []
    for name in SETS:
        turns: dict[str, list[str]] = {}
        for t in _rows(DATA / name / "turns.jsonl"):
            turns.setdefault(t["conversation_id"], []).append(f"{t['speaker']}: {t['text']}")
        out += [(q["question"], turns[q["conversation_id"]]) for q in _rows(DATA / name / "questions.jsonl")]
    return out


def _coverage_all(lex: cedict.Lexicon, cases: list[tuple[str, list[str]]]) -> list[object]:
    cedict._install(lex)
    # Both directions for every question: the fusion picks one by the question's script, the
    # other exercises each lookup path on every text anyway.
    return [(cedict._query_concepts(q, to_han), cedict.bridge_coverage(q, to_han, texts))
            for q, texts in cases for to_han in (True, False)]


ZH_Q, EN_TEXTS = "我喜欢喝咖啡吗？", ["Fang: I drink coffee every day", "Fang: I like hiking", "Fang: see you"]


def _by_dicts(dicts: Dicts) -> list[float] | None:
    """The coverage the parsed dicts give (the reference every on-disk answer must equal)."""
    cedict._install(cedict.Lexicon(*dicts))
    try:
        return cedict.bridge_coverage(ZH_Q, False, EN_TEXTS)
    finally:
        cedict._install(None)


def _db(dicts: Dicts, root: Path) -> cedict_db.LexiconDb:
    data = cedict._data_file()
    path = cedict_db.db_path(root, data, cedict._CACHE_VERSION)
    cedict_db.build(path, *dicts, data, cedict._CACHE_VERSION)
    return cedict_db.LexiconDb(path, data, cedict._CACHE_VERSION)


def test_on_disk_lexicon_gives_identical_coverage_on_every_fitting_question(dicts: Dicts, tmp_path: Path):
    cases = _cases()
    assert len(cases) > 1000
    expected = _coverage_all(cedict.Lexicon(*dicts), cases)
    db = _db(dicts, tmp_path)
    got = _coverage_all(cedict.Lexicon(db.zh, db.en, db), cases)
    assert got == expected  # the same floats, bit for bit, and the same translated concepts
    judged = [cov for _, cov in expected if cov is not None]
    assert len(judged) > 1000 and sum(any(c > 0 for c in cov) for cov in judged) > 500


def test_one_search_is_one_query(dicts: Dicts, tmp_path: Path):
    db = _db(dicts, tmp_path)
    cedict._install(cedict.Lexicon(db.zh, db.en, db))
    sql: list[str] = []
    db._con.set_trace_callback(sql.append)
    texts = ["苏可欣: 过敏的孩子有三个,小宇对鸡蛋过敏。", "Mia: The bus leaves at eight.", "苏可欣: 每天早上八点到八点半入园。"]
    cedict.bridge_coverage("Which kid is allergic to eggs?", True, texts)
    assert len(sql) == 2  # the question's terms, then every candidate's substrings at once
    cedict.bridge_coverage("Which kid is allergic to eggs?", True, texts)
    assert len(sql) == 2  # a warm repeat asks nothing
    cedict.bridge_coverage("小宇对什么过敏？", False, texts)
    assert len(sql) == 4
    # What the process holds is what these searches looked up, not the dictionary.
    assert 0 < len(db.zh.seen) + len(db.en.seen) < 300


@pytest.mark.parametrize("damage", ["missing", "garbage", "stale", "empty_sqlite", "truncated_header",
                                    "truncated_half", "other_format"])
def test_a_missing_stale_or_corrupt_file_is_rebuilt(damage: str, dicts: Dicts, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    expected = _by_dicts(dicts)
    assert expected is not None and expected[0] > 0.0 == expected[2]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    parses: list[Path] = []
    monkeypatch.setattr(cedict, "_parse", lambda data: parses.append(data) or dicts)
    path = cedict._cache_file(cedict._data_file())
    path.parent.mkdir(parents=True)
    if damage == "garbage":
        path.write_bytes(b"\x00garbage" * 100)
    elif damage == "stale":  # the right name, but built for another data file
        cedict_db.build(path, {"咖啡": "tea"}, {"tea": "茶"}, Path(__file__), cedict._CACHE_VERSION)
    elif damage == "empty_sqlite":
        import sqlite3

        sqlite3.connect(path).execute("CREATE TABLE meta (k, v)").connection.commit()
    elif damage in ("truncated_header", "truncated_half", "other_format"):
        import sqlite3

        cedict_db.build(path, *dicts, cedict._data_file(), cedict._CACHE_VERSION)
        if damage.startswith("truncated"):  # a copy or a disk that stopped inside the header / half-way
            raw = path.read_bytes()
            path.write_bytes(raw[:1000] if damage == "truncated_header" else raw[: len(raw) // 2])
        else:  # the right name, written by a build whose format stamp differs
            con = sqlite3.connect(path)
            con.execute("UPDATE meta SET v = '0' WHERE k = 'format'")
            con.commit()
            con.close()
    old_marshal = path.parent / "cedict-v5-3817593-1.marshal"  # the previous format's cache
    old_marshal.write_bytes(b"x")
    lex = cedict.get_lexicon()
    assert len(parses) == 1 and lex.db is not None and lex.db.path == path
    assert lex.zh_en["咖啡"] == dicts[0]["咖啡"] and "coffee" in lex.zh_en["咖啡"].split()
    assert not old_marshal.exists()
    # The next process opens the rebuilt file without parsing.
    cedict._install(None)
    lex = cedict.get_lexicon()
    assert len(parses) == 1 and lex.db is not None
    assert cedict.bridge_coverage(ZH_Q, False, EN_TEXTS) == expected


def test_a_file_damaged_past_its_header_falls_back_to_the_parsed_dicts(dicts: Dicts, tmp_path: Path):
    expected = _by_dicts(dicts)
    db = _db(dicts, tmp_path)
    db.close()
    raw = bytearray(db.path.read_bytes())
    raw[8 * 4096:] = b"\xff" * (len(raw) - 8 * 4096)  # meta (page 2) readable, the tables not
    db.path.write_bytes(bytes(raw))
    db = cedict_db.LexiconDb(db.path, cedict._data_file(), cedict._CACHE_VERSION)
    db.fallback = lambda: dicts
    cedict._install(cedict.Lexicon(db.zh, db.en, db))
    assert cedict.bridge_coverage(ZH_Q, False, EN_TEXTS) == expected
    assert not db.path.exists()  # removed so that the next process rebuilds it


def test_an_unwritable_cache_dir_keeps_the_parsed_dicts(dicts: Dicts, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # a file where the cache directory should be: mkdir fails, even as root
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(cedict, "_parse", lambda data: dicts)
    with caplog.at_level("WARNING", logger="memory.cedict"):
        lex = cedict.get_lexicon()
    assert lex.db is None and lex.zh_en is dicts[0]
    # Said once, with the path and what to do: otherwise every process silently pays the parse.
    assert "CC-CEDICT cache not written at" in caplog.text and "XDG_CACHE_HOME" in caplog.text
    assert cedict.bridge_coverage("Which kid is allergic to eggs?", True, [
        "苏可欣: 小宇对鸡蛋过敏。", "苏可欣: 每天早上八点入园。"])[1] == 0.0


def test_a_forked_worker_opens_its_own_connection(dicts: Dicts, tmp_path: Path):
    """Server workers fork from a preloaded parent; an SQLite connection must not cross fork."""
    import os

    expected = _by_dicts(dicts)
    db = _db(dicts, tmp_path)
    cedict._install(cedict.Lexicon(db.zh, db.en, db))
    parent_con = db._con
    cedict.bridge_coverage("Which kid is allergic to eggs?", True, ["苏可欣: 小宇对鸡蛋过敏。"])  # parent uses it
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            cov = cedict.bridge_coverage(ZH_Q, False, EN_TEXTS)
            os.write(w, json.dumps([cov, db._con is not parent_con, db._pid == os.getpid()]).encode())
        finally:
            os._exit(0)
    os.close(w)
    out = os.read(r, 1 << 16)
    os.waitpid(pid, 0)
    assert json.loads(out) == [expected, True, True]


def test_two_builders_at_once_leave_one_whole_file(dicts: Dicts, tmp_path: Path):
    """Each builder writes its own temp file and renames it into place: readers see a whole file."""
    import threading

    data = cedict._data_file()
    path = cedict_db.db_path(tmp_path, data, cedict._CACHE_VERSION)
    errors: list[BaseException] = []

    def build() -> None:
        try:
            cedict_db.build(path, *dicts, data, cedict._CACHE_VERSION)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    db = cedict_db.LexiconDb(path, data, cedict._CACHE_VERSION)
    assert db.zh["咖啡"] == dicts[0]["咖啡"] and db.en.get("coffee") == dicts[1]["coffee"]
