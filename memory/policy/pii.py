"""PII redaction before write: emails, phone numbers, ID numbers, card numbers and IBANs.

Precision matters as much as recall here: a memory whose report path or order id was turned
into ``[CARD_NUMBER]`` is damaged for good (before this module checked IINs and token
boundaries, 29 of 216 report paths with timestamps were). So every detector is conservative
and validated:

* numbers are matched as whole tokens only — never inside a longer run of digits, a word, a
  file name or path (``sales_20240315143022123.md``), a version (``10.0.19045.3693``) or an
  amount (``1,234,567.89``);
* cards need a known issuer prefix (Visa 4, Mastercard 51-55/2221-2720, Amex 34/37, UnionPay 62,
  JCB 35, Discover 6011/64/65, Diners 36/38/30) and the Luhn check; a dated timestamp is not a card;
* PRC resident ID numbers need a valid birth date and the ISO 7064 check digit; US SSNs need
  a valid area/group/serial; IBANs need a known country length and the mod-97 check;
* phones need a recognisable shape: a mainland mobile (1[3-9] + 9 digits, optional +86), a
  landline with its area code (``010-12345678``, ``(021) 12345678``), a NANP number with
  separators, or any number written with a ``+`` country code.

Measured on ``tests/data/pii`` (``memctl eval pii``); see the README's Guarantees section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

LABELS: tuple[str, ...] = ("EMAIL", "IBAN", "ID_NUMBER", "CARD_NUMBER", "PHONE")

# Number tokens stand alone: not after a letter, digit, '_' or path / version / currency punctuation,
# and not before a letter, digit, '_', a path separator, or punctuation that continues the token
# ("….md", "-rc1", ",567"). CJK characters are word characters to Python's \w but end a token here:
# "手机13812345678的" holds a phone number.
_CJK = "\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef"
_LEFT_CJK = r"(?<![A-Za-z0-9_./\\:@#$¥€£+-])"
_RIGHT_CJK = rf"(?![A-Za-z0-9_/\\@]|[.,:-][A-Za-z0-9_{_CJK}])"

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_IBAN = re.compile(_LEFT_CJK + r"([A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?)" + _RIGHT_CJK)
_CN_ID = re.compile(_LEFT_CJK + r"([1-9]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx])"
                    + _RIGHT_CJK)
_SSN = re.compile(_LEFT_CJK + r"(\d{3}-\d{2}-\d{4})" + _RIGHT_CJK)
_CARD = re.compile(_LEFT_CJK + r"(\d{4}(?:[ -]?\d{4}){2}[ -]?\d{1,7}|\d{4}[ -]\d{6}[ -]\d{5})" + _RIGHT_CJK)
_CN_MOBILE = re.compile(_LEFT_CJK + r"((?:(?:\+|00)86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2})" + _RIGHT_CJK)
_CN_LANDLINE = re.compile(_LEFT_CJK + r"((?:\(0\d{2,3}\) ?|0\d{2,3}-)[1-9]\d{6,7})" + _RIGHT_CJK)
_INTL_PHONE = re.compile(r"(?<![\w+])((?:\+|00)[1-9]\d{0,2}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){1,4})"
                         + _RIGHT_CJK)
_NANP = re.compile(_LEFT_CJK + r"(\(\d{3}\) ?\d{3}-\d{4}|\d{3}-\d{3}-\d{4}|\d{3}\.\d{3}\.\d{4})" + _RIGHT_CJK)

_IBAN_LENGTHS = {"AD": 24, "AE": 23, "AT": 20, "BE": 16, "BG": 22, "CH": 21, "CY": 28, "CZ": 24, "DE": 22,
                 "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GR": 27, "HR": 21, "HU": 28,
                 "IE": 22, "IT": 27, "LT": 20, "LU": 20, "LV": 21, "MT": 31, "NL": 18, "NO": 15, "PL": 28,
                 "PT": 25, "RO": 24, "SA": 24, "SE": 24, "SI": 19, "SK": 24, "TR": 26}
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


_luhn_ok = luhn_ok  # the old private name


def _card_issuer_ok(d: str) -> bool:
    n = len(d)
    if d[0] == "4":
        return n in (13, 16, 19)
    if d[:2] in ("51", "52", "53", "54", "55") or 2221 <= int(d[:4]) <= 2720:
        return n == 16
    if d[:2] in ("34", "37"):
        return n == 15
    if d[:2] == "62":
        return 16 <= n <= 19
    if d[:2] == "35":
        return 16 <= n <= 19 and 3528 <= int(d[:4]) <= 3589
    if d[:4] == "6011" or d[:2] in ("64", "65"):
        return 16 <= n <= 19
    if d[:2] in ("36", "38", "30"):
        return n == 14 or n == 16
    return False


def _looks_dated(d: str) -> bool:
    """A digit run that starts with a plausible date (YYYYMMDD): a timestamp or order id."""
    if len(d) < 8 or d[:2] not in ("19", "20"):
        return False
    try:
        date(int(d[:4]), int(d[4:6]), int(d[6:8]))
    except ValueError:
        return False
    return True


# A number introduced as an order, tracking, batch or reference number is one, even when it
# happens to pass Luhn with a card prefix (1 in 10 random 16-digit numbers starting with 4 do).
_NOT_A_CARD_BEFORE = re.compile(
    r"(?:order|ord|tracking|batch|ref(?:erence)?|invoice|sku|id|no\.?|#|订单号?|单号|编号|批次|流水号?|发票号?)"
    r"\s*[:：=]?\s*$", re.I)


def card_ok(text: str) -> bool:
    d = re.sub(r"\D", "", text)
    return 13 <= len(d) <= 19 and _card_issuer_ok(d) and luhn_ok(d) and not _looks_dated(d)


def cn_id_ok(text: str) -> bool:
    """Birth date valid and the ISO 7064 MOD 11-2 check digit right."""
    try:
        date(int(text[6:10]), int(text[10:12]), int(text[12:14]))
    except ValueError:
        return False
    s = sum(int(a) * w for a, w in zip(text[:17], _CN_ID_WEIGHTS, strict=True))
    return "10X98765432"[s % 11] == text[17].upper()


def ssn_ok(text: str) -> bool:
    area, group, serial = text.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def iban_ok(text: str) -> bool:
    s = text.replace(" ", "")
    if _IBAN_LENGTHS.get(s[:2]) != len(s):
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def _phone_ok(text: str) -> bool:
    d = re.sub(r"\D", "", text)
    return 7 <= len(d) <= 15


@dataclass(frozen=True)
class Span:
    """One detected piece of PII in the original text."""

    start: int
    end: int
    label: str


# Order matters where shapes overlap: an IBAN or ID is checked before its digits could look
# like a card or a phone; a "+86 138…" mobile before the card check (it can pass Luhn).
_DETECTORS: tuple[tuple[str, re.Pattern[str], object], ...] = (
    ("EMAIL", _EMAIL, None),
    ("IBAN", _IBAN, iban_ok),
    ("ID_NUMBER", _CN_ID, cn_id_ok),
    ("ID_NUMBER", _SSN, ssn_ok),
    ("PHONE", _CN_MOBILE, None),
    ("CARD_NUMBER", _CARD, card_ok),
    ("PHONE", _CN_LANDLINE, None),
    ("PHONE", _INTL_PHONE, _phone_ok),
    ("PHONE", _NANP, None),
)


def find_pii(text: str) -> list[Span]:
    """Non-overlapping PII spans of ``text``, in order."""
    taken: list[Span] = []

    def free(a: int, b: int) -> bool:
        return all(b <= s.start or a >= s.end for s in taken)

    for label, pattern, check in _DETECTORS:
        for m in pattern.finditer(text):
            g = 1 if m.groups() else 0
            a, b = m.span(g)
            if not free(a, b):
                continue
            if check is not None and not check(m.group(g)):  # type: ignore[operator]
                continue
            if label == "CARD_NUMBER" and _NOT_A_CARD_BEFORE.search(text[max(0, a - 16):a]):
                continue
            taken.append(Span(a, b, label))
    return sorted(taken, key=lambda s: s.start)


@dataclass(frozen=True)
class Redaction:
    text: str
    counts: dict[str, int]
    spans: tuple[Span, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def redact(text: str) -> Redaction:
    """Replace PII with ``[EMAIL]``, ``[PHONE]``, ``[ID_NUMBER]``, ``[CARD_NUMBER]``, ``[IBAN]``.

    Example:
        >>> redact("call 13812345678, report at /data/sales_20240315143022123.md").text
        'call [PHONE], report at /data/sales_20240315143022123.md'
    """
    spans = find_pii(text)
    counts: dict[str, int] = {}
    out: list[str] = []
    pos = 0
    for s in spans:
        out.append(text[pos:s.start])
        out.append(f"[{s.label}]")
        counts[s.label] = counts.get(s.label, 0) + 1
        pos = s.end
    out.append(text[pos:])
    return Redaction("".join(out), counts, tuple(spans))


__all__ = ["LABELS", "Redaction", "Span", "card_ok", "cn_id_ok", "find_pii", "iban_ok", "luhn_ok", "redact", "ssn_ok"]
