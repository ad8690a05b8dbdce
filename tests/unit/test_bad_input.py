"""Bad input anywhere: a clear error from memory.errors, and the stored data left intact.

Every case runs against a real SQLite file and the real packaged embedder. A few memories are
stored first; after the bad call the count, the stored rows, the keyword/vector index sizes and a
search result must be exactly what they were, both through the same service and through a new
service that reopens the file.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memory.backends.sqlite import SqliteBackend
from memory.errors import (
    InvalidConfig,
    InvalidContent,
    InvalidFilter,
    InvalidInput,
    InvalidNamespace,
    MemoryLayerError,
    NotFound,
    SchemaMismatch,
)
from memory.namespace import parse_namespace
from memory.records import MemoryQuery, MemoryRecord
from memory.service import MemoryService, NewMemory
from memory.settings import MemorySettings

T0 = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2025, 6, 1, tzinfo=UTC)
QUERY = "what kind of chart does the user like?"

SEED = [
    NewMemory("User prefers bar charts over pie charts", "user_profile/u1",
              {"type": "user_profile", "tags": ["viz"]}, id="m-chart"),
    NewMemory("用户每天早上喝一杯美式咖啡", "user_profile/u1", {"type": "user_profile"}, id="m-coffee"),
    NewMemory("User u12 likes line charts with markers", "user_profile/u12", {"type": "user_profile"}, id="m-u12"),
    NewMemory("The daily sales report must be sent before 9:30 am", "domain_facts/sales",
              {"type": "domain_facts", "tags": ["report"]}, id="m-sla"),
]
SEED_IDS = {m.id for m in SEED}


# ---------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read MEMORY_* variables: make sure none leak in from the caller's shell."""
    for key in list(os.environ):
        if key.startswith("MEMORY_"):
            monkeypatch.delenv(key)


