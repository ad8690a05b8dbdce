"""The judge's view vectors stored beside the memories (memory.policy.view_cache).

Real SQLite file, the packaged encoder and paraphrase model. A second manager on the same file
stands for a fresh process: it has judged none of the stored memories.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from memory import MemorySettings
from memory.policy import view_cache
from memory.policy.judge import PairJudge
from memory.policy.manager import MemoryManager

NOW = datetime(2025, 6, 1, tzinfo=UTC)
NS = "user_profile/u1"
STORED = ["The user prefers CSV exports for the weekly sales report",
          "Dashboards should show amounts in ten thousand yuan",
          "用户希望周报里的图表使用柱状图"]
INCOMING = "Exports should be CSV files for the weekly sales report, the user says"


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    for k in [k for k in os.environ if k.startswith("MEMORY_")]:
        os.environ.pop(k)
    p = tmp_path / "m.sqlite"
    mm = MemoryManager.from_settings(MemorySettings(path=str(p)))
    for t in STORED:
        assert mm.remember(t, NS, now=NOW).status == "added"
    mm.close()
    yield p


def _fresh(path: Path) -> tuple[MemoryManager, list[str], list[str]]:
    """A manager that has seen nothing, recording what its encoder and paraphrase model embed."""
    mm = MemoryManager.from_settings(MemorySettings(path=str(path)))
    judge, para = mm.pair_judge, mm.pair_judge.paraphrase
    para._cache.clear()  # the scorer is process-wide: forget what the writer's manager computed
    encoded: list[str] = []
    paraphrased: list[str] = []
    inner_embed, inner_para = judge._embed_fn, para._embed_locked

    def embed(texts: list[str]) -> np.ndarray:
        encoded.extend(texts)
        return inner_embed(texts)

    def para_embed(text: str) -> np.ndarray:
        if text not in para._cache:
            paraphrased.append(text)
        return inner_para(text)

    judge._embed_fn = embed
    para._embed_locked = para_embed
    return mm, encoded, paraphrased


def _reference(existing: str, incoming: str) -> tuple[float, dict[str, float]]:
    """What a judge computing every view itself says of the pair."""
    from memory.policy.paraphrase import get_paraphrase_scorer

    j = PairJudge(paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
    v = j(existing, incoming)
    return v.p_same, j.features(existing, incoming)


def _check_same_verdicts(mm: MemoryManager) -> None:
    for t in STORED:
        p_ref, f_ref = _reference(t, INCOMING)
        assert mm.pair_judge(t, INCOMING).p_same == pytest.approx(p_ref, abs=1e-6)
        feats = mm.pair_judge.features(t, INCOMING)
        assert feats.keys() == f_ref.keys()
        for k in feats:
            assert feats[k] == pytest.approx(f_ref[k], abs=1e-6), k


def test_a_fresh_process_reads_its_neighbours_views_instead_of_embedding_them(path: Path) -> None:
    mm, encoded, paraphrased = _fresh(path)
    try:
        res = mm.remember(INCOMING, NS, now=NOW)
        assert res.status in ("merged", "updated")
        own = set(mm.pair_judge.view_texts(INCOMING))
        assert encoded and set(encoded) <= own, set(encoded) - own  # no view of a stored memory
        assert paraphrased == [INCOMING]
        _check_same_verdicts(mm)
    finally:
        mm.close()


@pytest.mark.parametrize("damage", ["checksum", "dimension", "model"])
def test_damaged_or_foreign_rows_are_recomputed_and_change_no_verdict(path: Path, damage: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT COUNT(*) FROM judge_view_owners").fetchone()[0] == len(STORED)
        rows = con.execute("SELECT id, data FROM judge_view_blocks").fetchall()
        for bid, blob in rows:
            entries = view_cache._unpack(bytes(blob))
            if damage == "checksum":  # zeroed vectors, digests left as they were
                new = b"".join(k + d + len(v).to_bytes(4, "little") + bytes(len(v)) for k, (d, v) in entries.items())
            elif damage == "dimension":  # consistent entries of another size (another encoder's)
                new = view_cache._pack({k: np.ones(100, dtype=np.float32).tobytes() for k in entries})
            else:
                continue
            con.execute("UPDATE judge_view_blocks SET data = ? WHERE id = ?", (new, bid))
    if damage == "model":  # new weights of the same model: another tag, so every key misses
        monkeypatch.setattr(view_cache, "model_tag", lambda m: f"{m}@another-version")
    mm, encoded, paraphrased = _fresh(path)
    try:
        mm.remember(INCOMING, NS, now=NOW)
        # The stored memories' views were computed again ...
        assert set(mm.pair_judge.view_texts(STORED[0])) <= set(encoded)
        assert STORED[0] in paraphrased
        # ... and the judge says exactly what it says without any stored view.
        _check_same_verdicts(mm)
    finally:
        mm.close()


def test_a_store_without_the_table_fills_it_on_first_judgement(tmp_path: Path) -> None:
    """Memories written without views (bulk import, older versions) get them when first judged."""
    p = tmp_path / "m.sqlite"
    mm = MemoryManager.from_settings(MemorySettings(path=str(p)))
    mm.service.backend.upsert([mm.service.build_record(_new(STORED[0]), NOW)],
                              mm.service.embed_records([mm.service.build_record(_new(STORED[0]), NOW)]))
    assert mm.views.store is not None and mm.views.store.count() == 0
    mm.remember(INCOMING, NS, now=NOW)
    stored_owner = view_cache.owner_key(STORED[0])
    with sqlite3.connect(p) as con:
        owners = {bytes(o) for (o,) in con.execute("SELECT owner FROM judge_view_owners")}
    assert stored_owner in owners
    mm.close()


def _new(text: str):  # noqa: ANN202 - a NewMemory
    from memory.service import NewMemory

    return NewMemory(text, ("user_profile", "u1"), None, created_at=NOW)


def test_forget_user_also_drops_rows_of_namespaces_nothing_else_remembers(path: Path) -> None:
    """A write that failed after its views were stored leaves rows in a namespace the store and the
    audit log never saw: forget_user finds them by the user's label."""
    mm = MemoryManager.from_settings(MemorySettings(path=str(path)))
    try:
        assert mm.views.store is not None
        v = np.ones(512, dtype=np.float32) / np.sqrt(512)
        mm.views.store.put(("scratch", "u1", "drafts"), [(b"k" * 16, view_cache.owner_key("draft"), v)])
        mm.views.store.put(("scratch", "u2"), [(b"k" * 16, view_cache.owner_key("other"), v)])
        rep = mm.forget_user("u1", now=NOW)
        assert rep.clean and rep.residue["judge_views"] == 0
        assert mm.views.store.namespaces() == ["scratch/u2"]
    finally:
        mm.close()


