"""Bulk import: JSON Lines files into a store, validated first, written batch by batch.

One memory per line::

    {"content": "prefers bar charts", "namespace": "user_profile/u7",
     "id": "optional", "metadata": {"type": "user_profile", "source": "crm"},
     "created_at": "2026-01-31T12:00:00Z", "ttl_days": 90}

Only ``content`` is required (``namespace`` may come from a default). Every line is parsed and
validated (:meth:`memory.service.MemoryService.build_record`) before anything is embedded or
written, and an error names the file and line; so a bad file writes nothing.

Writing (:func:`write_batches`): records are embedded and upserted ``batch_size`` at a time, one
transaction per batch, with a progress callback. Embedding is the slow part, so large imports
embed in worker processes, one per core (each loads the model from the per-machine cache,
:mod:`memory.use_direct`), while the parent writes the previous batch; ``memctl import`` starts
them (:func:`start_workers`) before it validates the file, so their start-up overlaps it. With
the packaged USE model, bulk writes embed through :mod:`memory.use_bulk` (per-token work cached:
~1.6x the texts per CPU second, same vectors up to float32 rounding). With ``dedupe`` a line
whose namespace already holds the same content (whitespace-normalised), in the store or earlier
in the file, is skipped.

Where the CPU of an import goes (``scripts/bulk_import_bench.py``; 20k bench-corpus lines, per
memory, ~0.85 ms in all): the model ~0.5 ms (tokenizing, word by word with a cache, ~0.04),
keyword terms ~0.03, SQLite + FTS5 inserts ~0.08 (a copy of the 100k store adds ~0.01: new rows
skip the keyword-row DELETE, which had made FTS5 write and merge more), validation ~0.02,
worker start-up (~0.7 s CPU per worker) and the vector-file catch-up (~0.3 s, now done after
each batch while the workers embed) the rest. Into a copy of the 1M store the catch-up used to
read the whole table (see :meth:`memory.backends.vector_file.VectorFile._changed_rows`); CPU per
memory is now the same as into an empty store (0.80-0.85 ms). Judge views are not computed here
(a memory gets them when it is first judged), nor PII redaction (bulk import writes the file as
given); the audit log gets one ``import`` event per file.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.errors import InvalidInput, MemoryLayerError
from memory.namespace import Namespace
from memory.records import MemoryRecord

if TYPE_CHECKING:
    from memory.embeddings import Embedder
    from memory.service import MemoryService, NewMemory

FIELDS = {"content", "namespace", "id", "metadata", "created_at", "ttl_days"}
Progress = Callable[[int, int], None] | None


@dataclass
class ImportReport:
    """What a bulk import did."""

    lines: int = 0
    written: int = 0
    skipped_duplicates: int = 0
    batches: int = 0
    seconds: float = 0.0
    ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        rate = round(self.written / self.seconds, 1) if self.seconds > 0 else None
        return {"lines": self.lines, "written": self.written, "skipped_duplicates": self.skipped_duplicates,
                "batches": self.batches, "seconds": round(self.seconds, 3), "memories_per_s": rate}


def _parse_time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: created_at must be an ISO 8601 string like '2026-01-31T12:00:00Z'")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{where}: created_at {value!r} is not an ISO 8601 date-time "
                           "(e.g. '2026-01-31T12:00:00Z')") from None


def read_jsonl(path: str | Path, default_namespace: str | None = None) -> Iterator[tuple[int, NewMemory]]:
    """(line number, item) for each non-blank line of a JSON Lines file.

    Raises:
        InvalidInput: the file cannot be read, or a line is not a valid memory (names the line).
    """
    from memory.service import NewMemory

    p = Path(path)
    try:
        fh = p.open("rb")  # decoded line by line, so that a bad byte's error names its line
    except FileNotFoundError:
        raise InvalidInput(f"{p} does not exist") from None
    except IsADirectoryError:
        raise InvalidInput(f"{p} is a folder; give a .jsonl file") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {p}: {exc.strerror}") from None
    with fh:
        for no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            where = f"{p.name} line {no}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInput(f"{where}: not UTF-8 text (bad byte at column {exc.start + 1}); save the file "
                                   "as UTF-8; nothing was imported") from None
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                                   "nothing was imported") from None
            except ValueError:  # Python refuses integers of more than 4300 digits
                raise InvalidInput(f"{where}: a number has too many digits; write it as a string or drop it; "
                                   "nothing was imported") from None
            except RecursionError:
                raise InvalidInput(f"{where}: JSON nested too deeply; flatten the metadata; "
                                   "nothing was imported") from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{where}: expected a JSON object like "
                                   '{"content": "...", "namespace": "user_profile/u1"}') from None
            unknown = set(obj) - FIELDS
            if unknown:
                raise InvalidInput(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(FIELDS)} "
                                   "(put your own fields inside metadata)")
            ns = obj.get("namespace", default_namespace)
            if ns is None:
                raise InvalidInput(f"{where}: no namespace; add \"namespace\" to the line or pass --ns")
            ttl = obj.get("ttl_days")
            created = _parse_time(obj["created_at"], where) if obj.get("created_at") is not None else None
            rid = obj.get("id")
            if rid is not None and (not isinstance(rid, str) or not rid.strip()):
                raise InvalidInput(f"{where}: id must be a non-empty string")
            yield no, NewMemory(obj.get("content"), ns, obj.get("metadata"), id=rid, created_at=created,
                                ttl_days=ttl)


def validate_jsonl(svc: MemoryService, path: str | Path, default_namespace: str | None = None,
                   now: datetime | None = None) -> list[MemoryRecord]:
    """Every line as a validated record; the first bad line raises, naming it (nothing written)."""
    from memory.records import utcnow

    now = now or utcnow()
    out: list[MemoryRecord] = []
    seen: dict[str, int] = {}
    for no, item in read_jsonl(path, default_namespace):
        try:
            rec = svc.build_record(item, now)
        except InvalidInput as exc:
            raise type(exc)(f"{Path(path).name} line {no}: {exc}; nothing was imported") from None
        if item.id is not None:
            if rec.id in seen:
                raise InvalidInput(f"{Path(path).name} line {no}: id {rec.id!r} already used on line {seen[rec.id]}")
            seen[rec.id] = no
        out.append(rec)
    # An explicit id may replace a memory of its own namespace only (as in write_many): the
    # upsert would otherwise move another namespace's memory, i.e. overwrite it.
    if seen:
        ns_of = {r.id: r.namespace for r in out if r.id in seen}
        ids = list(ns_of)
        for i in range(0, len(ids), 500):
            for old in svc.backend.get(ids[i : i + 500]):
                if old.namespace != ns_of[old.id]:
                    raise InvalidInput(
                        f"{Path(path).name} line {seen[old.id]}: id {old.id!r} is already used by a memory in "
                        "another namespace; nothing was imported. Omit the id (a new one is generated) or "
                        "choose another one")
    return out


def _norm(text: str) -> str:
    return " ".join(text.split())


def drop_duplicates(svc: MemoryService, records: Sequence[MemoryRecord]) -> tuple[list[MemoryRecord], int]:
    """Records whose namespace does not already hold the same content (in the store or earlier)."""
    by_ns: dict[Namespace, set[str]] = {}
    contents = getattr(svc.backend, "contents", None)  # SQLite: the texts alone, no records built
    for ns in {r.namespace for r in records}:
        have: set[str] = set()
        if callable(contents):
            have = {_norm(c) for c in contents(ns)}
        elif svc.backend.count(ns):
            for rec in svc.backend.scroll(ns, limit=10**12):
                if rec.namespace == ns:
                    have.add(_norm(rec.content))
        by_ns[ns] = have
    kept: list[MemoryRecord] = []
    for r in records:
        key = _norm(r.content)
        if key in by_ns[r.namespace]:
            continue
        by_ns[r.namespace].add(key)
        kept.append(r)
    return kept, len(records) - len(kept)


# ---------------------------------------------------------------------------- embedding workers
_worker_svc: Any = None
_bulk_use: Any = None  # this process's BulkUSE (its token cache fills as batches go by)


def bulk_embedder(svc: MemoryService) -> Embedder:
    """What bulk writes embed with: the packaged USE model's cached forward pass
    (:mod:`memory.use_bulk`, same vectors up to float32 rounding) when ``svc`` embeds with that
    model by name, else ``svc``'s own embedder (a custom object cannot be swapped for another)."""
    global _bulk_use
    from memory.embeddings import USE_MODEL

    if svc.embedder.name != USE_MODEL or svc.settings.embedding.model != USE_MODEL:
        return svc.embedder
    if _bulk_use is None:
        from memory.use_bulk import BulkUSE

        _bulk_use = BulkUSE()
    return _bulk_use  # type: ignore[no-any-return]


