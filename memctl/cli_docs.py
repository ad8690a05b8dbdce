"""``memctl collection add|list|remove``, ``memctl index``, ``memctl export``, ``memctl import``
and ``memctl eval collections``: memory that lives in Markdown files.

Collections index folders of notes (read-only, :mod:`memory.collections`); export/import turn a
namespace into a ``MEMORY.md`` a person can edit and import back, and the audit log into daily
notes (:mod:`memory.markdown_io`). Library imports happen inside the commands (see
:mod:`memctl.cli`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from memctl.cli_common import _errors, _manager, _print_json, _progress, _settings, err, eval_app, out
from memory.errors import InvalidInput

if TYPE_CHECKING:
    from memory.collections import Collections, IndexReport
    from memory.policy.manager import MemoryManager

collection_app = typer.Typer(help="Folders of Markdown notes, indexed read-only into namespace docs/NAME.",
                             no_args_is_help=True)


@contextlib.contextmanager
def _collections() -> Iterator[Collections]:
    from memory.collections import Collections

    with _manager() as mm:
        docs = Collections(mm.service, mm.audit)
        try:
            yield docs
        finally:
            docs.close()


def _print_reports(reports: list[IndexReport], as_json: bool) -> None:
    if as_json:
        _print_json([r.as_dict() for r in reports])
        return
    if not reports:
        out.print("no collections; add one with `memctl collection add NAME DIR`")
    for r in reports:
        out.print(f"{r.collection}: {r.files} files — {len(r.added)} added, {len(r.changed)} changed, "
                  f"{len(r.removed)} removed, {r.unchanged} unchanged; {r.chunks_written} chunks written, "
                  f"{r.chunks_deleted} deleted in {r.seconds:.2f} s", highlight=False, markup=False)
        for e in r.errors:
            out.print(f"  warning: {e}", highlight=False, markup=False)
        if r.files == 0 and not r.errors:
            out.print("  warning: no file matches the collection's glob; check it with `memctl collection list` "
                      "(remove and add the collection again with another --glob)", highlight=False, markup=False)


@collection_app.command("add")
@_errors
def collection_add(
    name: Annotated[str, typer.Argument(help="Collection name (its chunks live in namespace docs/NAME)")],
    directory: Annotated[Path, typer.Argument(help="Folder of Markdown files (read, never written)")],
    glob: Annotated[str, typer.Option("--glob", help="Which files, relative to the folder")] = "**/*.md",
    no_index: Annotated[bool, typer.Option("--no-index", help="Only register; index later with `memctl index`")]
    = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Register a folder of notes and index it."""
    with _collections() as docs:
        col = docs.add(name, directory, glob)
        reports = [] if no_index else docs.index(name)
    if as_json:
        _print_json({"collection": col.as_dict(), "index": [r.as_dict() for r in reports]})
        return
    out.print(f"collection {col.name}: {col.root} ({col.glob}) → namespace docs/{col.name}",
              highlight=False, markup=False)
    if reports:
        _print_reports(reports, False)


@collection_app.command("list")
@_errors
def collection_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The collections, their folders and what is indexed."""
    with _collections() as docs:
        cols = docs.list()
    if as_json:
        _print_json([c.as_dict() for c in cols])
        return
    if not cols:
        out.print("no collections; add one with `memctl collection add NAME DIR`")
        return
    t = Table("name", "folder", "glob", "files", "chunks", "indexed")
    for c in cols:
        t.add_row(c.name, c.root, c.glob, str(c.files), str(c.chunks),
                  c.indexed_at.strftime("%Y-%m-%d %H:%M") if c.indexed_at else "never")
    out.print(t)


@collection_app.command("remove")
@_errors
def collection_remove(
    name: Annotated[str, typer.Argument(help="Collection name")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Drop a collection's chunks from the store (its files are not touched)."""
    with _collections() as docs:
        n = docs.remove(name)
    _print_json({"removed": name, "chunks_deleted": n}) if as_json else out.print(
        f"removed collection {name}: {n} chunks deleted (files untouched)", highlight=False, markup=False)


@_errors
def index(
    name: Annotated[str | None, typer.Argument(help="Collection (default: all)")] = None,
    full: Annotated[bool, typer.Option("--full", help="Re-chunk every file, changed or not")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Keep indexing changes until interrupted")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between --watch passes")] = 2.0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Index what changed in the collections' files (by content hash); deleted files leave the index."""
    if watch and not interval > 0:  # say so before a possibly long first pass, not after it
        raise InvalidInput("--interval must be a positive number of seconds")
    with _collections() as docs:
        reports = docs.index(name, full=full)
        _print_reports(reports, as_json)
        if watch:
            out.print(f"watching every {interval:g} s; Ctrl-C stops", highlight=False)
            with contextlib.suppress(KeyboardInterrupt):
                docs.watch(name, interval=interval, on_report=lambda r: _print_reports([r], as_json))


