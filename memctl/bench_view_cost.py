"""What the judge's stored view vectors cost: file bytes per memory and write latency.

Run: ``python -m memctl.bench_view_cost --pairs tests/data/dedupe_corpus/author_h.jsonl``
(each pair's ``existing`` then ``incoming`` written with ``remember`` into the pair's own
namespace, so a user's namespace collects the memories of all of that user's pairs, as in use), or
``--corpus 600 --users 2`` (generated bench sentences into ``user_profile/<user>``).

The store is a real SQLite file (the view cache is off for ``":memory:"``, so ``memctl eval
dedupe``'s timing does not include it). Reported: memories stored, rows of the view tables, their
file bytes (SQLite's ``dbstat``: pages of every ``judge_view*`` table and index), bytes per stored
memory, and the write latency of ``remember`` (p50/p95, both writes of a pair timed).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def view_bytes(path: str | Path) -> dict[str, int]:
    """File bytes (whole pages) of each ``judge_view*`` table and index of a store file."""
    con = sqlite3.connect(str(path))
    try:
        rows = con.execute("SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE 'judge_view%' "
                           "AND name NOT LIKE '%migrations%' GROUP BY name").fetchall()
        # Automatic indexes of UNIQUE constraints are named sqlite_autoindex_<table>_N.
        rows += con.execute("SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE 'sqlite_autoindex_judge_view%' "
                            "GROUP BY name").fetchall()
    finally:
        con.close()
    return {str(n): int(b) for n, b in rows}


def _writes(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(namespace, text) in write order."""
    if args.pairs:
        from memctl.evaluation import load_pairs

        out: list[tuple[str, str]] = []
        for f in args.pairs:
            for p in load_pairs(f):
                ns = str(p["namespace"]).strip("/") or "domain_facts/eval"
                out += [(ns, str(p["existing"])), (ns, str(p["incoming"]))]
        return out
    from memctl.bench_corpus import make_corpus

    texts = make_corpus(args.corpus)
    return [(f"user_profile/u{i % args.users}", t) for i, t in enumerate(texts)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings

    writes = _writes(args)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "views.sqlite"
        lat: list[float] = []
        with MemoryManager.from_settings(MemorySettings(path=str(path))) as mm:
            mm.remember("warm up the models", "scratch/warmup", now=NOW)
            for ns, text in writes:
                t = time.perf_counter()
                mm.remember(text, ns, now=NOW)
                lat.append((time.perf_counter() - t) * 1000)
            mm.forget_user("warmup", now=NOW)
            memories = sum(n for ns, n in mm.service.backend.namespaces() if ns[0] != "scratch")
        con = sqlite3.connect(str(path))
        try:
            tables = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                 "AND name LIKE 'judge_view%' AND name NOT LIKE '%migrations'")]
            rows = {t: int(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in tables}
        finally:
            con.close()
        sizes = view_bytes(path)
    lat.sort()
    total = sum(sizes.values())
    return {
        "writes": len(writes), "memories": memories, "rows": rows, "bytes": sizes, "total_bytes": total,
        "bytes_per_memory": round(total / max(memories, 1)),
        "write_p50_ms": round(statistics.median(lat), 2), "write_p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", action="append", help="JSONL of dedupe pairs (repeatable)")
    ap.add_argument("--corpus", type=int, default=600, help="generated memories when no --pairs")
    ap.add_argument("--users", type=int, default=2)
    print(json.dumps(run(ap.parse_args()), indent=2))


if __name__ == "__main__":
    main()
