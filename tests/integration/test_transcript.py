"""The cross-process group transcript (seed 003): ≥ 4 writer processes on one SQLite file, no loss,
no duplicate, one order (ts, then id); retention; bad input; the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory.errors import InvalidContent, InvalidInput
from memory.transcript import GroupTranscript

ROOT = Path(__file__).resolve().parents[2]
WRITER = r"""
import sys
from memory.transcript import GroupTranscript
path, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = GroupTranscript(path, max_messages=None)
base = 1_767_600_000.0
for i in range(n):
    # interleaved timestamps across writers; every 5th message also re-delivers one of the next
    # writer's messages (same id, same content): a relay delivering twice
    t.append(f"w{w}-{i:04d}", f"agent{w}", "agent", f"writer {w} message {i}", ts=base + i + w / 10, thread="g1")
    if i % 5 == 0:
        j = (w + 1) % 4
        t.append(f"w{j}-{i:04d}", f"agent{j}", "agent", f"writer {j} message {i}", ts=base + i + j / 10, thread="g1")
t.close()
"""


def test_four_writer_processes_no_loss_no_duplicate(tmp_path):
    path = tmp_path / "group.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w), "500"], env=env,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read() if p.stderr else ""
    with GroupTranscript(path, max_messages=None) as t:
        msgs = t.get_recent(None, thread="g1")
        ids = [m.message_id for m in msgs]
        assert len(ids) == 2000 and len(set(ids)) == 2000 and t.count() == 2000
        assert ids == [m.message_id for m in sorted(msgs, key=lambda m: (m.ts, m.message_id))]
        assert {f"w{w}-{i:04d}" for w in range(4) for i in range(500)} == set(ids)
        assert [m.message_id for m in t.get_recent(3, thread="g1")] == ["w1-0499", "w2-0499", "w3-0499"]


def test_order_dedupe_since_summary_and_retention(tmp_path):
    t0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    with GroupTranscript(tmp_path / "t.sqlite", max_messages=5, prune_every=1) as t:
        assert t.append("b", "li", "user", "same time, id b", ts=t0)
        assert t.append("a", "wang", "user", "same time, id a", ts=t0)
        assert not t.append("a", "wang", "user", "redelivered", ts=t0)  # dedupe by id: first wins
        assert [m.message_id for m in t.get_recent(10)] == ["a", "b"]  # ts, then id
        assert t.get_recent(10)[0].text == "same time, id a"
        for i in range(6):
            t.append(f"m{i}", "text2sql", "agent", f"finding {i}", ts=t0 + timedelta(minutes=i + 1))
        # at most 5 per thread: the oldest went first
        assert [m.message_id for m in t.get_recent(None)] == ["m1", "m2", "m3", "m4", "m5"]
        assert [m.message_id for m in t.get_recent(None, since=t0 + timedelta(minutes=5))] == ["m4", "m5"]
        text = t.summary(10, max_tokens=40)
        assert text.startswith("Recent group messages:") and "finding 5" in text and "finding 1" not in text
        assert t.summary(10, exclude=("m5",)).count("\n") == 4
    with GroupTranscript(tmp_path / "age.sqlite", max_age_days=1, max_messages=None) as t:
        t.append("old", "li", "user", "old message", ts=t0)
        t.append("new", "li", "user", "new message", ts=t0 + timedelta(days=2))
        assert t.prune(now=t0 + timedelta(days=2, hours=1)) == 1
        assert [m.message_id for m in t.get_recent(None)] == ["new"]


@pytest.mark.parametrize("kwargs, err", [
    ({"message_id": ""}, InvalidInput), ({"sender": " "}, InvalidInput), ({"role": "boss"}, InvalidInput),
    ({"text": ""}, InvalidContent), ({"text": "x" * 20_001}, InvalidContent), ({"ts": "yesterday"}, InvalidInput),
    ({"thread": ""}, InvalidInput), ({"text": "\u200b"}, InvalidContent), ({"text": " \u202e\ufeff "}, InvalidContent),
])
def test_bad_input_is_refused_and_nothing_is_stored(tmp_path, kwargs, err):
    with GroupTranscript(tmp_path / "t.sqlite") as t:
        args = {"message_id": "m", "sender": "li", "role": "user", "text": "hello", "ts": None, "thread": "g", **kwargs}
        with pytest.raises(err):
            t.append(**args)
        assert t.count() == 0
        with pytest.raises(InvalidInput):
            t.get_recent(-1)


def _memctl(*args: str, store: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "memctl"), "--path", str(store), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def test_cli_transcript_append_and_tail(tmp_path):
    store = tmp_path / "memory.sqlite"
    r = _memctl("transcript", "append", "hi team, use 万元 today", "--id", "m1", "--sender", "zhang",
                "--ts", "2026-01-05T09:00:00Z", "--thread", "g1", "--json", store=store)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"appended": True, "message_id": "m1"}
    r = _memctl("transcript", "append", "dup", "--id", "m1", "--sender", "zhang", "--thread", "g1", "--json",
                store=store)
    assert json.loads(r.stdout)["appended"] is False
    _memctl("transcript", "append", "on it", "--id", "m2", "--sender", "text2sql", "--role", "agent",
            "--ts", "2026-01-05T09:01:00Z", "--thread", "g1", store=store)
    r = _memctl("transcript", "tail", "--thread", "g1", "--json", store=store)
    rows = json.loads(r.stdout)
    assert [m["message_id"] for m in rows] == ["m1", "m2"] and rows[0]["text"] == "hi team, use 万元 today"
    r = _memctl("transcript", "tail", "--thread", "g1", "--since", "2026-01-05T09:00:30Z", store=store)
    assert "on it" in r.stdout and "万元" not in r.stdout
    for bad in (["transcript", "append", "x", "--id", "m3", "--sender", "a", "--role", "boss"],
                ["transcript", "append", "", "--id", "m3", "--sender", "a"],
                ["transcript", "tail", "--since", "yesterday"], ["transcript", "tail", "-n", "-2"]):
        r = _memctl(*bad, store=store)
        assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.strip(), bad


def test_transcript_commands_stay_store_only(tmp_path):
    code = ("import sys\nfrom memctl.cli import app\n"
            f"sys.argv=['memctl','--path',{str(tmp_path / 'm.sqlite')!r},'transcript','tail']\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "heavy={m.split('.')[0] for m in sys.modules} & {'fastembed','onnxruntime','langgraph','qdrant_client'}\n"
            "print(sorted(heavy))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.strip().endswith("[]"), r.stdout + r.stderr


def test_supervisor_entry_injects_other_processes_messages(tmp_path, embedder):
    from langchain_core.messages import HumanMessage, SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from agents import default_agents
    from memory import MemorySettings
    from memory.policy.manager import MemoryManager
    from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph

    store = tmp_path / "memory.sqlite"
    # Another process (the CLI) posts to the group first.
    r = _memctl("transcript", "append", "华东12月的数据已经补齐了", "--id", "ext-1", "--sender", "ops-bot",
                "--role", "agent", "--thread", "team-a", store=store)
    assert r.returncode == 0, r.stderr
    mm = MemoryManager.from_settings(MemorySettings(path=str(store)), embedder=embedder)
    with GroupTranscript(store) as t:
        sup = ScriptedChatModel(role="supervisor", strict=True)
        sup.extend([{"content": "好的", "expect": ["ops-bot: 华东12月的数据已经补齐了"]}])
        models = {a: ScriptedChatModel(role=a) for a in ("text2sql", "statistics", "analysis")}
        g = build_supervisor_graph(default_agents(models=models, reports_dir=tmp_path / "r"), mm, sup,
                                   checkpointer=InMemorySaver(), transcript=t)
        g.invoke({"messages": [HumanMessage("大家好，今天先看华东")]},
                 {"configurable": {"thread_id": "s1", "group_id": "team-a"}}, context=SupervisorContext(user_id="li"))
        assert all(c["found"] for c in sup.checks)
        memory_msgs = [m.content for m in sup.calls[0] if isinstance(m, SystemMessage) and m.name == "memory"]
        assert "大家好" not in "".join(memory_msgs)  # the user's own message is not injected back
        # ... but it is in the group transcript, for the other processes.
        assert [(m.sender, m.text) for m in t.get_recent(5, thread="team-a")][-1] == ("li", "大家好，今天先看华东")
    mm.close()
