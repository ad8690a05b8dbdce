"""The keyword tokenizer shared by every backend (FTS5 in SQLite, sparse vectors in Qdrant).

SQLite's default FTS5 tokenizer treats a run of Chinese characters as one token, so
"我喜欢喝咖啡" would only match itself. We tokenize in Python instead and index the result
as space-separated terms:

* Latin/digits: NFKC, lower-cased words, English stop words dropped, a light suffix stemmer
  ("reports"/"reporting" -> "report").
* Han characters: overlapping character bigrams ("咖啡店" -> "咖啡", "啡店"); a lone character
  is kept as a unigram. Bigrams are the usual dictionary-free choice for Chinese retrieval.
* Kana and Hangul runs are treated like Han.

The keyword index (:func:`keyword_terms`: FTS5 documents and queries, Qdrant's sparse vectors)
adds the content characters of each CJK run as unigrams to those bigrams. A question and the
memory that answers it often share characters but few bigrams ("周六几点开门" vs "星期六 9 点
营业"), and a bigram across a word boundary ("里的", "么时") matches noise; unigrams give BM25 a
softer match whose IDF stays low for common characters. Chosen out of set against bigrams only
and jieba words on the three zh/en sets (zh_en, zh_en_2, zh_en_3), with the fusion unchanged:
zh->zh MRR .899 / .621 / .824 -> .906 / .662 / .894, all MRR .838 / .589 / .625 -> .831 / .592 /
.652; jieba words came close on zh->zh but lost cross-language questions, and take ~1.4 s to
load. :func:`tokenize` itself is unchanged: the write policy's features are computed on it.

Everything here is pure and deterministic, so both backends rank alike.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache, lru_cache
from typing import NamedTuple

# Entries of every cache keyed by a memory's text (what one reading of a text found: its Han share, keyword terms,
# time words, slot words, question share, lexicon glosses ...; memory.scoring, query, rerank, rerank_context,
# rerank_supersede, cedict). A search reads each candidate's text several times and candidates recur across a
# user's searches, so the readings are kept; but an entry costs ~3.3 KB across the caches the shipped reranker uses,
# and at 65,536 entries each (stop 33) a long-running process held ~218 MB of them (tracemalloc, 126k new texts
# through score + rules + reranker). 16,384 holds ~55 MB and never filled in the benches: the handoff bench at 100k
# (300 handoffs after warm-up) leaves ~9-10k entries in each, so its hit rates are the same as with 65,536. Caches
# keyed by a word (bounded by the vocabulary, tens of bytes an entry) keep their own sizes.
TEXT_CACHE = 16384

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
# On ASCII text (after NFKC and lower-casing) the token pattern below can only match words, and
# its word class [^\W_<CJK>] is exactly [0-9A-Za-z] there: this pattern finds the same tokens.
_ASCII_WORD_RE = re.compile(r"[0-9A-Za-z]+(?:'[0-9A-Za-z]+)?")


class _CjkPatterns(NamedTuple):
    token: re.Pattern[str]  # CJK runs, and words of any script
    cjk: re.Pattern[str]  # one CJK character
    run: re.Pattern[str]  # a CJK run


@cache
def _cjk() -> _CjkPatterns:
    """The patterns over the CJK ranges, compiled on first use. ``re`` compiles a character class
    over a range by visiting every code point in it (~40,000 here, five times): 25-35 ms of a
    fresh process at load ~6, which a search for an English question does not need."""
    return _CjkPatterns(
        token=re.compile(
            rf"[{_CJK}]+"  # CJK runs
            rf"|[^\W_{_CJK}]+(?:'[^\W_{_CJK}]+)?",  # words (letters/digits of other scripts)
        ),
        cjk=re.compile(rf"[{_CJK}]"),
        run=re.compile(rf"[{_CJK}]+"),
    )


STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor
    not of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves
    then there there's these they they'd they'll they're they've this those through to too under
    until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves also just really yeah oh yes hey hi like got get
    s t""".split()
)

# Chinese function characters that carry no topic; dropped only as lone unigrams.
_ZH_STOP_UNIGRAMS = frozenset("的了是我你他她它们在和与就都也还吗呢吧啊么这那个")


def _stem(word: str) -> str:
    """A deliberately light English stemmer: plural and common verb suffixes only."""
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("'s"):
        word = word[:-2]
    for suffix, repl, min_len in (
        ("ies", "y", 5),
        ("sses", "ss", 5),
        ("ing", "", 6),
        ("ed", "", 5),
        ("es", "", 5),
        ("s", "", 4),
    ):
        if word.endswith(suffix) and len(word) >= min_len:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            if suffix == "es" and not word.endswith(("ches", "shes", "xes", "zes", "sses")):
                continue
            stem = word[: len(word) - len(suffix)] + repl
            # "running" -> "runn" -> "run"
            if suffix in ("ing", "ed") and len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]
            return stem
    return word


@lru_cache(maxsize=65536)
def _word_term(word: str) -> str | None:
    if word in STOPWORDS:
        return None
    return _stem(word.replace("'", "")) if "'" in word else _stem(word)