def test_switched_off_no_view_is_stored_but_earlier_rows_are_still_forgotten(path: Path) -> None:
    """policy.judge_view_cache = false: writes neither read nor store views (the file stays small),
    and forget_user still removes the rows written while it was on."""
    count = "SELECT (SELECT COUNT(*) FROM judge_view_owners) + (SELECT COUNT(*) FROM judge_view_keys)"
    with sqlite3.connect(path) as con:
        before = con.execute(count).fetchone()[0]
    assert before > 0  # the fixture wrote with the cache on
    mm = MemoryManager.from_settings(MemorySettings(path=str(path), policy={"judge_view_cache": False}))
    try:
        mm.remember("The user wants the quarterly review as a PDF with page numbers", NS, now=NOW)
        with sqlite3.connect(path) as con:
            assert con.execute(count).fetchone()[0] == before
        assert mm.forget_user("u1", now=NOW).clean
        with sqlite3.connect(path) as con:
            assert con.execute(count).fetchone()[0] == 0
            assert con.execute("SELECT COUNT(*) FROM judge_view_blocks").fetchone()[0] == 0
    finally:
        mm.close()


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _in_file(data: bytes, vec: bytes) -> bool:
    """A vector counts as present when any of four 64-byte windows 512 bytes apart is found (a
    vector may straddle two pages, which splits one window)."""
    return any(vec[i: i + 64] in data for i in range(0, len(vec) - 63, 512))


