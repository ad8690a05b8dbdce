"""What every ``memctl`` command shares: the Typer apps, the global options, opening the
service or the manager from them, one-line errors with exit codes, JSON output, progress bars.

Only Typer and rich are imported at module level (see :mod:`memctl.cli`).
"""

from __future__ import annotations

import copy
import enum
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
import typer.core
from rich.console import Console

from memctl import cli_gc
from memory.errors import InvalidInput, MemoryLayerError, NotFound

if TYPE_CHECKING:
    from rich.progress import Progress

    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager
    from memory.service import MemoryService
    from memory.settings import MemorySettings

# Typer prints a type column for every option; a flag takes no value, so its "<bool>" there
# only confused people: flags show as "--json  --no-json" and nothing else.
_display_type_rich = typer.core.TyperOption.display_type_rich


def _flag_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    return None if self.is_flag or self.is_bool_flag else _display_type_rich(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

# --type accepts the well-known memory types (memory.records.MEMORY_TYPES; listed here so that
# `memctl --help` does not import the records module): anything else is rejected with the list.
MemoryType = enum.Enum("MemoryType", {t: t for t in (
    "user_profile", "domain_facts", "task_traces", "tool_effects", "conversation", "note")}, type=str)

# The app's own options (before the command name) that take a value.
_GLOBAL_VALUE_OPTIONS = ("--config", "--path")


def _command_name(argv: list[str]) -> str | None:
    """The command ``argv`` runs (``search`` in ``--path X search q``), or None when it runs none
    or asks the app itself for something (``--help``, completion, no arguments)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _GLOBAL_VALUE_OPTIONS:
            i += 2
        elif arg.startswith(tuple(f"{o}=" for o in _GLOBAL_VALUE_OPTIONS)):
            i += 1
        elif arg.startswith("-"):
            return None  # --help, --install-completion, "--", or an error the full app reports
        else:
            return arg
    return None


def _callbacks(t: typer.Typer) -> Iterator[Callable[..., Any]]:
    if t.registered_callback is not None and t.registered_callback.callback is not None:
        yield t.registered_callback.callback
    for cmd in t.registered_commands:
        if cmd.callback is not None:
            yield cmd.callback
    for grp in t.registered_groups:
        if grp.typer_instance is not None:
            yield from _callbacks(grp.typer_instance)


def _resolve_annotations(t: typer.Typer) -> None:
    """Evaluate the commands' annotations once, before Typer reads them.

    The CLI modules use ``from __future__ import annotations``, so every annotation is a string,
    and Typer evaluates each command's strings several times over (``get_type_hints`` and
    ``inspect.signature``) while it builds the command: 45-60 ms for the whole app at load ~5,
    15-35 ms after one evaluation here. Typer then sees exactly the objects it would have made.
    """
    import typing

    for fn in _callbacks(t):
        if any(isinstance(a, str) for a in fn.__annotations__.values()):
            try:
                fn.__annotations__.update(typing.get_type_hints(fn, include_extras=True))
            except Exception:  # noqa: S110 - a name only type checkers see: Typer reports it as before
                pass


class MemctlTyper(typer.Typer):
    """The ``memctl`` app. Run as a program (``app()``: the console script, ``python -m
    memctl.cli``) it builds only the command it runs, and keeps the collector out of the run and
    the exit (:mod:`memctl.cli_gc`). ``memctl --help``, completion and unknown commands build the
    whole app, so help and errors are Typer's own; ``typer.testing.CliRunner`` never comes here.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs.get("args", args[0] if args else None)
        target = self._only(sys.argv[1:] if argv is None else list(argv))
        _resolve_annotations(target)
        old = cli_gc.relax()
        cli_gc.freeze_at_exit()
        try:
            result = typer.Typer.__call__(target, *args, **kwargs)
        except SystemExit:
            # How a run ends (Click exits on success too): the process is exiting. The thresholds
            # stay raised, or the first allocation after restoring them would collect the run's
            # ~25,000-65,000 young objects just before the exit handler freezes them.
            raise
        except BaseException:
            cli_gc.restore(old)
            raise
        cli_gc.restore(old)  # standalone_mode=False: the caller goes on
        return result

    def _only(self, argv: list[str]) -> typer.Typer:
        """This app reduced to the one command (or command group) ``argv`` names, or the whole app.

        Typer builds a Click command of every registered command (their signatures, annotations
        and parameter adapters) before it runs one: 60-100 ms of a fresh ``memctl search``.
        """
        name = _command_name(argv)
        if name is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
            return self  # shell completion lists every command
        from typer.main import get_command_name

        for cmd in self.registered_commands:
            if cmd.callback is not None and (cmd.name or get_command_name(cmd.callback.__name__)) == name:
                only = copy.copy(self)
                only.registered_commands, only.registered_groups = [cmd], []
                return only
        for grp in self.registered_groups:
            if grp.name == name:
                only = copy.copy(self)
                only.registered_commands, only.registered_groups = [], [grp]
                return only
        return self  # unknown name: the whole app, so the error (and its suggestions) is Typer's