@pytest.fixture(scope="module")
def seeded_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed memories written once, through the service, into a closed SQLite file.

    Each test gets its own copy, so setup costs a file copy rather than an embedding run.
    """
    path = tmp_path_factory.mktemp("seed") / "seed.sqlite"
    with MemoryService.from_settings(MemorySettings(path=str(path))) as s:
        s.write_many(SEED, now=T0)
    return path


@pytest.fixture
def settings(tmp_path: Path, seeded_file: Path) -> MemorySettings:
    path = tmp_path / "m.sqlite"
    shutil.copyfile(seeded_file, path)
    return MemorySettings(path=str(path))


@pytest.fixture
def svc(settings: MemorySettings):
    s = MemoryService.from_settings(settings)
    yield s
    s.close()


def snapshot(s: MemoryService) -> dict[str, Any]:
    """Everything a bad call must not change."""
    recs = s.backend.scroll(None, limit=10_000, include_expired=True)  # type: ignore[call-arg]
    rows = sorted(
        (r.id, r.namespace, r.content, r.metadata.model_dump(mode="json"), r.created_at, r.updated_at,
         r.expires_at)
        for r in recs
    )
    st_ = s.backend.stats()  # type: ignore[attr-defined]
    hits = s.search(QUERY, "user_profile", top_k=5, now=NOW)
    return {
        "count": s.count(),
        "per_ns": {"/".join(ns): n for ns, n in s.backend.namespaces()},
        "rows": rows,
        "index": (st_["rows"], st_["keyword_rows"], st_["vectors"]),
        "search": [(h.record.id, round(h.score, 5)) for h in hits],
    }


def assert_intact(s: MemoryService, settings: MemorySettings, before: dict[str, Any]) -> None:
    assert snapshot(s) == before
    with MemoryService.from_settings(settings) as fresh:
        assert snapshot(fresh) == before


def check_bad(s: MemoryService, settings: MemorySettings, exc_type: type[Exception], fn, *hints: str):
    """Run ``fn``: it must raise ``exc_type`` with a message naming ``hints``; data unchanged."""
    before = snapshot(s)
    # Sanity: the seeded store is what we think it is, so "unchanged" means something.
    assert before["count"] == len(SEED)
    assert before["search"] and before["search"][0][0] == "m-chart"
    with pytest.raises(exc_type) as info:
        fn()
    exc = info.value
    assert isinstance(exc, MemoryLayerError), f"{type(exc).__name__} is outside memory.errors"
    msg = str(exc)
    assert msg.strip(), "the error has no message"
    for hint in hints:
        assert hint.lower() in msg.lower(), f"message {msg!r} does not mention {hint!r}"
    assert_intact(s, settings, before)
    return exc


def test_seeded_store_and_snapshot_are_stable(svc, settings):
    """The harness itself: snapshot is deterministic and survives a reopen."""
    before = snapshot(svc)
    assert before["count"] == 4 and before["index"] == (4, 4, 4)
    assert before["per_ns"] == {"domain_facts/sales": 1, "user_profile/u1": 2, "user_profile/u12": 1}
    assert before["search"][0][0] == "m-chart"
    assert_intact(svc, settings, before)


# ---------------------------------------------------------------------------- content
BAD_CONTENT = [
    pytest.param("", InvalidContent, ("empty", "pass the text"), id="empty"),
    pytest.param(" \t\n\u3000 ", InvalidContent, ("empty", "pass the text"), id="whitespace-only"),
    pytest.param("a" * (1 << 20), InvalidContent, ("max_content_chars", "split"), id="1MB"),
    pytest.param(b"\xff\xfe\xfdbad bytes", InvalidContent, ("UTF-8", "decode"), id="invalid-utf8-bytes"),
    pytest.param(bytearray(b"ok \xc3\x28 then"), InvalidContent, ("UTF-8", "decode"), id="invalid-utf8-bytearray"),
    pytest.param("abc\udcff", InvalidContent, ("surrogate", "undecodable bytes"), id="lone-surrogate"),
    pytest.param("abc\x00def", InvalidContent, ("NUL", "strip"), id="nul-char"),
    pytest.param("\x00", InvalidContent, ("NUL",), id="only-nul"),
    # Invisible characters only (zero-width space, bidi override, BOM + joiner): stored as a memory
    # nobody can see before, while namespace labels already refused them.
    pytest.param("\u200b\u200b", InvalidContent, ("empty", "pass the text"), id="zero-width-only"),
    pytest.param("\u202e", InvalidContent, ("empty", "pass the text"), id="bidi-override-only"),
    pytest.param("\ufeff \u200d\u2060\x01", InvalidContent, ("empty", "pass the text"), id="invisible-mix"),
    pytest.param(12345, InvalidContent, ("must be text",), id="int"),
    pytest.param(None, InvalidContent, ("must be text",), id="none"),
]


@pytest.mark.parametrize(("content", "exc", "hints"), BAD_CONTENT)
def test_write_bad_content(svc, settings, content, exc, hints):
    check_bad(svc, settings, exc, lambda: svc.write(content, "user_profile/u1"), *hints)


@pytest.mark.parametrize(("content", "exc", "hints"),
                         [p for p in BAD_CONTENT if p.id not in ("none",)])  # None means "keep content"
def test_update_existing_with_bad_content(svc, settings, content, exc, hints):
    check_bad(svc, settings, exc, lambda: svc.update("m-chart", content, {"type": "note"}, now=NOW), *hints)


def test_visible_text_with_invisible_characters_is_still_stored(svc):
    """Only text with nothing visible is empty: emoji sequences with joiners and RTL text stay."""
    for text in ["👨\u200d👩\u200d👧 family emoji", "\u202eمرحبا", "\u200bzero-width before"]:
        assert svc.write(text, "user_profile/u7").content == text


def test_content_exactly_at_limit_is_accepted_and_one_over_is_not(tmp_path):
    s = MemoryService.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite"), max_content_chars=50))
    with s:
        s.write("x" * 50, "n/a")
        with pytest.raises(InvalidContent, match="max_content_chars=50"):
            s.write("y" * 51, "n/a")
        assert [r.content for r in s.list("n/a")] == ["x" * 50]


# ---------------------------------------------------------------------------- namespaces
BAD_NAMESPACES = [
    pytest.param("", ("empty", "user_profile/u1"), id="empty-str"),
    pytest.param("   ", ("empty", "user_profile/u1"), id="blank-str"),
    pytest.param("a//b", ("empty label", "user_profile/u1"), id="double-slash"),
    pytest.param("/a", ("empty label",), id="leading-slash"),
    pytest.param("a/", ("empty label",), id="trailing-slash"),
    pytest.param(("u1", ""), ("empty label",), id="tuple-empty-label"),
    pytest.param(("a/b",), ("separator", "tuple of labels"), id="tuple-label-with-slash"),
    pytest.param(("a\\b",), ("separator",), id="tuple-label-with-backslash"),
    pytest.param(" u1", ("whitespace",), id="padded-label"),
    pytest.param("x" * 200, ("200 characters", "128"), id="label-200-chars"),
    pytest.param("/".join(f"l{i}" for i in range(9)), ("9 labels", "at most 8"), id="9-labels"),
    pytest.param(b"user_profile/u1", ("not bytes", "decode"), id="bytes"),
    pytest.param(None, ("NoneType",), id="none"),
    pytest.param(123, ("int", "user_profile/u1"), id="int"),
    pytest.param(("u1", 7), ("labels must be strings",), id="tuple-with-int"),
    pytest.param("u1/\u200bx", ("control or invisible",), id="zero-width-space"),
]


@pytest.mark.parametrize(("ns", "hints"), BAD_NAMESPACES)
def test_write_bad_namespace(svc, settings, ns, hints):
    check_bad(svc, settings, InvalidNamespace, lambda: svc.write("User likes tea", ns), *hints)


@pytest.mark.parametrize(("ns", "hints"), BAD_NAMESPACES)
def test_delete_namespace_with_bad_namespace_deletes_nothing(svc, settings, ns, hints):
    check_bad(svc, settings, InvalidNamespace, lambda: svc.delete_namespace(ns), *hints)


_READ_CASES = ("empty-str", "double-slash", "tuple-empty-label", "label-200-chars", "9-labels", "bytes", "none",
               "int")


@pytest.mark.parametrize(("op", "ns", "hints"), [
    pytest.param(op, *p.values, id=f"{op}-{p.id}")
    for op in ("search", "list", "count") for p in BAD_NAMESPACES
    if p.id in _READ_CASES and not (op == "count" and p.id == "none")  # count(None) means "all namespaces"
])
def test_reads_with_bad_namespace(svc, settings, ns, hints, op):
    calls = {
        "search": lambda: svc.search("charts", ns),
        "list": lambda: svc.list(ns),
        "count": lambda: svc.count(ns),
    }
    check_bad(svc, settings, InvalidNamespace, calls[op], *hints)


def test_search_with_no_namespaces(svc, settings):
    check_bad(svc, settings, InvalidNamespace, lambda: svc.search("charts", []), "at least one")


_LABEL = st.text(alphabet=st.one_of(st.sampled_from(list("ab1/\\ _.\t\x00\u200b\u3000中é\udcff")),
                                    st.characters()), max_size=6)
_CLEAN = st.text(alphabet=st.sampled_from(list("abcXYZ019_-.:@中文é")), min_size=1, max_size=8)


@hsettings(max_examples=50, deadline=None, database=None)
@given(st.one_of(
    st.text(alphabet=st.sampled_from(list("ab/ \\\x00\u200b中")), max_size=20),
    st.lists(_LABEL, min_size=1, max_size=4).map("/".join),
    st.lists(_CLEAN, min_size=1, max_size=9).map("/".join),  # mostly valid, up to one label too many
    st.lists(_CLEAN, min_size=1, max_size=9).map(tuple),
    st.lists(_LABEL, max_size=10).map(tuple),
    st.lists(st.one_of(_LABEL, st.integers(), st.none()), max_size=3),
    st.one_of(st.none(), st.integers(), st.binary(max_size=6), st.floats()),
))
def test_parse_namespace_roundtrips_or_raises_invalid_namespace(raw):
    try:
        ns = parse_namespace(raw)
    except InvalidNamespace as exc:
        assert str(exc)
        return
    assert isinstance(ns, tuple) and ns and all(isinstance(label, str) and label for label in ns)
    joined = "/".join(ns)
    assert parse_namespace(joined) == ns
    assert parse_namespace(ns) == ns
    if isinstance(raw, str):
        assert joined == raw
    else:
        assert ns == tuple(raw)


# ---------------------------------------------------------------------------- filters
BAD_FILTERS = [
    pytest.param({"colour": "red"}, ("colour", "use one of"), id="unknown-key"),
    pytest.param({"type": {"$regex": "x"}}, ("$regex", "use one of"), id="unknown-operator"),
    pytest.param({"type": {"$eq": "a", "$ne": "b"}}, ("exactly one operator",), id="two-operators"),
    pytest.param({"tags": {"$in": "viz"}}, ("needs a list",), id="in-without-list"),
    pytest.param({"created_at": {"$gt": "yesterday"}}, ("not a timestamp",), id="bad-timestamp"),
    pytest.param({"tags": {"$gt": "a"}}, ("not supported",), id="tags-comparison"),
    pytest.param({"extra.": 1}, ("extra.<name>",), id="empty-extra-key"),
    pytest.param("type=user_profile", ("must be a dict",), id="not-a-dict"),
]


@pytest.mark.parametrize(("flt", "hints"), BAD_FILTERS)
def test_search_with_bad_filter(svc, settings, flt, hints):
    check_bad(svc, settings, InvalidFilter, lambda: svc.search("charts", "user_profile", filter=flt), *hints)


@pytest.mark.parametrize(("flt", "hints"), BAD_FILTERS)
def test_backend_delete_with_bad_filter_deletes_nothing(svc, settings, flt, hints):
    check_bad(svc, settings, InvalidFilter,
              lambda: svc.backend.delete(namespace=("user_profile",), filter=flt), *hints)


@pytest.mark.parametrize(("flt", "hints"), BAD_FILTERS[:2])
def test_backend_delete_everything_with_bad_filter_deletes_nothing(svc, settings, flt, hints):
    check_bad(svc, settings, InvalidFilter, lambda: svc.backend.delete(filter=flt), *hints)


@pytest.mark.parametrize(("flt", "hints"), BAD_FILTERS[:2])
def test_service_delete_namespace_and_list_with_bad_filter(svc, settings, flt, hints):
    check_bad(svc, settings, InvalidFilter, lambda: svc.delete_namespace("user_profile", filter=flt), *hints)
    check_bad(svc, settings, InvalidFilter, lambda: svc.list("user_profile", filter=flt), *hints)


@pytest.mark.parametrize("flt", [
    pytest.param({"tags": ["viz", "report"]}, id="tags-list-value"),
    pytest.param({"tags": {"$in": [["viz"]]}}, id="tags-in-nested-list"),
    pytest.param({"tags": {"$eq": {"a": 1}}}, id="tags-eq-dict"),
])
@pytest.mark.parametrize("op", ["search", "backend-delete"])
def test_unhashable_tag_filter_values_are_rejected_cleanly(svc, settings, flt, op):
    """A tag is a string; a list/dict as the value must be an InvalidFilter, not a TypeError."""
    calls = {
        "search": lambda: svc.search("charts", "user_profile", filter=flt),
        "backend-delete": lambda: svc.backend.delete(namespace=("user_profile",), filter=flt),
    }
    check_bad(svc, settings, InvalidFilter, calls[op])


# ---------------------------------------------------------------------------- vectors
def _rec(id: str = "m-new", content: str = "User likes green tea") -> MemoryRecord:
    return MemoryRecord(id=id, namespace="user_profile/u1", content=content, created_at=NOW, updated_at=NOW)


@pytest.mark.parametrize(("records", "vectors", "exc", "hints"), [
    pytest.param([_rec()], np.ones((1, 256), np.float32), SchemaMismatch, ("(1, 512)", "nothing was written"),
                 id="wrong-dim"),
    pytest.param([_rec("m-chart", "overwritten")], np.ones((1, 768), np.float32), SchemaMismatch,
                 ("nothing was written",), id="wrong-dim-overwriting-existing-id"),
    pytest.param([_rec()], np.ones(512, np.float32), SchemaMismatch, ("nothing was written",), id="1d-vector"),
    pytest.param([_rec("a"), _rec("b")], np.ones((1, 512), np.float32), SchemaMismatch,
                 ("(2, 512)",), id="fewer-vectors-than-records"),
    pytest.param([_rec()], np.full((1, 512), np.nan, np.float32), InvalidInput, ("NaN", "nothing was written"),
                 id="nan"),
    pytest.param([_rec()], np.full((1, 512), np.inf, np.float32), InvalidInput, ("infinity",), id="inf"),
    pytest.param([_rec("a"), _rec("m-chart", "overwritten")],
                 np.vstack([np.ones((1, 512)), np.full((1, 512), np.nan)]).astype(np.float32),
                 InvalidInput, ("NaN",), id="nan-in-last-row"),
    pytest.param([_rec("a"), _rec("a")], np.ones((2, 512), np.float32), InvalidInput, ("same id",),
                 id="duplicate-id-in-batch"),
])
def test_backend_upsert_bad_vectors(svc, settings, records, vectors, exc, hints):
    check_bad(svc, settings, exc, lambda: svc.backend.upsert(records, vectors), *hints)


@pytest.mark.parametrize(("vector", "exc", "hints"), [
    pytest.param(np.ones(256, np.float32), SchemaMismatch, ("dimension 256", "512"), id="dim-256"),
    pytest.param(np.ones(513, np.float32), SchemaMismatch, ("dimension 513",), id="dim-513"),
    pytest.param(np.ones((2, 256), np.float32), SchemaMismatch, ("512",), id="2x256-matrix"),
    pytest.param(np.full(512, np.nan, np.float32), InvalidInput, ("NaN",), id="nan-query"),
])
def test_backend_query_bad_vector(svc, settings, vector, exc, hints):
    q = MemoryQuery(namespaces=(("user_profile",),), vector=vector, text="charts", now=NOW)
    check_bad(svc, settings, exc, lambda: svc.backend.query(q), *hints)


# ---------------------------------------------------------------------------- batches
@pytest.mark.parametrize(("last", "exc"), [
    pytest.param(NewMemory("", "user_profile/u1"), InvalidContent, id="empty-content"),
    pytest.param(NewMemory("fine text", "a//b"), InvalidNamespace, id="bad-namespace"),
    pytest.param(NewMemory(b"\xff\xfe", "user_profile/u1"), InvalidContent, id="invalid-utf8"),
    pytest.param(NewMemory("fine text", "user_profile/u1", {"type": ""}), InvalidInput, id="bad-metadata"),
    pytest.param(NewMemory("fine text", "user_profile/u1", id="bad\nid"), InvalidInput, id="bad-id"),
    pytest.param(NewMemory("fine text", "user_profile/u1", ttl_days=-1), InvalidInput, id="negative-ttl"),
])
def test_write_many_with_invalid_last_item_writes_nothing(svc, settings, last, exc):
    batch = [
        NewMemory("User likes green tea", "user_profile/u1", id="new-1"),
        NewMemory("User moved to Hangzhou", "user_profile/u2", id="new-2"),
        NewMemory("User now prefers line charts", "user_profile/u1", id="m-chart"),  # would overwrite
        last,
    ]
    check_bad(svc, settings, exc, lambda: svc.write_many(batch, now=NOW))
    for id_ in ("new-1", "new-2"):
        with pytest.raises(NotFound):
            svc.get(id_)
    assert svc.get("m-chart").content == "User prefers bar charts over pie charts"
    assert svc.count("user_profile/u2") == 0


# ---------------------------------------------------------------------------- other writes
@pytest.mark.parametrize(("kwargs", "hints"), [
    pytest.param({"ttl_days": 0}, ("positive",), id="ttl-zero"),
    pytest.param({"ttl_days": -3}, ("positive",), id="ttl-negative"),
    pytest.param({"ttl_days": float("inf")}, ("ttl",), id="ttl-infinite"),
    pytest.param({"ttl_days": 1e9}, ("ttl",), id="ttl-1e9-days"),
    pytest.param({"now": "not a date"}, (), id="now-not-a-date"),
    pytest.param({"metadata": ["user_profile"]}, ("must be a dict",), id="metadata-list"),
    pytest.param({"metadata": {"tags": [1, 2]}}, ("tags",), id="metadata-int-tags"),
    # Stored as given before (memctl add --tag ''): a tag no filter can name.
    pytest.param({"metadata": {"tags": ["", "ok"]}}, ("tags", "empty"), id="metadata-empty-tag"),
    pytest.param({"metadata": {"tags": " \u200b"}}, ("tags", "empty"), id="metadata-blank-tag"),
    pytest.param({"metadata": {"tags": 5}}, ("tags",), id="metadata-int-as-tags"),
    pytest.param({"metadata": {"type": "x" * 65}}, ("type",), id="metadata-type-too-long"),
    pytest.param({"id": " padded "}, ("id",), id="id-padded"),
    pytest.param({"id": "x" * 200}, ("id",), id="id-too-long"),
])
def test_write_bad_arguments(svc, settings, kwargs, hints):
    kwargs = dict(kwargs)
    meta = kwargs.pop("metadata", None)
    check_bad(svc, settings, InvalidInput,
              lambda: svc.write("User likes green tea", "user_profile/u1", meta, **kwargs), *hints)


@pytest.mark.parametrize("ids", [pytest.param([], id="empty-list"), pytest.param(None, id="none"),
                                 pytest.param(7, id="int")])
def test_delete_with_bad_ids(svc, settings, ids):
    check_bad(svc, settings, InvalidInput, lambda: svc.delete(ids), "id")


def test_backend_delete_without_target_refuses(svc, settings):
    check_bad(svc, settings, InvalidInput, lambda: svc.backend.delete(), "refusing to delete everything")


# ---------------------------------------------------------------------------- not found
@pytest.mark.parametrize("op", ["get", "update-content", "update-metadata"])
def test_missing_id_raises_not_found(svc, settings, op):
    calls = {
        "get": lambda: svc.get("no-such-id"),
        "update-content": lambda: svc.update("no-such-id", "new text"),
        "update-metadata": lambda: svc.update("no-such-id", metadata={"type": "note"}),
    }
    exc = check_bad(svc, settings, NotFound, calls[op], "no-such-id", "memctl list")
    assert isinstance(exc, KeyError)
    assert str(exc).startswith("no memory")  # plain message, not KeyError's quoted repr


def test_deleted_id_is_not_found_afterwards(svc, settings):
    assert svc.delete("m-sla") == 1
    with pytest.raises(NotFound):
        svc.get("m-sla")
    with pytest.raises(NotFound):
        svc.update("m-sla", "resurrected")
    assert svc.count() == 3
    with MemoryService.from_settings(settings) as fresh:
        assert fresh.count() == 3 and fresh.backend.get(["m-sla"]) == []


@pytest.mark.parametrize("bad_id", ["", None, 42])
def test_get_with_bad_id(svc, settings, bad_id):
    check_bad(svc, settings, InvalidInput, lambda: svc.get(bad_id), "non-empty string")


# ---------------------------------------------------------------------------- search arguments
@pytest.mark.parametrize(("kwargs", "hints"), [
    pytest.param({"top_k": 0}, ("top_k", "positive"), id="top_k-0"),
    pytest.param({"top_k": -1}, ("top_k", "positive"), id="top_k-minus-1"),
    pytest.param({"top_k": 2.5}, ("top_k",), id="top_k-float"),
    pytest.param({"query": ""}, ("query is empty",), id="empty-query"),
    pytest.param({"query": "  \n "}, ("query is empty",), id="blank-query"),
    pytest.param({"query": None}, ("query is empty",), id="none-query"),
    pytest.param({"query": "\u200b\u202e"}, ("query is empty",), id="invisible-query"),
    # Accepted before: NaN compared False with every score (an empty answer that looked like "no
    # match"); a string raised a bare TypeError inside scoring.select.
    pytest.param({"min_score": float("nan")}, ("min_score", "finite number"), id="min_score-nan"),
    pytest.param({"min_score": "0.5"}, ("min_score", "finite number"), id="min_score-str"),
    pytest.param({"min_sim": float("inf")}, ("min_sim", "finite number"), id="min_sim-inf"),
    pytest.param({"min_sim": True}, ("min_sim", "finite number"), id="min_sim-bool"),
])
def test_search_bad_arguments(svc, settings, kwargs, hints):
    kwargs = dict(kwargs)
    query = kwargs.pop("query", "charts")
    check_bad(svc, settings, InvalidInput, lambda: svc.search(query, "user_profile", **kwargs), *hints)


def test_list_with_negative_limit(svc, settings):
    check_bad(svc, settings, InvalidInput, lambda: svc.list("user_profile", limit=-1), "integer from 0 to")


# ---------------------------------------------------------------------------- model / schema
@pytest.mark.parametrize(("model", "dim"), [("other", 512), (None, 256), ("other", 8)])
def test_open_with_other_embedding_model_raises_schema_mismatch(svc, settings, model, dim):
    model = model or svc.embedder.name
    exc = check_bad(svc, settings, SchemaMismatch,
                    lambda: SqliteBackend(settings.path, embedding_model=model, dim=dim),
                    svc.embedder.name, "same model", "MEMORY_PATH")
    assert str(dim) in str(exc)
    # Still usable with the right model: a new service on the same file writes and finds.
    with MemoryService.from_settings(settings) as fresh:
        fresh.write("User's favourite colour is teal", "user_profile/u1", id="m-teal", now=NOW)
        assert fresh.search("favourite colour", "user_profile/u1", now=NOW)[0].record.id == "m-teal"
    assert svc.get("m-teal").content == "User's favourite colour is teal"  # the open service sees it too


def test_open_with_other_packaged_model_via_settings(svc, settings):
    other = MemorySettings(path=settings.path, embedding={"model": "local/wordllama-l2-supercat"})
    check_bad(svc, settings, SchemaMismatch, lambda: MemoryService.from_settings(other), "wordllama")


# ---------------------------------------------------------------------------- settings
def test_settings_negative_weight(svc, settings):
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(scoring={"alpha": -1}),
              "scoring.alpha", "greater than or equal to 0")


def test_settings_unknown_key(svc, settings):
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(bogus=1), "bogus")


def test_settings_unknown_backend_from_env(svc, settings, monkeypatch):
    monkeypatch.setenv("MEMORY_BACKEND", "nosuch")
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(), "backend", "sqlite")


def test_settings_bad_nested_env(svc, settings, monkeypatch):
    monkeypatch.setenv("MEMORY_SCORING__ALPHA", "very")
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(), "scoring.alpha")


def test_settings_missing_config_file(svc, settings, tmp_path):
    missing = tmp_path / "nope" / "memory.yaml"
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(missing), str(missing), "MEMORY_CONFIG")


def test_settings_missing_config_file_from_env(svc, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_CONFIG", str(tmp_path / "absent.yaml"))
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(), "absent.yaml", "does not exist")


@pytest.mark.parametrize(("text", "hints"), [
    pytest.param("scoring: [unclosed\n", ("cannot read config file",), id="yaml-syntax"),
    pytest.param("scoring:\n  alpha: 1\n  colour: red\n", ("scoring.colour",), id="unknown-nested-key"),
    pytest.param("max_content_chars: 0\n", ("max_content_chars",), id="zero-limit"),
])
def test_settings_bad_config_file(svc, settings, tmp_path, text, hints):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text, encoding="utf-8")
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(cfg), *hints)


def test_settings_empty_path(svc, settings):
    check_bad(svc, settings, InvalidConfig, lambda: MemorySettings.load(path="  "), "path is empty")


def test_snapshot_detects_a_real_change(svc, settings):
    """Guard against a vacuous harness: a successful write must change the snapshot."""
    before = snapshot(svc)
    svc.write("User also likes scatter plots", "user_profile/u1", id="m-scatter", now=T0 + timedelta(days=1))
    after = snapshot(svc)
    assert after["count"] == before["count"] + 1 and after != before
    assert after["index"] == tuple(n + 1 for n in before["index"])


# ---------------------------------------------------------------------------- boundary (issue 12)
def _manager(svc: MemoryService, settings: MemorySettings) -> Any:
    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager

    return MemoryManager(svc, AuditLog(settings.path), settings)


BAD_TIMES = [
    pytest.param(1e18, id="epoch-1e18"), pytest.param(-1e18, id="epoch-minus-1e18"),
    pytest.param(float("nan"), id="nan"), pytest.param(float("inf"), id="inf"), pytest.param("nan", id="nan-str"),
    pytest.param(datetime(9990, 1, 1, tzinfo=UTC), id="year-9990"), pytest.param([2025], id="list"),
]


@pytest.mark.parametrize("bad", BAD_TIMES)
def test_bad_now_everywhere_is_invalid_input(svc, settings, bad):
    """OverflowError (far-future now + TTL), OSError errno 75 and a plain ValueError for NaN escaped."""
    mm = _manager(svc, settings)
    calls = [lambda: svc.write("a new fact", "user_profile/u1", now=bad),
             lambda: svc.write("a new fact", "user_profile/u1", ttl_days=36_500, now=bad),
             lambda: svc.search(QUERY, "user_profile/u1", now=bad),
             lambda: svc.update("m-chart", "User prefers line charts", now=bad),
             lambda: mm.remember("a new fact", "user_profile/u1", now=bad),
             lambda: mm.recall(QUERY, "user_profile/u1", now=bad),
             lambda: mm.sweep(now=bad),
             lambda: mm.delete("m-chart", now=bad),
             lambda: mm.forget_user("u1", now=bad)]
    for call in calls:
        check_bad(svc, settings, InvalidInput, call, "timestamp")


@pytest.mark.parametrize("value", [1e20, -1e18, float("inf"), "9999999-01-01", datetime.max])
@pytest.mark.parametrize("key", ["created_at", "expires_at"])
def test_out_of_range_time_filters_are_invalid_filter(svc, settings, key, value):
    check_bad(svc, settings, InvalidFilter, lambda: svc.search(QUERY, "user_profile", filter={key: {"$gt": value}}),
              key)
    check_bad(svc, settings, InvalidFilter, lambda: svc.list("user_profile", filter={key: {"$lte": value}}), key)


@pytest.mark.parametrize("meta", [{"extra": {"score": float("nan")}}, {"ratio": float("inf")},
                                  {"extra": {"deep": [1.0, {"x": float("-inf")}]}}])
def test_nan_or_infinite_metadata_is_rejected_not_stored_as_null(svc, settings, meta):
    check_bad(svc, settings, InvalidInput, lambda: svc.write("a new fact", "user_profile/u1", meta), "NaN or infinite")
    check_bad(svc, settings, InvalidInput, lambda: svc.update("m-chart", None, meta), "NaN or infinite")


@pytest.mark.parametrize(("call", "hint"), [
    (lambda s: s.list("user_profile", limit=10**30), "limit"),
    (lambda s: s.list("user_profile", offset=10**30), "offset"),
    (lambda s: s.search(QUERY, "user_profile", top_k=10**30), "top_k"),
])
def test_huge_counts_are_invalid_input_not_overflow(svc, settings, call, hint):
    check_bad(svc, settings, InvalidInput, lambda: call(svc), hint)


def test_audit_limit_beyond_sqlite_integers_is_invalid_input(svc, settings):
    mm = _manager(svc, settings)
    check_bad(svc, settings, InvalidInput, lambda: mm.audit.events(limit=10**23), "limit")


def test_explicit_id_of_another_namespace_does_not_move_the_memory(svc, settings):
    """write("x", "user_profile/u12", id=<an id of u1>) moved u1's memory into u12."""
    exc = check_bad(svc, settings, InvalidInput, lambda: svc.write("moved?", "user_profile/u12", id="m-chart"),
                    "another namespace")
    assert "user_profile/u1" not in str(exc)  # the other namespace is not disclosed
    check_bad(svc, settings, InvalidInput, lambda: svc.write_many(
        [NewMemory("a", "user_profile/u1", id="dup"), NewMemory("b", "user_profile/u12", id="dup")]), "twice")
    # Its own namespace: replacing is still allowed.
    assert svc.write("User prefers bar charts, always", "user_profile/u1", id="m-chart").content.endswith("always")