def _worker_init(model: str, context_weight: float) -> None:
    global _worker_svc
    from memory.embeddings import get_embedder
    from memory.service import MemoryService
    from memory.settings import EmbeddingSettings, MemorySettings

    class _NoBackend:  # embed_records needs only the embedder and the settings
        pass

    _worker_svc = MemoryService(_NoBackend(), get_embedder(model),  # type: ignore[arg-type]
                                MemorySettings(path=":memory:", context_weight=context_weight,
                                               embedding=EmbeddingSettings(model=model)))
    emb = bulk_embedder(_worker_svc)
    if hasattr(emb, "load"):
        emb.load()  # now, while the parent is still validating the file


def _worker_ready() -> int:
    return os.getpid()


def _worker_embed(texts: tuple[list[str], list[object]]) -> np.ndarray:
    """Vectors for (contents, contexts): what embed_records reads of each record, not the records
    (pickled there and back they cost ~0.45 s of CPU per 20k memories)."""
    return _worker_svc._embed_texts(texts[0], texts[1], bulk_embedder(_worker_svc))  # type: ignore[no-any-return]


def _texts(batch: Sequence[MemoryRecord]) -> tuple[list[str], list[object]]:
    return [r.content for r in batch], [r.metadata.extra.get("context") for r in batch]


