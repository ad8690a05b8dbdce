"""The judge's stored view vectors for a bench store loaded in bulk (:mod:`memctl.bench_handoff`).

The handoff bench loads its corpus with ``backend.upsert`` (100k memories through ``remember``
would take hours). A store written by the Supervisor holds, beside each memory, the judge's view
vectors its own write computed (:mod:`memory.policy.view_cache`); a bulk-loaded one does not.
So that the bench measures the store the Supervisor actually leaves behind, the memories of the
namespaces the measured handoffs write into get their views as ``remember`` would have stored
them: computed by **another process** (the writers of those memories, in real life), so the
measuring process starts with none of them in memory, and cached on disk between runs (a file
per corpus size, model versions and judge source). The other namespaces never meet the judge in
the bench and get none.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from memory.namespace import Namespace, ns_key

_SOURCES = ("judge.py", "align.py", "reading.py", "view_cache.py", "view_store.py")


def _fingerprint(paraphrase_model: str | None) -> str:
    """Model versions and the judge's view code: a change makes a new cache file."""
    import memory.policy as pol
    from memory.policy.judge import JUDGE_EMBEDDING_MODEL
    from memory.policy.view_cache import model_tag

    h = hashlib.blake2b(digest_size=8)
    for m in (JUDGE_EMBEDDING_MODEL, paraphrase_model):
        h.update(str(model_tag(m) if m else None).encode())
    for name in _SOURCES:
        h.update((Path(pol.__file__).parent / name).read_bytes())
    return h.hexdigest()


def _compute(path: str, groups: list[tuple[Namespace, list[str]]], paraphrase_model: str | None) -> int:
    """In a child process: the views of every text, stored under its namespace in ``path``."""
    from memory.policy.judge import PairJudge
    from memory.policy.paraphrase import get_paraphrase_scorer
    from memory.policy.view_cache import JudgeViews, ViewStore

    store = ViewStore(path)
    views = JudgeViews(PairJudge(paraphrase=get_paraphrase_scorer(paraphrase_model)), store)
    for ns, texts in groups:
        for i in range(0, len(texts), 128):
            views.prime(ns, texts[i: i + 128])
    n = store.count()
    store.close()
    return n


def load_views(store_path: str, groups: Sequence[tuple[Namespace, list[str]]], cache_dir: Path, tag: str,
               paraphrase_model: str | None, progress: Callable[[str, int, int], None] | None = None) -> int:
    """Copy the views of ``groups`` (namespace, texts) into the store at ``store_path``; compute
    them in a child process first when ``cache_dir`` has none for ``tag``. Returns owner rows (memory texts) copied."""
    from memory.policy.view_cache import ViewStore

    cache = cache_dir / f"judge-views-{tag}-{_fingerprint(paraphrase_model)}.sqlite"
    if not cache.is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        if progress:
            progress("judge views", 0, 1)
        job = tmp.with_suffix(".json")
        job.write_text(json.dumps({"path": str(tmp), "paraphrase_model": paraphrase_model,
                                   "groups": [[list(ns), list(t)] for ns, t in groups]}), encoding="utf-8")
        try:  # a fresh interpreter: nothing of it stays in this process's caches
            subprocess.run([sys.executable, "-m", "memctl.bench_views", str(job)], check=True)
        finally:
            job.unlink(missing_ok=True)
        tmp.replace(cache)
        if progress:
            progress("judge views", 1, 1)
    target = ViewStore(store_path)
    try:
        target.count()  # creates the table through its migrations
    finally:
        target.close()
    conn = sqlite3.connect(store_path, isolation_level=None)
    try:
        conn.execute("ATTACH DATABASE ? AS src", (str(cache),))
        keys = [ns_key(ns) for ns, _ in groups]
        marks = ",".join("?" * len(keys))
        conn.execute("BEGIN")
        # The namespaces' rows are replaced, not merged: blocks are renumbered on the way in
        # (the store may hold blocks of its own), so keys are re-pointed to the new ids.
        for t in ("judge_view_blocks", "judge_view_keys", "judge_view_owners"):
            conn.execute(f"DELETE FROM {t} WHERE ns IN ({marks})", keys)
        new_id: dict[int, int] = {}
        for bid, nsk, data in conn.execute(f"SELECT id, ns, data FROM src.judge_view_blocks WHERE ns IN ({marks})",
                                           keys).fetchall():
            new_id[int(bid)] = conn.execute("INSERT INTO judge_view_blocks (ns, data) VALUES (?, ?) RETURNING id",
                                            (nsk, data)).fetchone()[0]
        rows = conn.execute(f"SELECT ns, key, block FROM src.judge_view_keys WHERE ns IN ({marks})", keys).fetchall()
        conn.executemany("INSERT INTO judge_view_keys (ns, key, block) VALUES (?, ?, ?)",
                         [(nsk, k, new_id[int(b)]) for nsk, k, b in rows if int(b) in new_id])
        n = conn.execute(f"INSERT INTO judge_view_owners (ns, owner, keys) SELECT ns, owner, keys "
                         f"FROM src.judge_view_owners WHERE ns IN ({marks})", keys).rowcount
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE src")
    finally:
        conn.close()
    return n


if __name__ == "__main__":  # the child of load_views: python -m memctl.bench_views JOB.json
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    _compute(spec["path"], [(tuple(ns), t) for ns, t in spec["groups"]], spec["paraphrase_model"])
