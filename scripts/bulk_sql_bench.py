"""The parent's SQLite side of a bulk import alone: upserts of a JSON Lines file's records, batch by
batch, with random unit vectors (no model), into an empty store or a copy of one.

    python scripts/bulk_sql_bench.py FILE.jsonl [--base STORE_DIR] [--batch-size 2000] [--pragma P ...]

Prints CPU and wall seconds of the upserts (keyword terms included) and of the vector-file
catch-up, the first and last batch's, the WAL's size, and FTS5's stored index (rows and bytes of
``memories_fts_data``) before and after. ``--pragma`` runs ``PRAGMA P`` on the connection first
(``cache_size=-65536``, ``wal_autocheckpoint=0``); ``fts:automerge=0`` sets an FTS5 option. The
copy of ``--base`` (never written in place) goes to ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--base", type=Path, help="a store folder to copy first (never written)")
    ap.add_argument("--batch-size", type=int, default=2000)
    ap.add_argument("--pragma", nargs="*", default=[])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bulk_sql_bench"))
    a = ap.parse_args()

    from memory.backends.sqlite import SqliteBackend
    from memory.bulk import validate_jsonl
    from memory.embeddings import USE_DIM, USE_MODEL
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    if a.work.exists():
        shutil.rmtree(a.work)
    a.work.mkdir(parents=True)
    if a.base is not None:
        for f in a.base.iterdir():
            if f.name.startswith("memory.sqlite") and not f.name.endswith(("-wal", "-shm")):
                shutil.copy(f, a.work / f.name)
    os.sync()  # the copy's dirty pages would otherwise be written back during the upserts
    b = SqliteBackend(a.work / "memory.sqlite", embedding_model=USE_MODEL, dim=USE_DIM)
    for p in a.pragma:
        if p.startswith("fts:"):
            key, value = p[4:].split("=")
            b._conn.execute("INSERT INTO memories_fts (memories_fts, rank) VALUES (?, ?)", (key, int(value)))
        else:
            b._conn.execute(f"PRAGMA {p}")
    svc = MemoryService(b, None, MemorySettings(path=":memory:"))  # type: ignore[arg-type] # no embedding here
    recs = validate_jsonl(svc, a.file)
    vecs = np.random.default_rng(0).standard_normal((len(recs), USE_DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)

    def fts() -> list[int]:
        n, size = b._conn.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(block)), 0) FROM memories_fts_data").fetchone()
        return [int(n), int(size)]

    fts0, per = fts(), []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(recs), a.batch_size):
        t, c = time.perf_counter(), time.process_time()
        b.upsert(recs[i : i + a.batch_size], vecs[i : i + a.batch_size])
        per.append([round(time.perf_counter() - t, 3), round(time.process_time() - c, 3)])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    wal = a.work / "memory.sqlite-wal"
    wal_mb = round(wal.stat().st_size / 2**20, 1) if wal.exists() else 0.0
    fts1 = fts()
    t, c = time.perf_counter(), time.process_time()
    b.flush_vectors()
    print(json.dumps({"base": str(a.base) if a.base else "empty", "rows": len(recs), "pragma": a.pragma,
                      "upsert_wall_s": round(wall, 2), "upsert_cpu_s": round(cpu, 2),
                      "flush_wall_s": round(time.perf_counter() - t, 2), "flush_cpu_s": round(time.process_time() - c, 2),
                      "first_batch_wall_cpu": per[0], "last_batch_wall_cpu": per[-1], "wal_mb": wal_mb,
                      "fts_data_rows_bytes_before": fts0, "fts_data_rows_bytes_after": fts1,
                      "load": round(os.getloadavg()[0], 2)}))
    b.close()


if __name__ == "__main__":
    main()
