"""``memctl migrate --from sqlite:PATH --to qdrant:URL_OR_PATH`` (and back).

Records are copied with their stored vectors (``get_vectors``), so nothing is re-embedded and
the destination ranks exactly like the source. The copy is resumable: a record already in the
destination with the same ``updated_at`` is skipped, so re-running after an interruption copies
only what is missing. At the end the per-namespace counts of both stores are compared; a
mismatch is reported (and ``memctl`` exits 1).

Specs: ``sqlite:PATH``; ``qdrant:http(s)://HOST:PORT`` (API key, collection prefix and timeout
from ``MEMORY_QDRANT__*`` settings) or ``qdrant:DIR`` (local mode on disk). The embedding model
and dimension are read from the source store. Run it while nothing writes to the source.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from memory.errors import (InvalidInput, MemoryBackendError, MemoryLayerError, NotFound, SchemaMismatch, StoreCorrupt,
                           StoreReadOnly)

if TYPE_CHECKING:  # imported where used: memctl registers this command even for `memctl --help`
    from memory.backend import MemoryBackend
    from memory.records import MemoryRecord
    from memory.settings import MemorySettings

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class StoreSpec:
    kind: Literal["sqlite", "qdrant"]
    target: str

    @property
    def is_url(self) -> bool:
        return self.target.startswith(("http://", "https://"))

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"


def parse_spec(spec: str) -> StoreSpec:
    """``sqlite:PATH`` or ``qdrant:URL_OR_PATH``.

    Raises:
        InvalidInput: anything else, with the accepted forms named.
    """
    kind, sep, target = spec.partition(":")
    if kind not in ("sqlite", "qdrant") or not sep or not target.strip() or target == ":memory:":
        raise InvalidInput(
            f"bad store {spec!r}: use sqlite:PATH, qdrant:http://HOST:6333 or qdrant:DIR "
            "(in-memory stores cannot be migrated)"
        )
    return StoreSpec(kind, target)  # type: ignore[arg-type]


def _sqlite_identity(path: str) -> tuple[str, int]:
    if not Path(path).expanduser().is_file():
        raise InvalidInput(f"no SQLite store at {path!r}")
    uri = Path(path).expanduser().resolve().as_uri() + "?mode=ro"
    try:
        with sqlite3.connect(uri, uri=True) as conn:
            rows = dict(conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')").fetchall())
    except sqlite3.Error as exc:
        raise MemoryBackendError(f"{path!r} is not a memory store: {exc}") from exc
    if len(rows) != 2:
        raise MemoryBackendError(f"{path!r} does not record its embedding model; is it a memory store?")
    return str(rows["embedding_model"]), int(rows["embedding_dim"])


def _qdrant_client(spec: StoreSpec, settings: MemorySettings) -> Any:
    import math

    from qdrant_client import QdrantClient

    qs = settings.qdrant
    if spec.is_url:
        return QdrantClient(url=spec.target, api_key=qs.api_key.get_secret_value() if qs.api_key else None,
                            timeout=math.ceil(qs.timeout_s), check_compatibility=False)
    if not Path(spec.target).expanduser().is_dir():
        raise InvalidInput(f"no Qdrant local store at {spec.target!r}")
    return QdrantClient(path=str(Path(spec.target).expanduser()))


def _qdrant_identity(spec: StoreSpec, settings: MemorySettings, model: str | None) -> tuple[str, int]:
    from memory.backends.qdrant import QdrantBackend, list_collections

    # QdrantBackend translates driver errors; borrow its translation for this one look-up.
    try:
        client = _qdrant_client(spec, settings)
    except RuntimeError as exc:
        raise MemoryBackendError(f"cannot open {spec}: {exc}") from exc
    try:
        probe = QdrantBackend(client, embedding_model="probe", dim=1, connect=False)
        with probe._translate("listing collections"):
            found = list_collections(client, settings.qdrant.collection_prefix)
    finally:
        client.close()
    if model is not None:
        found = [f for f in found if f[1] == model]
    if len(found) != 1:
        names = ", ".join(f"{m} (dim {d})" for _, m, d in found) or "none"
        raise InvalidInput(
            f"{spec} holds {len(found)} memory collections under prefix "
            f"{settings.qdrant.collection_prefix!r} ({names}); name one with --model"
        )
    return found[0][1], found[0][2]


def open_store(spec: StoreSpec, embedding_model: str, dim: int, settings: MemorySettings) -> MemoryBackend:
    """A backend on ``spec`` for this model (a Qdrant collection is created if missing)."""
    if spec.kind == "sqlite":
        from memory.backends.sqlite import SqliteBackend

        return SqliteBackend(spec.target, embedding_model=embedding_model, dim=dim)
    from memory.backends.qdrant import QdrantBackend

    qs = settings.qdrant
    return QdrantBackend(
        embedding_model=embedding_model, dim=dim,
        url=spec.target if spec.is_url else None,
        api_key=qs.api_key.get_secret_value() if (qs.api_key and spec.is_url) else None,
        path=None if spec.is_url else spec.target,
        collection_prefix=qs.collection_prefix, timeout_s=qs.timeout_s,
    )


def _open_named(spec: StoreSpec, role: str, flag: str, embedding_model: str, dim: int,
                settings: MemorySettings) -> MemoryBackend:
    """:func:`open_store`, with a store the backend refuses for good (newer version, another
    model) named as the source or the destination; the backend's own remedy names MEMORY_PATH."""
    try:
        return open_store(spec, embedding_model, dim, settings)
    except SchemaMismatch as exc:
        text = str(exc)
        if text.startswith("this store was written by a newer version"):  # sqlite_schema.check_not_newer
            why = text.removeprefix("this store ").split(" Upgrade langgraph-memory", 1)[0]
            raise SchemaMismatch(f"the {role} {spec} {why} Upgrade langgraph-memory, or give another {flag}"
                                 ) from None
        raise SchemaMismatch(f"the {role} {spec}: {text}") from None


