"""The storage fault suite behind ``memctl faults``: kill -9 of writers, concurrent writer
processes, the cross-process dedupe race, and (in :mod:`memctl.faults_paths`) failed
statements, damaged files and a dead Qdrant.

Every function returns plain figures (a dict); ``tests/faults`` runs the same functions on a
small configuration and asserts on the figures, ``memctl faults --json`` runs the full sizes.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memctl.faults_workers import DIM, MODEL


# ---------------------------------------------------------------------- helpers
def spawn(mode: str, args: dict[str, Any]) -> subprocess.Popen[str]:
    """A worker process whose stdout is one JSON event a line."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "memctl.faults_workers", mode, json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _read_event(proc: subprocess.Popen[str], timeout_s: float = 120.0) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"fault worker exited early (rc {proc.poll()}): {err[-2000:]}")
    return json.loads(line)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else 0.0


def integrity(path: str | Path) -> str:
    """``PRAGMA integrity_check`` of a store file ("ok" when sound)."""
    conn = sqlite3.connect(str(path), timeout=30)
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        return "; ".join(str(r[0]) for r in rows[:5])
    except sqlite3.DatabaseError as exc:  # too damaged to check at all
        return f"error: {exc}"
    finally:
        conn.close()


def index_agreement(backend: Any, *, sample: int = 40, seed: int = 0) -> dict[str, Any]:
    """Whether a SqliteBackend's in-memory indexes equal what its rows say.

    Checks every row: its rid is in the vector index with the stored vector and in the keyword
    index, and neither index holds anything else (no phantom after a failed or killed write).
    A sample of rows is also found through the public search (by its vector, by its unique
    keyword token), so the check holds however the indexes are laid out inside.
    """
    from memory.records import MemoryQuery

    backend.stats()  # brings the indexes up to the file
    rows = backend._conn.execute("SELECT rid, id, ns, vector FROM memories").fetchall()
    # Namespaces load lazily (memory.backends.sqlite_partitions): load every one, so the whole
    # index is compared with the rows (the budget must hold them all: fault-suite stores are small).
    with backend._lock:
        backend._ensure_loaded(sorted({tuple(ns.split("/")) for _, _, ns, _ in rows}))
    fts = {r: t for r, t in backend._conn.execute("SELECT rowid, terms FROM memories_fts")}
    idx, kw = backend._index, backend._kw
    bad_vectors = [rid for rid, _, _, blob in rows
                   if rid not in idx or not np.allclose(idx.vector(rid), np.frombuffer(blob, dtype="<f4"))]
    missing_kw = [rid for rid, *_ in rows if rid not in kw]
    rids = {r[0] for r in rows}
    out: dict[str, Any] = {
        "rows": len(rows), "vectors": len(idx), "keyword_entries": len(kw), "fts_rows": len(fts),
        "vector_mismatches": len(bad_vectors), "keyword_missing": len(missing_kw),
        "fts_missing": len(rids - set(fts)),
    }
    found = 0
    picks = random.Random(seed).sample(rows, min(sample, len(rows)))
    for _rid, mid, ns, blob in picks:
        nsk = tuple(ns.split("/"))
        v = np.frombuffer(blob, dtype="<f4")
        by_vec = backend.query(MemoryQuery(namespaces=(nsk,), vector=v, limit=1))
        by_kw = backend.query(MemoryQuery(namespaces=(nsk,), text="tok" + mid.replace("-", "x"), limit=1))
        found += bool(by_vec and by_vec[0].record.id == mid and by_kw and by_kw[0].record.id == mid)
    out["searched"] = len(picks)
    out["found_by_search"] = found
    out["agree"] = (out["rows"] == out["vectors"] == out["keyword_entries"] == out["fts_rows"]
                    and not bad_vectors and not missing_kw and not out["fts_missing"] and found == len(picks))
    return out


def _open(path: str | Path) -> Any:
    from memory.backends.sqlite import SqliteBackend

    return SqliteBackend(path, embedding_model=MODEL, dim=DIM)


