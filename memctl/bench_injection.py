"""Tokens the Supervisor injects per handoff under ``policy.injection: full`` and ``compact``.

Two workloads, each run in both modes on a fresh store:

* the demo scenario (``supervisor/scenarios/demo.yaml``) through the real graph, agents'
  LLM steps replayed: tokens of every pre-node injection (one per handoff) and of the entry
  node's (one per turn), and whether the scenario's checks and replayed-step expectations
  (facts the agents must see in their input) still hold;
* the handoff simulation of ``memctl bench`` (:func:`memctl.bench_handoff.handoff_overhead`):
  ``n`` generated memories over 10 users, handoffs cycling through the three agents, each
  post-node writing what the agent produced — tokens injected by each pre-node.

Run: ``memctl eval injection`` (or ``python -m memctl.bench_injection``).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

MODES = ("full", "compact")


def _stats(xs: list[int]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    return {"n": len(s), "mean": round(statistics.fmean(s), 1), "p50": statistics.median(s),
            "p95": s[min(len(s) - 1, int(0.95 * len(s)))], "max": s[-1], "total": sum(s)}


def demo_injection(mode: str, embedder: Any = None) -> dict[str, Any]:
    """Run the demo scenario with ``policy.injection = mode``; tokens per handoff and per turn."""
    from memory.settings import MemorySettings
    from supervisor.scenario import ScenarioRunner, load_scenario

    events: list[dict[str, Any]] = []

    def on_event(kind: str, data: Any) -> None:
        if kind == "memory" and data.get("kind") == "injected":
            events.append(data)

    with tempfile.TemporaryDirectory() as tmp:
        st = MemorySettings(path=str(Path(tmp) / "demo.sqlite"))
        st = st.model_copy(update={"policy": st.policy.model_copy(update={"injection": mode})})
        runner = ScenarioRunner(load_scenario(None), st, embedder=embedder, reports_dir=Path(tmp) / "reports",
                                on_event=on_event)
        out = runner.run()
    pre = [e for e in events if e["step"] == "pre"]
    return {"mode": mode,
            "per_handoff": {**_stats([e["tokens"] for e in pre]),
                            "memories_mean": round(statistics.fmean([len(e["used"]) for e in pre]), 2) if pre else 0},
            "per_turn_entry": _stats([e["tokens"] for e in events if e["step"] == "entry"]),
            "checks_passed": f"{sum(c['ok'] for c in out['checks'])}/{len(out['checks'])}",
            "expectations_met": f"{sum(e['found'] for e in out['expectations'])}/{len(out['expectations'])}",
            "missed_expectations": [e.get("expect") for e in out["expectations"] if not e["found"]]}


def handoff_injection(n_memories: int, mode: str, handoffs: int = 60) -> dict[str, Any]:
    """The bench's handoff simulation at ``n_memories`` with ``policy.injection = mode``."""
    from memctl.bench_handoff import handoff_overhead
    from memory.settings import MemorySettings

    st = MemorySettings(path=":memory:")
    st = st.model_copy(update={"policy": st.policy.model_copy(update={"injection": mode})})
    r = handoff_overhead(n_memories, handoffs, settings=st)
    return {"mode": mode, "n_memories": n_memories, "handoffs": handoffs, "per_handoff": r["injected_tokens"],
            "pre_p50_ms": round(r["pre_p50_ms"], 2)}


def run_injection_bench(sizes: tuple[int, ...] = (1000, 10000), handoffs: int = 60) -> dict[str, Any]:
    from memory.embeddings import get_embedder
    from memory.settings import EmbeddingSettings

    emb = get_embedder(EmbeddingSettings().model)
    return {"demo": {m: demo_injection(m, emb) for m in MODES},
            "handoff": {str(n): {m: handoff_injection(n, m, handoffs) for m in MODES} for n in sizes}}


if __name__ == "__main__":  # pragma: no cover - manual runs
    import json
    import sys

    print(json.dumps(run_injection_bench(tuple(int(a) for a in sys.argv[1:]) or (1000, 10000)), indent=2,
                     ensure_ascii=False))