def tokenize(text: str) -> list[str]:
    """Split text into index terms (duplicates kept: term frequency matters to BM25)."""
    return _tokenize_normalised(unicodedata.normalize("NFKC", text).lower())


def _tokenize_normalised(text: str) -> list[str]:
    """:func:`tokenize` of NFKC-normalised, lower-cased text."""
    if text.isascii():
        # findall, not finditer: the pattern has no group, so the same words without a match object
        # each (~1/3 of an English memory's tokenising, which search does for every new candidate).
        return [term for word in _ASCII_WORD_RE.findall(text) if (term := _word_term(word))]
    return _tokenize_any(text)


def _tokenize_any(text: str) -> list[str]:
    """:func:`tokenize` of normalised text in any script."""
    p = _cjk()
    terms: list[str] = []
    for match in p.token.finditer(text):
        tok = match.group()
        if p.cjk.match(tok):
            if len(tok) == 1:
                if tok not in _ZH_STOP_UNIGRAMS:
                    terms.append(tok)
            else:
                terms.extend(tok[i : i + 2] for i in range(len(tok) - 1))
        else:
            term = _word_term(tok)
            if term:
                terms.append(term)
    return terms


# Characters that never carry a topic as unigrams of the keyword index (bigrams keep them).
_ZH_INDEX_STOP = _ZH_STOP_UNIGRAMS | frozenset("呀哦嘛着过得地")


def keyword_terms(text: str) -> list[str]:
    """The terms a text is keyword-indexed and searched under: :func:`tokenize`, plus the
    content characters of every CJK run of two or more characters as unigrams (module docstring).
    """
    if text.isascii():
        return tokenize(text)
    norm = unicodedata.normalize("NFKC", text).lower()  # once for both passes (it was twice)
    terms = _tokenize_normalised(norm)
    for match in _cjk().run.finditer(norm):
        run = match.group()
        if len(run) > 1:
            terms.extend(c for c in run if c not in _ZH_INDEX_STOP)
    return terms


def keyword_term_set(text: str) -> frozenset[str]:
    """``frozenset(keyword_terms(text))``, built as a set in one pass over the text.

    The reranker reads a candidate's terms as a set (:func:`memory.rerank_context.terms`), once per new text, and
    at 100k most of a search's ~50 candidates are new: keeping every duplicate in order, then a second pass over
    the CJK runs for their unigrams, was ~2/3 of that (tests/unit/test_keyword_term_set.py pins the equality).
    """
    if text.isascii():  # NFKC leaves ASCII unchanged; tokenize's word pattern on it is _ASCII_WORD_RE
        return frozenset(filter(None, map(_word_term, _ASCII_WORD_RE.findall(text.lower()))))
    norm = unicodedata.normalize("NFKC", text).lower()
    if norm.isascii():
        return frozenset(filter(None, map(_word_term, _ASCII_WORD_RE.findall(norm))))
    p = _cjk()
    out: set[str] = set()
    # The token pattern's CJK runs are the run pattern's (a word token holds no CJK character), so one pass
    # gives tokenize's bigrams / lone unigrams and keyword_terms' run unigrams alike.
    for tok in p.token.findall(norm):
        if p.cjk.match(tok):
            if len(tok) == 1:
                if tok not in _ZH_STOP_UNIGRAMS:
                    out.add(tok)
            else:
                out.update([tok[i : i + 2] for i in range(len(tok) - 1)])
                out.update(set(tok) - _ZH_INDEX_STOP)
        elif term := _word_term(tok):
            out.add(term)
    return frozenset(out)


def fts_document(text: str) -> str:
    """The string stored in the FTS5 column: terms separated by spaces."""
    return " ".join(keyword_terms(text))


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression that ORs the distinct query terms, or None if there are none.

    Each term is double-quoted so FTS5 never reads it as syntax (AND, NEAR, column filters).
    """
    seen = dict.fromkeys(keyword_terms(text))
    if not seen:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in seen)


# Texts up to this long are counted once per process (:func:`count_tokens`): injection counts the
# same memories' contents and bullet lines handoff after handoff (the budget fit, the summary).
_COUNT_CACHE_CHARS = 4096


def count_tokens(text: str) -> int:
    """A cheap token estimate for prompt budgets: CJK chars count one each, words count ~1.3."""
    if len(text) <= _COUNT_CACHE_CHARS:
        return _count_tokens_cached(text)
    return _count_tokens(text)


@lru_cache(maxsize=TEXT_CACHE)
def _count_tokens_cached(text: str) -> int:
    return _count_tokens(text)


def _count_tokens(text: str) -> int:
    cjk_re = _cjk().cjk
    cjk = len(cjk_re.findall(text))
    words = len(re.findall(r"[^\W_]+", cjk_re.sub(" ", text)))
    return cjk + int(words * 1.3 + 0.5)


def is_blank(text: str) -> bool:
    """Nothing visible: whitespace, control and format characters only (zero-width space, bidi
    overrides, BOM, joiners). Such text was stored as a memory nobody can read, or searched for
    as if it were a question. Stops at the first visible character."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in text)
