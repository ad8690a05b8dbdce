"""The reading the write-path judge compares: values, their canonical forms and where they sit."""

from __future__ import annotations

import pytest

from memory.policy.reading import changed_classes, read, zh_number


def vals(text: str) -> set[tuple[str, str]]:
    return {(v.cls, v.canon) for v in read(text).values}


@pytest.mark.parametrize(("text", "expected"), [
    ("四十", 40), ("两万三", 23000), ("一百零五", 105), ("3万", 30000), ("十二", 12), ("两", 2), ("abc", None),
    # spoken shorthand: a bare last digit after 百 / 千 / 万 counts the next lower place (三千二 was read as 3002)
    ("三千二", 3200), ("一百五", 150), ("两千五", 2500), ("一万二千三", 12300), ("三千二百", 3200), ("二十五", 25),
    ("一千零二", 1002), ("一百一十", 110),
])
def test_zh_numbers(text, expected):
    assert zh_number(text) == expected


@pytest.mark.parametrize(("a", "b", "cls"), [
    ("Meetings are in Beijing time", "会议按 UTC+8 安排", "timezone"),
    ("Show times in Shanghai time", "times are shown in China Standard Time", "timezone"),
    ("Keep two decimal places", "保留两位小数", "decimals"),
    ("round to cents", "2 decimal places", "decimals"),
    ("Budget: $1.2M", "budget is 1,200,000 dollars", "num"),
    ("预算是3万元", "budget 30k yuan", "num"),
    ("The deadline is May 30", "截止日期是5月30日", "date"),
    ("standup at 9:30am", "站会上午9点半", "time"),
    ("Sessions expire after half an hour", "会话30分钟后过期", "duration"),
    ("Prefers bar charts", "喜欢柱状图", "chart"),
    ("East China region", "华东区", "region"),
])
def test_same_value_in_other_words_and_languages(a, b, cls):
    va, vb = read(a).classes(), read(b).classes()
    assert cls in va and cls in vb, (vals(a), vals(b))
    assert cls not in changed_classes(va, vb)


@pytest.mark.parametrize(("a", "b", "cls"), [
    ("Meetings are in Berlin time", "meetings are in London time", "timezone"),
    ("quota is 50 requests a day", "quota lowered to 40 a day", "num"),
    ("report due May 30", "report due June 15", "date"),
    ("华东区Q3销售额", "华南区Q3销售额", "region"),
    ("use dark mode", "use light mode", "theme"),
])
def test_changed_values(a, b, cls):
    assert cls in changed_classes(read(a).classes(), read(b).classes())


def test_values_do_not_overlap_and_leftovers_still_match():
    # "3万" is the number; the "元" left beside it is still read as the currency.
    assert vals("预算是3万元") == {("num", "30000"), ("currency", "cny")}
    # "may" the modal verb is not a month.
    assert not any(c == "month" for c, _ in vals("The user may prefer tables"))


def test_subject_and_rest():
    r = read("华东区Q3销售额环比下降了12%")
    assert "east_china" in r.classes("subject").get("region", ())
    assert "12" in r.classes("rest").get("percent", ())
    r = read("The deadline for the churn report is May 30.")
    assert r.subject == "the deadline for the churn report"
    assert "m5d30" in r.classes("rest")["date"]
    # The masked text reads the same when only the value changed.
    assert read("The deadline is May 30").masked == read("The deadline is June 15").masked


def test_spoken_thousands_read_as_the_same_value_as_digits():
    assert vals("房租现在三千二") & vals("rent is 3,200 now")
    assert not vals("房租现在三千二") & vals("rent is 3,002 now")
