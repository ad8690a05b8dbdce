"""Align two memories unit by unit and describe what differs: the judge's view of *where* two
texts disagree, whatever words they use.

A memory's **units** are its canonical values (:mod:`memory.policy.reading`: numbers, dates,
units, formats, time zones ...) and its content words (English words, Chinese words segmented by
jieba; function words dropped). Units of the two texts are matched exactly (values only by equal
canonical value) or, for words, by the packaged multilingual encoder's cosine — so "courier" meets
"快递" and "cents" meets "decimals" without a word list. What is left unmatched is the difference:

* nothing unmatched on either side — a restatement;
* unmatched units on both sides after the predicate — a new value of the same slot (an update);
* unmatched units before the predicate, or values that stay equal while something else changes —
  another entity, metric or period (a distinct fact).

The features below only measure these; which combination means what is learned
(:mod:`memory.policy.judge`). Pure apart from the embedding function passed in.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from memory.policy.reading import read

# Words that carry no content of their own (a paraphrase adds or drops them freely).
_STOP_EN = frozenset(
    "a an the is are was were be been being to of in on for at by with from as and or but if then so that this "
    "these those it its it's i i'm i've me my we our us you your he she his her they them their there here do "
    "does did done have has had will would should shall can could may might must not no yes just also only very "
    "really too please pls btw now currently actually anymore any all each every per via into onto about over "
    "under up down out off than more most less least some such own same other which who whom whose what when "
    "where why how lol ok okay yeah fyi".split())
_STOP_ZH = frozenset(
    "的 了 是 在 和 与 及 或 也 都 就 还 又 再 把 被 给 让 对 为 以 于 从 到 向 由 这 那 这个 那个 这些 那些 我 我们 你 "
    "你们 他 她 他们 它 这边 那边 一下 一些 一个 个 吧 呢 啊 哈 嘛 呀 哦 噢 就是 还是 但是 不过 而且 并且 然后 现在 "
    "目前 其实 已经 之后 以后 之前 一直 都是 会 要 得 地 着 过 吗 么 请 麻烦".split())
_CJK_RUN = re.compile(r"[\u3400-\u9fff]+")
_WORD = re.compile(r"[\u3400-\u9fff]+|[a-z0-9][a-z0-9_'./-]*")
_PLURAL = re.compile(r"(?<=[a-z]{3})(?:es|s)$")
MATCH_COSINE = 0.62  # two words at least this close under the encoder count as the same word


@dataclass(frozen=True)
class Unit:
    key: str  # "<cls:canon>" for a value, the (lower-cased) word otherwise
    pos: float  # start offset / text length
    value: bool


_JIEBA_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _jieba() -> object:
    # Imported on first Chinese text only: loading the dictionary costs ~1 s once per process.
    with _JIEBA_LOCK:
        import logging
        import warnings

        with warnings.catch_warnings():  # jieba 0.42 has regexes Python 3.12 warns about
            warnings.simplefilter("ignore", DeprecationWarning)
            import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        return jieba


def _zh_words(run: str) -> list[str]:
    return list(_jieba().cut(run))  # type: ignore[attr-defined]


@lru_cache(maxsize=16384)
def units(text: str) -> tuple[Unit, ...]:
    """The units of one text, in order of appearance (cached)."""
    r = read(text)
    t = r.text
    n = max(1, len(t))
    out = [Unit(f"<{v.cls}:{v.canon}>", v.start / n, True) for v in r.values]
    chars = list(t)
    for v in r.values:
        chars[v.start:v.end] = " " * (v.end - v.start)
    rest = "".join(chars)
    for m in _WORD.finditer(rest):
        s = m.group()
        if _CJK_RUN.match(s):
            off = m.start()
            for w in _zh_words(s):
                if w not in _STOP_ZH and len(w.strip()) and not (len(w) == 1 and w in _STOP_ZH):
                    out.append(Unit(w, off / n, False))
                off += len(w)
        else:
            w = s.strip("'./-")
            if len(w) > 1 and w not in _STOP_EN:
                out.append(Unit(_PLURAL.sub("", w), m.start() / n, False))
    return tuple(sorted(out, key=lambda u: u.pos))


def _split_pos(text: str) -> float:
    """Where the predicate starts, as a share of the text (the middle when none was found)."""
    r = read(text)
    return r.split / max(1, len(r.text)) if r.split < len(r.text) else 0.5


ALIGN_FEATURES: tuple[str, ...] = (
    "al_p", "al_r", "al_f", "un_a", "un_b", "un_frac_a", "un_frac_b", "subst", "un_cos",
    "un_pos_a", "un_pos_b", "un_values_a", "un_values_b", "al_min_a", "al_min_b",
    "un_subj_a", "un_subj_b", "un_pred_a", "un_pred_b", "un_subj_any", "un_pred_both", "equal_values",
)

_EMPTY = dict.fromkeys(ALIGN_FEATURES, 0.0)


def unit_text(u: Unit) -> str:
    """What the encoder reads for a unit: the canonical value, or the word."""
    return u.key[1:-1].split(":", 1)[-1] if u.value else u.key


def align_features(existing: str, incoming: str,
                   embed: Callable[[Sequence[str]], list[np.ndarray]]) -> dict[str, float]:
    """The alignment features of one pair. ``embed`` maps unit texts to unit-norm vectors."""
    ua, ub = units(existing), units(incoming)
    if not ua or not ub:
        return dict(_EMPTY)
    ea = np.stack(embed([unit_text(u) for u in ua]))
    eb = np.stack(embed([unit_text(u) for u in ub]))
    s = ea @ eb.T
    va = np.array([u.value for u in ua])
    vb = np.array([u.value for u in ub])
    # Values only ever match an equal value; a value never stands in for a word.
    s[np.ix_(va, vb)] = 0.0
    s[np.ix_(va, ~vb)] = np.minimum(s[np.ix_(va, ~vb)], 0.5)
    s[np.ix_(~va, vb)] = np.minimum(s[np.ix_(~va, vb)], 0.5)
    ka = [u.key for u in ua]
    kb = [u.key for u in ub]
    for i, k in enumerate(ka):
        for j, k2 in enumerate(kb):
            if k == k2:
                s[i, j] = 1.0
    ma, mb = s.max(axis=1), s.max(axis=0)
    una = [i for i in range(len(ua)) if ma[i] < MATCH_COSINE]
    unb = [j for j in range(len(ub)) if mb[j] < MATCH_COSINE]
    spa, spb = _split_pos(existing), _split_pos(incoming)
    p, r = float(ma.mean()), float(mb.mean())
    return {
        "al_p": p, "al_r": r, "al_f": 2 * p * r / (p + r + 1e-9),
        "un_a": float(len(una)), "un_b": float(len(unb)),
        "un_frac_a": len(una) / len(ua), "un_frac_b": len(unb) / len(ub),
        "subst": float(bool(una and unb)),
        "un_cos": float(s[np.ix_(una, unb)].max()) if una and unb else 0.0,
        "un_pos_a": float(np.mean([ua[i].pos for i in una])) if una else -1.0,
        "un_pos_b": float(np.mean([ub[j].pos for j in unb])) if unb else -1.0,
        "un_values_a": float(sum(ua[i].value for i in una)), "un_values_b": float(sum(ub[j].value for j in unb)),
        "al_min_a": float(ma.min()), "al_min_b": float(mb.min()),
        "un_subj_a": float(sum(ua[i].pos < spa for i in una)), "un_subj_b": float(sum(ub[j].pos < spb for j in unb)),
        "un_pred_a": float(sum(ua[i].pos >= spa for i in una)), "un_pred_b": float(sum(ub[j].pos >= spb for j in unb)),
        "un_subj_any": float(any(ua[i].pos < spa for i in una) or any(ub[j].pos < spb for j in unb)),
        "un_pred_both": float(any(ua[i].pos >= spa for i in una) and any(ub[j].pos >= spb for j in unb)),
        "equal_values": float(len({u.key for u in ua if u.value} & {u.key for u in ub if u.value})),
    }
