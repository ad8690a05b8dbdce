"""One suite, every backend: tests/conformance/conftest.py lists them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory.errors import InvalidFilter, InvalidInput, MemoryBackendError, SchemaMismatch
from memory.records import MemoryMetadata, MemoryQuery, MemoryRecord

from .conftest import DIM, MODEL, MULTIPROCESS, PERSISTENT

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def unit(i: int, j: int | None = None, w: float = 0.3) -> np.ndarray:
    """A normalised vector mostly along axis i (optionally tilted towards axis j)."""
    v = np.zeros(DIM, dtype=np.float32)
    v[i] = 1.0
    if j is not None:
        v[j] = w
    return v / np.linalg.norm(v)


def rec(id: str, ns: str, content: str = "", **meta) -> MemoryRecord:
    return MemoryRecord(
        id=id, namespace=ns, content=content or f"memory {id}", metadata=MemoryMetadata(**meta),
        created_at=T0, updated_at=T0,
    )


def put(backend, *pairs):
    backend.upsert([r for r, _ in pairs], np.stack([v for _, v in pairs]))


def q(ns, vector=None, text=None, **kw) -> MemoryQuery:
    nss = tuple(tuple(n.split("/")) for n in ([ns] if isinstance(ns, str) else ns))
    return MemoryQuery(namespaces=nss, vector=vector, text=text, now=kw.pop("now", T0 + timedelta(days=1)), **kw)


def ids(results) -> list[str]:
    return [r.record.id for r in results]


def test_identity(backend):
    assert backend.embedding_model == MODEL and backend.dim == DIM
    assert backend.supports_keyword in (True, False)


def test_round_trip(backend):
    r = MemoryRecord(
        id="m1", namespace=("user_profile", "u1"), content="喜欢 bar charts ☕",
        metadata=MemoryMetadata(type="user_profile", source="supervisor", tags=("pref", "chart"),
                                agent="analysis", extra={"n": 3, "nested": {"a": [1, 2]}, "f": 0.5}),
        created_at=T0, updated_at=T0 + timedelta(hours=1), expires_at=T0 + timedelta(days=3650),
    )
    put(backend, (r, unit(0)))
    got = backend.get(["m1"])
    assert got == [r]
    assert got[0].created_at.tzinfo is not None


def test_get_keeps_order_and_skips_unknown(backend):
    put(backend, (rec("a", "n/x"), unit(0)), (rec("b", "n/x"), unit(1)))
    assert [r.id for r in backend.get(["b", "zzz", "a"])] == ["b", "a"]
    assert backend.get([]) == []


def test_upsert_is_idempotent(backend):
    r = rec("m1", "user_profile/u1", "likes tea")
    put(backend, (r, unit(0)))
    put(backend, (r, unit(0)))
    assert backend.count() == 1
    assert ids(backend.query(q("user_profile/u1", unit(0)))) == ["m1"]


def test_upsert_replaces_content_vector_and_keywords(backend):
    put(backend, (rec("m1", "user_profile/u1", "likes green tea"), unit(0)))
    put(backend, (rec("m1", "user_profile/u1", "likes black coffee"), unit(3)))
    assert backend.count() == 1
    assert backend.get(["m1"])[0].content == "likes black coffee"
    res = backend.query(q("user_profile/u1", unit(3)))
    assert res[0].vector_score == pytest.approx(1.0, abs=1e-5)
    if backend.supports_keyword:
        assert backend.query(q("user_profile/u1", text="tea")) == []
        assert ids(backend.query(q("user_profile/u1", text="coffee"))) == ["m1"]


def test_upsert_can_move_namespace(backend):
    put(backend, (rec("m1", "a/u1"), unit(0)))
    put(backend, (rec("m1", "b/u1"), unit(0)))
    assert backend.query(q("a", unit(0))) == []
    assert ids(backend.query(q("b", unit(0)))) == ["m1"]


def test_delete_by_ids(backend):
    put(backend, (rec("a", "n/x", "alpha apples"), unit(0)), (rec("b", "n/x", "beta apples"), unit(1)))
    assert backend.delete(["a", "missing"]) == 1
    assert backend.get(["a"]) == []
    assert backend.count() == 1
    assert ids(backend.query(q("n", unit(0), limit=10))) == ["b"]
    if backend.supports_keyword:
        assert ids(backend.query(q("n", text="apples"))) == ["b"]
    assert backend.delete(["a"]) == 0


def test_delete_by_namespace_and_filter(backend):
    put(backend,
        (rec("p1", "user_profile/u1", type="user_profile"), unit(0)),
        (rec("t1", "user_profile/u1", type="task_traces"), unit(1)),
        (rec("p12", "user_profile/u12", type="user_profile"), unit(2)))
    assert backend.delete(namespace=("user_profile", "u1"), filter={"type": "task_traces"}) == 1
    assert sorted(r.id for r in backend.scroll()) == ["p1", "p12"]
    assert backend.delete(namespace=("user_profile", "u1")) == 1
    assert [r.id for r in backend.scroll()] == ["p12"]


def test_delete_requires_a_target(backend):
    put(backend, (rec("a", "n/x"), unit(0)))
    with pytest.raises(InvalidInput):
        backend.delete()
    assert backend.count() == 1


def test_filters(backend):
    put(backend,
        (rec("a", "n/u1", type="user_profile", source="user", tags=("pref",), extra={"lang": "zh", "n": 1}), unit(0)),
        (rec("b", "n/u1", type="domain_facts", source="analysis", tags=("metric", "pref"), extra={"lang": "en", "n": 5}), unit(0, 1)),
        (rec("c", "n/u1", type="task_traces", source="analysis", extra={"n": 9}), unit(0, 2)))
    def found(flt):
        return sorted(ids(backend.query(q("n/u1", unit(0), filter=flt, limit=10))))
    assert found({"type": "user_profile"}) == ["a"]
    assert found({"source": "analysis"}) == ["b", "c"]
    assert found({"tags": "pref"}) == ["a", "b"]
    assert found({"tags": {"$in": ["metric", "zzz"]}}) == ["b"]
    assert found({"type": {"$in": ["user_profile", "task_traces"]}}) == ["a", "c"]
    assert found({"type": {"$ne": "user_profile"}}) == ["b", "c"]
    assert found({"extra.lang": "zh"}) == ["a"]
    assert found({"extra.n": {"$gte": 5}}) == ["b", "c"]
    assert found({"extra.n": {"$lt": 5}, "source": "user"}) == ["a"]
    assert found({"created_at": {"$lt": T0.isoformat()}}) == []
    assert sorted(r.id for r in backend.scroll(("n",), filter={"source": "analysis"})) == ["b", "c"]
    assert backend.count(("n",), filter={"extra.n": {"$gt": 1}}) == 2


def test_filter_selective_beyond_candidate_pool(backend):
    # 60 records closer to the query than the one that passes the filter: the backend must
    # look past its first candidates instead of returning nothing.
    pairs = [(rec(f"x{i}", "n/u1", type="note"), unit(0, 1, w=0.01 * i)) for i in range(60)]
    pairs.append((rec("target", "n/u1", type="user_profile"), unit(1)))
    put(backend, *pairs)
    res = backend.query(q("n/u1", unit(0), filter={"type": "user_profile"}, limit=5))
    assert ids(res) == ["target"]


def test_unknown_filter_key_is_rejected(backend):
    put(backend, (rec("a", "n/x"), unit(0)))
    with pytest.raises(InvalidFilter, match="unknown filter key"):
        backend.query(q("n", unit(0), filter={"colour": "red"}))
    with pytest.raises(InvalidFilter):
        backend.delete(namespace=("n",), filter={"colour": "red"})
    assert backend.count() == 1


def test_top_k_order_and_score_direction(backend):
    put(backend,
        (rec("far", "n/x"), unit(1)),
        (rec("near", "n/x"), unit(0, 1, w=0.2)),
        (rec("exact", "n/x"), unit(0)),
        (rec("mid", "n/x"), unit(0, 1, w=0.8)))
    res = backend.query(q("n/x", unit(0), limit=3))
    assert ids(res) == ["exact", "near", "mid"]
    scores = [r.vector_score for r in res]
    assert scores == sorted(scores, reverse=True)  # higher is better
    assert scores[0] == pytest.approx(1.0, abs=1e-5)


def test_keyword_channel(backend):
    if not backend.supports_keyword:
        pytest.skip("backend has no keyword channel")
    put(backend,
        (rec("zh", "n/x", "我喜欢喝咖啡，不喝茶"), unit(0)),
        (rec("en1", "n/x", "quarterly revenue report for the north region"), unit(1)),
        (rec("en2", "n/x", "revenue revenue revenue by region"), unit(2)),
        (rec("other", "n/x", "nothing relevant here"), unit(3)))
    assert ids(backend.query(q("n/x", text="咖啡"))) == ["zh"]
    res = backend.query(q("n/x", text="revenue reports"))
    assert set(ids(res)) == {"en1", "en2"}
    assert all(r.keyword_score > 0 for r in res)
    assert backend.query(q("n/x", text="zebra")) == []


def test_hybrid_candidates_carry_both_signals(backend):
    if not backend.supports_keyword:
        pytest.skip("backend has no keyword channel")
    put(backend, (rec("a", "n/x", "alpha tea"), unit(0)), (rec("b", "n/x", "beta coffee"), unit(1)))
    res = {r.record.id: r for r in backend.query(q("n/x", unit(0), text="coffee"))}
    assert set(res) == {"a", "b"}
    assert res["a"].vector_score == pytest.approx(1.0, abs=1e-5) and res["a"].keyword_score == 0
    assert res["b"].keyword_score > 0 and res["b"].vector_score == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize(("stored", "other"), [(("u1",), ("u12",)), (("foo",), ("foobar",))])
def test_namespace_isolation_on_label_boundaries(backend, stored, other):
    put(backend,
        (rec("mine", "/".join(stored + ("profile",)), "shared words here"), unit(0)),
        (rec("theirs", "/".join(other + ("profile",)), "shared words here"), unit(0)))
    for prefix, expected in ((stored, "mine"), (other, "theirs")):
        p = "/".join(prefix)
        assert ids(backend.query(q(p, unit(0), limit=10))) == [expected]
        if backend.supports_keyword:
            assert ids(backend.query(q(p, text="shared words", limit=10))) == [expected]
        assert [r.id for r in backend.scroll(prefix)] == [expected]
        assert backend.count(prefix) == 1


def test_namespace_prefix_and_multiple_namespaces(backend):
    put(backend,
        (rec("p", "user_profile/u1", "tea"), unit(0)),
        (rec("f", "domain_facts/u1", "tea"), unit(0)),
        (rec("s", "sql_memories/u1", "tea"), unit(0)),
        (rec("p2", "user_profile/u2", "tea"), unit(0)))
    assert sorted(ids(backend.query(q(["user_profile/u1", "domain_facts/u1"], unit(0))))) == ["f", "p"]
    assert sorted(ids(backend.query(q("user_profile", unit(0))))) == ["p", "p2"]
    assert backend.count(("user_profile",)) == 2
    assert dict(backend.namespaces()) == {("domain_facts", "u1"): 1, ("sql_memories", "u1"): 1,
                                         ("user_profile", "u1"): 1, ("user_profile", "u2"): 1}


def test_expired_records_are_never_returned(backend):
    live = rec("live", "n/x", "tea time")
    dead = MemoryRecord(id="dead", namespace="n/x", content="tea time", created_at=T0, updated_at=T0,
                        expires_at=T0 + timedelta(hours=1))
    put(backend, (live, unit(0)), (dead, unit(0)))
    now = T0 + timedelta(days=1)
    assert ids(backend.query(q("n/x", unit(0), now=now))) == ["live"]
    if backend.supports_keyword:
        assert ids(backend.query(q("n/x", text="tea", now=now))) == ["live"]
    assert ids(backend.query(q("n/x", unit(0), now=T0, limit=10))) != ["live"]  # not yet expired then
    assert [r.id for r in backend.scroll(("n",))] == ["live"]
    assert backend.count() == 1
    assert backend.get(["dead"]) == []


def test_scroll_pagination_newest_first(backend):
    pairs = [(MemoryRecord(id=f"m{i}", namespace="n/x", content=f"c{i}", created_at=T0,
                           updated_at=T0 + timedelta(minutes=i)), unit(i % DIM)) for i in range(7)]
    put(backend, *pairs)
    page1 = [r.id for r in backend.scroll(("n",), limit=3)]
    page2 = [r.id for r in backend.scroll(("n",), limit=3, offset=3)]
    page3 = [r.id for r in backend.scroll(("n",), limit=3, offset=6)]
    assert page1 + page2 + page3 == [f"m{i}" for i in range(6, -1, -1)]


def test_wrong_dimension_is_rejected_and_nothing_written(backend):
    put(backend, (rec("a", "n/x"), unit(0)))
    with pytest.raises(SchemaMismatch):
        backend.upsert([rec("b", "n/x")], np.ones((1, DIM + 1), dtype=np.float32))
    with pytest.raises(SchemaMismatch):
        backend.query(q("n", np.ones(DIM - 1, dtype=np.float32)))
    with pytest.raises(SchemaMismatch):  # a (2, DIM/2) matrix must not be flattened into a "vector"
        backend.query(q("n", np.ones((2, DIM // 2), dtype=np.float32)))
    with pytest.raises(InvalidInput):
        backend.query(q("n", np.full(DIM, np.nan, dtype=np.float32)))
    assert backend.count() == 1 and backend.get(["b"]) == []


def test_async_twins(backend):
    async def run():
        await backend.aupsert([rec("a", "n/x", "async tea")], unit(0)[None, :])
        got = await backend.aget(["a"])
        res = await backend.aquery(q("n/x", unit(0)))
        n = await backend.acount()
        deleted = await backend.adelete(["a"])
        return got, res, n, deleted

    got, res, n, deleted = asyncio.run(run())
    assert got[0].content == "async tea" and ids(res) == ["a"] and n == 1 and deleted == 1
    assert backend.count() == 0


def test_closed_backend_raises(backend_factory):
    _, factory = backend_factory
    b = factory()
    b.close()
    b.close()  # idempotent
    with pytest.raises(MemoryBackendError):
        b.get(["a"])


def test_reopen_after_close(backend_factory):
    name, factory = backend_factory
    if name not in PERSISTENT:
        pytest.skip(f"{name} keeps nothing after close, by design")
    b = factory()
    put(b, (rec("a", "n/x", "persisted tea"), unit(0)), (rec("b", "n/x", "gone"), unit(1)))
    b.delete(["b"])
    b.close()
    b2 = factory()
    try:
        assert [r.id for r in b2.scroll()] == ["a"]
        assert ids(b2.query(q("n/x", unit(0), limit=10))) == ["a"]
        if b2.supports_keyword:
            assert ids(b2.query(q("n/x", text="persisted"))) == ["a"]
    finally:
        b2.close()


def test_other_model_cannot_open_the_store(backend_factory, tmp_path):
    name, factory = backend_factory
    if name not in PERSISTENT:
        pytest.skip(f"{name} keeps nothing after close, by design")
    b = factory()
    put(b, (rec("a", "n/x"), unit(0)))
    b.close()
    from memory.backends.sqlite import SqliteBackend

    with pytest.raises(SchemaMismatch, match="was built with embedding model"):
        SqliteBackend(tmp_path / "store.sqlite", embedding_model="another/model", dim=DIM)
    b2 = factory()  # still usable with the right model
    assert b2.count() == 1
    b2.close()


_WRITER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from memory.backends.sqlite import SqliteBackend
    from memory.records import MemoryRecord
    path, model, dim, action = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    b = SqliteBackend(path, embedding_model=model, dim=dim)
    if action == "write":
        v = np.zeros((1, dim), dtype=np.float32); v[0, 5] = 1
        b.upsert([MemoryRecord(id="from-other", namespace="n/x", content="written by another process")], v)
    else:
        print(json.dumps(b.delete(["a"])))
    b.close()
    """
)


def test_two_processes_share_one_file(backend_factory, tmp_path):
    name, factory = backend_factory
    if name not in MULTIPROCESS:
        pytest.skip(f"{name} is private to one process, by design")
    b = factory()
    try:
        put(b, (rec("a", "n/x", "first"), unit(0)))
        assert ids(b.query(q("n/x", unit(5)))) == ["a"]  # index warm before the other process writes
        args = [sys.executable, "-c", _WRITER, str(tmp_path / "store.sqlite"), MODEL, str(DIM)]
        w = subprocess.run([*args, "write"], timeout=60, capture_output=True, text=True)
        assert w.returncode == 0, w.stderr
        res = b.query(q("n/x", unit(5), text="another process", limit=10))
        assert ids(res)[0] == "from-other"  # visible without reopening
        assert res[0].vector_score == pytest.approx(1.0, abs=1e-5)
        out = subprocess.run([*args, "delete"], timeout=60, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == 1
        assert ids(b.query(q("n/x", unit(0), limit=10))) == ["from-other"]
        assert b.count() == 1
        put(b, (rec("c", "n/x", "third"), unit(2)))  # our write after theirs keeps both
        assert sorted(r.id for r in b.scroll()) == ["c", "from-other"]
    finally:
        b.close()
