"""Serve one store from N forked workers: load once in the parent, then fork.

A preloading server (gunicorn ``--preload``, also with ``-k uvicorn.workers.UvicornWorker``; a
``multiprocessing`` pool with the ``fork`` start method; not ``uvicorn --workers``, which spawns
fresh interpreters) imports the app, opens the store and loads the model once, then forks its
workers. Forked pages are shared copy-on-write, but CPython writes to them by itself: every
container a full garbage collection scans gets its header written (measured at 100k memories
with the whole index preloaded: a full collection in each of 4 workers made the server 1,023 MB
PSS instead of 897 MB with the heap frozen). :func:`prefork` prepares a service so that as much
as possible stays shared:

* the embedding model is loaded (the packaged USE model's weights and vocabulary are
  memory-mapped files: shared through the page cache whatever happens to the heap);
* the store is opened and what every worker reads alike is loaded (namespace catalogue, the
  vector file's mapping, the saved projection basis; with ``preload_index`` every partition),
  see :meth:`memory.backends.sqlite.SqliteBackend.prepare_for_fork`;
* one search is run on the smallest namespace (:data:`WARM_QUERY`), so that what a first search
  creates lazily (modules it imports, caches, interned objects) is created once, here;
* the C heap's free pages are returned to the OS (glibc ``malloc_trim``), so freed memory is not
  carried into every worker's count, and every object alive is moved out of the garbage
  collector's reach (``gc.freeze()``), so collections in the workers never write to the shared
  pages;
* at every fork the SQLite connection is closed in the parent and reopened in both processes,
  and the vector file gets its own descriptor in the child (:mod:`memory.backends.sqlite_fork`).

Example (gunicorn, ``gunicorn --preload -w 4 app:app``)::

    # app.py
    from memory import MemorySettings, prefork
    service = prefork(MemorySettings.load())   # in the master, before the workers fork
    app = make_app(service)                     # every worker searches and writes `service`

A store used in a forked child without this raises :class:`~memory.errors.StoreForked`. The
policy layer (``MemoryManager``: audit log, judge view cache, write journal, write-behind thread)
holds connections and a thread of its own: build it in each worker, around the prepared service
(``MemoryManager(service, AuditLog(settings.path), settings)`` in gunicorn's ``post_fork`` or a
pool initializer), not in the parent.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from memory.errors import InvalidConfig

if TYPE_CHECKING:
    from memory.service import MemoryService
    from memory.settings import MemorySettings

WARM_QUERY = "warm the model: 用户喜欢柱状图"


def prefork(target: MemoryService | MemorySettings | None = None, *, preload_index: bool = False) -> MemoryService:
    """Prepare a service to be shared by workers forked from this process; returns it.

    Args:
        target: a :class:`~memory.service.MemoryService` to prepare, or the settings to open one
            with (``None``: :meth:`MemorySettings.load`). Call it last before forking: objects
            created afterwards are not frozen and their pages are copied into each worker.
        preload_index: also load every namespace's partition (vectors and keyword postings)
            in the parent, so all workers share one copy of the whole index instead of each
            building its own from the namespaces it searches (100k memories: ~0.8 GB once,
            instead of up to that in every long-lived worker). Needs the index to fit in
            ``index_memory_mb``.

    Raises:
        InvalidConfig: the backend cannot be shared by forked processes (a Qdrant backend: give
            each worker its own client after the fork; an in-memory SQLite store), or
            ``preload_index`` and the index does not fit in ``index_memory_mb``.
    """
    from memory.backends.sqlite_fork import release_free_heap
    from memory.service import MemoryService
    from memory.settings import MemorySettings

    if target is None or isinstance(target, MemorySettings):
        service = MemoryService.from_settings(target)
    elif isinstance(target, MemoryService):
        service = target
    else:
        raise InvalidConfig(f"prefork takes a MemoryService or MemorySettings, got {type(target).__name__}")
    prepare = getattr(service.backend, "prepare_for_fork", None)
    if prepare is None:
        raise InvalidConfig(
            f"the {type(service.backend).__name__} backend cannot be prepared for forked workers: its client "
            "holds connections that must not cross a fork. Create the service in each worker after the fork "
            "(gunicorn post_fork, a Pool initializer), or use the SQLite backend"
        )
    service.embedder.embed_query(WARM_QUERY)  # the model loaded once, here

    def warm(namespace: str) -> None:
        service.search(WARM_QUERY, namespace, top_k=1)  # read-only: nothing is written

    prepare(preload_index=preload_index, warm=warm)
    gc.collect()
    release_free_heap()
    gc.freeze()
    return service


__all__ = ["WARM_QUERY", "prefork"]
