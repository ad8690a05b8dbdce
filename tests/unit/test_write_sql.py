"""The SQL a memory write runs (memory.backends): the dedupe guard's read of the rows written
since its marker, and the keyword statistics its neighbour query reads."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from memory.backends.sqlite import SqliteBackend
from memory.backends.sqlite_partitions import fts_df
from memory.records import MemoryRecord

DIM = 8


def _vecs(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _rec(i: int, ns: tuple[str, ...] = ("user_profile", "u1")) -> MemoryRecord:
    return MemoryRecord(id=f"m{i}", namespace=ns, content=f"note {i} about tea coffee report{i % 7}")


def test_the_dedupe_guard_reads_only_the_rows_written_since_its_marker(tmp_path: Path) -> None:
    """It used the namespace index (every row of the namespace read and sorted: ~3.7 ms a write
    at 10k memories a namespace); the sequence index finds only the rows written since."""
    with SqliteBackend(tmp_path / "m.sqlite", embedding_model="test", dim=DIM) as b:
        b.upsert([_rec(i) for i in range(200)], _vecs(200))
        ns = ("user_profile", "u1")
        marker = b.change_marker()
        b.upsert([_rec(1000), _rec(1001, ("user_profile", "u2"))], _vecs(2, 1))  # another writer, meanwhile
        statements: list[str] = []
        b._conn.set_trace_callback(statements.append)
        written, changed, _ = b.upsert_if_unchanged([_rec(2000)], _vecs(1, 2), namespace=ns, since=marker)
        b._conn.set_trace_callback(None)
        assert not written and [r.id for r in changed] == ["m1000"]  # only this namespace's new row
        guard = [s for s in statements if "seq >" in s and s.lstrip().upper().startswith("SELECT")]
        assert guard, statements
        conn = sqlite3.connect(tmp_path / "m.sqlite")
        try:
            sql = guard[0]
            plan = " ".join(str(r[-1]) for r in conn.execute(
                "EXPLAIN QUERY PLAN " + sql, () if "?" not in sql else (ns[0] + "/" + ns[1], marker, 0.0, 64)))
        finally:
            conn.close()
        assert "memories_seq" in plan and "memories_ns" not in plan, plan
        # With nothing written since the marker, the guarded write goes through.
        written, changed, _ = b.upsert_if_unchanged([_rec(2000)], _vecs(1, 2), namespace=ns, since=b.change_marker())
        assert written and changed == []


def test_keyword_statistics_of_many_terms_in_one_statement_match_the_per_term_lookup(tmp_path: Path) -> None:
    with SqliteBackend(tmp_path / "m.sqlite", embedding_model="test", dim=DIM) as b:
        b.upsert([_rec(i) for i in range(50)], _vecs(50))
        conn = b._conn
        terms = [t for (t,) in conn.execute("SELECT term FROM memories_vocab WHERE col = 'terms'")]
        assert len(terms) > 5
        asked = terms + ["no-such-term", terms[0]] + [f"absent{i}" for i in range(700)]  # > one chunk of 500

        def one_by_one() -> dict[str, int]:
            out = {}
            for t in asked:
                row = conn.execute("SELECT doc FROM memories_vocab WHERE term = ? AND col = 'terms'", (t,)).fetchone()
                if row is not None and row[0]:
                    out[t] = int(row[0])
            return out

        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        got = fts_df(conn, asked)
        conn.set_trace_callback(None)
        assert got == one_by_one() and set(got) == set(terms)
        ours = [s for s in statements if not s.startswith("--")]  # "--": FTS5's own inner statements
        assert len(ours) == 2  # 709 distinct terms: two chunks, not one statement per term
