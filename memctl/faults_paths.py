"""Failure paths of the storage fault suite (see :mod:`memctl.faults`): a full disk, a read-only
file, a file with garbage in the middle, and a Qdrant primary that goes down and comes back.

Disk full is produced portably with ``PRAGMA max_page_count`` (SQLite then fails exactly as on
a full disk: SQLITE_FULL, transaction rolled back by SQLite itself), and, when this process
may mount (root in a container), also on a real 1 MiB tmpfs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memctl.faults import _open, index_agreement, integrity
from memctl.faults_workers import content_for, vector_for


def _rec(mid: str, ns: str = "faults/u1", pad: int = 0) -> Any:
    from memory.records import MemoryRecord

    return MemoryRecord(id=mid, namespace=ns, content=content_for(mid) + " pad" * pad)


def _fill(b: Any, n: int, prefix: str = "f") -> list[str]:
    recs = [_rec(f"{prefix}-{i}") for i in range(n)]
    b.upsert(recs, np.stack([vector_for(r.id) for r in recs]))
    return [r.id for r in recs]


def _attempt(fn: Callable[[], Any]) -> tuple[str | None, str]:
    """(error class name or None, message) of ``fn()``."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the class is the measurement
        return type(exc).__name__, str(exc)
    return None, ""


def _layer_error(name: str | None) -> bool:
    from memory import errors

    cls = getattr(errors, name or "", None)
    return isinstance(cls, type) and issubclass(cls, errors.MemoryBackendError)


def _found(b: Any, mid: str) -> bool:
    from memory.records import MemoryQuery

    hits = b.query(MemoryQuery(namespaces=(("faults", "u1"),), vector=vector_for(mid), limit=1))
    return bool(hits) and hits[0].record.id == mid


def _full_scenario(b: Any) -> dict[str, Any]:
    """A store that is full: a failed insert, then a failed delete; the process must stay right."""
    ids = _fill(b, 30)
    # Fill every free page too, so the delete below also needs a page it cannot get.
    i = 0
    insert_err: tuple[str | None, str] = (None, "")
    while i < 100_000:
        mid = f"g-{i}"
        insert_err = _attempt(lambda mid=mid: b.upsert([_rec(mid, "faults/u2", pad=50)], vector_for(mid)[None, :]))
        if insert_err[0]:
            break
        i += 1
    failed_id = f"g-{i}"
    phantom = failed_id in {r.id for r in b.get([failed_id])} or b.stats()["vectors"] != b.stats()["rows"]
    delete_err = _attempt(lambda: b.delete([ids[3]]))
    still_stored = bool(b.get([ids[3]]))
    agree = index_agreement(b)
    return {
        "insert_error": insert_err[0], "insert_reports_real_error": "full" in insert_err[1]
        and "cannot rollback" not in insert_err[1],
        "phantom_after_failed_insert": phantom,
        "delete_error": delete_err[0], "delete_reports_real_error": delete_err[0] is None
        or ("full" in delete_err[1] and "cannot rollback" not in delete_err[1]),
        # A failed delete leaves the memory stored: it must still be found; a successful one not.
        "deleted_memory_consistent": (still_stored == _found(b, ids[3])),
        "index_agrees": agree["agree"], "rows": agree["rows"], "vectors": agree["vectors"],
    }


def disk_full_pagecount(workdir: Path) -> dict[str, Any]:
    path = workdir / "full.sqlite"
    b = _open(path)
    try:
        _fill(b, 20, "seed")
        (pages,) = b._conn.execute("PRAGMA page_count").fetchone()
        b._conn.execute(f"PRAGMA max_page_count = {pages + 8}")
        out = _full_scenario(b)
    finally:
        b.close()
    out["integrity"] = integrity(path)
    return out


