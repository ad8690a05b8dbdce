"""What a consolidation pass costs per 1,000 memories, cold (e5 encodes every text) and again with
the e5 vectors already in the judge-view store (a re-run after the watermarks are reset, or a
neighbour that was encoded by an earlier pass).

    OMP_NUM_THREADS=1 python scripts/consolidate_cost.py N_MEMORIES [STORE.sqlite]

Writes N memories through the real write path (``MemoryManager.remember``, file store): the
``existing`` and ``incoming`` texts of the corpus's pairs (tests/data/dedupe_corpus, fit kinds only),
one namespace per author and kind (~10-25 memories each, like one user's profile), then runs
``consolidate()`` twice: cold, and after clearing the watermarks (every memory examined again, the
e5 vectors read from the store). Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memctl import tune_judge as tj  # noqa: E402
from memory import MemorySettings  # noqa: E402
from memory.policy.manager import MemoryManager  # noqa: E402
from memory.records import utcnow  # noqa: E402


def main(argv: list[str]) -> None:
    n = int(argv[0])
    path = argv[1] if len(argv) > 1 else str(Path(tempfile.mkdtemp()) / "cost.sqlite")
    split = json.loads((tj.CORPUS / "split.json").read_text(encoding="utf-8"))
    pairs = [p for p in tj.load_corpus() if p["source"] == "corpus" and p["kind"] in split["fit"]]
    mm = MemoryManager.from_settings(MemorySettings(path=path))
    t0 = utcnow() - timedelta(days=30)
    written, k = 0, 0
    t = time.perf_counter()
    while written < n and k < len(pairs):
        p = pairs[k]
        ns = (p["kind"], f"{p['author']}")
        for j, text in enumerate((p["existing"], p["incoming"])):
            mm.remember(text, ns, now=t0 + timedelta(minutes=2 * k + j))
            written += 1
        k += 1
    write_s = time.perf_counter() - t
    current = sum(c for _, c in mm.service.backend.namespaces())
    cold = mm.consolidate(now=t0 + timedelta(days=10))
    mm.consolidation_marks.forget({ns for ns, _ in mm.service.backend.namespaces()})
    mm.close()
    mm = MemoryManager.from_settings(MemorySettings(path=path))  # a fresh process cache: vectors from the store
    warm = mm.consolidate(now=t0 + timedelta(days=11))
    mm.close()
    per_k = 1000.0 / max(cold.memories_examined, 1)
    print(json.dumps({
        "memories_written": written, "write_seconds": round(write_s, 2), "current_after_writes": current,
        "cold": {**{k: v for k, v in cold.as_dict().items() if k not in ("actions", "namespaces")},
                 "seconds_per_1000_memories": round(cold.seconds * per_k, 1)},
        "rerun_cached_vectors": {
            **{k: v for k, v in warm.as_dict().items() if k not in ("actions", "namespaces")},
            "seconds_per_1000_memories": round(warm.seconds * 1000.0 / max(warm.memories_examined, 1), 1)},
        "namespaces": len(cold.namespaces),
    }, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
