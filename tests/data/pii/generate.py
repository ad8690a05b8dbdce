# ruff: noqa: E501  (templates read better on one line each)
"""Generate the labelled PII set ``pii.jsonl`` (seeded; re-running gives the same file).

Written before the redactor was tuned. One JSON object per line::

    {"id": 17, "lang": "zh", "kind": "phone_cn_mobile", "split": "tune",
     "text": "...", "spans": [{"label": "PHONE", "start": 3, "end": 16}]}

``spans`` are the PII the redactor must replace (labels EMAIL, PHONE, ID_NUMBER, CARD_NUMBER, IBAN);
strings with no span are look-alikes that must come out unchanged (timestamps, dates, file paths with
timestamps, order ids, SQL, version numbers, amounts, tracking numbers, IPs, hashes, Luhn-invalid and
mod-97-invalid numbers, CN ID numbers with a wrong check digit). ``split`` is ``tune`` or ``heldout``
(every string drawn with its own seeded coin), and the held-out half is only looked at as totals.

Run: ``python tests/data/pii/generate.py`` (writes next to this file).
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

R = random.Random(20261126)
OUT = Path(__file__).with_name("pii.jsonl")


# ---------------------------------------------------------------- valid identifiers
def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + "".join(R.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for d in string.digits:
        if luhn_ok(body + d):
            return body + d
    raise AssertionError


def luhn_ok(num: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(num)):
        v = int(ch)
        if i % 2 == 1:
            v = v * 2 - 9 if v > 4 else v * 2
        total += v
    return total % 10 == 0


def luhn_bad(prefix: str, length: int) -> str:
    good = luhn_complete(prefix, length)
    return good[:-1] + str((int(good[-1]) + R.randint(1, 9)) % 10)


W = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
CHECK = "10X98765432"
REGIONS = ["110101", "310104", "440305", "330106", "510107", "320102", "420111", "610113", "120103", "370202"]


def cn_id(valid: bool = True) -> str:
    y = R.randint(1950, 2005)
    m, d = R.randint(1, 12), R.randint(1, 28)
    body = f"{R.choice(REGIONS)}{y}{m:02d}{d:02d}{R.randint(0, 999):03d}"
    c = CHECK[sum(int(a) * w for a, w in zip(body, W, strict=True)) % 11]
    if not valid:
        c = R.choice([x for x in CHECK if x != c])
    return body + c


def iban(country: str, bban: str, valid: bool = True) -> str:
    rearranged = bban + country + "00"
    num = int("".join(str(int(ch, 36)) for ch in rearranged))
    check = 98 - num % 97
    if not valid:
        check = (check + R.randint(1, 50)) % 97 + 2
    return f"{country}{check:02d}{bban}"


def grouped(s: str, n: int = 4, sep: str = " ") -> str:
    return sep.join(s[i:i + n] for i in range(0, len(s), n))


def digits(n: int) -> str:
    return str(R.randint(1, 9)) + "".join(R.choice(string.digits) for _ in range(n - 1))


def bban(country: str) -> str:
    if country == "DE":
        return digits(18)
    if country == "GB":
        return R.choice(["WEST", "NWBK", "BARC", "MIDL"]) + digits(14)
    if country == "FR":
        return digits(10) + "".join(R.choice(string.ascii_uppercase + string.digits) for _ in range(11)) + digits(2)
    if country == "NL":
        return R.choice(["ABNA", "RABO", "INGB"]) + digits(10)
    if country == "ES":
        return digits(20)
    return digits(16)


def cn_mobile() -> str:
    return R.choice(["13", "15", "17", "18", "19"]) + str(R.randint(0, 9)) + digits(8)


# ---------------------------------------------------------------- templates
NAMES_EN = ["Alice Chen", "Bob Smith", "Carol Jones", "David Wang", "Eve Li"]
NAMES_ZH = ["张三", "李四", "王芳", "刘洋", "陈静"]
DOMAINS = ["example.com", "corp.example.cn", "mail.example.org", "163.com", "qq.com", "example.co.uk"]


def email() -> str:
    user = R.choice(["zhang.san", "alice", "bob+reports", "data_team", "li.si2024", "ops-oncall", "wang_fang"])
    return f"{user}@{R.choice(DOMAINS)}"


def phone_variants() -> list[tuple[str, str]]:
    m = cn_mobile()
    us = f"{R.randint(201, 989)}{R.randint(200, 999)}{R.randint(1000, 9999)}"
    return [
        ("phone_cn_mobile", m),
        ("phone_cn_mobile", f"{m[:3]} {m[3:7]} {m[7:]}"),
        ("phone_cn_mobile", f"{m[:3]}-{m[3:7]}-{m[7:]}"),
        ("phone_cn_mobile", f"+86 {m}"),
        ("phone_cn_mobile", f"+86-{m[:3]}-{m[3:7]}-{m[7:]}"),
        ("phone_us", f"({us[:3]}) {us[3:6]}-{us[6:]}"),
        ("phone_us", f"{us[:3]}-{us[3:6]}-{us[6:]}"),
        ("phone_us", f"+1 {us[:3]} {us[3:6]} {us[6:]}"),
        ("phone_intl", f"+44 20 {R.randint(7000, 8999)} {R.randint(1000, 9999)}"),
        ("phone_intl", f"+49 30 {R.randint(100000, 999999)}{R.randint(10, 99)}"),
        ("phone_cn_landline", f"010-{digits(8)}"),
        ("phone_cn_landline", f"0571-{digits(8)}"),
        ("phone_cn_landline", f"(021) {digits(8)}"),
    ]


POS_ZH = [
    "客户{name}的联系方式是 {x}，请在周五前回电。",
    "如有问题请联系 {x}。",
    "把报表发到 {x} 就行。",
    "{name}的{what}：{x}",
    "备注：{x}（{name}）",
]
POS_EN = [
    "Contact {name} at {x} about the refund.",
    "Send the monthly report to {x} please.",
    "{name}'s {what} is {x}.",
    "Customer note: {x} — call back after 5pm.",
    "Please update the record with {x}.",
]
WHAT_ZH = {"EMAIL": "邮箱", "PHONE": "电话", "ID_NUMBER": "身份证号", "CARD_NUMBER": "银行卡号", "IBAN": "收款账户"}
WHAT_EN = {"EMAIL": "email", "PHONE": "phone number", "ID_NUMBER": "ID number", "CARD_NUMBER": "card number",
           "IBAN": "IBAN"}


def positive(label: str, kind: str, value: str, lang: str) -> dict:
    tpl = R.choice(POS_ZH if lang == "zh" else POS_EN)
    name = R.choice(NAMES_ZH if lang == "zh" else NAMES_EN)
    what = (WHAT_ZH if lang == "zh" else WHAT_EN)[label]
    pre, post = tpl.split("{x}")
    pre = pre.format(name=name, what=what)
    post = post.format(name=name, what=what)
    text = pre + value + post
    return {"lang": lang, "kind": kind, "text": text,
            "spans": [{"label": label, "start": len(pre), "end": len(pre) + len(value)}]}


def lookalike(kind: str, text: str, lang: str) -> dict:
    return {"lang": lang, "kind": kind, "text": text, "spans": []}


def ts_parts() -> tuple[int, int, int, int, int, int]:
    return (R.randint(2019, 2026), R.randint(1, 12), R.randint(1, 28), R.randint(0, 23), R.randint(0, 59),
            R.randint(0, 59))


def lookalikes() -> list[dict]:
    out: list[dict] = []
    for _ in range(30):  # report paths with timestamps: the issue's 29 of 216 became [CARD_NUMBER]
        y, mo, d, h, mi, s = ts_parts()
        ms = R.randint(0, 999)
        stamp = R.choice([f"{y}{mo:02d}{d:02d}_{h:02d}{mi:02d}{s:02d}{ms:03d}", f"{y}{mo:02d}{d:02d}{h:02d}{mi:02d}{s:02d}",
                          f"{y}{mo:02d}{d:02d}{h:02d}{mi:02d}{s:02d}{ms:03d}", str(R.randint(1_600_000_000_000, 1_800_000_000_000)),
                          f"{y}-{mo:02d}-{d:02d}T{h:02d}-{mi:02d}-{s:02d}"])
        path = R.choice([f"/data/reports/sales_{stamp}.md", f"/tmp/supervisor-reports/report_{stamp}.xlsx",
                         f"C:\\Reports\\gmv_{stamp}.csv", f"./out/analysis-{stamp}.pdf", f"s3://bucket/exports/{stamp}/part-0001.parquet"])
        lang = R.choice(["zh", "en"])
        text = (f"报告已保存到 {path}" if lang == "zh" else f"Report saved to {path}")
        out.append(lookalike("path_with_timestamp", text, lang))
    for _ in range(16):
        y, mo, d, h, mi, s = ts_parts()
        t = R.choice([f"{y}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}", f"{y}{mo:02d}{d:02d}{h:02d}{mi:02d}{s:02d}",
                      str(R.randint(1_500_000_000, 1_800_000_000)), str(R.randint(1_500_000_000_000, 1_800_000_000_000)),
                      f"{y}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{R.randint(0, 999999):06d}Z"])
        lang = R.choice(["zh", "en"])
        out.append(lookalike("timestamp", f"任务在 {t} 完成" if lang == "zh" else f"The job finished at {t}.", lang))
    for _ in range(8):
        y, mo, d, *_ = ts_parts()
        t = R.choice([f"{y}/{mo:02d}/{d:02d}", f"{y}年{mo}月{d}日", f"{d:02d}.{mo:02d}.{y}", f"{y}{mo:02d}{d:02d}",
                      f"{y}{mo:02d}{d:02d}-{y}{mo:02d}{min(d + 3, 28):02d}"])
        lang = R.choice(["zh", "en"])
        out.append(lookalike("date", f"统计区间：{t}" if lang == "zh" else f"Reporting period: {t}", lang))
    for _ in range(18):
        y, mo, d, h, mi, s = ts_parts()
        oid = R.choice([f"ORD-{y}{mo:02d}{d:02d}-{R.randint(0, 999999):06d}", f"{y}{mo:02d}{d:02d}{h:02d}{mi:02d}{s:02d}{R.randint(0, 9999):04d}",
                        f"SO{digits(16)}", digits(16), digits(19), f"{digits(4)} {digits(4)} {digits(4)} {digits(4)}",
                        f"PO-{digits(6)}-{digits(6)}"])
        lang = R.choice(["zh", "en"])
        out.append(lookalike("order_id", f"订单号 {oid} 已发货" if lang == "zh" else f"Order {oid} has shipped.", lang))
    for _ in range(8):
        out.append(lookalike("tracking_number", R.choice([f"顺丰单号 SF{digits(13)}", f"Tracking: 1Z{digits(16)}",
                                                           f"运单号 {digits(12)}", f"UPS 1Z{digits(6)}{digits(10)}"]), "zh"))
    for _ in range(16):
        sql = R.choice([
            f"SELECT * FROM orders WHERE created_at > {R.randint(1_600_000_000, 1_800_000_000)} AND amount > {digits(7)}",
            f"SELECT region, SUM(goods_amount) FROM orders WHERE order_id BETWEEN {digits(12)} AND {digits(12)} GROUP BY region",
            f"UPDATE shipments SET status = 'done' WHERE batch_id = {digits(16)}",
            f"SELECT substr(order_date, 1, 7) AS month FROM orders WHERE order_date LIKE '{R.randint(2019, 2026)}%' LIMIT {R.randint(10, 5000)}",
            f"DELETE FROM events WHERE ts < {R.randint(1_500_000_000_000, 1_800_000_000_000)}",
            f"SELECT * FROM t WHERE id IN ({digits(8)}, {digits(8)}, {digits(8)})",
        ])
        out.append(lookalike("sql", sql, "en"))
    for _ in range(10):
        v = R.choice([f"v{R.randint(0, 20)}.{R.randint(0, 40)}.{R.randint(0, 200)}", f"10.0.{R.randint(10000, 22999)}.{R.randint(100, 4000)}",
                      f"{R.randint(2019, 2026)}.{R.randint(1, 12)}.{R.randint(1, 28)}.{R.randint(1, 9)}",
                      f"1.{R.randint(0, 99)}.{R.randint(0, 99)}-rc{R.randint(1, 9)}", f"build {digits(10)}"])
        lang = R.choice(["zh", "en"])
        out.append(lookalike("version", f"升级到 {v} 之后报表正常" if lang == "zh" else f"After upgrading to {v} the report works.", lang))
    for _ in range(16):
        a = R.choice([f"¥{R.randint(1, 999)},{R.randint(100, 999)},{R.randint(100, 999)}.{R.randint(10, 99)}",
                      f"{R.randint(1, 99)},{R.randint(100, 999)},{R.randint(100, 999)},{R.randint(100, 999)} 元",
                      f"${R.randint(1, 9)},{R.randint(100, 999)},{R.randint(100, 999)},{R.randint(100, 999)}",
                      f"{digits(10)}.{R.randint(10, 99)} 元", f"{R.randint(1000, 99999)}.{R.randint(10, 99)} 万元",
                      f"{digits(13)} 分"])
        lang = R.choice(["zh", "en"])
        out.append(lookalike("amount", f"本月营收 {a}" if lang == "zh" else f"Revenue this month: {a}", lang))
    for _ in range(6):
        x = R.choice([f"192.168.{R.randint(0, 255)}.{R.randint(0, 255)}", f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(0, 255)}",
                      "".join(R.choice("0123456789abcdef") for _ in range(40)),
                      f"{''.join(R.choice('0123456789abcdef') for _ in range(8))}-{''.join(R.choice('0123456789abcdef') for _ in range(4))}-4{''.join(R.choice('0123456789abcdef') for _ in range(3))}-a{''.join(R.choice('0123456789abcdef') for _ in range(3))}-{''.join(R.choice('0123456789abcdef') for _ in range(12))}"])
        out.append(lookalike("ip_or_hash", f"host {x} returned 500", "en"))
    for _ in range(14):  # numbers shaped like PII that fail their checksum
        kind, x = R.choice([("card_luhn_invalid", grouped(luhn_bad("4", 16))), ("card_luhn_invalid", luhn_bad("62", 16)),
                            ("cn_id_bad_check", cn_id(valid=False)),
                            ("iban_bad_check", grouped(iban("DE", bban("DE"), valid=False)))])
        out.append(lookalike(kind, f"参考编号 {x}" if R.random() < 0.5 else f"Reference {x}", "zh"))
    for _ in range(6):
        out.append(lookalike("code_like", R.choice([
            f"ISBN 978-{R.randint(0, 9)}-{R.randint(100, 999)}-{R.randint(10000, 99999)}-{R.randint(0, 9)}",
            f"SKU AB{digits(2)} {digits(4)} {digits(4)}", f"错误码 E{digits(5)}，重试 {R.randint(2, 9)} 次",
            f"用户 u{digits(6)} 的偏好已更新", f"GMV 同比增长 {R.randint(1, 99)}.{R.randint(0, 9)}%，环比 {R.randint(1, 99)}%",
            f"ticket #{digits(6)} closed at {R.randint(10, 23)}:{R.randint(10, 59)}"]), "en"))
    return out


def positives() -> list[dict]:
    out: list[dict] = []
    for _ in range(20):
        out.append(positive("EMAIL", "email", email(), R.choice(["zh", "en"])))
    for _ in range(5):
        for kind, p in phone_variants():
            if R.random() < 0.75:
                out.append(positive("PHONE", kind, p, "zh" if kind.startswith("phone_cn") else R.choice(["zh", "en"])))
    for _ in range(22):
        i = cn_id()
        out.append(positive("ID_NUMBER", "cn_id", i, R.choice(["zh", "zh", "en"])))
    for _ in range(6):
        ssn = f"{R.randint(100, 665)}-{R.randint(10, 99)}-{R.randint(1000, 9999)}"
        out.append(positive("ID_NUMBER", "us_ssn", ssn, "en"))
    for _ in range(30):
        kind, prefix, n = R.choice([("card_visa", "4", 16), ("card_mc", "5" + str(R.randint(1, 5)), 16),
                                    ("card_amex", R.choice(["34", "37"]), 15), ("card_unionpay", "62", R.choice([16, 19]))])
        c = luhn_complete(prefix, n)
        c = R.choice([c, grouped(c), grouped(c, sep="-")]) if n == 16 else c
        out.append(positive("CARD_NUMBER", kind, c, R.choice(["zh", "en"])))
    for _ in range(22):
        country = R.choice(["DE", "GB", "FR", "NL", "ES"])
        x = iban(country, bban(country))
        out.append(positive("IBAN", "iban", R.choice([x, grouped(x)]), R.choice(["zh", "en"])))
    for _ in range(10):  # two kinds in one string
        a = positive("EMAIL", "email", email(), "en")
        m = cn_mobile()
        text = a["text"] + f" 手机 {m}"
        spans = a["spans"] + [{"label": "PHONE", "start": len(a["text"]) + 4, "end": len(a["text"]) + 4 + len(m)}]
        out.append({"lang": "zh", "kind": "mixed", "text": text, "spans": spans})
    for _ in range(10):  # PII next to a look-alike: the look-alike must survive
        i = cn_id()
        y, mo, d, h, mi, s = ts_parts()
        path = f"/data/reports/sales_{y}{mo:02d}{d:02d}_{h:02d}{mi:02d}{s:02d}{R.randint(0, 999):03d}.md"
        text = f"{R.choice(NAMES_ZH)}（身份证 {i}）的报表在 {path}"
        start = text.index(i)
        out.append({"lang": "zh", "kind": "mixed_with_lookalike", "text": text,
                    "spans": [{"label": "ID_NUMBER", "start": start, "end": start + len(i)}]})
    return out


def main() -> None:
    rows = positives() + lookalikes()
    R.shuffle(rows)
    with OUT.open("w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            for sp in row["spans"]:
                assert row["text"][sp["start"]:sp["end"]].strip() == row["text"][sp["start"]:sp["end"]]
            row = {"id": i, **row, "split": "tune" if R.random() < 0.5 else "heldout"}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} strings -> {OUT}")


if __name__ == "__main__":
    main()