@contextmanager
def _mount(kind: str, target: Path, source: Path | None = None) -> Iterator[bool]:
    """A 1 MiB tmpfs (``kind="tmpfs"``) or a read-only bind mount of ``source``; yields False
    when this process may not mount."""
    target.mkdir(parents=True, exist_ok=True)
    if kind == "tmpfs":
        cmds = [["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)]]
    else:
        cmds = [["mount", "--bind", str(source), str(target)],
                ["mount", "-o", "remount,ro,bind", str(target)]]
    mounted = False
    try:
        for cmd in cmds:
            if shutil.which(cmd[0]) is None or subprocess.run(cmd, capture_output=True).returncode != 0:
                break
            mounted = True
        else:
            yield True
            return
        yield False
    finally:
        if mounted:
            subprocess.run(["umount", str(target)], capture_output=True)


def disk_full_tmpfs(workdir: Path) -> dict[str, Any]:
    target = workdir / "tmpfs"
    with _mount("tmpfs", target) as ok:
        if not ok:
            return {"skipped": "cannot mount a tmpfs here (needs root)"}
        path = target / "full.sqlite"
        b = _open(path)
        try:
            out = _full_scenario(b)
        finally:
            b.close()
        out["integrity"] = integrity(path)
        return out


def read_only(workdir: Path) -> dict[str, Any]:
    """A store on a read-only mount (or chmod 0444 when not root): reads work or fail clearly,
    writes fail with StoreReadOnly, nothing changes."""
    src = workdir / "ro-src"
    src.mkdir(exist_ok=True)
    b = _open(src / "ro.sqlite")
    ids = _fill(b, 10)
    b.close()
    digest = hashlib.sha256((src / "ro.sqlite").read_bytes()).hexdigest()
    target = workdir / "ro"
    with _mount("ro", target, src) as ok:
        if not ok:
            if os.geteuid() == 0:
                return {"skipped": "cannot mount read-only and root ignores file modes"}
            target = src
            os.chmod(src / "ro.sqlite", 0o444)
            os.chmod(src, 0o555)
        errors: dict[str, str | None] = {}
        try:
            b = _open(target / "ro.sqlite")
        except Exception as exc:  # noqa: BLE001 - the class is the measurement
            errors["open"] = type(exc).__name__
            b = None
        if b is not None:
            errors["get"] = _attempt(lambda: b.get(ids))[0]
            errors["upsert"] = _attempt(lambda: b.upsert([_rec("new")], vector_for("new")[None, :]))[0]
            errors["delete"] = _attempt(lambda: b.delete([ids[0]]))[0]
            b.close()
        if not ok:
            os.chmod(src, 0o755)
            os.chmod(src / "ro.sqlite", 0o644)
    unchanged = hashlib.sha256((src / "ro.sqlite").read_bytes()).hexdigest() == digest
    failed = {k: v for k, v in errors.items() if v}
    refused = "open" in errors or errors.get("upsert") is not None
    return {"errors": errors, "write_refused": bool(failed) and refused,
            "errors_in_tree": all(_layer_error(v) for v in failed.values()),
            "read_only_error": any(v == "StoreReadOnly" for v in failed.values()),
            "file_unchanged": unchanged, "integrity": integrity(src / "ro.sqlite")}


def corrupted(workdir: Path, *, seed: int = 3) -> dict[str, Any]:
    """Garbage bytes over pages in the middle of a store: every call fails with a
    MemoryBackendError subclass (StoreCorrupt), and the damage does not grow."""
    path = workdir / "corrupt.sqlite"
    b = _open(path)
    ids = _fill(b, 300)
    from memory.records import MemoryQuery

    # A store in use has been searched (its first search records the vector file's tag in the
    # store): the damaged file's first search must then write nothing.
    b.query(MemoryQuery(namespaces=(("faults", "u1"),), vector=vector_for(ids[0]), text="tea", limit=5))
    b.close()
    size = path.stat().st_size
    rng = np.random.default_rng(seed)
    with open(path, "r+b") as f:  # 4 KiB of garbage at the middle page boundary
        f.seek((size // 2) // 4096 * 4096)
        f.write(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    before = integrity(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    errors: dict[str, str | None] = {}
    b = None
    try:
        b = _open(path)
    except Exception as exc:  # noqa: BLE001
        errors["open"] = type(exc).__name__
    if b is not None:
        from memory.records import MemoryQuery

        q = MemoryQuery(namespaces=(("faults", "u1"),), vector=vector_for(ids[0]), text="tea", limit=5)
        errors["search"] = _attempt(lambda: b.query(q))[0]
        errors["get"] = _attempt(lambda: b.get(ids))[0]
        errors["upsert"] = _attempt(lambda: b.upsert([_rec("new")], vector_for("new")[None, :]))[0]
        errors["delete"] = _attempt(lambda: b.delete(ids[:50]))[0]
        errors["count"] = _attempt(lambda: b.count(("faults",)))[0]
        b.close()
    failed = {k: v for k, v in errors.items() if v}
    after = integrity(path)
    return {"errors": errors, "detected": bool(failed), "errors_in_tree": all(_layer_error(v) for v in failed.values()),
            "corrupt_error": any(v == "StoreCorrupt" for v in failed.values()),
            "file_unchanged": hashlib.sha256(path.read_bytes()).hexdigest() == digest,
            "integrity_before": before[:120], "integrity_after_same": after == before}


def failure_paths(workdir: Path) -> dict[str, Any]:
    return {"disk_full": disk_full_pagecount(workdir), "disk_full_tmpfs": disk_full_tmpfs(workdir),
            "read_only": read_only(workdir), "corrupted": corrupted(workdir)}


# ---------------------------------------------------------------------- Qdrant down
class FlakyBackend:
    """Wraps a backend; every call raises BackendUnavailable while ``down`` is set (a Qdrant
    server that stopped answering, as the backends translate it)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.down = False
        self.embedding_model, self.dim = inner.embedding_model, inner.dim
        self.supports_keyword = inner.supports_keyword

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name == "close":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            from memory.errors import BackendUnavailable

            if self.down:
                raise BackendUnavailable(f"injected: primary down during {name}")
            return attr(*args, **kwargs)

        return call

    def upsert(self, *a: Any, **k: Any) -> Any:
        return self.__getattr__("upsert")(*a, **k)

    def query(self, *a: Any, **k: Any) -> Any:
        return self.__getattr__("query")(*a, **k)

    def close(self) -> None:
        self.inner.close()


def qdrant_down(workdir: Path, *, embedder: Any = None) -> dict[str, Any]:
    """remember with the primary (qdrant-client local mode behind a fault switch) down, a
    retry of the same write, then the primary back and the outbox replayed."""
    from memory.backends.qdrant import QdrantBackend
    from memory.backends.resilient import ResilientBackend
    from memory.embeddings import get_embedder
    from memory.policy.audit import AuditLog
    from memory.policy.manager import MemoryManager
    from memory.service import MemoryService
    from memory.settings import EmbeddingSettings, MemorySettings

    emb = embedder or get_embedder(EmbeddingSettings().model)
    flaky = FlakyBackend(QdrantBackend(embedding_model=emb.name, dim=emb.dim, location=":memory:"))
    outbox = workdir / "qdrant.outbox"
    backend = ResilientBackend(flaky, outbox_path=outbox, retry_attempts=2, retry_max_s=0.2,
                               attempt_timeout_s=0.1, cooldown_s=0.0)
    settings = MemorySettings(path=str(workdir / "qdrant-audit.sqlite"))
    mm = MemoryManager(MemoryService(backend, emb, settings), AuditLog(settings.path), settings)
    text = "The quarterly revenue report must be sent to finance every first Monday"
    try:
        first = mm.remember("The user prefers dark mode dashboards", "user_profile/q1")
        flaky.down = True
        errors: list[str] = []
        statuses, ids = [], []
        for _ in range(2):  # the write, then a caller's retry of it
            try:
                r = mm.remember(text, "user_profile/q1")
                statuses.append(r.status)
                ids.append(r.id)
            except Exception as exc:  # noqa: BLE001 - the class is the measurement
                errors.append(type(exc).__name__)
        pending_while_down = backend.outbox_pending
        mode = oct(outbox.stat().st_mode & 0o777)
        text_on_disk_while_down = _text_in_files(outbox, text)
        flaky.down = False
        left = backend.flush(timeout_s=5.0)
        stored = [r for r in backend.scroll(("user_profile", "q1"), limit=100) if r.content == text]
        after_replay = _text_in_files(outbox, text)
    finally:
        mm.close()
    return {"first_status": first.status, "statuses_while_down": statuses, "errors_while_down": errors,
            "retry_same_id": len(set(ids)) == 1, "outbox_pending_while_down": pending_while_down,
            "outbox_left_after_replay": left, "copies_after_replay": len(stored),
            "stored_id_is_acknowledged_id": bool(stored) and stored[0].id in ids,
            "outbox_file_mode": mode, "text_in_outbox_while_queued": text_on_disk_while_down,
            "text_in_outbox_after_replay": after_replay}


def _text_in_files(path: Path, text: str) -> bool:
    """Whether ``text`` appears in the outbox file or its WAL (what `strings` would show)."""
    needle = text.encode()
    for f in (path, Path(f"{path}-wal")):
        if f.exists() and needle in f.read_bytes():
            return True
    return False


__all__ = ["FlakyBackend", "corrupted", "disk_full_pagecount", "disk_full_tmpfs", "failure_paths", "qdrant_down",
           "read_only"]
