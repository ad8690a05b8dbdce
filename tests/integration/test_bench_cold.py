"""``memctl bench --cold``: fresh-process first-search timings and peak RSS, ours vs LangGraph, with the
JSON and plot written to the cache directory by default (not the working directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = Path(sys.executable).parent / "memctl"
MEMCTL: list[str] = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "memctl.cli"]


def test_bench_cold_small_store(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(cache)}
    env.pop("MEMORY_PATH", None)
    cmd = [*MEMCTL, "bench", "--cold", "--sizes", "300", "--runs", "1", "--systems", "sqlite,langgraph-sqlite",
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    (r,) = out["results"]
    assert r["n"] == 300 and r["build"]["ours"]["rows"] == 300
    for key in ("ours_scoped_s", "ours_unscoped_s", "langgraph_scoped_s", "langgraph_unscoped_s"):
        assert r[key] > 0
    assert 20 < r["ours_scoped_rss_mb"] < 2000 and out["help_s"] > 0
    default = cache / "langgraph-memory" / "bench"
    assert json.loads((default / "cold.json").read_text()) == out
    assert (default / "cold.png").stat().st_size > 0
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.png"))  # nothing in the cwd
    # the store was built once and is reused by the next run
    assert (default / "cold-300" / "memory.sqlite.vectors").is_file()


def test_bench_cold_warm_figures(tmp_path: Path) -> None:
    """--warm-queries adds each store's warm figures (memctl.bench_warm, fresh process)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("MEMORY_PATH", None)
    cmd = [*MEMCTL, "bench", "--cold", "--sizes", "2000", "--runs", "1", "--systems", "sqlite", "--warm-queries", "6",
           "--json", "--out", str(tmp_path / "c.json"), "--plot", str(tmp_path / "c.png")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (r,) = json.loads(p.stdout)["results"]
    w = r["warm"]
    assert 0 < w["open_s"] < 5 and w["loaded_partitions"] == 3  # 2,000 rows: one user x 3 kinds
    assert w["scoped_new"] is None and w["scoped_loaded"]["n"] == 6 and w["scoped_loaded"]["p95_ms"] > 0
    assert w["unscoped"]["n"] == 6 and sum(w["unscoped"]["plans"].values()) == 6 and w["unscoped_first_s"] > 0
    assert w["rss_mb"] > 20 and w["hwm_mb"] >= w["rss_mb"]
    bad = subprocess.run([*MEMCTL, "bench", "--cold", "--warm-queries", "-1"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    assert bad.returncode != 0 and "--warm-queries must be >= 0" in bad.stderr + bad.stdout