@pytest.mark.parametrize("length", [129, 300])
def test_ids_over_128_characters_are_rejected_not_truncated(svc, settings, length):
    long_id = "m-chart" + "x" * (length - 7)
    check_bad(svc, settings, InvalidInput, lambda: svc.write("a new fact", "user_profile/u1", id=long_id), "128")


def test_oversized_input_fails_before_any_work(svc, settings):
    """A 1M-character query ran 68 s; a 10 MB remember was refused only after seconds of PII regexes."""
    import time

    mm = _manager(svc, settings)
    t0 = time.perf_counter()
    check_bad(svc, settings, InvalidContent, lambda: svc.search("word " * 200_000, "user_profile"), "max_content_chars")
    check_bad(svc, settings, InvalidContent, lambda: mm.recall("word " * 200_000, "user_profile"), "max_content_chars")
    check_bad(svc, settings, InvalidContent, lambda: mm.remember("4111 1111 1111 1111 call 13812345678 " * 280_000,
                                                                 "user_profile/u1"), "max_content_chars")
    check_bad(svc, settings, InvalidContent, lambda: mm.update("m-chart", "4111 1111 1111 1111 " * 600_000),
              "max_content_chars")
    # Generous for a loaded 2-core host: the checks above take milliseconds, the old path seconds.
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.parametrize(("table", "kind"), [("schema_migrations", "schema"), ("audit_migrations", "audit"),
                                             ("meta", "keyword index")])
