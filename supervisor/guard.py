"""Sub-agents never reach memory: tools are judged by what they can do, and runs get no store.

Two walls, because either alone has holes:

* **At build time** (:func:`memory_reach`): a sub-agent's tool is refused when it can reach
  memory, whatever its name — langmem's ``manage_memory`` / ``search_memory`` (any name: their
  functions live in ``langmem``), a tool with an injected store argument (``InjectedStore``, a
  ``BaseStore``-typed parameter), a tool whose code calls ``get_store()``, and a tool bound to a
  memory object (a LangGraph ``BaseStore`` such as our ``MemoryStore``, a ``MemoryManager``,
  ``MemoryService``, ``AuditLog`` or a backend) through its closure, its defaults, a bound method,
  ``functools.partial`` or its own attributes.
* **At run time** (:func:`subagent_config`): when the graph was compiled with a store (Studio,
  ``langgraph.json``, ``graph.compile(store=...)``), a sub-agent runs with a runtime whose store is
  :class:`NoStore`, a view that refuses every operation with :class:`MemoryAccessDenied`; so
  ``get_store()``, ``runtime.store`` and ``ToolRuntime.store`` inside the agent cannot read or write
  memory, however the tool was written.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.store.base import BaseStore

from memory.errors import MemoryLayerError

_CONF = "configurable"
_RUNTIME_KEY = "__pregel_runtime"
_MEMORY_TYPES: tuple[str, ...] = ("MemoryManager", "MemoryService", "MemoryStore", "AuditLog")


class MemoryAccessDenied(MemoryLayerError, PermissionError):
    """A sub-agent tried to reach the memory store; memory belongs to the Supervisor."""


class NoStore(BaseStore):
    """The store a sub-agent sees: every operation raises :class:`MemoryAccessDenied`."""

    def __init__(self, agent: str):
        self.agent = agent

    def _deny(self) -> MemoryAccessDenied:
        return MemoryAccessDenied(
            f"sub-agent {self.agent!r} tried to use the memory store; only the Supervisor's memory nodes read and "
            "write memory. Give the agent what it needs through the injected context (the pre-handoff node), "
            "or return statements in AgentResult.memory_items for the post-handoff node to store."
        )

    def batch(self, ops: Iterable[Any]) -> list[Any]:
        raise self._deny()

    async def abatch(self, ops: Iterable[Any]) -> list[Any]:
        raise self._deny()


def _is_memory_object(obj: Any) -> str | None:
    if isinstance(obj, BaseStore) and not isinstance(obj, NoStore):
        return f"is bound to a store ({type(obj).__name__})"
    t = type(obj)
    mod = getattr(t, "__module__", "") or ""
    if mod.startswith("memory.") and (t.__name__ in _MEMORY_TYPES or mod.startswith("memory.backends")):
        return f"is bound to the memory layer ({t.__name__})"
    return None


def _annotation_reaches_store(ann: Any) -> bool:
    for part in (ann, *typing.get_args(ann)):
        if part is BaseStore or (isinstance(part, type) and issubclass(part, BaseStore)):
            return True
        if type(part).__name__ == "InjectedStore" or part.__class__.__name__ == "InjectedStore":
            return True
        if getattr(part, "__origin__", None) is typing.Annotated and _annotation_reaches_store(part):
            return True
    return False


def _calls_get_store(code: types.CodeType) -> bool:
    if "get_store" in code.co_names:
        return True
    return any(isinstance(c, types.CodeType) and _calls_get_store(c) for c in code.co_consts)


def _functions(tool: Any) -> Iterator[Any]:
    for name in ("func", "coroutine", "_run", "_arun"):
        f = getattr(tool, name, None)
        if f is not None:
            yield f


def _unwrap(f: Any) -> Any:
    while isinstance(f, functools.partial):
        f = f.func
    return inspect.unwrap(f) if callable(f) else f


def _walk(obj: Any, depth: int, seen: set[int]) -> str | None:
    """Look for a memory object reachable from ``obj`` (closures, defaults, partials, attributes)."""
    if depth < 0 or id(obj) in seen or obj is None or isinstance(obj, str | bytes | int | float | bool | type):
        return None
    seen.add(id(obj))
    hit = _is_memory_object(obj)
    if hit:
        return hit
    children: list[Any] = []
    if isinstance(obj, functools.partial):
        children += [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, types.MethodType):
        children += [obj.__self__, obj.__func__]
    elif isinstance(obj, types.FunctionType):
        children += [c.cell_contents for c in (obj.__closure__ or ()) if _filled(c)]
        children += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
        children += [obj.__globals__[n] for n in obj.__code__.co_names
                     if n in obj.__globals__ and not isinstance(obj.__globals__[n], types.ModuleType)
                     and _is_memory_object(obj.__globals__[n])]
    elif isinstance(obj, dict):
        children += list(obj.values())[:50]
    elif isinstance(obj, list | tuple | set | frozenset):
        children += list(obj)[:50]
    elif hasattr(obj, "__dict__") and not isinstance(obj, types.ModuleType):
        children += [v for k, v in vars(obj).items() if not k.startswith("__")][:50]
    for c in children:
        hit = _walk(c, depth - 1, seen)
        if hit:
            return hit
    return None


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises ValueError
    except ValueError:
        return False
    return True


def memory_reach(tool: Any) -> str | None:
    """Why ``tool`` can reach memory, or None. Judged by what it does, not by its name."""
    name = str(getattr(tool, "name", "") or "")
    if name.startswith("memory"):
        return "is a memory tool (memory_*)"
    for f in _functions(tool):
        g = _unwrap(f)
        mod = getattr(g, "__module__", "") or ""
        if mod.startswith("langmem"):
            return f"is a langmem memory tool ({mod}.{getattr(g, '__name__', '?')})"
        if mod.startswith("memory.policy.tools"):
            return "is one of the Supervisor's memory tools"
        try:
            hints = typing.get_type_hints(g, include_extras=True)
        except Exception:  # noqa: BLE001 - unresolvable forward refs: fall back to raw annotations
            hints = dict(getattr(g, "__annotations__", {}) or {})
        for pname, ann in hints.items():
            if pname != "return" and _annotation_reaches_store(ann):
                return f"takes an injected store ({pname})"
        code = getattr(g, "__code__", None)
        if isinstance(code, types.CodeType) and _calls_get_store(code):
            return "calls get_store()"
    schema = getattr(tool, "args_schema", None)
    fields = getattr(schema, "model_fields", None) if isinstance(schema, type) else None
    for fname, finfo in (fields or {}).items():
        if _annotation_reaches_store(finfo.annotation) or any(
                type(m).__name__ == "InjectedStore" for m in finfo.metadata):
            return f"takes an injected store ({fname})"
    hit = _walk(tool, 4, set())
    if hit:
        return hit
    return None


def check_agent_tools(agent_name: str, tools: Iterable[Any]) -> None:
    """Raise ``ValueError`` naming every tool of ``agent_name`` that can reach memory."""
    bad = [(getattr(t, "name", repr(t)), why) for t in tools for why in [memory_reach(t)] if why]
    if bad:
        listed = "; ".join(f"{n!r} {why}" for n, why in bad)
        raise ValueError(
            f"sub-agent {agent_name} has memory tools (tools that can reach memory): {listed}. "
            "Memory belongs to the Supervisor: remove these tools from the agent (the Supervisor injects what "
            "the agent needs, and stores what it returns in AgentResult.memory_items)."
        )


def subagent_config(config: RunnableConfig | None, agent: str) -> RunnableConfig:
    """``config`` for a sub-agent's run: its runtime's store replaced by :class:`NoStore`."""
    cfg: RunnableConfig = dict(config or {})  # type: ignore[assignment]
    conf = dict(cfg.get(_CONF) or {})
    runtime = conf.get(_RUNTIME_KEY)
    deny = NoStore(agent)
    if runtime is not None and hasattr(runtime, "override"):
        conf[_RUNTIME_KEY] = runtime.override(store=deny)
    else:
        from langgraph.runtime import Runtime

        conf[_RUNTIME_KEY] = Runtime(context=getattr(runtime, "context", None), store=deny)
    conf.pop("__pregel_store", None)  # older LangGraph kept the store here
    cfg[_CONF] = conf  # type: ignore[typeddict-unknown-key]
    return cfg


@contextmanager
def without_store(config: RunnableConfig | None, agent: str) -> Iterator[RunnableConfig]:
    """Run a block as sub-agent ``agent``: ``get_config()`` / ``get_store()`` inside see :class:`NoStore`."""
    cfg = subagent_config(config, agent)
    token = var_child_runnable_config.set(cfg)
    try:
        yield cfg
    finally:
        var_child_runnable_config.reset(token)


__all__ = ["MemoryAccessDenied", "NoStore", "check_agent_tools", "memory_reach", "subagent_config", "without_store"]