def test_a_shared_view_is_stored_once_and_a_deleted_memorys_own_word_leaves_the_file(tmp_path: Path) -> None:
    """Views repeated across a namespace's memories (a subject, a verb) are stored once; a hard
    delete (+ its scrub) removes the vectors and keys of the views only the deleted text had,
    and keeps the shared ones for the memory still using them."""
    p = tmp_path / "m.sqlite"
    ns = ("user_profile", "u7")
    gone_text = "Zorblax keeps a quokkamarmalade jar on the office shelf"
    kept_text = "Zorblax approved the weekly revenue report for the board"
    mm = MemoryManager.from_settings(MemorySettings(path=str(p)))
    try:
        gone = mm.remember(gone_text, ns, now=NOW)
        kept = mm.remember(kept_text, ns, now=NOW)
        assert (gone.status, kept.status) == ("added", "added")
        judge, store = mm.pair_judge, mm.views.store
        assert store is not None
        views_gone, views_kept = set(judge.view_texts(gone_text)), set(judge.view_texts(kept_text))
        shared, own = views_gone & views_kept, views_gone - views_kept
        assert "zorblax" in shared and "quokkamarmalade" in own
        vec = {v: judge.cached(v).tobytes() for v in views_gone | views_kept}  # type: ignore[union-attr]
        # One stored vector per distinct view of the namespace (+ the paraphrase vector of each text).
        assert store.vectors([ns]) == len(views_gone | views_kept) + 2
        data = _file_bytes(p)
        assert all(_in_file(data, vec[v]) for v in own)
        tag = view_cache.model_tag(judge.encoder_id)
        assert tag is not None
        own_keys = [view_cache.view_key(tag, v) for v in own]
        assert all(k in data for k in own_keys)

        assert mm.delete(gone.id, hard=True, now=NOW) == 1
    finally:
        mm.close()
    data = _file_bytes(p)
    leaks = [v for v in own if _in_file(data, vec[v])]
    assert leaks == [], leaks  # e.g. the vector of the word "quokkamarmalade"
    assert not any(k in data for k in own_keys)  # nor the hash naming the word
    assert all(_in_file(data, vec[v]) for v in shared | (views_kept - views_gone))  # the live memory's views stay
    mm = MemoryManager.from_settings(MemorySettings(path=str(p)))
    try:
        assert mm.views.store is not None
        assert mm.views.store.vectors([ns]) == len(views_kept) + 1
    finally:
        mm.close()