def test_store_from_a_newer_version_is_refused(settings, table, kind):
    import sqlite3

    from memory.policy.audit import AuditLog

    con = sqlite3.connect(settings.path)
    if table == "meta":
        AuditLog(settings.path).close()
        con.execute("UPDATE meta SET value = '99' WHERE key = 'index_text_version'")
    else:
        if table == "audit_migrations":
            AuditLog(settings.path).close()
        con.execute(f"INSERT INTO {table} (version) VALUES (99)")
    con.commit()
    rows = con.execute("SELECT id, content FROM memories ORDER BY id").fetchall()
    fts = con.execute("SELECT rowid, terms FROM memories_fts ORDER BY rowid").fetchall()
    con.close()
    with pytest.raises(SchemaMismatch, match="newer version"):
        if table == "audit_migrations":
            AuditLog(settings.path)
        else:
            MemoryService.from_settings(settings)
    con = sqlite3.connect(settings.path)
    assert con.execute("SELECT id, content FROM memories ORDER BY id").fetchall() == rows
    assert con.execute("SELECT rowid, terms FROM memories_fts ORDER BY rowid").fetchall() == fts  # not re-tokenised
    con.close()


def test_store_adapter_rejects_nan_values_and_huge_limits(settings):
    from memory.store import MemoryStore

    store = MemoryStore(path=settings.path)
    try:
        with pytest.raises(InvalidContent, match="NaN or infinite"):
            store.put(("memories", "u1"), "k", {"score": float("nan")})
        assert store.get(("memories", "u1"), "k") is None
        for kwargs in ({"limit": 10**30}, {"offset": 10**30}):
            with pytest.raises(InvalidInput, match="must be an integer"):
                store.search(("memories",), **kwargs)
        with pytest.raises(InvalidContent, match="max_content_chars"):
            store.search(("memories",), query="word " * 200_000)
    finally:
        store.close()


