"""Where a cold preforked worker's private memory goes: its pages compared with its parent's.

    python scripts/fork_cow.py STORE.sqlite [--searches 50]

(as root: page frame numbers in ``/proc/PID/pagemap`` need CAP_SYS_ADMIN). Runs
:func:`memory.forking.prefork` on the store, forks one worker that runs ``--searches`` scoped
searches over random ``user_profile/*`` namespaces (as ``memctl.bench_procs``' cold workers do),
then compares every writable page of the worker with the parent's page at the same address:

* ``cow``: the parent had the page and the worker now has its own copy; each is classed by how
  many of its 512 eight-byte words differ from the parent's (0-15: reference counts and flags
  written to objects the parent made, e.g. Python 3.11 writing every touched object's refcount;
  more: the parent's free memory reused by the worker's own allocations);
* ``new``: pages the parent did not have (the worker's own allocations).

Also the worker's Private_Dirty by mapping and which arrays of the mapped ``<store>.partitions``
file it has pages of. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

PAGE = 4096
PFN = (1 << 55) - 1
QUERIES = ["which chart style does the user prefer", "用户喜欢什么图表", "weekly sales report for the east region",
           "deadline of the quarterly budget", "客户退款的流程", "what did the user say about coffee"]
_SVC: Any = None


def _maps(pid: int) -> list[tuple[int, int, str, int, str]]:
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        p = line.split()
        lo, hi = (int(x, 16) for x in p[0].split("-"))
        out.append((lo, hi, p[1], int(p[2], 16), (p[5] if len(p) > 5 else "[anon]").split("site-packages/")[-1]))
    return out


def _pagemap(pid: int, lo: int, hi: int) -> tuple[int, ...]:
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(lo // PAGE * 8)
        data = f.read((hi - lo) // PAGE * 8)
    return struct.unpack(f"<{len(data) // 8}Q", data)


def compare(parent: int, child: int) -> dict[str, Any]:
    """The child's private pages by mapping: copied from the parent (by words changed) or new."""
    by_map: dict[str, dict[str, float]] = defaultdict(lambda: {"cow_mb": 0.0, "new_mb": 0.0})
    words: dict[str, int] = defaultdict(int)
    with open(f"/proc/{parent}/mem", "rb") as pmem, open(f"/proc/{child}/mem", "rb") as cmem:
        for lo, hi, perm, _, name in _maps(child):
            if "w" not in perm or lo >= 1 << 47:
                continue
            try:
                ce, pe = _pagemap(child, lo, hi), _pagemap(parent, lo, hi)
            except OSError:
                continue
            for i, e in enumerate(ce):
                if not e >> 63 & 1 or e >> 61 & 1:  # not present, or a file / shared page
                    continue
                p = pe[i] if i < len(pe) else 0
                if p >> 63 & 1 and p & PFN == e & PFN:
                    continue  # still the parent's page
                if not p >> 63 & 1:
                    by_map[name]["new_mb"] += PAGE / 2**20
                    continue
                by_map[name]["cow_mb"] += PAGE / 2**20
                a = lo + i * PAGE
                try:
                    pmem.seek(a)
                    cmem.seek(a)
                    pw, cw = struct.unpack("<512Q", pmem.read(PAGE)), struct.unpack("<512Q", cmem.read(PAGE))
                    d = sum(1 for x, y in zip(pw, cw, strict=True) if x != y)
                except (OSError, struct.error):
                    continue
                words["0" if d == 0 else "1-15" if d < 16 else "16-255" if d < 256 else "256-512"] += 1
    maps = {k: {kk: round(vv, 2) for kk, vv in v.items()} for k, v in by_map.items() if sum(v.values()) >= 0.05}
    return {"by_mapping": dict(sorted(maps.items(), key=lambda kv: -sum(kv[1].values()))),
            "cow_mb": round(sum(v["cow_mb"] for v in by_map.values()), 2),
            "new_mb": round(sum(v["new_mb"] for v in by_map.values()), 2),
            "cow_mb_by_words_changed": {k: round(v * PAGE / 2**20, 2) for k, v in sorted(words.items())}}


def partitions_pages(pid: int, path: str) -> dict[str, float]:
    """MB of each array of the mapped ``<store>.partitions`` file present in ``pid``'s mapping."""
    raw = Path(path).read_bytes()[:16384] if os.path.exists(path) else b""
    if len(raw) < 12:
        return {}
    import numpy as np

    (n,) = struct.unpack("<I", raw[8:12])
    head = json.loads(raw[12 : 12 + n])
    arrays = sorted((off, name, int(np.prod(shape)) * np.dtype(dt).itemsize)
                    for name, (off, dt, shape) in head["arrays"].items())
    out: dict[str, float] = defaultdict(float)
    for lo, hi, _, foff, name in _maps(pid):
        if not name.endswith(".partitions"):
            continue
        for i, e in enumerate(_pagemap(pid, lo, hi)):
            if e >> 63 & 1:
                off = foff + i * PAGE
                which = next((a for o, a, sz in reversed(arrays) if off >= o), "header")
                out[which] += PAGE / 2**20
    return {k: round(v, 2) for k, v in out.items()}


def _worker(searches: int, ready: Any, done: Any) -> None:
    names = sorted("/".join(ns) for ns, _ in _SVC.backend.namespaces())
    users = [n for n in names if n.startswith("user_profile/")]
    rng = random.Random(0)
    for i in range(searches):
        _SVC.search(QUERIES[i % len(QUERIES)], rng.choice(users), top_k=5)
    ready.set()
    done.wait(600)


def main() -> None:
    global _SVC
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--searches", type=int, default=50)
    a = ap.parse_args()
    from memctl.bench_procs import _dirty_by_mapping, _mem
    from memory.forking import prefork
    from memory.settings import MemorySettings

    _SVC = prefork(MemorySettings(path=a.store))
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_worker, args=(a.searches, ready, done))
    p.start()
    try:
        ready.wait(900)
        time.sleep(0.3)
        assert p.pid is not None
        res = {"load_avg": os.getloadavg(), "worker": _mem(p.pid), "parent": _mem(os.getpid()),
               "worker_private_dirty": _dirty_by_mapping(p.pid, 6), "pages": compare(os.getpid(), p.pid),
               "worker_partitions_pages_mb": partitions_pages(p.pid, a.store + ".partitions")}
    finally:
        done.set()
        p.join(60)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