@dataclass
class EmbedWorkers:
    """Embedding worker processes (:func:`start_workers`); close with :meth:`close` or ``with``."""

    pool: Executor
    n: int

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)

    def __enter__(self) -> EmbedWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_workers(svc: MemoryService, workers: int | None, batches: int) -> EmbedWorkers | None:
    """Worker processes that embed like ``svc`` does, started now, or None (embed in this process).

    Started before the file is validated (:func:`count_lines` gives ``batches``): spawning a
    worker and loading its model took ~3-4 s of a 20k-line import, and it overlaps the parent's
    validation and dedupe scan this way. None for a single batch (a worker would only add its
    start-up) and for a custom embedder object (it cannot be rebuilt by name in a worker).
    """
    n = min(workers or os.cpu_count() or 1, batches)
    name = svc.embedder.name
    if n <= 1 or batches <= 1 or svc.settings.embedding.model != name:
        return None
    import multiprocessing as mp

    pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"),
                               initializer=_worker_init, initargs=(name, svc.settings.context_weight))
    for _ in range(n):
        pool.submit(_worker_ready)  # spawns each process (and runs its initializer) now
    return EmbedWorkers(pool, n)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the body (for a process doing one bulk import).

    Building 20k validated records set off 3 full collections that walked every object of the
    process, the records included (0.6-1.1 s wall at load ~7 in a 20k-line import; 0.07 s with
    the collector off until the import ends); an import makes no reference cycles worth
    collecting on the way. Restored on exit (left off if it was off).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def count_lines(path: str | Path) -> int:
    """Lines in a file (an upper bound on its memories), counted without parsing them."""
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) + 1
    except OSError:
        return 0  # read_jsonl reports it


def write_batches(svc: MemoryService, records: Sequence[MemoryRecord], *, batch_size: int = 2000,
                  workers: int | None = None, progress: Progress = None,
                  pool: EmbedWorkers | None = None) -> int:
    """Embed and upsert ``records`` in batches (one transaction each); returns batches written.

    With several workers, batches are embedded in worker processes ahead of the writes (at most
    ``workers + 1`` batches in flight), so embedding uses every core and the parent writes.
    ``pool``: workers already started (:func:`start_workers`; the caller closes them), else
    started here for ``workers`` (default: one per core).
    """
    if batch_size < 1:
        raise InvalidInput(f"batch_size must be >= 1, got {batch_size}")
    batches = [list(records[i : i + batch_size]) for i in range(0, len(records), batch_size)]
    if not batches:
        return 0
    own = pool is None and len(batches) > 1
    if own:
        pool = start_workers(svc, workers, len(batches))
    done = 0
    flush = getattr(svc.backend, "flush_vectors", None)
    try:
        pending: list[Future[np.ndarray]] = []
        ahead = pool.n + 1 if pool is not None else 0
        if pool is not None:
            for b in batches[:ahead]:
                pending.append(pool.pool.submit(_worker_embed, _texts(b)))
        embed_here = bulk_embedder(svc) if pool is None else None
        for i, batch in enumerate(batches):
            if pool is not None:
                vecs = pending[i].result()
                nxt = i + ahead
                if nxt < len(batches):
                    pending.append(pool.pool.submit(_worker_embed, _texts(batches[nxt])))
            else:
                vecs = svc.embed_records(batch, embed_here)
            svc.backend.upsert(batch, vecs)
            done += len(batch)
            if progress:
                progress(done, len(records))
            if flush is not None and pool is not None and i + 1 < len(batches):
                # The vector file takes this batch's rows now, while the workers embed the
                # next ones, instead of all of them at the end (0.3-0.4 s CPU for 20k rows,
                # in which the workers had nothing left to do).
                flush(basis=False)
    except MemoryLayerError:
        raise
    except Exception as exc:  # a worker died (out of memory, killed): say what was written
        raise InvalidInput(f"bulk import stopped after {done} of {len(records)} memories were written "
                           f"(whole batches of {batch_size}): {exc}") from exc
    finally:
        if own and pool is not None:
            pool.close()
    if flush is not None:
        flush()  # so the next process to open the store does not copy the new rows itself
    return len(batches)


__all__ = ["EmbedWorkers", "ImportReport", "bulk_embedder", "count_lines", "drop_duplicates", "paused_gc", "read_jsonl",
           "start_workers", "validate_jsonl", "write_batches"]
