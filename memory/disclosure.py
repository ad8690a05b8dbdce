"""Progressive disclosure: memories as one compact line each, so a large memory set costs few tokens.

The same form serves the MCP server's ``search`` / ``timeline`` answers and the Supervisor's
injected context under ``policy.injection: compact`` (``full`` injects the bullet list of
:func:`memory.policy.summarize.summarize`, whole memories with date, type and source). A compact
line shows a memory's first line cut to ``LINE_CHARS`` characters, its date and the start of its
id; whoever needs more asks for the record by that id (the MCP ``get`` tool).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memory.records import SearchHit
from memory.text import count_tokens, tokenize

LINE_CHARS = 80
ID_CHARS = 8  # of the id in an injected line: enough to tell a handful of memories apart


def first_line(text: str, n: int = LINE_CHARS) -> str:
    """The first non-empty line, cut to ``n`` characters (``…`` marks a cut or further lines)."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    line = lines[0] if lines else ""
    if len(line) > n:
        return line[: n - 1] + "…"
    return line + (" …" if len(lines) > 1 else "")


def compact_block(hits: Sequence[SearchHit], goal: str = "", max_tokens: int = 400,
                  whole: Callable[[SearchHit], bool] | None = None) -> str:
    """One line per distinct memory, best first, within ``max_tokens`` (estimated).

    Memories for which ``whole(hit)`` is true are written out in full (on one line): the
    Supervisor keeps the user's standing instructions and definitions whole, since a preference
    cut after 80 characters can say the opposite of what the user said, and a sub-agent has no
    tool to read the rest.

    Example:
        >>> compact_block([])
        ''
    """
    if max_tokens <= 0 or not hits:
        return ""
    header = "Memories (first lines; [date id]):"
    lines, used, seen = [header], count_tokens(header), set()
    for h in sorted(hits, key=lambda h: -h.score):
        text = " ".join(h.record.content.split()) if whole is not None and whole(h) else first_line(h.record.content)
        line = f"- {text} [{h.record.updated_at:%Y-%m-%d} {h.record.id[:ID_CHARS]}]"
        key = " ".join(tokenize(line.split(" [", 1)[0]))
        if key in seen:
            continue  # the same first line twice tells the reader nothing new
        cost = count_tokens(line)
        if used + cost > max_tokens:
            continue
        lines.append(line)
        used += cost
        seen.add(key)
    return "\n".join(lines) if len(lines) > 1 else ""


__all__ = ["ID_CHARS", "LINE_CHARS", "compact_block", "first_line"]
