"""memory.text tokenises ASCII text without compiling its CJK patterns, with the same terms.

The CJK character classes cost a fresh process 25-35 ms to compile (``re`` visits every code
point of a range), so :func:`memory.text.tokenize` takes ASCII text through a plain word pattern
and compiles them on the first non-ASCII text. The terms must be exactly those of the full path:
the keyword index of every stored memory was built with it.
"""

from __future__ import annotations

import subprocess
import sys
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.text import _tokenize_any, count_tokens, keyword_terms, tokenize

# Printable ASCII plus characters that NFKC folds to ASCII (fullwidth letters and digits, the
# fullwidth low line and apostrophe, no-break space) and a few that stay non-ASCII.
_CHARS = st.sampled_from([chr(c) for c in range(32, 127)] + list("ＡＢｃ１２＿＇\u00a0éß中文"))


@settings(max_examples=3000, deadline=None)
@given(st.text(_CHARS, max_size=40))
def test_ascii_fast_path_finds_the_terms_of_the_full_tokenizer(text: str) -> None:
    normalised = unicodedata.normalize("NFKC", text).lower()
    assert tokenize(text) == _tokenize_any(normalised)


def test_ascii_examples() -> None:
    text = "The user's don't_care 42 reports ＲＥＰＯＲＴＩＮＧ o'clock _x_ it's"
    assert tokenize(text) == _tokenize_any(unicodedata.normalize("NFKC", text).lower())
    assert tokenize("Reports reporting REPORTED") == ["report", "report", "report"]


def test_english_search_terms_compile_no_cjk_pattern() -> None:
    """Importing memory.text and tokenising English compiles none of the CJK classes; the first
    Chinese text does, and gets its bigrams and unigrams as before."""
    code = (
        "import re, memory.text as t\n"
        "t.tokenize('Which chart style does the user prefer?'); t.keyword_terms('user prefers bar charts')\n"
        "print(t._cjk.cache_info().currsize, any('\\u4e00' in str(k) for k in re._cache))\n"
        "print(t.keyword_terms('用户偏好柱状图'))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    first, second = res.stdout.splitlines()
    assert first == "0 False"
    assert second == str(keyword_terms("用户偏好柱状图"))
    assert "用户" in second and "柱状" in second


def test_count_tokens_unchanged() -> None:
    assert count_tokens("用户偏好柱状图 and bar charts") == 7 + 4


def _keyword_terms_as_written_before(text: str) -> list[str]:
    """keyword_terms before stop 31, the specification: the full tokenizer's terms (the ASCII fast path
    finds the same, tests above), then each CJK run's unigrams from a second normalisation."""
    from memory.text import _ZH_INDEX_STOP, _cjk

    terms = _tokenize_any(unicodedata.normalize("NFKC", text).lower())
    if text.isascii():
        return terms
    for match in _cjk().run.finditer(unicodedata.normalize("NFKC", text).lower()):
        if len(run := match.group()) > 1:
            terms.extend(c for c in run if c not in _ZH_INDEX_STOP)
    return terms


_MIXED = st.sampled_from([chr(c) for c in range(32, 127)] + list("ＡＢｃ１２＿＇\u00a0éß中文报表的了金额万元，。？ｱ한"))


@settings(max_examples=3000, deadline=None)
@given(st.text(_MIXED, max_size=40))
def test_keyword_terms_normalising_once_finds_the_same_terms(text: str) -> None:
    assert keyword_terms(text) == _keyword_terms_as_written_before(text)


def test_keyword_terms_of_the_zh_en_turns_are_unchanged() -> None:
    import json
    from pathlib import Path

    data = Path(__file__).parents[1] / "data"
    texts = [json.loads(line)["text"] for s in ("zh_en", "zh_en_2")
             for line in (data / s / "turns.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(texts) > 600 and any(not t.isascii() for t in texts) and any(t.isascii() for t in texts)
    assert [keyword_terms(t) for t in texts] == [_keyword_terms_as_written_before(t) for t in texts]
