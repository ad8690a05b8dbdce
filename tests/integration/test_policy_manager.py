"""The policy layer on a real SQLite file with the real packaged embedder."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memctl.evaluation import run_dedupe_eval
from memory import MemoryService, MemorySettings
from memory.errors import InvalidInput, NotFound
from memory.policy.audit import AuditLog
from memory.policy.judge import PairJudge, default_model
from memory.policy.manager import Actor, MemoryManager
from memory.policy.tools import make_memory_tools
from memory.records import utcnow

PAIRS = Path(__file__).resolve().parents[1] / "data" / "dedupe_pairs.jsonl"


def _manager(path: str, embedder, **policy) -> MemoryManager:
    s = MemorySettings(path=path, policy=policy) if policy else MemorySettings(path=path)
    svc = MemoryService.from_settings(s, embedder=embedder)
    return MemoryManager(svc, AuditLog(path), s)


@pytest.fixture
def mm(tmp_path, embedder):
    m = _manager(str(tmp_path / "m.sqlite"), embedder)
    yield m
    m.close()


def current(mm: MemoryManager, ns: str) -> list[str]:
    return [r.content for r in mm.service.list(ns)]


def test_duplicate_conflict_distinct_flow(mm):
    a = mm.remember("以后报表里的金额都用万元为单位", "user_profile/u1", actor=Actor("supervisor", "t1", "r1"))
    assert (a.status, a.judgement) == ("added", "distinct")
    dup = mm.remember("报表金额以后都以万元为单位", "user_profile/u1")
    assert dup.status in ("merged", "skipped") and dup.id == a.id
    assert len(current(mm, "user_profile/u1")) == 1
    new = mm.remember("报表金额改成用元为单位，保留两位小数", "user_profile/u1")
    assert (new.status, new.judgement) == ("updated", "conflict") and new.id == a.id
    assert current(mm, "user_profile/u1") == ["报表金额改成用元为单位，保留两位小数"]
    other = mm.remember("图表默认用柱状图", "user_profile/u1")
    assert other.status == "added"
    assert len(current(mm, "user_profile/u1")) == 2
    # The old value survives in history only.
    hist = mm.audit.history(a.id)
    assert [e.action for e in hist] == ["add", "merge", "update"]
    # The newest wording of a fact is kept; each older one is in history.
    assert hist[1].before["content"] == "以后报表里的金额都用万元为单位"
    assert hist[-1].before["content"] == "报表金额以后都以万元为单位"
    assert hist[0].actor == "supervisor" and hist[0].thread_id == "t1" and hist[0].run_id == "r1"
    hits = mm.recall("报表金额用什么单位", "user_profile/u1")
    assert hits[0].record.content.startswith("报表金额改成用元")
    assert all("万元为单位" not in h.record.content for h in hits)


def test_append_strategy_supersedes_into_history(mm):
    first = mm.remember("Analysis conclusion: the best acquisition channel is paid search.", "analysis_memories/u1",
                        {"type": "task_traces"})
    second = mm.remember("Update: the best acquisition channel is now organic social, not paid search.",
                         "analysis_memories/u1", {"type": "task_traces"})
    assert second.status == "added" and second.superseded == (first.id,)
    assert current(mm, "analysis_memories/u1") == [second.record.content]
    assert mm.audit.trash_get(first.id)[1] == "superseded"
    assert second.record.expires_at is not None  # task traces carry the configured TTL


def test_pii_redacted_before_write_and_audited(mm):
    res = mm.remember("我的手机号是 13812345678，邮箱 a.b@example.com", "user_profile/u1")
    assert "13812345678" not in res.record.content and "[PHONE]" in res.record.content
    assert res.redactions == {"PHONE": 1, "EMAIL": 1}
    stored = mm.service.get(res.id)
    assert "example.com" not in stored.content and stored.metadata.extra["redacted"] == {"PHONE": 1, "EMAIL": 1}


def test_soft_delete_restore_and_hard_delete(mm):
    r = mm.remember("The churn dashboard lives at /reports/churn.html", "tool_effects/u1")
    assert mm.delete(r.id) == 1
    assert mm.recall("churn dashboard", "tool_effects/u1") == []
    with pytest.raises(NotFound):
        mm.service.get(r.id)
    restored = mm.restore(r.id)
    assert restored.id == r.id and mm.recall("churn dashboard", "tool_effects/u1")[0].record.id == r.id
    assert mm.delete(r.id, hard=True) == 1
    with pytest.raises(NotFound):
        mm.restore(r.id)
    residue = mm.service.backend.residue(("tool_effects", "u1"))
    assert residue == {"rows": 0, "vectors": 0, "keyword_entries": 0}


def test_delete_by_filter(mm):
    mm.remember("Prefers bar charts", "user_profile/u1", {"tags": ["charts"]})
    mm.remember("Reports in USD", "user_profile/u1", {"tags": ["units"]})
    assert mm.delete_where("user_profile/u1", {"tags": "charts"}) == 1
    assert current(mm, "user_profile/u1") == ["Reports in USD"]
    with pytest.raises(InvalidInput):
        mm.delete([])


def test_capacity_evicts_lowest_value_and_audits(tmp_path, embedder):
    mm = _manager(str(tmp_path / "cap.sqlite"), embedder, capacity_per_namespace=3)
    now = utcnow()
    texts = ["Orders are stored in ods_order", "Fiscal year starts in April", "Churn means no login for 60 days",
             "Bar charts are preferred for revenue", "The Q3 target is 5M USD"]
    for i, t in enumerate(texts):
        mm.remember(t, "domain_facts/u1", now=now - timedelta(days=100 - 20 * i))
    left = current(mm, "domain_facts/u1")
    assert len(left) == 3 and texts[0] not in left and texts[1] not in left  # the two oldest
    evicts = mm.audit.events(action="evict")
    assert len(evicts) == 2 and all("capacity" in e.reason for e in evicts)
    mm.close()


def test_ttl_sweep(mm):
    now = utcnow()
    old = mm.remember("ran SELECT 1 FROM t", "text2sql_memories/u1", {"type": "tool_effects"}, ttl_days=1,
                      now=now - timedelta(days=3))
    keep = mm.remember("ran SELECT 2 FROM t2", "text2sql_memories/u1", {"type": "tool_effects"}, ttl_days=30)
    assert [r.id for r in mm.service.list("text2sql_memories/u1")] == [keep.id]  # expired: never listed
    assert mm.sweep() == 1
    assert mm.service.backend.count(("text2sql_memories", "u1"), include_expired=True) == 1
    assert mm.audit.events(action="expire")[0].memory_id == old.id


def test_forget_user_leaves_nothing(mm):
    for ns in ("user_profile/u1", "domain_facts/u1", "text2sql_memories/u1", "user_profile/u12"):
        mm.remember(f"fact for {ns}: revenue is in fact_sales", ns)
    gone = mm.remember("a soft deleted note of u1", "analysis_memories/u1")
    mm.delete(gone.id)
    mm.recall("revenue", "user_profile/u1")
    rep = mm.forget_user("u1")
    assert rep.deleted == 3 and rep.clean, rep.residue
    assert set(rep.residue) >= {"rows", "vectors", "keyword_entries", "audit_events", "trash"}
    assert mm.service.backend.count(("user_profile", "u12")) == 1  # u12 untouched
    assert [ns for ns, _ in mm.service.backend.namespaces()] == [("user_profile", "u12")]
    assert mm.audit.events(action="forget_user")


def test_audit_stats(mm):
    mm.remember("Prefers bar charts", "user_profile/u1")
    mm.remember("prefers bar charts", "user_profile/u1")
    mm.recall("bar charts", "user_profile/u1")
    mm.recall("something else entirely: football", "user_profile/u1")
    st = mm.audit.stats()
    assert st["searches"] == 2 and st["hit_rate"] == 0.5
    assert st["writes"] == 2 and st["duplicate_write_rate"] == 0.5
    search = mm.audit.events(action="search")[-1]
    assert search.details["namespaces"] == ["user_profile/u1"] and search.details["results"][0]["score"] > 0


def test_tools_fill_namespaces_from_the_user_id(mm):
    tools = {t.name: t for t in make_memory_tools(mm)}
    u1 = {"configurable": {"user_id": "u1", "thread_id": "t"}}
    u2 = {"configurable": {"user_id": "u2"}}
    tools["memory_write"].invoke({"content": "Prefers line charts", "memory_type": "user_profile"}, config=u1)
    assert "line charts" in tools["memory_search"].invoke({"query": "chart style"}, config=u1)
    assert tools["memory_search"].invoke({"query": "chart style"}, config=u2) == "[]"
    mid = mm.service.list("user_profile/u1")[0].id
    assert "another user" in tools["memory_delete"].invoke({"memory_id": mid}, config=u2)
    assert "another user" in tools["memory_update"].invoke({"memory_id": mid, "content": "x"}, config=u2)
    assert tools["memory_delete"].invoke({"memory_id": mid}, config=u1) == '{"deleted": 1}'
    assert "failed" in tools["memory_search"].invoke({"query": "  "}, config=u1)
    assert "line charts" not in tools["memory_summarize"].invoke({"goal": "chart"}, config=u1)


CORPUS = Path(__file__).resolve().parents[1] / "data" / "dedupe_corpus"


def test_dedupe_eval_on_the_held_out_kinds(tmp_path, embedder):
    """The write path end to end on the kinds the judge was never fitted or tuned on."""
    test_kinds = set(json.loads((CORPUS / "split.json").read_text())["test"])
    held = [line for f in sorted(CORPUS.glob("author_*.jsonl")) for line in f.read_text().splitlines()
            if line.strip() and json.loads(line)["kind"] in test_kinds]
    pairs = tmp_path / "held.jsonl"
    pairs.write_text("\n".join(held) + "\n")
    s = MemorySettings(path=":memory:")
    mm = MemoryManager(MemoryService.from_settings(s, embedder=embedder), AuditLog(":memory:"), s)
    r = run_dedupe_eval(mm, pairs)
    mm.close()
    assert r["n"] == len(held) >= 150 and set(r["by_lang"]) == {"en", "zh", "mixed"}
    assert set(r["by_kind"]) == test_kinds and 0.0 <= r["llm_share"] <= 1.0
    t = r["timing"]  # wall and CPU time per write (CPU: every thread of the process)
    assert 0 < t["write_p50_ms"] <= t["write_p95_ms"] and 0 < t["write_cpu_p50_ms"] <= t["write_cpu_p95_ms"]
    # The judge on these kinds (the 19 corpus authors, 412 pairs): .475 / .411 / .028 (round 5),
    # .468 / .403 / .014 (judge14, fitted on 27 authors). Floors catch regressions; not the targets.
    assert r["duplicate_merge_rate"] >= 0.42
    assert r["conflict_resolution_rate"] >= 0.36
    assert r["distinct_false_merge_rate"] <= 0.08


def test_append_keeps_other_tasks_and_same_handoff_items(mm):
    ns, meta = "statistics_memories/u1", {"type": "task_traces"}
    east = mm.remember("Statistics conclusion for “GMV of East China in 2024”: total 1,208,330 yuan", ns,
                       {**meta, "extra": {"task": "GMV of East China in 2024", "handoff": "h1"}})
    south = mm.remember("Statistics conclusion for “GMV of South China in 2024”: total 985,212 yuan", ns,
                        {**meta, "extra": {"task": "GMV of South China in 2024", "handoff": "h2"}})
    report = mm.remember("Statistics report for “GMV of South China in 2024” saved at /tmp/r/south.md", ns,
                         {**meta, "extra": {"task": "GMV of South China in 2024", "handoff": "h2"}})
    assert {east.status, south.status, report.status} == {"added"} and not south.superseded
    assert len(current(mm, ns)) == 3
    # The same task re-run with a corrected figure: it supersedes its own conclusion only. (The
    # figure is stated as the new one, "total now": the judge refitted on 27 authors scores the bare
    # value swap "total 990,400 yuan" .979, under its .983 threshold — a missed value-only update,
    # the judge's weakest class; the round-5 model scored it .987 against .986. This test is about
    # what append does with an update, not about the judge's recall, which memctl eval reports.)
    fixed = mm.remember("Statistics conclusion for “GMV of South China in 2024”: total now 990,400 yuan", ns,
                        {**meta, "extra": {"task": "GMV of South China in 2024", "handoff": "h3"}})
    assert fixed.superseded == (south.id,)
    assert sorted(current(mm, ns)) == sorted([east.record.content, report.record.content, fixed.record.content])
    assert mm.audit.trash_get(south.id)[1] == "superseded"
    assert "superseded by" in mm.audit.history(south.id)[-1].reason or any(
        e.action == "supersede" for e in mm.audit.history(fixed.id))
    assert mm.restore(south.id).content == south.record.content  # restorable


USERS = ["u1", "u12", "u2"]
op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(USERS), st.sampled_from(["revenue", "churn", "bar chart", "万元", "GMV"]),
              st.integers(0, 50), st.one_of(st.none(), st.integers(-3, 3))),
    st.tuples(st.just("delete"), st.integers(0, 40), st.booleans()),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=14))
def test_search_never_returns_expired_deleted_or_foreign(tmp_path_factory, embedder, ops):
    path = str(tmp_path_factory.mktemp("prop") / "p.sqlite")
    mm = _manager(path, embedder)
    now = utcnow()
    written: list[tuple[str, str]] = []  # (id, user)
    deleted: set[str] = set()
    expired: set[str] = set()
    try:
        for o in ops:
            if o[0] == "write":
                _, user, topic, n, ttl = o
                # ttl < 0: written 3 days ago with a half-day TTL, so already expired now.
                res = mm.remember(f"note {n} about {topic} for the team", f"domain_facts/{user}",
                                  ttl_days=None if ttl is None else (0.5 if ttl < 0 else ttl + 0.5),
                                  now=now - timedelta(days=3) if ttl is not None and ttl < 0 else now)
                written.append((res.id, user))
                if ttl is not None and ttl < 0:
                    expired.add(res.id)
                else:
                    expired.discard(res.id)
                deleted.discard(res.id)
            elif written:
                _, idx, hard = o
                mid = written[idx % len(written)][0]
                mm.delete(mid, hard=hard)
                deleted.add(mid)
        for user in USERS:
            for q in ("revenue", "churn", "chart", "万元 GMV", "note about the team"):
                for h in mm.recall(q, f"domain_facts/{user}", top_k=50):
                    assert h.record.namespace == ("domain_facts", user)
                    assert h.record.id not in deleted
                    assert h.record.id not in expired
                    assert not h.record.is_expired(utcnow())
    finally:
        mm.close()


def test_chat_model_is_asked_only_about_unsure_pairs(tmp_path, embedder):
    from supervisor.scripted import ScriptedChatModel

    s = MemorySettings(path=str(tmp_path / "llm.sqlite"))
    model = ScriptedChatModel(replies=[
        '```json\n{"label": "duplicate", "reason": "same preference, reworded"}\n```',
        '{"label": "update", "merged": "Charts use a light theme with no grid lines.", "reason": "new theme"}',
        "I think they are different?",  # unparseable: the offline verdict stands
    ])
    m = MemoryManager(MemoryService.from_settings(s, embedder=embedder), AuditLog(s.path), s, chat_model=model)
    try:
        first = m.remember("The user wants charts without gridlines.", "user_profile/u1")
        assert first.judgement == "distinct" and model.calls == []  # empty namespace: nothing to ask
        # A sure verdict is never sent: same words.
        assert m.remember("The user wants charts without gridlines.", "user_profile/u1").status == "skipped"
        assert model.calls == []
        # Every pair unsure (a band wider than any log-odds): the model decides.
        m.pair_judge = PairJudge(replace(default_model(), unsure_band=1e9), paraphrase=m._paraphrase)
        dup = m.remember("Please keep plots clean: no grid lines.", "user_profile/u1")
        assert (dup.status, dup.judgement, dup.reason) == ("merged", "duplicate", "llm: same preference, reworded")
        prompt = " ".join(str(msg.content) for msg in model.calls[0])
        assert "no grid lines" in prompt and "without gridlines" in prompt
        upd = m.remember("Charts should use a light theme.", "user_profile/u1")
        assert (upd.status, upd.judgement) == ("updated", "conflict")
        assert current(m, "user_profile/u1") == ["Charts use a light theme with no grid lines."]
        offline = m.pair_judge(current(m, "user_profile/u1")[0], "以后图表默认用折线图")
        new = m.remember("以后图表默认用折线图", "user_profile/u1")
        assert new.judgement == offline.label and "unparseable" in new.reason
    finally:
        m.close()


class _CountingEmbedder:
    """The real embedder, counting the texts it embeds for storage."""

    def __init__(self, inner):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.documents: list[str] = []

    def embed_documents(self, texts):
        self.documents += list(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def test_a_duplicate_write_keeps_the_stored_vector_instead_of_embedding_the_old_text_again(tmp_path, embedder):
    counting = _CountingEmbedder(embedder)
    m = _manager(str(tmp_path / "dup.sqlite"), counting)
    try:
        first = m.remember("The user prefers bar charts.", "user_profile/u1")
        stored = m.service.backend.get_vectors([first.id])
        counting.documents.clear()
        again = m.remember("The user prefers bar charts.", "user_profile/u1")
        assert again.status in ("skipped", "merged") and again.id == first.id
        # Everything the write needs of this text was embedded by the first write (stored
        # vector and the judge's views, cached): nothing is embedded again.
        assert counting.documents == []
        assert (m.service.backend.get_vectors([first.id]) == stored).all()
        assert [h.record.id for h in m.recall("bar charts", "user_profile/u1")] == [first.id]
    finally:
        m.close()