# ---------------------------------------------------------------------- kill -9
def kill9(workdir: Path, *, points: int = 20, per_child: int = 400, seed: int = 7) -> dict[str, Any]:
    """Kill a writer process with SIGKILL at ``points`` random moments (one shared file).

    The child prints each id after its upsert returned; every printed id must be in the file
    afterwards, unless the child had announced deleting it (a kill during that delete may land
    before or after its commit); a delete that returned must stay deleted. After each kill the
    file is checked (``integrity_check``) and reopened, and the reopened backend's indexes are
    compared with the rows.
    """
    rng = random.Random(seed)
    path = workdir / "kill9.sqlite"
    acked: set[str] = set()
    deleted: set[str] = set()  # announced deletes (a kill may land before or after their commit)
    deleted_acked: set[str] = set()  # deletes that returned: must stay deleted
    resurrected: set[str] = set()
    lost: set[str] = set()
    disagree = 0
    bad_integrity = 0
    finished_before_kill = 0
    first_disagreement: dict[str, Any] | None = None
    for k in range(points):
        proc = spawn("writer", {"path": str(path), "prefix": f"k{k}", "count": per_child, "delete_every": 7})
        _read_event(proc)  # ready: the backend is open
        # Kill after a random number of acknowledged writes plus a random sub-write delay, so
        # the signal lands anywhere inside the write/commit/index path.
        target = rng.randrange(1, per_child)
        n = 0
        while n < target:
            ev = _read_event(proc)
            if "ack" in ev:
                acked.add(ev["ack"])
                n += 1
            elif "deleting" in ev:
                deleted.add(ev["deleting"])
            elif "deleted" in ev:
                deleted_acked.add(ev["deleted"])
            elif "done" in ev:
                finished_before_kill += 1
                break
        time.sleep(rng.random() * 0.004)
        proc.kill()
        # Events already written before the kill count as acknowledged too.
        assert proc.stdout is not None
        for line in proc.stdout.read().splitlines():
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill was never acknowledged
            if "ack" in ev:
                acked.add(ev["ack"])
            elif "deleting" in ev:
                deleted.add(ev["deleting"])
            elif "deleted" in ev:
                deleted_acked.add(ev["deleted"])
        proc.wait()
        if integrity(path) != "ok":
            bad_integrity += 1
        b = _open(path)
        try:
            present = {r.id for r in b.get(sorted(acked - deleted))}
            lost |= (acked - deleted) - present
            resurrected |= {r.id for r in b.get(sorted(deleted_acked))}
            agreement = index_agreement(b, sample=10, seed=k)
            if not agreement["agree"]:
                disagree += 1
                first_disagreement = first_disagreement or agreement
        finally:
            b.close()
    return {"kills": points, "acknowledged": len(acked), "deletes_acknowledged": len(deleted_acked),
            "deleted_memories_back": len(resurrected),
            "lost_acknowledged": len(lost), "integrity_failures": bad_integrity,
            "index_disagreements_after_reopen": disagree, "children_finished_before_kill": finished_before_kill,
            "first_disagreement": first_disagreement}


# ---------------------------------------------------------------------- concurrent writers
def concurrent_writers(workdir: Path, *, procs: int = 4, per_proc: int = 2500,
                       searchers: int = 0) -> dict[str, Any]:
    """``procs`` processes each upsert ``per_proc`` memories into one file at once (while
    ``searchers`` other processes search it in a loop); per-write latency includes the wait
    for the write lock."""
    path = workdir / "concurrent.sqlite"
    _open(path).close()  # create the file (schema) once, outside the timed part
    go, stop = workdir / "concurrent.go", workdir / "concurrent.stop"
    children = [spawn("writer", {"path": str(path), "prefix": f"p{p}", "count": per_proc, "ack": False,
                                 "go": str(go)}) for p in range(procs)]
    readers = [spawn("searcher", {"path": str(path), "stop": str(stop)}) for _ in range(searchers)]
    for c in children + readers:
        _read_event(c)
    t0 = time.perf_counter()
    go.touch()
    lat: list[float] = []
    errors = 0
    for c in children:
        try:
            ev = _read_event(c, timeout_s=3600)
            lat += ev["latencies"]
        except RuntimeError:
            errors += 1
        c.wait()
    wall = time.perf_counter() - t0
    stop.touch()
    search_ms: list[float] = []
    for c in readers:
        try:
            search_ms += [x * 1000 for x in _read_event(c)["latencies"]]
        except RuntimeError:
            errors += 1
        c.wait()
    conn = sqlite3.connect(str(path))
    try:
        (rows,) = conn.execute("SELECT COUNT(*) FROM memories").fetchone()
        (distinct,) = conn.execute("SELECT COUNT(DISTINCT id) FROM memories").fetchone()
    finally:
        conn.close()
    expected = procs * per_proc
    b = _open(path)
    try:
        ids = [f"p{p}-{i}" for p in range(procs) for i in range(per_proc)]
        present = len(b.get(ids))
        agree = index_agreement(b, sample=20)["agree"]
    finally:
        b.close()
    ms = [x * 1000 for x in lat]
    return {"processes": procs, "writes_per_process": per_proc, "expected": expected, "present": present,
            "rows": int(rows), "duplicates": int(rows) - int(distinct), "worker_errors": errors,
            "integrity": integrity(path), "index_agrees": agree,
            "write_p50_ms": round(percentile(ms, 50), 2), "write_p99_ms": round(percentile(ms, 99), 2),
            "write_max_ms": round(max(ms, default=0.0), 2), "wall_s": round(wall, 2),
            "writes_per_s": round(expected / wall, 1) if wall else None, "searchers": searchers,
            "searches": len(search_ms), "search_p99_ms": round(percentile(search_ms, 99), 2)}


