"""The reranker's "superseded" features (:mod:`memory.rerank`): does a newer candidate state the same slot?

When a slot changes (a price, a shift, a supplier), the conversation holds both statements, and the
older one often repeats more of the question's words than the update does ("the ferry ticket is
now 215" against "the ferry ticket price for adults is 198 yuan"). The issue's rule: the newest
non-superseded statement wins unless the question asks about the past, and questions without a
time get the current value first. The linear rule in :mod:`memory.query` lifts the newer statement
only for "now / 目前" questions and only when the write policy's reading pairs the two; these
features let the model learn when it matters, from what search already holds:

* for each candidate, how alike the most similar candidate written at least ``MIN_GAP`` later is
  (Dice overlap of their content terms, the speaker prefix and single Han characters left out,
  so two Chinese turns do not look alike through common characters), how many later / earlier
  candidates are that alike (``NEAR``), how much later the most alike one is, its fused and vector
  score gaps to it, and the candidate's recency rank among its near-duplicates;
* whether the question names a past state in words :mod:`memory.query`'s "originally" rule does
  not read ("before", "back then", "at first", "曾经", "当时", ...);
* how much the candidate repeats the turns just before it, and how much the turns just after it
  repeat it (the same overlap, among candidates found through the retrieval context): an
  assistant's "noted: the price is now 320" restates the user's update in the same session and
  often outranks it, while the question asks for what the user said.

Pairs are compared all at once (a term-incidence matrix product over term hashes cached per text,
not a Python loop over pairs or strings).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from memory.records import SearchHit
from memory.rerank_context import ABSENT, terms

SUPERSEDE_FEATURES: tuple[str, ...] = (
    "sup_dice", "sup_newer", "sup_older", "sub_dice", "sup_gap", "sup_vec_gap", "sup_age", "dup_recency",
    "asks_before", "echo_prev", "echo_next",
)
# Written this close together, two statements carry no order (one session, one import); as memory.query.SLOT_MIN_GAP.
MIN_GAP = 3600.0
# Dice overlap from which two candidates count as near-duplicates (statements of one slot overlap
# .2-.4 in content terms; the model also reads the overlap itself).
NEAR = 0.25
_SPEAKER = re.compile(r"^[^:：\n]{1,40}[:：]\s*")
# Past-state wording memory.query._ASKS_PAST leaves out (it guards the "now" rule, so it is narrow).
_BEFORE = re.compile(
    r"\b(?:before|back then|at the (?:start|beginning)|first (?:set|agreed|planned|quoted|said)|at one point"
    r"|in the past|formerly|was it|were they|did .{1,40} (?:start|begin) with)\b"
    r"|曾经|当时|那时|过去|以往|原本|本来|原定|早先|起先|最开始|刚开始|开始时|改之前|换之前",
    re.I,
)


@lru_cache(maxsize=65536)
def _slot_words(text: str) -> np.ndarray:
    """A memory's content terms without its speaker prefix's and without single Han characters, as
    their (process-stable) hashes: the overlap of two memories is then one sort of integers, not a
    Python loop over strings (a 64-bit collision among a search's few hundred terms is ~1e-14)."""
    # From the text's own terms (cached and shared with the other features) minus the prefix's: tokenising
    # the text without its prefix again cost ~2 ms a search when the candidates are new (a 100k store).
    m = _SPEAKER.match(text)
    drop = terms(m.group()) if m else frozenset()
    words = {hash(t) for t in terms(text) if t not in drop and not (len(t) == 1 and "\u3400" <= t <= "\u9fff")}
    out = np.fromiter(words, dtype=np.int64, count=len(words))
    out.flags.writeable = False
    return out


@lru_cache(maxsize=4096)
def asks_before(query: str) -> float:
    """1 when the question names an earlier state in words the "originally" rule does not read."""
    return float(bool(_BEFORE.search(query)))


def _overlaps(words: Sequence[np.ndarray], lens: np.ndarray) -> np.ndarray:
    """``(n, n)`` counts of the slot words each two candidates share (exact integers, as floats).

    Only words two or more candidates hold can be shared, so the incidence matrix gets those
    columns alone (a few hundred of the ~1-2k words of 50 turns) and the product is ~50 us. The
    shared words are found by one sort of the concatenated hashes (each candidate's are distinct):
    ``np.unique`` with inverse and counts did the same in ~3x the time.
    """
    n = len(words)
    allw = np.concatenate(words)
    order = np.argsort(allw, kind="stable")
    srt = allw[order]
    dup = srt[1:] == srt[:-1]  # dup[k]: sorted words k and k + 1 are one word (of two candidates)
    inc = np.zeros((n, 1))
    if dup.any():
        starts = np.flatnonzero(np.concatenate(([True], ~dup)))  # where each distinct word's run starts
        run = np.cumsum(np.concatenate(([0], ~dup)))  # sorted position -> its word's run
        sizes = np.diff(np.append(starts, len(srt)))
        col = np.cumsum(sizes >= 2) - 1  # run -> its column among the shared words
        keep = sizes[run] >= 2
        inc = np.zeros((n, int(col[-1]) + 1))
        inc[np.repeat(np.arange(n), lens)[order[keep]], col[run[keep]]] = 1.0
    return inc @ inc.T


def supersede_matrix(head: Sequence[SearchHit], query: str, stamps: Sequence[float],
                     before: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """One row of :data:`SUPERSEDE_FEATURES` per head hit, as an ``(n, len(SUPERSEDE_FEATURES))`` array
    (what :func:`memory.rerank.candidate_features` writes into its own; no Python float per cell).
    ``stamps``: the hits' creation times, seconds; ``before[i]``: the head indexes of the turns just
    before hit ``i``, from its retrieval context."""
    n = len(head)
    out = np.empty((n, len(SUPERSEDE_FEATURES)))
    if not n:
        return out
    words = [_slot_words(h.record.content) for h in head]
    lens = np.fromiter((len(w) for w in words), dtype=np.intp, count=n)
    prod = _overlaps(words, lens) if lens.sum() else np.zeros((n, n))
    size = lens.astype(float)
    denom = size[:, None] + size[None, :]
    dice = np.divide(2.0 * prod, denom, out=np.zeros((n, n)), where=denom > 0)
    st = np.asarray(stamps, dtype=float)
    later = st[None, :] - st[:, None] >= MIN_GAP   # later[i, j]: j written at least MIN_GAP after i
    earlier = later.T
    d_new = np.where(later, dice, -1.0)
    near = dice >= NEAR
    n_newer = (later & near).sum(axis=1)
    n_older = (earlier & near).sum(axis=1)
    j = d_new.argmax(axis=1)  # the most alike later candidate (row i itself when none is later)
    sd = d_new[np.arange(n), j]
    found = sd >= NEAR
    num = np.array([(h.breakdown.score, h.breakdown.vector) for h in head], dtype=float)
    scores, vecs = num[:, 0], num[:, 1]
    span = float(st.max() - st.min()) or 1.0
    n_near = n_newer + n_older
    echo_prev, echo_next = np.zeros(n), np.zeros(n)
    for i, js in enumerate(before or ()):
        for k in js:
            echo_prev[i] = max(echo_prev[i], dice[i, k])
            echo_next[k] = max(echo_next[k], dice[i, k])
    out[:, 0] = np.maximum(sd, 0.0)
    out[:, 1] = n_newer
    out[:, 2] = n_older
    out[:, 3] = np.maximum(np.where(earlier, dice, -1.0).max(axis=1), 0.0)
    out[:, 4] = np.where(found, scores - scores[j], ABSENT)
    out[:, 5] = np.where(found, vecs - vecs[j], ABSENT)
    out[:, 6] = np.where(found, (st[j] - st) / span, -1.0)
    out[:, 7] = np.divide(n_newer, n_near, out=np.full(n, -1.0), where=n_near > 0)
    out[:, 8] = asks_before(query)
    out[:, 9] = echo_prev
    out[:, 10] = echo_next
    return out
