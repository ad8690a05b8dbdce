"""The LangGraph ``BaseStore`` adapter (``memory.store.MemoryStore``).

Most tests are ports of LangGraph's own store semantics tests, run against the adapter over a
real SQLite file with the real packaged embedder. Their names match the originals:

* ``libs/checkpoint-sqlite/tests/test_store.py`` (SqliteStore) and ``test_ttl.py``;
* ``libs/checkpoint/tests/test_store.py`` (InMemoryStore), ``test_store_namespace_validation.py``,
  ``test_inmemory_store_dotted_filters.py`` and ``test_store_ttl.py``.

LangGraph's vector tests use ``CharacterEmbeddings`` (character counts through random
projections) and nonsense texts like "xxx"; with a real sentence encoder those texts mean
nothing, so the ports use real sentences and assert the same relations (what ranks first,
what is or is not returned). Exact-score assertions become "the score is our service's score".
Then: LangGraph graphs (``get_store()``, ``runtime.store``), langmem's tools and memory
manager, and cross-language search.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_store
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langmem import (
    create_manage_memory_tool,
    create_memory_store_manager,
    create_search_memory_tool,
)
from pydantic import Field

from memory import MemoryService, MemorySettings
from memory.errors import InvalidInput, InvalidNamespace
from memory.store import SOURCE, UNINDEXED, MemoryStore, StoreNamespaceError, item_id, make_store

# -------------------- fixtures and helpers


def _open(path: str, embedder, **kwargs: Any) -> MemoryStore:
    svc = MemoryService.from_settings(MemorySettings(path=path), embedder=embedder)
    return MemoryStore(svc, owns_service=True, **kwargs)


@pytest.fixture
def db_path(tmp_path) -> str:
    return str(tmp_path / "store.sqlite")


@pytest.fixture
def make(db_path, embedder) -> Iterator[Callable[..., MemoryStore]]:
    """Open adapters over the test's SQLite file (all closed at teardown)."""
    opened: list[MemoryStore] = []

    def _make(**kwargs: Any) -> MemoryStore:
        s = _open(db_path, embedder, **kwargs)
        opened.append(s)
        return s

    yield _make
    for s in opened:
        s.close()


@pytest.fixture
def store(make) -> MemoryStore:
    return make()


def rows(path: str) -> list[dict[str, Any]]:
    """Our SQLite rows, read with a separate connection: proof that writes went through."""
    con = sqlite3.connect(path)
    try:
        out = []
        for id_, ns, content, meta, expires, updated in con.execute(
            "SELECT id, ns, content, metadata, expires_at, updated_at FROM memories ORDER BY rid"
        ):
            m = json.loads(meta)
            out.append(
                {
                    "id": id_,
                    "ns": ns,
                    "content": content,
                    "meta": m,
                    "extra": m["extra"],
                    "expires_at": expires,
                    "updated_at": updated,
                }
            )
        return out
    finally:
        con.close()


def row(path: str, ns: tuple[str, ...], key: str) -> dict[str, Any] | None:
    rid = item_id(ns, key)
    return next((r for r in rows(path) if r["id"] == rid), None)


def sql(path: str, statement: str, params: tuple = ()) -> None:
    con = sqlite3.connect(path)
    try:
        con.execute(statement, params)
        con.commit()
    finally:
        con.close()


def expire_now(path: str, ns: tuple[str, ...], key: str) -> None:
    """Backdate an item's expires_at without deleting it (expired but unswept)."""
    sql(
        path,
        "UPDATE memories SET expires_at = ? WHERE id = ?",
        (time.time() - 60, item_id(ns, key)),
    )


def keys(items) -> list[str]:
    return [i.key for i in items]


# -------------------- checkpoint-sqlite: test_store.py


def test_batch_order(store):
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    ops = [
        GetOp(namespace=("test", "foo"), key="key1"),
        PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=("test",), key="key3"),
    ]
    results = store.batch(ops)
    assert len(results) == 5
    assert isinstance(results[0], Item)
    assert results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"] and results[2][0].value == {"data": "value1"}
    assert ("test", "foo") in results[3] and ("test", "bar") in results[3]
    assert results[4] is None

    reordered = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
            GetOp(namespace=("test", "bar"), key="key2"),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
            PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
            GetOp(namespace=("test", "foo"), key="key1"),
        ]
    )
    assert len(reordered) == 5
    assert len(reordered[0]) >= 2
    assert reordered[1].value == {"data": "value2"} and reordered[1].namespace == ("test", "bar")
    assert len(reordered[2]) > 0
    assert reordered[3] is None
    assert reordered[4].value == {"data": "value1"}
    assert store.get(("test",), "key3").value == {"data": "value3"}