# ---------------------------------------------------------------------------- summarize / query type
@pytest.mark.parametrize(("kwargs", "hints"), [
    pytest.param({"hits": ["a memory as a string"]}, ("hits", "SearchHit", "recall"), id="hits-of-str"),
    pytest.param({"hits": "charts"}, ("hits", "SearchHit"), id="hits-a-str"),
    pytest.param({"goal": 5}, ("goal", "text"), id="goal-int"),
    pytest.param({"max_tokens": -1}, ("max_tokens",), id="max_tokens-negative"),
    pytest.param({"max_tokens": "400"}, ("max_tokens",), id="max_tokens-str"),
])
def test_summarize_bad_arguments_are_invalid_input(svc, settings, kwargs, hints):
    """``MemoryManager.summarize`` (the README's first example) raised AttributeError for a list of
    strings or a non-text goal, and returned "" for a negative budget."""
    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager

    mm = MemoryManager(svc, AuditLog(":memory:"))
    hits = svc.search(QUERY, "user_profile", now=NOW)
    args = {"hits": hits, **kwargs}
    check_bad(svc, settings, InvalidInput, lambda: mm.summarize(args.pop("hits"), **args), *hints)
    assert "chart" in mm.summarize(hits, goal="report")  # good arguments still work


def test_a_query_that_is_not_text_says_so(svc, settings):
    """bytes as a query said "query is empty"."""
    check_bad(svc, settings, InvalidInput, lambda: svc.search(b"charts", "user_profile"), "query must be text", "bytes")
