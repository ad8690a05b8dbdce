"""``MemoryStore`` semantics that LangGraph's store test suites check, one test (or a few) each.

LangGraph's own files (``libs/checkpoint/tests/test_store.py``, ``libs/checkpoint-sqlite/tests/
test_store.py`` and ``test_async_store.py``) run against the adapter with
``tests/langgraph_store/run.py``; these are ours, on a real SQLite file with the real packaged
embedder, plus a deterministic character embedding where LangGraph's tests use one.
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from collections import Counter

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

from memory import MemorySettings
from memory.errors import InvalidNamespace, SchemaMismatch
from memory.policy.manager import MemoryManager
from memory.store import MemorySearchItem, MemoryStore, StoreNamespaceError
from memory.store_index import EmbedderEmbeddings


class CharEmbeddings(Embeddings):
    """Character counts through fixed random projections (LangGraph's CharacterEmbeddings idea)."""

    def __init__(self, dims: int = 64):
        self.dims = dims
        self._rng = np.random.default_rng(7)
        self._proj: dict[str, np.ndarray] = {}
        self.calls = 0

    def _one(self, text: str) -> list[float]:
        v = np.zeros(self.dims)
        for ch, n in Counter(text).items():
            if ch not in self._proj:
                self._proj[ch] = self._rng.normal(size=self.dims)
            v += n * self._proj[ch]
        norm = np.linalg.norm(v)
        return (v / norm if norm else v).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "store.sqlite")


@pytest.fixture
def store(path, embedder):
    from memory.service import MemoryService

    s = MemoryStore(MemoryService.from_settings(MemorySettings(path=path), embedder=embedder), owns_service=True)
    yield s
    s.close()


# ---------------------------------------------------------------- construction like SqliteStore
def test_constructor_path_index_and_embeddings_attribute(path):
    emb = CharEmbeddings()
    store = MemoryStore(path=path, index={"dims": 64, "embed": emb, "fields": ["text"]})
    try:
        assert store.embeddings is emb and store.index_config["embed"] is emb
        assert store.index_config["dims"] == 64 and store.index_config["fields"] == ["text"]
        store.put(("docs",), "a", {"text": "hello world", "other": "zzz"})
        hit = store.search(("docs",), query="hello world")[0]
        assert hit.score == pytest.approx(1.0, abs=1e-5)  # identical text: cosine 1
    finally:
        store.close()
    # The file records its model: reopening with another one is refused, nothing is mixed.
    with pytest.raises(SchemaMismatch):
        MemoryStore(path=path)


def test_from_conn_string_setup_and_text_fields(tmp_path):
    emb = CharEmbeddings()
    with MemoryStore.from_conn_string(str(tmp_path / "a.sqlite"), index={"dims": 64, "embed": emb,
                                                                          "text_fields": ["title"]}) as store:
        store.setup()
        store.setup()  # idempotent
        assert store.index_config["text_fields"] == ["title"] and store.index_config["fields"] == ["title"]
        store.put(("d",), "k", {"title": "abc", "body": "xyz"})
        assert store.search(("d",), query="abc")[0].score == pytest.approx(1.0, abs=1e-5)
    assert store.service.backend is not None
    with MemoryStore.from_conn_string(str(tmp_path / "a.sqlite"), index={"dims": 64, "embed": emb}) as again:
        assert again.get(("d",), "k").value == {"title": "abc", "body": "xyz"}  # persisted


def test_default_embeddings_wrap_the_packaged_model(store, embedder):
    assert isinstance(store.embeddings, EmbedderEmbeddings)
    vec = store.embeddings.embed_query("green tea")
    assert len(vec) == embedder.dim and vec == pytest.approx(embedder.embed_query("green tea").tolist(), abs=1e-6)
    assert store.index_config["dims"] == embedder.dim and store.index_config["fields"] == ["$"]


def test_index_embed_function_name_and_dims(tmp_path):
    emb = CharEmbeddings(32)

    def embed_texts(texts: list[str]) -> list[list[float]]:
        return emb.embed_documents(texts)

    with MemoryStore.from_conn_string(str(tmp_path / "f.sqlite"), index={"dims": 32, "embed": embed_texts}) as s:
        s.put(("d",), "k", {"text": "abc"})
        assert s.search(("d",), query="abc")[0].key == "k"
    with MemoryStore.from_conn_string(":memory:", index={"embed": "local/wordllama-l2-supercat"}) as s:
        assert s.index_config["dims"] == 256  # a packaged model by name: no download
        s.put(("d",), "k", {"text": "green tea every morning"})
        assert s.search(("d",), query="tea")[0].key == "k"
    with MemoryStore(path=":memory:", index={"dims": 10, "embed": embed_texts}) as wrong:
        with pytest.raises(ValueError, match="dims=10"):  # found on the first embedding, nothing written
            wrong.put(("d",), "k", {"text": "abc"})
        assert wrong.search(("d",)) == []
    with pytest.raises(ValueError, match="cannot start embedding model"):
        MemoryStore(path=":memory:", index={"dims": 8, "embed": "nosuchprovider:some-model"})
    with pytest.raises(ValueError, match="index embed must be"):
        MemoryStore(path=":memory:", index={"dims": 8, "embed": 42})


