"""Query understanding for search: pure rules over the question text and an explicit ``now``.

Nothing here embeds or touches a backend; :func:`plan_query` reads a question once (well under
a millisecond: a handful of precompiled regexes) and :func:`rerank` adjusts already-scored hits.
Why rules and not a model: no offline model we can ship parses dates or question intent, and
the cases that matter are regular:

* **Dates in the question** ("on 7 July, 2023", "in June", "Aug 15th", "去年十二月", "上周",
  "last week") say *when the memory was written*, give or take a few days: people talk about
  an event in the next conversation after it. Memories written inside that window get a bonus.
* **"When ..." questions** ("when did", "how long ago", "什么时候", "哪天") are answered by a
  memory that itself carries a time expression ("last Friday", "yesterday", "in 2019", "上周"),
  so such memories get a small bonus.
* **"Current value" questions** ("now", "currently", "nowadays", "现在", "目前") want the newest of
  several memories about the same thing (preferences get updated); recency gets a bonus, scaled by
  how relevant the memory is (its sim over the best candidate's). Unscaled, the bonus lifted newer
  but unrelated memories as much as the update itself and pushed evidence out of the top 5; scaled,
  fitted leave-one-set-out on four zh/en sets (``python -m memctl.tune_retrieval --stage current``),
  the ``current`` questions' out-of-set MRR rose with other questions unchanged.

* **Current value of a slot** ("now", "目前" questions, not "originally/最初" ones): among the
  relevant head of the ranking, when two memories state the same slot with different values (the
  write policy's reading, :func:`memory.policy.reading.read`: a value class whose values differ,
  with no differing scope such as region or period in the subject part, and content terms in
  common: :func:`same_slot`), the newer one is lifted to just above the older one, by at most
  ``slot_bonus``. In the app the write policy already moves a superseded value to history;
  this covers stores written without it (imported turns, Markdown notes). Only for questions
  that ask for the current value: applied to questions without a time as well, it lowered
  the zh/en tuning conversations' MRR (.786 -> .75 with this slot test; .755 -> .68-.73 before).

* **Memories that ask** ("Caroline: What pet do you have?") share the question's words but state
  nothing; each hit loses ``question_penalty`` times the share of its text that is questions
  (LoCoMo tuning half: MRR .609 -> .631, R@10 .840 -> .847; zh/en MRR .719 -> .726).

Only the ranking changes; the keyword and vector queries are the question as asked (stripping
question words did not pay: the keyword tokenizer already drops them as stop words). One
exception, off by default (``window_candidates``): a question with a date window can add the best
few memories written in that window from a second, filtered backend query (:func:`window_filter`,
:func:`merge_candidates`); it found 2 more of 760 tuning questions, but SQLite filters after
reading, so a window with few memories scans the namespace (~7 s at 100k memories).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from memory.records import ScoreBreakdown, ScoredMemory, SearchHit
from memory.settings import ScoringSettings
from memory.text import TEXT_CACHE

_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9,
    "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ZH_NUM = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10,
           "十一": 11, "十二": 12}
_ZH_MONTH_RE = r"(1[0-2]|[1-9]|十[一二]?|[一二三四五六七八九])\s*月"

# "7 July, 2023" / "7th of July 2023" (day first) and "July 7, 2023" / "Aug 15th" (month first).
_DAY_FIRST = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\b\.?,?\s*(\d{{4}})?", re.I)
_MONTH_FIRST = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(\d{{4}}))?", re.I)
# "in June", "June 2023", "beginning of November 2022": a capitalised full month name (with or
# without its year). Abbreviations alone are too often names or words ("Jun", "Mar", "may"), and
# "May" needs a preposition before it like every date (see _EVENT_PREP).
_FULL_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_MONTH_ONLY = re.compile(rf"\b({_FULL_MONTHS})\b\.?,?\s*(\d{{4}})?")
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
# Chinese: "2023年7月7日", "7月7号", "去年十二月", "3月".
_ZH_DATE = re.compile(rf"(?:(\d{{4}})\s*年|(去年|今年|前年))?\s*{_ZH_MONTH_RE}(?:\s*(\d{{1,2}})\s*[日号])?")

# Relative expressions, resolved against ``now``: (pattern, days back to the window start, days back to its end).
_RELATIVE: tuple[tuple[re.Pattern[str], int, int], ...] = (
    (re.compile(r"\byesterday\b|昨天|昨日", re.I), 2, 0),
    (re.compile(r"\blast\s+week(?:end)?\b|上周|上个?星期|上个?礼拜", re.I), 10, 3),
    (re.compile(r"\b(?:a\s+few|couple\s+of)\s+days\s+ago\b|前几天|前两天", re.I), 6, 1),
    (re.compile(r"\btwo\s+weeks\s+ago\b|两周前|两个星期前", re.I), 18, 10),
    (re.compile(r"\blast\s+month\b|上个?月", re.I), 62, 27),
)

# Question forms that ask for a time.
_WANTS_TIME = re.compile(
    r"^\s*(?:when|what\s+(?:date|day|time|year|month)|which\s+(?:date|day|year|month)|how\s+long\s+ago)\b"
    r"|\bwhen\s+(?:did|was|were|is|does|do|will|has|had)\b|\bby\s+when\b"
    r"|什么时候|何时|哪天|哪一天|哪年|哪个月|几月|几号|多久以前",
    re.I,
)
# Question forms that ask for the value that holds now (the newest statement wins).
_WANTS_CURRENT = re.compile(
    r"\b(?:now|currently|current|these\s+days|nowadays|latest|at\s+the\s+moment|at\s+this\s+point|at\s+present"
    r"|presently|anymore)\b|现在|目前|当前|如今|最新|眼下|现阶段",
    re.I,
)
# Question forms that ask about an earlier state ("what was it originally"): no current-value rule.
_ASKS_PAST = re.compile(
    r"\b(?:originally|original|initially|at first|previous(?:ly)?|used to|before the change|earlier|prior)\b"
    r"|最初|最早|原来|原先|之前|以前|起初|一开始|当初",
    re.I,
)
# A memory that states a time: relative phrases, weekdays, months, years, clock times, Chinese
# dates. Word-set lookups, not one big case-insensitive regex: that cost ~50 us per memory, i.e.
# several ms for a "when" question over ~100 candidates; this is a few us (and cached).
_TIME_WORDS = frozenset(
    """yesterday today tonight tomorrow ago weekend weekends since recently monday tuesday wednesday
    thursday friday saturday sunday mondays fridays saturdays sundays""".split()
) | frozenset(_MONTHS)
_TIME_FIRST = frozenset(("last", "this", "next"))
_TIME_SECOND = frozenset(
    "night week weekend month year time summer winter spring fall morning afternoon evening past".split())
_PUNCT_TO_SPACE = str.maketrans({c: " " for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\n\t\u2019\u201c\u201d"})
_TIME_OTHER = re.compile(
    r"\b(?:19|20)\d\d|\d\s*[ap]m\b|\d\s*[月日号]|[一二三四五六七八九十]月"
    r"|昨天|今天|明天|上周|下周|上个?月|下个?月|去年|今年|明年|前天|后天|周[一二三四五六日末]|星期",
    re.I,
)
# Every match of _TIME_OTHER starts with one of these characters (the \b before a year consumes nothing), so
# states_time searches from the first of them, or not at all: _TIME_OTHER alone tried its alternation at every
# position of every new candidate's text. Keep the two in step when a time pattern is added.
_TIME_START = re.compile(r"[\d一二三四五六七八九十昨今明上下去前后周星]")


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """What :func:`plan_query` read from a question.

    ``window`` is a half-open ``[start, end)`` range of memory write times the question points
    at (None: no date in it). ``wants_time`` / ``wants_current`` flag "when ..." and
    "... now" questions.
    """

    text: str
    window: tuple[datetime, datetime] | None = None
    wants_time: bool = False
    wants_current: bool = False
    asks_past: bool = False


@dataclass(frozen=True, slots=True)
class RerankWeights:
    """Score bonuses (in units of the final score, where ``sim`` is in [0, 1]).

    The defaults mirror ``ScoringSettings`` (``*_bonus``), where the service takes them from.
    """

    window: float = 0.3
    time: float = 0.2
    current: float = 0.3  # fitted leave-one-set-out (tune_retrieval --stage current); was 0.05 unscaled
    speaker: float = 0.2
    question: float = 0.15  # a penalty, times the share of the memory that is a question
    slot: float = 0.3  # "now" questions: the most the newer statement of a slot is lifted (to above the older)
    # "now" questions: the recency bonus is scaled by sim / the best candidate's sim (False: the
    # unscaled bonus of earlier versions, kept so the tuner can compare against it).
    current_by_sim: bool = True

    @classmethod
    def from_scoring(cls, cfg: ScoringSettings) -> RerankWeights:
        return cls(cfg.window_bonus, cfg.time_bonus, cfg.current_bonus, cfg.speaker_bonus,
                   cfg.question_penalty, cfg.slot_bonus)


def _zh_month(tok: str) -> int:
    return int(tok) if tok.isdigit() else _ZH_NUM[tok]


def _latest_year(month: int, day: int, now: datetime) -> int:
    """A date given without a year means its latest occurrence not after ``now``."""
    year = now.year
    try:
        if datetime(year, month, day, tzinfo=UTC) > now:
            year -= 1
    except ValueError:  # 29 February and the like: keep the year, let the caller skip it
        pass
    return year


def _day_window(year: int, month: int, day: int) -> tuple[datetime, datetime] | None:
    # People mention an event in the conversation after it: from the day before to a week after.
    try:
        d = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return d - timedelta(days=1), d + timedelta(days=8)


def _month_window(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    nxt = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, nxt + timedelta(days=10)


# A date names *when something happened* after a preposition ("in June", "on 7 July, 2023",
# "between August 11 and ...", "the week before August 3"); without one it usually names the
# period a figure is about ("April conversion rate", "February's GMV"), which was written down
# weeks later, so it gives no window.
_EVENT_PREP = re.compile(
    r"\b(?:in|on|during|around|between|before|after|of|since|early|late|mid)[\s-]+(?:the\s+)?$", re.I)


def _event_date(q: str, m: re.Match[str]) -> bool:
    return _EVENT_PREP.search(q, 0, m.start()) is not None


def _explicit_window(q: str, now: datetime) -> tuple[datetime, datetime] | None:
    years = [int(y) for y in _YEAR.findall(q)]
    default_year = years[-1] if years else None  # "between August 11 and August 15 2023"
    for m in _DAY_FIRST.finditer(q):
        if _event_date(q, m):
            day, month = int(m.group(1)), _MONTHS[m.group(2).lower()]
            year = int(m.group(3)) if m.group(3) else default_year or _latest_year(month, day, now)
            return _day_window(year, month, day)
    for m in _MONTH_FIRST.finditer(q):
        if _event_date(q, m) and int(m.group(2)) <= 31:
            month, day = _MONTHS[m.group(1).lower()], int(m.group(2))
            year = int(m.group(3)) if m.group(3) else default_year or _latest_year(month, day, now)
            return _day_window(year, month, day)
    for m in _MONTH_ONLY.finditer(q):
        if _event_date(q, m):
            month = _MONTHS[m.group(1).lower()]
            year = int(m.group(2)) if m.group(2) else default_year or _latest_year(month, 1, now)
            return _month_window(year, month)
    # Chinese: only a full date ("7月7日"); a bare month ("三月份的 GMV") is the period a figure
    # is about, as above.
    for m in _ZH_DATE.finditer(q):
        if m.group(4):
            month = _zh_month(m.group(3))
            if m.group(1):
                year = int(m.group(1))
            elif m.group(2):
                year = now.year - {"去年": 1, "今年": 0, "前年": 2}[m.group(2)]
            else:
                year = default_year or _latest_year(month, int(m.group(4)), now)
            return _day_window(year, month, int(m.group(4)))
    for m in _YEAR.finditer(q):
        if _event_date(q, m):
            y = int(m.group(1))
            return datetime(y, 1, 1, tzinfo=UTC), datetime(y + 1, 1, 10, tzinfo=UTC)
    return None


def plan_query(query: str, now: datetime) -> QueryPlan:
    """Read dates and intent from a question; ``now`` anchors relative dates ("last week").

    ``now`` must be timezone-aware (the service passes UTC).
    """
    window = _explicit_window(query, now)
    if window is None:
        for pattern, back_start, back_end in _RELATIVE:
            if pattern.search(query):
                window = (now - timedelta(days=back_start), now - timedelta(days=back_end) + timedelta(days=1))
                break
    return QueryPlan(
        text=query,
        window=window,
        wants_time=bool(_WANTS_TIME.search(query)),
        wants_current=bool(_WANTS_CURRENT.search(query)),
        asks_past=bool(_ASKS_PAST.search(query)),
    )


def window_filter(plan: QueryPlan, base: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The filter of the extra candidate query for a question that names a date (else None).

    The memory the question is about is often outside the best ``candidates`` of either channel
    (a long chat says "Nate" and "tournament" many times) but written inside the window, where
    few memories compete. A filter takes one operator per key, so the window is
    ``created_at >= start`` and ``updated_at < end`` (``updated_at >= created_at``: memories
    written in the window and not edited after it). None when the caller's own filter already
    restricts these times.
    """
    if plan.window is None or (base and ("created_at" in base or "updated_at" in base)):
        return None
    start, end = plan.window
    return {**(base or {}), "created_at": {"$gte": start}, "updated_at": {"$lt": end}}