def test_the_first_layout_is_migrated_and_its_vectors_are_read(path: Path) -> None:
    """A file written with one packed row per memory text (migration 1) is converted on open:
    each distinct vector once, owners' lists, damaged entries dropped, the old table gone; a
    fresh process then reads the stored memories' views instead of embedding them."""
    from memory.backends.sqlite_schema import apply_migrations

    old = path.with_name("old.sqlite")
    src = view_cache.ViewStore(path)
    mm = MemoryManager.from_settings(MemorySettings(path=str(path)))
    try:
        wanted_texts = STORED
        plan = mm.views._plan(wanted_texts, *mm.views._tags())
    finally:
        mm.close()
    found, _ = src.lookup(("user_profile", "u1"), {o: {q.key for q in plan if q.owner == o}
                                                   for o in {q.owner for q in plan}}, {q.key: q.dim for q in plan})
    src.close()
    assert len({k for _, k in found}) == len({q.key for q in plan})
    # Rebuild the same store file in the first layout: every row holds all its text's views.
    path.replace(old)
    con = sqlite3.connect(old, isolation_level=None)
    con.execute("DROP TABLE judge_view_blocks")
    con.execute("DROP TABLE judge_view_keys")
    con.execute("DROP TABLE judge_view_owners")
    con.execute("DROP TABLE judge_view_migrations")
    apply_migrations(con, "judge_view_migrations", view_cache.MIGRATIONS[:1])
    damaged = next(q.key for q in plan if q.owner == view_cache.owner_key(STORED[1]))
    for owner in {q.owner for q in plan}:
        entries = {q.key: found[(owner, q.key)].tobytes() for q in plan if q.owner == owner}
        blob = view_cache._pack(entries)
        if owner == view_cache.owner_key(STORED[1]):  # one entry's vector zeroed, its digest kept
            e = view_cache._unpack(blob)
            e[damaged] = (e[damaged][0], bytes(len(e[damaged][1])))
            blob = b"".join(k + d + len(v).to_bytes(4, "little") + v for k, (d, v) in e.items())
        con.execute("INSERT INTO judge_views (ns, owner, views) VALUES (?, ?, ?)", ("user_profile/u1", owner, blob))
    con.close()
    old.replace(path)

    mm, encoded, paraphrased = _fresh(path)
    try:
        assert mm.views.store is not None
        assert mm.views.store.vectors() == len({q.key for q in plan}) - 1  # the damaged one is not carried
        with sqlite3.connect(path) as con:  # (the tables open, and migrate, on first use)
            assert con.execute("SELECT name FROM sqlite_master WHERE name = 'judge_views'").fetchone() is None
            assert con.execute("SELECT COUNT(*) FROM judge_view_owners").fetchone()[0] == len(STORED)
        mm.remember(INCOMING, NS, now=NOW)
        own = set(mm.pair_judge.view_texts(INCOMING))
        recomputed = {q.text for q in plan if q.key == damaged}
        assert set(encoded) - own == recomputed - own  # only the damaged view is embedded again
        assert paraphrased == [INCOMING]
        _check_same_verdicts(mm)
    finally:
        mm.close()


def test_a_write_whose_texts_are_all_primed_sends_nothing_more_to_the_paraphrase_thread(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second prime of a write (its text + neighbours whose views came from the store) has
    nothing to compute: it must not hand the Latin texts to the paraphrase thread and wait for it
    again. Only the incoming text's own prime runs the paraphrase model; the verdicts are unchanged."""
    from memory.policy import judge as judge_mod

    worker = judge_mod.PARAPHRASE_WORKER
    jobs: list[list[str]] = []

    class Counting:
        def submit(self, fn, texts):  # type: ignore[no-untyped-def]
            jobs.append(list(texts))
            return worker.executor().submit(fn, texts)

    monkeypatch.setattr(judge_mod, "PARAPHRASE_WORKER", Counting())
    mm, _encoded, paraphrased = _fresh(path)
    try:
        assert mm.remember(INCOMING, NS, now=NOW).status in ("merged", "updated")
        assert jobs == [[INCOMING]]
        assert paraphrased == [INCOMING]
        _check_same_verdicts(mm)
    finally:
        mm.close()


def test_a_write_offers_pause_points_between_its_phases(path: Path) -> None:
    """remember() calls memory.policy.pause.pause_point between its phases (what lets the
    write-behind worker step aside for a foreground search, supervisor.writebehind)."""
    from memory.policy.pause import pausing

    calls: list[int] = []
    mm = MemoryManager.from_settings(MemorySettings(path=str(path)))
    try:
        with pausing(lambda: calls.append(1)):
            assert mm.remember(INCOMING, NS, now=NOW).status in ("merged", "updated")
        assert len(calls) >= 3  # after embedding, around priming the neighbours, after judging
        calls.clear()
        mm.remember("Another note entirely", "user_profile/u2", now=NOW)  # no neighbour: one point
        assert len(calls) == 0  # the hook was uninstalled with the block
    finally:
        mm.close()
