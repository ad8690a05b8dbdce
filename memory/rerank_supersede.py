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

A second group (:data:`SLOT_FEATURES`, stop 32) reads the same question across languages and rewordings, where
term overlap sees nothing: a later candidate whose stored vector (the packaged multilingual model) is alike and
whose values (numbers with Chinese numerals folded in, dates, weekdays, currencies, the write policy's lexicon)
differ states this candidate's slot with another value (:func:`slot_pairs`).

A third group (:data:`CHANGE_FEATURES`, stop 33) reads the update's own wording: whether a candidate announces a
change ("moved to Friday", "改到周四", "涨价到198", "now 48 hours"; :data:`CHANGE`) and how alike (content terms, stored
vectors) the most alike LATER candidate that announces one is. Stop 33's diagnosis (scripts/rank1_diag.py) found the
old value of the slot as the most common hybrid rank-1 turn where dense-only ranks a listed turn first; the old
statement repeats the question's words, the update often says only what changed, in words that announce the change.
Out of set on the 20 fitting sets it moved the zh/en mean MRR by +.0001 (memctl.tune_rerank, c53_change): no model
reads it, so search never computes it.

Pairs are compared all at once (a term-incidence matrix product over term hashes cached per text,
not a Python loop over pairs or strings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from memory.records import SearchHit
from memory.rerank_context import ABSENT, terms
from memory.text import TEXT_CACHE

SUPERSEDE_FEATURES: tuple[str, ...] = (
    "sup_dice", "sup_newer", "sup_older", "sub_dice", "sup_gap", "sup_vec_gap", "sup_age", "dup_recency",
    "asks_before", "echo_prev", "echo_next",
)
# The cross-language "same slot, newer value" reading (stop 32, issue 16; scripts/slot_pair_lab.py): a later candidate
# whose stored vector is at least SLOT_COS alike and whose values differ. Picked by F1 on the zh_en ... zh_en_9 pairs
# (a `current` question's evidence vs the older turn ranked above it, cur19's "old"; negatives: the evidence vs any
# later candidate): t .55 precision .42 / recall .69; zh_en_10 ... zh_en_14 (the check) .17 / .53; cross-language
# pairs 10 of 15 / 1 of 6. The contents' own vectors (not stored: the store's blend in .4 of the retrieval context)
# read better: t .5 .56 / .67 fitting, .21 / .50 check; t .55 .70 / .51, .37 / .44. Pairs below COS_FLOOR are not
# compared (the lab's recall at .3 and .4 is the same).
SLOT_FEATURES: tuple[str, ...] = ("slot_cos", "slot_newer", "slot_older", "slot_gap")
SLOT_COS = 0.55
# The change group (stop 33), right after the superseded group so a model can read the 49 and these as a prefix.
CHANGE_FEATURES: tuple[str, ...] = ("says_change", "change_dice", "change_cos", "change_gap")
# Words that announce a changed value. memory.policy.dedupe's STRONG_CUES plus the everyday ones of the zh/en sets'
# updates (涨价到, 交给, 而家, "is now", "from now on", "took over"...): on zh_en ... zh_en_15 a listed turn of 73% of
# the `current` questions says one of these (STRONG_CUES: 43%), against 17% of all turns (STRONG_CUES: 8%). Read by
# the model next to change_dice / change_cos, so a cue alone does not move a candidate.
CHANGE = re.compile(
    r"改成|改为|改到|改用|改了|改回|改咗|换成|换为|换到|换了|換成|調到|调到|调整|调成|降到|降为|降了|升到|涨到|涨价|涨了|漲|"
    r"加到|加价|加價|提到|提高|降低|减到|減|给到|交给|交給|提前到|推迟|延期|延到|变成|变为|变了|變成|取代|不再|唔再|"
    r"不用.{0,12}了|不是.{0,12}了|而不是|更正|更新|修正|重新|原来|原先|原定|原本|以前是|之前是|本来|"
    r"现在|現在|而家|目前|接手|接替|取消了|搬到|搬去|挪到|移到|辞职|不干了|以后(?:都|就|改|换|交)"
    r"|\b(?:instead|no longer|anymore|any more|changed?|changing|switch(?:ed|ing)?|mov(?:e|ed|ing)\b.{0,40}\bto|"
    r"updated?|correction|actually|postponed|pushed|rescheduled|replac(?:e|ed|ing)|rather than|raised|lowered|bumped|"
    r"increased|decreased|reduced|cut (?:it |them )?to|now (?:is|are|it's|at|on|in|every|only|the|\d)|is now|are now|"
    r"from now on|going forward|used to|originally|retir(?:e|es|ed|ing)|new (?:price|rate|time|date|room|address|"
    r"number|schedule|fee|plan|deadline|place|rent)|takes? over|took over|handed over|back to|from (?:this|next) "
    r"(?:week|month|term|year)|starting)\b",
    re.IGNORECASE,
)
COS_FLOOR = 0.4
_SMALL = 32
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


@lru_cache(maxsize=TEXT_CACHE)
def _slot_words(text: str) -> np.ndarray:
    """A memory's content terms without its speaker prefix's and without single Han characters, as
    their (process-stable) hashes: the overlap of two memories is then one sort of integers, not a
    Python loop over strings (a 64-bit collision among a search's few hundred terms is ~1e-14)."""
    # From the text's own terms (cached and shared with the other features) minus the prefix's: tokenising
    # the text without its prefix again cost ~2 ms a search when the candidates are new (a 100k store).
    m = _SPEAKER.match(text)
    words: Iterable[str] = terms(text) - terms(m.group()) if m else terms(text)
    if not text.isascii():  # only a non-ASCII text has single Han characters among its terms
        words = [t for t in words if not (len(t) == 1 and "\u3400" <= t <= "\u9fff")]
    # A set of the hashes (not one hash per term): a 64-bit collision still counts once, as it did. Their order
    # does not matter (_overlaps sorts them).
    hashes = {*map(hash, words)}
    out = np.fromiter(hashes, dtype=np.int64, count=len(hashes))
    out.flags.writeable = False
    return out


@lru_cache(maxsize=TEXT_CACHE)
def slot_values(text: str) -> frozenset[tuple[str, str]]:
    """The (class, canonical value) pairs a memory states, its speaker prefix left out: numbers with Chinese
    numerals and scale words folded in ("三千二" and "3,200" read alike), dates, times, durations and the write
    policy's lexicon classes (:func:`memory.policy.reading.extract_values`; no jieba, ~tens of us a text)."""
    from memory.policy.reading import _normalise, extract_values

    m = _SPEAKER.match(text)
    return frozenset((v.cls, v.canon) for v in extract_values(_normalise(text[m.end():] if m else text)))


@lru_cache(maxsize=TEXT_CACHE)
def values_differ(a: frozenset[tuple[str, str]], b: frozenset[tuple[str, str]]) -> bool:
    """Both memories state values and not the same ones: a class both state with other values, or no class in
    common at all (a price in yuan against one in dollars, a weekday against a date)."""
    if not a or not b or a == b:
        return False
    ca, cb = {c for c, _ in a}, {c for c, _ in b}
    shared = ca & cb
    return not shared or any({v for c, v in a if c == k} != {v for c, v in b if c == k} for k in shared)


def slot_pairs(vectors: np.ndarray, texts: Sequence[str], stamps: Sequence[float], threshold: float = SLOT_COS
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, pair)``, both ``(n, n)``: ``cos[i, j]`` the stored-vector cosine of candidates ``i`` and ``j`` when ``j``
    was written at least ``MIN_GAP`` after ``i`` and both state values that differ (:func:`values_differ`), else -1;
    ``pair[i, j]``: that cosine is at least ``threshold``, i.e. ``j`` states ``i``'s slot with another value, later.

    The cross-language reading of "same slot, newer value": the packaged multilingual model places a Chinese
    statement and its English rewording close where term overlap sees nothing. Only pairs with values on both
    sides and a cosine of at least ``COS_FLOOR`` are compared in Python (a few dozen of a head's ~1,200).
    """
    n = len(texts)
    cos = np.full((n, n), -1.0)
    vals = [slot_values(t) for t in texts]
    rows = np.fromiter((i for i, x in enumerate(vals) if x), dtype=np.intp)
    if len(rows) < 2:
        return cos, cos >= threshold
    # Only the candidates that state values are compared: a k x k product of their vectors (k ~23 of a head of 50 on
    # the zh/en sets). Through BLAS up to SMALL rows (~20 us); past it by einsum (~.2 ms), because a 50 x 50 product
    # through the threaded BLAS cost ~.6 ms CPU and ~2.7 ms wall on a busy 2-core machine.
    v = np.asarray(vectors, dtype=np.float32)[rows]
    sims = (v @ v.T if len(rows) <= _SMALL else np.einsum("ik,jk->ij", v, v)).astype(float)
    st = np.asarray(stamps, dtype=float)[rows]
    look = (st[None, :] - st[:, None] >= MIN_GAP) & (sims >= COS_FLOOR)
    a, b = np.nonzero(look)
    if len(a):
        i, j = rows[a], rows[b]
        # Cached per pair of value sets (a frozenset keeps its hash): a warm search reads a dict, not the classes.
        keep = np.fromiter((values_differ(vals[x], vals[y]) for x, y in zip(i.tolist(), j.tolist(), strict=True)),
                           dtype=bool, count=len(i))
        cos[i[keep], j[keep]] = sims[a[keep], b[keep]]
    return cos, cos >= threshold


def slot_matrix(vectors: np.ndarray | None, head: Sequence[SearchHit], stamps: Sequence[float]) -> np.ndarray:
    """One row of :data:`SLOT_FEATURES` per head hit (``vectors``: the hits' stored unit vectors; None when the
    backend cannot return them: every column reads "no pair"). ``slot_cos``: the highest cosine with a later
    candidate stating other values (-1: none at ``COS_FLOOR``); ``slot_newer`` / ``slot_older``: how many later
    candidates restate this one's slot with another value / how many earlier ones this one restates so
    (:func:`slot_pairs`); ``slot_gap``: the fused score gap to the most alike such later candidate."""
    n = len(head)
    out = np.empty((n, len(SLOT_FEATURES)))
    if vectors is None or not n:
        out[:] = (-1.0, 0.0, 0.0, ABSENT)
        return out
    cos, pair = slot_pairs(vectors, [h.record.content for h in head], stamps)
    j = cos.argmax(axis=1)
    best = cos[np.arange(n), j]
    scores = np.fromiter((h.breakdown.score for h in head), dtype=float, count=n)
    out[:, 0] = best
    out[:, 1] = pair.sum(axis=1)
    out[:, 2] = pair.sum(axis=0)
    out[:, 3] = np.where(best >= SLOT_COS, scores - scores[j], ABSENT)
    return out


@lru_cache(maxsize=TEXT_CACHE)
def says_change(text: str) -> float:
    """1 when a memory's text (its speaker prefix left out) announces a changed value (:data:`CHANGE`)."""
    m = _SPEAKER.match(text)
    return float(bool(CHANGE.search(text[m.end():] if m else text)))


def change_matrix(vectors: np.ndarray | None, head: Sequence[SearchHit], stamps: Sequence[float]) -> np.ndarray:
    """One row of :data:`CHANGE_FEATURES` per head hit: ``says_change`` (:func:`says_change`); over the candidates
    written at least ``MIN_GAP`` later that announce a change, the highest content-term Dice (``change_dice``, 0:
    none) and stored-vector cosine (``change_cos``, -1: none, or no vectors), and the fused score gap to the most
    alike of them (by cosine when vectors are given, else by Dice; ABSENT: none)."""
    n = len(head)
    out = np.empty((n, len(CHANGE_FEATURES)))
    if not n:
        return out
    says = np.fromiter((says_change(h.record.content) for h in head), dtype=float, count=n)
    st = np.asarray(stamps, dtype=float)
    mask = (st[None, :] - st[:, None] >= MIN_GAP) & (says[None, :] > 0)  # mask[i, j]: j later and announces a change
    found = mask.any(axis=1)
    dice = _slot_dice(head)
    d = np.where(mask, dice, -1.0)
    if vectors is not None:
        v = np.asarray(vectors, dtype=np.float32)
        alike = np.where(mask, np.einsum("ik,jk->ij", v, v).astype(float), -1.0)
        cos = alike.max(axis=1)
    else:
        alike, cos = d, np.full(n, -1.0)
    j = alike.argmax(axis=1)
    scores = np.fromiter((h.breakdown.score for h in head), dtype=float, count=n)
    out[:, 0] = says
    out[:, 1] = np.maximum(d.max(axis=1), 0.0)
    out[:, 2] = np.where(found, cos, -1.0)
    out[:, 3] = np.where(found, scores - scores[j], ABSENT)
    return out


@lru_cache(maxsize=4096)
def asks_before(query: str) -> float:
    """1 when the question names an earlier state in words the "originally" rule does not read."""
    return float(bool(_BEFORE.search(query)))


def _slot_dice(head: Sequence[SearchHit]) -> np.ndarray:
    """``(n, n)`` content-term Dice of each two candidates' slot words (0 where neither has any); the
    superseded and change groups both read it."""
    n = len(head)
    words = [_slot_words(h.record.content) for h in head]
    lens = np.fromiter((len(w) for w in words), dtype=np.intp, count=n)
    prod = _overlaps(words, lens) if lens.sum() else np.zeros((n, n))
    size = lens.astype(float)
    denom = size[:, None] + size[None, :]
    return np.divide(2.0 * prod, denom, out=np.zeros((n, n)), where=denom > 0)


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
    dice = _slot_dice(head)
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
