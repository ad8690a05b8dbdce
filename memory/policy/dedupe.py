"""Alignment rules over two memory texts: the first, hand-written judge of duplicate / conflict /
distinct. The write path no longer decides with them (they fit their authors' phrasing; see
:mod:`memory.policy.judge`): their verdict, change cues, negation and names are *features* of the
fitted judge. Pure functions over two texts and their embedding cosine; the idea:

* the same words (or the same text up to punctuation/case/order) -> **duplicate**;
* a translation or paraphrase (high cosine) that states the same values -> **duplicate**;
* the same statement template where only a *value* changed (a number, date, unit, currency,
  chart type, file format, frequency, language, on/off ...) or an explicit change cue
  ("改成", "no longer", "instead", "from now on") -> **conflict** (the new value wins);
* the template differs in a non-value slot (another metric, region, period, table, subject)
  -> **distinct**: keep both.

Values are compared through a small zh/en lexicon of canonical values, so "柱状图" and
"bar chart" are the same value across languages. Every judgement carries its reason.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from memory.text import STOPWORDS, tokenize

Label = Literal["duplicate", "conflict", "distinct"]

# Canonical values by class. Keys are matched case-insensitively as whole words (Latin) or
# substrings (CJK). Order matters inside a class only for overlapping keys (longest first).
VALUE_LEXICON: dict[str, dict[str, str]] = {
    "chart": {
        "柱状图": "bar", "条形图": "bar", "柱形图": "bar", "bar chart": "bar", "bar charts": "bar", "bar graph": "bar",
        "折线图": "line", "曲线图": "line", "line chart": "line", "line charts": "line", "line graph": "line",
        "饼图": "pie", "饼状图": "pie", "pie chart": "pie", "pie charts": "pie",
        "散点图": "scatter", "scatter plot": "scatter", "scatter chart": "scatter",
        "热力图": "heatmap", "heatmap": "heatmap", "heat map": "heatmap",
        "面积图": "area", "area chart": "area", "表格": "table", "table view": "table",
        "雷达图": "radar", "radar chart": "radar", "漏斗图": "funnel", "funnel chart": "funnel",
    },
    "currency": {
        "人民币": "cny", "rmb": "cny", "cny": "cny", "元": "cny", "yuan": "cny",
        "美元": "usd", "美金": "usd", "usd": "usd", "dollars": "usd", "dollar": "usd", "us$": "usd",
        "欧元": "eur", "eur": "eur", "euros": "eur", "euro": "eur", "日元": "jpy", "jpy": "jpy", "yen": "jpy",
        "港币": "hkd", "港元": "hkd", "hkd": "hkd", "英镑": "gbp", "gbp": "gbp", "pounds": "gbp",
    },
    "scale": {
        "万元": "1e4", "万": "1e4", "ten thousand": "1e4", "ten-thousands": "1e4",
        "亿元": "1e8", "亿": "1e8", "百万": "1e6", "million": "1e6", "millions": "1e6",
        "千元": "1e3", "thousand": "1e3", "thousands": "1e3", "billion": "1e9", "billions": "1e9",
    },
    "format": {
        "csv": "csv", "excel": "xlsx", "xlsx": "xlsx", "pdf": "pdf", "ppt": "pptx", "pptx": "pptx",
        "markdown": "md", "html": "html", "json": "json", "parquet": "parquet", "word": "docx", "docx": "docx",
    },
    "frequency": {
        "每天": "daily", "每日": "daily", "daily": "daily", "every day": "daily",
        "每周": "weekly", "每星期": "weekly", "weekly": "weekly", "every week": "weekly",
        "每月": "monthly", "每个月": "monthly", "monthly": "monthly", "every month": "monthly",
        "每季度": "quarterly", "quarterly": "quarterly", "每年": "yearly", "yearly": "yearly", "annually": "yearly",
        "每小时": "hourly", "hourly": "hourly",
    },
    "language": {
        "中文": "zh", "汉语": "zh", "chinese": "zh", "英文": "en", "英语": "en", "english": "en",
        "日文": "ja", "日语": "ja", "japanese": "ja",
    },
    "weekday": {
        "周一": "mon", "星期一": "mon", "monday": "mon", "周二": "tue", "星期二": "tue", "tuesday": "tue",
        "周三": "wed", "星期三": "wed", "wednesday": "wed", "周四": "thu", "星期四": "thu", "thursday": "thu",
        "周五": "fri", "星期五": "fri", "friday": "fri", "周六": "sat", "星期六": "sat", "saturday": "sat",
        "周日": "sun", "星期日": "sun", "星期天": "sun", "sunday": "sun",
    },
    "month": {
        **{f"{i}月": str(i) for i in range(12, 0, -1)},
        "january": "1", "february": "2", "march": "3", "april": "4", "may": "5", "june": "6", "july": "7",
        "august": "8", "september": "9", "october": "10", "november": "11", "december": "12",
        "jan": "1", "feb": "2", "mar": "3", "apr": "4", "jun": "6", "jul": "7", "aug": "8", "sep": "9",
        "sept": "9", "oct": "10", "nov": "11", "dec": "12",
    },
    "polarity": {
        "不要": "no", "不用": "no", "不再": "no", "禁止": "no", "关闭": "off", "开启": "on", "打开": "on",
        "don't": "no", "do not": "no", "never": "no", "stop": "no", "disable": "off", "enable": "on",
    },
    "sort": {
        "升序": "asc", "ascending": "asc", "降序": "desc", "descending": "desc",
    },
    "color": {
        "红色": "red", "red": "red", "蓝色": "blue", "blue": "blue", "绿色": "green", "green": "green",
        "黑色": "black", "black": "black", "灰色": "grey", "grey": "grey", "gray": "grey",
        "橙色": "orange", "orange": "orange", "紫色": "purple", "purple": "purple",
    },
    "timezone": {
        "北京时间": "utc+8", "utc+8": "utc+8", "utc": "utc", "gmt": "utc", "pst": "pst", "est": "est",
    },
}

# Words that announce a change. Strong cues only appear when something is being replaced;
# weak cues ("from now on") also open first-time preferences, so they count only when the
# stored memory has none.
STRONG_CUES = re.compile(
    r"而不是|不是.{0,12}了|重新核算|重新算|重新计算|有误|搞错|写错|其实是|实际是|实际上是|下调|上调|调到|调整到|降到|降为|升到|"
    r"提高到|降低到|改成|改为|改用|换成|换为|调整为|调整成|更正|更新为|修正|不再|不要再|别再|以后不|现在改|已改|改到|推迟到|"
    r"提前到|延期到|变成|变为|取代"
    r"|\bupdate[ds]?\s*:|\bcorrection\s*:"
    r"|\b(?:instead|no longer|changed? (?:it |this |that )?to|switch(?:ed)? to|moved? to|actually|"
    r"correction|not .* anymore|any more|postponed|pushed (?:back )?to|(?:raised|lowered|cut|increased|decreased|"
    r"reduced|bumped) to|rescheduled|replaced? (?:by|with)|rather than)\b",
    re.IGNORECASE,
)
WEAK_CUES = re.compile(
    r"以后|今后|往后|从今以后|从现在起"
    r"|\b(?:from now on|going forward|now (?:is|are|use|uses|prefer|prefers|want|wants)|starting (?:today|now|next))\b",
    re.IGNORECASE,
)


# Per-text analyses below are cached: a write is judged against up to `neighbours` stored
# memories, and the same stored memories come up again write after write (a handoff's post
# node spent ~1 ms per judged pair re-running these regexes before they were cached).
_TEXT_CACHE = 8192


@lru_cache(maxsize=_TEXT_CACHE)
def _cues(text: str) -> tuple[bool, bool]:
    return bool(STRONG_CUES.search(text)), bool(WEAK_CUES.search(text))


def change_cue(existing: str, incoming: str) -> bool:
    """Does ``incoming`` announce a change that ``existing`` did not already announce?"""
    (strong_a, weak_a), (strong_b, weak_b) = _cues(existing), _cues(incoming)
    if strong_b and not strong_a:
        return True
    return weak_b and not (weak_a or strong_a)

_NUM = re.compile(r"(?<![A-Za-z\d.])\d+(?:[.,]\d+)*(?![A-Za-z\d])")
_CJK = re.compile(r"[\u3400-\u9fff]")
_PUNCT = re.compile(r"[\W_]+", re.UNICODE)
_FILLER = re.compile(
    r"^(?:请)?(?:记住|记一下|记得|备注|注意|提醒一下|顺便说一下)[：:，,\s]*"
    r"|^(?:please\s+)?(?:remember|note|fyi|just so you know|for the record|keep in mind)(?:\s+that)?[:,\s]*",
    re.IGNORECASE,
)


@lru_cache(maxsize=_TEXT_CACHE)
def _token_set(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


@lru_cache(maxsize=_TEXT_CACHE)
def _norm(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).lower().strip()
    t = _FILLER.sub("", t)
    return _PUNCT.sub("", t)


@lru_cache(maxsize=_TEXT_CACHE)
def _is_cjk(text: str) -> bool:
    cjk = len(_CJK.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return cjk >= max(2, latin / 3)


# Keys that name more than one value ("万元" is both a scale and a currency).
_EXTRA_VALUES: dict[str, list[tuple[str, str]]] = {
    "万元": [("currency", "cny")], "亿元": [("currency", "cny")], "千元": [("currency", "cny")],
}


def _build_lexicon() -> tuple[re.Pattern[str], dict[str, list[tuple[str, str]]]]:
    """One alternation over every lexicon key, longest first, so a scan is a single regex pass."""
    table: dict[str, list[tuple[str, str]]] = {}
    for cls, entries in VALUE_LEXICON.items():
        for key, canon in entries.items():
            table.setdefault(key.lower(), []).append((cls, canon))
    for key, extra in _EXTRA_VALUES.items():
        table.setdefault(key, []).extend(extra)
    parts = []
    for key in sorted(table, key=len, reverse=True):
        esc = re.escape(key)
        parts.append(esc if _CJK.search(key) else rf"(?<![a-z]){esc}(?![a-z])")
    return re.compile("|".join(parts)), table


_LEXICON_RE, _LEXICON = _build_lexicon()
# Kept for callers that strip values out of a text (see _slot_kind).
_PATTERNS = [("lexicon", "", _LEXICON_RE)]


@lru_cache(maxsize=32768)
def _values_cached(t: str) -> tuple[tuple[str, frozenset[str]], ...]:
    found: dict[str, set[str]] = {}
    for m in _LEXICON_RE.finditer(t):
        for cls, canon in _LEXICON[m.group()]:
            found.setdefault(cls, set()).add(canon)
    nums = {n.replace(",", "") for n in _NUM.findall(t)}
    if nums:
        found["num"] = nums
    return tuple((k, frozenset(v)) for k, v in found.items())


def values(text: str) -> dict[str, frozenset[str]]:
    """Canonical values by class found in ``text`` (numbers under ``num``)."""
    return dict(_values_cached(unicodedata.normalize("NFKC", text).lower()))


@dataclass(frozen=True)
class Judgement:
    label: Label
    reason: str
    cosine: float
    overlap: float


_ZH_NUMERALS = "零一二两三四五六七八九十百千"
# Identifiers: table names, paths, status=4, q3, 2024q1 (a plain hyphenated word is not one).
_ID = r"(?:[a-z0-9]+(?:[_./:=-][a-z0-9]+)+|[a-z]+\d[a-z0-9]*|\d+[a-z][a-z0-9]*)"
_DIFF_TOKEN = re.compile(
    _ID + r"|\d+(?:[.,]\d+)*%?"
    r"|[a-z]+(?:'[a-z]+)?"
    r"|[\u3400-\u9fff]"
)
# Words that carry no fact: ignored when aligning two statements.
_TRIVIAL = frozenset(
    "a an the this that these those of to please just now also then so and or it its is are was were be "
    "user user's users's 的 了 呢 吧 啊 就 行 中 里 请 把 都 也 要 还 在 是 为".split()
)


# Function characters/words: a slot made only of these changes wording, not the fact.
_LIGHT = frozenset("用以后都把将于在对给为被让着过得地就才又也还再中里上下所其之与及和或") | STOPWORDS


@lru_cache(maxsize=_TEXT_CACHE)
def _diff_seq(text: str) -> tuple[str, ...]:
    t = unicodedata.normalize("NFKC", text).lower()
    t = _FILLER.sub("", t.strip())
    return tuple(w for w in _DIFF_TOKEN.findall(t) if w not in _TRIVIAL)


@lru_cache(maxsize=65536)
def _is_value_token(tok: str) -> bool:
    return bool(values(tok)) or bool(re.fullmatch(_ID, tok)) or (len(tok) == 1 and tok in _ZH_NUMERALS)


_ZH_DIGIT = {"零": "0", "一": "1", "二": "2", "两": "2", "三": "3", "四": "4", "五": "5", "六": "6", "七": "7",
             "八": "8", "九": "9", "十": "10"}


def _same_value(sa: Sequence[str], sb: Sequence[str]) -> bool:
    """Do two replaced slots state the same canonical value in other words ("dollars" / "USD",
    "两" / "2")? Then the replacement rewords the fact rather than changing it."""
    va = values(" ".join(_ZH_DIGIT.get(t, t) for t in sa))
    vb = values(" ".join(_ZH_DIGIT.get(t, t) for t in sb))
    if not va or va != vb:
        return False
    # Nothing else may be in the slots: "3 stores" vs "3 regions" is another fact.
    rest = [t for t in (*sa, *sb) if not _is_value_token(_ZH_DIGIT.get(t, t)) and t not in _LIGHT]
    return not rest


def _numeric(tokens: Sequence[str]) -> bool:
    return all(re.fullmatch(r"\d+(?:[.,]\d+)*%?", t) or (len(t) == 1 and t in _ZH_NUMERALS) for t in tokens)


def _slot_kind(tokens: Sequence[str]) -> str:
    """'value' (numbers, units, identifiers, lexicon values), 'word', 'mixed' or 'empty'."""
    if not tokens:
        return "empty"
    joined = " ".join(tokens)
    if values(joined) and not all(_is_value_token(t) for t in tokens):
        # A multi-token value ("bar chart", "万元") counts as a value if nothing else is there.
        rest = joined
        for _, _, pat in _PATTERNS:
            rest = pat.sub(" ", rest)
        rest_tokens = [t for t in rest.split() if not _is_value_token(t)]
        return "mixed" if rest_tokens else "value"
    return "value" if all(_is_value_token(t) for t in tokens) else "word"


@lru_cache(maxsize=_TEXT_CACHE)
def _facts_cached(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple(_facts_uncached(text).items())


def _facts(text: str) -> dict[str, frozenset[str]]:
    """Canonical values plus identifiers (table names, paths, ids): what paraphrases must share."""
    return dict(_facts_cached(text))


def _facts_uncached(text: str) -> dict[str, frozenset[str]]:
    t = unicodedata.normalize("NFKC", text).lower()
    out = {c: v for c, v in values(text).items() if c != "polarity"}
    ids = frozenset(m for m in re.findall(_ID, t) if re.search(r"[_/=\d]", m) and not m.replace(".", "").isdigit())
    if ids:
        out["id"] = ids
    return out


def _changed(fa: dict[str, frozenset[str]], fb: dict[str, frozenset[str]]) -> list[str]:
    """Classes whose values disagree: present on both sides and neither contains the other.

    Subset counts as agreement, so a paraphrase that drops or adds a detail is not a change.
    """
    return sorted(c for c in fa.keys() & fb.keys() if not (fa[c] <= fb[c] or fb[c] <= fa[c]))


def _rule_judge(
    existing: str,
    incoming: str,
    cosine: float,
    *,
    dup_cosine: float = 0.70,
    dup_cosine_cross: float = 0.60,
    related_cosine: float = 0.45,
) -> Judgement:
    """The alignment rules (see the module docstring); :func:`judge` adds the name check."""
    na, nb = _norm(existing), _norm(incoming)
    sa, sb = _token_set(existing), _token_set(incoming)
    overlap = len(sa & sb) / len(sa | sb) if sa | sb else 1.0
    if na == nb or (sa == sb and sa):
        return Judgement("duplicate", "same words", cosine, overlap)

    fa, fb = _facts(existing), _facts(incoming)
    cue = change_cue(existing, incoming)
    changed = _changed(fa, fb)
    same_signature = not changed
    shared_values = bool(fa.keys() & fb.keys())
    cross = _is_cjk(existing) != _is_cjk(incoming)

    # Far apart in meaning and words: unrelated, unless both state values of the same kind
    # and either the values differ or the newcomer announces a change.
    if cosine < related_cosine and overlap < 0.3 and not ((changed or (cue and shared_values)) and cosine >= 0.35):
        return Judgement("distinct", f"unrelated (cos {cosine:.2f}, overlap {overlap:.2f})", cosine, overlap)

    if cross:
        # Different languages: no token alignment is possible; rely on meaning and values.
        if changed or (cue and not same_signature):
            why = f"values changed: {', '.join(changed)}" if changed else "change cue"
            return Judgement("conflict", f"cross-language, {why}", cosine, overlap)
        if cue:
            return Judgement("conflict", "cross-language, change cue", cosine, overlap)
        if cosine >= dup_cosine_cross or (shared_values and cosine >= 0.52):
            return Judgement("duplicate", f"cross-language paraphrase (cos {cosine:.2f})", cosine, overlap)
        return Judgement("distinct", f"cross-language, not close enough (cos {cosine:.2f})", cosine, overlap)

    # Same language: align the two statements and look at what was replaced, and where.
    a, b = _diff_seq(existing), _diff_seq(incoming)
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    ops = [op for op in sm.get_opcodes() if op[0] != "equal"]
    ratio = sm.ratio()
    replaces = [op for op in ops if op[0] == "replace"]
    template = ratio >= 0.5 and len(replaces) >= 1 and all(
        i2 - i1 <= 6 and j2 - j1 <= 6 for _, i1, i2, j1, j2 in replaces)
    if template and not cue:
        # End focus: in zh and en the new information (the value) comes last; the subject
        # comes first. A replaced slot at the start, or followed by shared words, changed
        # the subject or scope -> another fact. Only a value slot changes the same fact.
        for _, i1, i2, j1, j2 in replaces:
            sa_, sb_ = a[i1:i2], b[j1:j2]
            if all(t in _LIGHT for t in sa_ + sb_) or _same_value(sa_, sb_):
                continue
            at_end = i2 >= len(a) - 1 or j2 >= len(b) - 1
            kind_a, kind_b = _slot_kind(sa_), _slot_kind(sb_)
            if i1 == 0 and not at_end:
                return Judgement("distinct", f"other subject: {' '.join(sa_)} -> {' '.join(sb_)}", cosine, overlap)
            if "mixed" in (kind_a, kind_b):
                return Judgement("distinct", f"subject and value differ: {' '.join(sa_)} -> {' '.join(sb_)}",
                                 cosine, overlap)
            if not (kind_a == kind_b == "value") and not at_end:
                return Judgement("distinct", f"other scope: {' '.join(sa_)} -> {' '.join(sb_)}", cosine, overlap)
            if not at_end and not (_numeric(sa_) and _numeric(sb_)):
                # A non-numeric value inside the sentence names a scope (daily vs weekly
                # active users, Q3 vs Q4 target); a number followed by its unit is a value.
                return Judgement("distinct", f"other scope value: {' '.join(sa_)} -> {' '.join(sb_)}", cosine, overlap)
            if kind_a == kind_b == "word":
                return Judgement("distinct", f"other object: {' '.join(sa_)} -> {' '.join(sb_)}", cosine, overlap)
        heavy = [op for op in replaces if not (all(t in _LIGHT for t in a[op[1]:op[2]] + b[op[3]:op[4]])
                                               or _same_value(a[op[1]:op[2]], b[op[3]:op[4]]))]
        if not heavy:
            return Judgement("duplicate", "same statement, only function words differ", cosine, overlap)
        _, i1, i2, j1, j2 = heavy[-1]
        return Judgement("conflict", f"same statement, new value: {' '.join(a[i1:i2])} -> {' '.join(b[j1:j2])}",
                         cosine, overlap)
    if cue and (cosine >= related_cosine or overlap >= 0.3):
        return Judgement("conflict", "explicit change cue", cosine, overlap)
    if changed and cosine >= related_cosine:
        # Values differ but the statements do not share a template: only a conflict when the
        # rest (the subject and attribute words) is the same.
        wa = {t for t in a if not _is_value_token(t) and t not in _LIGHT}
        wb = {t for t in b if not _is_value_token(t) and t not in _LIGHT}
        if wa and wb and len(wa & wb) / len(wa | wb) < 0.6:
            return Judgement("distinct", f"values differ and so do the subjects (cos {cosine:.2f})", cosine, overlap)
        return Judgement("conflict", f"value changed: {', '.join(changed)}", cosine, overlap)
    if same_signature and cosine >= dup_cosine:
        return Judgement("duplicate", f"paraphrase (cos {cosine:.2f}, overlap {overlap:.2f})", cosine, overlap)
    return Judgement("distinct", f"related but different (cos {cosine:.2f}, overlap {overlap:.2f})", cosine, overlap)


# ---------------------------------------------------------------------------- names and values
_ENTITY = re.compile(r"\b(?:[A-Za-z]*[A-Z][A-Za-z]*[A-Z][A-Za-z0-9]*|[A-Za-z]+\d[A-Za-z0-9]*)\b")


@lru_cache(maxsize=_TEXT_CACHE)
def entities(text: str) -> frozenset[str]:
    """Acronyms and codes (GMV, DAU, iOS, Q3) that are not lexicon values: names, which survive
    translation verbatim, so they can be compared across languages."""
    out = set()
    for m in _ENTITY.findall(unicodedata.normalize("NFKC", text)):
        low = m.lower()
        if not _LEXICON_RE.fullmatch(low):
            out.add(low)
    return frozenset(out)


# A negation on one side only flips the fact while barely moving an embedding.
_NEGATION = re.compile(r"[不没无非别]|\b(?:not|no|never|without|none|nothing)\b|n't", re.IGNORECASE)
