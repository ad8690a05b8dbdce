"""Split a Markdown file into chunks by heading and paragraph, with stable ids and line ranges.

Pure functions, no I/O (the indexer is :mod:`memory.collections`). A file is read as a list of
blocks — paragraphs, lists, tables, block quotes, fenced code — separated by blank lines and
grouped under their heading path (``# A`` / ``## B`` → ``("A", "B")``). Consecutive blocks of
one section are packed into a chunk up to ``max_chars``; a block is never cut unless it alone is
longer than that (then it is split between lines). A chunk's ``text`` is the file's own lines,
verbatim, so a quoted passage of the file is found in it as written and ``line_start`` cites it.

The chunk's id is derived from (collection, path, heading path, number of the chunk within its
section): editing one section leaves every other section's ids unchanged, and the same file
indexed twice gives the same ids.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

DEFAULT_MAX_CHARS = 800
HEADING_SEP = " › "

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_INLINE = re.compile(r"[*_`]+|\[([^\]]*)\]\([^)]*\)")
_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")  # a thematic break: separates blocks


@dataclass(frozen=True, slots=True)
class Block:
    """Lines ``start``..``end`` (0-based, inclusive) of one paragraph/list/table/code block."""

    start: int
    end: int
    headings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece of a file. Line numbers are 1-based and inclusive (for citing)."""

    id: str
    text: str
    headings: tuple[str, ...]
    number: int  # position of the chunk within its section (0, 1, ...)
    line_start: int
    line_end: int
    title: str

    @property
    def heading(self) -> str:
        return HEADING_SEP.join(self.headings)

    def context(self, path: str) -> str:
        """Retrieval context: the file's title and the chunk's heading path, and the file path
        as words (``wiki/metrics/gmv.md`` → ``wiki metrics gmv``). Indexed with the chunk (see
        :func:`memory.records.index_text`), not part of its text."""
        words = " ".join(re.split(r"[/_.\-\s]+", str(PurePosixPath(path).with_suffix("")))).strip()
        parts = [self.title, *self.headings[1:]] if self.headings[:1] == (self.title,) else [self.title, *self.headings]
        return f"{HEADING_SEP.join(p for p in parts if p)} ({words})"


def _clean_heading(text: str) -> str:
    """Heading text without inline markup: ``**GMV** [link](x)`` → ``GMV link``."""
    return " ".join(_INLINE.sub(lambda m: m.group(1) or "", text).split())


def _front_matter_end(lines: list[str]) -> int:
    """Index of the first line after a leading YAML front matter block (0 when there is none)."""
    if lines and lines[0].strip() == "---":
        for i in range(1, len(lines)):
            if lines[i].strip() in ("---", "..."):
                return i + 1
    return 0


def parse_blocks(text: str) -> tuple[list[str], list[Block], str | None]:
    """The file's lines, its blocks under their heading paths, and its first level-1 heading.

    Headings inside fenced code are code; a Setext heading (a line underlined with ``===`` or
    ``---``) counts as a heading; YAML front matter is skipped.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []  # (level, text)
    title: str | None = None
    cur: int | None = None  # start of the open block
    fence: str | None = None

    def headings() -> tuple[str, ...]:
        return tuple(t for _, t in stack)

    def close(end: int) -> None:
        nonlocal cur
        if cur is not None and end >= cur:
            blocks.append(Block(cur, end, headings()))
        cur = None

    def push(level: int, raw: str) -> None:
        nonlocal title
        h = _clean_heading(raw)
        while stack and stack[-1][0] >= level:
            stack.pop()
        if h:
            stack.append((level, h))
            if level == 1 and title is None:
                title = h

    i = _front_matter_end(lines)
    while i < len(lines):
        line = lines[i]
        if fence is not None:  # inside fenced code: only the closing fence matters
            if line.lstrip().startswith(fence):
                fence = None
            i += 1
            continue
        m = _FENCE.match(line)
        if m:
            if cur is None:
                cur = i
            fence = m.group(1)[0] * len(m.group(1))
            i += 1
            continue
        if not line.strip() or (cur is None and _BREAK.match(line)):
            close(i - 1)
            i += 1
            continue
        h = _ATX.match(line)
        if h:
            close(i - 1)
            push(len(h.group(1)), h.group(2) or "")
            i += 1
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        st = _SETEXT.match(nxt)
        if st and cur is None and not line.lstrip().startswith(("-", "*", "+", ">", "|")):
            push(1 if st.group(1)[0] == "=" else 2, line.strip())
            i += 2
            continue
        if cur is None:
            cur = i
        i += 1
    close(len(lines) - 1)
    return lines, blocks, title


def _split_long(lines: list[str], start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """Cut one oversized block between lines into pieces of at most ``max_chars`` (a single
    longer line stays whole)."""
    pieces: list[tuple[int, int]] = []
    s, size = start, 0
    for i in range(start, end + 1):
        n = len(lines[i]) + 1
        if size and size + n > max_chars:
            pieces.append((s, i - 1))
            s, size = i, 0
        size += n
    pieces.append((s, end))
    return pieces


def chunk_id(collection: str, path: str, headings: tuple[str, ...], number: int) -> str:
    """Stable id of a chunk: the same (collection, path, heading path, number) always gives it."""
    key = "\x1f".join([collection, path, *headings]) + f"\x1e{number}"
    return "md" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:30]


def chunk_markdown(text: str, path: str, collection: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> list[Chunk]:
    """Chunks of one file, in file order.

    Args:
        text: the file's content.
        path: its path inside the collection (posix, relative): part of every chunk id.
        collection: the collection's name: part of every chunk id.
        max_chars: consecutive blocks of one section are packed up to this many characters.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be >= 1")
    lines, blocks, title = parse_blocks(text)
    title = title or PurePosixPath(path).stem
    # Pieces (line ranges) per section, in order; oversized blocks split between lines.
    spans: list[tuple[tuple[str, ...], int, int]] = []
    for b in blocks:
        size = sum(len(lines[i]) + 1 for i in range(b.start, b.end + 1))
        for s, e in (_split_long(lines, b.start, b.end, max_chars) if size > max_chars else [(b.start, b.end)]):
            spans.append((b.headings, s, e))
    chunks: list[Chunk] = []
    numbers: dict[tuple[str, ...], int] = {}
    group: list[tuple[int, int]] = []
    group_heads: tuple[str, ...] | None = None

    def flush() -> None:
        nonlocal group
        if not group or group_heads is None:
            return
        s, e = group[0][0], group[-1][1]
        body = "\n".join(lines[s: e + 1]).strip()
        if body:
            n = numbers.get(group_heads, 0)
            numbers[group_heads] = n + 1
            chunks.append(Chunk(chunk_id(collection, path, group_heads, n), body, group_heads, n, s + 1, e + 1,
                                title or ""))
        group = []

    size = 0
    for heads, s, e in spans:
        n = sum(len(lines[i]) + 1 for i in range(s, e + 1))
        if heads != group_heads or (group and size + n > max_chars):
            flush()
            group_heads, size = heads, 0
        group.append((s, e))
        size += n
    flush()
    return chunks


__all__ = ["DEFAULT_MAX_CHARS", "HEADING_SEP", "Block", "Chunk", "chunk_id", "chunk_markdown", "parse_blocks"]
