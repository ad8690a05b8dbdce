"""Child processes of the storage fault suite (:mod:`memctl.faults`), run as
``python -m memctl.faults_workers <mode> <json args>``.

Each worker writes one JSON line per event to stdout and flushes it before going on, so the
parent knows exactly what was acknowledged even when it kills the child with SIGKILL.
Storage-level workers use deterministic unit vectors derived from the id (the backend's job is
to store what it is given; retrieval quality is not measured here); the dedupe worker runs the
real write policy with the packaged embedding model.
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from typing import Any

import numpy as np

DIM = 32
MODEL = "faults/hash-vectors"


def vector_for(key: str, dim: int = DIM) -> np.ndarray:
    """A unit vector fixed by ``key`` (the same in every process)."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def content_for(mid: str) -> str:
    # A token unique to the memory, so a keyword search can find exactly this row.
    return f"fault probe memory {mid} tok{mid.replace('-', 'x')} about tea and reports"


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def writer(args: dict[str, Any]) -> None:
    """Upsert ``count`` memories one by one; print each id once the upsert has returned."""
    from memory.backends.sqlite import SqliteBackend
    from memory.records import MemoryRecord

    prefix, count = args["prefix"], int(args["count"])
    namespaces = int(args.get("namespaces", 4))
    b = SqliteBackend(args["path"], embedding_model=MODEL, dim=DIM)
    _emit({"ready": True})
    if args.get("go"):  # start together: the parent creates the go-file once all are ready
        deadline = time.monotonic() + 120
        while not _exists(args["go"]) and time.monotonic() < deadline:
            time.sleep(0.005)
    lat: list[float] = []
    for i in range(count):
        mid = f"{prefix}-{i}"
        rec = MemoryRecord(id=mid, namespace=f"faults/u{i % namespaces}", content=content_for(mid))
        vec = vector_for(mid)[None, :]
        t0 = time.perf_counter()
        b.upsert([rec], vec)
        lat.append(time.perf_counter() - t0)
        if args.get("ack", True):
            _emit({"ack": mid})
        if args.get("delete_every") and i % int(args["delete_every"]) == 0 and i:
            # Deletes too, so a kill can land inside a delete transaction.
            _emit({"deleting": f"{prefix}-{i - 1}"})  # a kill from here on may or may not delete it
            b.delete([f"{prefix}-{i - 1}"])
            _emit({"deleted": f"{prefix}-{i - 1}"})
    b.close()
    _emit({"done": True, "latencies": lat})


def searcher(args: dict[str, Any]) -> None:
    """Search the file in a loop (random vectors and keywords) until the stop-file exists."""
    from memory.backends.sqlite import SqliteBackend
    from memory.records import MemoryQuery

    b = SqliteBackend(args["path"], embedding_model=MODEL, dim=DIM)
    _emit({"ready": True})
    n, lat = 0, []
    deadline = time.monotonic() + float(args.get("max_s", 3600))
    while not _exists(args["stop"]) and time.monotonic() < deadline:
        q = MemoryQuery(namespaces=(("faults", f"u{n % 4}"),),
                        vector=vector_for(f"q{n}"), text="tea reports", limit=10)
        t0 = time.perf_counter()
        b.query(q)
        lat.append(time.perf_counter() - t0)
        n += 1
    b.close()
    _emit({"done": True, "searches": n, "latencies": lat})


def rememberer(args: dict[str, Any]) -> None:
    """Remember the same ``texts`` through the write policy (dedupe), in a shuffled order."""
    import random

    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings

    texts: list[str] = args["texts"]
    order = list(range(len(texts)))
    random.Random(args["seed"]).shuffle(order)
    mm = MemoryManager.from_settings(MemorySettings(path=args["path"]))
    mm.service.embedder.embed_documents(["warm up"])
    _emit({"ready": True})
    # Start together: the parent creates the go-file once every worker is ready.
    deadline = time.monotonic() + 120
    while not _exists(args["go"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    statuses: dict[str, int] = {}
    for i in order:
        r = mm.remember(texts[i], args["namespace"])
        statuses[r.status] = statuses.get(r.status, 0) + 1
    mm.close()
    _emit({"done": True, "statuses": statuses})


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    args = json.loads(raw)
    if mode == "writer":
        writer(args)
    elif mode == "searcher":
        searcher(args)
    elif mode == "rememberer":
        rememberer(args)
    else:
        raise SystemExit(f"unknown worker mode {mode!r}")


if __name__ == "__main__":
    main()