def test_async_only_embed_function(tmp_path):
    emb = CharEmbeddings(16)

    async def aembed(texts: list[str]) -> list[list[float]]:
        return emb.embed_documents(texts)

    with MemoryStore.from_conn_string(str(tmp_path / "a.sqlite"), index={"dims": 16, "embed": aembed}) as s:
        async def run():
            await s.aput(("d",), "k", {"text": "abc"})
            return await s.asearch(("d",), query="abc")

        assert asyncio.run(run())[0].key == "k"
    with pytest.raises(ValueError, match="dims is required"):
        MemoryStore(path=":memory:", index={"embed": aembed})


# ---------------------------------------------------------------- scores and max pooling
def test_score_is_cosine_order_is_ours(tmp_path):
    emb = CharEmbeddings()
    with MemoryStore.from_conn_string(str(tmp_path / "s.sqlite"), index={"dims": 64, "embed": emb}) as s:
        s.put(("t",), "a", {"text": "aaa"})
        s.put(("t",), "b", {"text": "poisson distribution"})
        res = s.search(("t",), query="aaa bbb")
        q = emb.embed_query("aaa bbb")
        expected = {"a": cos(q, emb.embed_query("aaa")), "b": cos(q, emb.embed_query("poisson distribution"))}
        assert all(isinstance(r, MemorySearchItem) for r in res)
        for r in res:
            assert r.score == pytest.approx(expected[r.key], abs=1e-5)
            assert r.memory_score is not None and set(r.breakdown) >= {"sim", "vector", "keyword", "decay", "score"}
        assert [r.memory_score for r in res] == sorted((r.memory_score for r in res), reverse=True)
        listed = s.search(("t",))
        assert all(r.score is None and r.memory_score is None for r in listed)


def test_negative_cosine_is_reported_raw(tmp_path):
    vecs = {"up": [1.0, 0.0], "down": [-1.0, 0.0]}

    def embed(texts: list[str]) -> list[list[float]]:
        return [vecs.get(t, [0.0, 1.0]) for t in texts]

    with MemoryStore.from_conn_string(str(tmp_path / "n.sqlite"), index={"dims": 2, "embed": embed}) as s:
        s.put(("t",), "k", {"text": "down"})
        assert s.search(("t",), query="up")[0].score == pytest.approx(-1.0)


def test_each_path_is_embedded_and_max_pooled(tmp_path, embedder):
    with MemoryStore.from_conn_string(str(tmp_path / "p.sqlite"), index={"fields": ["title", "notes[*].text"]},
                                      settings=None) as s:
        value = {"title": "Quarterly revenue report for East China",
                 "notes": [{"text": "The user drinks green tea every morning"}, {"text": "Rocket launch at dawn"}]}
        s.put(("d",), "k", value)
        hit = s.search(("d",), query="The user drinks green tea every morning")[0]
        # The matching path alone decides the score (LangGraph: > .9 for the matching field); the
        # joined text of all three would score far lower.
        joined = embedder.embed_documents(["\n".join([value["title"]] + [n["text"] for n in value["notes"]])])[0]
        q = embedder.embed_query("The user drinks green tea every morning")
        assert hit.score == pytest.approx(1.0, abs=1e-3) and float(joined @ q) < 0.9
        assert hit.breakdown["vector"] == pytest.approx(hit.score, abs=1e-3)


# ---------------------------------------------------------------- filters
def test_unsafe_filter_keys_raise_value_error(store):
    store.put(("d",), "a", {"access-level": "public", "城市": "杭州", "user": {"id.x": 1}})
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("d",), filter={"access') = 'public' OR '1'='1": "x"})
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("d",), filter={"": "x"})
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("d",), query="x", filter={"a b": 1})
    # Letters of any script, digits, '_', '.', '-' are fine.
    assert [i.key for i in store.search(("d",), filter={"城市": "杭州"})] == ["a"]
    assert [i.key for i in store.search(("d",), filter={"access-level": "public"})] == ["a"]


# ---------------------------------------------------------------- namespaces
@pytest.mark.parametrize("label", ["alice\n", " padded ", "a/b", "back\\slash", "50%", "50%25", "tab\there", "中文"])
def test_langgraph_labels_round_trip(store, label):
    store.put(("users", label), "k", {"v": label})
    store.put(("users", "alice"), "k", {"v": "plain"})
    assert store.get(("users", label), "k").value == {"v": label}
    assert ("users", label) in store.list_namespaces(prefix=("users",))
    assert [i.namespace for i in store.search(("users", label))] == [("users", label)]
    assert store.list_namespaces(suffix=(label,)) == [("users", label)]
    store.delete(("users", label), "k")
    assert store.get(("users", label), "k") is None and store.get(("users", "alice"), "k") is not None


