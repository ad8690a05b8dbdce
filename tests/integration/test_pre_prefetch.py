"""The pre-node embeds its question while its read barrier waits, and the search reuses that vector."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

from memory.embeddings import CachedEmbedder
from supervisor.context import SupervisorContext
from supervisor.nodes import make_pre_node
from supervisor.writebehind import WriteBehind

TASK = "Top regions by paid order amount last quarter"


class _Counting:
    """The real embedder, counting query embeddings; embedding the task releases ``embedded``."""

    def __init__(self, inner: Any, embedded: threading.Event) -> None:
        self.inner, self.embedded = inner, embedded
        self.name, self.dim = inner.name, inner.dim
        self.queries: list[str] = []

    def embed_documents(self, texts: Any) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        vec = self.inner.embed_query(text)
        if text == TASK:
            self.embedded.set()
        return vec


def _run_pre(manager: Any, wb: WriteBehind) -> dict[str, Any]:
    pre = make_pre_node(manager, "text2sql", manager.settings.policy.summary_max_tokens, write_behind=wb)
    state = {"messages": [HumanMessage(TASK)], "active": {"agent": "text2sql", "task": TASK, "tool_call_id": None}}
    return pre(state, {"configurable": {"thread_id": "t", "user_id": "u1"}},
               Runtime(context=SupervisorContext(user_id="u1")))


def test_pre_node_embeds_its_question_while_the_barrier_waits(manager, embedder) -> None:
    manager.remember("Amounts in reports are shown in 万元", "user_profile/u1")
    embedded = threading.Event()
    counting = _Counting(embedder.inner if isinstance(embedder, CachedEmbedder) else embedder, embedded)
    manager.service.embedder = CachedEmbedder(counting)  # type: ignore[assignment]
    wb = WriteBehind()
    try:
        def finding() -> Any:
            # The write the barrier waits for finishes only after the question was embedded:
            # the embedding ran beside it, not after it.
            if not embedded.wait(10.0):
                raise AssertionError("the pre-node did not embed its question while its barrier waited")
            return manager.remember("Revenue means paid order amount (goods_amount, status = 'paid')",
                                    "shared_context/u1", {"type": "domain_facts"})
        wb.submit(("shared_context", "u1"), finding, urgent=True, incoming="x", route_reason="x", origin="post:test")
        out = _run_pre(manager, wb)
    finally:
        wb.drain()
        wb.close()
    assert out["memory_errors"] == []
    written = [e for e in out["memory_log"] if e["kind"] == "written"]
    assert [e["namespace"] for e in written] == ["shared_context/u1"]  # reported by the barrier
    assert counting.queries.count(TASK) == 1  # the searches read the prefetched vector
    retrieved = next(e for e in out["memory_log"] if e["kind"] == "retrieved")
    assert any("paid order amount" in h["content"] for h in retrieved["hits"])  # read-your-writes holds


def test_pre_node_without_pending_writes_embeds_once_in_its_search(manager, embedder) -> None:
    manager.remember("Amounts in reports are shown in 万元", "user_profile/u1")
    counting = _Counting(embedder.inner if isinstance(embedder, CachedEmbedder) else embedder, threading.Event())
    manager.service.embedder = CachedEmbedder(counting)  # type: ignore[assignment]
    wb = WriteBehind()
    try:
        out = _run_pre(manager, wb)
    finally:
        wb.close()
    assert out["memory_errors"] == [] and counting.queries.count(TASK) == 1
