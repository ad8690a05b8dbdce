"""``memctl``: inspect and operate the memory store from a shell.

Settings come from ``MEMORY_*`` variables and ``--config`` (see :mod:`memory.settings`).
Errors print one line saying what to do, and exit 2 for bad input, 1 for store failures.

Imports of the memory layer happen inside the commands: ``memctl --help`` then loads only
Typer and rich, and a command loads only what it uses (``list`` never loads the embedding model).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from memory.errors import InvalidInput, MemoryLayerError, NotFound

if TYPE_CHECKING:
    from rich.progress import Progress

    from memory.policy.manager import MemoryManager
    from memory.records import SearchHit
    from memory.service import MemoryService
    from memory.settings import MemorySettings

app = typer.Typer(help="Long-term memory store: add, search, inspect, evaluate.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
eval_app = typer.Typer(help="Measure retrieval quality.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

out = Console()
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


class _State:
    config: Path | None = None
    path: str | None = None


state = _State()


@app.callback()
def _main(
    config: Annotated[Path | None, typer.Option("--config", help="YAML settings file (else MEMORY_CONFIG)")] = None,
    path: Annotated[str | None, typer.Option("--path", help="SQLite file or ':memory:' (else MEMORY_PATH)")] = None,
) -> None:
    state.config, state.path = config, path


def _settings(**overrides: Any) -> MemorySettings:
    from memory.settings import MemorySettings

    if state.path is not None:
        overrides.setdefault("path", state.path)
    return MemorySettings.load(state.config, **overrides)


@contextmanager
def _service(**overrides: Any) -> Iterator[MemoryService]:
    from memory.service import MemoryService

    svc = MemoryService.from_settings(_settings(**overrides))
    try:
        yield svc
    finally:
        svc.close()


@contextmanager
def _manager(**overrides: Any) -> Iterator[MemoryManager]:
    from memory.policy.manager import MemoryManager

    mm = MemoryManager.from_settings(_settings(**overrides))
    try:
        yield mm
    finally:
        mm.close()


def _error(exc: BaseException) -> None:
    # Plain text on one line: user input may contain [brackets] that rich would read as markup,
    # and scripts grep for the "error:" prefix.
    msg = " ".join(str(exc).split())
    sys.stderr.write(f"error: {msg}\n")


def _errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (InvalidInput, NotFound) as exc:
            _error(exc)
            raise typer.Exit(2) from None
        except MemoryLayerError as exc:
            _error(exc)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def _hits_table(hits: list[SearchHit]) -> Table:
    t = Table(show_lines=False)
    for col in ("#", "score", "sim", "vec", "kw", "decay", "boost", "namespace", "content", "id"):
        t.add_column(col, overflow="fold")
    for i, h in enumerate(hits, 1):
        b = h.breakdown
        t.add_row(str(i), f"{b.score:.3f}", f"{b.sim:.3f}", f"{b.vector:.3f}", f"{b.keyword:.3f}",
                  f"{b.decay:.3f}", f"{b.boost:.2f}", "/".join(h.record.namespace),
                  h.record.content[:120], h.record.id[:12])
    return t


@app.command()
@_errors
def add(
    text: Annotated[str, typer.Argument(help="What to remember ('-' reads stdin)")],
    ns: Annotated[str, typer.Option("--ns", help="Namespace, e.g. user_profile/u1")],
    type_: Annotated[str | None, typer.Option("--type", help="Memory type (default: from the namespace, else note)")] = None,
    source: Annotated[str, typer.Option(help="Who said it / which agent")] = "cli",
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Tag (repeatable)")] = None,
    ttl_days: Annotated[float | None, typer.Option(help="Expire after this many days")] = None,
    id: Annotated[str | None, typer.Option(help="Explicit id (replaces a memory with that id; implies --raw)")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Store as is: no dedupe/merge, PII redaction or TTL policy")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the stored record as JSON")] = False,
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
        meta["type"] = type_
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
    type_: Annotated[str | None, typer.Option("--type", help="Only this memory type")] = None,
    min_score: Annotated[float | None, typer.Option(help="Drop hits below this score")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as JSON")] = False,
) -> None:
    """Hybrid search with the score breakdown of each hit."""
    with _service() as svc:
        hits = svc.search(query, ns, top_k=top_k, filter={"type": type_} if type_ else None, min_score=min_score)
    if as_json:
        _print_json([h.as_dict() for h in hits])
    elif not hits:
        out.print("no memories matched")
    else:
        out.print(_hits_table(hits))


@app.command()
@_errors
def get(
    id: Annotated[str, typer.Argument(help="Memory id")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one memory."""
    from memory.records import record_to_dict

    with _service() as svc:
        rec = svc.get(id)
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The current memories of a namespace, newest first."""
    from memory.records import record_to_dict

    with _service() as svc:
        recs = svc.list(ns, limit=limit, offset=offset)
    if as_json:
        _print_json([record_to_dict(r) for r in recs])
        return
    t = Table()
    for col in ("id", "namespace", "type", "updated", "content"):
        t.add_column(col, overflow="fold")
    for r in recs:
        t.add_row(r.id[:12], "/".join(r.namespace), r.metadata.type, r.updated_at.strftime("%Y-%m-%d %H:%M"),
                  r.content[:120])
    out.print(t if recs else "no memories in this namespace")


@app.command()
@_errors
def delete(
    ids: Annotated[list[str] | None, typer.Argument(help="Memory ids")] = None,
    ns: Annotated[str | None, typer.Option("--ns", help="Delete everything under this namespace")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm deleting a whole namespace")] = False,
    hard: Annotated[bool, typer.Option("--hard", help="Purge for good (default: restorable with `memctl restore`)")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Delete memories by id, or a whole namespace with --ns NS --yes (soft unless --hard)."""
    if bool(ids) == bool(ns):
        raise InvalidInput("give either memory ids or --ns NS (not both, not neither)")
    if ns and not yes:
        raise InvalidInput(f"deleting every memory under {ns!r} needs --yes")
    from memory.policy.manager import Actor

    with _manager() as mm:
        actor = Actor(agent="memctl")
        n = mm.delete(ids, hard=hard, actor=actor) if ids else mm.delete_where(ns, hard=hard, actor=actor)  # type: ignore[arg-type]
    if as_json:
        _print_json({"deleted": n})
    else:
        out.print(f"deleted {n}")
    if ids and n < len(ids):
        raise typer.Exit(1)  # some ids did not exist: tell scripts


