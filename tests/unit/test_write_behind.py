"""WriteBehind: one ordered worker, per-namespace read barrier, drain, errors kept for the caller."""

from __future__ import annotations

import threading
import time

import pytest

from memory.errors import BackendUnavailable
from supervisor.writebehind import WriteBehind


@pytest.fixture
def wb():
    w = WriteBehind()
    yield w
    w.close()


def test_writes_run_in_submission_order(wb: WriteBehind) -> None:
    seen: list[int] = []
    for i in range(20):
        wb.submit(("a", "u1"), lambda i=i: (time.sleep(0.001 * (i % 3)), seen.append(i)))
    done = wb.drain()
    assert seen == list(range(20))
    assert len(done) == 20 and len(wb) == 0


def test_barrier_waits_only_for_the_namespaces_it_reads(wb: WriteBehind) -> None:
    gate = threading.Event()
    wb.submit(("text2sql_memories", "u1"), gate.wait)  # blocks the worker until released
    wb.submit(("analysis_memories", "u1"), lambda: "analysis")
    t0 = time.perf_counter()
    # another user's and another agent's namespaces do not wait for the blocked writes
    assert wb.barrier([("user_profile", "u1"), ("statistics_memories", "u1"), ("text2sql_memories", "u12")]) == []
    assert time.perf_counter() - t0 < 0.5
    assert len(wb) == 2
    releaser = threading.Timer(0.2, gate.set)
    releaser.start()
    t0 = time.perf_counter()
    done = wb.barrier([("analysis_memories",)])  # a prefix: waits for the write queued behind the blocked one
    assert time.perf_counter() - t0 >= 0.15
    assert [p.namespace for p in done][0] == ("analysis_memories", "u1")
    assert done[0].future.result() == "analysis"
    wb.drain()


def test_errors_stay_with_the_write_until_collected(wb: WriteBehind) -> None:
    def fail() -> None:
        raise BackendUnavailable("store down")

    wb.submit(("a", "u1"), fail, origin="post:x")
    wb.submit(("a", "u1"), lambda: "ok")
    done = wb.drain()
    with pytest.raises(BackendUnavailable, match="store down"):
        done[0].future.result()
    assert done[0].info == {"origin": "post:x"}
    assert done[1].future.result() == "ok"  # a failed write does not stop the ones behind it


def test_a_waiting_barrier_runs_its_writes_before_unrelated_queued_ones(wb: WriteBehind) -> None:
    gate = threading.Event()
    seen: list[str] = []
    wb.submit(("text2sql_memories", "u1"), gate.wait)  # running: the worker is busy
    wb.submit(("text2sql_memories", "u1"), lambda: (time.sleep(0.6), seen.append("sql")))  # queued, slow
    wb.submit(("shared_context", "u1"), lambda: seen.append("finding 1"))
    wb.submit(("shared_context", "u1"), lambda: seen.append("finding 2"))
    threading.Timer(0.1, gate.set).start()
    t0 = time.perf_counter()
    done = wb.barrier([("shared_context", "u1")])
    # It waited for the running write, not for the slow one queued ahead of the findings.
    assert time.perf_counter() - t0 < 0.5
    assert [p.namespace for p in done][:2] == [("shared_context", "u1")] * 2
    assert seen == ["finding 1", "finding 2"]  # one namespace keeps its order
    wb.drain()
    assert seen == ["finding 1", "finding 2", "sql"]


def test_urgent_writes_run_first_and_are_reported_in_submission_order(wb: WriteBehind) -> None:
    gate = threading.Event()
    seen: list[str] = []
    wb.submit(("x", "u1"), gate.wait)
    wb.submit(("text2sql_memories", "u1"), lambda: seen.append("sql"))
    wb.submit(("shared_context", "u1"), lambda: seen.append("finding"), urgent=True)
    gate.set()
    done = wb.drain()
    assert seen == ["finding", "sql"]
    assert [p.namespace[0] for p in done] == ["x", "text2sql_memories", "shared_context"]


def test_a_batch_starts_with_its_urgent_writes(wb: WriteBehind) -> None:
    seen: list[str] = []
    with wb.batch():  # the worker is idle: without the batch it would start the first write at once
        wb.submit(("text2sql_memories", "u1"), lambda: seen.append("sql"))
        time.sleep(0.05)
        wb.submit(("shared_context", "u1"), lambda: seen.append("finding"), urgent=True)
    wb.drain()
    assert seen == ["finding", "sql"]


