"""Overhead of the memory nodes per handoff: pre-node + post-node latency at scale.

The store is loaded with ``n_memories`` generated zh/en memories (:func:`memctl.bench_corpus.make_corpus`,
vectors from :func:`memctl.bench_corpus.embed_corpus`, cached on disk), spread over 10 users and five
namespace kinds (``user_profile``, ``domain_facts``, ``text2sql_memories``,
``statistics_memories``, ``analysis_memories``), so the measured user owns a tenth of the store.
Each handoff then runs the real node functions of the graph: the pre-node (route; search
profile, facts and the agent's namespace; summarise under the budget) and the post-node
(route and write what the agent produced: one SQL statement, one conclusion, or a conclusion
and a report path; dedupe/merge; audit). Task texts are distinct, so the query embedding is
computed every time; the timing includes embedding, search, scoring, summarising, writing.

With ``write_behind=True`` the post-node only queues its writes (:mod:`supervisor.writebehind`).
The next pre-node waits for pending writes into the namespaces it reads, and every third handoff
ends a turn: the wait for all pending writes (what the Supervisor does before it answers) is
added to that handoff's post time. ``agent_ms`` is untimed model time slept after each node (the
sub-agent's and the Supervisor's LLM calls, in a real graph 0.5-5 s each); with 0 the handoffs
run back to back, the worst case, where a queued write competes for the CPU and the GIL with
the next pre-node. ``write_p50_ms``/``write_p95_ms`` report how long a
queued write took from submission to done.

Before the timed handoffs, two whole turns run untimed (``warmup_ms``): what a process pays once
(a namespace's partition on its 2nd search, the write path's models on the worker's first
writes) would otherwise be 4-5 of the slowest timed handoffs. Then what is alive is frozen
(``gc.freeze``, undone at the end; ``freeze_gc=False`` leaves it), as a long-lived server does
after start-up: a full collection of the loaded process took 110-220 ms and hit about one
handoff in 100.
"""

from __future__ import annotations

import gc
import statistics as pystats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

from memctl.bench_corpus import embed_corpus, make_corpus, make_queries
from memctl.bench_views import load_views
from memory.embeddings import CachedEmbedder, get_embedder
from memory.policy.manager import MemoryManager
from memory.policy.routing import agent_namespace, shared_namespace
from memory.records import MemoryRecord
from memory.settings import MemorySettings
from supervisor.context import SupervisorContext
from supervisor.journal import WriteJournal
from supervisor.nodes import finish_writes, make_post_node, make_pre_node
from supervisor.writebehind import WriteBehind

KINDS = ("user_profile", "domain_facts", "text2sql_memories", "statistics_memories", "analysis_memories")
AGENTS = ("text2sql", "statistics", "analysis")
# Untimed handoffs before the timed ones: two turns, so every agent's namespaces are searched
# twice and every agent's writes have run (one-time costs, see the warm-up below).
WARMUP_HANDOFFS = 2 * len(AGENTS)


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _items(agent: str, task: str, i: int) -> list[str]:
    if agent == "text2sql":
        return [f"SQL used for “{task}”: SELECT region, SUM(goods_amount) AS amount FROM orders "
                f"WHERE status = 'paid' AND order_id % 97 = {i % 97} GROUP BY region ORDER BY amount DESC LIMIT {i + 5}"]
    if agent == "statistics":
        return [f"Statistics conclusion for “{task}”: mean {100 + i:.1f}, median {95 + i:.1f}, growth {i % 13 - 6:+d}%"]
    return [f"Analysis conclusion for “{task}”: the trend turns in month {i % 12 + 1}, driven by segment {i % 7}",
            f"Analysis report for “{task[:60]}” saved at /tmp/reports/report-{i:05d}.md"]