app = MemctlTyper(help="Long-term memory store: add, search, inspect, evaluate.", no_args_is_help=True,
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


def _require_store(settings: MemorySettings, *, audit: bool) -> None:
    """Read commands never create a store: a missing SQLite file (or audit log) is an error.

    ``memctl --path /nonexistent/dir/x.sqlite stats`` used to create the directory and an empty store.
    """
    if settings.path == ":memory:" or (settings.backend != "sqlite" and not audit):
        return
    path = Path(settings.path).expanduser()
    if not path.is_file():
        from memory.backends.sqlite_schema import check_store_path
        from memory.errors import InvalidConfig

        check_store_path(settings.path, create_parent=False)  # a folder, or a path under a file: say so

        raise InvalidConfig(f"no memory store at {str(path)!r} (nothing was created); check --path / MEMORY_PATH, "
                            "or write a memory first (`memctl add`)")


@contextmanager
def _service(*, read: bool = False, audit: bool = False, **overrides: Any) -> Iterator[MemoryService]:
    """The service; ``read=True`` for commands that only read (they refuse a missing store;
    ``audit=True`` when the command also reads the audit log, which may be the only file)."""
    from memory.service import MemoryService

    settings = _settings(**overrides)
    if read:
        _require_store(settings, audit=audit)
    svc = MemoryService.from_settings(settings)
    try:
        yield svc
    finally:
        svc.close()


@contextmanager
def _audited_service(*, read: bool = False) -> Iterator[tuple[MemoryService, AuditLog]]:
    """The service and the audit log, without the policy manager: a search needs only these, and
    the manager's imports (judge, reading rules, alignment) were ~40% of a fresh ``memctl search``."""
    from memory.policy.audit import AuditLog

    with _service(read=read, audit=True) as svc:
        audit = AuditLog(svc.settings.path)
        try:
            yield svc, audit
        finally:
            audit.close()


@contextmanager
def _manager(*, read: bool = False, **overrides: Any) -> Iterator[MemoryManager]:
    """The manager; ``read=True`` for commands that only read (they refuse a missing store)."""
    from memory.policy.manager import MemoryManager

    settings = _settings(**overrides)
    if read:
        _require_store(settings, audit=True)
    mm = MemoryManager.from_settings(settings)
    try:
        yield mm
    finally:
        mm.close()


def _error(exc: BaseException) -> None:
    # Plain text on one line: user input may contain [brackets] that rich would read as markup,
    # and scripts grep for the "error:" prefix.
    msg = " ".join(str(exc).split())
    sys.stderr.write(f"error: {msg}\n")


def _check_text(name: str, value: Any) -> None:
    """An argument the shell could not decode arrives with lone surrogates (PEP 383); say so
    rather than fail later with a UnicodeEncodeError traceback."""
    values = value if isinstance(value, list | tuple) else [value]
    for v in values:
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                opt = name.rstrip("_").replace("_", "-")
                raise InvalidInput(
                    f"{opt} {v.encode('utf-8', 'backslashreplace').decode()!r} is not valid text: byte(s) at "
                    f"position {exc.start} could not be decoded; pass it in UTF-8 (check the terminal's locale)"
                ) from None


def _errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            for name, value in kwargs.items():
                _check_text(name, value)
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


def _stage_progress(bar: Progress) -> Callable[[str, int, int], None]:
    """A ``progress(stage, done, total)`` callback drawing one bar per stage on ``bar``."""
    tasks: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done)

    return progress


def _progress() -> Progress:
    # rich.progress is imported here: only the long-running commands draw a progress bar.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True)