def test_no_write_starts_while_a_search_runs_in_the_foreground(wb: WriteBehind) -> None:
    started = threading.Event()
    with wb.foreground():
        wb.submit(("analysis_memories", "u1"), started.set)
        assert not started.wait(0.1)  # held back while the pre-node searches
    assert started.wait(2.0)  # runs as soon as the search is over
    wb.drain()


def test_the_foreground_pause_never_blocks_a_barrier_or_a_drain(wb: WriteBehind) -> None:
    wb.FOREGROUND_MAX_WAIT = 30.0  # a pause that would outlast the test if it held these back
    with wb.foreground():
        wb.submit(("shared_context", "u1"), lambda: "finding")
        t0 = time.perf_counter()
        assert [p.future.result() for p in wb.barrier([("shared_context", "u1")])] == ["finding"]
        wb.submit(("analysis_memories", "u1"), lambda: "analysis")
        assert [p.future.result() for p in wb.drain()] == ["analysis"]
        assert time.perf_counter() - t0 < 5.0


def test_a_foreground_that_never_ends_only_delays_writes(wb: WriteBehind) -> None:
    wb.FOREGROUND_MAX_WAIT = 0.05  # many graphs' searches back to back must not starve the worker
    done = threading.Event()
    with wb.foreground():
        wb.submit(("analysis_memories", "u1"), done.set)
        assert done.wait(2.0)


def test_a_barrier_whose_writes_have_run_lets_no_other_write_start_during_the_search(wb: WriteBehind) -> None:
    """The pre-node's barrier waits for the finding it reads; once that write is done, the
    unrelated write queued behind it (another agent's SQL) waits for the search to end, instead
    of starting before the barrier's thread has taken itself off the wanted list."""
    wb.FOREGROUND_MAX_WAIT = 30.0  # only the end of the search may let it start
    gate, running, other = threading.Event(), threading.Event(), threading.Event()
    wb.submit(("shared_context", "u1"), lambda: (running.set(), gate.wait(5.0), "finding")[-1])
    assert running.wait(2.0)
    wb.submit(("text2sql_memories", "u1"), other.set)
    with wb.foreground():
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.extend(p.future.result() for p in
                                                            wb.barrier([("shared_context", "u1")])))
        waiter.start()
        deadline = time.perf_counter() + 2.0
        while not wb._wanted and time.perf_counter() < deadline:  # the barrier is waiting
            time.sleep(0.001)
        gate.set()
        waiter.join(5.0)
        assert got == ["finding"]
        assert not other.wait(0.3)  # the search still runs
    assert other.wait(2.0)  # and starts as soon as it is over
    wb.drain()


def _phased_write(reached: threading.Event, seen: list[str]) -> str:
    """A write in two phases with a pause point between them, as MemoryManager.remember has."""
    from memory.policy.pause import pause_point

    seen.append("phase 1")
    reached.set()
    pause_point()
    seen.append("phase 2")
    return "done"


def test_a_running_write_steps_aside_at_its_pause_points_while_a_search_runs(wb: WriteBehind) -> None:
    wb.FOREGROUND_MAX_WAIT = 30.0  # only the end of the search may let it go on
    seen: list[str] = []
    reached, go = threading.Event(), threading.Event()
    fg_entered = threading.Event()

    def search() -> None:
        with wb.foreground():
            fg_entered.set()
            go.wait(5.0)

    searcher = threading.Thread(target=search)
    # The write is already running when the search starts: it enters the foreground between
    # phase 1 and the pause point.
    def write() -> str:
        searcher.start()
        assert fg_entered.wait(2.0)
        return _phased_write(reached, seen)

    p = wb.submit(("text2sql_memories", "u1"), write)
    assert reached.wait(2.0)
    time.sleep(0.2)
    assert seen == ["phase 1"]  # held at the pause point while the search runs
    go.set()
    searcher.join(5.0)
    assert p.future.result(2.0) == "done" and seen == ["phase 1", "phase 2"]
    wb.drain()


