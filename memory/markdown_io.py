"""Memories as Markdown a person can read, edit and import back: ``MEMORY.md`` and daily notes.

``MEMORY.md`` (:func:`render_memory_md`) has one section per memory type and one bullet per
memory, ending with its date and id::

    <!-- memctl:export namespace=user_profile/u1 exported_at=2026-01-07T08:00:00+00:00 sha256=… -->
    # Memory · user_profile/u1
    …
    ## user_profile

    - 以后报表都用万元为单位 · 2026-01-07 · `3f2a9c0d…`

Edit a bullet's text, move it to another type's section, delete it, or add a bullet without an
id, then import the file (:func:`plan_import` + :func:`apply_import`): every change goes through
the manager's normal write path (edits: ``update``; new bullets: ``remember`` with its dedupe and
merge policy; deleted bullets: soft ``delete``, restorable), so each one is in the audit log.
A memory that changed in the store after the export is never overwritten or deleted by the
import (it is reported as a conflict); an id that is no longer in the store is not resurrected.

Daily notes (:func:`render_daily_notes`) are one ``YYYY-MM-DD.md`` file per UTC day listing what
the audit log says was written that day (added, merged, updated, superseded, deleted, restored).

Files are only written by :func:`write_guarded`, which never overwrites a file a person edited:
each file carries the SHA-256 of its body in its first line, and a file whose body no longer
matches is left alone unless ``force`` is given.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from memory.errors import InvalidInput, NotFound
from memory.namespace import Namespace, is_prefix, ns_key, parse_namespace
from memory.records import MEMORY_TYPES, MemoryRecord, as_utc, utcnow

_HEADER = re.compile(r"^<!--\s*memctl:(export|daily)\s+(.*?)\s*-->\s*$")
_TRAILER = re.compile(r"(?:\s+·\s+(\d{4}-\d{2}-\d{2}))?\s+·\s+`([^`\s]+)`\s*$")
_BULLET = re.compile(r"^[-*+]\s+(.*)$")
IMPORT_SOURCE = "markdown"
DAILY_ACTIONS = ("add", "merge", "update", "supersede", "delete", "restore")


def _sha(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def _with_header(kind: str, fields: dict[str, str], body: str) -> str:
    attrs = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"<!-- memctl:{kind} {attrs} sha256={_sha(body)} -->\n{body}"


def _header(text: str) -> tuple[str, dict[str, str], str] | None:
    """(kind, fields, body) of a file written by memctl, or None."""
    first, _, body = text.partition("\n")
    m = _HEADER.match(first)
    if not m:
        return None
    fields = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
    return m.group(1), fields, body


def _type_order(t: str) -> tuple[int, str]:
    return (MEMORY_TYPES.index(t) if t in MEMORY_TYPES else len(MEMORY_TYPES), t)


def _bullet(r: MemoryRecord) -> str:
    lines = r.content.splitlines() or [""]
    lines[-1] = f"{lines[-1]} · {r.updated_at:%Y-%m-%d} · `{r.id}`"
    # Continuation lines are indented so the bullet stays one list item (and parses back).
    return "\n".join([f"- {lines[0]}", *(f"  {x}" if x.strip() else "  " for x in lines[1:])])


def render_memory_md(records: Sequence[MemoryRecord], namespace: str, *, now: datetime | None = None) -> str:
    """``MEMORY.md`` for the current memories under ``namespace`` (sections per type)."""
    ns = parse_namespace(namespace)
    now = as_utc(now) if now is not None else utcnow()
    by_type: dict[str, list[MemoryRecord]] = defaultdict(list)
    for r in records:
        by_type[r.metadata.type].append(r)
    nss = {r.namespace for r in records}
    out = [f"# Memory · {ns_key(ns)}", "",
           f"Exported {now:%Y-%m-%d %H:%M} UTC by `memctl export`: {len(records)} memories. Edit a bullet's text, "
           "move it to another section, delete it, or add a bullet, then run `memctl import` on this file. "
           "The date and id at the end of a bullet tie it to its memory: keep them when you edit."]
    for t in sorted(by_type, key=_type_order):
        out += ["", f"## {t}"]
        group: dict[Namespace, list[MemoryRecord]] = defaultdict(list)
        for r in by_type[t]:
            group[r.namespace].append(r)
        for n in sorted(group):
            if len(nss) > 1:  # a prefix spanning several namespaces: say where each bullet lives
                out += ["", f"### {ns_key(n)}"]
            out.append("")
            out += [_bullet(r) for r in sorted(group[n], key=lambda r: (r.created_at, r.id))]
    body = "\n".join(out) + "\n"
    return _with_header("export", {"namespace": ns_key(ns), "exported_at": now.isoformat()}, body)


@dataclass(frozen=True)
class Bullet:
    content: str
    type: str
    namespace: Namespace
    id: str | None
    line: int


@dataclass(frozen=True)
class ParsedExport:
    namespace: Namespace
    exported_at: datetime | None
    bullets: tuple[Bullet, ...]


def parse_memory_md(text: str, namespace: str | None = None) -> ParsedExport:
    """Read an exported (and maybe edited) ``MEMORY.md``.

    Args:
        text: the file.
        namespace: where new bullets go when the file has no ``memctl:export`` header; must
            match the header's namespace when it has one.

    Raises:
        InvalidInput: no namespace, a bad ``###`` namespace, a bullet outside a type section,
            or the same id twice (nothing is imported).
    """
    text = text.removeprefix("\ufeff")  # a byte-order mark (Windows Notepad) would hide the header
    head = _header(text)
    if head and head[0] == "daily":  # its "- 15:51 add (agent): text · `id`" lines would overwrite those memories
        raise InvalidInput("this is a daily note (a log written by `memctl export --daily`), not a MEMORY.md; "
                           "write one with `memctl export --ns NS`, edit it and import that")
    fields = head[1] if head and head[0] == "export" else {}
    file_ns = fields.get("namespace")
    if file_ns and namespace and parse_namespace(file_ns) != parse_namespace(namespace):
        raise InvalidInput(f"the file was exported from {file_ns!r}, not {namespace!r}; drop --ns or fix it")
    ns_raw = file_ns or namespace
    if not ns_raw:
        raise InvalidInput("the file has no `memctl:export` header; say where its memories go with --ns NS")
    ns = parse_namespace(ns_raw)
    exported_at = None
    if fields.get("exported_at"):
        try:
            exported_at = as_utc(fields["exported_at"])
        except ValueError:
            raise InvalidInput(f"bad exported_at {fields['exported_at']!r} in the header; re-export the file") from None
    lines = (head[2] if head else text).splitlines()
    offset = 2 if head else 1
    bullets: list[Bullet] = []
    mtype: str | None = None
    cur_ns = ns
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## ") and not line.startswith("### "):
            mtype, cur_ns = line[3:].strip(), ns
        elif line.startswith("### "):
            try:
                cur_ns = parse_namespace(line[4:].strip())
            except InvalidInput as exc:
                raise InvalidInput(f"line {i + offset}: {exc}") from None
            if not is_prefix(ns, cur_ns):
                raise InvalidInput(f"line {i + offset}: namespace {ns_key(cur_ns)!r} is not under {ns_key(ns)!r}")
        elif m := _BULLET.match(line):
            start = i
            body = [m.group(1)]
            while i + 1 < len(lines):
                nxt = lines[i + 1]
                if nxt.startswith("  "):
                    body.append(nxt[2:])
                elif not nxt.strip() and i + 2 < len(lines) and lines[i + 2].startswith("  ") and lines[i + 2].strip():
                    body.append("")
                else:
                    break
                i += 1
            if not mtype:
                raise InvalidInput(f"line {start + offset}: a bullet before any `## type` section; move it under one")
            last = body[-1]
            t = _TRAILER.search(last)
            mid = t.group(2) if t else None
            if t:
                body[-1] = last[: t.start()]
            content = "\n".join(body).strip()
            if content:
                bullets.append(Bullet(content, mtype, cur_ns, mid, start + offset))
        i += 1
    seen: dict[str, int] = {}
    for b in bullets:
        if b.id is not None and b.id in seen:
            raise InvalidInput(f"lines {seen[b.id]} and {b.line} carry the same id {b.id}; keep one of them")
        if b.id is not None:
            seen[b.id] = b.line
    return ParsedExport(ns, exported_at, tuple(bullets))


def check_bullets(bullets: Iterable[Bullet], max_chars: int) -> None:
    """Refuse the file when any bullet would be refused by the write path (too long, NUL, blank,
    a type heading the metadata cannot hold), before anything is written: an import stopped half
    way leaves its first edits applied, and they then show as conflicts when it is run again.

    Raises:
        InvalidInput: naming the line of each bad bullet (the first five).
    """
    from memory.service import check_content_size, clean_content, coerce_metadata

    problems: list[str] = []
    for b in bullets:
        try:
            check_content_size(b.content, max_chars)
            clean_content(b.content, max_chars)
            coerce_metadata({"type": b.type})
        except InvalidInput as exc:
            problems.append(f"line {b.line}: {exc}")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise InvalidInput("; ".join(problems[:5]) + more + "; fix the file, nothing was imported")


@dataclass
class ImportPlan:
    """What importing a file would do; :func:`apply_import` carries it out."""

    namespace: Namespace
    add: list[Bullet] = field(default_factory=list)
    update: list[tuple[Bullet, MemoryRecord]] = field(default_factory=list)
    remove: list[MemoryRecord] = field(default_factory=list)
    unchanged: int = 0
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": ns_key(self.namespace), "add": [b.content for b in self.add],
                "update": [{"id": r.id, "before": r.content, "after": b.content, "type": b.type}
                           for b, r in self.update],
                "remove": [{"id": r.id, "content": r.content} for r in self.remove],
                "unchanged": self.unchanged, "conflicts": self.conflicts}


def touched_since(audit: Any, namespace: Namespace, since: datetime | None) -> set[str]:
    """Ids of memories under ``namespace`` the audit log shows written to after ``since``
    (updated, merged, restored, ...): an import leaves those alone."""
    if since is None:
        return set()
    return {e.memory_id for e in audit.events(namespace=namespace, limit=10**9)
            if e.memory_id and e.action != "search" and e.ts > since}


def plan_import(parsed: ParsedExport, current: Iterable[MemoryRecord], touched: set[str] | frozenset[str] = frozenset()
                ) -> ImportPlan:
    """Compare the file with the store's current memories under its namespace.

    ``touched``: ids written to after the export by other means than their ``updated_at`` shows
    (e.g. restored from the trash; see :func:`touched_since`); they count as changed since.
    """
    plan = ImportPlan(parsed.namespace)
    live = {r.id: r for r in current if is_prefix(parsed.namespace, r.namespace)}
    since = parsed.exported_at

    def changed(r: MemoryRecord) -> bool:
        return since is not None and (r.updated_at > since or r.id in touched)

    in_file: set[str] = set()
    for b in parsed.bullets:
        if b.id is None:
            plan.add.append(b)
            continue
        in_file.add(b.id)
        r = live.get(b.id)
        if r is None:
            plan.conflicts.append(f"line {b.line}: memory {b.id} is no longer in {ns_key(parsed.namespace)} "
                                  "(deleted or superseded since the export); bullet skipped — remove its id to "
                                  "add it as a new memory")
            continue
        if b.content == r.content and b.type == r.metadata.type:
            plan.unchanged += 1
            continue
        if b.namespace != r.namespace:
            plan.conflicts.append(f"line {b.line}: memory {b.id} lives in {ns_key(r.namespace)}, not "
                                  f"{ns_key(b.namespace)}; moving memories between namespaces is not supported")
            continue
        if changed(r):
            plan.conflicts.append(f"line {b.line}: memory {b.id} changed in the store after the export; "
                                  "your edit was not applied — export again and redo it")
            continue
        plan.update.append((b, r))
    for mid, r in live.items():
        if mid in in_file or since is None:
            continue  # without an export time we cannot know what the file left out on purpose
        if changed(r):
            continue  # written after the export: not in the file because it did not exist yet (or came back)
        plan.remove.append(r)
    return plan


@dataclass
class ImportResult:
    added: list[dict[str, str]] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "updated": self.updated, "removed": self.removed,
                "unchanged": self.unchanged, "conflicts": self.conflicts}


def apply_import(manager: Any, plan: ImportPlan, *, source_name: str, actor: Any = None) -> ImportResult:
    """Carry out a plan through the manager's write path (each change audited).

    New bullets go through ``remember`` (so a bullet that restates a stored memory merges with
    it, and the result status says so); edits through ``update``; removals are soft deletes.
    """
    from memory.policy.audit import AuditEvent
    from memory.policy.manager import Actor

    check_bullets([*(b for b, _ in plan.update), *plan.add], manager.settings.max_content_chars)
    actor = actor or Actor(agent="memctl:import")
    why = f"markdown import: {source_name}"
    res = ImportResult(unchanged=plan.unchanged, conflicts=list(plan.conflicts))
    for b, r in plan.update:
        meta = None
        if b.type != r.metadata.type:
            meta = r.metadata.model_copy(update={"type": b.type}).model_dump()
        try:
            manager.update(r.id, b.content if b.content != r.content else None, meta, actor=actor, reason=why)
        except NotFound:
            res.conflicts.append(f"line {b.line}: memory {r.id} disappeared during the import; skipped")
            continue
        res.updated.append(r.id)
    for b in plan.add:
        w = manager.remember(b.content, b.namespace, {"type": b.type, "source": IMPORT_SOURCE}, actor=actor,
                             reason=why)
        res.added.append({"id": w.id, "status": w.status, "content": b.content})
    if plan.remove:
        manager.delete([r.id for r in plan.remove], actor=actor, reason=f"{why}: bullet deleted")
        res.removed = [r.id for r in plan.remove]
    manager.audit.record(AuditEvent("import", None, ns_key(plan.namespace), actor.agent, reason=why, details={
        "added": len(res.added), "updated": len(res.updated), "removed": len(res.removed),
        "unchanged": res.unchanged, "conflicts": len(res.conflicts)}))
    return res


def render_daily_notes(events: Iterable[Any]) -> dict[str, str]:
    """``{"YYYY-MM-DD": markdown}``: what the audit ``events`` say was written each (UTC) day."""
    days: dict[str, list[Any]] = defaultdict(list)
    for e in events:
        if e.action in DAILY_ACTIONS and e.namespace:
            days[f"{e.ts:%Y-%m-%d}"].append(e)
    out: dict[str, str] = {}
    for day, evs in sorted(days.items()):
        lines = [f"# {day}", "", f"What was written to memory on {day} (UTC), from the audit log.", ""]
        by_ns: dict[str, list[Any]] = defaultdict(list)
        for e in sorted(evs, key=lambda e: (e.ts, e.seq or 0)):
            by_ns[e.namespace].append(e)
        for n in sorted(by_ns):
            lines += [f"## {n}", ""]
            for e in by_ns[n]:
                rec = e.after or e.before or {}
                text = " ".join(str(rec.get("content") or e.reason or "").split())
                who = f" ({e.actor})" if e.actor else ""
                lines.append(f"- {e.ts:%H:%M} {e.action}{who}: {text} · `{e.memory_id}`")
            lines.append("")
        body = "\n".join(lines).rstrip("\n") + "\n"
        out[day] = _with_header("daily", {"date": day}, body)
    return out


WriteStatus = Literal["written", "unchanged", "edited"]


def write_guarded(path: Path, text: str, *, force: bool = False) -> WriteStatus:
    """Write ``text`` unless ``path`` holds something a person wrote or edited.

    Returns ``"unchanged"`` when the file already says exactly this, ``"written"`` when it was
    written, ``"edited"`` (and writes nothing) when the existing file is not ours or its body
    no longer matches the checksum we wrote — unless ``force``.
    """
    if path.exists():
        if path.is_file():
            with path.open("rb") as fh:  # a store, a transcript: --force must never turn it into Markdown
                if fh.read(16) == b"SQLite format 3\x00":
                    raise InvalidInput(f"{path} is an SQLite database, not a Markdown file; choose another --out")
        try:
            old = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            old = None
        if old == text:
            return "unchanged"
        head = _header(old) if old is not None else None
        ours = head is not None and f"sha256={_sha(head[2])}" in old.partition("\n")[0]  # type: ignore[union-attr]
        if not ours and not force:
            return "edited"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # atomic: a reader never sees half a file
    return "written"


__all__ = ["Bullet", "ImportPlan", "ImportResult", "ParsedExport", "apply_import", "check_bullets", "parse_memory_md",
           "plan_import", "render_daily_notes", "render_memory_md", "touched_since", "write_guarded"]
