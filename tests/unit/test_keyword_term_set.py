"""Shortcuts on the reranker's per-candidate text readings give exactly the readings they replaced (stop 33).

At 100k most of a search's ~50 reranked candidates are texts the process has not read yet, so their terms, time
expressions and questions are computed on the search's clock. :func:`memory.text.keyword_term_set` builds the term
set in one pass, :func:`memory.query.states_time` starts its regex at the first character a match can start with,
:func:`memory.query.asks` answers 0 for a text without a question mark. Each is compared here with the code it
replaced (written out below), on generated text that mixes every script and marker those readings look at.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memory import query
from memory.text import keyword_term_set, keyword_terms

# ASCII, fullwidth forms NFKC folds to ASCII, Han (stop characters included), kana, Hangul, apostrophes, and the
# markers the time and question readings look for.
_PIECES = ([chr(c) for c in range(32, 127)] + list("ＡＢｃ１２＿＇\u00a0éß的了个我们咖啡店押金周敏一二十月日号昨今明上下去前后天年星期末ｱｲ가나？。！：")
           + ["2019", "1999", "3pm", " 7 am", "5月", "上个月", "下周", "周末", "星期三", "last week", "this morning",
              "[image: a cat?]", "Caroline: ", "don't", "rock'n'roll", "What?", "好吗？"])
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


def _states_time_before(text: str) -> bool:
    """memory.query.states_time as it was: the time regex searched over the whole text."""
    words = text.lower().translate(query._PUNCT_TO_SPACE).split()
    if not query._TIME_WORDS.isdisjoint(words):
        return True
    if not query._TIME_FIRST.isdisjoint(words):
        for first, second in zip(words, words[1:], strict=False):
            if first in query._TIME_FIRST and second in query._TIME_SECOND:
                return True
    return query._TIME_OTHER.search(text) is not None


def _asks_before(text: str) -> float:
    """memory.query.asks as it was: every text split into sentences."""
    body = query._SPEAKER_PREFIX.sub("", query._CAPTION.sub("", text), count=1)
    total = asked = 0
    for m in query._SENTENCE.finditer(body):
        sent = m.group(0).strip()
        total += len(sent)
        if sent.endswith(("?", "？")):
            asked += len(sent)
    return asked / total if total else 0.0


@settings(max_examples=4000, deadline=None)
@given(_TEXT)
def test_term_set_is_the_set_of_keyword_terms(text: str) -> None:
    assert keyword_term_set(text) == frozenset(keyword_terms(text))


@settings(max_examples=4000, deadline=None)
@given(_TEXT)
def test_states_time_and_asks_read_as_before(text: str) -> None:
    assert query.states_time.__wrapped__(text) == _states_time_before(text)
    got, want = query.asks.__wrapped__(text), _asks_before(text)
    assert got == want and type(got) is type(want)


def test_examples() -> None:
    assert keyword_term_set("咖啡店的押金 don't Reports") == frozenset(keyword_terms("咖啡店的押金 don't Reports"))
    assert keyword_term_set("ＲＥＰＯＲＴＩＮＧ") == frozenset({"report"})
    # The year pattern's \b still sees the character before the first digit (the text is not sliced).
    assert not query.states_time.__wrapped__("order a2019 shipped")
    assert query.states_time.__wrapped__("order 2019 shipped")
    assert query.states_time.__wrapped__("我们上个月去的")
    assert not query.states_time.__wrapped__("no digits here at all")
    assert query.asks.__wrapped__("no question here. none.") == 0.0
    assert query.asks.__wrapped__("Caroline: Fine. How are you?") == _asks_before("Caroline: Fine. How are you?")