def _max_score(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def merge_candidates(first: Sequence[ScoredMemory], more: Sequence[ScoredMemory]) -> list[ScoredMemory]:
    """``first`` then the new ones of ``more`` (by record id); a duplicate keeps each channel's max."""
    out = {c.record.id: c for c in first}
    for c in more:
        old = out.get(c.record.id)
        out[c.record.id] = c if old is None else ScoredMemory(
            old.record, _max_score(old.vector_score, c.vector_score), _max_score(old.keyword_score, c.keyword_score))
    return list(out.values())


@lru_cache(maxsize=TEXT_CACHE)
def states_time(text: str) -> bool:
    """Does a memory's text carry a time expression ("last Friday", "in 2019", "上周")?"""
    words = text.lower().translate(_PUNCT_TO_SPACE).split()
    if not _TIME_WORDS.isdisjoint(words):
        return True
    if not _TIME_FIRST.isdisjoint(words):
        for first, second in zip(words, words[1:], strict=False):
            if first in _TIME_FIRST and second in _TIME_SECOND:
                return True
    # A search from pos still reads the character before pos for \b (the string is not sliced).
    start = _TIME_START.search(text)
    return start is not None and _TIME_OTHER.search(text, start.start()) is not None


_SPEAKER_PREFIX = re.compile(r"^[^:：\s]{1,40}[:：]\s*")
_CAPTION = re.compile(r"\[image:[^\]]*\]")
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*")


@lru_cache(maxsize=TEXT_CACHE)
def asks(text: str) -> float:
    """Share (by characters) of a memory's text that is questions, in [0, 1].

    A chat turn that only asks ("What pet do you have?") shares the question's words but
    states nothing, so it is rarely the memory a question is after. A leading "Speaker: " and
    image captions ("[image: ...]") are not counted.
    """
    if "?" not in text and "？" not in text:  # no sentence can end in one: nothing asked (most new candidates)
        return 0.0
    body = _SPEAKER_PREFIX.sub("", _CAPTION.sub("", text), count=1)
    total = asked = 0
    for m in _SENTENCE.finditer(body):
        sent = m.group(0).strip()
        total += len(sent)
        if sent.endswith(("?", "？")):
            asked += len(sent)
    return asked / total if total else 0.0


def _named_speakers(hits: Sequence[SearchHit], query: str) -> frozenset[str]:
    """Speakers (``metadata.extra["speaker"]``) of the candidates whom the question names.

    Empty unless the question names some but not all of them: "What did Caroline paint?"
    favours what Caroline said; a question naming both speakers of a chat favours neither.
    """
    speakers = {s for h in hits if isinstance(s := h.record.metadata.extra.get("speaker"), str) and s.strip()}
    if len(speakers) < 2:
        return frozenset()
    low = query.casefold()
    named = frozenset(s for s in speakers if _mentions(low, s.casefold()))
    return named if named and len(named) < len(speakers) else frozenset()


named_speakers = _named_speakers  # public name for the learned reranker's features (memory.rerank)


def _mentions(text: str, name: str) -> bool:
    # Whole-word match for Latin names ("Jon" is not in "John"); substring for CJK names.
    if not name.isascii():
        return name in text
    i = text.find(name)
    while i >= 0:
        end = i + len(name)
        if (i == 0 or not text[i - 1].isalnum()) and (end == len(text) or not text[end].isalnum()):
            return True
        i = text.find(name, i + 1)
    return False


SLOT_HEAD = 10  # how many of the best hits the current-value rule compares (pairwise, read() cached)
# ... among those whose sim is at least this share of the best one's. It was .6: the newer
# statement is often worded unlike the question ("以后报表金额改成人民币百万元" vs the question's
# "报表里的金额"), and on the zh/en tuning conversations the one current-value question the rule
# missed had its answer at .47 of the best sim. .3 and 0 rank the tuning conversations alike.
SLOT_RELEVANT = 0.3
# Memories written this close together carry no order (one import, one indexing pass of a
# Markdown folder, one conversation session): neither is "the newer statement".
SLOT_MIN_GAP = timedelta(hours=1)
# Two statements of one slot also talk about the same attribute: the Dice overlap of their
# content terms (values masked, see _slot_terms) is at least this. Chosen on the zh/en tuning
# conversations 01/03/05: the pairs that do state one slot overlap .23-.33, the others the reading
# also paired (a marathon and a report deadline: both state a time) at most .10.
SLOT_OVERLAP = 0.15
# Placeholders the reading masks values with (after tokenising): they say a value is there, not which attribute.
_MASK_TERMS = frozenset({"n", "x", "name", "date", "time", "year"})


@lru_cache(maxsize=TEXT_CACHE)
def _slot_terms(text: str) -> frozenset[str]:
    """Content terms of a memory with its values masked and its leading "Speaker: " removed."""
    from memory.policy.reading import read
    from memory.text import tokenize

    return frozenset(t for t in tokenize(read(text).masked) if len(t) > 1 and t not in _MASK_TERMS)


def _term_dice(ta: frozenset[str], tb: frozenset[str]) -> float:
    return 2 * len(ta & tb) / (len(ta) + len(tb)) if ta or tb else 0.0


def same_slot(a: str, b: str) -> bool:
    """Do two memory texts state the same slot with different values (the write policy's reading)?

    A leading ``"Speaker: "`` (stored chat turns) is dropped first: the reading took the colon
    for the predicate, so every turn's subject was the speaker's name and no region or period in
    it could tell two slots apart. The two texts must also share content terms
    (``SLOT_OVERLAP``): the reading alone paired any two memories whose values of one class
    differ, and of the pairs it found among the top hits of the zh/en tuning conversations'
    current-value questions, 6 of 9 were different facts (a marathon and a report deadline).
    """
    from memory.policy.reading import SCOPE_CLASSES, changed_classes, read

    a, b = _SPEAKER_PREFIX.sub("", a, count=1), _SPEAKER_PREFIX.sub("", b, count=1)
    ra, rb = read(a), read(b)
    if changed_classes(ra.classes("subject"), rb.classes("subject")) & SCOPE_CLASSES:
        return False  # another region / period / entity: a different slot
    if not changed_classes(ra.classes(), rb.classes()):
        return False
    ta, tb = _slot_terms(a), _slot_terms(b)
    return bool(ta and tb) and _term_dice(ta, tb) >= SLOT_OVERLAP


def current_values(hits: Sequence[SearchHit], overlap: float = 0.0) -> dict[str, float]:
    """Head hits that are the newer statement of a slot another head hit states, with the lift each needs.

    The lift is how far the newer statement's score is below the best older statement of its
    slot (0 when it is already above), so adding it, capped, puts the current value first.
    ``overlap``: also require the two statements' slot terms to overlap by this Dice (0: any pair
    :func:`same_slot` reads as one slot; ``scripts/current_rule_lab.py`` measures stricter readings).
    """
    head = [h for h in hits[:SLOT_HEAD] if h.breakdown.sim > 0]
    if len(head) < 2:
        return {}
    floor = SLOT_RELEVANT * max(h.breakdown.sim for h in head)
    head = [h for h in head if h.breakdown.sim >= floor]
    lift: dict[str, float] = {}
    for i, a in enumerate(head):
        for b in head[i + 1:]:
            if abs(a.record.created_at - b.record.created_at) >= SLOT_MIN_GAP \
                    and same_slot(a.record.content, b.record.content) \
                    and (overlap <= 0 or _term_dice(_slot_terms(a.record.content),
                                                    _slot_terms(b.record.content)) >= overlap):
                new, old = (a, b) if a.record.created_at > b.record.created_at else (b, a)
                gap = max(0.0, old.breakdown.score - new.breakdown.score) + _SLOT_EPS
                lift[new.record.id] = max(lift.get(new.record.id, 0.0), gap)
    return lift


_SLOT_EPS = 1e-4  # lifted just above the older statement, not level with it


def rerank(hits: Sequence[SearchHit], plan: QueryPlan, weights: RerankWeights) -> list[SearchHit]:
    """Add the plan's bonuses to scored hits (``breakdown.query`` and ``score``) and re-sort.

    A bonus is only given to hits that are already relevant to some degree (``sim`` > 0), so a
    date alone never pulls in an unrelated memory. The recency bonus for "current value"
    questions is relative to the candidates: 1 for the newest, 0 for the oldest, times the hit's
    sim over the best candidate's (``weights.current_by_sim``). Every hit
    loses ``weights.question`` times the share of its text that is questions (:func:`asks`).
    """
    named = _named_speakers(hits, plan.text) if weights.speaker else frozenset()
    if not hits or (plan.window is None and not plan.wants_time and not plan.wants_current and not named
                    and not weights.question):
        return list(hits)
    newest = oldest = 0.0
    best_sim = 1.0
    if plan.wants_current and weights.current:
        stamps = [h.record.created_at.timestamp() for h in hits]
        newest, oldest = max(stamps), min(stamps)
        if weights.current_by_sim:
            best_sim = max(h.breakdown.sim for h in hits) or 1.0
    out = []
    for h in hits:
        b = h.breakdown
        extra = 0.0
        if b.sim > 0:
            rec = h.record
            if plan.window is not None and plan.window[0] <= rec.created_at < plan.window[1]:
                extra += weights.window
            if plan.wants_time and weights.time and states_time(rec.content):
                extra += weights.time
            if named and rec.metadata.extra.get("speaker") in named:
                extra += weights.speaker
            if plan.wants_current and newest > oldest:
                share = b.sim / best_sim if weights.current_by_sim else 1.0
                extra += weights.current * share * (rec.created_at.timestamp() - oldest) / (newest - oldest)
        if weights.question:
            extra -= weights.question * asks(h.record.content)
        if extra:  # built directly: dataclasses.replace() cost ~10 us per hit
            h = SearchHit(h.record, ScoreBreakdown(b.sim, b.vector, b.keyword, b.decay, b.boost,
                                                   b.score + extra, b.query + extra))
        out.append(h)
    out.sort(key=lambda h: (-h.breakdown.score, -h.record.updated_at.timestamp(), h.record.id))
    if plan.wants_current and not plan.asks_past and weights.slot:
        lift = {i: min(weights.slot, x) for i, x in current_values(out).items()}
        if lift:
            out = [SearchHit(h.record, ScoreBreakdown(
                h.breakdown.sim, h.breakdown.vector, h.breakdown.keyword, h.breakdown.decay, h.breakdown.boost,
                h.breakdown.score + lift[h.record.id], h.breakdown.query + lift[h.record.id]))
                if h.record.id in lift else h for h in out]
            out.sort(key=lambda h: (-h.breakdown.score, -h.record.updated_at.timestamp(), h.record.id))
    return out