def test_batch_get_ops(store):
    store.put(("test",), "key1", {"data": "value1"})
    store.put(("test",), "key2", {"data": "value2"})
    results = store.batch(
        [GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")]
    )
    assert [r.key if r else None for r in results] == ["key1", "key2", None]


def test_batch_put_ops(store, db_path):
    results = store.batch(
        [
            PutOp(("test",), "key1", {"data": "value1"}),
            PutOp(("test",), "key2", {"data": "value2"}),
            PutOp(("test",), "key3", None),  # delete of a missing key
        ]
    )
    assert results == [None, None, None]
    assert store.get(("test",), "key1").value == {"data": "value1"}
    assert store.get(("test",), "key2").value == {"data": "value2"}
    assert store.get(("test",), "key3") is None
    assert len(rows(db_path)) == 2


def test_batch_search_ops(store):
    for ns, key, value in [
        (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        store.put(ns, key, value)
    results = store.batch(
        [
            SearchOp(("test",), filter={"tag": "a"}, limit=10, offset=0),
            SearchOp(("test",), filter=None, limit=2, offset=0),
            SearchOp(("test", "foo"), filter=None, limit=10, offset=0),
        ]
    )
    assert len(results[0]) == 2 and all(i.value["tag"] == "a" for i in results[0])
    assert len(results[1]) == 2
    assert [i.namespace for i in results[2]] == [("test", "foo")]


def test_batch_list_namespaces_ops(store):
    data = [
        (("test", "documents", "public"), "doc1", {"content": "public doc"}),
        (("test", "documents", "private"), "doc2", {"content": "private doc"}),
        (("test", "images", "public"), "img1", {"content": "public image"}),
        (("prod", "documents", "public"), "doc3", {"content": "prod doc"}),
    ]
    for ns, key, value in data:
        store.put(ns, key, value)
    results = store.batch(
        [
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
            ListNamespacesOp(
                match_conditions=(MatchCondition("suffix", ("public",)),),
                max_depth=None,
                limit=10,
                offset=0,
            ),
        ]
    )
    assert len(results[0]) == len(data)
    assert results[1] == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    assert results[2] == [
        ("prod", "documents", "public"),
        ("test", "documents", "public"),
        ("test", "images", "public"),
    ]


def test_basic_store_ops(store):
    ns = ("test", "documents")
    store.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(ns, "doc1")
    assert (item.namespace, item.key, item.value) == (
        ns,
        "doc1",
        {"title": "Test Document", "content": "Hello, World!"},
    )
    time.sleep(0.01)
    store.put(ns, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = store.get(ns, "doc1")
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.updated_at > item.updated_at
    assert updated.created_at == item.created_at  # SqliteStore/PostgresStore keep created_at
    assert store.get(("test", "other_documents"), "doc1") is None
    store.delete(ns, "doc1")
    assert store.get(ns, "doc1") is None


def test_list_namespaces(store):
    namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]
    for ns in namespaces:
        store.put(ns, "dummy", {"content": "dummy"})
    assert len(store.list_namespaces()) == len(namespaces)
    test_ns = store.list_namespaces(prefix=["test"])
    assert len(test_ns) == 4 and all(ns[0] == "test" for ns in test_ns)
    public = store.list_namespaces(suffix=["public"])
    assert len(public) == 3 and all(ns[-1] == "public" for ns in public)
    assert all(len(ns) <= 2 for ns in store.list_namespaces(max_depth=2))
    assert len(store.list_namespaces(limit=3)) == 3
    for ns in namespaces:
        store.delete(ns, "dummy")
    assert store.list_namespaces() == []


def test_search(store):
    data = [
        (
            ("test", "docs"),
            "doc1",
            {"title": "First Doc", "author": "Alice", "tags": ["important"]},
        ),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
    ]
    for ns, key, value in data:
        store.put(ns, key, value)
    assert len(store.search(("test",))) == 3
    docs = store.search(("test", "docs"))
    assert len(docs) == 2 and all(i.namespace == ("test", "docs") for i in docs)
    alice = store.search(("test",), filter={"author": "Alice"})
    assert len(alice) == 2 and all(i.value["author"] == "Alice" for i in alice)
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    # Without a query: newest first, no score.
    assert keys(store.search(("test",))) == ["img1", "doc2", "doc1"]
    assert all(i.score is None for i in store.search(("test",)))


def test_vector_insert_with_auto_embedding(store):
    docs = [
        ("doc1", {"text": "short text"}),
        ("doc2", {"text": "longer text document"}),
        ("doc3", {"text": "longest text document here"}),
        ("doc4", {"description": "text in description field"}),
        ("doc5", {"content": "text in content field"}),
        ("doc6", {"body": "text in body field"}),
    ]
    for key, value in docs:
        store.put(("test",), key, value)
    results = store.search(("test",), query="long text")
    assert "doc2" in keys(results) and "doc3" in keys(results)
    assert all(r.score is not None for r in results)


def test_vector_update_with_embedding(store):
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    initial = store.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    initial_score = initial[0].score

    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = store.search(("test",), query="Zany Xerxes")
    after_score = next((r.score for r in after if r.key == "doc1"), 0.0)
    assert after_score < initial_score
    for r in store.search(("test",), query="new text about dogs"):
        if r.key == "doc1":
            assert r.score > after_score

    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert "doc4" not in keys(store.search(("test",), query="new text about dogs", limit=3))
    # As in InMemoryStore: an unindexed item comes after every ranked one, with score None.
    everything = store.search(("test",), query="new text about dogs", limit=100)
    assert keys(everything)[-1] == "doc4" and everything[-1].score is None
    assert all(r.score is not None for r in everything[:-1])


DOCS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


def _check_vector_search_with_filters(search) -> None:
    results = search(("test",), query="apple", filter={"color": "red"})
    assert len(results) == 2 and results[0].key == "doc1"
    results = search(("test",), query="car", filter={"color": "red"})
    assert len(results) == 2 and results[0].key == "doc2"
    # LangGraph queries "bbbbluuu" (close to "blue car" in character space); we query "blue".
    results = search(("test",), query="blue", filter={"score": {"$gt": 3.2}})
    assert len(results) == 3 and results[0].key == "doc4"
    assert {"doc1", "doc3"} <= set(keys(results))
    results = search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert keys(results) == ["doc3"]


def test_vector_search_with_filters(store):
    for key, value in DOCS:
        store.put(("test",), key, value)
    _check_vector_search_with_filters(store.search)


def test_vector_search_pagination(store):
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2
    assert not set(keys(page1)) & set(keys(page2))
    # LangGraph's own test asserts `score` (the cosine) descending on each page; ours orders by the hybrid
    # ranking, reranker included (README: "Order"), so the cosine need not descend. What must hold: pages
    # are slices of one ranking, in `memory_score` order.
    ranked = [i.memory_score for i in (*page1, *page2)]
    assert ranked == sorted(ranked, reverse=True)
    everything = store.search(("test",), query="test", limit=10)
    assert len(everything) == 5
    assert keys(page1) + keys(page2) == keys(everything)[:4]
    assert keys(everything)[:4] == keys(page1) + keys(page2)
    assert everything[0].score >= everything[2].score


def test_vector_search_edge_cases(store):
    store.put(("test",), "doc1", {"text": "test document"})
    assert len(store.search(("test",), query="")) == 1
    assert len(store.search(("test",), query=None)) == 1
    assert len(store.search(("test",), query="test " * 100)) == 1
    assert len(store.search(("test",), query="test!@#$%^&*()")) == 1
    assert len(store.search(("test",), query="   ")) == 1  # blank = no query


def test_embed_with_path(make, db_path):
    store = make(index={"fields": ["key0", "key1", "key3"]})
    doc1 = {  # no key0: must not raise
        "key1": "The cat sleeps on the warm windowsill",
        "key2": "Stock markets fell sharply today",
        "key3": "Fresh bread from the village bakery",
    }
    doc2 = {
        "key0": "The rocket launched toward Mars at dawn",
        "key1": "The hiking trail winds up the mountain",
        "key2": "Chocolate cake recipe with cherries",
        "key3": "The cat sleeps on the warm windowsill",
    }
    store.put(("test",), "doc1", doc1)
    store.put(("test",), "doc2", doc2)
    # Only the configured paths are indexed: key2 is not part of the indexed text.
    assert row(db_path, ("test",), "doc1")["content"] == f"{doc1['key1']}\n{doc1['key3']}"
    assert "Chocolate" not in row(db_path, ("test",), "doc2")["content"]

    cat = store.search(("test",), query="a cat sleeping on a windowsill")
    assert len(cat) == 2 and cat[0].key != cat[1].key
    assert keys(store.search(("test",), query="rocket launch to Mars"))[0] == "doc2"
    assert keys(store.search(("test",), query="bread from a bakery"))[0] == "doc1"
    # Text that only exists in the unindexed key2 matches weaker than indexed text does.
    stocks = store.search(("test",), query="Stock markets fell sharply today")
    assert len(stocks) == 2 and stocks[0].score < cat[0].score
    cake = store.search(("test",), query="Chocolate cake recipe with cherries")
    assert cake[0].score < cat[0].score


def test_embed_with_path_operation_config(make, db_path):
    store = make(index={"fields": ["key17"]})
    doc3 = {
        "key0": "An aardvark digs for termites at night",
        "key1": "Quarterly budget review meeting",
        "key2": "Volcano erupts in Iceland",
        "key3": "Jazz concert in the park",
    }
    doc4 = {
        "key0": "Penguins huddle together in Antarctica",
        "key1": "Quarterly budget review meeting",
        "key2": "Tulips bloom in spring",
        "key3": "Learning to play the violin",
    }
    store.put(("test",), "doc3", doc3, index=["key0", "key1"])
    store.put(("test",), "doc4", doc4, index=["key1", "key3"])
    assert row(db_path, ("test",), "doc3")["content"] == f"{doc3['key0']}\n{doc3['key1']}"
    assert row(db_path, ("test",), "doc4")["content"] == f"{doc4['key1']}\n{doc4['key3']}"

    results = store.search(("test",), query="aardvark digging for termites")
    assert keys(results)[0] == "doc3" and len(set(keys(results))) == 2
    assert results[0].score > results[1].score
    results = store.search(("test",), query="learning the violin")
    assert keys(results)[0] == "doc4" and results[0].score > results[1].score
    shared = store.search(("test",), query="Quarterly budget review meeting")
    assert len(shared) == 2 and abs(shared[0].score - shared[1].score) < 0.15
    volcano = store.search(("test",), query="Volcano erupts in Iceland")  # key2: indexed nowhere
    assert all(r.score < shared[0].score for r in volcano)

    store.put(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
    listed = store.search(("test",))
    assert len(listed) == 3 and "doc5" in keys(listed)
    assert row(db_path, ("test",), "doc5")["content"] == UNINDEXED
    assert row(db_path, ("test",), "doc5")["extra"]["indexed"] is False
    found = store.search(("test",), query="hhh iii")
    assert keys(found)[-1] == "doc5" and found[-1].score is None


@pytest.mark.parametrize("query", ["aardvark", "budget meeting", "ccc", "poisson"])
def test_scores(store, embedder, query):
    """SearchItem.score is the cosine of the query and the item, as in LangGraph; our hybrid
    score (which orders the results) and its breakdown are memory_score / breakdown."""
    store.put(("test",), "doc", {"key0": "An aardvark at the budget meeting"})
    store.put(("test",), "other", {"key0": "Penguins in Antarctica"})
    results = store.search((), query=query)
    q = embedder.embed_query(query)
    docs = embedder.embed_documents(["An aardvark at the budget meeting", "Penguins in Antarctica"])
    cosine = {"doc": float(docs[0] @ q), "other": float(docs[1] @ q)}
    hits = store.service.search(query, "test", top_k=10, min_sim=0.0)
    ours = {h.record.metadata.extra["key"]: h.score for h in hits}
    assert len(results) == 2
    for r in results:
        assert r.score == pytest.approx(cosine[r.key], abs=1e-4)
        assert r.memory_score == pytest.approx(ours[r.key], abs=1e-9)
        assert r.breakdown["score"] == pytest.approx(r.memory_score, abs=1e-5)
    assert [r.memory_score for r in results] == sorted((r.memory_score for r in results), reverse=True)


def test_basic_store_operations(make):
    store = make(index={"fields": ["key0", "key1", "key3"]})
    uid = uuid.uuid4().hex
    ns = (uid, "test", "documents")
    assert store.search((uid,)) == []
    store.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(ns, "doc1")
    assert (item.namespace, item.key, item.value) == (
        ns,
        "doc1",
        {"title": "Test Document", "content": "Hello, World!"},
    )
    assert item.created_at is not None and item.updated_at is not None
    store.put(ns, "doc1", {"title": "Updated Test Document", "content": "Hello, LangGraph!"})
    updated = store.get(ns, "doc1")
    assert updated.value == {"title": "Updated Test Document", "content": "Hello, LangGraph!"}
    assert updated.updated_at >= item.updated_at
    assert store.get((uid, "test", "other_documents"), "doc1") is None
    store.put(ns, "doc2", {"title": "Another Document", "content": "Greetings!"})
    items = store.search((uid, "test"), limit=10)
    assert sorted(keys(items)) == ["doc1", "doc2"]
    assert (uid, "test", "documents") in store.list_namespaces(prefix=(uid, "test"))
    store.delete(ns, "doc1")
    store.delete(ns, "doc2")
    assert store.get(ns, "doc1") is None and store.get(ns, "doc2") is None
    assert store.search((uid, "test"), limit=10) == []


def test_list_namespaces_operations(store):
    p = str(uuid.uuid4())
    namespaces = [
        (p, "test", "documents", "public", p),
        (p, "test", "documents", "private", p),
        (p, "test", "images", "public", p),
        (p, "test", "images", "private", p),
        (p, "prod", "documents", "public", p),
        (p, "prod", "documents", "some", "nesting", "public", p),
        (p, "prod", "documents", "private", p),
    ]
    for ns in namespaces:
        store.put(ns, "dummy", {"content": "dummy"})
    r = store.list_namespaces(prefix=(p, "test"))
    assert len(r) == 4 and all(ns[1] == "test" for ns in r)
    r = store.list_namespaces(prefix=(p, "test", "documents"))
    assert len(r) == 2 and all(ns[1:3] == ("test", "documents") for ns in r)
    r = store.list_namespaces(suffix=("public", p))
    assert len(r) == 4 and all(ns[-2] == "public" for ns in r)
    r = store.list_namespaces(prefix=(p, "test"), suffix=("public", p))
    assert len(r) == 2 and all(ns[1] == "test" and ns[-2] == "public" for ns in r)
    r = store.list_namespaces(prefix=(p, "*", "documents"))
    assert len(r) == 5 and all(ns[2] == "documents" for ns in r)
    r = store.list_namespaces(suffix=("*", "public", p))
    assert len(r) == 4 and all(ns[-2] == "public" for ns in r)
    assert store.list_namespaces(suffix=("some", "*", "public", p)) == [
        (p, "prod", "documents", "some", "nesting", "public", p)
    ]
    assert all(len(ns) <= 3 for ns in store.list_namespaces(max_depth=3))
    r = store.list_namespaces(max_depth=4, prefix=(p, "*", "documents"))
    assert len(set(r)) == len(r) == 5
    assert len(store.list_namespaces(prefix=(p,), limit=3)) == 3
    assert len(store.list_namespaces(prefix=(p,), offset=3)) == len(namespaces) - 3
    assert set(store.list_namespaces(prefix=(p,))) == set(namespaces)
    for ns in namespaces:
        store.delete(ns, "dummy")
    assert store.list_namespaces(prefix=(p,)) == []


def test_search_items(make):
    store = make(index={"fields": ["key0", "key1", "key3"]})
    base = "test_search_items"
    namespaces = [
        (base, "documents", "user1"),
        (base, "documents", "user2"),
        (base, "reports", "department1"),
        (base, "reports", "department2"),
    ]
    values = [
        {"title": "Doc 1", "author": "John Doe", "tags": ["important"]},
        {"title": "Doc 2", "author": "Jane Smith", "tags": ["draft"]},
        {"title": "Report A", "author": "John Doe", "tags": ["final"]},
        {"title": "Report B", "author": "Alice Johnson", "tags": ["draft"]},
    ]
    for ns, value in zip(namespaces, values, strict=True):
        store.put(ns, f"item_{ns[-1]}", value)
    docs = store.search((base, "documents"))
    assert len(docs) == 2 and all(i.namespace[1] == "documents" for i in docs)
    reports = store.search((base, "reports"))
    assert len(reports) == 2 and all(i.namespace[1] == "reports" for i in reports)
    first, second = (
        store.search((base,), limit=2, offset=0),
        store.search((base,), limit=2, offset=2),
    )
    assert len(first) == len(second) == 2 and set(keys(first)).isdisjoint(keys(second))
    assert len(store.search((base,))) == 4
    john = store.search((base,), filter={"author": "John Doe"})
    assert len(john) == 2 and all(i.value["author"] == "John Doe" for i in john)
    drafts = store.search((base,), filter={"tags": ["draft"]})
    assert len(drafts) == 2 and all("draft" in i.value["tags"] for i in drafts)


def test_sql_injection_vulnerability(store):
    """Ported: a filter key outside letters, digits, '_', '.', '-' raises ValueError like SqliteStore's."""
    store.put(("docs",), "public", {"access": "public", "data": "public info"})
    store.put(("docs",), "private", {"access": "private", "data": "secret", "password": "123"})
    normal = store.search(("docs",), filter={"access": "public"})
    assert keys(normal) == ["public"]
    malicious = "access') = 'public' OR '1'='1' OR json_extract(value, '$."
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("docs",), filter={malicious: "dummy"})


def test_sql_injection_filter_values(store):
    store.put(("docs",), "doc1", {"access": "public", "title": "Public Document"})
    store.put(("docs",), "doc2", {"access": "private", "title": "Private Document"})
    store.put(("docs",), "doc3", {"access": "secret", "title": "Secret Document"})
    for bad in [
        "public' OR '1'='1",
        "public'; --",
        "public' UNION SELECT * FROM store --",
        "public\x00' OR '1'='1",
        "''''",
        "public' OR 'א'='א",
    ]:
        assert store.search(("docs",), filter={"access": bad}) == []
    store.put(("docs",), "doc4", {"title": "O'Brien's Document", "access": "public"})
    found = store.search(("docs",), filter={"title": "O'Brien's Document"})
    assert keys(found) == ["doc4"] and found[0].value["title"] == "O'Brien's Document"


def test_numeric_filter_safety(store):
    store.put(("items",), "item1", {"price": 10, "quantity": 5})
    store.put(("items",), "item2", {"price": 20, "quantity": 3})
    store.put(("items",), "item3", {"price": 30, "quantity": 1})
    results = store.search(("items",), filter={"price": {"$gt": 15}})
    assert len(results) == 2 and all(r.value["price"] > 15 for r in results)
    assert len(store.search(("items",), filter={"price": {"$lt": float("inf")}})) == 3
    assert len(store.search(("items",), filter={"price": {"$gt": float("-inf")}})) == 3
    assert store.search(("items",), filter={"price": {"$eq": float("nan")}}) == []
    assert len(store.search(("items",), filter={"price": {"$lt": 10**100}})) == 3
    store.put(("items",), "item4", {"price": -10, "quantity": 0})
    assert keys(store.search(("items",), filter={"price": {"$lt": 0}})) == ["item4"]


def test_boolean_filter_safety(store):
    store.put(("flags",), "flag1", {"active": True, "name": "Feature A"})
    store.put(("flags",), "flag2", {"active": False, "name": "Feature B"})
    store.put(("flags",), "flag3", {"active": True, "name": "Feature C"})
    on = store.search(("flags",), filter={"active": True})
    assert len(on) == 2 and all(r.value["active"] is True for r in on)
    assert keys(store.search(("flags",), filter={"active": False})) == ["flag2"]


def test_filter_keys_with_hyphens_and_digits(store):
    store.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}})
    assert keys(store.search(("docs",), filter={"access-level": "public"})) == ["hyphen"]
    assert keys(store.search(("docs",), filter={"user.access-level": "nested"})) == ["hyphen"]
    assert keys(store.search(("docs",), filter={"123abc": "ok"})) == ["digit"]
    assert keys(store.search(("docs",), filter={"user.123abc": "ok2"})) == ["digit"]


