"""Markdown chunking: heading paths, verbatim line ranges, stable ids (pure, no store)."""

from __future__ import annotations

import pytest

from memory.markdown_chunks import chunk_id, chunk_markdown, parse_blocks

DOC = """---
title: ignored front matter
tags: [a]
---
# GMV

> Tier 1 metric.

## Definition

GMV is the value of goods in paid orders.
It excludes delivery fees.

- coupons are not deducted
- test accounts are excluded

## SQL

```sql
# not a heading inside code
select sum(amount) from orders;
```

Setext heading
--------------

Text under the setext heading.

***

After a thematic break.
"""


def _by_heading(chunks):
    return {c.headings: c for c in chunks}


def test_chunks_follow_headings_and_cite_verbatim_lines():
    chunks = chunk_markdown(DOC, "wiki/gmv.md", "notes")
    lines = DOC.splitlines()
    heads = [c.headings for c in chunks]
    assert heads == [("GMV",), ("GMV", "Definition"), ("GMV", "SQL"), ("GMV", "Setext heading")]
    for c in chunks:
        # the chunk is the file's own lines: a quoted passage is found in it, and line_start cites it
        assert c.text == "\n".join(lines[c.line_start - 1: c.line_end]).strip()
        assert lines[c.line_start - 1].strip() == c.text.splitlines()[0].strip()
    d = _by_heading(chunks)
    assert "It excludes delivery fees." in d[("GMV", "Definition")].text
    assert "- test accounts are excluded" in d[("GMV", "Definition")].text
    assert "# not a heading inside code" in d[("GMV", "SQL")].text  # fenced code is not parsed for headings
    assert d[("GMV", "Setext heading")].text.endswith("After a thematic break.")
    lines_, blocks, _ = parse_blocks(DOC)
    assert not any(lines_[b.start].strip() == "***" for b in blocks)  # a thematic break is no block
    assert not any("front matter" in c.text for c in chunks)
    assert all(c.title == "GMV" for c in chunks)
    assert d[("GMV", "Definition")].context("wiki/gmv.md") == "GMV › Definition (wiki gmv)"


def test_ids_are_stable_and_editing_one_section_keeps_the_others():
    a = chunk_markdown(DOC, "wiki/gmv.md", "notes")
    assert [c.id for c in a] == [c.id for c in chunk_markdown(DOC, "wiki/gmv.md", "notes")]
    edited = DOC.replace("It excludes delivery fees.", "It excludes delivery fees.\n\nA new paragraph.\n\nAnother.")
    b = chunk_markdown(edited, "wiki/gmv.md", "notes")
    assert {c.headings: c.id for c in a if c.headings != ("GMV", "Definition")}.items() <= \
        {c.headings: c.id for c in b}.items()
    assert len({c.id for c in b}) == len(b)
    # the id names collection, path, heading path and position: change any and it changes
    base = chunk_id("notes", "a.md", ("A",), 0)
    assert len({base, chunk_id("other", "a.md", ("A",), 0), chunk_id("notes", "b.md", ("A",), 0),
                chunk_id("notes", "a.md", ("B",), 0), chunk_id("notes", "a.md", ("A",), 1)}) == 5


def test_long_sections_are_packed_and_split_between_lines():
    para = "\n".join(f"line {i} " + "x" * 60 for i in range(30))  # one 2,100-character block
    doc = "# T\n\n" + para + "\n\nshort one\n\nshort two\n"
    chunks = chunk_markdown(doc, "t.md", "c", max_chars=500)
    assert all(len(c.text) <= 500 for c in chunks)
    assert [c.number for c in chunks] == list(range(len(chunks)))
    joined = "\n".join(c.text for c in chunks)
    assert all(f"line {i} " in joined for i in range(30)) and "short two" in joined
    # small blocks of one section share a chunk
    small = chunk_markdown("# T\n\na\n\nb\n\nc\n", "t.md", "c")
    assert len(small) == 1 and small[0].text == "a\n\nb\n\nc" and (small[0].line_start, small[0].line_end) == (3, 7)


def test_files_without_headings_or_text():
    assert chunk_markdown("", "empty.md", "c") == []
    assert chunk_markdown("# Only a title\n", "t.md", "c") == []
    (c,) = chunk_markdown("just a note\n", "notes/todo.md", "c")
    assert c.title == "todo" and c.headings == () and c.context("notes/todo.md") == "todo (notes todo)"
    _, blocks, title = parse_blocks("```\n# code\n")  # an unclosed fence runs to the end
    assert title is None and len(blocks) == 1
    with pytest.raises(ValueError):
        chunk_markdown("x", "x.md", "c", max_chars=0)