def _pages(src: MemoryBackend, batch: int) -> Iterator[list[MemoryRecord]]:
    pages = getattr(src, "iter_records", None)
    if callable(pages):  # Qdrant: a cursor, each point read once
        yield from pages(batch)
        return
    offset = 0
    while True:  # SQLite: newest first by offset (cheap there); expired records too
        page = src.scroll(None, limit=batch, offset=offset, include_expired=True)  # type: ignore[call-arg]
        if not page:
            return
        yield page
        offset += len(page)


def migrate(src_spec: str, dst_spec: str, *, batch: int = 500, progress: Progress | None = None,
            embedding_model: str | None = None, settings: MemorySettings | None = None) -> dict[str, Any]:
    """Copy every record with its vector from one store to another; resumable; counts verified.

    Args:
        src_spec, dst_spec: ``sqlite:PATH`` / ``qdrant:URL_OR_PATH``.
        batch: records per read/write round.
        progress: called with (records processed, records in the source).
        embedding_model: which collection to read when a Qdrant source holds several.
        settings: for Qdrant's API key, collection prefix and timeout (default: loaded).

    Returns:
        A report: counts copied/skipped, per-store totals, mismatched namespaces, ``ok``.

    Raises:
        InvalidInput: bad specs, same store twice, missing source.
        MemoryBackendError: a store failed (re-run to resume).
    """
    if batch < 1:
        raise InvalidInput(f"batch must be >= 1, got {batch}")
    src_s, dst_s = parse_spec(src_spec), parse_spec(dst_spec)
    if src_s.kind == dst_s.kind and (src_s.target == dst_s.target or (
            not src_s.is_url and Path(src_s.target).expanduser().resolve()
            == Path(dst_s.target).expanduser().resolve())):
        raise InvalidInput("source and destination are the same store")
    if settings is None:
        from memory.settings import MemorySettings

        settings = MemorySettings.load()
    if src_s.kind == "sqlite":
        model, dim = _sqlite_identity(src_s.target)
        if embedding_model is not None and embedding_model != model:
            raise InvalidInput(f"{src_s} holds {model!r}, not {embedding_model!r}")
    else:
        model, dim = _qdrant_identity(src_s, settings, embedding_model)

    src = _open_named(src_s, "source", "--from", model, dim, settings)
    try:
        dst = _open_named(dst_s, "destination", "--to", model, dim, settings)
    except BaseException:
        src.close()
        raise
    try:
        src_ns = dict(src.namespaces())  # expired records included, as they are copied too
        total = sum(src_ns.values())
        done = copied = skipped = 0
        if progress:
            progress(0, total)
        for page in _pages(src, batch):
            have = {r.id: r.updated_at for r in dst.get([r.id for r in page])}
            todo = [r for r in page if have.get(r.id) != r.updated_at]
            if todo:
                try:
                    vectors = src.get_vectors([r.id for r in todo])  # type: ignore[attr-defined]
                except NotFound as exc:  # deleted while we copied
                    raise MemoryBackendError(f"the source changed during the migration ({exc}); re-run") from exc
                dst.upsert(todo, vectors)
            copied += len(todo)
            skipped += len(page) - len(todo)
            done += len(page)
            if progress:
                progress(done, total)
        dst_ns = dict(dst.namespaces())
        mismatched = {"/".join(ns): {"source": n, "destination": dst_ns.get(ns, 0)}
                      for ns, n in sorted(src_ns.items()) if dst_ns.get(ns, 0) != n}
        return {
            "from": str(src_s), "to": str(dst_s), "embedding_model": model, "dim": dim,
            "source_count": total, "read": done, "copied": copied, "skipped": skipped,
            "destination_count": sum(dst_ns.get(ns, 0) for ns in src_ns),
            "destination_total": sum(dst_ns.values()),
            "mismatched_namespaces": mismatched, "ok": not mismatched and done == total,
        }
    finally:
        src.close()
        dst.close()


