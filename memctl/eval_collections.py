"""``memctl eval collections``: index time, re-index time and retrieval quality of a Markdown folder.

The folder (``DATA/notes``) is copied to a temporary directory and indexed into a fresh SQLite
store there (the data is never edited in place). Then:

* ``index_s`` — the first full index of the folder (model already loaded: ``model_load_s``);
* ``reindex_unchanged_s`` — ``index`` again with nothing changed;
* ``reindex_one_edit_s`` — ``index`` after one paragraph was appended to one file (median of
  ``edits`` files, a different file each time);
* R@k / MRR over ``DATA/questions.jsonl`` (fields ``question``, ``path``, ``answer``): a hit is a
  returned chunk of the question's file whose text contains the answer verbatim; searched in
  the collection's namespace with the store's normal hybrid search, top 10.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory.errors import InvalidInput

NAME = "eval"
_CJK = re.compile(r"[\u3400-\u9fff]")


def _lang(text: str) -> str:
    """'zh' when a text has more Han characters than Latin words, else 'en' (for the by-language split)."""
    return "zh" if len(_CJK.findall(text)) > len(re.findall(r"[A-Za-z]+", text)) else "en"


def _load_questions(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InvalidInput(f"{path} not found; --data must hold notes/ and questions.jsonl")
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{i}: not JSON ({exc.msg})") from None
        if not all(isinstance(q.get(k), str) and q[k] for k in ("question", "path", "answer")):
            raise InvalidInput(f"{path}:{i}: needs non-empty 'question', 'path' and 'answer'")
        out.append(q)
    if not out:
        raise InvalidInput(f"{path} holds no questions")
    return out


def _metrics(ranks: list[int | None]) -> dict[str, Any]:
    n = len(ranks)
    return {"n": n,
            **{f"R@{k}": round(sum(1 for r in ranks if r is not None and r <= k) / n, 4) for k in (1, 3, 5, 10)},
            "MRR": round(sum(1 / r for r in ranks if r is not None) / n, 4)}


def run_collection_eval(data: Path, *, settings: Any = None, edits: int = 5, max_chars: int | None = None,
                        progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Index ``data/notes`` in a temp store, time it, and score ``data/questions.jsonl``."""
    from memctl.mcp_server import compact_line
    from memory.collections import Collections
    from memory.markdown_chunks import DEFAULT_MAX_CHARS
    from memory.records import record_to_dict
    from memory.service import MemoryService
    from memory.settings import MemorySettings
    from memory.text import count_tokens

    data = Path(data)
    notes = data / "notes"
    if not notes.is_dir():
        raise InvalidInput(f"{notes} is not a folder; --data must hold notes/ and questions.jsonl")
    questions = _load_questions(data / "questions.jsonl")
    if edits < 0:
        raise InvalidInput(f"--edits must be 0 (no re-index timing) or more, got {edits}")
    present = {p.relative_to(notes).as_posix() for p in notes.rglob("*.md")}
    absent = sorted({q["path"] for q in questions} - present)
    if absent:
        raise InvalidInput(f"questions name files that are not in {notes}: {', '.join(absent[:5])}"
                           f"{' …' if len(absent) > 5 else ''}; 'path' is relative to notes/")
    tmp = Path(tempfile.mkdtemp(prefix="memctl-eval-collections-"))
    try:
        folder = tmp / "notes"
        shutil.copytree(notes, folder)
        doc_lang = {p.relative_to(folder).as_posix(): _lang(p.read_text(encoding="utf-8", errors="replace"))
                    for p in folder.rglob("*.md")}
        base = settings or MemorySettings()
        st = base.model_copy(update={"path": str(tmp / "memory.sqlite")})
        svc = MemoryService.from_settings(st)
        t0 = time.perf_counter()
        svc.embedder.embed_query("warm up")  # load the model outside the timed index
        model_load_s = time.perf_counter() - t0
        docs = Collections(svc, max_chars=max_chars or DEFAULT_MAX_CHARS)
        try:
            docs.add(NAME, folder)
            t0, c0 = time.perf_counter(), time.process_time()
            first = docs.index(NAME)[0]
            index_s, index_cpu = time.perf_counter() - t0, time.process_time() - c0
            t0 = time.perf_counter()
            docs.index(NAME)
            unchanged_s = time.perf_counter() - t0
            ranks: list[int | None] = []
            lat: list[float] = []
            compact_tokens: list[int] = []  # per hit: the MCP search line vs the full record
            full_tokens: list[int] = []
            misses = []
            for i, q in enumerate(questions):
                t0 = time.perf_counter()
                hits = svc.search(q["question"], ("docs", NAME), top_k=10)
                lat.append((time.perf_counter() - t0) * 1000)
                for h in hits[:5]:
                    compact_tokens.append(count_tokens(compact_line(h.record, h.score)))
                    full_tokens.append(count_tokens(json.dumps(record_to_dict(h.record), ensure_ascii=False)))
                rank = next((r for r, h in enumerate(hits, 1) if h.record.metadata.extra.get("path") == q["path"]
                             and q["answer"] in h.record.content), None)
                ranks.append(rank)
                if rank is None or rank > 5:
                    misses.append({"id": q.get("id"), "question": q["question"], "path": q["path"], "rank": rank,
                                   "top": [f"{h.record.metadata.extra.get('path')}:"
                                           f"{h.record.metadata.extra.get('line_start')}" for h in hits[:5]]})
                if progress:
                    progress("questions", i + 1, len(questions))
            # the files the collection indexes (hidden folders are skipped by the indexer too)
            files = sorted(p for p in folder.rglob("*.md")
                           if not any(part.startswith(".") for part in p.relative_to(folder).parts))
            edit_s = []
            for i in range(min(edits, len(files))):
                f = files[(i * 37) % len(files)]
                with f.open("a", encoding="utf-8") as fh:
                    fh.write(f"\n\nEdited for the re-index measurement, pass {i}.\n")
                t0 = time.perf_counter()
                rep = docs.index(NAME)[0]
                edit_s.append(time.perf_counter() - t0)
                if len(rep.changed) != 1:
                    raise RuntimeError(f"expected one changed file after editing {f.name}, got {rep.changed}")
            chunks = first.chunks_written
        finally:
            docs.close()
            svc.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    by: dict[str, dict[str, list[int | None]]] = {"lang": defaultdict(list), "kind": defaultdict(list),
                                                  "pair": defaultdict(list)}
    for q, r in zip(questions, ranks, strict=True):
        for key in ("lang", "kind"):
            by[key][str(q.get(key, "?"))].append(r)
        by["pair"]["same" if _lang(q["question"]) == doc_lang.get(q["path"]) else "cross"].append(r)
    lat.sort()
    return {
        "overall": _metrics(ranks),
        "by_lang": {k: _metrics(v) for k, v in sorted(by["lang"].items())},
        "by_kind": {k: _metrics(v) for k, v in sorted(by["kind"].items())},
        # question language vs the language of the note it is answered in (most Han characters or words)
        "by_language_pair": {k: _metrics(v) for k, v in sorted(by["pair"].items())},
        "timing": {"files": first.files, "chunks": chunks, "model_load_s": round(model_load_s, 3),
                   "index_s": round(index_s, 3), "index_cpu_s": round(index_cpu, 3),
                   "reindex_unchanged_s": round(unchanged_s, 4),
                   "reindex_one_edit_s": round(statistics.median(edit_s), 4) if edit_s else None,
                   "reindex_one_edit_max_s": round(max(edit_s), 4) if edit_s else None,
                   "search_p50_ms": round(lat[len(lat) // 2], 2), "search_p95_ms": round(lat[int(len(lat) * .95)], 2)},
        # estimated tokens (memory.text.count_tokens) per top-5 hit: MCP `search` line vs `get` record
        "tokens_per_hit": {"compact": round(statistics.fmean(compact_tokens), 1) if compact_tokens else None,
                           "full_record": round(statistics.fmean(full_tokens), 1) if full_tokens else None},
        "config": {"max_chars": max_chars or DEFAULT_MAX_CHARS, "embedding": st.embedding.model,
                   "top_k": 10, "questions": len(questions)},
        "misses": misses,
    }
