"""``memctl transcript tail|append``: the cross-process group transcript (:mod:`memory.transcript`).

Store-only: imports neither the embedder nor LangGraph. The transcript lives in the memory
store's SQLite file (``--path`` / ``MEMORY_PATH``) unless ``--file`` names another.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Annotated

import typer

from memctl.cli_common import _errors, _print_json, _settings, out
from memory.errors import InvalidInput

transcript_app = typer.Typer(help="The group transcript several processes share (append, tail).",
                             no_args_is_help=True)

FileOpt = Annotated[str | None, typer.Option(
    "--file", help="Transcript SQLite file (default: the memory store's file)")]


def _open(file: str | None):  # noqa: ANN202 - GroupTranscript, imported lazily
    from memory.transcript import GroupTranscript

    return GroupTranscript(file or _settings().path)


@transcript_app.command("append")
@_errors
def append(
    text: Annotated[str, typer.Argument(help="The message ('-' reads stdin)")],
    sender: Annotated[str, typer.Option("--sender", help="Who sent it (user id or agent name)")],
    message_id: Annotated[str | None, typer.Option("--id", help="Message id: a message is stored once per id "
                                                   "(default: a new random id)")] = None,
    role: Annotated[str, typer.Option("--role", help="user | assistant | agent | system | tool")] = "user",
    ts: Annotated[str | None, typer.Option("--ts", help="ISO-8601 time (default: now)")] = None,
    thread: Annotated[str, typer.Option("--thread", help="Group conversation id")] = "main",
    file: FileOpt = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print {appended, message_id}")] = False,
) -> None:
    """Append one message; a message id seen before is not stored again (exit 0, appended: false)."""
    if text == "-":
        text = sys.stdin.read()
    mid = message_id if message_id is not None else uuid.uuid4().hex
    with _open(file) as t:
        new = t.append(mid, sender, role, text, ts=ts, thread=thread)
    if as_json:
        _print_json({"appended": new, "message_id": mid})
    else:
        out.print(f"{'appended' if new else 'already stored'} {mid}", highlight=False, markup=False)


@transcript_app.command("tail")
@_errors
def tail(
    n: Annotated[int, typer.Option("-n", "--limit", help="The last N messages")] = 20,
    since: Annotated[str | None, typer.Option("--since", help="Only messages at or after this ISO-8601 time")] = None,
    thread: Annotated[str | None, typer.Option("--thread", help="One group conversation (default: all)")] = None,
    summary: Annotated[bool, typer.Option("--summary/--no-summary",
                                          help="The compact block injected into prompts")] = False,
    file: FileOpt = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print the messages as JSON")] = False,
) -> None:
    """The recent messages, oldest first (ordered by time, then message id)."""
    if n < 0:
        raise InvalidInput(f"-n must be >= 0, got {n}")
    path = file or _settings().path
    if path != ":memory:" and not Path(path).expanduser().exists():  # reading must not create the file
        if file is not None:
            raise InvalidInput(f"no transcript file at {file!r}; check --file (`memctl transcript append` creates it)")
        if as_json:
            _print_json([])
        else:
            out.print("(no messages)")
        return
    with _open(file) as t:
        if summary:
            out.print(t.summary(n, thread=thread) or "(no messages)", highlight=False, markup=False)
            return
        msgs = t.get_recent(None if since is not None else n, since=since, thread=thread)
    if since is not None:
        msgs = msgs[-n:] if n else []
    if as_json:
        _print_json([m.as_dict() for m in msgs])
        return
    if not msgs:
        out.print("(no messages)")
    for m in msgs:
        out.print(f"{m.ts:%Y-%m-%d %H:%M:%S} [{m.thread}] {m.sender} ({m.role}): {m.text}", highlight=False,
                  markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(transcript_app, name="transcript")
