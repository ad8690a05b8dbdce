"""Read a memory as *what it is about* and *what it says*: values, their place, and the rest.

The write-path judge compares two memories through this reading rather than through their
wording:

* **values** — numbers (zh numerals and scale words folded in), percentages, dates, times of
  day, durations, years, decimal places, identifiers (tables, paths, emails), quoted literals,
  time zones (a city in a sentence about time is a zone), and every class of
  :mod:`memory.policy.lexicon` — each with its canonical form and its span;
* **subject / value split** — the text before the main predicate ("is", "prefers", "moved to",
  "是", "改成", ":" ...) names the subject and attribute; the text after it states the value.
  A value that differs inside the subject part means another entity (another region, metric,
  period); one that differs after it means a new value of the same slot;
* **masked text** — the text with every value replaced by its class, so "deadline is May 30"
  and "deadline is June 15" read the same;
* cues: a change announced ("now", "instead", "改成"), a correction ("actually", "更正"), a
  negation.

Everything here is pure and cached per text; nothing is learned here (see
:mod:`memory.policy.judge` for the fitted combination).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from memory.policy.lexicon import CITIES, DECIMALS, EXTRA_VALUES, TIME_WORDS, TIMEZONES, VALUE_LEXICON

_CJK = re.compile(r"[\u3400-\u9fff]")
_CACHE = 16384


@dataclass(frozen=True)
class Value:
    cls: str
    canon: str
    start: int
    end: int


@dataclass(frozen=True)
class Reading:
    text: str  # NFKC, lower-cased
    cjk: bool  # mostly Chinese
    values: tuple[Value, ...]
    split: int  # index where the predicate starts (len(text) when none was found)
    masked: str
    subject: str
    rest: str

    def classes(self, part: str = "all") -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for v in self.values:
            if part == "subject" and v.start >= self.split:
                continue
            if part == "rest" and v.start < self.split:
                continue
            out.setdefault(v.cls, set()).add(v.canon)
        return {k: frozenset(s) for k, s in out.items()}


# ---------------------------------------------------------------------------- numbers
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10_000, "亿": 100_000_000}
_ZH_PLACE = {"百": 100, "千": 1000, **_ZH_BIG}


def zh_number(s: str) -> float | None:
    """'四十' -> 40, '两万三' -> 23000, '一百零五' -> 105, '3万' -> 30000; None if not a number."""
    if not s:
        return None
    total, section, digit = 0.0, 0.0, None
    for ch in s:
        if ch.isdigit():
            digit = (digit or 0) * 10 + int(ch)
        elif ch in _ZH_DIGITS:
            digit = _ZH_DIGITS[ch]
        elif ch in _ZH_UNITS:
            section += (digit if digit is not None else 1) * _ZH_UNITS[ch]
            digit = None
        elif ch in _ZH_BIG:
            section += digit or 0
            total += (section or 1) * _ZH_BIG[ch]
            section, digit = 0.0, None
        else:
            return None
    tail = digit or 0
    # Spoken shorthand: a bare last digit right after 百 / 千 / 万 / 亿 counts the next lower place, so "两万三" is
    # 23000, "三千二" 3200 and "一百五" 150 (read as 3002 / 105 before, so 三千二 and 3,200 looked like different
    # values to the write judge). After 十 it is the ones ("二十五" 25); after 零 too ("一百零五" 105).
    if digit is not None and len(s) >= 2 and s[-2] in _ZH_PLACE and (s[-1] in _ZH_DIGITS or s[-1].isdigit()):
        tail = digit * _ZH_PLACE[s[-2]] // 10
    return total + section + tail


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


_SCALE_WORDS = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6, "millions": 1e6, "b": 1e9,
                "bn": 1e9, "billion": 1e9, "万": 1e4, "亿": 1e8, "千": 1e3, "百万": 1e6, "千万": 1e7}

# ---------------------------------------------------------------------------- patterns (priority order)
_MONTHS_EN = ("january|february|march|april|may|june|july|august|september|october|november|december|"
              "jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec")
_MONTH_NUM = {m: i for i, ms in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
     ("july", "jul"), ("august", "aug"), ("september", "sept", "sep"), ("october", "oct"), ("november", "nov"),
     ("december", "dec")], 1) for m in ms}
_ZHN = "[零〇一二两三四五六七八九十百千万亿\\d]"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("email", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("url", re.compile(r"https?://\S+|www\.\S+")),
    ("path", re.compile(r"(?:[a-z]:\\|~?/|\./|s3://|gs://|hdfs://)[\w.\-/\\{}]+")),
    ("quoted", re.compile(r"'([^']{1,40})'|\"([^\"]{1,40})\"|“([^”]{1,40})”|「([^」]{1,40})」|《([^》]{1,40})》")),
    ("tz_offset", re.compile(r"\b(?:utc|gmt)\s*([+-−])\s*(\d{1,2})(?::?(\d{2}))?\b")),
    ("date_iso", re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")),
    ("date_en", re.compile(rf"\b({_MONTHS_EN})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(\d{{4}}))?")),
    ("date_en2", re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS_EN})\b(?:,?\s*(\d{{4}}))?")),
    ("date_zh", re.compile(rf"(?:(\d{{4}})年)?({_ZHN}{{1,3}})月({_ZHN}{{1,3}})[日号]")),
    ("month_zh", re.compile(rf"(?:(\d{{4}})年)?({_ZHN}{{1,3}})月(?:份)?")),
    ("day_zh", re.compile(rf"(?:每月)?({_ZHN}{{1,3}})[日号]")),
    ("time", re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)|\b(\d{1,2}):(\d{2})\b")),
    ("time_zh", re.compile(rf"(上午|早上|中午|下午|晚上|凌晨)?({_ZHN}{{1,3}})[点時时](半|({_ZHN}{{1,2}})分)?")),
    ("duration", re.compile(
        r"\b(half an hour|an hour|(\d+(?:\.\d+)?|one|two|three|four|five|six|seven|"
        r"eight|nine|ten|twelve|fifteen|twenty|thirty|forty|forty-five|sixty|ninety)[\s-]*"
        r"(minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|business days?|working days?))\b")),
    ("duration_zh", re.compile(rf"(半小时|半个小时|({_ZHN}{{1,4}})\s*(个)?(分钟|小时|天|日|周|星期|个月|年|工作日))")),
    ("percent", re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent\b|pct\b|个百分点|percentage points?)|百分之("
                           + _ZHN + r"+)")),
    ("money", re.compile(r"([$¥€£])\s*(\d[\d,]*(?:\.\d+)?)\s*(k|m|mn|b|bn|million|billion|万|亿)?\b")),
    ("year", re.compile(r"(?<![\d.])((?:19|20)\d{2})(?:年|\s*fy|\b)|\bfy\s*'?(\d{2,4})\b")),
    ("scaled", re.compile(r"(\d+(?:\.\d+)?)\s*(k|m|mn|bn|b|million|billion|thousand)\b|(\d+(?:\.\d+)?)\s*(万|亿|千万|百万)"
                          + r"|(?<![\d,.])((?=[\d零〇一二两三四五六七八九十百千万亿]*[零〇一二两三四五六七八九十百千万亿])"
                          + _ZHN + r"{2,8})(?=[^\d零〇一二两三四五六七八九十百千万亿]|$)")),
    ("lexicon", None),  # every lexicon class, decimals, time zones, cities
    ("ident", re.compile(r"\b[a-z][a-z0-9]*(?:[_.][a-z0-9]+)+\b|\b[a-z]+\d[a-z0-9]*\b|\b\d+[a-z][a-z0-9]*\b")),
    # A number may touch Chinese on either side ("最多50人"): only Latin letters, digits, "_" and "."
    # make it part of a word.
    ("number", re.compile(r"(?<![a-z0-9_.])\d+(?:[.,]\d+)*(?![a-z0-9_])")),
]

_WORD_NUM = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
             "ten": 10, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40, "forty-five": 45,
             "sixty": 60, "ninety": 90}
_DUR_UNITS = {"minute": 1, "min": 1, "hour": 60, "hr": 60, "day": 1440, "business day": 1440, "working day": 1440,
              "week": 10080, "month": 43200, "year": 525600, "分钟": 1, "小时": 60, "天": 1440, "日": 1440,
              "周": 10080, "星期": 10080, "个月": 43200, "月": 43200, "年": 525600, "工作日": 1440}


def _build_lexicon() -> tuple[re.Pattern[str], dict[str, list[tuple[str, str]]]]:
    table: dict[str, list[tuple[str, str]]] = {}
    for cls, entries in VALUE_LEXICON.items():
        for key, canon in entries.items():
            table.setdefault(key.lower(), []).append((cls, canon))
    for key, extra in EXTRA_VALUES.items():
        table.setdefault(key, []).extend(extra)
    for key, tz in TIMEZONES.items():
        table.setdefault(key.lower(), []).append(("timezone", tz))
    for key, (city, _tz) in CITIES.items():
        table.setdefault(key.lower(), []).append(("city", city))
    for key, places in DECIMALS.items():
        table.setdefault(key.lower(), []).append(("decimals", places))
    parts = []
    for key in sorted(table, key=len, reverse=True):
        esc = re.escape(key)
        if _CJK.search(key):
            parts.append(esc)
        else:
            left = r"(?<![a-z0-9])" if key[0].isalnum() else ""
            right = r"(?![a-z0-9])" if key[-1].isalnum() else ""
            parts.append(left + esc + right)
    return re.compile("|".join(parts)), table


_LEXICON_RE, _LEXICON = _build_lexicon()
_CITY_TZ = {k.lower(): tz for k, (_c, tz) in CITIES.items()}


def _num(s: str) -> float | None:
    s = s.replace(",", "")
    try:
        return float(s)
    except ValueError:
        return zh_number(s)


def _month(s: str) -> int | None:
    if s in _MONTH_NUM:
        return _MONTH_NUM[s]
    n = _num(s)
    return int(n) if n is not None and 1 <= n <= 12 else None


def _values_of(kind: str, m: re.Match[str], text: str) -> list[tuple[str, str]]:
    """(class, canonical) for one match of a pattern; empty when the match is not a value."""
    g = m.groups()
    if kind in ("email", "url", "path"):
        return [("id", m.group().rstrip(".,;)"))]
    if kind == "quoted":
        lit = next(x for x in g if x is not None).strip().lower()
        return [("literal", lit)] if lit else []
    if kind == "tz_offset":
        sign = "-" if g[0] in "-−" else "+"
        return [("timezone", f"utc{sign}{int(g[1])}" + (f":{g[2]}" if g[2] and g[2] != "00" else ""))]
    if kind == "date_iso":
        return [("date", f"m{int(g[1])}d{int(g[2])}"), ("year", g[0])]
    if kind in ("date_en", "date_en2"):
        mon, day = (g[0], g[1]) if kind == "date_en" else (g[1], g[0])
        out = [("date", f"m{_MONTH_NUM[mon.rstrip('.')]}d{int(day)}")]
        return out + ([("year", g[2])] if g[2] else [])
    if kind == "date_zh":
        mon, day = _month(g[1]), _num(g[2])
        if mon is None or day is None:
            return []
        return [("date", f"m{mon}d{int(day)}")] + ([("year", g[0])] if g[0] else [])
    if kind == "month_zh":
        mon = _month(g[1])
        return ([("month", str(mon))] + ([("year", g[0])] if g[0] else [])) if mon else []
    if kind == "day_zh":
        d = _num(g[0])
        return [("day", str(int(d)))] if d is not None and 1 <= d <= 31 else []
    if kind == "time":
        if g[3] is not None:
            h, mi = int(g[3]), int(g[4])
        else:
            h, mi = int(g[0]), int(g[1] or 0)
            if g[2].startswith("p") and h < 12:
                h += 12
            if g[2].startswith("a") and h == 12:
                h = 0
        return [("time", f"{h:02d}:{mi:02d}")] if h < 24 and mi < 60 else []
    if kind == "time_zh":
        h = _num(g[1])
        if h is None:
            return []
        mi = 30 if g[2] == "半" else int(_num(g[3]) or 0) if g[3] else 0
        if g[0] in ("下午", "晚上") and h < 12:
            h += 12
        return [("time", f"{int(h):02d}:{mi:02d}")]
    if kind in ("duration", "duration_zh"):
        whole = m.group().strip()
        if whole in ("half an hour", "半小时", "半个小时"):
            return [("duration", "30")]
        if kind == "duration":
            if g[1] is None:  # "an hour", "a week"
                unit = whole.split()[-1]
                return [("duration", _fmt(_DUR_UNITS[unit]))]
            qty = _WORD_NUM.get(g[1]) or _num(g[1])
            unit = re.sub(r"s$", "", g[2])
        else:
            qty, unit = _num(g[1]), g[3]
        if qty is None or unit not in _DUR_UNITS:
            return []
        return [("duration", _fmt(qty * _DUR_UNITS[unit]))]
    if kind == "percent":
        n = _num(g[0] if g[0] is not None else g[1])
        return [("percent", _fmt(n))] if n is not None else []
    if kind == "money":
        n = _num(g[1])
        if n is None:
            return []
        if g[2]:
            n *= _SCALE_WORDS.get(g[2], 1)
        cur = _LEXICON.get(g[0], [("currency", g[0])])[0][1]
        return [("num", _fmt(n)), ("currency", cur)]
    if kind == "year":
        y = g[0] or g[1]
        return [("year", y if len(y) == 4 else f"20{y[-2:]}")]
    if kind == "scaled":
        if g[0] is not None:
            n = float(g[0]) * _SCALE_WORDS[g[1]]
        elif g[2] is not None:
            n = float(g[2]) * _SCALE_WORDS[g[3]]
        else:
            n = zh_number(g[4])
            if n is None or (len(g[4]) < 2):
                return []
        return [("num", _fmt(n))]
    if kind == "ident":
        tok = m.group()
        if tok.replace(".", "").isdigit() or re.fullmatch(r"\d+(?:st|nd|rd|th)", tok):
            return [("num", _fmt(float(re.sub(r"\D", "", tok))))] if tok[0].isdigit() and tok[-1].isalpha() else []
        return [("id", tok)]
    if kind == "number":
        n = _num(m.group())
        return [("num", _fmt(n))] if n is not None else []
    return []


@lru_cache(maxsize=_CACHE)
def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def extract_values(t: str) -> tuple[Value, ...]:
    """Every value in a normalised text, longest-priority first; spans never overlap."""
    taken = bytearray(len(t))
    out: list[Value] = []

    def free(a: int, b: int) -> bool:
        return not any(taken[a:b])

    def take(a: int, b: int, vals: list[tuple[str, str]]) -> None:
        for i in range(a, b):
            taken[i] = 1
        out.extend(Value(c, v, a, b) for c, v in vals)

    about_time = any(w in t for w in TIME_WORDS)
    for kind, pat in _PATTERNS:
        # Earlier passes' spans are blanked out, so a later pattern can still match what is left
        # around them ("3万元": the number takes "3万", the currency "元").
        view = "".join("\x00" if taken[i] else ch for i, ch in enumerate(t)) if any(taken) else t
        if kind == "lexicon":
            for m in _LEXICON_RE.finditer(view):
                if not free(m.start(), m.end()):
                    continue
                key = m.group()
                vals = list(_LEXICON[key])
                if about_time and key in _CITY_TZ:
                    vals.append(("timezone", _CITY_TZ[key]))
                take(m.start(), m.end(), vals)
            continue
        assert pat is not None
        for m in pat.finditer(view):
            if not free(m.start(), m.end()):
                continue
            vals = _values_of(kind, m, view)
            if vals:
                take(m.start(), m.end(), vals)
    return tuple(sorted(out, key=lambda v: (v.start, v.cls)))


# ---------------------------------------------------------------------------- subject / value split
_PRED_EN = re.compile(
    r"\b(?:is|are|was|were|has been|have been|will be|should be|must be|shall be|needs to be|equals?|means|"
    r"refers to|stands for|defined as|counts? as|prefers?|preferred|likes?|loves?|hates?|dislikes?|wants?|"
    r"needs?|uses?|using|lives?|lived|based|works?|moved|relocated|starts?|started|begins?|ends?|due|falls?|"
    r"fell|rose|grew|dropped|declined|increased|decreased|reached|hit|came in at|set to|changed|switched|runs?|"
    r"lowered|raised|cut|reduced|bumped|extended|shortened|pushed|postponed|rescheduled|updated|now|"
    r"owns?|owned|leads?|handles?|reports? to|sits?|stored|located|goes|go|should|must|always|never|"
    r"expects?|requires?|asked|gets?|costs?|priced|takes?|renews?|expires?|lasts?|closes?|opens?)\b"
    r"|[:=→]|->")
_PRED_ZH = re.compile(
    r"是(?!否)|(?<![因作认成])为(?!了)|指(?!标|定|令|南)|叫做|叫|等于|即(?!使|可)|用(?!户)|使用|采用|偏好|喜欢|希望|要求|"
    r"想要|需要|改成|改为|换成|位于|住在|(?<![现存正所实])在|设为|定为|下降|上升|增长|提升|降低|提高|达到|负责|"
    r"归|属于|(?<!理)由(?!于)|：|:|=|→")


def _split(t: str, cjk: bool) -> int:
    pat = _PRED_ZH if cjk else _PRED_EN
    for m in pat.finditer(t):
        if m.start() >= 2:
            return m.start()
    if cjk:
        # No listed predicate ("用户每周三下午去健身房", "报销问题找财务 lily"): the first verb jieba
        # tags splits subject from value instead; four in ten Chinese memories have none listed.
        return _first_verb(t)
    return len(t)


def _first_verb(t: str) -> int:
    from memory.policy.names import _posseg

    off = 0
    for pair in _posseg().cut(t):  # type: ignore[attr-defined]
        if pair.flag == "v" and off >= 2:
            return off
        off += len(pair.word)
    return len(t)


_PLACEHOLDER = {"num": "N", "percent": "N%", "date": "DATE", "time": "TIME", "year": "YEAR", "duration": "TIME",
                "id": "NAME", "literal": "NAME"}


def _mask(t: str, values: tuple[Value, ...]) -> str:
    out, pos = [], 0
    for v in values:
        if v.start < pos:
            continue
        out.append(t[pos:v.start])
        out.append(f" {_PLACEHOLDER.get(v.cls, 'X')} ")
        pos = v.end
    out.append(t[pos:])
    return re.sub(r"\s+", " ", "".join(out)).strip()


def is_cjk(text: str) -> bool:
    cjk = len(_CJK.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return cjk >= max(2, latin / 3)


@lru_cache(maxsize=_CACHE)
def read(text: str) -> Reading:
    """The reading of one memory text (cached)."""
    t = _normalise(text)
    cjk = is_cjk(t)
    vals = extract_values(t)
    b = _split(t, cjk)
    return Reading(t, cjk, vals, b, _mask(t, vals), t[:b].strip(), t[b:].strip())


# ---------------------------------------------------------------------------- comparisons
SCOPE_CLASSES = frozenset({"region", "country", "city", "period", "year", "channel_sales", "month", "id", "literal"})


def changed_classes(a: dict[str, frozenset[str]], b: dict[str, frozenset[str]]) -> set[str]:
    """Classes present on both sides whose values disagree (neither set contains the other)."""
    return {c for c in a.keys() & b.keys() if not (a[c] <= b[c] or b[c] <= a[c])}


def equal_classes(a: dict[str, frozenset[str]], b: dict[str, frozenset[str]]) -> set[str]:
    return {c for c in a.keys() & b.keys() if a[c] <= b[c] or b[c] <= a[c]}