@_errors
def export(
    ns: Annotated[list[str] | None, typer.Option("--ns", help="Namespace prefix (repeatable with --daily)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Output format (md)")] = "md",
    out_file: Annotated[Path, typer.Option("--out", help="MEMORY.md to write")] = Path("MEMORY.md"),
    daily: Annotated[Path | None, typer.Option("--daily", help="Write YYYY-MM-DD.md files of each day's writes here")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that were edited by hand")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Write memories as Markdown: MEMORY.md (--ns NS) or daily notes (--daily DIR)."""
    from memory.markdown_io import render_daily_notes, render_memory_md, write_guarded
    from memory.namespace import parse_namespace
    from memory.service import MAX_RESULTS

    if fmt != "md":
        raise InvalidInput(f"--format {fmt!r} is not supported; use --format md")
    if daily is None and not ns:
        raise InvalidInput("give --ns NS (MEMORY.md of that namespace) or --daily DIR (daily notes)")
    if daily is None and len(ns or []) > 1:
        raise InvalidInput("MEMORY.md holds one namespace prefix: give --ns once")
    prefixes = [parse_namespace(n) for n in ns or []]
    if daily is None:
        _check_not_the_store(out_file)
    counts: dict[str, int] = {}
    with _manager(read=True) as mm:
        if daily is not None:
            events = [e for e in mm.audit.events(limit=10**9) if e.namespace and not e.namespace.startswith("docs/")
                      and (not prefixes or any(parse_namespace(e.namespace)[:len(p)] == p for p in prefixes))]
            files = {daily / f"{day}.md": text for day, text in render_daily_notes(events).items()}
        else:
            recs = mm.service.list(prefixes[0], limit=MAX_RESULTS)
            files = {out_file: render_memory_md(recs, "/".join(prefixes[0]))}
            counts = {str(out_file): len(recs)}
    status: dict[str, str] = {}
    for p, text in files.items():
        try:
            status[str(p)] = write_guarded(p, text, force=force)
        except OSError as exc:  # a folder in the way, no permission: say which file, keep what was written
            raise InvalidInput(f"cannot write {p}: {exc.strerror}; written so far: {', '.join(status) or 'nothing'}; "
                               "choose another --out / --daily") from None
    edited = [p for p, s in status.items() if s == "edited"]
    if as_json:
        _print_json({"files": status})
    else:
        for p, s in status.items():
            if s != "edited":
                n = f" ({counts[p]} memories)" if p in counts else ""
                out.print(f"{s} {p}{n}", highlight=False, markup=False)
        if not files:
            out.print("nothing was written to memory in these namespaces")
    if edited:
        raise InvalidInput(f"not overwritten (edited by hand): {', '.join(edited)}; import the edits first "
                           "(`memctl import FILE`) or pass --force")


def _check_not_the_store(out_file: Path) -> None:
    """Refuse the store file and its side files (-wal, -shm, .pending, vectors) as --out: with
    --force, the export replaced the store with Markdown and every memory was lost."""
    store = _settings().path
    if store == ":memory:":
        return
    s = Path(store).expanduser().resolve()
    o = out_file.expanduser().resolve()
    if o.parent == s.parent and o.name.startswith(s.name):
        raise InvalidInput(f"--out {out_file} is the memory store (or one of its files); choose another --out, "
                           "e.g. MEMORY.md")


def _import_jsonl(file: Path, ns: str | None, dry_run: bool, as_json: bool, dedupe: bool,
                  batch_size: int, workers: int | None) -> None:
    """Bulk import of a JSON Lines file (memory.bulk): validate every line, then write in batches."""
    import time

    from memory.bulk import (ImportReport, count_lines, drop_duplicates, paused_gc, start_workers, validate_jsonl,
                             write_batches)
    from memory.policy.audit import AuditEvent
    from memory.records import utcnow

    if batch_size < 1:
        raise InvalidInput(f"--batch-size must be >= 1, got {batch_size}")
    # Each worker is a process with its own copy of the model; far more than the cores only
    # adds start-up time and memory (and a huge number would exhaust the machine).
    most = 4 * (os.cpu_count() or 1)
    if workers is not None and not 1 <= workers <= most:
        raise InvalidInput(f"--workers must be between 1 and {most} (4 per core), got {workers}; "
                           "omit it for one per core")
    t0 = time.perf_counter()
    with _manager() as mm, paused_gc():  # this process ends after the import: no collector passes
        # Embedding workers start (and load the model) while this process validates the file.
        pool = None if dry_run else start_workers(mm.service, workers, -(-count_lines(file) // batch_size))
        try:
            records = validate_jsonl(mm.service, file, ns)  # raises on the first bad line: nothing written
            report = ImportReport(lines=len(records))
            if dedupe:
                records, report.skipped_duplicates = drop_duplicates(mm.service, records)
            if not dry_run and records:
                written = [0]  # memories in committed batches, for the Ctrl-C message

                def progress(done: int, _total: int) -> None:
                    written[0] = done
                    bar.update(task, completed=done)

                try:
                    with _progress() as bar:
                        task = bar.add_task(f"import {file.name}", total=len(records))
                        report.batches = write_batches(mm.service, records, batch_size=batch_size,
                                                       workers=workers, pool=pool, progress=progress)
                except KeyboardInterrupt:
                    # Exit 130 said nothing before: how much is in, and whether a re-run duplicates.
                    _interrupted_import(mm, file, written[0], len(records), batch_size, dedupe)
                    raise typer.Exit(130) from None
        finally:
            if pool is not None:
                pool.close()
        if not dry_run and records:
            report.written = len(records)
            report.seconds = time.perf_counter() - t0
            mm.audit.record(AuditEvent(
                "import", None, None, "memctl", reason=f"bulk import of {file.name}",
                details={"file": str(file), **report.as_dict()}, ts=utcnow()))
        report.seconds = time.perf_counter() - t0
    result = report.as_dict()
    if as_json:
        _print_json({"dry_run": dry_run, **result})
    elif dry_run:
        out.print(f"{file.name}: {result['lines']} valid lines; would write {len(records)} "
                  f"({result['skipped_duplicates']} duplicates skipped)", highlight=False, markup=False)
    else:
        out.print(f"imported {result['written']} memories from {file.name} in {result['seconds']:.1f} s "
                  f"({result['memories_per_s'] or 0:.0f}/s, {result['batches']} batches); "
                  f"{result['skipped_duplicates']} duplicates skipped", highlight=False, markup=False)


def _interrupted_import(mm: MemoryManager, file: Path, written: int, total: int, batch_size: int,
                        dedupe: bool) -> None:
    """Ctrl-C during ``memctl import FILE.jsonl``: audit what was written and say how to finish."""
    from memory.policy.audit import AuditEvent
    from memory.records import utcnow

    with contextlib.suppress(Exception):  # the message matters more than the audit row here
        mm.audit.record(AuditEvent("import", None, None, "memctl", reason=f"bulk import of {file.name} (interrupted)",
                                   details={"file": str(file), "written": written, "lines": total,
                                            "interrupted": True}, ts=utcnow()))
    again = ("run the same command again: --dedupe (the default) skips what is already stored" if dedupe else
             "run it again with --dedupe (not --no-dedupe) so the memories already stored are skipped")
    err.print(f"interrupted: {written} of {total} memories written (whole batches of {batch_size}, one "
              f"transaction each: none half-written); {again}", highlight=False, markup=False)


@_errors
def import_(
    file: Annotated[Path, typer.Argument(help="An exported (and edited) MEMORY.md, or a .jsonl file to bulk-import")],
    ns: Annotated[str | None, typer.Option("--ns", help="Namespace for a file without a memctl header "
                                           "(.jsonl: for lines without one)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    dedupe: Annotated[bool | None, typer.Option(
        "--dedupe/--no-dedupe", help=".jsonl only: skip lines whose namespace already holds the same content "
        "[default: dedupe]")] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", help=".jsonl only: memories per transaction [default: 2000]")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", help=".jsonl only: embedding processes [default: one per core]")] = None,
) -> None:
    """Apply a MEMORY.md's edits (edited bullets update, new ones are added, deleted ones removed; audited),
    or bulk-import a .jsonl file (one {"content", "namespace", ...} object per line)."""
    if file.suffix.lower() in (".jsonl", ".ndjson"):
        _import_jsonl(file, ns, dry_run, as_json, True if dedupe is None else dedupe,
                      2000 if batch_size is None else batch_size, workers)
        return
    if dedupe is not None or batch_size is not None or workers is not None:
        raise InvalidInput("--dedupe/--no-dedupe, --batch-size and --workers apply to .jsonl files only; "
                           f"{file.name} is imported as a MEMORY.md")
    from memory.markdown_io import apply_import, check_bullets, parse_memory_md, plan_import, touched_since
    from memory.service import MAX_RESULTS

    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{file} does not exist; export one with `memctl export --ns NS --format md`") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{file} is not UTF-8 text (bad byte at {exc.start}); nothing was imported") from None
    except IsADirectoryError:
        raise InvalidInput(f"{file} is a folder; give the MEMORY.md file to import") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {file}: {exc.strerror}; nothing was imported") from None
    parsed = parse_memory_md(text, ns)
    with _manager() as mm:
        check_bullets(parsed.bullets, mm.settings.max_content_chars)  # --dry-run says so too
        plan = plan_import(parsed, mm.service.list(parsed.namespace, limit=MAX_RESULTS),
                           touched_since(mm.audit, parsed.namespace, parsed.exported_at))
        result: dict[str, Any] = plan.as_dict() if dry_run else apply_import(mm, plan, source_name=str(file)).as_dict()
    if as_json:
        _print_json({"dry_run": dry_run, **result})
    else:
        if dry_run:
            out.print(f"would add {len(result['add'])}, update {len(result['update'])}, remove "
                      f"{len(result['remove'])}; {result['unchanged']} unchanged", highlight=False)
        else:
            statuses = [a["status"] for a in result["added"]]
            kinds = ", ".join(f"{s} {statuses.count(s)}" for s in dict.fromkeys(statuses))
            out.print(f"added {len(statuses)} ({kinds})"
                      f", updated {len(result['updated'])}, removed {len(result['removed'])} (restorable with "
                      f"`memctl restore ID`); {result['unchanged']} unchanged", highlight=False, markup=False)
        for c in result["conflicts"]:
            out.print(f"conflict: {c}", highlight=False, markup=False)
    if result["conflicts"]:
        raise typer.Exit(1)


@_errors
def eval_collections(
    data: Annotated[Path, typer.Option("--data", help="Folder with notes/ and questions.jsonl")],
    edits: Annotated[int, typer.Option(help="Files edited one at a time for the re-index timing")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Index time, re-index time after one edit, and R@k / MRR of a Markdown folder (temporary store)."""
    from memctl.eval_collections import run_collection_eval

    with _progress() as bar:
        task = bar.add_task("questions", total=None)
        result = run_collection_eval(data, settings=_settings(path=":memory:"), edits=edits,
                                     progress=lambda _s, d, t: bar.update(task, completed=d, total=t))
    if as_json:
        _print_json(result)
        return
    t = Table("slice", "n", "R@1", "R@5", "R@10", "MRR")
    rows = ([("overall", result["overall"])] + [(f"lang {k}", v) for k, v in result["by_lang"].items()]
            + [(k, v) for k, v in result["by_language_pair"].items()])
    for name, m in rows:
        t.add_row(name, str(m["n"]), f"{m['R@1']:.3f}", f"{m['R@5']:.3f}", f"{m['R@10']:.3f}", f"{m['MRR']:.3f}")
    out.print(t)
    tm = result["timing"]
    one_edit = "not measured (--edits 0)" if tm["reindex_one_edit_s"] is None else f"{tm['reindex_one_edit_s']} s"
    out.print(f"{tm['files']} files, {tm['chunks']} chunks: index {tm['index_s']} s (cpu {tm['index_cpu_s']} s), "
              f"re-index unchanged {tm['reindex_unchanged_s']} s, after one edit {one_edit}; "
              f"search p50 {tm['search_p50_ms']} ms", highlight=False)


@_errors
def eval_injection(
    sizes: Annotated[str, typer.Option(help="Stored memories for the handoff simulation, comma-separated")]
    = "1000,10000",
    handoffs: Annotated[int, typer.Option(help="Handoffs per size and mode")] = 60,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Tokens injected per handoff with policy.injection full vs compact (demo scenario + handoff simulation)."""
    from memctl.bench_injection import run_injection_bench

    try:
        size_list = tuple(int(x) for x in sizes.split(",") if x.strip())
    except ValueError:
        raise InvalidInput(f"--sizes must be comma-separated integers, got {sizes!r}") from None
    if not size_list or min(size_list) < 20 or handoffs < 1:
        raise InvalidInput("--sizes must list sizes >= 20 and --handoffs must be >= 1")
    result = run_injection_bench(size_list, handoffs)
    if as_json:
        _print_json(result)
        return
    t = Table("workload", "mode", "handoffs", "tokens mean", "p50", "p95", "max", "memories", "checks")
    for mode, r in result["demo"].items():
        h = r["per_handoff"]
        t.add_row("demo scenario", mode, str(h["n"]), str(h["mean"]), str(h["p50"]), str(h["p95"]), str(h["max"]),
                  str(h["memories_mean"]), f"{r['checks_passed']} checks, {r['expectations_met']} expectations")
    for n, modes in result["handoff"].items():
        for mode, r in modes.items():
            h = r["per_handoff"]
            t.add_row(f"simulation, {n} memories", mode, str(r["handoffs"]), str(h["mean"]), str(h["p50"]),
                      str(h["p95"]), str(h["max"]), str(h["memories_mean"]), "")
    out.print(t)


def register(app: typer.Typer) -> None:
    """Add ``collection``, ``index``, ``export``, ``import`` and ``eval collections|injection`` to ``app``."""
    app.add_typer(collection_app, name="collection")
    app.command("index")(index)
    app.command("export")(export)
    app.command("import")(import_)
    eval_app.command("collections")(eval_collections)
    eval_app.command("injection")(eval_injection)


__all__ = ["collection_app", "register"]
