"""A view of :class:`memory.store.MemoryStore` acting for one actor, under the access rules.

``store.for_actor(Actor(agent="agent:analysis"))`` gives the ``BaseStore`` an agent's graph may
use (``graph.compile(store=view)``, langmem's tools): every get / put / delete / search names
namespaces the actor may read or write, or the whole batch is refused with
:class:`memory.errors.AccessDenied` (audited) before anything runs. A search over the empty prefix
and ``list_namespaces`` only show what the actor may read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from langgraph.store.base import BaseStore, GetOp, ListNamespacesOp, Op, PutOp, Result, SearchOp

from memory.policy.access import AccessControl
from memory.store_items import check_namespace

if TYPE_CHECKING:
    from memory.store import MemoryStore


class ActorStoreView(BaseStore):
    """``BaseStore`` over a :class:`MemoryStore` for one actor (see the module docstring)."""

    def __init__(self, store: MemoryStore, actor: Any, access: AccessControl):
        self.store = store
        self.actor = actor
        self.access = access
        self.supports_ttl = store.supports_ttl

    def _check(self, ops: list[Op]) -> None:
        reads, writes = [], []
        for op in ops:
            if isinstance(op, GetOp):
                reads.append(check_namespace(op.namespace))
            elif isinstance(op, PutOp):
                writes.append(check_namespace(op.namespace))
            elif isinstance(op, SearchOp):
                prefix = check_namespace(op.namespace_prefix, allow_empty=True)
                if prefix:  # the empty prefix is filtered below instead
                    reads.append(prefix)
        self.access.check(self.actor, "read", reads)
        self.access.check(self.actor, "write", writes)

    def _filter(self, op: Op, result: Result) -> Result:
        if isinstance(op, SearchOp) and not op.namespace_prefix and isinstance(result, list):
            return [it for it in result if self.access.may_read(self.actor, tuple(it.namespace))]
        if isinstance(op, ListNamespacesOp) and isinstance(result, list):
            return [ns for ns in result if self.access.may_read(self.actor, tuple(ns))]
        return result

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._check(ops)
        return [self._filter(op, r) for op, r in zip(ops, self.store.batch(ops), strict=True)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))


__all__ = ["ActorStoreView"]
