"""The garbage collector in a ``memctl`` process: kept out of its start and of its exit.

A fresh ``memctl`` allocates ~50,000 long-lived objects (modules, classes, pydantic and Typer
schemas) and almost no garbage before its first result. With the default threshold (a young
collection every 700 new objects) the collector traversed them ~125 times on the way, and the
interpreter's shutdown collections walked and tore down the whole heap once more (~200 ms of
wall at load ~6 between the last exit handler and the process's end; ~30 ms frozen): together
~25% of the CPU of a fresh ``memctl search`` (0.53 -> 0.39 s CPU, 7 runs at load ~5, collector
off during the run and frozen at exit) and ~20% of ``memctl --help``. So, only in a ``memctl``
process:

- while :mod:`memctl.cli` is imported and while the app runs, a young collection waits for
  :data:`STARTUP_GC_THRESHOLD` new objects. A store command never reaches it (a fresh search
  adds ~25,000 objects after the import, ``memctl audit`` through the policy manager ~65,000); a
  long command such as ``memctl import`` or ``memctl mcp`` still collects, in larger steps, so
  at most that many objects of cyclic garbage (~10-20 MB) wait for a collection. The previous
  thresholds come back when the import ends (a process that imports ``memctl.cli``, e.g. a
  test, keeps its own) and when a run returns instead of exiting (``standalone_mode=False``);
  a run that exits (``SystemExit``, how Click ends every run) leaves them raised;
- at interpreter exit the heap is frozen (``gc.freeze``) before the shutdown collections, which
  then skip it. Nothing else about the exit changes: the other exit handlers run, stdout and
  stderr are flushed, modules are torn down; the commands close their stores themselves (context
  managers) before this. Only ``app()`` (the console script, ``python -m memctl.cli``) registers
  it, never ``typer.testing.CliRunner``.

Nothing here is imported but :mod:`gc` and :mod:`atexit`: it runs before Typer is imported.
"""

from __future__ import annotations

import atexit
import gc

STARTUP_GC_THRESHOLD = 100_000

_registered = False


def relax() -> tuple[int, int, int]:
    """Raise the young-generation threshold to :data:`STARTUP_GC_THRESHOLD`; returns the old thresholds."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], STARTUP_GC_THRESHOLD), old[1], old[2])
    return old


def restore(old: tuple[int, int, int]) -> None:
    gc.set_threshold(*old)


def _freeze() -> None:
    gc.freeze()


def freeze_at_exit() -> None:
    """Freeze the heap when the interpreter exits (once per process; runs before the exit
    handlers registered earlier, e.g. logging's, which need no collection)."""
    global _registered
    if not _registered:
        atexit.register(_freeze)
        _registered = True