@pytest.mark.parametrize("bad", [5, None, "memories/u1", b"x", 3.5])
def test_non_iterable_or_string_namespace_raises_documented_error(store, bad):
    calls = [lambda: store.put(bad, "k", {"v": 1}), lambda: store.get(bad, "k"),
             lambda: store.search(bad), lambda: store.delete(bad, "k")]
    if bad is not None:  # list_namespaces(prefix=None) means "no prefix"
        calls.append(lambda: store.list_namespaces(prefix=bad))
    for call in calls:
        with pytest.raises(StoreNamespaceError, match="namespace must be a tuple of strings") as err:
            call()
        assert isinstance(err.value, InvalidNamespaceError) and isinstance(err.value, InvalidNamespace)
    with pytest.raises(StoreNamespaceError):
        asyncio.run(store.aput(bad, "k", {"v": 1}))
    with pytest.raises(StoreNamespaceError):
        store.batch([GetOp(bad, "k")])


def test_batch_rejects_before_running_anything(store, path):
    store.put(("foo", "bar"), "key", {"original": True})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("valid",), "key", {}), SearchOp(("foo.bar",))])
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.batch([PutOp(("valid",), "key", {}), SearchOp(("foo",), filter={"a b": 1})])
    assert store.get(("valid",), "key") is None
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM memories").fetchone()[0] == 1
    con.close()


# ---------------------------------------------------------------- one memory: Supervisor <-> store <-> langmem
def test_supervisor_memories_are_items_for_the_store_and_langmem(tmp_path, embedder):
    from langmem import create_manage_memory_tool, create_search_memory_tool

    mm = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "m.sqlite")), embedder=embedder)
    try:
        pref = mm.remember("以后报表金额都用万元为单位", "user_profile/u1")
        store = MemoryStore(mm.service)
        item = store.get(("user_profile", "u1"), pref.id)
        assert item.value == {"content": "以后报表金额都用万元为单位", "type": "user_profile", "source": "user"}
        assert store.list_namespaces() == [("user_profile", "u1")]
        search = create_search_memory_tool(namespace=("user_profile", "u1"), store=store)
        found = json.loads(search.invoke({"query": "金额单位"}))
        assert found[0]["key"] == pref.id and found[0]["value"]["content"] == "以后报表金额都用万元为单位"
        assert 0 < found[0]["score"] <= 1
        # langmem's manage tool updates and deletes a Supervisor memory by its id ...
        manage = create_manage_memory_tool(namespace=("user_profile", "u1"), store=store)
        manage.invoke({"action": "update", "id": pref.id, "content": "报表金额用元为单位"})
        assert [r.content for r in mm.service.list("user_profile/u1")] == ["报表金额用元为单位"]
        assert mm.service.get(pref.id).metadata.type == "user_profile"  # still a profile memory
        # ... and what it creates is found by the Supervisor's recall.
        manage.invoke({"action": "create", "content": "User wants bar charts, never pie charts"})
        hits = mm.recall("which chart type?", "user_profile/u1")
        assert hits[0].record.content == "User wants bar charts, never pie charts"
        manage.invoke({"action": "delete", "id": pref.id})
        assert store.get(("user_profile", "u1"), pref.id) is None
    finally:
        mm.close()


def test_put_without_type_takes_the_namespace_kind(store):
    store.put(("user_profile", "u1"), "k", {"content": "prefers 万元"})
    store.put(("notes",), "k", {"content": "x"})
    by_ns = {r.namespace: r.metadata.type for r in store.service.backend.scroll(None, limit=10)}
    assert by_ns == {("user_profile", "u1"): "user_profile", ("notes",): "note"}


def test_many_paths_are_capped_by_content_limit(tmp_path):
    emb = CharEmbeddings(8)
    with MemoryStore.from_conn_string(str(tmp_path / "c.sqlite"), index={"dims": 8, "embed": emb,
                                                                          "fields": ["xs[*]"]}) as s:
        limit = s.service.settings.max_content_chars
        s.put(("d",), "k", {"xs": ["y" * 1000 + str(i) for i in range(math.ceil(limit / 1000) + 5)]})
        rec = s.service.backend.scroll(None, limit=1)[0]
        assert len(rec.content) <= limit


def test_same_semantics_on_the_qdrant_backend(tmp_path, embedder):
    """Switching the backend is configuration: scores, keys and Supervisor memories alike."""
    from memory.backends.qdrant import QdrantBackend
    from memory.service import MemoryService

    settings = MemorySettings(path=str(tmp_path / "unused.sqlite"), backend="qdrant")
    svc = MemoryService(QdrantBackend(location=":memory:", embedding_model=embedder.name, dim=embedder.dim),
                        embedder, settings)
    with MemoryStore(svc, owns_service=True) as s:
        s.put(("docs", "u1"), "tea", {"content": "User drinks green tea every morning"})
        native = svc.write("User lives in Hangzhou", "docs/u1", {"type": "user_profile"})
        hit = s.search(("docs",), query="User drinks green tea every morning")[0]
        assert hit.key == "tea" and hit.score == pytest.approx(1.0, abs=1e-3)
        assert s.get(("docs", "u1"), native.id).value["content"] == "User lives in Hangzhou"
        assert s.batch([PutOp(("docs", "u1"), "tea", None), GetOp(("docs", "u1"), "tea")])[1] is not None
        assert s.get(("docs", "u1"), "tea") is None
        assert s.list_namespaces() == [("docs", "u1")]