# ---------------------------------------------------------------------- memctl
def migrate_command(
    from_: Annotated[str, typer.Option("--from", help="Source: sqlite:PATH or qdrant:URL_OR_PATH")],
    to: Annotated[str, typer.Option("--to", help="Destination: sqlite:PATH or qdrant:URL_OR_PATH")],
    model: Annotated[str | None, typer.Option("--model", help="Embedding model, if the source holds several")] = None,
    batch: Annotated[int, typer.Option(help="Records per round")] = 500,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print the report as JSON")] = False,
) -> None:
    """Copy a store to another backend with its vectors; resumable; verifies counts."""
    import json

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    try:
        if _load_settings is not None:
            settings = _load_settings()
        else:
            from memory.settings import MemorySettings

            settings = MemorySettings.load()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            task = bar.add_task("migrating", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            report = migrate(from_, to, batch=batch, progress=progress, embedding_model=model,
                             settings=settings)
    except InvalidInput as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except (SchemaMismatch, StoreCorrupt, StoreReadOnly) as exc:  # the same again on a re-run
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    except MemoryLayerError as exc:
        err.print(f"[red]error:[/red] {exc} (re-run the same command to resume)", highlight=False)
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        Console().print(
            f"{report['from']} -> {report['to']} ({report['embedding_model']}, dim {report['dim']}): "
            f"copied {report['copied']}, skipped {report['skipped']} already there; "
            f"source {report['source_count']}, destination {report['destination_count']}",
            highlight=False,
        )
    if not report["ok"]:
        err.print(f"[red]count mismatch:[/red] {report['mismatched_namespaces']}", highlight=False)
        raise typer.Exit(1)


_load_settings: Callable[[], MemorySettings] | None = None


def register(app: typer.Typer, load_settings: Callable[[], MemorySettings] | None = None) -> None:
    """Add ``migrate`` to a Typer app. ``load_settings`` lets memctl pass its ``--config``."""
    global _load_settings
    if load_settings is not None:
        _load_settings = load_settings
    app.command("migrate")(migrate_command)


__all__ = ["StoreSpec", "migrate", "migrate_command", "open_store", "parse_spec", "register"]