@app.command()
@_errors
def restore(id: Annotated[str, typer.Argument(help="Id of a soft-deleted, superseded or evicted memory")]) -> None:
    """Bring back a memory from the trash."""
    from memory.policy.manager import Actor

    with _manager() as mm:
        rec = mm.restore(id, actor=Actor(agent="memctl"))
    out.print(f"restored {rec.id} in {'/'.join(rec.namespace)}", highlight=False)


@app.command("forget-user")
@_errors
def forget_user(
    user: Annotated[str, typer.Argument(help="User id (a namespace label, e.g. u1)")],
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: this cannot be undone")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Remove everything of one user across namespaces, trash and audit; prove it with counts."""
    if not yes:
        raise InvalidInput(f"forgetting user {user!r} deletes all of their memories for good; add --yes")
    from memory.policy.manager import Actor

    with _manager() as mm:
        rep = mm.forget_user(user, actor=Actor(agent="memctl"))
    d = {"user": rep.user_id, "namespaces": list(rep.namespaces), "deleted": rep.deleted, "residue": rep.residue,
         "clean": rep.clean}
    if as_json:
        _print_json(d)
    else:
        out.print(f"deleted {rep.deleted} memories of {user!r} in {len(rep.namespaces)} namespaces; "
                  f"left: {rep.residue}", highlight=False)
    if not rep.clean:
        raise typer.Exit(1)


@app.command()
@_errors
def sweep(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Hard-delete memories whose TTL has passed."""
    with _manager() as mm:
        n = mm.sweep()
    _print_json({"expired_deleted": n}) if as_json else out.print(f"deleted {n} expired memories")


@app.command()
@_errors
def audit(
    action: Annotated[str | None, typer.Option(help="Only this action (search, add, merge, update, delete, ...)")] = None,
    ns: Annotated[str | None, typer.Option("--ns", help="Only this namespace prefix")] = None,
    limit: Annotated[int, typer.Option(help="Newest N events")] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The audit log (newest first) and its statistics: hit rate, duplicate-write rate, merges."""
    from memory.namespace import parse_namespace

    with _manager() as mm:
        events = mm.audit.events(action=action, namespace=parse_namespace(ns) if ns else None, limit=limit)
        st = mm.audit.stats()
    if as_json:
        _print_json({"stats": st, "events": [e.as_dict() for e in events]})
        return
    t = Table("time", "action", "memory", "namespace", "actor", "reason")
    for e in events:
        t.add_row(e.ts.strftime("%Y-%m-%d %H:%M:%S"), e.action, (e.memory_id or "")[:12], e.namespace or "",
                  e.actor or "", (e.reason or "")[:80])
    out.print(t)
    out.print({k: v for k, v in st.items() if k != "events"})


@app.command()
@_errors
def history(
    id: Annotated[str, typer.Argument(help="Memory id")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Everything that happened to one memory, oldest first (old values included)."""
    with _manager() as mm:
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
def stats(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Store size, model and per-namespace counts."""
    with _service() as svc:
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


@app.command()
@_errors
def demo(
    path: Annotated[str | None, typer.Option("--store", help="SQLite file for the demo (default: a new temp file)")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Run the agents on a real chat model, e.g. openai:gpt-4o-mini")] = None,
    scenario: Annotated[str | None, typer.Option("--scenario", help="Scenario file (default: the shipped demo)")] = None,
) -> None:
    """Multi-session, multi-user zh/en scenario through the real Supervisor graph, offline by default."""
    from memctl.demo import run_demo

    try:
        checks = run_demo(path, out, model=model, scenario=scenario)
    except ValueError as exc:  # e.g. the chat model cannot start (missing key, unknown provider)
        raise InvalidInput(str(exc)) from exc
    failed = [c for c in checks.get("checks", []) if isinstance(c, dict) and not c.get("ok", True)]
    if failed:
        raise typer.Exit(1)


def _progress() -> Progress:
    # rich.progress is imported here: only the long-running commands draw a progress bar.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True)


@app.command()
@_errors
def bench(
    sizes: Annotated[str, typer.Option(help="Comma-separated corpus sizes")] = "1000,10000,100000",
    queries: Annotated[int, typer.Option(help="Timed searches per system and size")] = 200,
    systems: Annotated[str, typer.Option(help="Comma-separated: sqlite,qdrant,numpy,inmemory,langgraph-sqlite,handoff")]
    = "sqlite,qdrant,numpy,inmemory,langgraph-sqlite,handoff",
    out_file: Annotated[Path, typer.Option("--out", help="Write the JSON here")] = Path("bench.json"),
    plot_file: Annotated[Path, typer.Option("--plot", help="Write the latency-vs-size PNG here")] = Path("bench.png"),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Search latency, write throughput and memory against baselines: same corpus, same embedder, one process."""
    import platformdirs

    from memctl.bench import plot, run_bench

    known = {"sqlite", "qdrant", "numpy", "inmemory", "langgraph-sqlite", "handoff"}
    try:
        size_list = tuple(int(x) for x in sizes.split(",") if x.strip())
    except ValueError:
        raise InvalidInput(f"--sizes must be comma-separated integers, got {sizes!r}") from None
    system_list = tuple(x.strip() for x in systems.split(",") if x.strip())
    if not set(system_list) <= known or not system_list:
        raise InvalidInput(f"--systems must be a comma-separated subset of {sorted(known)}")
    if not size_list or min(size_list) < 20 or queries < 1:
        raise InvalidInput("--sizes must list sizes >= 20 and --queries must be >= 1")
    cache = Path(platformdirs.user_cache_dir("langgraph-memory")) / "bench"
    with _progress() as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        result = run_bench(size_list, queries=queries, systems=system_list, cache_dir=cache, progress=progress)
    out_file.write_text(json.dumps(result, indent=2))
    plot(result, plot_file)
    if as_json:
        _print_json(result)
        return
    t = Table("system", "n", "search p50 ms", "search p95 ms", "writes/s", "RSS MiB", "queries")
    for r in result["results"]:
        w, m = r["write_per_s"], r["rss_mb"]
        t.add_row(r["system"], str(r["n"]), f"{r['search_p50_ms']:.2f}", f"{r['search_p95_ms']:.2f}",
                  "-" if w is None else f"{w:.0f}", "-" if m is None else f"{m:.0f}", str(r["queries"]))
    out.print(t)
    if result["handoff_overhead"]:
        for n, h in result["handoff_overhead"].items():
            out.print(f"handoff pre+post overhead, inline writes (write_behind: false) at {n}: "
                      f"p50 {h['total_p50_ms']:.2f} ms, p95 {h['total_p95_ms']:.2f} ms")
        agent_ms = result.get("handoff_write_behind_agent_ms")
        for n, h in (result.get("handoff_overhead_write_behind") or {}).items():
            out.print(f"handoff pre+post overhead, write-behind (the default; {agent_ms:g} ms model time per node) "
                      f"at {n}: p50 {h['total_p50_ms']:.2f} ms, p95 {h['total_p95_ms']:.2f} ms "
                      f"(queued write p95 {h.get('write_p95_ms', 0):.2f} ms)")
    out.print(f"wrote {out_file} and {plot_file}")


@eval_app.command("retrieval")
@_errors
def eval_retrieval(
    data: Annotated[Path, typer.Option("--data", help="Directory with turns.jsonl and questions.jsonl")],
    conversations: Annotated[str | None, typer.Option(help="Comma-separated conversation ids")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Recall@k and MRR of evidence turns (LoCoMo protocol) on a fresh in-memory store."""
    from memctl.evaluation import run_retrieval_eval
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    convs = [c.strip() for c in conversations.split(",") if c.strip()] if conversations else None
    # The evaluation never touches the user's store: it ingests into an in-memory one.
    settings = MemorySettings.load(state.config, path=":memory:")
    with MemoryService.from_settings(settings) as svc, _progress() as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        result = run_retrieval_eval(svc, data, conversations=convs, progress=progress)
    if as_json:
        _print_json({k: result[k] for k in ("overall", "by_category", "timing", "by_conversation", "config")})
        return
    t = Table("slice", "n", "R@5", "R@10", "MRR")
    rows = [("overall", result["overall"])] + list(result["by_category"].items())
    for name, m in rows:
        t.add_row(name, str(m["n"]), f"{m['R@5']:.3f}", f"{m['R@10']:.3f}", f"{m['MRR']:.3f}")
    out.print(t)
    tm = result["timing"]
    out.print(f"ingest {tm['ingest_per_s']}/s, search p50 {tm['search_p50_ms']} ms, p95 {tm['search_p95_ms']} ms")


@eval_app.command("dedupe")
@_errors
def eval_dedupe(
    pairs: Annotated[Path, typer.Option("--pairs", help="JSONL of {id, namespace, existing, incoming, label, lang}")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    show_pairs: Annotated[bool, typer.Option("--details", help="Include the per-pair outcomes")] = False,
) -> None:
    """Duplicate merge / conflict resolution / false-merge rates of the write policy (fresh store)."""
    from memctl.evaluation import run_dedupe_eval
    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings

    settings = MemorySettings.load(state.config, path=":memory:")
    with MemoryManager.from_settings(settings) as mm, _progress() as bar:
        task = bar.add_task("pairs", total=None)
        result = run_dedupe_eval(mm, pairs, progress=lambda _s, d, t: bar.update(task, completed=d, total=t))
    if not show_pairs:
        result.pop("pairs")
    if as_json:
        _print_json(result)
        return
    t = Table("slice", "n", "duplicates merged", "conflicts resolved", "distinct wrongly merged")
    rows = [("overall", result)] + list(result["by_lang"].items())
    for name, m in rows:
        t.add_row(name, str(m["n"]), *(("-" if m[k] is None else f"{m[k]:.3f}") for k in
                  ("duplicate_merge_rate", "conflict_resolution_rate", "distinct_false_merge_rate")))
    out.print(t)


def _register_migrate() -> None:
    from memory.migrate import register

    register(app, load_settings=_settings)


_register_migrate()


if __name__ == "__main__":  # pragma: no cover
    app()
