"""Name-like words in a memory: people, vendors, products, places, teams — the values a lexicon
cannot list.

"Tableau admin: Kevin" -> "Tableau admin → Sunita" is an update of one slot whose value is a
*name*; "UK leg runs Oct 1-21" / "German leg runs Oct 8-28" is another entity. The reading
(:mod:`memory.policy.reading`) finds numbers, dates, units and lexicon values, but not names, so
the judge could not tell which part of such a sentence is the slot and which the value. This
module finds names without a list:

* Latin text: capitalised words and runs of them ("Priya Nair", "Greenfield Co."), all-caps and
  mixed-case tokens (UK, HRBP, iOS); a capitalised word that starts a sentence counts only when
  it is not a plain word (mixed case or caps), since English capitalises every first word;
* Latin tokens inside Chinese text (a vendor, tool or person named in English);
* Chinese: jieba's part-of-speech tags for person, place and organisation names (nr, ns, nt,
  nrt, nrfg), two characters or more.

Each name keeps its place relative to the reading's predicate split, so the judge can ask whether
names differ in the subject (another entity) or after the predicate (a new value). Pure and cached.
"""

from __future__ import annotations

import re
import threading
import unicodedata
import warnings
from dataclasses import dataclass
from functools import lru_cache

from memory.policy.reading import read

_CJK = re.compile(r"[\u3400-\u9fff]")
_CJK_RUN = re.compile(r"[\u3400-\u9fff]+")
# A capitalised word (or a run of them joined by spaces / "&" / "-"), or a token with an inner capital or digit.
_CAP_RUN = re.compile(r"(?<![\w])(?:[A-Z][\w&'.-]*[\w&]|[A-Z])(?:[ \t]+(?:[A-Z][\w&'.-]*[\w&]|[A-Z]))*")
_LATIN = re.compile(r"(?<![\w])[A-Za-z][\w&'.-]*[A-Za-z0-9]")
_SENT_START = re.compile(r"(?:^|[.!?;。！？；\n]\s*)$")
_ZH_NAME_TAGS = frozenset({"nr", "ns", "nt", "nrt", "nrfg"})
# Capitalised words that are not names even mid-sentence.
_NOT_NAMES = frozenset(
    "i i'm i've i'd a an the this that these those it its we our you your he she they my me mon tue wed thu fri "
    "sat sun monday tuesday wednesday thursday friday saturday sunday january february march april may june "
    "july august september october november december jan feb mar apr jun jul aug sep sept oct nov dec am pm "
    "utc gmt ok note fyi tbd eta asap".split())


@dataclass(frozen=True)
class Name:
    key: str  # lower-cased
    pos: float  # start offset / text length (NFKC text)


_POSSEG_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _posseg() -> object:
    from memory.policy.align import _jieba

    _jieba()  # the dictionary, loaded once (and its warnings silenced) by the alignment
    with _POSSEG_LOCK, warnings.catch_warnings():  # jieba 0.42 has regexes Python 3.12 warns about
        warnings.simplefilter("ignore", DeprecationWarning)
        import jieba.posseg as posseg

        from memory.policy.zh_pos import tagger

        # jieba's tagger with its HMM step in numpy (same tags; memory.policy.zh_pos).
        return tagger(posseg)


def _plain_word(w: str) -> bool:
    """A capitalised word that could just be an ordinary word starting a sentence ("Laptops")."""
    return w[:1].isupper() and w[1:].islower() and w.isalpha()


@lru_cache(maxsize=16384)
def names(text: str) -> tuple[Name, ...]:
    """The name-like words of one text, in order (cached)."""
    t = unicodedata.normalize("NFKC", text)
    n = max(1, len(t))
    cjk_text = bool(_CJK.search(t))
    out: list[Name] = []
    taken: list[tuple[int, int]] = []
    for m in _CAP_RUN.finditer(t):
        words = m.group().split()
        start = m.start()
        if len(words) == 1 and _SENT_START.search(t[:start]) and _plain_word(words[0]):
            continue  # one ordinary-looking word that starts a sentence ("Laptops lock ...")
        words = [w.rstrip(".'-") for w in words]
        key = " ".join(w for w in words if w.lower() not in _NOT_NAMES).lower()
        if key:
            out.append(Name(key, start / n))
            taken.append((m.start(), m.end()))
    if cjk_text:
        for m in _LATIN.finditer(t):
            if any(a <= m.start() < b for a, b in taken) or m.group().lower() in _NOT_NAMES:
                continue
            out.append(Name(m.group().lower(), m.start() / n))
        for run in _CJK_RUN.finditer(t):
            off = run.start()
            for pair in _posseg().cut(run.group()):  # type: ignore[attr-defined]
                w, flag = pair.word, pair.flag
                if flag in _ZH_NAME_TAGS and len(w) >= 2:
                    out.append(Name(w, off / n))
                off += len(w)
    return tuple(sorted(out, key=lambda x: x.pos))


NAME_FEATURES: tuple[str, ...] = (
    "nm_a", "nm_b", "nm_matched", "nm_un_a", "nm_un_b", "nm_un_subj", "nm_un_rest_both", "nm_un_rest_b",
    "nm_only_one_side",
)


def _split_share(text: str) -> float:
    r = read(text)
    return r.split / max(1, len(r.text)) if r.split < len(r.text) else 0.5


def _match(k: str, others: set[str]) -> bool:
    return k in others or any(k in o or o in k for o in others if min(len(k), len(o)) >= 2)


def name_features(existing: str, incoming: str) -> dict[str, float]:
    """How the names of two texts compare: matched, and unmatched before / after the predicate."""
    na, nb = names(existing), names(incoming)
    ka, kb = {x.key for x in na}, {x.key for x in nb}
    una = [x for x in na if not _match(x.key, kb)]
    unb = [x for x in nb if not _match(x.key, ka)]
    sa, sb = _split_share(existing), _split_share(incoming)
    un_subj = any(x.pos < sa for x in una) and any(x.pos < sb for x in unb)
    rest_a = [x for x in una if x.pos >= sa]
    rest_b = [x for x in unb if x.pos >= sb]
    return {
        "nm_a": float(min(len(na), 3)), "nm_b": float(min(len(nb), 3)),
        "nm_matched": float(min(sum(_match(x.key, kb) for x in na), 3)),
        "nm_un_a": float(min(len(una), 3)), "nm_un_b": float(min(len(unb), 3)),
        "nm_un_subj": float(un_subj), "nm_un_rest_both": float(bool(rest_a and rest_b)),
        "nm_un_rest_b": float(min(len(rest_b), 3)),
        "nm_only_one_side": float(bool(una) != bool(unb)),
    }


def mask_names(text: str) -> str:
    """The reading's value-masked text with names masked too: the slot without its value, when
    the value is a name."""
    r = read(text)
    out = r.masked
    for x in sorted({x.key for x in names(text)}, key=len, reverse=True):
        out = re.sub(re.escape(x) if _CJK.search(x) else rf"(?<![\w]){re.escape(x)}(?![\w])", " NAME ", out)
    return re.sub(r"\s+", " ", out).strip()
