"""``langgraph dev`` end to end: the server loads langgraph.json (our Supervisor graph and our store),
a run through langgraph-sdk stores a preference via the MemoryManager, and the server's store API
reads it back under the Supervisor's own namespace (("user_profile", <user>)).

Offline: the server binds 127.0.0.1, analytics and version checks are off, and the memory file
lives in a tmp dir (a file written inside the project would make the dev server reload).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
USER = "studio-u1"
PREFERENCE = "以后报表金额都用万元为单位"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _langgraph_cli() -> list[str] | None:
    if importlib.util.find_spec("langgraph_cli") is None or importlib.util.find_spec("langgraph_api") is None:
        return None
    exe = Path(sys.executable).with_name("langgraph")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "langgraph_cli.cli"]


def _wait_ok(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"langgraph dev not ready after {timeout:.0f}s:\n{log.read_text(errors='replace')[-3000:]}")


def test_langgraph_dev_run_and_store_api(tmp_path):
    cli = _langgraph_cli()
    if cli is None:
        pytest.skip("langgraph CLI not installed: pip install 'langgraph-cli[inmem]' langgraph-sdk")
    pytest.importorskip("langgraph_sdk", reason="langgraph-sdk not installed")
    from langgraph_sdk import get_sync_client

    api_dir = REPO / ".langgraph_api"
    had_api_dir = api_dir.exists()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "MEMORY_PATH": str(tmp_path / "studio.sqlite"),
        "HF_HUB_OFFLINE": "1",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("MEMORY_DEMO_MODEL", None)  # the offline router + stand-in agents
    env.pop("MEMORY_CONFIG", None)
    log = tmp_path / "langgraph-dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*cli, "dev", "--host", "127.0.0.1", "--port", str(port), "--no-browser", "--no-reload"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ok(url, proc, log)
        client = get_sync_client(url=url)
        thread = client.threads.create()
        state = client.runs.wait(
            thread["thread_id"],
            "supervisor",
            input={"messages": [{"role": "user", "content": PREFERENCE}]},
            context={"user_id": USER},
        )
        assert "万元" in str(state["messages"][-1]["content"]), state["messages"][-1]
        written = [e for e in state.get("memory_log") or [] if e.get("kind") == "written"]
        assert written and written[0]["status"] == "added", state.get("memory_log")

        # The server's store API (our MemoryStore, on the same MEMORY_PATH file) shows the
        # Supervisor's memory where the Supervisor wrote it.
        found = client.store.search_items(("user_profile", USER), limit=20)["items"]
        prefs = [it for it in found if "万元" in it["value"]["content"]]
        assert prefs, f"{found}\n{log.read_text(errors='replace')[-3000:]}"
        item = client.store.get_item(["user_profile", USER], prefs[0]["key"])
        assert item["value"]["type"] == "user_profile" and item["value"]["content"] == prefs[0]["value"]["content"]
        # Searching with a query goes through our hybrid ranking; the score is a cosine.
        hits = client.store.search_items(["user_profile"], query="报表金额单位", limit=3)["items"]
        assert hits and "万元" in hits[0]["value"]["content"] and 0 < hits[0]["score"] <= 1
        # Another user's namespace stays empty.
        assert client.store.search_items(["user_profile", "someone-else"])["items"] == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        if not had_api_dir:
            shutil.rmtree(api_dir, ignore_errors=True)