# ---------------------------------------------------------------------- dedupe race
def dedupe_texts(n: int, mm: Any) -> list[str]:
    """``n`` statements the write policy keeps apart: the first texts of the dedupe dev and
    pairs sets ("existing" side, zh and en; not the blind set) that serial passes through ``mm``
    store as "added" (so a row beyond ``n`` after the race is a duplicate the race let through)."""
    data = Path(__file__).resolve().parent.parent / "tests" / "data"
    files = [data / "dedupe_dev.jsonl", data / "dedupe_pairs.jsonl"]
    if all(f.exists() for f in files):
        pool = list(dict.fromkeys(json.loads(line)["existing"] for f in files
                                  for line in f.read_text().splitlines() if line.strip()))
    else:  # an installed package without the test data: generated statements about distinct people
        names = ["Alice", "Bao", "Chen Wei", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal"]
        things = ["sales dashboard", "churn model", "SQL style guide", "weekly KPI email", "Q3 forecast",
                  "warehouse migration", "pricing experiment", "ETL alerts", "board deck", "data catalog"]
        pool = [f"{a} is responsible for the {t}" for a in names for t in things]
    # Kept only if stored as "added" both in pool order and in reverse order: the judge reads
    # a pair in the order it arrives, and the race below arrives in shuffled orders.
    forward = {t for t in pool if mm.remember(t, "user_profile/forward").status == "added"}
    backward = {t for t in reversed(pool) if mm.remember(t, "user_profile/backward").status == "added"}
    kept = [t for t in pool if t in forward and t in backward][:n]
    if len(kept) < n:
        raise ValueError(f"only {len(kept)} distinct statements available; ask for at most that many")
    return kept


def dedupe_race(workdir: Path, *, procs: int = 4, texts: int = 100, same_order: bool = True) -> dict[str, Any]:
    """``procs`` processes remember the same ``texts`` statements at once into one namespace
    (in the same order: the harshest case, every text arrives ``procs`` times at once)."""
    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings

    path = workdir / "dedupe.sqlite"
    with MemoryManager.from_settings(MemorySettings(path=str(workdir / "dedupe-serial.sqlite"))) as mm:
        all_texts = dedupe_texts(texts, mm)
        # The reference: what one process stores for these texts in the race's order.
        order = list(range(len(all_texts)))
        random.Random(0).shuffle(order)
        for i in order:
            mm.remember(all_texts[i], "user_profile/serial")
        serial_rows = mm.service.backend.count(("user_profile", "serial"))
    with MemoryManager.from_settings(MemorySettings(path=str(path))):
        pass  # schema created once
    go = workdir / "dedupe.go"
    children = [spawn("rememberer", {"path": str(path), "texts": all_texts, "seed": 0 if same_order else p,
                                     "go": str(go), "namespace": "user_profile/race"}) for p in range(procs)]
    for c in children:
        _read_event(c)
    t0 = time.perf_counter()
    go.touch()
    statuses: dict[str, int] = {}
    for c in children:
        ev = _read_event(c, timeout_s=3600)
        for k, v in ev["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
        c.wait()
    wall = time.perf_counter() - t0
    conn = sqlite3.connect(str(path))
    try:
        contents = [r[0] for r in conn.execute("SELECT content FROM memories WHERE ns = 'user_profile/race'")]
    finally:
        conn.close()
    return {"processes": procs, "texts": texts, "same_order": same_order,
            "serial_rows": serial_rows if same_order else None, "rows": len(contents),
            "distinct_contents": len(set(contents)),
            "rows_stored_twice": len(contents) - len(set(contents)),
            "statuses": statuses, "wall_s": round(wall, 2), "integrity": integrity(path)}


# ---------------------------------------------------------------------- all of it
FULL = {"kill_points": 20, "kill_per_child": 400, "procs": 4, "per_proc": 2500, "dedupe_texts": 100}
SMALL = {"kill_points": 10, "kill_per_child": 40, "procs": 4, "per_proc": 150, "dedupe_texts": 12}


def run_faults(config: dict[str, int] | None = None, *,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every fault scenario at ``config`` sizes (default: FULL), in a temporary directory."""
    from memctl.faults_paths import failure_paths, qdrant_down

    cfg = {**FULL, **(config or {})}
    say = progress or (lambda _s: None)
    out: dict[str, Any] = {"config": cfg}
    with tempfile.TemporaryDirectory(prefix="memctl-faults-") as tmp:
        work = Path(tmp)
        say("kill -9 of a writer")
        out["kill9"] = kill9(work, points=cfg["kill_points"], per_child=cfg["kill_per_child"])
        say("concurrent writer processes")
        out["concurrent_writers"] = concurrent_writers(work, procs=cfg["procs"], per_proc=cfg["per_proc"])
        say("concurrent writer processes with 2 searcher processes")
        out["concurrent_writers_with_searchers"] = concurrent_writers(
            work / "searchers", procs=cfg["procs"], per_proc=cfg["per_proc"], searchers=2)
        say("dedupe race across processes")
        out["dedupe_race"] = dedupe_race(work, procs=cfg["procs"], texts=cfg["dedupe_texts"])
        say("failed statements and damaged files")
        out["failure_paths"] = failure_paths(work)
        say("Qdrant down")
        out["qdrant_down"] = qdrant_down(work)
    return out


__all__ = ["FULL", "SMALL", "concurrent_writers", "dedupe_race", "index_agreement", "integrity", "kill9",
           "run_faults"]
