"""The pre-node can leave the learned reranker out of the agent's own namespace (policy.rerank_agent_memories off;
on by default)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

import memory.rerank as rerank_mod
from memory import MemorySettings
from memory.policy.manager import MemoryManager
from supervisor.context import SupervisorContext
from supervisor.nodes import make_pre_node

TASK = "Monthly paid GMV by region for 2024"
SQL = ["SQL used for monthly GMV: SELECT month, SUM(goods_amount) FROM orders WHERE status = 'paid' GROUP BY month",
       "SQL used for GMV by region: SELECT region, SUM(goods_amount) FROM orders GROUP BY region",
       "SQL used for refunds: SELECT month, SUM(amount) FROM refunds GROUP BY month"]


def _manager(tmp_path: Any, embedder: Any, **policy: Any) -> MemoryManager:
    st = MemorySettings(path=str(tmp_path / "m.sqlite"), policy=policy)
    mm = MemoryManager.from_settings(st, embedder=embedder)
    mm.remember("Amounts in reports are shown in 万元", "user_profile/u1")
    mm.remember("GMV means paid goods amount, without refunds and shipping", "domain_facts/u1")
    for text in SQL:
        mm.remember(text, "text2sql_memories/u1", {"type": "text2sql"})
    return mm


def _reranked_namespaces(mm: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> tuple[list[set[str]], dict[str, Any]]:
    seen: list[set[str]] = []
    apply = rerank_mod.apply

    def spy(hits: Any, *a: Any, **k: Any) -> Any:
        seen.append({"/".join(h.record.namespace) for h in hits})
        return apply(hits, *a, **k)

    monkeypatch.setattr(rerank_mod, "apply", spy)
    pre = make_pre_node(mm, "text2sql", mm.settings.policy.summary_max_tokens)
    state = {"messages": [HumanMessage(TASK)], "active": {"agent": "text2sql", "task": TASK, "tool_call_id": None}}
    out = pre(state, {"configurable": {"thread_id": "t", "user_id": "u1"}}, Runtime(context=SupervisorContext(user_id="u1")))
    return seen, out


@pytest.mark.parametrize("on", [False, True])
def test_the_agents_own_memories_skip_the_learned_reranker_only_when_asked(tmp_path, embedder, monkeypatch, on) -> None:
    assert MemorySettings().policy.rerank_agent_memories  # the default: one ranking everywhere
    mm = _manager(tmp_path, embedder, rerank_agent_memories=on)
    try:
        seen, out = _reranked_namespaces(mm, monkeypatch)
    finally:
        mm.close()
    assert out["memory_errors"] == []
    assert {"user_profile/u1", "domain_facts/u1"} in seen  # profile and definitions: reranked either way
    assert ({"text2sql_memories/u1"} in seen) is on
    retrieved = next(e for e in out["memory_log"] if e["kind"] == "retrieved")
    assert any(h["namespace"] == "text2sql_memories/u1" for h in retrieved["hits"])  # still searched


def test_search_without_the_reranker_equals_a_store_with_it_off(tmp_path, embedder) -> None:
    mm = _manager(tmp_path, embedder)
    off = MemoryManager.from_settings(mm.settings.model_copy(update={"scoring": mm.settings.scoring.model_copy(
        update={"rerank": False})}), embedder=embedder)
    try:
        a = mm.recall(TASK, "text2sql_memories/u1", top_k=3, use_reranker=False, now="2026-01-01T00:00:00")
        b = off.recall(TASK, "text2sql_memories/u1", top_k=3, now="2026-01-01T00:00:00")
        c = mm.recall(TASK, "text2sql_memories/u1", top_k=3, now="2026-01-01T00:00:00")
    finally:
        off.close()
        mm.close()
    # The same ranking as a store with scoring.rerank off (a second handle on the file: scores agree
    # to float32 rounding of the vectors it read back, not bit for bit).
    assert [h.record.id for h in a] == [h.record.id for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)
    assert len(a) >= 2 and {h.record.id for h in a} == {h.record.id for h in c}


@pytest.mark.parametrize("bad", ["no", 0, 1, "false"])
def test_use_reranker_must_be_a_bool_and_a_bad_one_changes_nothing(tmp_path, embedder, bad) -> None:
    from memory.errors import InvalidInput

    mm = _manager(tmp_path, embedder)
    try:
        before = sorted(r.id for r in mm.service.list("text2sql_memories/u1"))
        with pytest.raises(InvalidInput, match="use_reranker must be True, False or None"):
            mm.recall(TASK, "text2sql_memories/u1", use_reranker=bad)
        assert sorted(r.id for r in mm.service.list("text2sql_memories/u1")) == before
        assert mm.recall(TASK, "text2sql_memories/u1", use_reranker=False)  # the store still answers
    finally:
        mm.close()
