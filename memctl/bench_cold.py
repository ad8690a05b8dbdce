"""``memctl bench --cold``: process start -> first result, and the memory it takes, per store size.

Each measurement is a fresh process, the way a CLI call, a server worker or an MCP client
starts: ``memctl search QUERY --ns user_profile/u7`` (scoped) and ``memctl search QUERY``
(unscoped: every namespace), wall time from spawn to exit and the child's peak RSS (from
``wait4``). ``memctl --help`` is timed the same way. LangGraph's ``SqliteStore`` + sqlite-vec
gets the same two searches in a fresh process over a store holding the same memories (same
vectors, same embedder for the query).

The stores are generated: the bench corpus (seeded zh/en memory-like sentences, embedded once
and cached) spread over ``users`` users x 3 kinds. Sizes above the embedded corpus reuse its
vectors with small Gaussian noise (sigma 0.02, renormalised) and its texts with a ``#k`` suffix,
so a 1M store builds in minutes instead of embedding a million texts; the JSON says so.
Stores are built once per size and kept in the cache directory (``--rebuild`` to start over).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memctl.bench_corpus import embed_corpus, make_corpus
from memory.embeddings import Embedder

KINDS = ("user_profile", "domain_facts", "task_traces")
BASE_CORPUS = 100_000  # texts actually embedded; larger stores reuse them with noise
NOISE = 0.02
LANGGRAPH_MAX = 200_000  # SqliteStore + sqlite-vec loads ~1-2k rows/s here: 1M would take hours
Progress = Callable[[str, int, int], None] | None


def users_for(n: int) -> int:
    """50 users at 100k (the issue's store), 1,000 at 1M: ~700-2,000 memories per namespace."""
    return max(1, min(1000, n // 2000)) if n < 1_000_000 else 1000


def corpus_rows(emb: Embedder, n: int, cache_dir: Path | None, progress: Progress = None
                ) -> tuple[list[str], np.ndarray, bool]:
    """(texts, vectors, reused): ``n`` rows; beyond BASE_CORPUS the base rows come back with noise."""
    base_n = min(n, BASE_CORPUS)
    texts = make_corpus(base_n)
    vecs = embed_corpus(emb, texts, cache_dir, (lambda d, t: progress("embed", d, t)) if progress else None)
    if n <= base_n:
        return texts, vecs, False
    rng = np.random.default_rng(13)
    reps = -(-n // base_n)
    out_t = [t if k == 0 else f"{t} #{k}" for k in range(reps) for t in texts][:n]
    out_v = np.concatenate([vecs] + [vecs + rng.normal(0, NOISE, vecs.shape).astype(np.float32)
                                     for _ in range(reps - 1)])[:n]
    out_v /= np.linalg.norm(out_v, axis=1, keepdims=True)
    return out_t, out_v.astype(np.float32), True


def namespace_of(i: int, users: int) -> tuple[str, str]:
    return KINDS[i % len(KINDS)], f"u{(i // len(KINDS)) % users}"


def build_ours(path: Path, texts: list[str], vecs: np.ndarray, users: int, model: str,
               progress: Progress = None, batch: int = 5000) -> dict[str, float]:
    """Our store through the backend's bulk path (upsert of given vectors, one transaction per batch)."""
    from memory.backends.sqlite import SqliteBackend
    from memory.records import MemoryRecord

    n = len(texts)
    t0 = time.perf_counter()
    with SqliteBackend(path, embedding_model=model, dim=vecs.shape[1]) as b:
        for i in range(0, n, batch):
            recs = [MemoryRecord(id=f"m{j}", namespace=namespace_of(j, users), content=texts[j])
                    for j in range(i, min(n, i + batch))]
            b.upsert(recs, vecs[i : i + len(recs)])
            if progress:
                progress(f"build ours {n}", min(n, i + batch), n)
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        b.flush_vectors()  # the vector file beside it, so the first reader does not build it
        side_s = time.perf_counter() - t1
    return {"rows": n, "load_s": round(load_s, 2), "rows_per_s": round(n / load_s), "vector_file_s": round(side_s, 2)}


def build_langgraph(path: Path, texts: list[str], vecs: np.ndarray, users: int, progress: Progress = None
                    ) -> dict[str, float] | None:
    """LangGraph SqliteStore + sqlite-vec with the same memories and vectors (None: not installed)."""
    try:
        import pysqlite3.dbapi2 as sqlite3_ext  # type: ignore[import-not-found]
        from langgraph.store.base import PutOp
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        return None
    known = {json.dumps({"text": t}, ensure_ascii=False): v for t, v in zip(texts, vecs, strict=True)}
    known.update({json.dumps({"text": t}): v for t, v in zip(texts, vecs, strict=True)})

    def embed(batch: list[str]) -> list[list[float]]:
        return [known[t].tolist() for t in batch]

    n = len(texts)
    t0 = time.perf_counter()
    conn = sqlite3_ext.connect(str(path), check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn, index={"dims": vecs.shape[1], "embed": embed, "fields": ["text"]})
    store.setup()
    for i in range(0, n, 2000):
        store.batch([PutOp(namespace_of(j, users), f"m{j}", {"text": texts[j]}) for j in range(i, min(n, i + 2000))])
        if progress:
            progress(f"build langgraph {n}", min(n, i + 2000), n)
    conn.close()
    return {"rows": n, "load_s": round(time.perf_counter() - t0, 2)}


_LG_SEARCH = """
import sys, time
t0 = time.perf_counter()
import pysqlite3.dbapi2 as sqlite3_ext
from langgraph.store.sqlite import SqliteStore
from memory.embeddings import get_embedder
emb = get_embedder(sys.argv[2])
conn = sqlite3_ext.connect(sys.argv[1], check_same_thread=False, isolation_level=None)
store = SqliteStore(conn, index={"dims": emb.dim, "embed": lambda b: [emb.embed_query(t).tolist() for t in b],
                                 "fields": ["text"]})
ns = tuple(sys.argv[4].split("/")) if len(sys.argv) > 4 else ()
hits = store.search(ns, query=sys.argv[3], limit=10)
print(len(hits))
"""


_WRAP = """
import os, resource, sys, time
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t
sys.stderr.write(f"\\n@@cold {wall:.6f} {ru.ru_maxrss / 1024:.3f} {os.waitstatus_to_exitcode(status)}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of ``cmd`` in a fresh process (fork+exec+wait4 in a small wrapper)."""
    p = subprocess.run([sys.executable, "-c", _WRAP, *cmd], env=env, capture_output=True, text=True, timeout=900)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("@@cold ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed: {p.stderr.strip()[-800:]}")
    _, wall, rss, _code = line[-1].split()
    return float(wall), float(rss)


def _memctl() -> list[str]:
    exe = shutil.which("memctl", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "memctl.cli"]


def warm_figures(store: Path, queries: int, env: dict[str, str]) -> dict[str, Any]:
    """:mod:`memctl.bench_warm` on ``store`` in a fresh process (its RSS is the store's alone)."""
    p = subprocess.run([sys.executable, "-m", "memctl.bench_warm", str(store), "--queries", str(queries),
                        "--unscoped-queries", str(queries)], env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"memctl.bench_warm failed: {p.stderr.strip()[-800:]}")
    out: dict[str, Any] = json.loads(p.stdout)
    out.pop("store", None)
    return out


def run_cold(sizes: tuple[int, ...], *, runs: int = 3, model: str, emb: Embedder, cache_dir: Path,
             langgraph: bool = True, rebuild: bool = False, progress: Progress = None,
             warm_queries: int = 0) -> dict[str, Any]:
    """Cold figures per size (median of ``runs`` fresh processes each); see the module docstring.

    With ``warm_queries``, also each store's warm figures (:mod:`memctl.bench_warm`) under ``warm``.
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MEMORY_EMBEDDING__MODEL": model}
    env.pop("MEMORY_CONFIG", None)
    query = "which chart style does the user prefer"
    results: list[dict[str, Any]] = []
    help_runs = [timed([*_memctl(), "--help"], env) for _ in range(runs)]
    for n in sizes:
        users = users_for(n)
        d = cache_dir / f"cold-{n}"
        if rebuild and d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True, exist_ok=True)
        ours, lg = d / "memory.sqlite", d / "langgraph.sqlite"
        info: dict[str, Any] = {"n": n, "users": users, "kinds": len(KINDS)}
        built = d / "built.json"
        if not built.is_file():
            texts, vecs, reused = corpus_rows(emb, n, cache_dir, progress)
            for p in d.iterdir():
                p.unlink()
            meta = {"ours": build_ours(ours, texts, vecs, users, model, progress), "reused_vectors_with_noise": reused}
            if langgraph and n <= LANGGRAPH_MAX:
                meta["langgraph"] = build_langgraph(lg, texts, vecs, users, progress)
            built.write_text(json.dumps(meta))
            del texts, vecs
        meta = json.loads(built.read_text())
        info["build"] = meta
        senv = {**env, "MEMORY_PATH": str(ours)}
        scoped_ns = f"{KINDS[0]}/u{min(7, users - 1)}"
        ours_cmd = [*_memctl(), "search", query]
        every = [x for k in KINDS for x in ("--ns", k)]  # every namespace of the store
        for label, cmd in (("scoped", [*ours_cmd, "--ns", scoped_ns]), ("unscoped", [*ours_cmd, *every])):
            xs = [timed(cmd, senv) for _ in range(runs)]
            info[f"ours_{label}_s"] = round(statistics.median(x[0] for x in xs), 3)
            info[f"ours_{label}_rss_mb"] = round(statistics.median(x[1] for x in xs), 1)
        if langgraph and meta.get("langgraph") and lg.is_file():
            for label, extra in (("scoped", [scoped_ns]), ("unscoped", [])):
                cmd = [sys.executable, "-c", _LG_SEARCH, str(lg), model, query, *extra]
                xs = [timed(cmd, env) for _ in range(runs)]
                info[f"langgraph_{label}_s"] = round(statistics.median(x[0] for x in xs), 3)
                info[f"langgraph_{label}_rss_mb"] = round(statistics.median(x[1] for x in xs), 1)
        if langgraph and n > LANGGRAPH_MAX:
            info["langgraph_skipped"] = f"not built above {LANGGRAPH_MAX} rows (load time)"
        if warm_queries:
            info["warm"] = warm_figures(ours, warm_queries, senv)
        results.append(info)
        if progress:
            progress("cold sizes", len(results), len(sizes))
    return {
        "help_s": round(statistics.median(x[0] for x in help_runs), 3),
        "help_rss_mb": round(statistics.median(x[1] for x in help_runs), 1),
        "results": results,
        "config": {"sizes": list(sizes), "runs": runs, "warm_queries": warm_queries, "embedding_model": model,
                   "query": query,
                   "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()},
    }


def plot_cold(result: dict[str, Any], path: Path) -> Any:
    """Cold first-search time against store size, ours vs LangGraph, scoped and unscoped."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    rows = sorted(result["results"], key=lambda r: r["n"])
    for sysname, style in (("ours", "-"), ("langgraph", "--")):
        for label, marker in (("scoped", "o"), ("unscoped", "x")):
            pts = [(r["n"], r[f"{sysname}_{label}_s"]) for r in rows if f"{sysname}_{label}_s" in r]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=style, marker=marker,
                        label=f"{sysname} {label}")
    ax.axhline(result["help_s"], color="grey", linewidth=0.8, label="memctl --help")
    ax.set_xscale("log")
    ax.set_xlabel("memories in the store")
    ax.set_ylabel("process start -> first result, s")
    ax.set_title(f"Cold search (median of {result['config']['runs']} fresh processes)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return fig
