"""Studio with no chat model: the demo's messages, typed one by one into the Studio graph, run the
whole scenario (semantic router + agents replaying the demo's LLM steps); the store adapter on the
same file shows what the Supervisor remembered."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from memory import MemorySettings
from memory.policy.manager import MemoryManager
from memory.store import MemoryStore
from supervisor.context import SupervisorContext
from supervisor.scenario import load_scenario
from supervisor.studio import NO_MODEL_TEXT, build_studio_graph

pytestmark = pytest.mark.slow


def test_studio_without_model_runs_the_demo_scenario(tmp_path, embedder, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # reports land in <tmp>/supervisor-reports
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mm = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "studio.sqlite")), embedder=embedder)
    try:
        graph = build_studio_graph(mm, None, checkpointer=InMemorySaver())
        scenario = load_scenario()
        answers = []
        for session in scenario.sessions:
            for turn in session.turns:
                state = graph.invoke({"messages": [("user", turn.user)]},
                                     {"configurable": {"thread_id": session.thread}},
                                     context=SupervisorContext(user_id=session.user))
                assert state.get("agent_errors") == [], (turn.user, state.get("agent_errors"))
                assert state.get("memory_errors") == []
                answer = str(state["messages"][-1].content)
                assert NO_MODEL_TEXT not in answer and "no numbers" not in answer, (turn.user, answer)
                answers.append((turn.user, answer, state.get("artifacts") or {}))
        report_turn = next(a for a in answers if a[0].startswith("帮我查一下2024年华东地区"))
        assert "1596.81" in report_turn[1]
        report = Path(report_turn[2]["report_path"])
        assert report.exists() and "华东" in report.read_text(encoding="utf-8")
        # The server's store (same file) shows the Supervisor's memories under their namespaces.
        store = MemoryStore(mm.service)
        assert ("user_profile", "zhang") in store.list_namespaces()
        prefs = store.search(("user_profile", "zhang"), query="金额单位")
        assert prefs and "元" in prefs[0].value["content"] and prefs[0].value["type"] == "user_profile"
        alice = store.search(("user_profile", "alice"), query="金额单位")
        assert alice[0].value["content"] != prefs[0].value["content"]
        # A message the scenario does not have: the agents say no model is configured (no crash).
        state = graph.invoke({"messages": [("user", "Plot the weekly GMV of 2023 by payment method.")]},
                             {"configurable": {"thread_id": "x"}}, context=SupervisorContext(user_id="zhang"))
        assert state["messages"][-1].content
    finally:
        mm.close()


def test_the_served_graph_freezes_its_start_up_heap(tmp_path):
    """``studio_graph()`` (what ``langgraph dev`` serves, built once per process) moves the
    start-up heap out of the collector's reach: a full collection over it took 75-83 ms."""
    import os
    import subprocess
    import sys

    code = ("import gc; from supervisor.studio import studio_graph; studio_graph(); "
            "print(gc.get_freeze_count())")
    env = {**os.environ, "MEMORY_PATH": str(tmp_path / "served.sqlite"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 10_000
