"""``memctl mcp``: the memory store as an MCP server (stdio, or streamable HTTP), on the official SDK.

Progressive disclosure, as in claude-mem: ``search`` answers with one compact line per hit
(short id, score, date, namespace, first line — a few tokens each), ``timeline`` shows what was
written around a memory or a date in the same form, and only ``get`` returns full records.
``save`` writes through the write policy (dedupe, conflict merge, PII redaction; the answer says
added / merged / updated / skipped) and ``forget`` soft-deletes (restorable with ``memctl
restore``). Every tool is confined to the namespaces the server was started with (``--ns``,
prefixes on label boundaries): a server for ``user_profile/u1`` never reads, writes or deletes
in ``user_profile/u12``, and answers about an id outside its scope exactly as about an unknown id.

:class:`ScopedMemory` holds the logic (testable without MCP); :func:`build_server` wraps it in an
``MCPServer``. ``memory/`` never imports this module or the SDK.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from memory.disclosure import first_line
from memory.errors import InvalidInput, MemoryLayerError, NotFound
from memory.namespace import Namespace, is_prefix, ns_key, parse_namespace
from memory.records import MemoryRecord, as_utc, record_to_dict

SHORT_ID = 12  # characters of an id shown in compact lines (get/forget/timeline accept them)
DOCS = "docs"

INSTRUCTIONS = """Long-term memory. Disclose progressively: `search` first (one compact line per hit:
id, score, date, namespace, first line), then `timeline` around an interesting hit or a date, and
`get` only for the ids whose full text you need. `save` stores a fact (deduplicated and merged with
what is stored: the reply says added, merged, updated or skipped); `forget` removes one (restorable).
Markdown notes (namespaces docs/...) cite file:line and are read-only."""


def compact_line(r: MemoryRecord, score: float | None = None, when: str = "%Y-%m-%d", short: str | None = None
                 ) -> str:
    """``id score date namespace [path:line] first-line`` — what search and timeline show per memory."""
    from memory.collections import citation

    parts = [short or r.id[:SHORT_ID]]
    if score is not None:
        parts.append(f"{score:.2f}")
    parts += [f"{r.updated_at:{when}}", ns_key(r.namespace)]
    if citation(r):
        parts.append(f"{r.metadata.extra.get('path')}:{r.metadata.extra.get('line_start')}")
    parts.append(first_line(r.content))
    return " ".join(parts)


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters: the error goes back into
    a model's context, and an id of 100,000 characters need not come back whole."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


class ScopedMemory:
    """The memory operations an MCP client may use, confined to ``scopes`` (namespace prefixes).

    Args:
        manager: a :class:`memory.policy.manager.MemoryManager` (owned by the caller).
        scopes: namespace prefixes this client may use, e.g. ``["user_profile/u1"]``.
    """

    def __init__(self, manager: Any, scopes: Sequence[str | Namespace]):
        from memory.policy.manager import Actor

        if not scopes:
            raise InvalidInput("give at least one --ns: the namespaces this server may read and write")
        self.mm = manager
        self.scopes: tuple[Namespace, ...] = tuple(dict.fromkeys(parse_namespace(s) for s in scopes))
        self.actor = Actor(agent="mcp")
        self._issued: dict[str, str] = {}  # short id -> full id, for ids this server handed out
        self._lock = threading.Lock()  # tool calls run on worker threads; the store is used by one at a time

    # ------------------------------------------------------------------ scope
    def in_scope(self, ns: Namespace) -> bool:
        return any(is_prefix(s, ns) for s in self.scopes)

    def _namespaces(self, namespace: str | None) -> list[Namespace]:
        if namespace is None or not namespace.strip():
            return list(self.scopes)
        ns = parse_namespace(namespace)
        if not self.in_scope(ns):
            raise InvalidInput(f"namespace {_shown(namespace)} is outside this server's scope; use one under "
                               f"{', '.join(ns_key(s) for s in self.scopes)}")
        return [ns]

    def _short(self, rid: str) -> str:
        short = rid[:SHORT_ID]
        if self._issued.setdefault(short, rid) != rid:  # two ids share a prefix: show the full one
            return rid
        return short

    def _resolve(self, ids: Sequence[str]) -> tuple[list[MemoryRecord], list[str]]:
        """In-scope records for ``ids`` (full or short), and the ids that are unknown or out of scope."""
        if isinstance(ids, str):
            ids = [ids]
        if not ids or not all(isinstance(i, str) and i.strip() for i in ids):
            raise InvalidInput("give one or more memory ids (as shown by search or timeline)")
        full = {i: self._issued.get(i.strip(), i.strip()) for i in ids}
        found = {r.id: r for r in self.mm.service.backend.get(list(dict.fromkeys(full.values())))
                 if self.in_scope(r.namespace)}
        return ([found[f] for f in dict.fromkeys(full.values()) if f in found],
                [i for i, f in full.items() if f not in found])

    # ------------------------------------------------------------------ compact lines
    def _line(self, r: MemoryRecord, score: float | None = None, when: str = "%Y-%m-%d") -> str:
        return compact_line(r, score, when, self._short(r.id))

    # ------------------------------------------------------------------ tools
    def search(self, query: str, k: int = 5, namespace: str | None = None, type: str | None = None) -> str:
        if not isinstance(k, int) or not 1 <= k <= 50:
            raise InvalidInput("k must be between 1 and 50")
        with self._lock:
            hits = self.mm.recall(query, self._namespaces(namespace), top_k=k,
                                  filter={"type": type} if type else None, actor=self.actor)
            if not hits:
                return "no memories matched"
            return "\n".join(self._line(h.record, h.score) for h in hits)

    def timeline(self, id: str | None = None, date: str | None = None, before: int = 3, after: int = 3,
                 namespace: str | None = None) -> str:
        if (id is None) == (date is None):
            raise InvalidInput("give either id (a memory from search) or date (YYYY-MM-DD)"
                               + (", not both" if id is not None else ""))
        if not (0 <= before <= 50 and 0 <= after <= 50):
            raise InvalidInput("before and after must be between 0 and 50")
        with self._lock:
            nss = self._namespaces(namespace)
            anchor: MemoryRecord | None = None
            if id is not None:
                found, missing = self._resolve([id])
                if missing:
                    raise NotFound(f"no memory {_shown(id)} in this server's scope; use an id from search")
                anchor = found[0]
                t = anchor.updated_at
            else:
                # Parse the form first, then the range: an ISO date the store cannot hold (0001-01-01) is not
                # a malformed one, and each gets its own remedy (not a match on an exception's wording).
                try:
                    parsed = datetime.fromisoformat(str(date))
                except ValueError:
                    raise InvalidInput(f"date {_shown(str(date))} is not YYYY-MM-DD or an ISO timestamp") from None
                try:
                    t = as_utc(parsed)  # the parsed value: only its zone and range are left to check
                except InvalidInput:
                    raise InvalidInput(f"date {_shown(str(date))} is out of range; use a date between year 1000 and "
                                       "year 9900") from None
            older = self._around(nss, t, before, older=True, exclude=anchor)
            newer = self._around(nss, t, after, older=False, exclude=anchor)
            lines = [f"  {self._line(r, when='%Y-%m-%d %H:%M')}" for r in reversed(older)]
            lines.append(f"→ {self._line(anchor, when='%Y-%m-%d %H:%M')}" if anchor else f"→ {t:%Y-%m-%d %H:%M}")
            lines += [f"  {self._line(r, when='%Y-%m-%d %H:%M')}" for r in newer]
            return "\n".join(lines)

    def _around(self, nss: list[Namespace], t: datetime, n: int, *, older: bool,
                exclude: MemoryRecord | None) -> list[MemoryRecord]:
        """The ``n`` memories written closest before (``older``) or at/after ``t``, nearest first."""
        if n == 0:
            return []
        skip = exclude.id if exclude else None
        if older:
            cands = [r for ns in nss for r in self.mm.service.list(
                ns, limit=n + 1, filter={"updated_at": {"$lte": t}}) if r.id != skip]
            return sorted(cands, key=lambda r: r.updated_at, reverse=True)[:n]
        # The store lists newest first: the n oldest after t are the last n of that list.
        flt: dict[str, Any] = {"updated_at": {"$gt": t}}
        cands = []
        for ns in nss:
            total = self.mm.service.backend.count(ns, filter=flt)
            cands += [r for r in self.mm.service.list(ns, limit=n + 1, offset=max(0, total - n - 1), filter=flt)
                      if r.id != skip]
        return sorted(cands, key=lambda r: r.updated_at)[:n]

    def get(self, ids: list[str]) -> str:
        from memory.collections import citation

        with self._lock:
            found, missing = self._resolve(ids)
        recs = []
        for r in found:
            d = record_to_dict(r)
            if citation(r):
                d["citation"] = citation(r)
                d["metadata"]["extra"].pop("context", None)  # derived from the file; the heading says it
            recs.append(d)
        return json.dumps({"memories": recs, "missing": missing}, ensure_ascii=False)

    def save(self, content: str, namespace: str | None = None, type: str | None = None,
             tags: list[str] | None = None) -> str:
        if namespace is None:
            writable = [s for s in self.scopes if s[0] != DOCS]  # docs/... are read-only
            if len(writable) != 1:
                raise InvalidInput("this server serves several namespaces; say which one with namespace=")
            ns = writable[0]
        else:
            ns = self._namespaces(namespace)[0]
        if ns[0] == DOCS:
            raise InvalidInput("docs/... namespaces hold indexed Markdown files (read-only); edit the file instead")
        meta: dict[str, Any] = {"source": "mcp", "tags": list(tags or [])}
        if type:
            meta["type"] = type
        with self._lock:
            res = self.mm.remember(content, ns, meta, actor=self.actor, reason="saved via MCP")
        return json.dumps({"status": res.status, "id": res.id, "namespace": ns_key(ns), "judgement": res.judgement,
                           "reason": res.reason, "superseded": list(res.superseded)}, ensure_ascii=False)

    def forget(self, id: str) -> str:
        with self._lock:
            found, missing = self._resolve([id])
            if missing:
                raise NotFound(f"no memory {_shown(id)} in this server's scope; use an id from search")
            r = found[0]
            if r.namespace[0] == DOCS:
                raise InvalidInput("this is a chunk of an indexed Markdown file; edit or delete the file, then "
                                   "`memctl index`")
            n = self.mm.delete([r.id], actor=self.actor, reason="forgotten via MCP")
        return json.dumps({"forgotten": r.id, "deleted": n, "restorable": True})


def build_server(scoped: ScopedMemory, *, log_level: str = "WARNING") -> Any:
    """An ``MCPServer`` with the five tools over ``scoped``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("memctl", instructions=INSTRUCTIONS + "\nScope: " + ", ".join(ns_key(s) for s in scoped.scopes),
                       log_level=log_level)  # type: ignore[arg-type]

    def call(fn: Any, *args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except MemoryLayerError as exc:  # bad input, unknown id, store failure: tell the model what to do
            raise ToolError(" ".join(str(exc).split())) from None

    @server.tool(structured_output=False)
    def search(query: Annotated[str, Field(description="question or keywords")],
               k: Annotated[int, Field(description="number of hits (1-50)")] = 5,
               namespace: Annotated[str | None, Field(description="narrow to one namespace in scope")] = None,
               type: Annotated[str | None, Field(description="only this memory type, e.g. user_profile, doc")] = None,
               ) -> str:
        """Hybrid search. One compact line per hit: id score date namespace [file:line] first-line."""
        return call(scoped.search, query, k, namespace, type)

    @server.tool(structured_output=False)
    def timeline(id: Annotated[str | None, Field(description="a memory id from search")] = None,
                 date: Annotated[str | None, Field(description="YYYY-MM-DD (instead of id)")] = None,
                 before: Annotated[int, Field(description="memories written before (0-50)")] = 3,
                 after: Annotated[int, Field(description="memories written after (0-50)")] = 3,
                 namespace: Annotated[str | None, Field(description="narrow to one namespace in scope")] = None,
                 ) -> str:
        """What was written around a memory or a date, oldest first, compact lines (→ marks the anchor)."""
        return call(scoped.timeline, id, date, before, after, namespace)

    @server.tool(structured_output=False)
    def get(ids: Annotated[list[str], Field(description="memory ids from search or timeline")]) -> str:
        """Full records (content, metadata, dates; file:line citation for Markdown notes) as JSON."""
        return call(scoped.get, ids)

    @server.tool(structured_output=False)
    def save(content: Annotated[str, Field(description="the fact to remember, one statement")],
             namespace: Annotated[str | None, Field(description="where (default: the server's one namespace)")] = None,
             type: Annotated[str | None, Field(description="memory type (default: from the namespace)")] = None,
             tags: Annotated[list[str] | None, Field(description="tags")] = None) -> str:
        """Remember through the write policy; returns status added / merged / updated / skipped and the id."""
        return call(scoped.save, content, namespace, type, tags)

    @server.tool(structured_output=False)
    def forget(id: Annotated[str, Field(description="memory id from search or timeline")]) -> str:
        """Soft-delete one memory (restorable with `memctl restore ID`)."""
        return call(scoped.forget, id)

    return server


def serve(manager: Any, scopes: Sequence[str], *, http_port: int | None = None, host: str = "127.0.0.1") -> None:
    """Run until the client disconnects (stdio) or the process is stopped (HTTP)."""
    server = build_server(ScopedMemory(manager, scopes))
    if http_port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=http_port)


__all__ = ["INSTRUCTIONS", "ScopedMemory", "build_server", "compact_line", "serve"]
