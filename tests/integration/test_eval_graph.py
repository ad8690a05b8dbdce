"""``memctl eval graph``: the metric definitions on hand-made inputs, the scenario's validation, and
one real (small) run through the Supervisor graph with memory on and off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memctl.eval_graph import expand, load_users, metrics, run_graph_eval
from memory.errors import InvalidInput


def _task(correct, injected, output="", needs=("万元",), markers=("万元", "口径"), sql="", cross=True, user="u"):
    return {"user": user, "correct": correct, "injected": list(injected), "output": output, "needs": list(needs),
            "markers": list(markers), "sql": sql, "cross_session": cross}


def test_metric_definitions():
    on = {"tasks": [_task(True, ["金额用万元", "SQL used: SELECT 1"], output="按万元", sql="SELECT 1"),
                    _task(False, ["口径是X"], output="nothing")],
          "final": {"user_profile/u": ["金额用万元", "以后万元为单位"], "text2sql_memories/u": ["a", "a", "b"]}}
    off = {"tasks": [_task(False, []), _task(False, [])], "final": {}}
    m = metrics(on, off)
    assert m["hit_rate"] == 0.5  # task 2's injected memory holds none of its needs
    assert m["context_utilisation"] == pytest.approx(2 / 3, abs=1e-3)  # 万元 used; SQL reused; 口径 not used
    assert m["duplicate_write_rate"] == 0.4  # the 2nd 万元 record and the 2nd "a" out of 5
    assert m["cross_session_reuse_uplift"] == 0.5


def test_scenario_expands_to_twenty_plus_sessions_and_is_validated(tmp_path):
    users = load_users()
    sessions = expand(users)
    assert len(users) >= 5 and len(sessions) >= 20 and {u["lang"] for u in users} == {"zh", "en"}
    kinds = {s.kind for sess in sessions for s in sess.steps}
    assert kinds == {"say", "task"} and any(s.forbids for sess in sessions for s in sess.steps)
    bad = tmp_path / "bad.yaml"
    bad.write_text("users:\n  - id: x\n    lang: en\n")
    with pytest.raises(InvalidInput, match="lacks"):
        load_users(bad)
    with pytest.raises(InvalidInput, match="does not exist"):
        load_users(tmp_path / "missing.yaml")


def test_one_user_through_the_graph_memory_on_beats_off():
    r = run_graph_eval(users=1)
    assert r["sessions"] == 4 and r["memory_errors"] == []
    for k in ("hit_rate", "context_utilisation", "duplicate_write_rate"):
        assert 0.0 <= r[k] <= 1.0
    # session 2 and 4 need what was said in sessions 1 and 3: only long-term memory has it
    assert r["cross_session_task_accuracy"]["memory_off"] == 0.0
    assert r["cross_session_task_accuracy"]["memory_on"] == 1.0
    assert r["cross_session_reuse_uplift"] > 0 and r["hit_rate"] >= 0.8
    by = {t["thread"]: t for t in r["tasks"]}
    assert by["chen-s1"]["correct"] and by["chen-s1"]["correct_memory_off"]  # same-session control


def test_cli_bad_input():
    memctl = str(Path(sys.executable).parent / "memctl")
    for args in (["eval", "graph", "--users", "0"], ["eval", "graph", "--scenario", "/nonexistent.yaml"]):
        r = subprocess.run([memctl, *args, "--json"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NO_COLOR": "1"})
        assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr, r.stderr
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.stdout or "x")