def handoff_overhead(n_memories: int, handoffs: int = 100, *, cache_dir: Path | None = None,
                     settings: MemorySettings | None = None,
                     write_behind: bool = False, agent_ms: float = 0.0, journal: bool = True,
                     judge_views: bool = True, freeze_gc: bool = True,
                     progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """p50/p95 (ms) of pre-node + post-node per handoff with ``n_memories`` stored.

    Args:
        n_memories: memories loaded before measuring (e.g. 10_000, 100_000).
        handoffs: handoffs measured (cycling text2sql, statistics, analysis).
        cache_dir: where corpus vectors are cached (embedding 100k texts takes minutes);
            default: the user cache dir used by ``memctl bench``.
        settings: memory settings (the path is replaced by a temp file).
        write_behind: post-nodes queue their writes on a background thread.
        agent_ms: untimed sleep after each pre-node and post-node (simulated model time).
        journal: post-nodes commit their writes to the write journal first, as the graph does
            (:mod:`supervisor.journal`); False measures without it.
        judge_views: the memories of the namespaces the handoffs write into carry the judge's
            view vectors, as ``remember`` stores them (:mod:`memctl.bench_views`); False measures
            a bulk-loaded store without them (every neighbour's views computed on first meeting).
        freeze_gc: after the set-up and the warm-up, ``gc.freeze()`` what is alive (undone at the
            end), as a long-lived server does after start-up; False leaves the whole heap to
            the collector's full collections (110-220 ms each at 100k on two cores).

    Returns:
        ``{"n_memories", "handoffs", "pre_p50_ms", "pre_p95_ms", "post_p50_ms", "post_p95_ms",
        "total_p50_ms", "total_p95_ms", "per_agent": {...}, "errors", "config", "write_behind"}``,
        plus ``"write_p50_ms", "write_p95_ms"`` with ``write_behind``.
    """
    if cache_dir is None:
        import platformdirs

        cache_dir = Path(platformdirs.user_cache_dir("langgraph-memory")) / "bench"
    base = settings or MemorySettings(path=":memory:")
    emb = get_embedder(base.embedding.model, threads=base.embedding.threads, batch_size=base.embedding.batch_size,
                       cache_dir=base.embedding.cache_dir)
    # The embedder is shared per process: a second run in the same process (the write-behind pass
    # after the inline one, same seeded tasks) would find every query vector cached and leave the
    # query embedding out of its timings. Each run starts with an empty query cache.
    if isinstance(emb, CachedEmbedder):
        emb.clear()
    texts = make_corpus(n_memories)
    vecs = embed_corpus(getattr(emb, "inner", emb), texts, cache_dir,
                        (lambda d, t: progress("embed", d, t)) if progress else None)
    with tempfile.TemporaryDirectory() as tmp:
        st = base.model_copy(update={"path": str(Path(tmp) / "handoff-bench.sqlite")})
        mm = MemoryManager.from_settings(st, embedder=emb)
        try:
            for i in range(0, n_memories, 5000):
                recs = [MemoryRecord(id=f"m{j}", namespace=(KINDS[(j // 10) % len(KINDS)], f"u{j % 10}"),
                                     content=texts[j], metadata={"type": KINDS[(j // 10) % len(KINDS)].replace(
                                         "_memories", "") if j % 2 else "task_traces"})
                        for j in range(i, min(n_memories, i + 5000))]
                mm.service.backend.upsert(recs, vecs[i: i + len(recs)])
                if progress:
                    progress("load", min(n_memories, i + 5000), n_memories)
            if judge_views:  # what remember() would have stored beside them (memctl.bench_views)
                written = {agent_namespace(a, "u0") for a in AGENTS} | {shared_namespace("u0")}
                groups = [(ns, [texts[j] for j in range(n_memories) if
                                (KINDS[(j // 10) % len(KINDS)], f"u{j % 10}") == ns]) for ns in sorted(written)]
                load_views(st.path, groups, cache_dir, f"{n_memories}", st.policy.paraphrase_model, progress)
            budget = st.policy.summary_max_tokens
            wb = WriteBehind() if write_behind else None
            write_ms: list[float] = []
            if wb is not None:  # time each queued write from submission to done
                submit = wb.submit

                def timed_submit(ns: Any, fn: Callable[[], Any], **info: Any) -> Any:
                    t = time.perf_counter()

                    def run() -> Any:
                        try:
                            return fn()
                        finally:
                            write_ms.append((time.perf_counter() - t) * 1000)
                    return submit(ns, run, **info)

                wb.submit = timed_submit  # type: ignore[method-assign]
            pre = {a: make_pre_node(mm, a, budget, write_behind=wb) for a in AGENTS}
            jr = WriteJournal.for_store(st.path) if journal else None
            post = {a: make_post_node(mm, a, wb, jr) for a in AGENTS}
            runtime = Runtime(context=SupervisorContext(user_id="u0"))
            config = {"configurable": {"thread_id": "bench", "user_id": "u0"}}
            # The timed tasks are the first `handoffs`; the warm-up takes the ones after them.
            tasks = make_queries(handoffs + WARMUP_HANDOFFS, seed=23)
            injected: list[int] = []  # tokens each pre-node injected (policy.injection: full | compact)
            injected_n: list[int] = []  # memories it injected

            def handoff(i: int, k: int, task: str, timed: bool) -> tuple[float, float, dict[str, Any]]:
                """Handoff ``k`` of its run: pre-node, model time, post-node, model time; every third
                ends the turn. ``i`` numbers the task (it goes into the items written)."""
                agent = AGENTS[k % len(AGENTS)]
                state: dict[str, Any] = {"messages": [HumanMessage(task)],
                                         "active": {"agent": agent, "task": task, "tool_call_id": None}}
                t0 = time.perf_counter()
                out = pre[agent](state, config, runtime)
                pre_ms = (time.perf_counter() - t0) * 1000
                if timed:
                    inj = [e for e in out.get("memory_log") or [] if e["kind"] == "injected"]
                    injected.append(sum(e["tokens"] for e in inj))
                    injected_n.append(sum(len(e["used"]) for e in inj))
                time.sleep(agent_ms / 1000)  # the sub-agent's model time, not timed
                state.update(out)
                state["last_result"] = {"agent": agent, "text": "ok", "memory_items": _items(agent, task, i)}
                t1 = time.perf_counter()
                out2 = post[agent](state, config, runtime)
                post_ms = (time.perf_counter() - t1) * 1000
                time.sleep(agent_ms / 1000)  # the Supervisor's model time, not timed
                if wb is not None and k % len(AGENTS) == len(AGENTS) - 1:  # the turn ends here
                    t2 = time.perf_counter()
                    out2 = {**out2, **finish_writes(wb, {**state, **out2}, config, runtime)}
                    post_ms += (time.perf_counter() - t2) * 1000
                return pre_ms, post_ms, out2

            # Warm-up outside the timing: what a process pays once, not per handoff. The model
            # load and first search; each namespace's partition (loaded on its 2nd search, see
            # memory.backends.sqlite_partitions); the write path's models and the neighbours'
            # views on the worker's first writes; the first end-of-turn drain. One handoff of
            # warm-up left 4-5 of these in the first timed handoffs (0.3-2 s each), which in a
            # 100-handoff run are the 5 slowest: the p95 then depended on where they fell.
            warmup_ms: list[float] = []
            errors = 0
            for j in range(WARMUP_HANDOFFS):  # whole turns: the last one ends with the drain
                pre_ms, post_ms, out2 = handoff(handoffs + j, j, tasks[handoffs + j], False)
                warmup_ms.append(round(pre_ms + post_ms, 1))
                errors += len(out2.get("memory_errors") or [])
            # Everything allocated so far (store, models, corpus) is moved out of the collector's
            # reach, as a server does after start-up (memory.forking.prefork does the same before
            # it forks): a full collection over it took 110-220 ms on this machine, and landed in
            # a timed handoff ~once per 100 (gen-2 collections of the whole heap).
            if freeze_gc:
                gc.collect()
                gc.freeze()
            rows: list[tuple[str, float, float]] = []
            for i in range(handoffs):
                pre_ms, post_ms, out2 = handoff(i, i, tasks[i], True)
                errors += len(out2.get("memory_errors") or [])
                rows.append((AGENTS[i % len(AGENTS)], pre_ms, post_ms))
                if progress:
                    progress("handoffs", i + 1, handoffs)
            if wb is not None:
                wb.drain()
                wb.close()
        finally:
            if freeze_gc:
                gc.unfreeze()  # the bench goes on with other systems in this process
            mm.close()

    def summary(sel: list[tuple[str, float, float]]) -> dict[str, float]:
        pre_ms, post_ms = [r[1] for r in sel], [r[2] for r in sel]
        tot = [a + b for a, b in zip(pre_ms, post_ms, strict=True)]
        return {"pre_p50_ms": pystats.median(pre_ms), "pre_p95_ms": _pct(pre_ms, 0.95),
                "post_p50_ms": pystats.median(post_ms), "post_p95_ms": _pct(post_ms, 0.95),
                "total_p50_ms": pystats.median(tot), "total_p95_ms": _pct(tot, 0.95)}

    extra = ({"write_p50_ms": pystats.median(write_ms), "write_p95_ms": _pct(write_ms, 0.95)}
             if write_behind and write_ms else {})
    return {
        "n_memories": n_memories, "handoffs": handoffs, **summary(rows), **extra, "write_behind": write_behind,
        "journal": journal, "judge_views": judge_views, "freeze_gc": freeze_gc, "warmup_ms": warmup_ms,
        "per_agent": {a: summary([r for r in rows if r[0] == a]) for a in AGENTS},
        "errors": errors,
        "injected_tokens": {"mode": base.policy.injection, "mean": round(pystats.fmean(injected), 1),
                            "p50": pystats.median(injected), "p95": _pct(injected, 0.95), "max": max(injected),
                            "memories_mean": round(pystats.fmean(injected_n), 2)},
        "config": {"embedding_model": base.embedding.model, "users": 10, "kinds": list(KINDS),
                   "user_share": 0.1, "context_budget": base.policy.summary_max_tokens},
    }


if __name__ == "__main__":  # pragma: no cover - manual runs: python -m memctl.bench_handoff 10000 100000
    import json
    import sys

    for n in [int(a) for a in sys.argv[1:]] or [10_000]:
        print(json.dumps(handoff_overhead(n), indent=2))