def test_a_pause_point_never_holds_a_write_a_barrier_or_drain_waits_for(wb: WriteBehind) -> None:
    wb.FOREGROUND_MAX_WAIT = 30.0
    for wait_for in ("barrier", "drain"):
        seen: list[str] = []
        reached = threading.Event()
        with wb.foreground():  # a search runs the whole time
            p = wb.submit(("shared_context", "u1"), lambda r=reached, s=seen: _phased_write(r, s))
            t0 = time.perf_counter()
            done = wb.barrier([("shared_context", "u1")]) if wait_for == "barrier" else wb.drain()
            assert [d.future.result() for d in done] == ["done"] and p in done
            assert time.perf_counter() - t0 < 5.0, wait_for


def test_pause_points_wait_at_most_the_foreground_budget_per_write(wb: WriteBehind) -> None:
    from memory.policy.pause import pause_point

    wb.FOREGROUND_MAX_WAIT = 0.1
    started, searching, done = threading.Event(), threading.Event(), threading.Event()
    took: list[float] = []

    def write() -> None:
        started.set()
        searching.wait(2.0)
        t0 = time.perf_counter()
        for _ in range(10):  # ten pause points share one budget: ~0.1 s in all, not 1 s
            pause_point()
        took.append(time.perf_counter() - t0)
        done.set()

    wb.submit(("analysis_memories", "u1"), write)  # starts at once: no search yet
    assert started.wait(2.0)
    with wb.foreground():  # a search that outlasts the write
        searching.set()
        assert done.wait(2.0)
    assert 0.08 <= took[0] < 0.6
    wb.drain()


def test_a_pause_point_outside_a_background_write_does_nothing() -> None:
    from memory.policy.pause import pause_point

    t0 = time.perf_counter()
    for _ in range(1000):
        pause_point()
    assert time.perf_counter() - t0 < 0.5


def test_a_namespace_is_not_idle_while_one_of_its_writes_runs() -> None:
    # The second write takes longer than the idle period (a process's first Chinese write loads
    # jieba's tables for ~2 s): the namespace must not be handed to consolidation between the
    # two writes, only once after both.
    seen: list[tuple[tuple[str, ...], int]] = []
    done: list[int] = []
    w = WriteBehind(idle=lambda ns: seen.append((ns, len(done))), idle_seconds=0.05)
    try:
        w.submit(("facts", "u1"), lambda: done.append(1))
        w.submit(("facts", "u1"), lambda: (time.sleep(0.3), done.append(2)))
        w.drain()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # a second, spurious idle call would land here
    finally:
        w.close()
    assert seen == [(("facts", "u1"), 2)]


def test_a_barrier_runs_its_meanwhile_work_beside_the_writes_it_waits_for(wb: WriteBehind) -> None:
    wb.FOREGROUND_MAX_WAIT = 30.0  # a pause that would outlast the test if the worker held the write back
    write_started, meanwhile_ran = threading.Event(), threading.Event()
    calls: list[str] = []

    def write() -> str:
        write_started.set()
        # Finishes only once the caller's own work ran: that work overlaps the write.
        if not meanwhile_ran.wait(5.0):
            raise AssertionError("the barrier's meanwhile did not run while its write ran")
        return "written"

    def meanwhile() -> None:
        # The worker was told to start the write before the caller's work began.
        assert write_started.wait(5.0), "the write the barrier waits for did not start"
        calls.append("meanwhile")
        meanwhile_ran.set()

    with wb.foreground():  # as in a pre-node: a queued write starts only for the barrier
        wb.submit(("shared_context", "u1"), write)
        done = wb.barrier([("shared_context", "u1")], meanwhile=meanwhile)
    assert calls == ["meanwhile"]
    assert [p.future.result() for p in done] == ["written"]


def test_a_barrier_with_nothing_to_wait_for_skips_its_meanwhile_work(wb: WriteBehind) -> None:
    calls: list[str] = []
    gate = threading.Event()
    wb.submit(("text2sql_memories", "u1"), gate.wait)  # pending, but not in what the barrier reads
    assert wb.barrier([("shared_context", "u1")], meanwhile=lambda: calls.append("x")) == []
    wb.submit(("shared_context", "u1"), lambda: "done")
    gate.set()
    wb.drain()
    p = wb.submit(("shared_context", "u1"), lambda: "again")
    p.future.result(5.0)  # already finished when the barrier looks: no wait, so no work beside it
    assert [q.future.result() for q in wb.barrier([("shared_context", "u1")], meanwhile=lambda: calls.append("y"))] \
        == ["again"]
    assert calls == []