def test_non_ascii(store):
    texts = {
        "1": "这是中文",
        "2": "これは日本語です",
        "3": "이건 한국어야",
        "4": "Это русский",
        "5": "यह रूसी है",
    }
    for key, text in texts.items():
        store.put(("user_123", "memories"), key, {"text": text})
    for key, text in texts.items():
        assert store.search(("user_123", "memories"), query=text)[0].key == key
    assert store.get(("user_123", "memories"), "1").value == {"text": "这是中文"}


def test_search_namespace_segment_boundary(store):
    for ns in [
        ("foo",),
        ("foo", "child"),
        ("foo", "child", "deep"),
        ("foobar",),
        ("foobar", "baz"),
        ("foo2",),
    ]:
        store.put(ns, "k", {"v": 1})

    def found(prefix):
        return {i.namespace for i in store.search(prefix, limit=100)}

    def found_q(prefix):
        return {i.namespace for i in store.search(prefix, query="v", limit=100)}

    for f in (found, found_q):
        assert f(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
        assert f(("foobar",)) == {("foobar",), ("foobar", "baz")}
        assert f(("foo2",)) == {("foo2",)}
        assert f(("fo",)) == set()


def test_search_namespace_wildcard_chars_are_literal(store):
    for ns in [
        ("user_1",),
        ("user_1", "child"),
        ("userX1",),
        ("a%b",),
        ("axxb",),
        ("star*",),
        ("starX",),
    ]:
        store.put(ns, "k", {"v": 1})

    def found(prefix):
        return {i.namespace for i in store.search(prefix, limit=100)}

    assert found(("user_1",)) == {("user_1",), ("user_1", "child")}
    assert found(("a%b",)) == {("a%b",)}
    assert found(("star*",)) == {("star*",)}


def test_search_namespace_is_case_sensitive(store):
    store.put(("Foo",), "k", {"v": "upper"})
    store.put(("foo",), "k", {"v": "lower"})
    assert {i.namespace for i in store.search(("foo",), limit=100)} == {("foo",)}
    assert {i.namespace for i in store.search(("Foo",), limit=100)} == {("Foo",)}
    assert store.get(("Foo",), "k").value == {"v": "upper"}


def test_list_namespaces_segment_boundary(store):
    for ns in [
        ("foo",),
        ("foo", "child"),
        ("foobar",),
        ("foobar", "baz"),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
    ]:
        store.put(ns, "k", {"v": 1})
    assert set(store.list_namespaces(prefix=["foo"], limit=100)) == {("foo",), ("foo", "child")}
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {
        ("uid", "users", "alice"),
        ("uid", "a", "b", "alice"),
    }
    assert set(store.list_namespaces(prefix=["uid", "*", "alice"], limit=100)) == {
        ("uid", "users", "alice")
    }
    assert set(store.list_namespaces(prefix=["uid"], limit=100)) == {
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
    }


def test_search_empty_prefix_is_unconstrained(store):
    for ns in [("a",), ("b", "c"), ("d", "e", "f")]:
        store.put(ns, "k", {"v": 1})
    expected = {("a",), ("b", "c"), ("d", "e", "f")}
    assert {i.namespace for i in store.search((), limit=100)} == expected
    assert {i.namespace for i in store.search((), query="v", limit=100)} == expected


def test_namespace_labels_with_trailing_newline(store, db_path):
    """("users", "alice\\n") is its own namespace, as in LangGraph (stored escaped: "alice%0A")."""
    store.put(("users", "alice"), "k", {"v": 1})
    store.put(("users", "alice\n"), "k", {"v": 2})
    assert store.get(("users", "alice\n"), "k").value == {"v": 2}
    assert store.get(("users", "alice"), "k").value == {"v": 1}
    assert sorted(r["ns"] for r in rows(db_path)) == ["users/alice", "users/alice%0A"]
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {("users", "alice")}
    assert set(store.list_namespaces(prefix=["users", "alice"], limit=100)) == {("users", "alice")}


def test_list_namespaces_metacharacter_labels(store):
    pairs = [
        ("star*", "starX"),
        ("q?m", "qXm"),
        ("br[ack]et", "brXacXket"),
        ("user_1", "userX1"),
        ("a%b", "axxb"),
        ("plus+", "plusX"),
    ]
    for label, decoy in pairs:
        store.put((label,), "k", {"v": 1})
        store.put((decoy,), "k", {"v": 1})
        store.put((label, "child"), "k", {"v": 1})
    for label, decoy in pairs:
        found = set(store.list_namespaces(prefix=[label], limit=100))
        assert found == {(label,), (label, "child")}
        assert (decoy,) not in found
        assert set(store.list_namespaces(prefix=[label, "child"], limit=100)) == {(label, "child")}


def test_vector_search_ranks_closest_first(store):
    """LangGraph's version uses hand-picked vectors per distance type; ours: real sentences."""
    store.put(("docs",), "a", {"text": "The cat sat on the mat"})
    store.put(("docs",), "b", {"text": "A kitten rested on a small rug"})
    store.put(("docs",), "c", {"text": "Quarterly tax filing deadline for corporations"})
    results = store.search(("docs",), query="a cat sitting on a mat")
    assert keys(results) == ["a", "b", "c"]
    assert results[0].score > results[1].score > results[2].score


# -------------------- checkpoint: test_store.py (InMemoryStore)


def test_list_namespaces_basic(store):
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert sorted(store.list_namespaces(suffix=("f",))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert sorted(store.list_namespaces(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
    ]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_with_wildcards(store):
    namespaces = [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
        ("admin", "users", "789"),
        ("guests", "123"),
        ("guests", "456", "preferences"),
    ]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("users", "*"))) == [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
    ]
    assert store.list_namespaces(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    store.put(
        namespace=("admin", "users", "settings", "789"), key="foo", value={"data": "some_val"}
    )
    assert store.list_namespaces(prefix=("*", "users"), suffix=("settings", "*")) == [
        ("admin", "users", "settings", "789")
    ]


def test_list_namespaces_pagination(store):
    store.batch(
        [
            PutOp(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": f"value_{i:02d}"})
            for i in range(20)
        ]
    )
    for offset in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=offset) == [
            ("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)
        ]


def test_list_namespaces_max_depth(store):
    for i, ns in enumerate(
        [
            ("a", "b", "c", "d"),
            ("a", "b", "c", "e"),
            ("a", "b", "f"),
            ("a", "g"),
            ("h", "i", "j", "k"),
        ]
    ):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "g"), ("h", "i")]


def test_list_namespaces_no_conditions(store):
    namespaces = [("a", "b"), ("c", "d"), ("e", "f", "g")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces()) == namespaces


def test_list_namespaces_empty_store(store):
    assert store.list_namespaces() == []


def test_cannot_put_empty_namespace(store):
    doc = {"foo": "bar"}

    async def run_async() -> None:
        for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
            with pytest.raises(InvalidNamespaceError):
                await store.aput(bad, "foo", doc)
        await store.aput(("foo", "langgraph", "foo"), "bar", doc)
        assert (await store.aget(("foo", "langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("foo", "langgraph", "foo")))[0].value == doc
        await store.adelete(("foo", "langgraph", "foo"), "bar")
        assert await store.aget(("foo", "langgraph", "foo"), "bar") is None
        # Past the public put API, the reserved root label is accepted.
        await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
        assert (await store.aget(("langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("langgraph", "foo")))[0].value == doc
        await store.adelete(("langgraph", "foo"), "bar")
        assert await store.aget(("langgraph", "foo"), "bar") is None

    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc
    assert store.search(("foo", "langgraph", "foo"))[0].value == doc
    store.delete(("foo", "langgraph", "foo"), "bar")
    assert store.get(("foo", "langgraph", "foo"), "bar") is None
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc
    assert store.search(("langgraph", "foo"))[0].value == doc
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None
    asyncio.run(run_async())


def test_async_vector_ops(store):
    """test_async_vector_insert_with_auto_embedding, _search_with_filters, _pagination and
    _edge_cases: the same checks through aput/asearch (abatch)."""

    async def run() -> None:
        for key, value in DOCS:
            await store.aput(("test",), key, value)

        async def asearch(*args, **kwargs):
            return await store.asearch(*args, **kwargs)

        results = await store.asearch(("test",), query="apple", filter={"color": "red"})
        assert len(results) == 2 and results[0].key == "doc1"
        results = await store.asearch(("test",), query="blue", filter={"score": {"$gt": 3.2}})
        assert len(results) == 3 and results[0].key == "doc4"
        assert keys(
            await store.asearch(
                ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
            )
        ) == ["doc3"]
        p1 = await store.asearch(("test",), query="car", limit=2)
        p2 = await store.asearch(("test",), query="car", limit=2, offset=2)
        assert len(p1) == len(p2) == 2 and not set(keys(p1)) & set(keys(p2))
        for q in ["", None, "test " * 100, "test!@#$%^&*()"]:
            assert len(await store.asearch(("test",), query=q)) == 4

    asyncio.run(run())


def test_async_batched_vector_search_concurrent(store, db_path):
    """LangGraph's version writes 50 docs; 30 keep it quick with a real encoder (so the index
    threshold is 15, not 25)."""
    colors = ["red", "blue", "green", "yellow", "purple"]
    items = ["apple", "car", "house", "book", "phone"]
    scores = [3.0, 3.5, 4.0, 4.5, 5.0]
    docs = [
        (
            f"doc{i}",
            {
                "text": f"{colors[i % 5]} {items[i % 5]}",
                "color": colors[i % 5],
                "score": scores[i % 5],
                "index": i,
            },
        )
        for i in range(30)
    ]
    queries: list[tuple[str, dict[str, Any]]] = [
        ("apple", {"color": "red"}),
        ("car", {"color": "blue"}),
        ("house", {"color": "green"}),
        ("phone", {"score": {"$gt": 4.99}}),
        ("book", {"score": {"$lte": 3.5}}),
        ("apple", {"score": {"$gte": 3.0}, "color": "red"}),
        ("car", {"score": {"$lt": 5.1}, "color": "blue"}),
        ("house", {"index": {"$gt": 15}}),
        ("phone", {"index": {"$lte": 10}}),
    ]
    ops = {
        "$gt": lambda a, b: a > b,
        "$gte": lambda a, b: a >= b,
        "$lt": lambda a, b: a < b,
        "$lte": lambda a, b: a <= b,
    }

    async def run():
        # Puts, deletes and puts again of the same keys run concurrently (each through abatch):
        # whatever order they land in, every key must exist exactly once at the end.
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        await asyncio.gather(*[store.adelete(("test",), k) for k, _ in docs])
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        return await asyncio.gather(
            *[store.asearch(("test",), query=q, filter=f) for q, f in queries]
        )

    all_results = asyncio.run(run())
    assert len(rows(db_path)) == 30
    for results, (query, flt) in zip(all_results, queries, strict=True):
        assert results, (query, flt)
        for r in results:
            if "color" in flt:
                assert r.value["color"] == flt["color"]
            for field in ("score", "index"):
                for op, v in flt.get(field, {}).items():
                    assert ops[op](r.value[field], v)


# -------------------- namespace validation, dotted filters


INVALID_NAMESPACES = [("foo.bar",), ("foo", ""), (123,)]
# Our limits that remain (namespace depth, label length); '/', whitespace and control characters
# in labels are accepted and stored escaped.
OUR_INVALID = [
    tuple(f"l{i}" for i in range(9)),
    ("x" * 129,),
]
METHODS = ["get", "delete", "search", "prefix", "suffix"]


@pytest.mark.parametrize("namespace", INVALID_NAMESPACES + OUR_INVALID)
@pytest.mark.parametrize("method", METHODS)
def test_base_rejects_invalid_labels(store, db_path, namespace, method):
    if namespace in OUR_INVALID and method in ("prefix", "suffix"):
        pytest.skip("a list_namespaces pattern beyond our limits is not an error: it matches nothing")
    store.put(("ok",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        if method in ("prefix", "suffix"):
            store.list_namespaces(**{method: namespace})
        elif method == "search":
            store.search(namespace)
        else:
            getattr(store, method)(namespace, "key")
    assert len(rows(db_path)) == 1


@pytest.mark.parametrize("namespace", INVALID_NAMESPACES + OUR_INVALID)
def test_async_rejects_invalid_labels(store, db_path, namespace):
    async def run():
        for call in (
            lambda: store.aput(namespace, "k", {"v": 1}),
            lambda: store.aget(namespace, "k"),
            lambda: store.asearch(namespace),
            lambda: store.adelete(namespace, "k"),
        ) + (() if namespace in OUR_INVALID else (lambda: store.alist_namespaces(prefix=namespace),)):
            with pytest.raises(InvalidNamespaceError):
                await call()

    asyncio.run(run())
    assert rows(db_path) == []


@pytest.mark.parametrize("namespace", OUR_INVALID)
def test_our_namespace_rules_raise_both_error_types(store, namespace):
    with pytest.raises(StoreNamespaceError) as err:
        store.put(namespace, "k", {"v": 1})
    assert isinstance(err.value, InvalidNamespaceError) and isinstance(err.value, InvalidNamespace)
    assert isinstance(err.value, ValueError)


def test_search_and_listing_preserve_prefixes(store):
    store.put(("tenant", "a_%"), "k", {"v": 1})
    store.put(("tenant", "ab"), "k", {"v": 1})
    assert {i.namespace for i in store.search(())} == {("tenant", "a_%"), ("tenant", "ab")}
    assert [i.namespace for i in store.search(("tenant", "a_%"))] == [("tenant", "a_%")]
    assert store.list_namespaces(prefix=("tenant", "*"), suffix=("*",)) == [
        ("tenant", "a_%"),
        ("tenant", "ab"),
    ]


def test_inmemory_store_search_supports_dotted_filter_keys(store):
    store.put(("docs",), "hyphen", {"user": {"access-level": "nested"}})
    assert keys(store.search(("docs",), filter={"user.access-level": "nested"})) == ["hyphen"]


def test_filter_operators_and_errors(store):
    store.put(("f",), "a", {"n": 1, "s": "apple", "nested": {"x": 1, "y": 2}, "maybe": None})
    store.put(("f",), "b", {"n": 2, "s": "banana", "nested": {"x": 2}})
    store.put(("f",), "c", {"n": "3", "s": "cherry"})  # a string, not a number
    assert sorted(keys(store.search(("f",), filter={"n": {"$gte": 1, "$lt": 3}}))) == ["a", "b"]
    assert sorted(keys(store.search(("f",), filter={"n": {"$ne": 1}}))) == ["b", "c"]
    assert sorted(keys(store.search(("f",), filter={"s": {"$gt": "b"}}))) == [
        "b",
        "c",
    ]  # strings compare as strings
    assert keys(store.search(("f",), filter={"nested": {"x": 1}})) == ["a"]  # containment
    assert keys(store.search(("f",), filter={"nested.y": {"$eq": 2}})) == ["a"]
    assert keys(store.search(("f",), filter={"n": {"$eq": "3"}})) == ["c"]
    assert keys(store.search(("f",), filter={"n": True})) == []  # True is not 1
    assert keys(store.search(("f",), filter={"maybe": None})) == [
        "c",
        "b",
        "a",
    ]  # missing counts as null
    with pytest.raises(ValueError, match="Unsupported operator"):
        store.search(("f",), filter={"n": {"$in": [1, 2]}})
    with pytest.raises(ValueError, match="Unsupported operator"):
        store.search(("f",), query="fruit", filter={"n": {"$regex": "1"}})
    with pytest.raises(ValueError):
        store.search(("f",), filter=["n"])  # type: ignore[arg-type]


# -------------------- TTL (checkpoint-sqlite test_ttl.py, test_store_ttl.py)


def test_ttl_basic(make, db_path):
    store = make(ttl={"default_ttl": 1 / 60})
    assert store.supports_ttl
    store.put(("test",), "item1", {"value": "test"})
    assert store.get(("test",), "item1").value == {"value": "test"}
    time.sleep(1.2)
    assert store.get(("test",), "item1") is None  # expired rows are never returned, swept or not
    assert len(rows(db_path)) == 1
    assert store.sweep_ttl() == 1
    assert rows(db_path) == []


def test_ttl_refresh(make):
    store = make(ttl={"default_ttl": 1.5 / 60, "refresh_on_read": True})  # 1.5 s
    store.put(("test",), "item1", {"value": "test"})
    time.sleep(0.9)
    assert store.get(("test",), "item1", refresh_ttl=True) is not None
    time.sleep(0.9)
    # 1.8 s after the put: alive only because the read refreshed it (0.6 s of slack).
    assert store.get(("test",), "item1", refresh_ttl=False) is not None
    time.sleep(1.6)
    assert store.get(("test",), "item1") is None


def test_ttl_refresh_on_read_extends_expiry(make, db_path):
    ns = ("test",)
    store = make()
    store.put(ns, "ttl", {"v": 1}, ttl=10)
    store.put(ns, "forever", {"v": 2})
    first = row(db_path, ns, "ttl")["expires_at"]
    assert row(db_path, ns, "forever")["expires_at"] is None
    assert row(db_path, ns, "ttl")["extra"]["ttl_minutes"] == 10
    assert first == pytest.approx(time.time() + 600, abs=5)
    time.sleep(0.05)
    store.get(ns, "ttl", refresh_ttl=False)
    store.search(ns, refresh_ttl=False)
    assert row(db_path, ns, "ttl")["expires_at"] == first
    store.get(ns, "ttl")  # BaseStore's default: refresh
    second = row(db_path, ns, "ttl")["expires_at"]
    assert second > first
    time.sleep(0.05)
    store.search(ns, query="anything")
    assert row(db_path, ns, "ttl")["expires_at"] > second
    assert row(db_path, ns, "forever")["expires_at"] is None
    # The refresh rewrote expires_at only: value and updated_at are untouched.
    assert store.get(ns, "ttl").value == {"v": 1}
    # refresh_on_read=False in TTLConfig turns the default off.
    quiet = make(ttl={"refresh_on_read": False})
    third = row(db_path, ns, "ttl")["expires_at"]
    time.sleep(0.05)
    quiet.get(ns, "ttl")
    assert row(db_path, ns, "ttl")["expires_at"] == third


def test_ttl_custom_value(store, db_path):
    store.put(("test",), "item1", {"value": "short"}, ttl=1 / 60)
    store.put(("test",), "item2", {"value": "long"}, ttl=3)
    assert row(db_path, ("test",), "item1")["expires_at"] == pytest.approx(time.time() + 1, abs=2)
    assert row(db_path, ("test",), "item2")["expires_at"] == pytest.approx(time.time() + 180, abs=2)
    expire_now(db_path, ("test",), "item1")
    assert store.get(("test",), "item1") is None
    assert store.get(("test",), "item2") is not None
    assert store.sweep_ttl() == 1


def test_ttl_override_default(make, db_path):
    store = make(ttl={"default_ttl": 5})
    store.put(("test",), "item1", {"value": "override"}, ttl=1)
    store.put(("test",), "item2", {"value": "default"})
    store.put(("test",), "item3", {"value": "permanent"}, ttl=None)
    now = time.time()
    assert row(db_path, ("test",), "item1")["expires_at"] == pytest.approx(now + 60, abs=2)
    assert row(db_path, ("test",), "item2")["expires_at"] == pytest.approx(now + 300, abs=2)
    assert row(db_path, ("test",), "item3")["expires_at"] is None
    expire_now(db_path, ("test",), "item1")
    assert [store.get(("test",), k) is None for k in ("item1", "item2", "item3")] == [
        True,
        False,
        False,
    ]
    expire_now(db_path, ("test",), "item2")
    assert [store.get(("test",), k) is None for k in ("item1", "item2", "item3")] == [
        True,
        True,
        False,
    ]


def test_search_with_ttl(make, db_path):
    store = make(ttl={"default_ttl": 1})
    store.put(("test",), "item1", {"value": "apple"})
    store.put(("test",), "item2", {"value": "banana"})
    assert keys(store.search(("test",), filter={"value": "apple"})) == ["item1"]
    expire_now(db_path, ("test",), "item1")
    assert store.search(("test",), filter={"value": "apple"}) == []
    assert "item1" not in keys(store.search(("test",), query="apple"))


def test_omit_expired_filters_read_paths(make, db_path):
    store = make(ttl={"default_ttl": 5})
    expired_ns, control_ns = ("omit", "expired"), ("omit", "control")
    store.put(expired_ns, "e", {"data": "gone"}, ttl=5)
    store.put(control_ns, "c", {"data": "keep"}, ttl=None)
    expire_now(db_path, expired_ns, "e")
    assert row(db_path, expired_ns, "e") is not None  # still physically present
    assert store.get(expired_ns, "e") is None
    assert store.get(control_ns, "c") is not None
    assert store.search(expired_ns) == [] and store.search(expired_ns, query="gone") == []
    assert keys(store.search(control_ns)) == ["c"]
    namespaces = store.list_namespaces(prefix=("omit",))
    assert expired_ns not in namespaces and control_ns in namespaces


def test_omit_expired_refresh_ttl_only_refreshes_live_rows(make, db_path):
    ns = ("refresh",)
    store = make(ttl={"default_ttl": 5, "refresh_on_read": True})
    for k, n in (("expired", 0), ("live_get", 1), ("live_search", 2)):
        store.put(ns, k, {"n": n}, ttl=5)
    expire_now(db_path, ns, "expired")
    before = {k: row(db_path, ns, k)["expires_at"] for k in ("expired", "live_get", "live_search")}
    time.sleep(0.05)
    assert store.get(ns, "expired", refresh_ttl=True) is None
    assert "expired" not in keys(store.search(ns, refresh_ttl=True))
    assert row(db_path, ns, "expired")["expires_at"] == before["expired"]
    assert store.get(ns, "live_get", refresh_ttl=True) is not None
    assert row(db_path, ns, "live_get")["expires_at"] > before["live_get"]
    assert row(db_path, ns, "live_search")["expires_at"] > before["live_search"]


def test_omit_expired_search_pagination(make, db_path):
    ns = ("page",)
    store = make(ttl={"default_ttl": 5})
    for k in ("a", "b", "c"):
        store.put(ns, k, {"k": k})
    store.put(ns, "expired", {"k": "x"})
    expire_now(db_path, ns, "expired")
    now = time.time()
    for k, secs in {"a": 1, "expired": 2, "b": 3, "c": 4}.items():
        sql(
            db_path, "UPDATE memories SET updated_at = ? WHERE id = ?", (now - secs, item_id(ns, k))
        )
    assert keys(store.search(ns, limit=2, offset=0)) == ["a", "b"]
    assert keys(store.search(ns, limit=2, offset=2)) == ["c"]


def test_ttl_sweeper(make, db_path):
    store = make(ttl={"default_ttl": 1 / 60, "sweep_interval_minutes": 0.4 / 60})
    store.start_ttl_sweeper()
    store.put(("test",), "item1", {"value": "test"})
    assert store.get(("test",), "item1", refresh_ttl=False) is not None
    deadline = time.time() + 5
    while rows(db_path) and time.time() < deadline:
        time.sleep(0.2)
    assert rows(db_path) == []
    assert store.stop_ttl_sweeper(timeout=2)


def test_async_ttl_basic(make):
    store = make(ttl={"default_ttl": 1 / 60})

    async def run():
        await store.aput(("test",), "item1", {"value": "test"})
        assert (await store.aget(("test",), "item1")).value == {"value": "test"}
        await asyncio.sleep(1.2)
        assert await store.aget(("test",), "item1") is None

    asyncio.run(run())


def test_store_put_timedelta(store, db_path):
    store.put(("test",), "k1", {"a": 1}, ttl=timedelta(minutes=15))
    r = row(db_path, ("test",), "k1")
    assert r["extra"]["ttl_minutes"] == 15.0
    assert r["expires_at"] == pytest.approx(time.time() + 900, abs=2)
    store.put(("test",), "k2", {"a": 1}, ttl=datetime.now(UTC) + timedelta(minutes=60))  # type: ignore[arg-type]
    assert 59.9 <= row(db_path, ("test",), "k2")["extra"]["ttl_minutes"] <= 60.0
    for bad in (0, -1, float("nan"), "10"):
        with pytest.raises(InvalidInput):
            store.put(("test",), "k3", {"a": 1}, ttl=bad)  # type: ignore[arg-type]
    assert row(db_path, ("test",), "k3") is None


# -------------------- adapter-specific behaviour


def test_records_carry_key_value_and_hash_id(store, db_path):
    store.put(("memories", "u1"), "pref", {"content": "User prefers dark mode", "n": 1})
    (r,) = rows(db_path)
    assert r["id"] == item_id(("memories", "u1"), "pref")
    assert r["ns"] == "memories/u1"
    assert r["meta"]["source"] == SOURCE
    assert r["extra"]["key"] == "pref" and r["extra"]["value"] == {
        "content": "User prefers dark mode",
        "n": 1,
    }
    assert r["content"] == "User prefers dark mode\nn: 1"
    store.put(
        ("memories", "u1"), "pref", {"content": "User prefers light mode"}
    )  # upsert, same row
    assert [x["extra"]["value"] for x in rows(db_path)] == [{"content": "User prefers light mode"}]


def test_index_false_is_stored_listed_filtered_and_never_scored(store, db_path):
    store.put(
        ("d",),
        "secret",
        {"text": "the launch code is in the blue folder", "kind": "x"},
        index=False,
    )
    store.put(("d",), "normal", {"text": "the blue folder is on the shelf", "kind": "x"})
    assert row(db_path, ("d",), "secret")["content"] == UNINDEXED
    assert store.get(("d",), "secret").value["kind"] == "x"
    assert sorted(keys(store.search(("d",), filter={"kind": "x"}))) == ["normal", "secret"]
    found = store.search(("d",), query="launch code in the blue folder", limit=50)
    assert keys(found) == ["normal", "secret"] and found[1].score is None  # unindexed: last, unscored
    # A put without index=False indexes it again.
    store.put(("d",), "secret", {"text": "the launch code is in the blue folder", "kind": "x"})
    assert keys(store.search(("d",), query="where is the launch code?"))[0] == "secret"


def test_batch_reads_first_writes_last(store):
    """As LangGraph's stores: reads see the store before the batch, puts land last (last wins)."""
    ns = ("b",)
    store.put(ns, "k", {"v": 0})
    results = store.batch(
        [
            PutOp(ns, "k", {"v": 1}),
            GetOp(ns, "k"),
            PutOp(ns, "k", {"v": 2}),
            PutOp(ns, "k", {"v": 3}),  # last put of a run wins
            GetOp(ns, "k"),
            PutOp(ns, "k", None),
            GetOp(ns, "k"),
            PutOp(ns, "k", {"v": 4}),
            SearchOp(ns, query="v"),
            ListNamespacesOp(),
        ]
    )
    assert results[1].value == results[4].value == results[6].value == {"v": 0}
    assert [i.value for i in results[8]] == [{"v": 0}]
    assert results[9] == [ns]
    assert [r for i, r in enumerate(results) if i in (0, 2, 3, 5, 7)] == [None] * 5
    assert store.get(ns, "k").value == {"v": 4}
    before = store.get(ns, "k")
    assert store.batch([PutOp(ns, "k", None), GetOp(ns, "k")]) == [None, before]
    assert store.get(ns, "k") is None


def test_store_sees_memories_written_elsewhere(store, db_path):
    """One file, one memory: records the service wrote are items (key = id, derived value)."""
    dark = store.service.write("User prefers dark mode", "memories/u1", {"type": "user_profile"})
    other = store.service.write("A record in a namespace the adapter never wrote", "elsewhere/x")
    store.put(("memories", "u1"), "k", {"content": "User prefers tea"})
    assert sorted(keys(store.search(("memories",)))) == sorted(["k", dark.id])
    assert keys(store.search(("memories",), query="dark mode", limit=50))[0] == dark.id
    assert store.get(("memories", "u1"), dark.id).value == {
        "content": "User prefers dark mode", "type": "user_profile", "source": "user"}
    assert store.get(("elsewhere", "x"), other.id) is not None
    assert store.get(("memories", "u1"), other.id) is None  # ids are looked up in their namespace
    assert store.list_namespaces() == [("elsewhere", "x"), ("memories", "u1")]
    assert len(rows(db_path)) == 3


def test_value_filter_widens_candidate_pool(store):
    """Filters apply after ranking, so the adapter keeps asking for more candidates."""
    ops = [
        PutOp(("pool",), f"tea{i}", {"text": f"Green tea note number {i}", "group": "tea"})
        for i in range(80)
    ]
    ops += [
        PutOp(("pool",), f"car{i}", {"text": f"Diesel truck engine repair {i}", "group": "car"})
        for i in range(3)
    ]
    store.batch(ops)
    results = store.search(("pool",), query="green tea", filter={"group": "car"}, limit=10)
    assert sorted(keys(results)) == ["car0", "car1", "car2"]
    assert keys(store.search(("pool",), query="green tea", limit=5, offset=78)) != []


def test_filtered_listing_pages_past_one_scroll_page(store):
    store.batch([PutOp(("many",), f"k{i:03d}", {"i": i, "even": i % 2 == 0}) for i in range(300)])
    evens = store.search(("many",), filter={"even": True}, limit=200, offset=20)
    assert len(evens) == 130 and all(i.value["even"] for i in evens)
    assert len(store.search(("many",), limit=1000)) == 300


def test_values_round_trip_as_json(store):
    value = {
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "id": uuid.UUID(int=1),
        "t": (1, 2),
        "nested": {"zh": "中文", "list": [1.5, None, True]},
    }
    store.put(("j",), "k", value)
    got = store.get(("j",), "k").value
    assert got == {
        "when": "2026-01-02T03:04:05Z",
        "id": "00000000-0000-0000-0000-000000000001",
        "t": [1, 2],
        "nested": {"zh": "中文", "list": [1.5, None, True]},
    }
    with pytest.raises(InvalidInput):
        store.put(("j",), "bad", {"f": object()})
    store.put(
        ("j",), "huge", {"text": "word " * 10_000}
    )  # longer than max_content_chars: still stored
    assert store.get(("j",), "huge").value["text"].startswith("word")


def test_index_config_validation(db_path, embedder):
    svc = MemoryService.from_settings(MemorySettings(path=db_path), embedder=embedder)
    try:
        with pytest.raises(ValueError, match="embed"):
            MemoryStore(svc, index={"dims": embedder.dim, "embed": "openai:text-embedding-3-small"})
        with pytest.raises(ValueError, match="dims"):
            MemoryStore(svc, index={"dims": 3})
        assert MemoryStore(svc, index={"dims": embedder.dim, "fields": ["text"]}).index_config[
            "fields"
        ] == ["text"]
    finally:
        svc.close()


def test_min_sim_cuts_unrelated_hits(make):
    strict = make(min_sim=0.3)
    strict.put(("m",), "tea", {"content": "User drinks green tea every morning"})
    strict.put(("m",), "tax", {"content": "Quarterly tax filing deadline for corporations"})
    assert keys(strict.search(("m",), query="what does the user drink?")) == ["tea"]


def test_cross_language_chinese_value_found_by_english_query(store):
    ns = ("memories", "u1")
    store.put(ns, "tea", {"content": "用户每天早上喝一杯绿茶"})
    store.put(ns, "job", {"content": "User works as a data analyst at a bank"})
    store.put(ns, "lang", {"content": "User's favourite programming language is Python"})
    store.put(ns, "city", {"content": "用户住在杭州西湖附近"})
    results = store.search(ns, query="What does the user drink in the morning?")
    assert results[0].key == "tea"
    assert store.search(ns, query="Where does the user live?")[0].key == "city"
    # And the other way round: a Chinese query finds an English value.
    assert store.search(ns, query="用户做什么工作？")[0].key == "job"


def test_docstring_example_runs():
    import doctest

    import memory.store

    result = doctest.testmod(memory.store)
    assert result.attempted > 0 and result.failed == 0


def test_make_store_for_langgraph_json(tmp_path, monkeypatch):
    path = tmp_path / "studio.sqlite"
    monkeypatch.setenv("MEMORY_PATH", str(path))
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    store = make_store()
    try:
        assert isinstance(store, BaseStore) and store.supports_ttl
        store.put(("studio",), "k", {"content": "from langgraph.json"})
        assert store.get(("studio",), "k").value == {"content": "from langgraph.json"}
        assert rows(str(path))[0]["extra"]["key"] == "k"
    finally:
        store.close()


# -------------------- LangGraph graphs


@dataclass
class Ctx:
    user_id: str


class State(TypedDict, total=False):
    text: str
    found: list[str]


def test_graph_reads_and_writes_through_runtime_store_and_get_store(store, db_path):
    def write(state: State, runtime: Runtime[Ctx]) -> State:
        runtime.store.put(("memories", runtime.context.user_id), "pref", {"content": state["text"]})
        return {}

    def read(state: State) -> State:
        items = get_store().search(
            ("memories", "u1"), query="which colour theme does the user like?"
        )
        return {"found": [i.value["content"] for i in items]}

    graph = (
        StateGraph(State, context_schema=Ctx)
        .add_node("write", write)
        .add_node("read", read)
        .add_edge(START, "write")
        .add_edge("write", "read")
        .compile(store=store)
    )
    out = graph.invoke({"text": "User prefers the dark colour theme"}, context=Ctx("u1"))
    assert out["found"] == ["User prefers the dark colour theme"]
    assert row(db_path, ("memories", "u1"), "pref")["extra"]["value"] == {
        "content": "User prefers the dark colour theme"
    }

    async def aread(state: State, runtime: Runtime[Ctx]) -> State:
        items = await runtime.store.asearch(("memories", runtime.context.user_id), query="theme")
        return {"found": [i.key for i in items]}

    agraph = (
        StateGraph(State, context_schema=Ctx)
        .add_node("aread", aread)
        .add_edge(START, "aread")
        .compile(store=store)
    )
    assert asyncio.run(agraph.ainvoke({}, context=Ctx("u1")))["found"] == ["pref"]


# -------------------- langmem tools


class ToolState(TypedDict, total=False):
    tool: str
    args: dict[str, Any]
    result: Any


def _tool_graph(store: MemoryStore, tools: dict[str, Any], use_async: bool):
    if use_async:

        async def call(state: ToolState) -> ToolState:
            return {"result": await tools[state["tool"]].ainvoke(state["args"])}
    else:

        def call(state: ToolState) -> ToolState:
            return {"result": tools[state["tool"]].invoke(state["args"])}

    return StateGraph(ToolState).add_node("call", call).add_edge(START, "call").compile(store=store)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_langmem_manage_and_search_tools(store, db_path, use_async):
    ns_template = ("memories", "{langgraph_user_id}")
    tools = {
        "manage": create_manage_memory_tool(namespace=ns_template),
        "search": create_search_memory_tool(namespace=ns_template),
    }
    graph = _tool_graph(store, tools, use_async)
    config = {"configurable": {"langgraph_user_id": "u42"}}

    def run(tool: str, cfg: dict[str, Any] = config, **args: Any) -> Any:
        state = {"tool": tool, "args": args}
        out = asyncio.run(graph.ainvoke(state, cfg)) if use_async else graph.invoke(state, cfg)
        return out["result"]

    created = run("manage", content="User prefers dark mode in every editor", action="create")
    mem_id = re.fullmatch(r"created memory (\S+)", created).group(1)
    run("manage", content="用户每天早上喝一杯绿茶", action="create")
    assert {r["ns"] for r in rows(db_path)} == {"memories/u42"}
    assert row(db_path, ("memories", "u42"), mem_id)["extra"]["value"] == {
        "content": "User prefers dark mode in every editor"
    }

    found = json.loads(run("search", query="What does the user drink in the morning?"))
    assert found[0]["value"] == {"content": "用户每天早上喝一杯绿茶"}
    assert found[0]["namespace"] == ["memories", "u42"] and isinstance(found[0]["score"], float)
    assert json.loads(run("search", query="editor theme", limit=1))[0]["key"] == mem_id

    assert (
        run("manage", content="User switched to light mode", action="update", id=mem_id)
        == f"updated memory {mem_id}"
    )
    assert row(db_path, ("memories", "u42"), mem_id)["extra"]["value"] == {
        "content": "User switched to light mode"
    }
    assert len(rows(db_path)) == 2
    assert json.loads(run("search", query="editor colour theme", limit=1))[0]["value"][
        "content"
    ] == ("User switched to light mode")

    assert run("manage", action="delete", id=mem_id) == f"Deleted memory {mem_id}"
    assert row(db_path, ("memories", "u42"), mem_id) is None
    assert [r["extra"]["value"]["content"] for r in rows(db_path)] == ["用户每天早上喝一杯绿茶"]
    # Another user sees nothing.
    assert (
        json.loads(run("search", {"configurable": {"langgraph_user_id": "u43"}}, query="tea")) == []
    )


# -------------------- langmem memory store manager


class ScriptedChatModel(BaseChatModel):
    """Replays AIMessages computed by ``script(messages, tool_names)``; no LLM involved.

    ``bind_tools`` returns a binding of this model (trustcall reaches ``.bound`` on it), and
    records the tool names so the script can tell extraction from update rounds apart.
    """

    script: Callable[[list[BaseMessage], list[str]], AIMessage]
    calls: list[list[str]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        names = kwargs.get("tool_names", [])
        self.calls.append(names)
        return ChatResult(generations=[ChatGeneration(message=self.script(list(messages), names))])

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.bind(tool_names=names, tool_choice=tool_choice)


def _existing_ids(messages: list[BaseMessage]) -> dict[str, str]:
    """Map content -> id of the existing memories trustcall lists in its system message, as
    ``<instance id=ID schema_type="Memory">CONTENT</instance>``."""
    text = "\n".join(str(m.content) for m in messages)
    return {
        m.group(2): m.group(1)
        for m in re.finditer(
            r'<instance id=(\S+) schema_type="Memory">\n(.*?)\n</instance>', text, re.S
        )
    }


def test_langmem_memory_store_manager_with_scripted_model(store, db_path):
    def script(messages: list[BaseMessage], tools: list[str]) -> AIMessage:
        if "PatchDoc" not in tools:  # first session: nothing stored yet -> insert two memories
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "Memory",
                        "args": {"content": "User prefers dark mode in every app"},
                        "id": "c1",
                    },
                    {"name": "Memory", "args": {"content": "用户每天早上喝一杯绿茶"}, "id": "c2"},
                ],
            )
        existing = _existing_ids(messages)
        dark = next(i for c, i in existing.items() if "dark mode" in c)
        tea = next(i for c, i in existing.items() if "绿茶" in c)
        return AIMessage(
            content="",
            tool_calls=[
                {
                    "name": "PatchDoc",
                    "id": "c3",
                    "args": {
                        "json_doc_id": dark,
                        "planned_edits": "the user switched themes",
                        "patches": [
                            {
                                "op": "replace",
                                "path": "/content",
                                "value": "User now prefers light mode",
                            }
                        ],
                    },
                },
                {"name": "RemoveDoc", "id": "c4", "args": {"json_doc_id": tea}},
                {"name": "Memory", "id": "c5", "args": {"content": "User is learning the violin"}},
            ],
        )

    model = ScriptedChatModel(script=script)
    manager = create_memory_store_manager(
        model, namespace=("memories", "{langgraph_user_id}"), store=store, enable_deletes=True
    )
    config = {"configurable": {"langgraph_user_id": "u7"}}

    puts = manager.invoke(
        {"messages": [{"role": "user", "content": "I like dark mode. 我每天早上喝绿茶。"}]},
        config=config,
    )
    assert len(puts) == 2
    assert sorted(r["extra"]["value"]["content"]["content"] for r in rows(db_path)) == [
        "User prefers dark mode in every app",
        "用户每天早上喝一杯绿茶",
    ]
    assert {r["ns"] for r in rows(db_path)} == {"memories/u7"}
    assert all(r["extra"]["value"]["kind"] == "Memory" for r in rows(db_path))
    # The manager's own search goes through the adapter (English query, Chinese memory).
    top = manager.search(query="What does the user drink in the morning?", config=config)[0]
    assert (
        "绿茶" in top.value.content
    )  # langmem coerces {"kind", "content"} back into its Memory model

    manager.invoke(
        {
            "messages": [
                {
                    "role": "user",
                    "content": "I switched to light mode, stopped tea, and started violin lessons.",
                }
            ]
        },
        config=config,
    )
    assert sorted(r["extra"]["value"]["content"]["content"] for r in rows(db_path)) == [
        "User is learning the violin",
        "User now prefers light mode",
    ]
    assert model.calls[0] == ["Memory"]
    assert {"PatchDoc", "Memory", "RemoveDoc"} <= set(model.calls[-1])
